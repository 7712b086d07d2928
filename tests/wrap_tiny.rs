//! `windowtap wrap` around a tiny MCP server of our own (tests/fixtures/mcp/tiny_server.py):
//! exact bytes for giant lines and invalid UTF-8, a server crash mid-call, a missing relay,
//! a relay that appears later, and signal forwarding.

mod wrap_support;

use correlator::{EventKind, Hints, Outcome};
use serde_json::json;
use wrap_support::*;

fn python() -> bool {
    if have("python3") {
        return true;
    }
    eprintln!("SKIPPED: python3 is not installed; the tiny MCP server needs it");
    false
}

fn tiny(logs: Option<&std::path::Path>) -> Vec<String> {
    let mut v = vec![
        "python3".to_string(),
        fixture("tiny_server.py").display().to_string(),
    ];
    if let Some(dir) = logs {
        v.push("--log-in".into());
        v.push(dir.join("in.bin").display().to_string());
        v.push("--log-out".into());
        v.push(dir.join("out.bin").display().to_string());
    }
    v
}

fn start(alias: &str, ingest: Option<&std::path::Path>, server: &[String]) -> Wrapped {
    let server: Vec<&str> = server.iter().map(String::as_str).collect();
    Wrapped::start(alias, ingest, &server)
}

#[test]
fn giant_lines_and_invalid_utf8_pass_through_exactly_and_calls_are_reported() {
    if !python() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ingest = Ingest::start(&dir.path().join("ingest.sock"));
    let mut w = start("tiny", Some(&ingest.path), &tiny(Some(dir.path())));

    w.send_json(&init_request(json!(0)));
    w.response(json!(0));
    // 64 MiB that is not JSON, then bytes that are not UTF-8: both come back as "ack ...".
    let mut giant = vec![b'A'; 64 << 20];
    giant.push(b'\n');
    w.send(&giant);
    w.send(b"\xff\xfe{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\"}\xc3\n");
    w.send_json(&call(
        json!(1),
        "echo",
        json!({"text":"hi"}),
        json!({"claudecode/toolUseId":"toolu_01"}),
    ));
    w.send_json(&call(json!("g"), "giant", json!({}), json!({})));
    w.send_json(&call(
        json!(2),
        "fail",
        json!({}),
        json!({"itemId":"fc_1","callId":"call_1","threadId":"th_1","x-codex-turn-metadata":{"turn_id":"t"}}),
    ));
    assert_eq!(w.response(json!(1))["result"]["content"][0]["text"], "hi");
    let big = w.response(json!("g"));
    assert_eq!(
        big["result"]["content"][0]["text"].as_str().unwrap().len(),
        64 << 20
    );
    assert_eq!(w.response(json!(2))["result"]["isError"], true);
    let sent = w.sent.clone();
    let (status, received, stderr) = w.wait();
    assert_eq!(status.code(), Some(0), "stderr: {stderr}");

    let server_in = std::fs::read(dir.path().join("in.bin")).unwrap();
    let server_out = std::fs::read(dir.path().join("out.bin")).unwrap();
    assert!(
        server_in == sent,
        "the server received exactly what the client sent"
    );
    assert!(
        server_out == received,
        "the client received exactly what the server wrote"
    );
    assert!(
        received.windows(6).any(|w| w == b"ack \xff\xfe"),
        "invalid UTF-8 came back untouched"
    );

    let events = started(ingest.stop_after(3));
    let got = intervals(&events);
    let summary: Vec<(&str, &str, Outcome)> = got
        .iter()
        .map(|i| (i.alias.as_str(), i.tool.as_str(), i.outcome))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("tiny", "echo", Outcome::Result),
            ("tiny", "giant", Outcome::Result),
            ("tiny", "fail", Outcome::Error)
        ]
    );
    assert_eq!(
        got[0].hints,
        Hints {
            tool_use_id: Some(pseudo("toolu_01")),
            ..Hints::default()
        }
    );
    assert_eq!(
        got[2].hints,
        Hints {
            tool_use_id: None,
            item_id: Some(pseudo("fc_1")),
            call_id: Some(pseudo("call_1")),
            thread: Some(pseudo("th_1")),
        }
    );
    let starts = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::McpStart { .. }))
        .count();
    assert_eq!(starts, 3, "the line with invalid UTF-8 started nothing");
    let mut ids: Vec<&str> = got.iter().map(|i| i.interval.as_str()).collect();
    ids.dedup();
    assert_eq!(ids.len(), 3, "interval ids are distinct");
}

