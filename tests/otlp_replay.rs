//! `windowtap replay --otlp-endpoint` end to end: the binary, a trace file, and an OTLP/HTTP
//! receiver on loopback that decodes the real `ExportTraceServiceRequest`.

#[path = "support/otlp.rs"]
mod otlp_support;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Output;

use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::Span;
use otlp_support::{attr, receiver, spans, string};

/// Runs the binary with a clean OTel environment plus `env`.
async fn windowtap(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_windowtap"));
    cmd.args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("OTEL_") {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env.iter().copied());
    cmd.output().await.expect("run windowtap")
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// Codex over a WebSocket: call item complete at 6905, MCP call 7187–7264 (attributed to r1),
/// and a second MCP call at 20000–20100 that ran in no window.
fn two_calls(header: &str) -> String {
    [
        header,
        r#"{"type":"stream_open","t":0,"stream":"s1","client":"codex","transport":"websocket","thread":"th1"}"#,
        r#"{"type":"request","t":6000,"stream":"s1","request":"q1","previous_response":null,"outputs":[]}"#,
        r#"{"type":"response_start","t":6100,"stream":"s1","response":"r1","request":"q1"}"#,
        r#"{"type":"tool_call","t":6905,"stream":"s1","response":"r1","call":"c1","item":"fc1","name":"echo","namespace":"mcp__probe","kind":"function"}"#,
        r#"{"type":"response_end","t":6957,"stream":"s1","response":"r1","status":"completed"}"#,
        r#"{"type":"mcp_interval","t":7265,"interval":"i1","alias":"probe","tool":"echo","start":7187,"end":7264,"outcome":"result","tool_use_id":null,"item_id":"fc1","call_id":"c1","thread":"th1"}"#,
        r#"{"type":"request","t":7278,"stream":"s1","request":"q2","previous_response":"r1","outputs":[]}"#,
        r#"{"type":"mcp_interval","t":20101,"interval":"i2","alias":"probe","tool":"slow","start":20000,"end":20100,"outcome":"error","tool_use_id":null,"item_id":null,"call_id":null,"thread":null}"#,
        "",
    ]
    .join("\n")
}

/// `n` MCP calls that ran in no window: n records, n spans.
fn many_calls(n: usize) -> String {
    let mut lines = vec![r#"{"type":"trace","version":1}"#.to_string()];
    for i in 0..n {
        let t = 1000 * (i + 1);
        lines.push(format!(
            r#"{{"type":"mcp_interval","t":{},"interval":"i{i}","alias":"probe","tool":"echo","start":{t},"end":{},"outcome":"result","tool_use_id":null,"item_id":null,"call_id":null,"thread":null}}"#,
            t + 11,
            t + 10
        ));
    }
    lines.push(String::new());
    lines.join("\n")
}

const EPOCH_HEADER: &str = r#"{"type":"trace","version":1,"epoch_unix_ms":1767225600000}"#;
const EPOCH_NS: u64 = 1_767_225_600_000_000_000;

fn by_name<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    let v: Vec<&Span> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(v.len(), 1, "one {name}");
    v[0]
}

/// Every parent was exported, in the same trace, and no span id repeats.
fn assert_whole_tree(spans: &[Span]) {
    let ids: HashSet<&[u8]> = spans.iter().map(|s| s.span_id.as_slice()).collect();
    assert_eq!(ids.len(), spans.len(), "span ids are unique");
    let by_id: HashMap<&[u8], &Span> = spans.iter().map(|s| (s.span_id.as_slice(), s)).collect();
    for s in spans {
        assert_eq!((s.trace_id.len(), s.span_id.len()), (16, 8));
        if s.parent_span_id.is_empty() {
            continue;
        }
        let p = by_id
            .get(s.parent_span_id.as_slice())
            .unwrap_or_else(|| panic!("{}: parent not exported", s.name));
        assert_eq!(
            p.trace_id, s.trace_id,
            "{}: parent in another trace",
            s.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_exports_the_turn_as_a_tree() {
    let (addr, log) = receiver(false).await;
    let dir = tempfile::tempdir().unwrap();
    let trace = write(dir.path(), "codex.jsonl", &two_calls(EPOCH_HEADER));
    let trace = trace.to_str().unwrap();
    let url = format!("http://{addr}");

    let plain = windowtap(&["replay", trace], &[]).await;
    let out = windowtap(&["replay", trace, "--otlp-endpoint", &url], &[]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // Records are the same with or without export.
    assert_eq!(out.stdout, plain.stdout);
    // The turn, its one response, the call under it, and the call that ran in no window.
    assert!(
        stderr.contains(&format!(
            "otlp: 4 spans exported to http://{addr}/v1/traces"
        )),
        "{stderr}"
    );

    let mut paths: Vec<String> = log.lock().unwrap().iter().map(|(p, _)| p.clone()).collect();
    // One batch, or on a busy machine more: each to the traces path.
    paths.dedup();
    assert_eq!(paths, ["/v1/traces"], "to the traces path");
    let got = spans(&log);
    assert_eq!(got.len(), 4);
    assert_whole_tree(&got);

    let turn = by_name(&got, "invoke_agent Codex");
    let chat = by_name(&got, "chat");
    let a = by_name(&got, "execute_tool echo");
    let b = by_name(&got, "execute_tool slow");
    assert!(turn.parent_span_id.is_empty());
    assert_eq!(chat.parent_span_id, turn.span_id);
    assert_eq!(a.parent_span_id, chat.span_id);
    assert_eq!(chat.kind, SpanKind::Client as i32);
    assert_eq!(chat.start_time_unix_nano, EPOCH_NS + 6_000_000_000);
    assert_eq!(chat.end_time_unix_nano, EPOCH_NS + 6_957_000_000);
    assert_eq!(string(turn, "session.id"), Some("th1"));
    assert_eq!(string(chat, "gen_ai.response.id"), Some("r1"));
    assert_eq!(a.kind, SpanKind::Internal as i32);
    assert_eq!(a.start_time_unix_nano, EPOCH_NS + 7_187_000_000);
    assert_eq!(a.end_time_unix_nano, EPOCH_NS + 7_264_000_000);
    for (k, v) in [
        ("gen_ai.operation.name", "execute_tool"),
        ("gen_ai.tool.name", "echo"),
        ("gen_ai.tool.call.id", "i1"),
        ("gen_ai.response.id", "r1"),
        ("gen_ai.conversation.id", "th1"),
        ("session.id", "th1"),
        ("mcp.method.name", "tools/call"),
        ("mcp.server.name", "probe"),
        ("windowtap.decision", "attributed"),
        ("windowtap.outcome", "result"),
        ("windowtap.interval", "i1"),
        ("windowtap.window.stream", "s1"),
        ("windowtap.window.request", "q2"),
    ] {
        assert_eq!(string(a, k), Some(v), "{k}");
    }
    assert_eq!(string(a, "windowtap.reason"), None);
    assert_eq!(attr(a, "windowtap.candidates"), Some(&Value::IntValue(1)));
    let Some(Value::ArrayValue(ev)) = attr(a, "windowtap.evidence") else {
        panic!("windowtap.evidence is not an array");
    };
    let ev: Vec<&str> = ev
        .values
        .iter()
        .filter_map(|v| match &v.value {
            Some(Value::StringValue(s)) => Some(s.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(ev, ["containment", "item_id", "call_id", "thread", "route"]);

    // The call that ran in no window: a root of its own, an error (its outcome).
    assert_eq!(b.start_time_unix_nano, EPOCH_NS + 20_000_000_000);
    assert!(b.parent_span_id.is_empty());
    assert_eq!(string(b, "windowtap.decision"), Some("abstained"));
    assert_eq!(string(b, "windowtap.reason"), Some("no_window"));
    assert_eq!(string(b, "gen_ai.response.id"), None);
    assert_eq!(string(b, "error.type"), Some("error"));
    assert_eq!(
        b.status.as_ref().map(|s| s.code),
        Some(2),
        "STATUS_CODE_ERROR"
    );
    assert_ne!(a.trace_id, b.trace_id);

    // A second replay exports the very same ids.
    let again = windowtap(&["replay", trace, "--otlp-endpoint", &url], &[]).await;
    assert!(again.status.success());
    let all = spans(&log);
    assert_eq!(all.len(), 8);
    let key = |s: &Span| {
        (
            s.name.clone(),
            s.trace_id.clone(),
            s.span_id.clone(),
            s.start_time_unix_nano,
        )
    };
    let mut first: Vec<_> = all[..4].iter().map(key).collect();
    let mut second: Vec<_> = all[4..].iter().map(key).collect();
    first.sort();
    second.sort();
    assert_eq!(first, second);
}

/// Replaying the bundled traces: every span of every file stored (no id shared between
/// files, although they reuse `i1`, `r1`, `th1`…), every tree whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_replay_gives_every_span_its_own_id() {
    let (addr, log) = receiver(false).await;
    let traces = concat!(env!("CARGO_MANIFEST_DIR"), "/traces");
    let out = windowtap(
        &[
            "replay",
            traces,
            "--otlp-endpoint",
            &format!("http://{addr}"),
        ],
        &[],
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let got = spans(&log);
    assert!(
        stderr.contains(&format!("otlp: {} spans exported to", got.len())),
        "{stderr}"
    );
    assert_whole_tree(&got);
    let records = String::from_utf8_lossy(&out.stdout).lines().count();
    let tools = got
        .iter()
        .filter(|s| string(s, "windowtap.interval").is_some())
        .count();
    assert_eq!(tools, records, "one execute_tool span per record");
    let roots = got.iter().filter(|s| s.parent_span_id.is_empty()).count();
    let traces: HashSet<&[u8]> = got.iter().map(|s| s.trace_id.as_slice()).collect();
    assert_eq!(roots, traces.len(), "one root per trace");
    for s in &got {
        match string(s, "gen_ai.operation.name") {
            Some("invoke_agent") => assert!(s.name.starts_with("invoke_agent")),
            Some("chat") => {
                assert!(s.name.starts_with("chat"));
                assert_eq!(s.kind, SpanKind::Client as i32);
                assert!(string(s, "gen_ai.provider.name").is_some());
                let parent = got.iter().find(|p| p.span_id == s.parent_span_id).unwrap();
                assert_eq!(
                    string(parent, "gen_ai.operation.name"),
                    Some("invoke_agent")
                );
            }
            Some("execute_tool") => assert!(s.name.starts_with("execute_tool ")),
            other => panic!("{}: operation {other:?}", s.name),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_carry_nothing_that_is_not_in_the_records_or_events() {
    let (addr, log) = receiver(false).await;
    let dir = tempfile::tempdir().unwrap();
    let trace = write(dir.path(), "codex.jsonl", &two_calls(EPOCH_HEADER));
    let out = windowtap(
        &[
            "replay",
            trace.to_str().unwrap(),
            "--otlp-endpoint",
            &format!("http://{addr}"),
        ],
        &[],
    )
    .await;
    assert!(out.status.success());
    let records = String::from_utf8(out.stdout).unwrap();
    let events = std::fs::read_to_string(&trace).unwrap();
    // Fixed words of the span format; every other string must be a value in the records or
    // in the trace's events.
    let fixed: BTreeSet<&str> = [
        "execute_tool",
        "tools/call",
        "attributed",
        "abstained",
        "chat",
        "invoke_agent",
        "openai",
        "Codex",
        "pipe",
        "unfinished",
    ]
    .into_iter()
    .collect();
    let mut strings = Vec::new();
    for span in spans(&log) {
        for kv in &span.attributes {
            match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Value::StringValue(s)) => strings.push(s.clone()),
                Some(Value::ArrayValue(a)) => {
                    for v in &a.values {
                        if let Some(Value::StringValue(s)) = &v.value {
                            strings.push(s.clone());
                        }
                    }
                }
                _ => {}
            }
        }
    }
    assert!(!strings.is_empty());
    for s in strings {
        assert!(
            fixed.contains(s.as_str())
                || records.contains(&format!("\"{s}\""))
                || events.contains(&format!("\"{s}\"")),
            "span value {s:?} is in no record and no event"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_environment_names_the_endpoint_too() {
    let (addr, log) = receiver(false).await;
    let dir = tempfile::tempdir().unwrap();
    let trace = write(dir.path(), "codex.jsonl", &two_calls(EPOCH_HEADER));
    let trace = trace.to_str().unwrap();

    // The signal variable is used exactly as given.
    let exact = format!("http://{addr}/custom/traces");
    let out = windowtap(
        &["replay", trace],
        &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &exact)],
    )
    .await;
    assert!(out.status.success());
    // The generic one is a base for /v1/traces.
    let base = format!("http://{addr}/base/");
    let out = windowtap(
        &["replay", trace],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &base),
            ("OTEL_SERVICE_NAME", "agent-x"),
        ],
    )
    .await;
    assert!(out.status.success());
    // A flag ending in /v1/traces is used as is.
    let flag = format!("http://{addr}/flag/v1/traces");
    let out = windowtap(&["replay", trace, "--otlp-endpoint", &flag], &[]).await;
    assert!(out.status.success());

    let got = log.lock().unwrap();
    let mut paths: Vec<&str> = got.iter().map(|(p, _)| p.as_str()).collect();
    // A run's two spans may leave in one batch or, on a busy machine, in two.
    paths.dedup();
    assert_eq!(
        paths,
        ["/custom/traces", "/base/v1/traces", "/flag/v1/traces"]
    );
    // The service name of the first batch that reached `path` (a run may send two batches).
    let service = |path: &str| {
        let (_, batch) = got.iter().find(|(p, _)| p == path).expect("a batch");
        batch.resource_spans[0]
            .resource
            .as_ref()
            .unwrap()
            .attributes
            .iter()
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| kv.value.clone())
            .and_then(|v| v.value)
    };
    assert_eq!(
        service("/custom/traces"),
        Some(Value::StringValue("windowtap".into()))
    );
    assert_eq!(
        service("/base/v1/traces"),
        Some(Value::StringValue("agent-x".into()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_collector_drops_counted_spans_and_replay_completes() {
    let (addr, _log) = receiver(true).await;
    let dir = tempfile::tempdir().unwrap();
    let n = 30;
    let trace = write(dir.path(), "many.jsonl", &many_calls(n));
    let out = windowtap(
        &[
            "replay",
            trace.to_str().unwrap(),
            "--otlp-endpoint",
            &format!("http://{addr}"),
        ],
        &[
            // A one-span queue and one-span batches: the first span is stuck in flight.
            ("OTEL_BSP_MAX_QUEUE_SIZE", "1"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "1"),
            // Bounds the stuck request and the flush at exit.
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "1000"),
        ],
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), n);
    let warning = stderr
        .lines()
        .find(|l| l.starts_with("windowtap: warning: otlp: 0 spans exported"))
        .unwrap_or_else(|| panic!("no export warning in {stderr}"));
    assert!(
        warning.contains(&format!("; {n} not delivered (")),
        "{warning}"
    );
    // Replay waits for room once; when that wait or the stuck request runs out, the rest is
    // dropped at the queue: at most one span in flight, one queued, one more let in as the
    // first request failed.
    let dropped: usize = warning
        .split("not delivered (")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no dropped count in {warning}"));
    assert!(dropped >= n - 3, "{warning}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_collector_is_a_warning_and_records_are_still_written() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dir = tempfile::tempdir().unwrap();
    let trace = write(dir.path(), "codex.jsonl", &two_calls(EPOCH_HEADER));
    let records = dir.path().join("records.jsonl");
    let out = windowtap(
        &[
            "replay",
            trace.to_str().unwrap(),
            "-o",
            records.to_str().unwrap(),
            "--otlp-endpoint",
            &format!("http://user:s3cret@127.0.0.1:{port}/?token=s3cret"),
        ],
        &[],
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(&records).unwrap().lines().count(),
        2
    );
    assert!(
        stderr.contains(&format!(
            "windowtap: warning: otlp: 0 spans exported to http://127.0.0.1:{port}/v1/traces; 4 not delivered"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("could not connect"), "{stderr}");
    assert!(!stderr.contains("s3cret"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_endpoint_is_named_without_its_value() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write(dir.path(), "codex.jsonl", &two_calls(EPOCH_HEADER));
    let trace = trace.to_str().unwrap();
    let out = windowtap(
        &["replay", trace, "--otlp-endpoint", "ftp://s3cret@host/"],
        &[],
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("--otlp-endpoint: not a valid URL (the scheme must be http or https)"),
        "{stderr}"
    );
    assert!(!stderr.contains("s3cret"), "{stderr}");

    // A bad environment value is only a warning: replay goes on, without export.
    let out = windowtap(
        &["replay", trace],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", "s3cret-not-a-url")],
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("windowtap: warning: otlp: OTEL_EXPORTER_OTLP_ENDPOINT: not a valid URL"),
        "{stderr}"
    );
    assert!(!stderr.contains("s3cret"), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_epoch_in_the_header_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write(
        dir.path(),
        "codex.jsonl",
        &two_calls(r#"{"type":"trace","version":1,"epoch_unix_ms":"yesterday"}"#),
    );
    let out = windowtap(&["replay", trace.to_str().unwrap()], &[]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("header field `epoch_unix_ms` must be a number"),
        "{stderr}"
    );
}
