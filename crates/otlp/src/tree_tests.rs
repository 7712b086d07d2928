use std::collections::{HashMap, HashSet};

use correlator::trace::TraceReader;
use correlator::{Config, Correlator, Event, Record};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;

use super::*;
use crate::offline::interleave;

/// A trace of these lines: version 2 when they name hosts, else version 1.
fn events(lines: &[&str]) -> Vec<Event> {
    let version = if lines.iter().any(|l| l.contains(r#""host":"#)) {
        2
    } else {
        1
    };
    let mut text = format!("{{\"type\":\"trace\",\"version\":{version}}}\n");
    for l in lines {
        text.push_str(l);
        text.push('\n');
    }
    TraceReader::new(text.as_bytes(), "test")
        .map(|e| e.expect("a valid test trace"))
        .collect()
}

fn records(evs: &[Event]) -> Vec<Record> {
    let mut c = Correlator::new(Config::default());
    let mut out = Vec::new();
    for e in evs {
        c.push(e, &mut out);
    }
    c.finish(&mut out);
    out
}

/// The spans of a trace, built as replay builds them, with the key of `name`.
fn spans_keyed(name: &str, lines: &[&str]) -> Vec<Span> {
    let evs = events(lines);
    let recs = records(&evs);
    let door = Door::replay();
    let cleared: Vec<_> = recs.iter().map(|r| door.record(r).unwrap()).collect();
    let tree = Tree::new(
        SourceKey::for_file(name, [7; 32]),
        1_000_000_000,
        Door::replay(),
        Millis::INFINITY,
    );
    let mut out = Vec::new();
    interleave(tree, evs.into_iter(), &cleared, |s| out.push(s));
    out
}

fn spans(lines: &[&str]) -> Vec<Span> {
    spans_keyed("a.jsonl", lines)
}

fn named<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn one<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    let v = named(spans, name);
    assert_eq!(v.len(), 1, "one {name} in {:?}", names(spans));
    v[0]
}

fn names(spans: &[Span]) -> Vec<&str> {
    spans.iter().map(|s| s.name.as_str()).collect()
}

fn string<'a>(s: &'a Span, key: &str) -> Option<&'a str> {
    s.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| match &v.value {
            Some(Value::StringValue(s)) => Some(s.as_str()),
            _ => None,
        })
}

fn int(s: &Span, key: &str) -> Option<i64> {
    s.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| match &v.value {
            Some(Value::IntValue(i)) => Some(*i),
            _ => None,
        })
}

/// The chat span of `response`.
fn chat<'a>(spans: &'a [Span], response: &str) -> &'a Span {
    spans
        .iter()
        .find(|c| c.name.starts_with("chat") && string(c, "gen_ai.response.id") == Some(response))
        .unwrap_or_else(|| panic!("no chat span for {response}"))
}

fn is_child(child: &Span, parent: &Span) -> bool {
    child.trace_id == parent.trace_id && child.parent_span_id == parent.span_id
}

fn assert_tree_is_whole(spans: &[Span]) {
    let ids: HashSet<_> = spans.iter().map(|s| s.span_id.clone()).collect();
    assert_eq!(ids.len(), spans.len(), "span ids are unique");
    let by_id: HashMap<_, _> = spans.iter().map(|s| (s.span_id.clone(), s)).collect();
    for s in spans {
        if !s.parent_span_id.is_empty() {
            let p = by_id
                .get(&s.parent_span_id)
                .unwrap_or_else(|| panic!("{}: its parent was not emitted", s.name));
            assert_eq!(
                p.trace_id, s.trace_id,
                "{}: parent in another trace",
                s.name
            );
        }
    }
}

/// Codex over a WebSocket: a turn of two responses, the MCP call in the first one's window,
/// then a new user prompt continuing the finished turn's last response.
const CODEX: &[&str] = &[
    r#"{"type":"stream_open","t":0,"stream":"s1","client":"codex","transport":"websocket","thread":"th1"}"#,
    r#"{"type":"request","t":6000,"stream":"s1","request":"q1","previous_response":null,"outputs":[]}"#,
    r#"{"type":"response_start","t":6100,"stream":"s1","response":"r1","request":"q1"}"#,
    r#"{"type":"tool_call","t":6905,"stream":"s1","response":"r1","call":"c1","item":"fc1","name":"echo","namespace":"mcp__probe","kind":"function"}"#,
    r#"{"type":"response_end","t":6957,"stream":"s1","response":"r1","status":"completed"}"#,
    r#"{"type":"mcp_interval","t":7265,"interval":"i1","alias":"probe","tool":"echo","start":7187,"end":7264,"outcome":"result","tool_use_id":null,"item_id":"fc1","call_id":"c1","thread":"th1"}"#,
    r#"{"type":"request","t":7278,"stream":"s1","request":"q2","previous_response":"r1","outputs":[]}"#,
    r#"{"type":"response_start","t":7300,"stream":"s1","response":"r2","request":"q2"}"#,
    r#"{"type":"response_end","t":7400,"stream":"s1","response":"r2","status":"completed"}"#,
    r#"{"type":"request","t":9000,"stream":"s1","request":"q3","previous_response":"r2","outputs":[]}"#,
    r#"{"type":"response_start","t":9100,"stream":"s1","response":"r3","request":"q3"}"#,
    r#"{"type":"response_end","t":9200,"stream":"s1","response":"r3","status":"completed"}"#,
];

