//! Observation and live correlation through the relay binary: observed streams become trace
//! v1 events in the capture (sanitized, replayable), a stalled observer never slows
//! forwarding and marks its stream `observation_lost`, and the live records equal the replay
//! of the capture.

#[path = "support/otlp.rs"]
mod otlp_support;
mod support;

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use support::*;
use tokio_tungstenite::tungstenite::Message;

const CANARY: &str = "CANARY-SECRET-4e1d";

fn anthropic_tool_turn() -> String {
    let input = format!("{{\"text\":\"{CANARY}\"}}");
    sse::body(
        &sse::message("msg_1", "claude")
            .text(CANARY)
            .tool_use("toolu_1", "mcp__probe__echo", Some(&input))
            .end("tool_use", 5),
    )
}

fn anthropic_text_turn() -> String {
    sse::body(
        &sse::message("msg_2", "claude")
            .text("done")
            .end("end_turn", 2),
    )
}

/// An Anthropic upstream: a request without a tool_result gets the tool turn, one with it the
/// text turn; each SSE event is its own frame.
async fn anthropic_upstream(extra_events: usize) -> Upstream {
    Upstream::start(
        None,
        handler(move |req| async move {
            let body = read_body(req.into_body()).await;
            let continues = String::from_utf8_lossy(&body).contains("tool_result");
            let mut text = if continues {
                anthropic_text_turn()
            } else {
                anthropic_tool_turn()
            };
            // Padding pings before the terminal event, for the stalled-observer test.
            if extra_events > 0 {
                let cut = text.rfind("event: message_stop").unwrap();
                let mut pings = String::new();
                for _ in 0..extra_events {
                    pings.push_str(&sse_event("ping", &json!({"type":"ping"})));
                }
                text.insert_str(cut, &pings);
            }
            event_per_frame(text)
        }),
    )
    .await
}

async fn claude_request(relay: &Relay, body: Value) -> Vec<u8> {
    claude_request_with(relay, body, &[]).await
}

