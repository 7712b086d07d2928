//! The MCP mount observer (`observe::mcp_http::McpMount`), a POST and a GET of one session; see `windowtap_fuzz::mcp_mount`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| windowtap_fuzz::mcp_mount(data));
