//! `windowtap wrap` around a server of the MCP 2026-07-28 revision that asks for input by
//! Multi Round-Trip Requests (tests/fixtures/mcp/mrtr_server.py), with this test as the client
//! that answers: every round passes through byte for byte, and the call is reported once,
//! with its rounds and its wait on the client. Canaries planted in the request state and in
//! the client's answers appear in no output.

mod wrap_support;

use correlator::{EventKind, Outcome, Rounds};
use serde_json::{json, Value};
use wrap_support::*;

const STATE_CANARY: &str = "CANARY-mrtr-state-7f3a";
const ANSWER_CANARY: &str = "CANARY-mrtr-answer-91bd";

fn python() -> bool {
    if have("python3") {
        return true;
    }
    eprintln!("SKIPPED: python3 is not installed; the MRTR server needs it");
    false
}

fn server() -> Vec<String> {
    vec![
        "python3".to_string(),
        fixture("mrtr_server.py").display().to_string(),
    ]
}

/// A request of the 2026-07-28 revision: `_meta` on every one, no `initialize`.
fn request(id: Value, method: &str, mut params: Value) -> Value {
    params["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
    params["_meta"]["io.modelcontextprotocol/clientCapabilities"] = json!({"elicitation":{}});
    json!({"jsonrpc":"2.0","id":id,"method":method,"params":params})
}

/// The wrapped session up to an `input_required` answer to `ask` (id 1); returns the state.
fn first_round(w: &mut Wrapped) -> Value {
    w.send_json(&request(json!("d"), "server/discover", json!({})));
    assert_eq!(
        w.response(json!("d"))["result"]["supportedVersions"][0],
        "2026-07-28"
    );
    w.send_json(&request(
        json!(1),
        "tools/call",
        json!({"name":"ask","arguments":{"token":STATE_CANARY},
               "_meta":{"claudecode/toolUseId":"toolu_mrtr"}}),
    ));
    let first = w.response(json!(1));
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    let state = first["result"]["requestState"].clone();
    assert!(state.is_string(), "{first}");
    state
}

fn no_canary(text: &str, what: &str) {
    for canary in [STATE_CANARY, ANSWER_CANARY] {
        assert!(!text.contains(canary), "{canary} in {what}: {text}");
    }
}

#[test]
fn a_two_round_call_is_one_interval_with_its_rounds() {
    if !python() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ingest = Ingest::start(&dir.path().join("ingest.sock"));
    let mut w = Wrapped::start("mrtr", Some(&ingest.path), &as_strs(&server()));

    let state = first_round(&mut w);
    // The client answers the elicitation and retries under a new id with the state.
    w.send_json(&request(
        json!(2),
        "tools/call",
        json!({"name":"ask","arguments":{"token":STATE_CANARY},
               "_meta":{"claudecode/toolUseId":"toolu_mrtr"},
               "inputResponses":{"confirm":{"action":"accept","content":{"answer":ANSWER_CANARY}}},
               "requestState":state}),
    ));
    let done = w.response(json!(2));
    assert_eq!(
        done["result"]["content"][0]["text"],
        format!("done: {ANSWER_CANARY}"),
        "the server saw the answers and its own state: {done}"
    );
    let (status, _, stderr) = w.wait();
    assert_eq!(status.code(), Some(0), "stderr: {stderr}");

    let (events, text) = ingest.stop_after_text(1);
    let intervals = intervals(&started(events.clone()));
    assert_eq!(
        intervals.len(),
        1,
        "one call, not one per round: {events:?}"
    );
    let i = &intervals[0];
    assert_eq!(
        (i.tool.as_str(), i.outcome, i.hints.tool_use_id.clone()),
        ("ask", Outcome::Result, Some(pseudo("toolu_mrtr")))
    );
    let rounds = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::McpInterval { rounds, .. } => Some(*rounds),
            _ => None,
        })
        .unwrap();
    let Some(Rounds {
        rounds: 2,
        input_wait,
        unanswered: false,
    }) = rounds
    else {
        panic!("two rounds: {rounds:?}");
    };
    assert!(
        input_wait <= i.end - i.start,
        "{input_wait} within the call"
    );
    assert!(text.contains("\"rounds\":2"), "{text}");
    no_canary(&text, "the ingest output");
    no_canary(&stderr, "the wrapper's stderr");
}

#[test]
fn a_round_that_never_gets_its_retry_ends_unanswered_when_the_pipe_ends() {
    if !python() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ingest = Ingest::start(&dir.path().join("ingest.sock"));
    let mut w = Wrapped::start("mrtr", Some(&ingest.path), &as_strs(&server()));
    first_round(&mut w);
    // The host never answers: it closes the pipe.
    w.close_stdin();
    let (status, _, stderr) = w.wait();
    assert_eq!(status.code(), Some(0), "stderr: {stderr}");

    let (events, text) = ingest.stop_after_text(1);
    let intervals = intervals(&events);
    assert_eq!(intervals.len(), 1, "{events:?}");
    assert_eq!(intervals[0].outcome, Outcome::Cancelled);
    let rounds = events.iter().find_map(|e| match &e.kind {
        EventKind::McpInterval { rounds, .. } => *rounds,
        _ => None,
    });
    assert!(
        matches!(
            rounds,
            Some(Rounds {
                rounds: 1,
                unanswered: true,
                ..
            })
        ),
        "{rounds:?}"
    );
    assert!(
        text.contains("\"outcome_detail\":\"input_unanswered\""),
        "{text}"
    );
    no_canary(&text, "the ingest output");
    no_canary(&stderr, "the wrapper's stderr");
}

fn as_strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}
