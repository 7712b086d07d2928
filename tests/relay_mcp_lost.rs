//! No MCP call that started is ever missing from the records (docs/design.md §4), whatever stops
//! the relay or the wrapper: the relay binary, a scripted upstream and `windowtap wrap`
//! around the tiny MCP server (tests/fixtures/mcp/tiny_server.py), on real sockets.
//!
//! - During the drain after SIGINT the ingest socket still takes reports: a call that ends
//!   then gets its real outcome; a call still running when the drain ends ends `lost`.
//! - A wrapper whose connection drops mid-call: its call ends `lost` there and then.
//! - Either way the capture has the `mcp_interval`, and replaying it gives the same records.
//!
//! Every wait is bounded.

mod support;
mod wrap_support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;
use wrap_support::{call, fixture, have, init_request, Wrapped};

fn python() -> bool {
    if have("python3") {
        return true;
    }
    eprintln!("SKIPPED: python3 is not installed; the tiny MCP server needs it");
    false
}

/// Waits (bounded) until the capture holds `n` events of type `ty`.
fn wait_capture(capture: &Path, ty: &str, n: usize, relay: &Relay) {
    let deadline = Instant::now() + WAIT;
    while capture_of_type(capture, ty).len() < n {
        assert!(
            Instant::now() < deadline,
            "the capture never had {n} {ty}: {}\n{}",
            std::fs::read_to_string(capture).unwrap_or_default(),
            relay.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn tiny() -> Vec<String> {
    vec![
        "python3".to_string(),
        fixture("tiny_server.py").display().to_string(),
    ]
}

/// `windowtap wrap --alias ALIAS --ingest (the relay's)` around the tiny server, initialized.
fn wrapped(alias: &str, relay: &Relay) -> Wrapped {
    let server = tiny();
    let server: Vec<&str> = server.iter().map(String::as_str).collect();
    let mut w = Wrapped::start(alias, Some(&relay.ingest), &server);
    w.send_json(&init_request(json!(0)));
    w.response(json!(0));
    w
}

/// The attribution records in `path`.
fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["type"] == "attribution")
        .collect()
}

/// The outcome the capture's `mcp_interval` gives the interval `id` (a pseudonym, as in
/// the records).
fn outcome(capture: &Path, id: &str) -> String {
    let found: Vec<Value> = capture_of_type(capture, "mcp_interval")
        .into_iter()
        .filter(|e| e["interval"] == id)
        .collect();
    assert_eq!(found.len(), 1, "one mcp_interval for {id}: {found:?}");
    found[0]["outcome"].as_str().unwrap().to_string()
}

/// `windowtap replay CAPTURE` gives exactly the records the live run wrote.
fn assert_replays_to(capture: &Path, records_path: &Path) {
    let replayed: Vec<Value> = checked_replay(capture)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["type"] == "attribution")
        .collect();
    assert_eq!(replayed, records(records_path), "replay equals live");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_running_at_sigint_end_during_the_drain_or_lost_and_every_one_is_recorded() {
    if !python() {
        return;
    }
    let (up, mut fed) = scripted_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let (mut relay, records_path, capture) = anthropic_relay_with_files(&up, dir.path(), 20_000);

    // The model asks for two MCP calls; both start.
    let calls = [
        ("toolu_g", "mcp__gated__gate"),
        ("toolu_h", "mcp__stuck__hang"),
    ];
    let body = open_stream(
        &relay,
        json!({"model":"claude","stream":true,"messages":[{"role":"user","content":"hi"}]}),
    )
    .await;
    let tx = next_feed(&mut fed).await;
    feed(&tx, &claude_turn("msg_1", &calls)).await;
    drop(tx);
    collect(body).await.unwrap();
    let gate = dir.path().join("open");
    let mut gated = wrapped("gated", &relay);
    gated.send_json(&call(
        json!(1),
        "gate",
        json!({"path": gate.display().to_string()}),
        json!({"claudecode/toolUseId":"toolu_g"}),
    ));
    // The host of this one is gone for good (killed, say): its wrapper runs on, the call too.
    let mut stuck = wrapped("stuck", &relay);
    stuck.send_json(&call(
        json!(1),
        "hang",
        json!({}),
        json!({"claudecode/toolUseId":"toolu_h"}),
    ));
    wait_capture(&capture, "mcp_start", 2, &relay);

    // A stream in flight keeps the relay draining after the signal.
    let mut body = open_stream(
        &relay,
        json!({"model":"claude","stream":true,"messages":[{"role":"user","content":"more"}]}),
    )
    .await;
    let tx = next_feed(&mut fed).await;
    let text = claude_turn("msg_2", &[]);
    feed(&tx, &text[..1]).await;
    let _ = http_body_util::BodyExt::frame(&mut body).await;

    relay.signal(Signal::INT);
    relay.wait_log("draining");
    // The gated call ends during the drain: its report must still be taken.
    std::fs::write(&gate, b"").unwrap();
    assert_eq!(
        gated.response(json!(1))["result"]["content"][0]["text"],
        "open"
    );
    wait_capture(&capture, "mcp_interval", 1, &relay);

    feed(&tx, &text[1..]).await;
    drop(tx);
    collect(body).await.unwrap();
    let status = relay.wait_exit();
    assert!(status.success(), "{status:?}: {}", relay.log());
    assert_checks_clean(&records_path);
    assert_checks_clean(&capture);

    let recs = records(&records_path);
    let mut tools: Vec<&str> = recs.iter().map(|r| r["tool"].as_str().unwrap()).collect();
    tools.sort();
    assert_eq!(
        tools,
        ["gate", "hang"],
        "every call has a record: {recs:?}\n{}\n{}",
        std::fs::read_to_string(&capture).unwrap(),
        relay.log()
    );
    for r in &recs {
        let id = r["interval"].as_str().unwrap();
        let want = if r["tool"] == "gate" {
            "result"
        } else {
            "lost"
        };
        assert_eq!(outcome(&capture, id), want, "{r}");
    }
    assert_replays_to(&capture, &records_path);
    // The stuck wrapper is still running: the relay ended its call, not the wrapper.
    assert!(stuck.child.try_wait().unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrapper_that_goes_away_mid_call_ends_it_lost_there_and_then() {
    if !python() {
        return;
    }
    let (up, _fed) = scripted_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let (mut relay, records_path, capture) = anthropic_relay_with_files(&up, dir.path(), 20_000);

    let mut stuck = wrapped("stuck", &relay);
    stuck.send_json(&call(json!(1), "hang", json!({}), json!({})));
    wait_capture(&capture, "mcp_start", 1, &relay);
    stuck.child.kill().unwrap();
    // Ended while the relay runs on, not at its stop.
    wait_capture(&capture, "mcp_interval", 1, &relay);
    let deadline = Instant::now() + WAIT;
    while records(&records_path).is_empty() {
        assert!(Instant::now() < deadline, "no record while the relay runs");
        std::thread::sleep(Duration::from_millis(20));
    }

    assert!(relay.stop().success(), "{}", relay.log());
    let recs = records(&records_path);
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0]["tool"], "hang");
    assert_eq!(
        outcome(&capture, recs[0]["interval"].as_str().unwrap()),
        "lost"
    );
    assert_replays_to(&capture, &records_path);
}

/// A wrapped server that cannot start (a command not on `PATH`) or that exits before
/// answering anything is named, with why, in the relay's log when it happens and in the stop's
/// summary: before, the relay said `0 intervals` and nothing else (issue 40, "a silent zero").
#[test]
fn a_server_that_never_ran_is_named_in_the_log_and_at_the_stop() {
    let mut relay = Relay::start(&[]);
    let run = |alias: &str, server: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_windowtap"))
            .args(["wrap", "--alias", alias, "--ingest"])
            .arg(&relay.ingest)
            .arg("--")
            .args(server)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("running windowtap wrap");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = run("missing", &["windowtap-test-no-such-mcp-server"]);
    assert!(err.contains("starting the MCP server"), "{err}");
    let err = run("crashing", &["sh", "-c", "exit 3"]);
    assert!(
        err.contains("the MCP server `crashing` never ran: it exited with code 3"),
        "{err}"
    );
    // Logged when it happens, for a relay whose stop may be days away.
    relay.wait_log("server=missing");
    relay.wait_log("server=crashing");
    relay.stop();
    let log = relay.log();
    for line in [
        "windowtap relay: warning: MCP server `missing` never ran: its command was not found",
        "windowtap relay: warning: MCP server `crashing` never ran: it exited with code 3",
    ] {
        assert!(log.contains(line), "{line}\n{log}");
    }
    assert!(
        !log.contains("windowtap-test-no-such-mcp-server"),
        "the server's command is not written: {log}"
    );
}