/// [`claude_request`] with more headers (appended: a name may repeat).
async fn claude_request_with(relay: &Relay, body: Value, headers: &[(&str, &str)]) -> Vec<u8> {
    let mut req = request("POST", relay.addr, "/anthropic/v1/messages?beta=true")
        .header("content-type", "application/json")
        .header("x-api-key", CANARY)
        .header("x-claude-code-session-id", "sess-1");
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    let req = req.body(full(body.to_string())).unwrap();
    let res = send(relay.addr, req).await.unwrap();
    assert_eq!(res.status(), 200);
    collect(res.into_body()).await.unwrap()
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

fn assert_no_canary(what: &str, text: &str) {
    assert!(
        !text.contains(CANARY),
        "a secret reached the {what}:\n{text}"
    );
    assert!(
        !text.contains("toolu_1") && !text.contains("sess-1"),
        "a raw id reached the {what}"
    );
}

#[tokio::test]
async fn a_claude_tool_loop_is_captured_sanitized_and_replays_to_the_live_records() {
    let up = anthropic_upstream(0).await;
    let dir = tempfile::tempdir().unwrap();
    let (mut relay, records, capture) = relay_with_files(&up, "anthropic", dir.path(), &[]);
    let first = claude_request(
        &relay,
        json!({"model":"claude","stream":true,"messages":[{"role":"user","content":CANARY}]}),
    )
    .await;
    assert_eq!(first, anthropic_tool_turn().as_bytes());
    let second = claude_request(
        &relay,
        json!({"model":"claude","stream":true,"messages":[
            {"role":"user","content":CANARY},
            {"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"mcp__probe__echo","input":{"text":CANARY}}]},
            {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":CANARY}]}
        ]}),
    )
    .await;
    assert_eq!(second, anthropic_text_turn().as_bytes());
    assert!(relay.stop().success(), "{}", relay.log());

    let text = std::fs::read_to_string(&capture).unwrap();
    assert_no_canary("capture", &text);
    assert_no_canary("log", &relay.log());
    let lines = capture_lines(&capture);
    assert_eq!(lines[0]["type"], "trace");
    let events = &lines[1..];
    let t = types(events);
    assert_eq!(
        t.iter().filter(|x| **x == "stream_open").count(),
        2,
        "{t:?}"
    );
    assert_eq!(
        t.iter().filter(|x| **x == "stream_close").count(),
        2,
        "{t:?}"
    );
    assert_eq!(t.iter().filter(|x| **x == "request").count(), 2, "{t:?}");
    let opens: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "stream_open")
        .collect();
    assert_eq!(opens[0]["client"], "claude");
    assert_eq!(opens[0]["transport"], "http");
    assert!(opens[0]["thread"].is_string());
    assert_eq!(
        opens[0]["thread"], opens[1]["thread"],
        "one session, one thread"
    );
    let call = events
        .iter()
        .find(|e| e["type"] == "tool_call")
        .expect("a tool_call");
    assert_eq!(call["name"], "mcp__probe__echo");
    assert_eq!(call["kind"], "tool_use");
    let cont = events
        .iter()
        .filter(|e| e["type"] == "request")
        .nth(1)
        .unwrap();
    assert_eq!(
        cont["outputs"],
        json!([call["call"]]),
        "the continuation names the call"
    );
    let ends: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "response_end")
        .collect();
    assert!(ends.iter().all(|e| e["status"] == "completed"));
    let times: Vec<f64> = events.iter().map(|e| e["t"].as_f64().unwrap()).collect();
    assert!(
        times.windows(2).all(|w| w[0] <= w[1]),
        "the capture is in time order"
    );

    let live = live_records(&records);
    assert_eq!(
        checked_replay(&capture),
        live,
        "live records equal the replay of the capture"
    );
}

/// The Responses WebSocket upstream of relay_ws, answered in the prewarm / turn /
/// continuation shape: the second request's response makes the call `call_1`.
async fn codex_ws_upstream() -> Upstream {
    Upstream::start(
        None,
        handler(|mut req| async move {
            let res = support::ws::switching(&req, None);
            let upgrade = hyper::upgrade::on(&mut req);
            tokio::spawn(async move {
                let Ok(up) = upgrade.await else { return };
                let mut ws = testkit::ws::server(hyper_util::rt::TokioIo::new(up)).await;
                let mut n = 0;
                while let Some(Ok(Message::Text(text))) = ws.next().await {
                    n += 1;
                    let req: Value = serde_json::from_str(&text).unwrap();
                    let id = format!("resp_{n}");
                    let evs = if req["generate"] != json!(false) && n == 2 {
                        let item = sse::function_call("fc_1", "call_1", "mcp__probe", "echo", "{}");
                        sse::function_call_response(&id, &item)
                    } else {
                        vec![
                            sse::response_created(&id),
                            sse::response_completed(&id, json!([])),
                        ]
                    };
                    for ev in evs {
                        let _ = ws.send(Message::text(ev.to_string())).await;
                    }
                }
            });
            res
        }),
    )
    .await
}

/// Codex's three `response.create` frames over one WebSocket through the relay, each
/// answered in full; the connection then drops without a close frame, like Codex's.
async fn codex_ws_loop(relay: &Relay, frames: [Value; 3]) {
    let mut tcp = tokio::net::TcpStream::connect(relay.addr).await.unwrap();
    let (status, _) = support::ws::client_handshake(
        &mut tcp,
        &relay.addr.to_string(),
        "/openai/v1/responses",
        &[
            ("originator", "codex_cli_rs"),
            ("thread-id", "th-9"),
            ("authorization", CANARY),
        ],
    )
    .await;
    assert_eq!(status, 101);
    let mut ws = testkit::ws::client(tcp).await;
    for r in frames {
        ws.send(Message::text(r.to_string())).await.unwrap();
        loop {
            let Some(Ok(Message::Text(t))) = tokio::time::timeout(WAIT, ws.next()).await.unwrap()
            else {
                panic!("stream ended")
            };
            if t.contains("response.completed") {
                break;
            }
        }
    }
    drop(ws); // no close frame, like Codex
              // Let the relay see the end before it is stopped.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
}

/// Codex's frames: the prewarm, the turn, the continuation (`client_metadata` of the turn's
/// as given).
fn codex_frames(turn_metadata: Value) -> [Value; 3] {
    [
        json!({"type":"response.create","model":"gpt-5","generate":false,"input":[]}),
        json!({"type":"response.create","model":"gpt-5","previous_response_id":"resp_1","input":[{"type":"message","role":"user","content":CANARY}],"client_metadata":turn_metadata}),
        json!({"type":"response.create","model":"gpt-5","previous_response_id":"resp_2","input":[{"type":"function_call_output","call_id":"call_1","output":CANARY}]}),
    ]
}

#[tokio::test]
async fn a_codex_websocket_loop_is_observed_as_one_stream() {
    let up = codex_ws_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let (mut relay, records, capture) = relay_with_files(&up, "openai", dir.path(), &[]);
    codex_ws_loop(&relay, codex_frames(json!({"thread_id":"th-9"}))).await;
    assert!(relay.stop().success());
    let text = std::fs::read_to_string(&capture).unwrap();
    assert!(!text.contains(CANARY));
    let lines = capture_lines(&capture);
    let events = &lines[1..];
    let t = types(events);
    assert_eq!(
        t.iter().filter(|x| **x == "stream_open").count(),
        1,
        "{t:?}"
    );
    assert_eq!(events[0]["transport"], "websocket");
    assert_eq!(events[0]["client"], "codex");
    assert_eq!(t.iter().filter(|x| **x == "request").count(), 3, "{t:?}");
    assert_eq!(
        t.iter().filter(|x| **x == "response_end").count(),
        3,
        "{t:?}"
    );
    let call = events
        .iter()
        .find(|e| e["type"] == "tool_call")
        .expect("a tool_call");
    assert_eq!(
        (call["namespace"].as_str(), call["name"].as_str()),
        (Some("mcp__probe"), Some("echo"))
    );
    assert_eq!(t.last(), Some(&"stream_close"));
    assert_eq!(checked_replay(&capture), live_records(&records));
}

/// Codex over a WebSocket: no per-request headers, so its trace context rides in each
/// `response.create` (`client_metadata.ws_request_header_traceparent`). With
/// `--join-host-trace` the turn's chat span goes under that span; the prewarm and the
/// continuation, which carry none, stay in windowtap's trace; nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_websocket_request_joins_the_trace_its_client_metadata_names() {
    let up = codex_ws_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let (collector, spans_got) = otlp_support::receiver(false).await;
    let endpoint = format!("http://{collector}");
    let (mut relay, records, capture) = relay_with_files(
        &up,
        "openai",
        dir.path(),
        &["--otlp-endpoint", &endpoint, "--join-host-trace"],
    );
    let traceparent = format!("00-{HOST_TRACE}-{HOST_SPAN}-01");
    codex_ws_loop(
        &relay,
        codex_frames(json!({"thread_id":"th-9","ws_request_header_traceparent":traceparent})),
    )
    .await;
    assert!(relay.stop().success(), "{}", relay.log());
    let spans = otlp_support::spans(&spans_got);
    let chats: Vec<_> = spans
        .iter()
        .filter(|s| s.name.starts_with("chat"))
        .collect();
    assert_eq!(
        chats.len(),
        3,
        "{:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let joined: Vec<_> = chats
        .iter()
        .filter(|s| hex(&s.trace_id) == HOST_TRACE)
        .collect();
    assert_eq!(joined.len(), 1, "only the turn's request carried one");
    assert_eq!(hex(&joined[0].parent_span_id), HOST_SPAN);
    // It is the response that made the call (resp_2): its request is the second.
    assert!(
        matches!(
            otlp_support::attr(joined[0], "windowtap.tool_calls"),
            Some(opentelemetry_proto::tonic::common::v1::any_value::Value::IntValue(1))
        ),
        "{:?}",
        joined[0].attributes
    );
    let written = format!(
        "{}{}{}",
        std::fs::read_to_string(&records).unwrap(),
        std::fs::read_to_string(&capture).unwrap(),
        relay.log()
    );
    for id in [HOST_TRACE, HOST_SPAN] {
        assert!(!written.contains(id), "{id} was written");
    }
}

#[tokio::test]
async fn a_stalled_observer_never_slows_forwarding_and_marks_its_stream_lost() {
    let up = anthropic_upstream(2000).await;
    let dir = tempfile::tempdir().unwrap();
    let (mut relay, _, capture) = relay_with_files(
        &up,
        "anthropic",
        dir.path(),
        &["--observer-queue", "4", "--test-stall-observers"],
    );
    let got = claude_request(
        &relay,
        json!({"model":"claude","stream":true,"messages":[]}),
    )
    .await;
    let want = {
        let mut text = anthropic_tool_turn();
        let cut = text.rfind("event: message_stop").unwrap();
        text.insert_str(
            cut,
            &sse_event("ping", &json!({"type":"ping"})).repeat(2000),
        );
        text
    };
    assert_eq!(
        sha(&got),
        sha(want.as_bytes()),
        "every byte arrived although nobody observed"
    );
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(relay.stop().success());
    let lines = capture_lines(&capture);
    let lost: Vec<&Value> = lines
        .iter()
        .filter(|e| e["type"] == "observation_lost")
        .collect();
    assert_eq!(lost.len(), 1, "{lines:?}");
    assert_eq!(lost[0]["reason"], "overflow");
    assert_eq!(types(&lines[1..]).last(), Some(&"stream_close"));
    checked_replay(&capture);
}

fn responses_sse(id: &str, call: Option<&str>) -> String {
    // Numbered as the HTTP stream numbers them; the completion is 3 with or without a call.
    let events = match call {
        Some(call) => {
            let args = format!("{{\"text\":\"{CANARY}\"}}");
            sse::function_call_response(
                id,
                &sse::function_call("fc_7", call, "mcp__probe", "echo", &args),
            )
        }
        None => vec![
            sse::response_created(id),
            sse::response_completed(id, json!([])),
        ],
    };
    let last = events.len() - 1;
    let numbered = events.into_iter().enumerate().map(|(i, ev)| {
        let n = if i == last { 3 } else { i as u64 };
        sse::numbered(ev, n)
    });
    sse::body(&numbered.collect::<Vec<_>>())
}

/// Codex over HTTP: zstd request bodies (as Codex sends them with a ChatGPT login), the whole
/// input re-sent, the continuation carrying the function_call_output.
#[tokio::test]
async fn a_codex_http_loop_with_zstd_bodies_is_observed_and_forwarded_untouched() {
    let seen = Arc::new(Mutex::new(Vec::<[u8; 32]>::new()));
    let keep = seen.clone();
    let up = Upstream::start(
        None,
        handler(move |req| {
            let keep = keep.clone();
            async move {
                assert_eq!(req.headers()["content-encoding"], "zstd");
                let body = read_body(req.into_body()).await;
                keep.lock().unwrap().push(sha(&body));
                let plain = zstd::decode_all(&body[..]).unwrap();
                let text = if String::from_utf8_lossy(&plain).contains("function_call_output") {
                    responses_sse("resp_b", None)
                } else {
                    responses_sse("resp_a", Some("call_7"))
                };
                sse_response(full(text))
            }
        }),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (mut relay, records, capture) = relay_with_files(&up, "chatgpt", dir.path(), &[]);
    let turn = json!({"model":"gpt-5","stream":true,"store":false,"input":[{"type":"message","role":"user","content":CANARY}]});
    let cont = json!({"model":"gpt-5","stream":true,"store":false,"input":[
        {"type":"message","role":"user","content":CANARY},
        {"type":"function_call","call_id":"call_7","namespace":"mcp__probe","name":"echo","arguments":"{}"},
        {"type":"function_call_output","call_id":"call_7","output":CANARY}]});
    let mut sent = Vec::new();
    for (body, want) in [
        (turn, responses_sse("resp_a", Some("call_7"))),
        (cont, responses_sse("resp_b", None)),
    ] {
        let packed = zstd::encode_all(body.to_string().as_bytes(), 3).unwrap();
        sent.push(sha(&packed));
        let req = request("POST", relay.addr, "/chatgpt/responses")
            .header("content-type", "application/json")
            .header("content-encoding", "zstd")
            .header("originator", "codex_cli_rs")
            .header("thread-id", "th-http")
            .header("authorization", format!("Bearer {CANARY}"))
            .body(full(packed))
            .unwrap();
        let res = send(relay.addr, req).await.unwrap();
        assert_eq!(collect(res.into_body()).await.unwrap(), want.as_bytes());
    }
    assert_eq!(
        *seen.lock().unwrap(),
        sent,
        "the compressed bodies reached the upstream as sent"
    );
    assert!(relay.stop().success());
    let text = std::fs::read_to_string(&capture).unwrap();
    assert_no_canary("capture", &text);
    let lines = capture_lines(&capture);
    let events = &lines[1..];
    let call = events
        .iter()
        .find(|e| e["type"] == "tool_call")
        .expect("a tool_call");
    assert_eq!(call["kind"], "function");
    let cont = events
        .iter()
        .filter(|e| e["type"] == "request")
        .nth(1)
        .expect("two requests");
    assert_eq!(cont["outputs"], json!([call["call"]]));
    assert_eq!(checked_replay(&capture), live_records(&records));
}

/// A Claude tool turn through the relay, the MCP call reported on the ingest socket the way
/// `windowtap wrap` reports it, then the continuation. Returns the ingest connection (a
/// wrapper's connection that drops ends its running calls).
async fn claude_tool_loop_with_mcp_call(relay: &Relay) -> tokio::net::UnixStream {
    claude_tool_loop_with_headers(relay, &[], &[]).await
}

/// [`claude_tool_loop_with_mcp_call`] with extra headers on the first request and on the
/// continuation.
async fn claude_tool_loop_with_headers(
    relay: &Relay,
    first: &[(&str, &str)],
    continuation: &[(&str, &str)],
) -> tokio::net::UnixStream {
    use tokio::io::AsyncWriteExt;
    let history = json!([{"role":"user","content":CANARY}]);
    claude_request_with(
        relay,
        json!({"model":"claude","stream":true,"messages":history}),
        first,
    )
    .await;
    let mut sock = tokio::net::UnixStream::connect(&relay.ingest)
        .await
        .unwrap();
    let start_ns = testkit::proc::mono_ns();
    let hint = r#""tool_use_id":"toolu_1","item_id":null,"call_id":null,"thread":null"#;
    let line = format!(
        "{{\"v\":1,\"type\":\"start\",\"id\":\"w1-x-1\",\"alias\":\"probe\",\"tool\":\"echo\",\"start_ns\":{start_ns},{hint}}}\n"
    );
    sock.write_all(line.as_bytes()).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let line = format!(
        "{{\"v\":1,\"type\":\"end\",\"id\":\"w1-x-1\",\"alias\":\"probe\",\"tool\":\"echo\",\"start_ns\":{start_ns},\"end_ns\":{},\"outcome\":\"result\",{hint}}}\n",
        testkit::proc::mono_ns()
    );
    sock.write_all(line.as_bytes()).await.unwrap();
    sock.flush().await.unwrap();
    // The report reaches the correlator before the host sends its continuation.
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    claude_request_with(
        relay,
        json!({"model":"claude","stream":true,"messages":[
            {"role":"user","content":CANARY},
            {"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"mcp__probe__echo","input":{}}]},
            {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":CANARY}]}
        ]}),
        continuation,
    )
    .await;
    sock
}

/// The whole loop: a Claude tool turn through the relay, the MCP call reported on the ingest
/// socket the way `windowtap wrap` reports it, the continuation. The call is attributed live,
/// and replaying the capture gives the same record.
// Multi-threaded: the OTLP receiver must keep answering while this thread waits for the
// relay to stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_call_reported_on_the_ingest_socket_is_attributed_live_as_in_replay() {
    let up = anthropic_upstream(0).await;
    let dir = tempfile::tempdir().unwrap();
    let (collector, spans_got) = otlp_support::receiver(false).await;
    let endpoint = format!("http://{collector}");
    let (mut relay, records, capture) = relay_with_files(
        &up,
        "anthropic",
        dir.path(),
        &["--close-wait", "200", "--otlp-endpoint", &endpoint],
    );
    let sock = claude_tool_loop_with_mcp_call(&relay).await;
    drop(sock);
    assert!(relay.stop().success(), "{}", relay.log());

    let live = live_records(&records);
    assert_no_canary("records", &live);
    let recs: Vec<Value> = live
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(recs.len(), 1, "{live}");
    assert_eq!(recs[0]["decision"], "attributed", "{live}");
    assert_eq!(recs[0]["alias"], "probe");
    let evidence: Vec<&str> = recs[0]["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert!(
        evidence.contains(&"tool_use_id") && evidence.contains(&"route"),
        "{evidence:?}"
    );
    assert_eq!(
        checked_replay(&capture),
        live,
        "live records equal the replay of the capture"
    );

    // The run was also exported as a trace tree, flushed when the relay stopped: the turn,
    // its two responses, and the call under the response that asked for it.
    let spans = otlp_support::spans(&spans_got);
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(spans.len(), 4, "{names:?} {}", relay.log());
    let call = spans
        .iter()
        .find(|s| s.name == "execute_tool echo")
        .unwrap_or_else(|| panic!("{names:?}"));
    assert_eq!(
        otlp_support::string(call, "windowtap.decision"),
        Some("attributed")
    );
    assert_eq!(
        otlp_support::string(call, "gen_ai.tool.call.id"),
        recs[0]["interval"].as_str()
    );
    let parent = spans
        .iter()
        .find(|s| s.span_id == call.parent_span_id)
        .expect("the call's parent was exported");
    assert_eq!(parent.trace_id, call.trace_id);
    assert_eq!(
        otlp_support::string(parent, "gen_ai.operation.name"),
        Some("chat")
    );
    assert_eq!(
        otlp_support::string(parent, "gen_ai.response.id"),
        recs[0]["window"]["response"].as_str()
    );
    let root = spans
        .iter()
        .find(|s| s.span_id == parent.parent_span_id)
        .expect("the response's turn was exported");
    assert!(root.parent_span_id.is_empty());
    assert_eq!(
        otlp_support::string(root, "gen_ai.operation.name"),
        Some("invoke_agent")
    );
    assert!(spans.iter().all(|s| s.trace_id == root.trace_id));
    assert!(
        relay.log().contains("otlp: 4 spans exported"),
        "{}",
        relay.log()
    );
}

/// The host's trace context (Claude Code's `traceparent` on its model requests).
const HOST_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const HOST_SPAN: &str = "00f067aa0ba902b7";

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The Claude tool loop with the given trace context headers on the first request and on the
/// continuation, through a relay with or without `--join-host-trace`. Returns the spans, and
/// every output the relay wrote (records, capture, log).
async fn tool_loop_with_host_trace(
    join: bool,
    first: &[(&str, &str)],
    continuation: &[(&str, &str)],
) -> (Vec<opentelemetry_proto::tonic::trace::v1::Span>, String) {
    let up = anthropic_upstream(0).await;
    let dir = tempfile::tempdir().unwrap();
    let (collector, spans_got) = otlp_support::receiver(false).await;
    let endpoint = format!("http://{collector}");
    let mut args = vec!["--close-wait", "200", "--otlp-endpoint", &endpoint];
    if join {
        args.push("--join-host-trace");
    }
    let (mut relay, records, capture) = relay_with_files(&up, "anthropic", dir.path(), &args);
    let sock = claude_tool_loop_with_headers(&relay, first, continuation).await;
    drop(sock);
    assert!(relay.stop().success(), "{}", relay.log());
    let live = live_records(&records);
    // The context changes the export only: the capture still replays to the live records.
    assert_eq!(checked_replay(&capture), live);
    let written = format!(
        "{live}{}{}",
        std::fs::read_to_string(&capture).unwrap(),
        relay.log()
    );
    (otlp_support::spans(&spans_got), written)
}

/// The host's `traceparent` on the first request and a repeated one (two values: ambiguous)
/// on the continuation.
async fn tool_loop_with_a_joined_first_request(
    join: bool,
) -> (Vec<opentelemetry_proto::tonic::trace::v1::Span>, String) {
    let traceparent = format!("00-{HOST_TRACE}-{HOST_SPAN}-01");
    tool_loop_with_host_trace(
        join,
        &[("traceparent", &traceparent)],
        &[
            ("traceparent", &traceparent),
            (
                "traceparent",
                "00-11111111111111111111111111111111-2222222222222222-01",
            ),
        ],
    )
    .await
}

/// `--join-host-trace`: the request's chat span is the child of the host's span its
/// `traceparent` names, the MCP call it asked for is under it in the host's trace, and the
/// context is written nowhere else. The continuation's repeated header is ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joined_request_puts_its_spans_in_the_hosts_trace_and_nothing_else_changes() {
    let (spans, written) = tool_loop_with_a_joined_first_request(true).await;
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(spans.len(), 4, "{names:?}");
    let call = spans
        .iter()
        .find(|s| s.name == "execute_tool echo")
        .unwrap_or_else(|| panic!("{names:?}"));
    let chat = spans
        .iter()
        .find(|s| s.span_id == call.parent_span_id)
        .expect("the call's chat span was exported");
    assert_eq!(hex(&chat.trace_id), HOST_TRACE);
    assert_eq!(hex(&chat.parent_span_id), HOST_SPAN);
    assert_eq!(call.trace_id, chat.trace_id);
    // The continuation (repeated traceparent) stays under the turn, in windowtap's trace.
    let turn = spans
        .iter()
        .find(|s| s.name.starts_with("invoke_agent"))
        .unwrap();
    assert!(turn.parent_span_id.is_empty());
    assert_ne!(hex(&turn.trace_id), HOST_TRACE);
    let cont = spans
        .iter()
        .find(|s| s.name.starts_with("chat") && s.span_id != chat.span_id)
        .unwrap();
    assert_eq!(cont.parent_span_id, turn.span_id);
    assert_eq!(cont.trace_id, turn.trace_id);
    // The call's causal links name both responses, each in its own trace.
    for to in [chat, cont] {
        assert!(
            call.links
                .iter()
                .any(|l| l.span_id == to.span_id && l.trace_id == to.trace_id),
            "{:?}",
            call.links
        );
    }
    // Records, capture and log never carry the context.
    for id in [HOST_TRACE, HOST_SPAN, "2222222222222222"] {
        assert!(!written.contains(id), "{id} was written");
    }
}

/// Without the flag the same requests give windowtap's own tree, one trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_traceparent_is_not_used_unless_asked_for() {
    let (spans, written) = tool_loop_with_a_joined_first_request(false).await;
    assert_eq!(spans.len(), 4);
    assert!(spans.iter().all(|s| s.trace_id == spans[0].trace_id));
    assert!(spans
        .iter()
        .all(|s| hex(&s.trace_id) != HOST_TRACE && hex(&s.parent_span_id) != HOST_SPAN));
    assert!(!written.contains(HOST_TRACE));
}

/// With `--join-host-trace`, a malformed `traceparent` (uppercase hex) on the first request
/// and an oversized one (a later version's 300 bytes) on the continuation are ignored: the
/// exchange goes through, the spans stay in windowtap's own tree, and no part of either value
/// and no word about them is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_or_oversized_traceparent_is_ignored_and_written_nowhere() {
    let malformed = format!("00-{}-{HOST_SPAN}-01", HOST_TRACE.to_uppercase());
    let oversized = format!("01-{HOST_TRACE}-{HOST_SPAN}-01-{}", "7".repeat(245));
    assert_eq!(oversized.len(), 301);
    let (spans, written) = tool_loop_with_host_trace(
        true,
        &[("traceparent", &malformed)],
        &[("traceparent", &oversized)],
    )
    .await;
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(spans.len(), 4, "{names:?}");
    assert!(spans.iter().all(|s| s.trace_id == spans[0].trace_id));
    let turn = spans
        .iter()
        .find(|s| s.name.starts_with("invoke_agent"))
        .unwrap();
    for chat in spans.iter().filter(|s| s.name.starts_with("chat")) {
        assert_eq!(chat.parent_span_id, turn.span_id, "{names:?}");
    }
    for id in [
        HOST_TRACE,
        &HOST_TRACE.to_uppercase(),
        HOST_SPAN,
        "7777777777",
    ] {
        assert!(!written.contains(id), "{id} was written");
    }
    assert!(
        !written.to_ascii_lowercase().contains("traceparent"),
        "{written}"
    );
}

