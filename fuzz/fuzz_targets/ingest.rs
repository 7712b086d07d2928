//! The ingest line parser `correlator::ingest::Report::parse`; see `windowtap_fuzz::ingest_line`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| windowtap_fuzz::ingest_line(data));
