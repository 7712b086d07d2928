//! The wrapper's JSON-RPC observer (`LineScanner`, `Observer`), both directions; see `windowtap_fuzz::jsonrpc_lines`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| windowtap_fuzz::jsonrpc_lines(data));