/// A client that stops reading an observed SSE response holds up nobody: with its write to
/// that client waiting, another session's MCP call is still decided (its copy of the stalled
/// stream was handed over when the write began to wait, so the watermark is not held).
/// Before, no call of any session was decided until the stalled client read again or left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_holds_up_no_other_decision() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use tokio::io::AsyncWriteExt;
    let sent = Arc::new(AtomicU64::new(0));
    let counted = sent.clone();
    let up = Upstream::start(
        None,
        handler(move |req| {
            let sent = counted.clone();
            async move {
                let stall = req.headers().contains_key("x-stall");
                let body = read_body(req.into_body()).await;
                let (tx, out) = channel_body();
                if stall {
                    // 256 MiB of pings, more than every buffer between here and a client that
                    // reads nothing can hold: the relay's write to it must wait.
                    let ping =
                        sse_event("ping", &json!({"type":"ping","pad":"x".repeat(64 * 1024)}));
                    tokio::spawn(async move {
                        for _ in 0..4096 {
                            if tx.send(Ok(Bytes::from(ping.clone()))).await.is_err() {
                                return;
                            }
                            sent.fetch_add(ping.len() as u64, Ordering::SeqCst);
                        }
                    });
                } else {
                    let continues = String::from_utf8_lossy(&body).contains("tool_result");
                    let text = if continues {
                        anthropic_text_turn()
                    } else {
                        anthropic_tool_turn()
                    };
                    tokio::spawn(async move {
                        let _ = tx.send(Ok(Bytes::from(text))).await;
                    });
                }
                sse_response(out)
            }
        }),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (mut relay, records, _capture) =
        relay_with_files(&up, "anthropic", dir.path(), &["--close-wait", "200"]);

    // The stalled session: a request, then nothing read, ever (a small receive buffer, so
    // the relay's own send buffer is what fills).
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stalled = socket.connect(relay.addr).await.unwrap();
    let body = json!({"model":"claude","stream":true,"messages":[]}).to_string();
    stalled
        .write_all(
            format!(
                "POST /anthropic/v1/messages HTTP/1.1\r\nHost: relay\r\ncontent-type: application/json\r\n\
                 x-stall: 1\r\nx-claude-code-session-id: stalled\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    // Until the pipe is full: the upstream's count stops growing (the relay stopped reading
    // it because its write to the stalled client waits).
    let mut last = 0;
    let mut still = 0;
    let deadline = std::time::Instant::now() + WAIT;
    while still < 5 {
        assert!(
            std::time::Instant::now() < deadline,
            "the stream never filled the pipe"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let now = sent.load(Ordering::SeqCst);
        still = if now == last && now > 0 { still + 1 } else { 0 };
        last = now;
    }

    // Another session's whole tool loop, its MCP call reported on the ingest socket.
    let sock = claude_tool_loop_with_mcp_call(&relay).await;

    // Decided while the stalled client still reads nothing.
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let live = std::fs::read_to_string(&records).unwrap_or_default();
        if live.contains("\"attributed\"") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no decision while a client stalls: {live:?} {}",
            relay.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    drop(stalled);
    drop(sock);
    assert!(relay.stop().success(), "{}", relay.log());
}

/// The pieces of a rotated file `base` in `dir` (`capture.00000000.jsonl`, …), in order.
fn pieces_of(dir: &std::path::Path, base: &str) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy().into_owned();
            // Not the run's key, kept beside the records (`records.jsonl.key`).
            n.starts_with(&format!("{base}."))
                && n != format!("{base}.jsonl")
                && !n.ends_with(".key")
        })
        .collect();
    v.sort();
    v
}

