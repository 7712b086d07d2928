//! The trace v2 and records v1 readers and writers; see `windowtap_fuzz::trace_reader`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| windowtap_fuzz::trace_reader(data));
