//! The observers through the public API only, the way the relay drives them: route and client
//! classification from the request head, then one observer per exchange, its events stamped
//! and written as trace v2, then read back by the strict reader.

use correlator::observe::{classify, observed_route, Api, ExchangeInfo, HttpObserver};
use correlator::trace::{event_line, read_all, HEADER};
use correlator::{CallKind, Client, Event, EventKind};

const SESSION: &[u8] = b"0b6c3c1e-session";

fn exchange(stream: &str, request: &str, response: &str, out: &mut Vec<EventKind>) {
    let api = observed_route("POST", "/v1/messages?beta=true", false).expect("observed");
    let headers: [(&str, &[u8]); 3] = [
        ("x-claude-code-session-id", SESSION),
        ("x-api-key", b"SECRET-KEY"),
        ("content-type", b"application/json"),
    ];
    let (client, thread) = classify(api, &headers);
    let info = ExchangeInfo {
        stream: stream.to_string(),
        api,
        client,
        thread,
    };
    let mut obs = HttpObserver::new(info, None, out);
    for chunk in request.as_bytes().chunks(17) {
        obs.request_chunk(chunk, out);
    }
    obs.request_end(out);
    obs.response_head(200, Some("text/event-stream"), None, out);
    for chunk in response.as_bytes().chunks(5) {
        obs.response_chunk(chunk, out);
    }
    obs.close(out);
}

fn sse(events: &[(&str, &str)]) -> String {
    events
        .iter()
        .map(|(n, d)| format!("event: {n}\r\ndata: {d}\r\n\r\n"))
        .collect()
}

#[test]
fn an_observed_claude_tool_loop_over_two_exchanges_is_a_valid_trace() {
    let mut out = Vec::new();
    exchange(
        "s1",
        r#"{"messages":[{"role":"user","content":"SECRET prompt"}],"stream":true}"#,
        &sse(&[
            (
                "message_start",
                r#"{"type":"message_start","message":{"id":"msg_1"}}"#,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"mcp__probe__echo","input":{}}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"SECRET\":1}"}}"#,
            ),
            (
                "content_block_stop",
                r#"{"type":"content_block_stop","index":0}"#,
            ),
            (
                "message_delta",
                r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"}}"#,
            ),
            ("message_stop", r#"{"type":"message_stop"}"#),
        ]),
        &mut out,
    );
    exchange(
        "s2",
        r#"{"messages":[{"role":"user","content":"SECRET prompt"},
            {"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"mcp__probe__echo","input":{}}]},
            {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"SECRET result"}]}]}"#,
        &sse(&[
            (
                "message_start",
                r#"{"type":"message_start","message":{"id":"msg_2"}}"#,
            ),
            ("message_stop", r#"{"type":"message_stop"}"#),
        ]),
        &mut out,
    );

    let mut trace = format!("{HEADER}\n");
    for (i, kind) in out.iter().enumerate() {
        trace.push_str(&event_line(&Event {
            t: 10.0 * i as f64,
            kind: kind.clone(),
        }));
        trace.push('\n');
    }
    assert!(!trace.contains("SECRET"), "{trace}");
    let events = read_all(trace.as_bytes(), "relay").expect("a valid trace v2");
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.type_name()).collect();
    assert_eq!(
        kinds,
        [
            "stream_open",
            "request",
            "response_start",
            "tool_call",
            "response_end",
            "stream_close",
            "stream_open",
            "request",
            "response_start",
            "response_end",
            "stream_close",
        ]
    );
    assert!(out.contains(&EventKind::StreamOpen {
        stream: "s1".into(),
        client: Client::Claude,
        transport: correlator::Transport::Http,
        thread: Some("0b6c3c1e-session".into()),
        host: None,
    }));
    assert!(out.contains(&EventKind::ToolCall {
        stream: "s1".into(),
        response: "msg_1".into(),
        call: "toolu_1".into(),
        item: None,
        name: "mcp__probe__echo".into(),
        namespace: None,
        kind: CallKind::ToolUse,
    }));
    assert!(out.contains(&EventKind::Request {
        stream: "s2".into(),
        request: "s2/q1".into(),
        previous_response: None,
        outputs: vec!["toolu_1".into()],
    }));
}

#[test]
fn only_model_stream_routes_are_observed() {
    assert_eq!(
        observed_route("POST", "/v1/messages/count_tokens", false),
        None
    );
    assert_eq!(
        observed_route("GET", "/responses", true),
        Some(Api::Responses)
    );
    assert_eq!(observed_route("POST", "/responses/compact", false), None);
}
