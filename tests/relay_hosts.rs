//! Host identity end to end (docs/design.md §3 "Host"), on real sockets and processes: two
//! stand-in hosts (tests/fixtures/host.py), each making a model request through the relay
//! and then an MCP call through `windowtap wrap` run as its child. Each stream's host is the
//! process holding its client connection, each call's host the wrapper's nearest ancestor
//! that made one; a wrapper whose ancestors never talked to the relay has no host.
//!
//! One test in this file: the test process itself must make no relay connection.

mod support;
mod wrap_support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;
use wrap_support::{call, fixture, have, init_request, Wrapped};

/// An Anthropic upstream answering every request with a turn that calls
/// `mcp__<session>__echo` as `toolu_<session>`.
async fn upstream() -> Upstream {
    Upstream::start(
        None,
        handler(|req| async move {
            let session = req
                .headers()
                .get("x-claude-code-session-id")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("none")
                .to_string();
            let _ = read_body(req.into_body()).await;
            let call = (format!("toolu_{session}"), format!("mcp__{session}__echo"));
            let text = claude_turn(&format!("msg_{session}"), &[(&call.0, &call.1)]).concat();
            sse_response(full(text))
        }),
    )
    .await
}

/// Starts the stand-in host for `alias` and waits (bounded) until its MCP call has its
/// answer; the host stays alive, its connection open, until the returned child's stdin is
/// closed.
fn run_host(relay: &Relay, alias: &str) -> std::process::Child {
    let mut child = Command::new("python3")
        .arg(fixture("../host.py"))
        .arg(relay.addr.port().to_string())
        .arg(env!("CARGO_BIN_EXE_windowtap"))
        .arg(&relay.ingest)
        .arg(alias)
        .arg(format!("toolu_{alias}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line);
        let _ = tx.send(line);
    });
    match rx.recv_timeout(WAIT) {
        Ok(line) if line.starts_with("done") => child,
        other => {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "host {alias} did not finish its call: {other:?}\n{}",
                relay.log()
            );
        }
    }
}

/// Lets a stand-in host end, and waits for it (bounded).
fn end_host(mut child: std::process::Child) {
    drop(child.stdin.take());
    let deadline = Instant::now() + WAIT;
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "a host did not end");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_and_calls_carry_the_host_process_they_came_from() {
    if !have("python3") {
        eprintln!("SKIPPED: python3 is not installed; the stand-in host needs it");
        return;
    }
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let (mut relay, _, capture) = relay_with_files(&up, "anthropic", dir.path(), &[]);

    let alpha = run_host(&relay, "alpha");
    let beta = run_host(&relay, "beta");
    // A wrapper of this test process, which never made a relay connection.
    let tiny = fixture("tiny_server.py").display().to_string();
    let mut w = Wrapped::start("orphan", Some(&relay.ingest), &["python3", &tiny]);
    w.send_json(&init_request(json!(0)));
    w.response(json!(0));
    w.send_json(&call(json!(1), "echo", json!({"text":"x"}), json!({})));
    w.response(json!(1));
    drop(w.wait());

    let deadline = Instant::now() + WAIT;
    while capture_of_type(&capture, "mcp_interval").len() < 3 {
        assert!(Instant::now() < deadline, "{}", relay.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    end_host(alpha);
    end_host(beta);
    assert!(relay.stop().success(), "{}", relay.log());
    assert_checks_clean(&capture);

    let opens = capture_of_type(&capture, "stream_open");
    assert_eq!(opens.len(), 2, "{opens:?}");
    let stream_hosts: Vec<&str> = opens
        .iter()
        .map(|o| {
            o["host"]
                .as_str()
                .unwrap_or_else(|| panic!("a stream's host is known: {o}\n{}", relay.log()))
        })
        .collect();
    assert_ne!(stream_hosts[0], stream_hosts[1], "two processes, two hosts");
    // Streams were opened in the order the hosts ran.
    for (alias, want) in [
        ("alpha", Some(stream_hosts[0])),
        ("beta", Some(stream_hosts[1])),
        ("orphan", None),
    ] {
        for ty in ["mcp_start", "mcp_interval"] {
            let evs: Vec<Value> = capture_of_type(&capture, ty)
                .into_iter()
                .filter(|e| e["alias"] == alias)
                .collect();
            assert_eq!(evs.len(), 1, "{ty} of {alias}");
            assert_eq!(evs[0]["host"].as_str(), want, "{ty} of {alias}");
        }
    }
}