#[test]
fn a_turn_is_a_root_with_its_responses_and_the_call_under_the_response_that_asked() {
    let s = spans(CODEX);
    assert_tree_is_whole(&s);
    assert_eq!(s.len(), 6, "{:?}", names(&s));
    let roots = named(&s, "invoke_agent Codex");
    assert_eq!(roots.len(), 2, "two turns");
    let (r1, r2, r3) = (chat(&s, "r1"), chat(&s, "r2"), chat(&s, "r3"));
    let turn1 = roots.iter().find(|t| is_child(r1, t)).unwrap();
    assert!(turn1.parent_span_id.is_empty());
    assert!(is_child(r2, turn1), "q2 continues r1, which made a call");
    assert!(
        !is_child(r3, turn1),
        "q3 continues a finished turn: a new one"
    );
    assert_ne!(r3.trace_id, turn1.trace_id);
    let call = one(&s, "execute_tool echo");
    assert!(is_child(call, r1));
    assert_eq!(call.kind, SpanKind::Internal as i32);
    assert_eq!(r1.kind, SpanKind::Client as i32);
    // Request time to response end; the turn from its first request to its last end.
    assert_eq!(r1.start_time_unix_nano, 1_000_000_000 + 6_000_000_000);
    assert_eq!(r1.end_time_unix_nano, 1_000_000_000 + 6_957_000_000);
    assert_eq!(turn1.start_time_unix_nano, r1.start_time_unix_nano);
    assert_eq!(turn1.end_time_unix_nano, 1_000_000_000 + 7_400_000_000);
    for (k, v) in [
        ("gen_ai.operation.name", "invoke_agent"),
        ("gen_ai.provider.name", "openai"),
        ("gen_ai.agent.name", "Codex"),
        ("gen_ai.conversation.id", "th1"),
        ("session.id", "th1"),
    ] {
        assert_eq!(string(turn1, k), Some(v), "{k}");
    }
    assert_eq!(int(turn1, "windowtap.turn.responses"), Some(2));
    for (k, v) in [
        ("gen_ai.operation.name", "chat"),
        ("gen_ai.provider.name", "openai"),
        ("session.id", "th1"),
        ("windowtap.request", "q1"),
    ] {
        assert_eq!(string(r1, k), Some(v), "{k}");
    }
    assert_eq!(int(r1, "windowtap.tool_calls"), Some(1));
    for (k, v) in [
        ("gen_ai.operation.name", "execute_tool"),
        ("gen_ai.tool.name", "echo"),
        ("mcp.method.name", "tools/call"),
        ("mcp.server.name", "probe"),
        ("windowtap.decision", "attributed"),
        ("windowtap.outcome", "result"),
        ("gen_ai.response.id", "r1"),
        ("session.id", "th1"),
    ] {
        assert_eq!(string(call, k), Some(v), "{k}");
    }
    assert_eq!(call.status, None);
    assert!(r1.status.is_none() && turn1.status.is_none());
}