fn windowtap(args: &[&std::ffi::OsStr]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_windowtap"))
        .args(args)
        .output()
        .unwrap()
}

/// `loops` Claude tool loops through a relay whose capture and records rotate at `size`
/// bytes, `keep` pieces kept, then stopped; returns the records' and capture's base paths.
async fn rotating_run(
    dir: &std::path::Path,
    size: usize,
    keep: usize,
    loops: usize,
) -> (std::path::PathBuf, std::path::PathBuf) {
    let up = anthropic_upstream(0).await;
    let (size, keep) = (size.to_string(), keep.to_string());
    let (mut relay, records, capture) = relay_with_files(
        &up,
        "anthropic",
        dir,
        &[
            "--close-wait",
            "200",
            "--rotate-size",
            &size,
            "--rotate-keep",
            &keep,
        ],
    );
    for _ in 0..loops {
        drop(claude_tool_loop_with_mcp_call(&relay).await);
    }
    assert!(relay.stop().success(), "{}", relay.log());
    (records, capture)
}

/// A relay whose capture and records rotate every few lines, so that streams, windows and
/// MCP calls are open across cuts: no piece passes the size unless one line alone does, each
/// capture piece checks on its own, and `windowtap replay` of the pieces in order gives the
/// live records (the records pieces, in order), where replaying each piece alone does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotating_capture_replays_piece_by_piece_to_the_live_records() {
    const SIZE: usize = 600;
    let dir = tempfile::tempdir().unwrap();
    let (records, capture) = rotating_run(dir.path(), SIZE, 100_000, 3).await;
    assert!(
        !capture.exists() && !records.exists(),
        "only pieces are written"
    );

    let caps = pieces_of(dir.path(), "capture");
    let recs = pieces_of(dir.path(), "records");
    assert!(caps.len() >= 6, "{caps:?}");
    assert!(recs.len() >= 2, "{recs:?}");
    let mut carried = 0;
    for (n, p) in caps.iter().enumerate() {
        let text = std::fs::read_to_string(p).unwrap();
        assert_no_canary("capture", &text);
        let lines = text.lines().count();
        assert!(
            text.len() <= SIZE || lines == 2,
            "{p:?}: {} bytes in {lines} lines",
            text.len()
        );
        let header: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(header["piece"], n as u64, "{p:?}");
        assert_eq!(header["capture"], capture_word(&caps[0]));
        let open = &header["open"];
        if open["streams"].as_array().is_some_and(|a| !a.is_empty())
            || open["running"].as_array().is_some_and(|a| !a.is_empty())
        {
            carried += 1;
        }
        let check = windowtap(&["check".as_ref(), p.as_os_str()]);
        assert!(
            check.status.success(),
            "{p:?} does not check on its own: {}",
            String::from_utf8_lossy(&check.stderr)
        );
    }
    assert!(carried > 0, "no cut fell while something was open");
    let mut live = String::new();
    for (k, p) in recs.iter().enumerate() {
        let text = std::fs::read_to_string(p).unwrap();
        assert!(text.len() <= SIZE || text.lines().count() == 1, "{p:?}");
        // The run header opens the first piece only.
        live.push_str(&if k == 0 { live_records(p) } else { text });
    }
    assert_eq!(live.lines().count(), 3, "{live}");

    let mut args: Vec<&std::ffi::OsStr> = vec!["replay".as_ref()];
    args.extend(caps.iter().map(|p| p.as_os_str()));
    let out = windowtap(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8(out.stdout).unwrap(), live);

    // What the cut carries matters: each piece alone does not decide as the run did.
    let alone: String = caps
        .iter()
        .map(|p| {
            let out = windowtap(&["replay".as_ref(), p.as_os_str()]);
            String::from_utf8(out.stdout).unwrap()
        })
        .collect();
    assert_ne!(alone, live);

    // Out of order, or with a piece missing, the pieces are refused.
    let mut args: Vec<&std::ffi::OsStr> = vec!["replay".as_ref()];
    args.extend(
        caps.iter()
            .filter(|p| *p != &caps[1])
            .map(|p| p.as_os_str()),
    );
    let out = windowtap(&args);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("does not follow piece 0"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn capture_word(piece: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(piece).unwrap();
    let header: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    header["capture"].clone()
}

/// With `--rotate-keep 3`, only the three newest pieces of each file are left however many
/// were cut, none larger than the size unless one line alone is; the survivors still replay
/// (from a later piece, with a warning that calls whose windows opened before it may be
/// decided otherwise than live).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_keep_count_deletes_the_oldest_pieces_and_the_rest_still_replay() {
    const SIZE: usize = 600;
    let dir = tempfile::tempdir().unwrap();
    rotating_run(dir.path(), SIZE, 3, 2).await;

    let caps = pieces_of(dir.path(), "capture");
    assert_eq!(caps.len(), 3, "{caps:?}");
    let numbers: Vec<u64> = caps
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).unwrap();
            assert!(text.len() <= SIZE || text.lines().count() == 2, "{p:?}");
            let header: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
            header["piece"].as_u64().unwrap()
        })
        .collect();
    // Two loops are 28 events, at most four to a piece of 600 bytes with its header.
    assert!(
        numbers[0] >= 3,
        "older pieces were cut and deleted: {numbers:?}"
    );
    assert_eq!(numbers, [numbers[0], numbers[0] + 1, numbers[0] + 2]);
    assert_eq!(
        caps[0].file_name().unwrap().to_string_lossy(),
        format!("capture.{:08}.jsonl", numbers[0]),
        "the oldest were deleted, the newest kept"
    );
    assert!(pieces_of(dir.path(), "records").len() <= 3);

    let mut args: Vec<&std::ffi::OsStr> = vec!["replay".as_ref()];
    args.extend(caps.iter().map(|p| p.as_os_str()));
    let out = windowtap(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("replay starts at piece {}", numbers[0])),
        "{stderr}"
    );
}