#[test]
fn a_server_crash_mid_call_is_lost_and_its_exit_code_propagates() {
    if !python() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ingest = Ingest::start(&dir.path().join("ingest.sock"));
    let mut w = start("tiny", Some(&ingest.path), &tiny(None));
    // Claude Code's opening: a server/discover probe (string id), refused, then initialize.
    w.send_json(
        &json!({"jsonrpc":"2.0","id":"server-discover-probe-1","method":"server/discover",
        "params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}),
    );
    assert_eq!(
        w.response(json!("server-discover-probe-1"))["error"]["code"],
        -32601
    );
    w.send_json(&init_request(json!(0)));
    w.response(json!(0));
    w.send_json(&call(json!(1), "echo", json!({"text":"before"}), json!({})));
    w.response(json!(1));
    w.send_json(&call(
        json!(2),
        "crash",
        json!({}),
        json!({"claudecode/toolUseId":"toolu_c"}),
    ));
    let (status, _, stderr) = w.wait();
    assert_eq!(status.code(), Some(3), "stderr: {stderr}");
    assert!(
        stderr.contains("tiny: crashing"),
        "the server's stderr is inherited: {stderr}"
    );

    let got = intervals(&started(ingest.stop_after(2)));
    assert_eq!(got.len(), 2);
    assert_eq!(
        (got[0].tool.as_str(), got[0].outcome),
        ("echo", Outcome::Result)
    );
    assert_eq!(
        (got[1].tool.as_str(), got[1].outcome),
        ("crash", Outcome::Lost)
    );
    assert_eq!(
        got[1].hints.tool_use_id.as_deref(),
        Some(pseudo("toolu_c").as_str())
    );
}

#[test]
fn without_a_relay_the_session_works_warns_once_and_counts_what_it_dropped() {
    if !python() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let nowhere = dir.path().join("no-relay.sock");
    let mut w = start("tiny", Some(&nowhere), &tiny(None));
    w.send_json(&init_request(json!(0)));
    w.response(json!(0));
    for id in 1..=3 {
        w.send_json(&call(
            json!(id),
            "echo",
            json!({"text": format!("t{id}")}),
            json!({}),
        ));
        assert_eq!(
            w.response(json!(id))["result"]["content"][0]["text"],
            format!("t{id}")
        );
    }
    let (status, _, stderr) = w.wait();
    assert_eq!(status.code(), Some(0), "stderr: {stderr}");
    assert_eq!(
        stderr.matches("warning").count(),
        1,
        "one warning: {stderr}"
    );
    // Three calls, each a start and an end report: counted as calls.
    assert!(stderr.contains("3 call(s) not reported"), "{stderr}");
}

#[test]
fn a_relay_that_comes_up_later_is_picked_up() {
    if !python() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("ingest.sock");
    let mut w = start("tiny", Some(&sock), &tiny(None));
    w.send_json(&init_request(json!(0)));
    w.response(json!(0));
    w.send_json(&call(json!(1), "echo", json!({"text":"early"}), json!({})));
    w.response(json!(1));
    // Only once the wrapper has found no relay does the relay come up.
    w.wait_stderr("warning");
    let ingest = Ingest::start(&sock);
    // The wrapper looks for the relay again about once a second: 8 calls a quarter of a second
    // apart span two of its retries.
    for id in 2..10 {
        w.send_json(&call(json!(id), "echo", json!({"text":"late"}), json!({})));
        w.response(json!(id));
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    let (status, _, stderr) = w.wait();
    assert_eq!(status.code(), Some(0), "stderr: {stderr}");
    // The first report through may be an end whose start was dropped: no start check here.
    let got = intervals(&ingest.stop_after(1));
    assert!(
        !got.is_empty(),
        "reports arrived once the relay was up; stderr: {stderr}"
    );
    assert!(got
        .iter()
        .all(|i| i.interval != got[0].interval || i.tool == "echo"));
    assert!(got
        .iter()
        .all(|i| i.tool == "echo" && i.outcome == Outcome::Result));
    assert!(
        stderr.contains("dropped"),
        "the early reports were dropped and counted: {stderr}"
    );
}

#[test]
fn sigint_and_sigterm_reach_the_server_and_its_fate_is_the_exit_code() {
    if !python() {
        return;
    }
    for (sig, want) in [
        (Signal::INT, 42),
        (Signal::TERM, 128 + Signal::TERM.as_raw()),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let ingest = Ingest::start(&dir.path().join("ingest.sock"));
        let mut w = start("tiny", Some(&ingest.path), &tiny(None));
        w.send_json(&init_request(json!(0)));
        w.response(json!(0));
        w.send_json(&call(json!("h"), "hang", json!({}), json!({})));
        // The server has read the hang call once it answers the next request.
        w.send_json(&json!({"jsonrpc":"2.0","id":"l","method":"tools/list"}));
        w.response(json!("l"));
        signal(w.child.id(), sig);
        // Stdin stays open: the signal alone must end the server.
        let (status, _, stderr) = w.wait_open();
        assert_eq!(
            status.code(),
            Some(want),
            "signal {sig:?}; stderr: {stderr}"
        );
        let got = intervals(&started(ingest.stop_after(1)));
        assert_eq!(got.len(), 1);
        assert_eq!(
            (got[0].tool.as_str(), got[0].outcome),
            ("hang", Outcome::Lost)
        );
    }
}

#[test]
fn a_relay_that_goes_away_and_comes_back_is_picked_up_again() {
    if !python() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("ingest.sock");
    let first = Ingest::start(&sock);
    let mut w = start("tiny", Some(&sock), &tiny(None));
    w.send_json(&init_request(json!(0)));
    w.response(json!(0));
    w.send_json(&call(json!(1), "echo", json!({"text":"one"}), json!({})));
    w.response(json!(1));
    let before = intervals(&started(first.stop_after(1)));
    assert_eq!(before.len(), 1);
    // The relay is gone: the next reports fail, once warned about.
    w.send_json(&call(json!(2), "echo", json!({"text":"two"}), json!({})));
    w.response(json!(2));
    w.wait_stderr("warning");
    let second = Ingest::start(&sock);
    for id in 3..11 {
        w.send_json(&call(json!(id), "echo", json!({"text":"again"}), json!({})));
        w.response(json!(id));
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    let after = intervals(&second.stop_after(1));
    let (status, _, stderr) = w.wait();
    assert_eq!(status.code(), Some(0), "stderr: {stderr}");
    assert!(!after.is_empty());
    assert!(
        after.iter().all(|i| i.interval != before[0].interval),
        "no report is sent twice"
    );
    assert_eq!(stderr.matches("warning").count(), 1, "{stderr}");
}

#[test]
fn without_a_path_the_wrapper_finds_the_relay_at_its_default_place() {
    if !python() {
        return;
    }
    let runtime = tempfile::tempdir().unwrap();
    let env = [("XDG_RUNTIME_DIR", runtime.path())];
    let ingest = Ingest::start_default(&env);
    assert_eq!(ingest.path, runtime.path().join("windowtap/ingest.sock"));
    let server = tiny(None);
    let server: Vec<&str> = server.iter().map(String::as_str).collect();
    let mut w = Wrapped::start_env("tiny", None, &server, &env);
    w.send_json(&init_request(json!(0)));
    w.response(json!(0));
    w.send_json(&call(json!(1), "echo", json!({"text":"found"}), json!({})));
    w.response(json!(1));
    let got = intervals(&started(ingest.stop_after(1)));
    let (status, _, stderr) = w.wait();
    assert_eq!(status.code(), Some(0), "stderr: {stderr}");
    assert_eq!(
        (got[0].tool.as_str(), got[0].outcome),
        ("echo", Outcome::Result)
    );
    assert!(!stderr.contains("warning"), "{stderr}");
}