#[test]
fn a_multi_round_trip_call_carries_its_rounds_and_wait() {
    // The fields are of trace v2, whose stream_open carries a host.
    let open = CODEX[0].replace(r#""thread":"th1"}"#, r#""thread":"th1","host":null}"#);
    let mut lines = CODEX.to_vec();
    lines[0] = &open;
    lines[5] = r#"{"type":"mcp_interval","t":7265,"interval":"i1","alias":"probe","tool":"echo","start":7187,"end":7264,"outcome":"result","tool_use_id":null,"item_id":"fc1","call_id":"c1","thread":"th1","host":null,"rounds":2,"input_wait":40.5}"#;
    let s = spans(&lines);
    let call = one(&s, "execute_tool echo");
    assert_eq!(int(call, "windowtap.mcp.rounds"), Some(2));
    let wait = call
        .attributes
        .iter()
        .find(|kv| kv.key == "windowtap.mcp.input_wait_ms")
        .and_then(|kv| kv.value.as_ref()?.value.clone());
    assert_eq!(
        wait,
        Some(opentelemetry_proto::tonic::common::v1::any_value::Value::DoubleValue(40.5))
    );
    assert_eq!(string(call, "windowtap.outcome_detail"), None);
    // Unanswered: cancelled, with the detail word.
    lines[5] = r#"{"type":"mcp_interval","t":7265,"interval":"i1","alias":"probe","tool":"echo","start":7187,"end":7264,"outcome":"cancelled","tool_use_id":null,"item_id":"fc1","call_id":"c1","thread":"th1","host":null,"rounds":1,"input_wait":60,"outcome_detail":"input_unanswered"}"#;
    let s = spans(&lines);
    let call = one(&s, "execute_tool echo");
    assert_eq!(
        string(call, "windowtap.outcome_detail"),
        Some("input_unanswered")
    );
    assert_eq!(string(call, "error.type"), Some("cancelled"));
    // A call of one request says nothing about rounds.
    let s = spans(CODEX);
    let call = one(&s, "execute_tool echo");
    assert_eq!(int(call, "windowtap.mcp.rounds"), None);
}

#[test]
fn ids_are_deterministic_per_file_and_differ_between_files() {
    let a = spans_keyed("a.jsonl", CODEX);
    let again = spans_keyed("a.jsonl", CODEX);
    let b = spans_keyed("b.jsonl", CODEX);
    let ids = |v: &[Span]| -> Vec<(Vec<u8>, Vec<u8>)> {
        v.iter()
            .map(|s| (s.trace_id.clone(), s.span_id.clone()))
            .collect()
    };
    assert_eq!(ids(&a), ids(&again));
    let a_ids: HashSet<_> = a.iter().map(|s| s.span_id.clone()).collect();
    let a_traces: HashSet<_> = a.iter().map(|s| s.trace_id.clone()).collect();
    assert!(b.iter().all(|s| !a_ids.contains(&s.span_id)));
    assert!(b.iter().all(|s| !a_traces.contains(&s.trace_id)));
    // Another content under the same name is another source too.
    assert_ne!(
        SourceKey::for_file("a.jsonl", [1; 32]).span_id("chat", "r1"),
        SourceKey::for_file("a.jsonl", [2; 32]).span_id("chat", "r1")
    );
}

/// Claude Code: the main thread calls Task; the subagent (its own thread) runs a turn with an
/// MCP call, then the main thread gets the Task result and finishes.
const CLAUDE_SUBAGENT: &[&str] = &[
    r#"{"type":"stream_open","t":0,"stream":"m1","client":"claude","transport":"http","thread":"sess"}"#,
    r#"{"type":"request","t":1,"stream":"m1","request":"qm1","previous_response":null,"outputs":[]}"#,
    r#"{"type":"response_start","t":50,"stream":"m1","response":"rm1","request":"qm1"}"#,
    r#"{"type":"tool_call","t":200,"stream":"m1","response":"rm1","call":"toolu_task","item":null,"name":"Task","namespace":null,"kind":"tool_use"}"#,
    r#"{"type":"response_end","t":210,"stream":"m1","response":"rm1","status":"completed"}"#,
    r#"{"type":"stream_close","t":211,"stream":"m1"}"#,
    r#"{"type":"stream_open","t":300,"stream":"a1","client":"claude","transport":"http","thread":"sess:agent"}"#,
    r#"{"type":"request","t":301,"stream":"a1","request":"qa1","previous_response":null,"outputs":[]}"#,
    r#"{"type":"response_start","t":350,"stream":"a1","response":"ra1","request":"qa1"}"#,
    r#"{"type":"tool_call","t":500,"stream":"a1","response":"ra1","call":"toolu_a","item":null,"name":"mcp__probe__echo","namespace":null,"kind":"tool_use"}"#,
    r#"{"type":"response_end","t":510,"stream":"a1","response":"ra1","status":"completed"}"#,
    r#"{"type":"stream_close","t":511,"stream":"a1"}"#,
    r#"{"type":"mcp_interval","t":600,"interval":"ia","alias":"probe","tool":"echo","start":520,"end":599,"outcome":"error","tool_use_id":"toolu_a","item_id":null,"call_id":null,"thread":null}"#,
    r#"{"type":"stream_open","t":610,"stream":"a2","client":"claude","transport":"http","thread":"sess:agent"}"#,
    r#"{"type":"request","t":611,"stream":"a2","request":"qa2","previous_response":null,"outputs":["toolu_a"]}"#,
    r#"{"type":"response_start","t":650,"stream":"a2","response":"ra2","request":"qa2"}"#,
    r#"{"type":"response_end","t":700,"stream":"a2","response":"ra2","status":"completed"}"#,
    r#"{"type":"stream_close","t":701,"stream":"a2"}"#,
    r#"{"type":"stream_open","t":710,"stream":"m2","client":"claude","transport":"http","thread":"sess"}"#,
    r#"{"type":"request","t":711,"stream":"m2","request":"qm2","previous_response":null,"outputs":["toolu_task"]}"#,
    r#"{"type":"response_start","t":750,"stream":"m2","response":"rm2","request":"qm2"}"#,
    r#"{"type":"response_end","t":800,"stream":"m2","response":"rm2","status":"completed"}"#,
    r#"{"type":"stream_close","t":801,"stream":"m2"}"#,
];

#[test]
fn a_blocking_subagent_turn_sits_under_the_task_call() {
    let s = spans(CLAUDE_SUBAGENT);
    assert_tree_is_whole(&s);
    let turns = named(&s, "invoke_agent Claude Code");
    assert_eq!(turns.len(), 2, "{:?}", names(&s));
    let main = turns.iter().find(|t| t.parent_span_id.is_empty()).unwrap();
    let sub = turns.iter().find(|t| !t.parent_span_id.is_empty()).unwrap();
    let task = one(&s, "execute_tool Task");
    let chat = |r: &str| chat(&s, r);
    assert!(is_child(chat("rm1"), main));
    assert!(is_child(chat("rm2"), main), "the Task result continues rm1");
    assert!(is_child(task, chat("rm1")));
    assert!(is_child(sub, task));
    assert_eq!(string(sub, "windowtap.turn.kind"), Some("subagent"));
    assert!(is_child(chat("ra1"), sub) && is_child(chat("ra2"), sub));
    // The Task call runs from its call item to the request carrying its result.
    assert_eq!(task.start_time_unix_nano, 1_000_000_000 + 200_000_000);
    assert_eq!(task.end_time_unix_nano, 1_000_000_000 + 711_000_000);
    assert_eq!(
        string(chat("rm1"), "gen_ai.provider.name"),
        Some("anthropic")
    );
    // The subagent's MCP call failed: an error, under the response that asked for it (or,
    // abstained, in the same trace).
    let call = one(&s, "execute_tool echo");
    if string(call, "windowtap.decision") == Some("attributed") {
        assert!(is_child(call, chat("ra1")));
    } else {
        assert!(
            is_child(call, main),
            "{:?}",
            string(call, "windowtap.reason")
        );
    }
    assert_eq!(string(call, "error.type"), Some("error"));
    assert_eq!(
        call.status.as_ref().map(|st| st.code),
        Some(StatusCode::Error as i32)
    );
}

/// Two threads each with a window open over one MCP call: ambiguous.
const AMBIGUOUS: &[&str] = &[
    r#"{"type":"stream_open","t":0,"stream":"s1","client":"codex","transport":"websocket","thread":"th1"}"#,
    r#"{"type":"stream_open","t":0,"stream":"s2","client":"codex","transport":"websocket","thread":"th2"}"#,
    r#"{"type":"request","t":10,"stream":"s1","request":"q1","previous_response":null,"outputs":[]}"#,
    r#"{"type":"request","t":10,"stream":"s2","request":"q2","previous_response":null,"outputs":[]}"#,
    r#"{"type":"response_start","t":20,"stream":"s1","response":"r1","request":"q1"}"#,
    r#"{"type":"response_start","t":20,"stream":"s2","response":"r2","request":"q2"}"#,
    r#"{"type":"tool_call","t":100,"stream":"s1","response":"r1","call":"c1","item":null,"name":"echo","namespace":"mcp__probe","kind":"function"}"#,
    r#"{"type":"tool_call","t":100,"stream":"s2","response":"r2","call":"c2","item":null,"name":"echo","namespace":"mcp__probe","kind":"function"}"#,
    r#"{"type":"response_end","t":110,"stream":"s1","response":"r1","status":"completed"}"#,
    r#"{"type":"response_end","t":110,"stream":"s2","response":"r2","status":"failed"}"#,
    r#"{"type":"mcp_interval","t":300,"interval":"i1","alias":"probe","tool":"echo","start":200,"end":299,"outcome":"cancelled","tool_use_id":null,"item_id":null,"call_id":null,"thread":null}"#,
    r#"{"type":"request","t":400,"stream":"s1","request":"q3","previous_response":"r1","outputs":[]}"#,
    r#"{"type":"response_start","t":410,"stream":"s1","response":"r3","request":"q3"}"#,
    r#"{"type":"response_end","t":420,"stream":"s1","response":"r3","status":"completed"}"#,
];

#[test]
fn an_abstained_call_links_to_every_candidate_and_says_why() {
    let s = spans(AMBIGUOUS);
    assert_tree_is_whole(&s);
    let call = one(&s, "execute_tool echo");
    let reason = string(call, "windowtap.reason");
    assert!(
        matches!(reason, Some("ambiguous") | Some("incomplete")),
        "{reason:?}"
    );
    assert_eq!(string(call, "windowtap.decision"), Some("abstained"));
    // Candidates in two traces: the call is a root of its own, linked to both.
    assert!(call.parent_span_id.is_empty());
    let chats: Vec<_> = named(&s, "chat");
    let linked: HashSet<_> = call.links.iter().map(|l| l.span_id.clone()).collect();
    let (r1, r2) = (chat(&s, "r1"), chat(&s, "r2"));
    assert_eq!(
        linked,
        HashSet::from([r1.span_id.clone(), r2.span_id.clone()])
    );
    for l in &call.links {
        let target = chats.iter().find(|c| c.span_id == l.span_id).unwrap();
        assert_eq!(l.trace_id, target.trace_id);
    }
    assert_eq!(string(call, "error.type"), Some("cancelled"));
    // The failed response: an error on its chat span, and its turn stays open to the end.
    assert_eq!(string(r2, "error.type"), Some("failed"));
    assert_eq!(
        r2.status.as_ref().map(|st| st.code),
        Some(StatusCode::Error as i32)
    );
    let turn2 = s
        .iter()
        .find(|t| t.span_id == r2.parent_span_id)
        .expect("r2's turn is emitted at the end");
    assert_eq!(string(turn2, "error.type"), Some("failed"));
}

#[test]
fn a_stream_lost_mid_response_ends_its_chat_span_with_an_error() {
    let s = spans(&[
        r#"{"type":"stream_open","t":0,"stream":"s1","client":"claude","transport":"http","thread":"t"}"#,
        r#"{"type":"request","t":1,"stream":"s1","request":"q1","previous_response":null,"outputs":[]}"#,
        r#"{"type":"response_start","t":5,"stream":"s1","response":"r1","request":"q1"}"#,
        r#"{"type":"observation_lost","t":9,"stream":"s1","reason":"decode"}"#,
    ]);
    assert_tree_is_whole(&s);
    let chat = one(&s, "chat");
    assert_eq!(string(chat, "error.type"), Some("observation_lost"));
    assert_eq!(chat.end_time_unix_nano, 1_000_000_000 + 9_000_000);
    one(&s, "invoke_agent Claude Code");
}

#[test]
fn a_live_tree_forgets_finished_turns_after_the_horizon() {
    let mut tree = Tree::new(SourceKey::for_run([3; 32]), 0, Door::replay(), 10_000.0);
    let mut out = Vec::new();
    let turn = |i: usize, t0: f64| -> Vec<String> {
        vec![
            format!(
                r#"{{"type":"stream_open","t":{t0},"stream":"s{i}","client":"codex","transport":"http","thread":"th"}}"#
            ),
            format!(
                r#"{{"type":"request","t":{},"stream":"s{i}","request":"q{i}","previous_response":null,"outputs":[]}}"#,
                t0 + 1.0
            ),
            format!(
                r#"{{"type":"response_start","t":{},"stream":"s{i}","response":"r{i}","request":"q{i}"}}"#,
                t0 + 2.0
            ),
            format!(
                r#"{{"type":"response_end","t":{},"stream":"s{i}","response":"r{i}","status":"completed"}}"#,
                t0 + 3.0
            ),
            format!(
                r#"{{"type":"stream_close","t":{},"stream":"s{i}"}}"#,
                t0 + 4.0
            ),
        ]
    };
    let mut lines = Vec::new();
    for i in 0..200 {
        lines.extend(turn(i, 1_000.0 * i as f64));
    }
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    for ev in events(&refs) {
        tree.event(&ev, &mut out);
    }
    assert_eq!(out.len(), 400, "every turn and response emitted once");
    // 200 turns over 200 s, 10 s kept (plus up to one prune period).
    assert!(tree.held() < 4 * 80, "{}", tree.held());
}

#[test]
fn a_chat_span_carries_model_usage_and_finish_reason() {
    let s = spans(&[
        r#"{"type":"stream_open","t":0,"stream":"c1","client":"claude","transport":"http","thread":"t","host":"h1"}"#,
        r#"{"type":"request","t":1,"stream":"c1","request":"q1","previous_response":null,"outputs":[]}"#,
        r#"{"type":"response_start","t":5,"stream":"c1","response":"r1","request":"q1","model":"claude-sonnet-4-5"}"#,
        r#"{"type":"response_end","t":9,"stream":"c1","response":"r1","status":"completed","usage":{"input":12,"output":161,"cache_read":18310,"cache_creation":1204},"stop_reason":"end_turn"}"#,
        r#"{"type":"stream_open","t":10,"stream":"x1","client":"codex","transport":"websocket","thread":"u","host":"h2"}"#,
        r#"{"type":"request","t":11,"stream":"x1","request":"q2","previous_response":null,"outputs":[]}"#,
        r#"{"type":"response_start","t":12,"stream":"x1","response":"r2","request":"q2","model":"gpt-5-codex"}"#,
        r#"{"type":"response_end","t":19,"stream":"x1","response":"r2","status":"incomplete","usage":{"input":8123,"output":96,"cache_read":6912},"stop_reason":"max_output_tokens"}"#,
    ]);
    assert_tree_is_whole(&s);
    let claude = one(&s, "chat claude-sonnet-4-5");
    assert_eq!(claude.kind, SpanKind::Client as i32);
    for (k, v) in [
        ("gen_ai.request.model", "claude-sonnet-4-5"),
        ("gen_ai.response.model", "claude-sonnet-4-5"),
        ("gen_ai.provider.name", "anthropic"),
    ] {
        assert_eq!(string(claude, k), Some(v), "{k}");
    }
    // Anthropic counts cache reads and writes apart from input_tokens; the convention's
    // input_tokens holds them all.
    assert_eq!(
        int(claude, "gen_ai.usage.input_tokens"),
        Some(12 + 18310 + 1204)
    );
    assert_eq!(int(claude, "gen_ai.usage.output_tokens"), Some(161));
    assert_eq!(
        int(claude, "gen_ai.usage.cache_read.input_tokens"),
        Some(18310)
    );
    assert_eq!(
        int(claude, "gen_ai.usage.cache_creation.input_tokens"),
        Some(1204)
    );
    let reasons = claude
        .attributes
        .iter()
        .find(|kv| kv.key == "gen_ai.response.finish_reasons")
        .and_then(|kv| kv.value.clone())
        .and_then(|v| v.value);
    let Some(Value::ArrayValue(reasons)) = reasons else {
        panic!("finish_reasons is not an array");
    };
    assert_eq!(reasons.values.len(), 1);
    assert_eq!(
        reasons.values[0].value,
        Some(Value::StringValue("end_turn".into()))
    );
    let turn = one(&s, "invoke_agent Claude Code");
    assert_eq!(string(turn, "windowtap.host"), Some("h1"));
    // OpenAI's input_tokens already holds the cached ones.
    let codex = one(&s, "chat gpt-5-codex");
    assert_eq!(int(codex, "gen_ai.usage.input_tokens"), Some(8123));
    assert_eq!(
        int(codex, "gen_ai.usage.cache_read.input_tokens"),
        Some(6912)
    );
    assert_eq!(int(codex, "gen_ai.usage.cache_creation.input_tokens"), None);
    assert_eq!(string(codex, "error.type"), Some("incomplete"));
}

/// Claude Code over HTTP: one exchange per request, an MCP call in the first response's
/// window, the continuation on a stream of its own, and a side request with no trace context.
const CLAUDE_HTTP: &[&str] = &[
    r#"{"type":"stream_open","t":0,"stream":"h1","client":"claude","transport":"http","thread":"sess"}"#,
    r#"{"type":"request","t":5,"stream":"h1","request":"q1","previous_response":null,"outputs":[]}"#,
    r#"{"type":"response_start","t":300,"stream":"h1","response":"r1","request":"q1"}"#,
    r#"{"type":"tool_call","t":1800,"stream":"h1","response":"r1","call":"toolu_1","item":null,"name":"mcp__probe__echo","namespace":null,"kind":"tool_use"}"#,
    r#"{"type":"response_end","t":1900,"stream":"h1","response":"r1","status":"completed"}"#,
    r#"{"type":"stream_close","t":1901,"stream":"h1"}"#,
    r#"{"type":"mcp_interval","t":2102,"interval":"i1","alias":"probe","tool":"echo","start":1850,"end":2100,"outcome":"result","tool_use_id":"toolu_1","item_id":null,"call_id":null,"thread":null}"#,
    r#"{"type":"stream_open","t":2200,"stream":"h2","client":"claude","transport":"http","thread":"sess"}"#,
    r#"{"type":"request","t":2205,"stream":"h2","request":"q2","previous_response":null,"outputs":["toolu_1"]}"#,
    r#"{"type":"response_start","t":2500,"stream":"h2","response":"r2","request":"q2"}"#,
    r#"{"type":"response_end","t":2700,"stream":"h2","response":"r2","status":"completed"}"#,
    r#"{"type":"stream_close","t":2701,"stream":"h2"}"#,
    r#"{"type":"stream_open","t":3000,"stream":"h3","client":"claude","transport":"http","thread":"sess"}"#,
    r#"{"type":"request","t":3005,"stream":"h3","request":"q3","previous_response":null,"outputs":[]}"#,
    r#"{"type":"response_start","t":3100,"stream":"h3","response":"r3","request":"q3"}"#,
    r#"{"type":"response_end","t":3200,"stream":"h3","response":"r3","status":"completed"}"#,
    r#"{"type":"stream_close","t":3201,"stream":"h3"}"#,
];

/// The spans of `lines` with the host parents of `joins` (by stream) handed to the tree first,
/// as the live task hands them before each stream's events.
fn spans_joined(lines: &[&str], joins: &[(&str, HostParent)]) -> Vec<Span> {
    let evs = events(lines);
    let recs = records(&evs);
    let door = Door::replay();
    let cleared: Vec<_> = recs.iter().map(|r| door.record(r).unwrap()).collect();
    let mut tree = Tree::new(
        SourceKey::for_file("a.jsonl", [7; 32]),
        1_000_000_000,
        Door::replay(),
        Millis::INFINITY,
    );
    for (stream, p) in joins {
        tree.join(stream, *p);
    }
    let mut out = Vec::new();
    interleave(tree, evs.into_iter(), &cleared, |s| out.push(s));
    out
}

#[test]
fn a_joined_request_puts_its_chat_span_and_the_calls_under_it_in_the_hosts_trace() {
    let host_trace = [0xab; 16];
    let (llm1, llm2) = ([0x11; 8], [0x22; 8]);
    let s = spans_joined(
        CLAUDE_HTTP,
        &[
            (
                "h1",
                HostParent {
                    trace: host_trace,
                    span: llm1,
                },
            ),
            (
                "h2",
                HostParent {
                    trace: host_trace,
                    span: llm2,
                },
            ),
        ],
    );
    let (r1, r2, r3) = (chat(&s, "r1"), chat(&s, "r2"), chat(&s, "r3"));
    // Each chat span is the child of the host's span its request was made under.
    assert_eq!(r1.trace_id, host_trace.to_vec());
    assert_eq!(r1.parent_span_id, llm1.to_vec());
    assert_eq!(r2.trace_id, host_trace.to_vec());
    assert_eq!(r2.parent_span_id, llm2.to_vec());
    // The MCP call it asked for is under it, in the host's trace too.
    let call = one(&s, "execute_tool echo");
    assert_eq!(string(call, "windowtap.decision"), Some("attributed"));
    assert!(is_child(call, r1));
    // The turn stays in windowtap's own trace; a joined chat span links to it.
    let turns = named(&s, "invoke_agent Claude Code");
    let turn1 = turns
        .iter()
        .find(|t| r1.links.iter().any(|l| l.span_id == t.span_id))
        .expect("r1 links to its turn");
    assert_ne!(turn1.trace_id, host_trace.to_vec());
    let link = &r1.links[0];
    assert_eq!(link.trace_id, turn1.trace_id);
    assert_eq!(
        link.attributes[0].value.as_ref().unwrap().value,
        Some(Value::StringValue("turn".into()))
    );
    // A request without a parent is placed as ever: under its turn, no link.
    assert!(turns.iter().any(|t| is_child(r3, t)));
    assert!(r3.links.is_empty());
}

#[test]
fn without_a_join_the_tree_is_the_same_as_before() {
    let plain = spans(CLAUDE_HTTP);
    assert_eq!(plain, spans_joined(CLAUDE_HTTP, &[]));
    assert_tree_is_whole(&plain);
    let call = one(&plain, "execute_tool echo");
    assert!(is_child(call, chat(&plain, "r1")));
    // No turn links: only the call's own causal links.
    assert!(plain
        .iter()
        .all(|s| s.links.is_empty() || s.name == "execute_tool echo"));
}

fn link_attr<'a>(l: &'a Link, key: &str) -> Option<&'a str> {
    l.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| match &v.value {
            Some(Value::StringValue(s)) => Some(s.as_str()),
            _ => None,
        })
}

