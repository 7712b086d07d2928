//! The relay's fault matrix, the cases the other relay suites do not cover: a client that
//! goes away mid-stream, a client that does not read, a broken chunked body from the
//! upstream, an oversized WebSocket frame and a malformed request. Each asserts what the
//! client sees, that nothing hangs (every wait is bounded), that the relay keeps serving, and
//! that the records and capture it wrote pass `windowtap check` without a torn line.

mod support;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Value};
use support::ws::{client_handshake, switching};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

const MIB: usize = 1 << 20;

/// Growth of the relay's resident memory that a stream it is not allowed to buffer must stay
/// under. Generous: a stream the relay does buffer would blow past it many times over.
const MEMORY_BOUND: u64 = 64 * MIB as u64;

fn first_request() -> Value {
    json!({"model":"claude","stream":true,"messages":[{"role":"user","content":"hi"}]})
}

fn message_start() -> String {
    sse::record(&sse::message_start("msg_1", "claude"))
}

/// A complete short Claude text turn.
fn text_turn() -> String {
    sse::body(
        &sse::message("msg_1", "claude")
            .text("ok")
            .end("end_turn", 2),
    )
}

/// An upstream answering every request with the whole [`text_turn`].
async fn good_upstream() -> Upstream {
    Upstream::start(
        None,
        handler(|req| async move {
            let _ = read_body(req.into_body()).await;
            sse_response(full(text_turn()))
        }),
    )
    .await
}

/// Starts a relay with `mounts`, writing records and capture into `dir`.
fn relay_with_files(mounts: &[String], dir: &Path) -> (Relay, PathBuf, PathBuf) {
    let records = dir.join("records.jsonl");
    let capture = dir.join("capture.jsonl");
    let mut args = Vec::new();
    for m in mounts {
        args.push("--upstream".to_string());
        args.push(m.clone());
    }
    args.extend([
        "--records".to_string(),
        records.display().to_string(),
        "--capture".to_string(),
        capture.display().to_string(),
        "--close-wait".to_string(),
        "200".to_string(),
    ]);
    (Relay::start(&args), records, capture)
}

/// Stops the relay cleanly and checks both files it wrote.
fn stop_and_check(relay: &mut Relay, records: &Path, capture: &Path) {
    let status = relay.stop();
    assert!(status.success(), "relay exit: {status:?}\n{}", relay.log());
    assert_checks_clean(records);
    assert_checks_clean(capture);
}

/// The capture's events of the first stream opened in it.
fn first_stream(capture: &Path) -> Vec<Value> {
    let lines = capture_lines(capture);
    let open = lines
        .iter()
        .find(|e| e["type"] == "stream_open")
        .unwrap_or_else(|| panic!("no stream in the capture: {lines:?}"));
    let id = open["stream"].clone();
    lines.into_iter().filter(|e| e["stream"] == id).collect()
}

fn types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// A stream whose response was cut: it is closed (or its observation lost), and its
/// response never ended as `completed`.
fn assert_cut_short(events: &[Value], what: &str) {
    let types = types(events);
    assert!(
        types
            .iter()
            .any(|t| t == "stream_close" || t == "observation_lost"),
        "{what} is closed or lost in the capture: {types:?}"
    );
    assert!(
        !events
            .iter()
            .any(|e| e["type"] == "response_end" && e["status"] == "completed"),
        "{what} did not complete: {types:?}"
    );
}

/// The relay's resident set size in bytes, from `/proc/<pid>/status`.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS in /proc/<pid>/status");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VmRSS value in kB");
    kib * 1024
}

