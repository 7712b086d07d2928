//! Stopping the relay binary: on SIGTERM it stops accepting, lets streams in flight end (up to
//! `--drain`), decides what is pending and leaves records and capture complete; a second
//! signal stops it at once, still without a torn line.
//!
//! The upstream is scripted by the test: each request's SSE body is fed from the test, so a
//! stream is in flight exactly as long as the test says. Every wait is bounded.

mod support;

use std::path::Path;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::{json, Value};
use support::*;
use tokio::io::AsyncWriteExt;

/// A Claude turn as its SSE events: a tool call `toolu_1` to `mcp__probe__echo`, or text.
fn turn(id: &str, tool: bool) -> Vec<String> {
    let m = sse::message(id, "claude");
    let events = if tool {
        m.tool_use("toolu_1", "mcp__probe__echo", Some("{\"text\":\"hi\"}"))
            .end("tool_use", 2)
    } else {
        m.text("done").end("end_turn", 2)
    };
    sse::records(&events)
}

fn first_request() -> Value {
    json!({"model":"claude","stream":true,"messages":[{"role":"user","content":"hi"}]})
}

fn continuation() -> Value {
    json!({"model":"claude","stream":true,"messages":[
        {"role":"user","content":"hi"},
        {"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"mcp__probe__echo","input":{"text":"hi"}}]},
        {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"hi"}]}
    ]})
}

/// Reads from `body` until `n` bytes have arrived (bounded).
async fn read_at_least(body: &mut Incoming, n: usize) -> Vec<u8> {
    let mut got = Vec::new();
    while got.len() < n {
        let frame = tokio::time::timeout(WAIT, body.frame())
            .await
            .expect("a frame within the wait bound")
            .expect("the body did not end early")
            .expect("the body did not fail");
        if let Ok(data) = frame.into_data() {
            got.extend_from_slice(&data);
        }
    }
    got
}

fn count_type(capture: &Path, ty: &str) -> usize {
    capture_lines(capture)
        .iter()
        .filter(|e| e["type"] == ty)
        .count()
}