/// The call's links: (windowtap.link, gen_ai.attribution.link_type, the linked span).
fn causal(call: &Span) -> Vec<(&str, Option<&str>, Vec<u8>)> {
    call.links
        .iter()
        .map(|l| {
            (
                link_attr(l, "windowtap.link").unwrap(),
                link_attr(l, "gen_ai.attribution.link_type"),
                l.span_id.clone(),
            )
        })
        .collect()
}

#[test]
fn an_attributed_call_links_to_the_response_that_asked_and_the_one_that_consumed_it() {
    // Over HTTP the continuation is a request of its own (its outputs carry the call); over
    // a WebSocket it names the previous response.
    for (trace, asked, consumed) in [(CLAUDE_HTTP, "r1", "r2"), (CODEX, "r1", "r2")] {
        let s = spans(trace);
        let call = one(&s, "execute_tool echo");
        assert_eq!(
            causal(call),
            [
                (
                    "generation",
                    Some("CAUSED_BY_GENERATION"),
                    chat(&s, asked).span_id.clone()
                ),
                ("continuation", None, chat(&s, consumed).span_id.clone()),
            ]
        );
        assert_eq!(
            call.links[1].trace_id,
            chat(&s, consumed).trace_id,
            "links name the trace too"
        );
    }
    // The report may reach the correlator after the continuation's response started: the
    // span then has its continuation at once, and the same links.
    let mut late: Vec<&str> = CLAUDE_HTTP.to_vec();
    let report = late.remove(6);
    assert!(report.contains("mcp_interval"));
    let at = late
        .iter()
        .position(|l| l.contains(r#""response":"r2","request""#))
        .unwrap();
    let moved = report.replace(r#""t":2102"#, r#""t":2600"#);
    late.insert(at + 1, &moved);
    let s = spans(&late);
    let call = one(&s, "execute_tool echo");
    assert_eq!(string(call, "windowtap.decision"), Some("attributed"));
    assert_eq!(
        causal(call).iter().map(|c| c.0).collect::<Vec<_>>(),
        ["generation", "continuation"]
    );
    assert_eq!(call.links[1].span_id, chat(&s, "r2").span_id);
}

#[test]
fn a_call_whose_continuation_never_got_a_response_goes_out_at_the_end_without_that_link() {
    // The continuation is sent, but its exchange ends with no response; then the run ends.
    let mut lines = CLAUDE_HTTP[..9].to_vec();
    assert!(lines[8].contains(r#""request":"q2""#));
    lines.push(r#"{"type":"stream_close","t":2300,"stream":"h2"}"#);
    let s = spans(&lines);
    let call = one(&s, "execute_tool echo");
    assert_eq!(string(call, "windowtap.decision"), Some("attributed"));
    assert_eq!(
        causal(call).iter().map(|c| c.0).collect::<Vec<_>>(),
        ["generation"]
    );
}

#[test]
fn a_websocket_request_joins_by_its_own_context_and_the_others_do_not() {
    let p = HostParent {
        trace: [0xcd; 16],
        span: [0x33; 8],
    };
    let evs = events(CODEX);
    let recs = records(&evs);
    let door = Door::replay();
    let cleared: Vec<_> = recs.iter().map(|r| door.record(r).unwrap()).collect();
    let mut tree = Tree::new(
        SourceKey::for_file("a.jsonl", [7; 32]),
        1_000_000_000,
        Door::replay(),
        Millis::INFINITY,
    );
    tree.join_request("q2", p);
    let mut s = Vec::new();
    interleave(tree, evs.into_iter(), &cleared, |x| s.push(x));
    let r2 = chat(&s, "r2");
    assert_eq!(
        (r2.trace_id.clone(), r2.parent_span_id.clone()),
        (p.trace.to_vec(), p.span.to_vec())
    );
    for r in ["r1", "r3"] {
        assert_ne!(chat(&s, r).trace_id, p.trace.to_vec(), "{r}");
    }
    // The call stays under r1, which asked for it; its continuation link crosses into the
    // host's trace.
    let call = one(&s, "execute_tool echo");
    assert!(is_child(call, chat(&s, "r1")));
    assert_eq!(call.links[1].trace_id, p.trace.to_vec());
}

/// The subagent turns of `thread` (its `invoke_agent` spans).
fn turns_of<'a>(spans: &'a [Span], thread: &str) -> Vec<&'a Span> {
    spans
        .iter()
        .filter(|s| s.name.starts_with("invoke_agent") && string(s, "session.id") == Some(thread))
        .collect()
}

/// The span ids a span links to with `role`.
fn linked(s: &Span, role: &str) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = s
        .links
        .iter()
        .filter(|l| link_attr(l, "windowtap.link") == Some(role))
        .map(|l| l.span_id.clone())
        .collect();
    v.sort();
    v
}

/// Claude Code: one response launches two `Agent` subagents at once (real-host scenario
/// `claude-subagent-parallel`); each subagent calls the MCP tool and the calls overlap. The
/// trace does not say which `Agent` call started which thread.
const CLAUDE_PARALLEL: &[&str] = &[
    r#"{"type":"stream_open","t":0,"stream":"m1","client":"claude","transport":"http","thread":"sess","host":"h1"}"#,
    r#"{"type":"request","t":1,"stream":"m1","request":"qm1","previous_response":null,"outputs":[]}"#,
    r#"{"type":"response_start","t":50,"stream":"m1","response":"rm1","request":"qm1"}"#,
    r#"{"type":"tool_call","t":200,"stream":"m1","response":"rm1","call":"toolu_ag1","item":null,"name":"Agent","namespace":null,"kind":"tool_use"}"#,
    r#"{"type":"tool_call","t":201,"stream":"m1","response":"rm1","call":"toolu_ag2","item":null,"name":"Agent","namespace":null,"kind":"tool_use"}"#,
    r#"{"type":"response_end","t":210,"stream":"m1","response":"rm1","status":"completed"}"#,
    r#"{"type":"stream_open","t":300,"stream":"a1","client":"claude","transport":"http","thread":"sess:A","host":"h1"}"#,
    r#"{"type":"stream_open","t":301,"stream":"b1","client":"claude","transport":"http","thread":"sess:B","host":"h1"}"#,
    r#"{"type":"request","t":302,"stream":"a1","request":"qa1","previous_response":null,"outputs":[]}"#,
    r#"{"type":"request","t":303,"stream":"b1","request":"qb1","previous_response":null,"outputs":[]}"#,
    r#"{"type":"response_start","t":350,"stream":"a1","response":"ra1","request":"qa1"}"#,
    r#"{"type":"response_start","t":351,"stream":"b1","response":"rb1","request":"qb1"}"#,
    r#"{"type":"tool_call","t":500,"stream":"a1","response":"ra1","call":"toolu_a","item":null,"name":"mcp__probe__echo","namespace":null,"kind":"tool_use"}"#,
    r#"{"type":"tool_call","t":501,"stream":"b1","response":"rb1","call":"toolu_b","item":null,"name":"mcp__probe__echo","namespace":null,"kind":"tool_use"}"#,
    r#"{"type":"response_end","t":510,"stream":"a1","response":"ra1","status":"completed"}"#,
    r#"{"type":"response_end","t":511,"stream":"b1","response":"rb1","status":"completed"}"#,
    r#"{"type":"mcp_interval","t":3600,"interval":"ia","alias":"probe","tool":"echo","start":520,"end":3520,"outcome":"result","tool_use_id":"toolu_a","item_id":null,"call_id":null,"thread":null,"host":"h1"}"#,
    r#"{"type":"mcp_interval","t":3601,"interval":"ib","alias":"probe","tool":"echo","start":530,"end":3530,"outcome":"result","tool_use_id":"toolu_b","item_id":null,"call_id":null,"thread":null,"host":"h1"}"#,
    r#"{"type":"stream_open","t":3610,"stream":"a2","client":"claude","transport":"http","thread":"sess:A","host":"h1"}"#,
    r#"{"type":"request","t":3611,"stream":"a2","request":"qa2","previous_response":null,"outputs":["toolu_a"]}"#,
    r#"{"type":"response_start","t":3650,"stream":"a2","response":"ra2","request":"qa2"}"#,
    r#"{"type":"response_end","t":3700,"stream":"a2","response":"ra2","status":"completed"}"#,
    r#"{"type":"stream_open","t":3701,"stream":"b2","client":"claude","transport":"http","thread":"sess:B","host":"h1"}"#,
    r#"{"type":"request","t":3720,"stream":"b2","request":"qb2","previous_response":null,"outputs":["toolu_b"]}"#,
    r#"{"type":"response_start","t":3750,"stream":"b2","response":"rb2","request":"qb2"}"#,
    r#"{"type":"response_end","t":3800,"stream":"b2","response":"rb2","status":"completed"}"#,
    r#"{"type":"request","t":3900,"stream":"m1","request":"qm2","previous_response":null,"outputs":["toolu_ag1","toolu_ag2"]}"#,
    r#"{"type":"response_start","t":3950,"stream":"m1","response":"rm2","request":"qm2"}"#,
    r#"{"type":"response_end","t":4000,"stream":"m1","response":"rm2","status":"completed"}"#,
];

/// Several candidate calls: each subagent's turn sits under the parent's turn with a link to
/// every candidate; its MCP call under its own subagent's response.
fn assert_parallel_subagents(
    s: &[Span],
    parent_thread: &str,
    subagents: &[(&str, &str)],
    spawn: &str,
) {
    assert_tree_is_whole(s);
    let main = turns_of(s, parent_thread);
    assert_eq!(main.len(), 1, "{:?}", names(s));
    let main = main[0];
    assert!(main.parent_span_id.is_empty());
    let spawns = named(s, &format!("execute_tool {spawn}"));
    assert_eq!(spawns.len(), 2, "{:?}", names(s));
    let mut spawn_ids: Vec<Vec<u8>> = spawns.iter().map(|c| c.span_id.clone()).collect();
    spawn_ids.sort();
    for (thread, response) in subagents {
        let turns = turns_of(s, thread);
        assert!(!turns.is_empty(), "no turn of {thread}");
        for t in &turns {
            assert!(is_child(t, main), "{thread}: under the parent's turn");
            assert_eq!(string(t, "windowtap.turn.kind"), Some("subagent"));
            assert_eq!(int(t, "windowtap.turn.spawn_candidates"), Some(2));
            assert_eq!(
                linked(t, "spawn_candidate"),
                spawn_ids,
                "{thread}: a link to each"
            );
        }
        let calls: Vec<&Span> = named(s, "execute_tool echo")
            .into_iter()
            .filter(|c| is_child(c, chat(s, response)))
            .collect();
        assert_eq!(
            calls.len(),
            1,
            "{thread}: its call under its own response {response}"
        );
        assert_eq!(string(calls[0], "windowtap.decision"), Some("attributed"));
        assert!(is_child(chat(s, response), turns[0]));
    }
}

#[test]
fn parallel_claude_subagents_sit_under_the_parents_turn_linked_to_each_agent_call() {
    let s = spans(CLAUDE_PARALLEL);
    assert_parallel_subagents(&s, "sess", &[("sess:A", "ra1"), ("sess:B", "rb1")], "Agent");
    // The Agent calls run until the request that carries their results.
    for c in named(&s, "execute_tool Agent") {
        assert_eq!(c.end_time_unix_nano, 1_000_000_000 + 3_900_000_000);
    }
}

#[test]
fn parallel_codex_subagents_sit_under_the_parents_turn_linked_to_each_spawn_call() {
    // traces/codex_parallel_subagents.jsonl: two spawn_agent calls in one response.
    let text = include_str!("../../../traces/codex_parallel_subagents.jsonl");
    let lines: Vec<&str> = text.lines().skip(1).collect();
    let s = spans(&lines);
    assert_parallel_subagents(
        &s,
        "thP",
        &[("thC1", "rC1"), ("thC2", "rC2")],
        "spawn_agent",
    );
}

/// Codex: one spawn_agent call, answered at once (the parent's next request carries its
/// output before the subagent's first request): the subagent's turn still sits under it.
const CODEX_ONE_SPAWN: &[&str] = &[
    r#"{"type":"stream_open","t":0,"stream":"sP","client":"codex","transport":"http","thread":"thP","host":"hC"}"#,
    r#"{"type":"request","t":10,"stream":"sP","request":"qP1","previous_response":null,"outputs":[]}"#,
    r#"{"type":"response_start","t":20,"stream":"sP","response":"rP1","request":"qP1"}"#,
    r#"{"type":"tool_call","t":100,"stream":"sP","response":"rP1","call":"call_s","item":"fc_s","name":"spawn_agent","namespace":"multi_agent_v1","kind":"function"}"#,
    r#"{"type":"response_end","t":110,"stream":"sP","response":"rP1","status":"completed"}"#,
    r#"{"type":"stream_close","t":111,"stream":"sP"}"#,
    r#"{"type":"stream_open","t":150,"stream":"sP2","client":"codex","transport":"http","thread":"thP","host":"hC"}"#,
    r#"{"type":"request","t":151,"stream":"sP2","request":"qP2","previous_response":null,"outputs":["call_s"]}"#,
    r#"{"type":"response_start","t":160,"stream":"sP2","response":"rP2","request":"qP2"}"#,
    r#"{"type":"response_end","t":170,"stream":"sP2","response":"rP2","status":"completed"}"#,
    r#"{"type":"stream_close","t":171,"stream":"sP2"}"#,
    r#"{"type":"stream_open","t":200,"stream":"sC","client":"codex","transport":"http","thread":"thC","host":"hC"}"#,
    r#"{"type":"request","t":201,"stream":"sC","request":"qC1","previous_response":null,"outputs":[]}"#,
    r#"{"type":"response_start","t":210,"stream":"sC","response":"rC1","request":"qC1"}"#,
    r#"{"type":"response_end","t":300,"stream":"sC","response":"rC1","status":"completed"}"#,
    r#"{"type":"stream_close","t":301,"stream":"sC"}"#,
    r#"{"type":"stream_open","t":400,"stream":"sC2","client":"codex","transport":"http","thread":"thC","host":"hC"}"#,
    r#"{"type":"request","t":401,"stream":"sC2","request":"qC2","previous_response":null,"outputs":[]}"#,
    r#"{"type":"response_start","t":410,"stream":"sC2","response":"rC2","request":"qC2"}"#,
    r#"{"type":"response_end","t":420,"stream":"sC2","response":"rC2","status":"completed"}"#,
    r#"{"type":"stream_close","t":421,"stream":"sC2"}"#,
    // Another thread of another host: not a subagent of this spawn.
    r#"{"type":"stream_open","t":500,"stream":"sX","client":"codex","transport":"http","thread":"thX","host":"hX"}"#,
    r#"{"type":"request","t":501,"stream":"sX","request":"qX","previous_response":null,"outputs":[]}"#,
    r#"{"type":"response_start","t":510,"stream":"sX","response":"rX","request":"qX"}"#,
    r#"{"type":"response_end","t":520,"stream":"sX","response":"rX","status":"completed"}"#,
];

#[test]
fn a_codex_subagent_sits_under_its_one_spawn_call_even_after_it_answered() {
    let s = spans(CODEX_ONE_SPAWN);
    assert_tree_is_whole(&s);
    let spawn = one(&s, "execute_tool spawn_agent");
    assert!(is_child(spawn, chat(&s, "rP1")));
    assert_eq!(spawn.end_time_unix_nano, 1_000_000_000 + 151_000_000);
    let sub = turns_of(&s, "thC");
    assert_eq!(sub.len(), 2, "both of the subagent's turns");
    for t in sub {
        assert!(is_child(t, spawn));
        assert!(t.links.is_empty());
        assert_eq!(int(t, "windowtap.turn.spawn_candidates"), None);
    }
    let other = turns_of(&s, "thX");
    assert!(
        other[0].parent_span_id.is_empty(),
        "another host's thread is a root"
    );
}