/// Waits (bounded) until `counter` stops moving: it has not changed over ten polls in a row.
/// Returns its value then. The stall is what backpressure looks like from the writer's side.
async fn until_stalled(counter: &AtomicUsize, total: usize) -> usize {
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut last = usize::MAX;
    let mut still = 0;
    loop {
        let now = counter.load(Ordering::SeqCst);
        assert!(
            now < total,
            "the writer pushed all {total} bytes: nothing held it back"
        );
        if now == last && now > 0 {
            still += 1;
            if still >= 10 {
                return now;
            }
        } else {
            still = 0;
            last = now;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the writer never stalled (at {now} of {total} bytes)"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A POST to the Claude route, written by hand so the test owns the socket.
fn raw_claude_request(addr: std::net::SocketAddr, prefix: &str) -> Vec<u8> {
    let body = first_request().to_string();
    format!(
        "POST /{prefix}/v1/messages HTTP/1.1\r\nHost: {addr}\r\ncontent-type: application/json\r\n\
         x-claude-code-session-id: sess-1\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Reads from `tcp` (bounded) until `needle` has arrived; returns everything read.
async fn read_until(tcp: &mut TcpStream, needle: &[u8]) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(needle.len()).any(|w| w == needle) {
        let n = tokio::time::timeout(WAIT, tcp.read(&mut buf))
            .await
            .expect("bytes within the wait bound")
            .unwrap();
        assert!(
            n > 0,
            "closed before {:?} arrived",
            String::from_utf8_lossy(needle)
        );
        got.extend_from_slice(&buf[..n]);
    }
    got
}

/// One whole Claude request through the relay to `prefix`, answered 200 with [`text_turn`].
async fn assert_serves(relay: &Relay, prefix: &str) {
    let req = request("POST", relay.addr, &format!("/{prefix}/v1/messages"))
        .header("content-type", "application/json")
        .body(full(first_request().to_string()))
        .unwrap();
    let res = tokio::time::timeout(WAIT, send(relay.addr, req))
        .await
        .expect("an answer within the wait bound")
        .expect("a response");
    assert_eq!(res.status(), 200);
    let body = collect(res.into_body()).await.expect("a whole body");
    assert_eq!(body, text_turn().as_bytes());
}

// ---------------------------------------------------------------------------------------
// 1. The client goes away mid-stream
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_client_leaving_mid_stream_cancels_the_upstream_request() {
    // The upstream streams pings until its body write fails, and says so.
    let (cancelled_tx, cancelled) = oneshot::channel::<usize>();
    let cancelled_tx = Arc::new(std::sync::Mutex::new(Some(cancelled_tx)));
    let up = sse_upstream(move |tx| {
        let cancelled_tx = cancelled_tx.clone();
        tokio::spawn(async move {
            let ping = sse_event("ping", &json!({"type":"ping"}));
            let mut events = vec![message_start()];
            // Bounded: WAIT worth of pings at 10 ms each, then give up.
            events.extend(std::iter::repeat_n(ping, 3000));
            for (sent, ev) in events.into_iter().enumerate() {
                if tx.send(Ok(Bytes::from(ev))).await.is_err() {
                    if let Some(c) = cancelled_tx.lock().unwrap().take() {
                        let _ = c.send(sent);
                    }
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
    })
    .await;
    let good = good_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let (mut relay, records, capture) = relay_with_files(
        &[up.mount("anthropic", ""), good.mount("good", "")],
        dir.path(),
    );

    let mut tcp = TcpStream::connect(relay.addr).await.unwrap();
    tcp.write_all(&raw_claude_request(relay.addr, "anthropic"))
        .await
        .unwrap();
    // The stream is flowing: the head and the first pings went through.
    read_until(&mut tcp, b"event: ping").await;
    drop(tcp);

    let sent = tokio::time::timeout(WAIT, cancelled)
        .await
        .expect("the upstream saw its body writes fail within the wait bound")
        .expect("the upstream task reported");
    assert!(sent < 3000, "cancelled before the stream ran out");

    assert_serves(&relay, "good").await;
    stop_and_check(&mut relay, &records, &capture);
    assert_cut_short(&first_stream(&capture), "the abandoned stream");
}

// ---------------------------------------------------------------------------------------
// 2. A client that does not read
// ---------------------------------------------------------------------------------------

/// Chunk `i` of the slow-reader body: a fixed pattern stamped with its index, so the stream
/// is not one repeated MiB and both ends can build it without storing 256 MiB.
fn block(base: &[u8], i: usize) -> Bytes {
    let mut b = base.to_vec();
    b[..8].copy_from_slice(&(i as u64).to_le_bytes());
    Bytes::from(b)
}

/// Checks a byte stream, as it arrives, against `prefix` followed by `block(base, 0..)`.
/// Compares bytes rather than hashing them: as exact as a SHA-256, and hashing hundreds of
/// MiB in a debug build took most of the test's time.
struct Expected {
    prefix: Vec<u8>,
    base: Arc<Vec<u8>>,
    pos: usize,
}

impl Expected {
    /// True when `data` is exactly the next bytes of the stream.
    fn next(&mut self, mut data: &[u8]) -> bool {
        while !data.is_empty() {
            let ok = if self.pos < self.prefix.len() {
                let n = data.len().min(self.prefix.len() - self.pos);
                let ok = data[..n] == self.prefix[self.pos..self.pos + n];
                data = &data[n..];
                self.pos += n;
                ok
            } else {
                let at = self.pos - self.prefix.len();
                let (i, off) = (at / MIB, at % MIB);
                let n = data.len().min(MIB - off);
                let stamp = (i as u64).to_le_bytes();
                // The block's first 8 bytes are its stamp, the rest the base pattern.
                let split = 8usize.saturating_sub(off).min(n);
                let ok = (split == 0 || data[..split] == stamp[off..off + split])
                    && data[split..n] == self.base[off + split..off + n];
                data = &data[n..];
                self.pos += n;
                ok
            };
            if !ok {
                return false;
            }
        }
        true
    }
}

#[test]
fn the_stream_check_accepts_the_exact_bytes_in_any_cuts_and_nothing_else() {
    let base = Arc::new(pattern(MIB, 3));
    let mut whole = b"head".to_vec();
    for i in 0..3 {
        whole.extend_from_slice(&block(&base, i));
    }
    let fresh = || Expected {
        prefix: b"head".to_vec(),
        base: base.clone(),
        pos: 0,
    };
    for cut in [1, 5, 4096, MIB + 3] {
        let mut e = fresh();
        assert!(whole.chunks(cut).all(|c| e.next(c)), "cut {cut}");
        assert_eq!(e.pos, whole.len());
    }
    for at in [2, 4 + 3, 4 + MIB + 7, 4 + 2 * MIB + 100] {
        let mut bad = whole.clone();
        bad[at] ^= 1;
        let mut e = fresh();
        assert!(!bad.chunks(4096).all(|c| e.next(c)), "flipped byte {at}");
    }
}

#[tokio::test]
async fn a_client_that_does_not_read_holds_the_upstream_back_not_the_relays_memory() {
    const BLOCKS: usize = 256;
    let base = Arc::new(pattern(MIB, 7));
    let pushed = Arc::new(AtomicUsize::new(0));
    let (pushed_up, base_up) = (pushed.clone(), base.clone());
    let up = Upstream::start(
        None,
        handler(move |req| {
            let (pushed, base) = (pushed_up.clone(), base_up.clone());
            async move {
                let _ = read_body(req.into_body()).await;
                let (tx, body) = channel_body();
                tokio::spawn(async move {
                    for i in 0..BLOCKS {
                        let b = block(&base, i);
                        let n = b.len();
                        if tx.send(Ok(b)).await.is_err() {
                            return;
                        }
                        pushed.fetch_add(n, Ordering::SeqCst);
                    }
                });
                hyper::Response::builder()
                    .status(200)
                    .header("content-type", "application/octet-stream")
                    .header("content-length", (BLOCKS * MIB).to_string())
                    .body(body)
                    .unwrap()
            }
        }),
    )
    .await;
    let mut relay = Relay::start(&["--upstream".into(), up.mount("plain", "")]);
    let before = rss(relay.pid());

    let res = tokio::time::timeout(
        WAIT,
        send(
            relay.addr,
            request("GET", relay.addr, "/plain/blob")
                .body(full(""))
                .unwrap(),
        ),
    )
    .await
    .expect("the head within the wait bound")
    .expect("a response");
    assert_eq!(res.status(), 200);

    // Nothing read yet: the upstream must stall well short of the whole body.
    let held = until_stalled(&pushed, BLOCKS * MIB).await;
    let during = rss(relay.pid());
    assert!(
        during.saturating_sub(before) < MEMORY_BOUND,
        "relay RSS grew {} MiB while {} MiB sat unread",
        during.saturating_sub(before) / MIB as u64,
        held / MIB
    );

    // Now read it all: every byte arrives, in order.
    let mut body = res.into_body();
    let mut expect = Expected {
        prefix: Vec::new(),
        base: base.clone(),
        pos: 0,
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    while let Some(frame) =
        tokio::time::timeout_at(deadline, http_body_util::BodyExt::frame(&mut body))
            .await
            .expect("the whole body within the wait bound")
    {
        if let Ok(data) = frame.expect("the body did not fail").into_data() {
            let at = expect.pos;
            assert!(expect.next(&data), "the bytes at offset {at} differ");
        }
    }
    assert_eq!(expect.pos, BLOCKS * MIB, "every byte arrived");
    let status = relay.stop();
    assert!(status.success(), "relay exit: {status:?}");
}

// ---------------------------------------------------------------------------------------
// 3. A broken chunked body from the upstream
// ---------------------------------------------------------------------------------------

/// An upstream speaking raw bytes: for each connection, reads the request (head and
/// content-length body), answers `reply`, then waits (bounded) for the peer to hang up.
async fn raw_http_upstream(reply: Vec<u8>) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = Arc::new(AtomicUsize::new(0));
    let count = served.clone();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let reply = reply.clone();
            let count = count.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                let head_end = loop {
                    if let Some(p) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                        break p + 4;
                    }
                    match tokio::time::timeout(WAIT, tcp.read(&mut buf)).await {
                        Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
                        _ => return,
                    }
                };
                let head = String::from_utf8_lossy(&got[..head_end]).to_ascii_lowercase();
                let body_len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                while got.len() < head_end + body_len {
                    match tokio::time::timeout(WAIT, tcp.read(&mut buf)).await {
                        Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
                        _ => return,
                    }
                }
                count.fetch_add(1, Ordering::SeqCst);
                if tcp.write_all(&reply).await.is_err() {
                    return;
                }
                let _ = tokio::time::timeout(WAIT, async {
                    while matches!(tcp.read(&mut buf).await, Ok(n) if n > 0) {}
                })
                .await;
            });
        }
    });
    (addr, served)
}

/// What a client sees of a response: the status and whole body, or where it failed.
async fn fetch(addr: std::net::SocketAddr, path: &str) -> Result<(u16, Vec<u8>), String> {
    let req = request("POST", addr, path)
        .header("content-type", "application/json")
        .body(full(first_request().to_string()))
        .unwrap();
    let res = tokio::time::timeout(WAIT, send(addr, req))
        .await
        .expect("an answer within the wait bound")
        .map_err(|e| format!("head: {e}"))?;
    let status = res.status().as_u16();
    let body = collect(res.into_body())
        .await
        .map_err(|e| format!("body after {status}: {e}"))?;
    Ok((status, body))
}

#[tokio::test]
async fn a_broken_chunked_body_from_the_upstream_is_cut_for_the_client_as_directly() {
    let first = message_start();
    let mut reply = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n\
         {:x}\r\n{first}\r\n",
        first.len()
    )
    .into_bytes();
    reply.extend_from_slice(b"zz-not-a-size\r\nevent: ping\r\n\r\n");
    let (bad, served) = raw_http_upstream(reply).await;
    let good = good_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let (mut relay, records, capture) = relay_with_files(
        &[format!("anthropic=http://{bad}"), good.mount("good", "")],
        dir.path(),
    );

    // Directly, the client sees a 200 whose body fails.
    let direct = fetch(bad, "/v1/messages").await;
    assert!(
        direct
            .as_ref()
            .is_err_and(|e| e.starts_with("body after 200")),
        "directly, the body fails: {direct:?}"
    );

    // Through the relay the response fails too, never a clean end with other bytes. Where it
    // fails may differ: when the broken chunk reaches the relay together with the head, the
    // relay's connection is cut before its head was flushed, so the client sees the cut at
    // the head instead of in the body.
    let relayed = fetch(relay.addr, "/anthropic/v1/messages").await;
    assert!(
        relayed.is_err(),
        "through the relay the response fails, it does not end cleanly: {relayed:?}"
    );
    assert_eq!(
        served.load(Ordering::SeqCst),
        2,
        "both requests reached the upstream"
    );

    assert_serves(&relay, "good").await;
    stop_and_check(&mut relay, &records, &capture);
    assert_cut_short(&first_stream(&capture), "the broken stream");
}

// ---------------------------------------------------------------------------------------
// 4. An oversized WebSocket frame from the upstream
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn an_oversized_websocket_frame_is_spliced_not_buffered_and_loses_its_observer() {
    // A text frame announcing 100 MiB, of which the upstream sends all, 1 MiB at a time.
    const FRAME: usize = 100 * MIB;
    let base = Arc::new(pattern(MIB, 11));
    let done = Arc::new(AtomicBool::new(false));
    let (base_up, done_up) = (base.clone(), done.clone());
    let up = Upstream::start(
        None,
        handler(move |mut req| {
            let (base, done) = (base_up.clone(), done_up.clone());
            async move {
                let res = switching(&req, None);
                let upgrade = hyper::upgrade::on(&mut req);
                tokio::spawn(async move {
                    let Ok(up) = upgrade.await else { return };
                    let mut io = hyper_util::rt::TokioIo::new(up);
                    let head = testkit::ws::head(true, false, 0x1, FRAME as u64);
                    if io.write_all(&head).await.is_err() {
                        return;
                    }
                    for i in 0..FRAME / MIB {
                        if io.write_all(&block(&base, i)).await.is_err() {
                            return;
                        }
                    }
                    let _ = io.flush().await;
                    done.store(true, Ordering::SeqCst);
                    // Closes without a close frame: the client reads to the end.
                });
                res
            }
        }),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (mut relay, records, capture) = relay_with_files(&[up.mount("openai", "")], dir.path());
    let before = rss(relay.pid());

    let mut tcp = TcpStream::connect(relay.addr).await.unwrap();
    let (status, _) = client_handshake(
        &mut tcp,
        &relay.addr.to_string(),
        "/openai/v1/responses",
        &[("originator", "codex_cli_rs"), ("thread-id", "th-1")],
    )
    .await;
    assert_eq!(status, 101);

    // Read it all, sampling the relay's memory every MiB.
    let head = testkit::ws::head(true, false, 0x1, FRAME as u64);
    let mut expect = Expected {
        prefix: head.clone(),
        base: base.clone(),
        pos: 0,
    };
    let mut peak = before;
    let mut buf = vec![0u8; 64 * 1024];
    let mut since_sample = 0usize;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let n = tokio::time::timeout_at(deadline, tcp.read(&mut buf))
            .await
            .expect("the frame within the wait bound")
            .expect("the read did not fail");
        if n == 0 {
            break;
        }
        let at = expect.pos;
        assert!(expect.next(&buf[..n]), "the bytes at offset {at} differ");
        since_sample += n;
        if since_sample >= MIB {
            since_sample = 0;
            peak = peak.max(rss(relay.pid()));
        }
    }
    assert!(done.load(Ordering::SeqCst), "the upstream sent everything");
    assert_eq!(expect.pos, head.len() + FRAME, "every byte sent arrived");
    assert!(
        peak.saturating_sub(before) < MEMORY_BOUND,
        "relay RSS grew {} MiB while splicing a 100 MiB frame",
        peak.saturating_sub(before) / MIB as u64
    );

    // The relay still serves.
    let mut again = TcpStream::connect(relay.addr).await.unwrap();
    let (status, _) = client_handshake(
        &mut again,
        &relay.addr.to_string(),
        "/openai/v1/responses",
        &[],
    )
    .await;
    assert_eq!(status, 101);
    drop(again);

    stop_and_check(&mut relay, &records, &capture);
    let types = types(&first_stream(&capture));
    assert!(
        types.contains(&"observation_lost".to_string())
            && types.contains(&"stream_close".to_string()),
        "the observer gave the stream up, and it was closed: {types:?}"
    );
}

// ---------------------------------------------------------------------------------------
// 5. A malformed request from the client
// ---------------------------------------------------------------------------------------

/// Sends `bytes` on a fresh connection and reads (bounded) whatever comes back until close.
async fn answer_to(addr: std::net::SocketAddr, bytes: &[u8]) -> String {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(bytes).await.unwrap();
    let mut got = Vec::new();
    let _ = tokio::time::timeout(WAIT, tcp.read_to_end(&mut got))
        .await
        .expect("the relay answers and closes within the wait bound");
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test]
async fn a_malformed_request_gets_a_4xx_or_a_closed_connection() {
    let good = good_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let (mut relay, records, capture) = relay_with_files(&[good.mount("good", "")], dir.path());
    let host = relay.addr;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "garbage request line",
            b"NOT A REQUEST LINE\r\n\r\n".to_vec(),
        ),
        (
            "header without a colon",
            format!("GET /good/x HTTP/1.1\r\nHost: {host}\r\nno colon here\r\n\r\n").into_bytes(),
        ),
        (
            "bad content-length",
            format!(
                "POST /good/v1/messages HTTP/1.1\r\nHost: {host}\r\ncontent-length: lots\r\n\r\n"
            )
            .into_bytes(),
        ),
        (
            "binary noise",
            vec![0x16, 0x03, 0x01, 0x00, 0xff, 0x00, 0x0d, 0x0a, 0x0d, 0x0a],
        ),
    ];
    for (what, bytes) in cases {
        let answer = answer_to(relay.addr, &bytes).await;
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 4"),
            "{what}: a 4xx or a closed connection, got {:?}",
            answer.lines().next()
        );
        assert_serves(&relay, "good").await;
    }
    stop_and_check(&mut relay, &records, &capture);
}
