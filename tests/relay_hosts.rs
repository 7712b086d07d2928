//! Host identity end to end (docs/design.md §3 "Host"), on real sockets and processes: two
//! stand-in hosts (tests/fixtures/host.py), each making a model request through the relay
//! and then an MCP call through `windowtap wrap` run as its child. Each stream's host is the
//! process holding its client connection, each call's host the wrapper's nearest ancestor
//! that made one; a wrapper whose ancestors never talked to the relay has no host.
//!
//! Where the process cannot be known but the kernel says who is at the other end (§3): a
//! client run by another user id is that user's host (`uid:N`), and that stream's loss does
//! not make our user's call `incomplete`. With `--hosts off` every host is null.
//!
//! The test process itself never makes a relay connection (its wrappers' ancestors include
//! it): every connection comes from a child.

mod support;
mod wrap_support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;
use wrap_support::{call, fixture, have, init_request, Wrapped};

/// The senders of response bodies the upstream holds open (session `other`).
type Held = Arc<Mutex<Vec<tokio::sync::mpsc::Sender<Result<bytes::Bytes, std::io::Error>>>>>;

/// An Anthropic upstream answering every request with a turn that calls
/// `mcp__<session>__echo` as `toolu_<session>`.
async fn upstream() -> Upstream {
    upstream_holding(Held::default()).await
}

/// [`upstream`], except that the session `other` gets an event stream that stays open, its
/// body's sender kept in `held`, until the test lets it go.
async fn upstream_holding(held: Held) -> Upstream {
    Upstream::start(
        None,
        handler(move |req| {
            let held = held.clone();
            async move {
                let session = req
                    .headers()
                    .get("x-claude-code-session-id")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("none")
                    .to_string();
                let _ = read_body(req.into_body()).await;
                if session == "other" {
                    let (tx, body) = channel_body();
                    held.lock().unwrap().push(tx);
                    return sse_response(body);
                }
                let call = (format!("toolu_{session}"), format!("mcp__{session}__echo"));
                let text = claude_turn(&format!("msg_{session}"), &[(&call.0, &call.1)]).concat();
                sse_response(full(text))
            }
        }),
    )
    .await
}

/// Starts the stand-in host for `alias` and waits (bounded) until its MCP call has its
/// answer; the host stays alive, its connection open, until the returned child's stdin is
/// closed.
fn run_host(relay: &Relay, alias: &str) -> std::process::Child {
    run_host_hinted(relay, alias, &format!("toolu_{alias}"))
}

/// [`run_host`] whose call's hint is `tool_use_id` (`-`: none).
fn run_host_hinted(relay: &Relay, alias: &str, tool_use_id: &str) -> std::process::Child {
    let child = Command::new("python3")
        .arg(fixture("../host.py"))
        .arg(relay.addr.port().to_string())
        .arg(env!("CARGO_BIN_EXE_windowtap"))
        .arg(&relay.ingest)
        .arg(alias)
        .arg(tool_use_id)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    wait_for_line(child, "done", alias, relay)
}

/// Waits (bounded) for `child`'s first line to start with `want`; the child is killed and
/// the test fails otherwise.
fn wait_for_line(
    mut child: std::process::Child,
    want: &str,
    what: &str,
    relay: &Relay,
) -> std::process::Child {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line);
        let _ = tx.send(line);
    });
    match rx.recv_timeout(WAIT) {
        Ok(line) if line.starts_with(want) => child,
        other => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} never said {want}: {other:?}\n{}", relay.log());
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

/// A client of another user: `python3` run as uid/gid 65534 that sends one request of the
/// session `other` whose body is in an encoding the observer cannot read (`snappy`: its
/// stream's observation is lost at once), says `ready` once the response head is in, and
/// keeps its connection open until killed.
fn other_user_client(relay: &Relay) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    let script = r#"
import socket, sys
body = b'{"model":"claude","stream":true,"messages":[]}'
head = ("POST /anthropic/v1/messages HTTP/1.1\r\nHost: relay\r\n"
        "Content-Type: application/json\r\nContent-Encoding: snappy\r\n"
        "x-claude-code-session-id: other\r\nContent-Length: %d\r\n\r\n" % len(body)).encode()
conn = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
conn.sendall(head + body)
got = b""
while b"\r\n\r\n" not in got:
    chunk = conn.recv(65536)
    if not chunk:
        sys.exit(1)
    got += chunk
print("ready", flush=True)
sys.stdin.read()
"#;
    let child = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(relay.addr.port().to_string())
        .uid(65534)
        .gid(65534)
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 as uid 65534");
    wait_for_line(child, "ready", "the client of uid 65534", relay)
}

