//! `WsObserver`: RFC 6455 frames, permessage-deflate, Responses events over a WebSocket; see `windowtap_fuzz::ws_connection`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| windowtap_fuzz::ws_connection(data));
