//! Heads of the pieces request smuggling is made of, for the property tests: framing headers
//! named in `Connection`, lengths and codings together, odd spellings of both, folded lines,
//! bare line feeds, pipelined bytes after the head.
#![allow(dead_code)]

use proptest::prelude::*;

/// One header line of the kinds smuggling is made of.
pub fn line() -> impl Strategy<Value = String> {
    let name = prop_oneof![
        Just("Content-Length"),
        Just("content-length"),
        Just("Transfer-Encoding"),
        Just("Connection"),
        Just("Host"),
        Just("Expect"),
        Just("Upgrade"),
        Just("Keep-Alive"),
        Just("X-Api-Key"),
        Just("TE"),
    ];
    let value = prop_oneof![
        (0u32..100_000).prop_map(|n| n.to_string()),
        Just("chunked".to_string()),
        Just("gzip, chunked".to_string()),
        Just("chunked, gzip".to_string()),
        Just("Content-Length".to_string()),
        Just("close, content-length".to_string()),
        Just("keep-alive, Transfer-Encoding, host".to_string()),
        Just("+5".to_string()),
        Just("5, 5".to_string()),
        Just(" 7 ".to_string()),
        Just("0x10".to_string()),
        Just("100-continue".to_string()),
        Just("websocket".to_string()),
        "[ -~]{0,12}",
    ];
    let sep = prop_oneof![Just(": "), Just(":"), Just(" : "), Just(":\t")];
    let end = prop_oneof![
        Just("\r\n"),
        Just("\r\n"),
        Just("\r\n"),
        Just("\n"),
        Just("\r\n ")
    ];
    (name, sep, value, end).prop_map(|(n, s, v, e)| format!("{n}{s}{v}{e}"))
}

pub fn request_head() -> impl Strategy<Value = Vec<u8>> {
    let start = prop_oneof![
        Just("POST /up/v1/messages HTTP/1.1\r\n"),
        Just("GET /up/x HTTP/1.1\r\n"),
        Just("HEAD /up/x HTTP/1.1\r\n"),
        Just("GET /up/x HTTP/1.0\r\n"),
        Just("POST http://up/x HTTP/1.1\r\n"),
        Just("POST /up/x HTTP/1.1\n"),
    ];
    let after = prop_oneof![
        Just(""),
        Just("hello"),
        Just("GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"),
        Just("0\r\n\r\n"),
    ];
    (start, prop::collection::vec(line(), 0..6), after).prop_map(|(s, lines, a)| {
        let mut head = s.to_string();
        for l in lines {
            head.push_str(&l);
        }
        head.push_str("\r\n");
        head.push_str(a);
        head.into_bytes()
    })
}

pub fn response_head() -> impl Strategy<Value = Vec<u8>> {
    let start = prop_oneof![
        Just("HTTP/1.1 200 OK\r\n"),
        Just("HTTP/1.1 204 No Content\r\n"),
        Just("HTTP/1.1 304 Not Modified\r\n"),
        Just("HTTP/1.1 103 Early Hints\r\n"),
        Just("HTTP/1.0 200 OK\r\n"),
        Just("HTTP/1.1 429 \r\n"),
    ];
    (start, prop::collection::vec(line(), 0..6)).prop_map(|(s, lines)| {
        let mut head = s.to_string();
        for l in lines {
            head.push_str(&l);
        }
        head.push_str("\r\nhello");
        head.into_bytes()
    })
}