fn kill(mut child: std::process::Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Waits (bounded) until the capture holds `n` events of type `ty`.
fn wait_capture(capture: &Path, ty: &str, n: usize, relay: &Relay) {
    let deadline = Instant::now() + WAIT;
    while capture_of_type(capture, ty).len() < n {
        assert!(Instant::now() < deadline, "{}", relay.log());
        std::thread::sleep(Duration::from_millis(20));
    }
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

/// The `stream_open` of the stream whose `observation_lost` the capture has, and the others.
fn lost_and_kept(capture: &Path) -> (Value, Vec<Value>) {
    let lost: Vec<Value> = capture_of_type(capture, "observation_lost");
    assert_eq!(lost.len(), 1, "one stream lost: {lost:?}");
    let (lost, kept): (Vec<Value>, Vec<Value>) = capture_of_type(capture, "stream_open")
        .into_iter()
        .partition(|o| o["stream"] == lost[0]["stream"]);
    (lost.into_iter().next().expect("its stream_open"), kept)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_user_s_stream_is_its_uid_and_its_loss_leaves_our_call_decided() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("SKIPPED: not root; a client of a second user id (65534) needs it");
        return;
    }
    if !have("python3") {
        eprintln!("SKIPPED: python3 is not installed; the stand-in host needs it");
        return;
    }
    let held = Held::default();
    let up = upstream_holding(held.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let key = [0x33u8; correlator::PSEUDONYM_KEY_LEN];
    let key_file = dir.path().join("key");
    std::fs::write(&key_file, hex::encode(key)).unwrap();
    let key_arg = key_file.display().to_string();
    // No window is given up before the relay stops: the loss, at the other stream's start,
    // is surely in before the call is decided, whatever the machine's pace.
    let (mut relay, records_path, capture) = relay_with_files(
        &up,
        "anthropic",
        dir.path(),
        &["--id-key-file", &key_arg, "--close-wait", "3600000"],
    );

    // Another user's stream, open (and lost) all through our call.
    let other = other_user_client(&relay);
    wait_capture(&capture, "observation_lost", 1, &relay);
    // Our host's call names no call (no `_meta`): nothing but the hosts keeps it apart from
    // the lost stream.
    let ours = run_host_hinted(&relay, "alpha", "-");
    wait_capture(&capture, "mcp_interval", 1, &relay);
    kill(other);
    held.lock().unwrap().clear();
    end_host(ours);
    assert!(relay.stop().success(), "{}", relay.log());
    assert_checks_clean(&capture);

    let (lost, kept) = lost_and_kept(&capture);
    let pseudo = correlator::Pseudonymizer::new(&key);
    assert_eq!(
        lost["host"].as_str(),
        Some(pseudo.id("uid:65534").as_str()),
        "the other user's stream is that user's host: {lost}"
    );
    assert_eq!(kept.len(), 1, "{kept:?}");
    let our_host = kept[0]["host"]
        .as_str()
        .expect("our stream's host is known");
    assert_ne!(our_host, lost["host"].as_str().unwrap());
    let interval = &capture_of_type(&capture, "mcp_interval")[0];
    assert_eq!(interval["host"].as_str(), Some(our_host), "{interval}");

    let recs = records(&records_path);
    assert_eq!(recs.len(), 1, "{recs:?}");
    // The one window that could hold the call was given up when the relay stopped: the
    // other user's lost stream, open all along, is known to be another host's.
    assert_eq!(
        (recs[0]["decision"].as_str(), recs[0]["reason"].as_str()),
        (Some("abstained"), Some("unclosed")),
        "{}",
        recs[0]
    );
    assert_eq!(checked_replay(&capture), live_records(&records_path));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_hosts_off_no_stream_or_call_has_a_host() {
    if !have("python3") {
        eprintln!("SKIPPED: python3 is not installed; the stand-in host needs it");
        return;
    }
    let held = Held::default();
    let up = upstream_holding(held.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let (mut relay, _, capture) =
        relay_with_files(&up, "anthropic", dir.path(), &["--hosts", "off"]);
    // Another user's client too, where this test may start one.
    let other = rustix::process::geteuid()
        .is_root()
        .then(|| other_user_client(&relay));
    let alpha = run_host(&relay, "alpha");
    let beta = run_host(&relay, "beta");
    wait_capture(&capture, "mcp_interval", 2, &relay);
    if let Some(other) = other {
        kill(other);
    }
    held.lock().unwrap().clear();
    end_host(alpha);
    end_host(beta);
    assert!(relay.stop().success(), "{}", relay.log());
    assert_checks_clean(&capture);

    let opens = capture_of_type(&capture, "stream_open");
    let want = if rustix::process::geteuid().is_root() {
        3
    } else {
        2
    };
    assert_eq!(opens.len(), want, "{opens:?}");
    for ev in opens
        .iter()
        .chain(&capture_of_type(&capture, "mcp_start"))
        .chain(&capture_of_type(&capture, "mcp_interval"))
    {
        assert!(ev["host"].is_null(), "no host with --hosts off: {ev}");
    }
}
