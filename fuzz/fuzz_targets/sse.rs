//! The Anthropic Messages observer behind `HttpObserver` (SSE framing, content decoding, `observe::anthropic`); see `windowtap_fuzz::http_exchange`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| windowtap_fuzz::http_exchange(
    correlator::observe::Api::AnthropicMessages,
    data
));
