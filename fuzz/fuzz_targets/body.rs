//! The request-body scanners `observe::body::{messages_request, responses_request}`; see `windowtap_fuzz::body_scanners`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| windowtap_fuzz::body_scanners(data));