/// Reports one finished MCP call for `toolu_1` on the relay's ingest socket, the way
/// `windowtap wrap` does.
async fn report_mcp_call(relay: &Relay) {
    let mut sock = tokio::net::UnixStream::connect(&relay.ingest)
        .await
        .unwrap();
    let start_ns = testkit::proc::mono_ns();
    let hint = r#""tool_use_id":"toolu_1","item_id":null,"call_id":null,"thread":null"#;
    let start = format!(
        "{{\"v\":1,\"type\":\"start\",\"id\":\"w1-x-1\",\"alias\":\"probe\",\"tool\":\"echo\",\"start_ns\":{start_ns},{hint}}}\n"
    );
    sock.write_all(start.as_bytes()).await.unwrap();
    let end = format!(
        "{{\"v\":1,\"type\":\"end\",\"id\":\"w1-x-1\",\"alias\":\"probe\",\"tool\":\"echo\",\"start_ns\":{start_ns},\"end_ns\":{},\"outcome\":\"result\",{hint}}}\n",
        testkit::proc::mono_ns() + 1_000
    );
    sock.write_all(end.as_bytes()).await.unwrap();
    sock.flush().await.unwrap();
    // Closing the socket lets the relay take up both lines.
    drop(sock);
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_in_flight_at_sigterm_completes_byte_exact_and_its_call_is_decided() {
    let (up, mut fed) = scripted_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let (mut relay, records, capture) = anthropic_relay_with_files(&up, dir.path(), 20_000);

    // The tool turn, whole; the MCP call it asked for; then the continuation, half sent.
    let mut body = open_stream(&relay, first_request()).await;
    let tx = next_feed(&mut fed).await;
    let tool_turn = turn("msg_1", true).concat();
    feed(&tx, &turn("msg_1", true)).await;
    drop(tx);
    let got = collect(body).await.unwrap();
    assert_eq!(got, tool_turn.as_bytes());
    report_mcp_call(&relay).await;

    body = open_stream(&relay, continuation()).await;
    let tx = next_feed(&mut fed).await;
    let text_turn = turn("msg_2", false);
    let (head, tail) = text_turn.split_at(2);
    feed(&tx, head).await;
    let mut got = read_at_least(&mut body, head.concat().len()).await;

    relay.signal(Signal::TERM);
    relay.wait_log("draining");
    // The stream goes on after the signal, to its end.
    feed(&tx, tail).await;
    drop(tx);
    got.extend(collect(body).await.unwrap());
    assert_eq!(got, text_turn.concat().as_bytes(), "byte-exact to the end");

    let status = relay.wait_exit();
    assert!(status.success(), "{status:?}: {}", relay.log());
    assert!(!relay.log().contains("cut"), "{}", relay.log());
    assert_checks_clean(&records);
    assert_checks_clean(&capture);
    assert_eq!(
        count_type(&capture, "stream_close"),
        2,
        "the drained stream's events reached the capture"
    );
    let text = std::fs::read_to_string(&records).unwrap();
    let recs: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["type"] == "attribution")
        .collect();
    assert_eq!(recs.len(), 1, "the reported call was decided: {text}");
    assert_eq!(recs[0]["decision"], "attributed", "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_outliving_the_drain_bound_is_cut_and_the_relay_exits_with_clean_files() {
    let (up, mut fed) = scripted_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let (mut relay, records, capture) = anthropic_relay_with_files(&up, dir.path(), 300);

    let mut body = open_stream(&relay, first_request()).await;
    let tx = next_feed(&mut fed).await;
    let events = turn("msg_1", true);
    feed(&tx, &events[..1]).await;
    read_at_least(&mut body, events[0].len()).await;

    relay.signal(Signal::TERM);
    // The upstream never ends the stream (`tx` stays open): the bound ends it.
    let status = relay.wait_exit();
    assert!(status.success(), "{status:?}: {}", relay.log());
    assert!(relay.log().contains("cut"), "{}", relay.log());
    let rest = tokio::time::timeout(WAIT, body.collect())
        .await
        .expect("the cut reaches the client within the wait bound");
    assert!(rest.is_err(), "the client sees the stream cut, not ended");
    drop(tx);
    assert_checks_clean(&records);
    assert_checks_clean(&capture);
    assert_eq!(count_type(&capture, "stream_open"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_during_the_drain_exits_at_once_without_a_torn_line() {
    let (up, mut fed) = scripted_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    // A drain far longer than the test's wait bound: exiting within the bound at all shows
    // the second signal ended it.
    let (mut relay, records, capture) = anthropic_relay_with_files(&up, dir.path(), 600_000);

    let mut body = open_stream(&relay, first_request()).await;
    let tx = next_feed(&mut fed).await;
    let events = turn("msg_1", true);
    feed(&tx, &events[..3]).await;
    read_at_least(&mut body, events[..3].concat().len()).await;

    relay.signal(Signal::TERM);
    relay.wait_log("draining");
    relay.signal(Signal::TERM);
    let status = relay.wait_exit();
    assert_eq!(
        status.code(),
        Some(128 + Signal::TERM.as_raw()),
        "stopped at once, on the second signal: {}",
        relay.log()
    );
    assert!(relay.log().contains("second signal"), "{}", relay.log());
    drop(tx);
    assert_checks_clean(&records);
    assert_checks_clean(&capture);
    assert_eq!(count_type(&capture, "stream_open"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_connections_are_refused_once_draining() {
    let (up, mut fed) = scripted_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let (mut relay, records, capture) = anthropic_relay_with_files(&up, dir.path(), 600_000);

    let mut body = open_stream(&relay, first_request()).await;
    let tx = next_feed(&mut fed).await;
    let events = turn("msg_1", true);
    feed(&tx, &events[..1]).await;
    let mut got = read_at_least(&mut body, events[0].len()).await;

    relay.signal(Signal::TERM);
    relay.wait_log("draining");
    let refused = tokio::net::TcpStream::connect(relay.addr).await;
    assert_eq!(
        refused.map(|_| ()).map_err(|e| e.kind()),
        Err(std::io::ErrorKind::ConnectionRefused),
        "a connection made while draining is refused"
    );

    // The stream in flight is not disturbed by that, and ends the run when it ends.
    feed(&tx, &events[1..]).await;
    drop(tx);
    got.extend(collect(body).await.unwrap());
    assert_eq!(got, events.concat().as_bytes());
    let status = relay.wait_exit();
    assert!(status.success(), "{status:?}: {}", relay.log());
    assert_checks_clean(&records);
    assert_checks_clean(&capture);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_does_not_hold_the_stop_up() {
    let (up, mut fed) = scripted_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let (mut relay, records, capture) = anthropic_relay_with_files(&up, dir.path(), 600_000);

    // One exchange on a connection the client keeps open afterwards.
    let tcp = tokio::net::TcpStream::connect(relay.addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .unwrap();
    let conn = tokio::spawn(conn);
    let req = request("POST", relay.addr, "/anthropic/v1/messages")
        .header("content-type", "application/json")
        .body(full(first_request().to_string()))
        .unwrap();
    let res = tokio::time::timeout(WAIT, sender.send_request(req))
        .await
        .unwrap()
        .unwrap();
    let tx = next_feed(&mut fed).await;
    feed(&tx, &turn("msg_1", true)).await;
    drop(tx);
    assert_eq!(
        collect(res.into_body()).await.unwrap(),
        turn("msg_1", true).concat().as_bytes()
    );

    relay.signal(Signal::TERM);
    let status = relay.wait_exit();
    assert!(status.success(), "{status:?}: {}", relay.log());
    assert!(!relay.log().contains("cut"), "{}", relay.log());
    drop(sender);
    let _ = tokio::time::timeout(WAIT, conn).await;
    assert_checks_clean(&records);
    assert_checks_clean(&capture);
}

/// An upstream whose WebSocket tunnels echo raw bytes back (after the `101` the relay splices
/// bytes, never frames, so raw bytes are what a tunnel carries). Mounted as `anthropic`, on a
/// path no observer watches: the tunnel is unobserved.
async fn echo_tunnel_upstream() -> Upstream {
    Upstream::start(
        None,
        handler(|mut req| async move {
            let res = support::ws::switching(&req, None);
            let upgrade = hyper::upgrade::on(&mut req);
            tokio::spawn(async move {
                let Ok(up) = upgrade.await else { return };
                let (mut r, mut w) = tokio::io::split(hyper_util::rt::TokioIo::new(up));
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
            res
        }),
    )
    .await
}

/// Opens an unobserved tunnel through the relay and checks one round trip.
async fn open_tunnel(relay: &Relay) -> tokio::net::TcpStream {
    let mut tcp = tokio::net::TcpStream::connect(relay.addr).await.unwrap();
    let (status, _) = support::ws::client_handshake(
        &mut tcp,
        &relay.addr.to_string(),
        "/anthropic/v1/tunnel",
        &[],
    )
    .await;
    assert_eq!(status, 101);
    assert_eq!(
        echo(&mut tcp, b"before the signal").await,
        b"before the signal"
    );
    tcp
}

/// Writes `bytes` into the tunnel and reads as many back (bounded).
async fn echo(tcp: &mut tokio::net::TcpStream, bytes: &[u8]) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    tcp.write_all(bytes).await.unwrap();
    let mut got = vec![0u8; bytes.len()];
    tokio::time::timeout(WAIT, tcp.read_exact(&mut got))
        .await
        .expect("the echo within the wait bound")
        .expect("the tunnel is still open");
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unobserved_websocket_tunnel_in_flight_at_sigterm_is_drained_like_a_stream() {
    let up = echo_tunnel_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let (mut relay, records, capture) = anthropic_relay_with_files(&up, dir.path(), 600_000);
    let mut tcp = open_tunnel(&relay).await;

    relay.signal(Signal::TERM);
    relay.wait_log("draining");
    assert!(relay.log().contains("tunnels=1"), "{}", relay.log());
    // Without the tunnel counted, the relay would finish its stop and exit about now: give
    // it the time to, so that a relay that does not wait is caught here.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(
        echo(&mut tcp, b"after the signal, byte for byte").await,
        b"after the signal, byte for byte",
        "the tunnel goes on during the drain"
    );

    // The client ends its side; the upstream ends its own; the tunnel is over.
    tcp.shutdown().await.unwrap();
    let status = relay.wait_exit();
    assert!(status.success(), "{status:?}: {}", relay.log());
    assert!(!relay.log().contains("cut"), "{}", relay.log());
    assert_checks_clean(&records);
    assert_checks_clean(&capture);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_tunnel_outliving_the_drain_bound_is_cut() {
    use tokio::io::AsyncReadExt;
    let up = echo_tunnel_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let (mut relay, records, capture) = anthropic_relay_with_files(&up, dir.path(), 300);
    let mut tcp = open_tunnel(&relay).await;

    relay.signal(Signal::TERM);
    // The client never ends the tunnel: the bound does.
    let status = relay.wait_exit();
    assert!(status.success(), "{status:?}: {}", relay.log());
    assert!(relay.log().contains("cut"), "{}", relay.log());
    let mut rest = Vec::new();
    let read = tokio::time::timeout(WAIT, tcp.read_to_end(&mut rest))
        .await
        .expect("the cut reaches the client within the wait bound");
    assert!(
        read.is_err() || rest.is_empty(),
        "nothing more came through the cut tunnel: {rest:?}"
    );
    assert_checks_clean(&records);
    assert_checks_clean(&capture);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_to_a_stdout_nobody_reads_never_stall_the_correlator_and_the_loss_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let capture = dir.path().join("capture.jsonl");
    // Records go to stdout (no --records): a pipe this test keeps open and never reads.
    let mut relay = Relay::start_with_stdout(
        &[
            "--capture".into(),
            capture.display().to_string(),
            "--drain".into(),
            "300".into(),
        ],
        std::process::Stdio::piped(),
    );

    // Far more records than a pipe holds (64 KiB by default): calls no window contains, each
    // decided as soon as it is reported.
    let calls = 1000;
    let mut sock = tokio::net::UnixStream::connect(&relay.ingest)
        .await
        .unwrap();
    for i in 0..calls {
        let start_ns = testkit::proc::mono_ns();
        let id = format!("w1-pipe-{i}");
        let lines = format!(
            "{{\"v\":1,\"type\":\"start\",\"id\":\"{id}\",\"alias\":\"probe\",\"tool\":\"echo\",\"start_ns\":{start_ns}}}\n\
             {{\"v\":1,\"type\":\"end\",\"id\":\"{id}\",\"alias\":\"probe\",\"tool\":\"echo\",\"start_ns\":{start_ns},\"end_ns\":{},\"outcome\":\"result\"}}\n",
            testkit::proc::mono_ns()
        );
        sock.write_all(lines.as_bytes()).await.unwrap();
    }
    sock.flush().await.unwrap();

    // The correlator goes on although its records output is full: every call reaches the
    // capture while the relay runs.
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let text = std::fs::read_to_string(&capture).unwrap_or_default();
        let n = text.matches("\"type\":\"mcp_interval\"").count();
        if n == calls {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "only {n} of {calls} calls reached the capture: the correlator stalled"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    drop(sock);

    // And it stops, within the wait bound, saying how many records did not get out.
    relay.signal(Signal::TERM);
    let status = relay.wait_exit();
    assert!(status.success(), "{status:?}: {}", relay.log());
    assert!(
        relay
            .log()
            .contains(&format!("of {calls} records were not written")),
        "{}",
        relay.log()
    );
    assert_checks_clean(&capture);
    assert_eq!(count_type(&capture, "mcp_interval"), calls);
}

/// `--records /dev/null` (or a FIFO) is a place to write, not a file to make durable: the stop
/// does not fsync it (EINVAL there used to turn a clean stop into exit 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_to_dev_null_stop_cleanly() {
    let (up, _fed) = scripted_upstream().await;
    let mut relay = Relay::start(&[
        "--upstream".into(),
        up.mount("anthropic", ""),
        "--records".into(),
        "/dev/null".into(),
    ]);
    let status = relay.stop();
    assert!(status.success(), "{status:?}\n{}", relay.log());
}
