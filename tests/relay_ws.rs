//! WebSocket forwarding through the relay binary: the upstream's 101 comes back as received,
//! then every byte after the handshake passes unchanged both ways, compressed frames
//! included, and an abrupt close on one side closes the other.

mod support;

use std::sync::{Arc, Mutex};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use support::ws::*;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio_tungstenite::tungstenite::Message;

type Reports = Arc<Mutex<Option<oneshot::Sender<Digests>>>>;

/// The Responses events the scripted upstream answers a `response.create` with, in the
/// prewarm / turn / continuation shape Codex uses over one WebSocket.
fn responses_script(req: &Value) -> Vec<Value> {
    let prev = req["previous_response_id"].as_str();
    use support::sse::{item_done, response_completed as completed, response_created as created};
    if req["generate"] == json!(false) {
        return vec![created("resp_warm"), completed("resp_warm", json!([]))];
    }
    match prev {
        Some("resp_warm") => {
            let item =
                sse::function_call("fc_1", "call_1", "mcp__probe", "echo", "{\"text\":\"hi\"}");
            sse::function_call_response("resp_turn", &item)
        }
        _ => {
            let msg = json!({"type":"message","id":"msg_1","role":"assistant",
                "content":[{"type":"output_text","text":"done"}]});
            vec![
                created("resp_cont"),
                item_done(0, &msg),
                completed("resp_cont", json!([msg])),
            ]
        }
    }
}

/// A WebSocket upstream speaking the Responses script through tungstenite, hashing every byte
/// after its 101; it reports the digests when the connection ends.
async fn responses_upstream(
    tls: Option<Arc<rustls::ServerConfig>>,
) -> (Upstream, oneshot::Receiver<Digests>) {
    let (tx, rx) = oneshot::channel();
    let reports: Reports = Arc::new(Mutex::new(Some(tx)));
    let up = Upstream::start(
        tls,
        handler(move |mut req| {
            let reports = reports.clone();
            async move {
                let res = switching(&req, None);
                let upgrade = hyper::upgrade::on(&mut req);
                tokio::spawn(async move {
                    let Ok(up) = upgrade.await else { return };
                    let (io, tally) = Hashing::new(hyper_util::rt::TokioIo::new(up));
                    let mut ws = testkit::ws::server(io).await;
                    while let Some(Ok(msg)) = ws.next().await {
                        let Message::Text(text) = msg else { continue };
                        let req: Value = serde_json::from_str(&text).unwrap();
                        for ev in responses_script(&req) {
                            if ws.send(Message::text(ev.to_string())).await.is_err() {
                                break;
                            }
                        }
                    }
                    let d = tally.lock().unwrap().digests();
                    if let Some(tx) = reports.lock().unwrap().take() {
                        let _ = tx.send(d);
                    }
                });
                res
            }
        }),
    )
    .await;
    (up, rx)
}

async fn codex_loop_over(relay: &Relay, path: &str) -> Digests {
    let mut tcp = TcpStream::connect(relay.addr).await.unwrap();
    let (status, head) = client_handshake(
        &mut tcp,
        &relay.addr.to_string(),
        path,
        &[
            ("openai-beta", "responses_websockets=2026-02-06"),
            ("originator", "codex_cli_rs"),
            ("thread-id", "th-1"),
            ("session-id", "th-1"),
        ],
    )
    .await;
    assert_eq!(status, 101, "{head:?}");
    assert!(
        head.iter()
            .any(|l| l.eq_ignore_ascii_case("sec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")),
        "{head:?}"
    );
    let (io, tally) = Hashing::new(tcp);
    let mut ws = testkit::ws::client(io).await;
    let requests = [
        json!({"type":"response.create","model":"gpt-5","generate":false,"input":[]}),
        json!({"type":"response.create","model":"gpt-5","previous_response_id":"resp_warm",
               "input":[{"type":"message","role":"user","content":"call the tool"}]}),
        json!({"type":"response.create","model":"gpt-5","previous_response_id":"resp_turn",
               "input":[{"type":"function_call_output","call_id":"call_1","output":"hi"}]}),
    ];
    for r in requests {
        ws.send(Message::text(r.to_string())).await.unwrap();
        loop {
            let msg = tokio::time::timeout(WAIT, ws.next())
                .await
                .expect("an event within the wait bound")
                .expect("open")
                .expect("a frame");
            let Message::Text(t) = msg else { continue };
            let ev: Value = serde_json::from_str(&t).unwrap();
            if ev["type"] == "response.completed" {
                break;
            }
        }
    }
    let d = tally.lock().unwrap().digests();
    // Like Codex: exit without a close frame.
    drop(ws);
    d
}

#[tokio::test]
async fn a_codex_websocket_loop_passes_byte_exact_over_plain_and_tls() {
    let pki = pki();
    let dir = tempfile::tempdir().unwrap();
    let ca = write_file(dir.path(), "ca.pem", &pki.ca_pem);
    let (plain, plain_done) = responses_upstream(None).await;
    let (secure, secure_done) = responses_upstream(Some(pki.server.clone())).await;
    let relay = Relay::start(&[
        "--upstream".into(),
        plain.mount("openai", ""),
        "--upstream".into(),
        secure.mount("chatgpt", "/backend-api/codex"),
        "--upstream-ca".into(),
        ca.display().to_string(),
    ]);
    for (path, done) in [
        ("/openai/v1/responses", plain_done),
        ("/chatgpt/responses", secure_done),
    ] {
        let client = codex_loop_over(&relay, path).await;
        // The abrupt client exit must end the upstream side too.
        let upstream = tokio::time::timeout(WAIT, done)
            .await
            .unwrap_or_else(|_| panic!("{path}: the upstream never saw the client go"))
            .unwrap();
        assert!(client.written.1 > 0 && client.read.1 > 0);
        assert_eq!(
            client.written, upstream.read,
            "{path}: client to upstream bytes"
        );
        assert_eq!(
            upstream.written, client.read,
            "{path}: upstream to client bytes"
        );
    }
}

/// A raw upstream: after its 101 (with permessage-deflate), for each step it reads exactly the
/// client bytes it expects, then writes its own; then it reads to the end.
async fn raw_upstream(
    steps: Vec<(Vec<u8>, Vec<u8>)>,
) -> (Upstream, oneshot::Receiver<(Digests, bool)>) {
    let (tx, rx) = oneshot::channel();
    let reports = Arc::new(Mutex::new(Some(tx)));
    let steps = Arc::new(steps);
    let up = Upstream::start(
        None,
        handler(move |mut req| {
            let reports = reports.clone();
            let steps = steps.clone();
            async move {
                let res = switching(&req, Some("permessage-deflate"));
                let upgrade = hyper::upgrade::on(&mut req);
                tokio::spawn(async move {
                    let Ok(up) = upgrade.await else { return };
                    let (mut io, tally) = Hashing::new(hyper_util::rt::TokioIo::new(up));
                    let mut matched = true;
                    for (expect, reply) in steps.iter() {
                        let mut got = vec![0u8; expect.len()];
                        if io.read_exact(&mut got).await.is_err() {
                            matched = false;
                            break;
                        }
                        matched &= &got == expect;
                        io.write_all(reply).await.unwrap();
                        io.flush().await.unwrap();
                    }
                    let mut rest = Vec::new();
                    let _ = io.read_to_end(&mut rest).await;
                    let d = tally.lock().unwrap().digests();
                    if let Some(tx) = reports.lock().unwrap().take() {
                        let _ = tx.send((d, matched));
                    }
                });
                res
            }
        }),
    )
    .await;
    (up, rx)
}

#[tokio::test]
async fn permessage_deflate_frames_pass_untouched_in_both_directions() {
    let mut client_deflate = Deflater::default();
    let mut server_deflate = Deflater::default();
    let mask = |i: u8| Some([0x11 ^ i, 0x22, 0x33 ^ i, 0x44]);
    let mut steps = Vec::new();
    let turns = [
        (
            json!({"type":"response.create","model":"gpt-5","generate":false,"input":[]}),
            responses_script(&json!({"generate":false})),
        ),
        (
            json!({"type":"response.create","model":"gpt-5","previous_response_id":"resp_warm","input":[]}),
            responses_script(&json!({"previous_response_id":"resp_warm"})),
        ),
        (
            json!({"type":"response.create","model":"gpt-5","previous_response_id":"resp_turn",
                "input":[{"type":"function_call_output","call_id":"call_1","output":"hi"}]}),
            responses_script(&json!({"previous_response_id":"resp_turn"})),
        ),
    ];
    for (i, (req, events)) in turns.iter().enumerate() {
        let c = frame(
            1,
            &client_deflate.message(req.to_string()),
            true,
            mask(i as u8),
        );
        let mut s = Vec::new();
        for ev in events {
            s.extend(frame(
                1,
                &server_deflate.message(ev.to_string()),
                true,
                None,
            ));
        }
        steps.push((c, s));
    }
    let client_bytes: Vec<u8> = steps.iter().flat_map(|(c, _)| c.clone()).collect();
    let server_bytes: Vec<u8> = steps.iter().flat_map(|(_, s)| s.clone()).collect();
    let (up, done) = raw_upstream(steps.clone()).await;
    let relay = Relay::start(&["--upstream".into(), up.mount("openai", "")]);

    let mut tcp = TcpStream::connect(relay.addr).await.unwrap();
    let (status, head) = client_handshake(
        &mut tcp,
        &relay.addr.to_string(),
        "/openai/v1/responses",
        &[
            (
                "sec-websocket-extensions",
                "permessage-deflate; client_max_window_bits",
            ),
            ("thread-id", "th-2"),
        ],
    )
    .await;
    assert_eq!(status, 101);
    assert!(
        head.iter()
            .any(|l| l.eq_ignore_ascii_case("sec-websocket-extensions: permessage-deflate")),
        "the negotiated extension comes back as the upstream sent it: {head:?}"
    );
    let mut received = Vec::new();
    for (c, s) in &steps {
        tcp.write_all(c).await.unwrap();
        let mut got = vec![0u8; s.len()];
        tokio::time::timeout(WAIT, tcp.read_exact(&mut got))
            .await
            .expect("the reply within the wait bound")
            .unwrap();
        received.extend(got);
    }
    // Abrupt exit, no close frame.
    drop(tcp);
    let (upstream, matched) = tokio::time::timeout(WAIT, done)
        .await
        .expect("the upstream saw the end")
        .unwrap();
    assert!(matched, "the upstream got the client's frames unchanged");
    assert_eq!(upstream.read, (sha(&client_bytes), client_bytes.len()));
    assert_eq!(upstream.written, (sha(&server_bytes), server_bytes.len()));
    assert_eq!(sha(&received), sha(&server_bytes));
}

#[tokio::test]
async fn a_refused_upgrade_comes_back_as_an_ordinary_response() {
    let up = Upstream::start(
        None,
        handler(|_req| async {
            hyper::Response::builder()
                .status(426)
                .header("content-type", "application/json")
                .body(full(r#"{"error":"upgrade required"}"#))
                .unwrap()
        }),
    )
    .await;
    let relay = Relay::start(&["--upstream".into(), up.mount("openai", "")]);
    let mut tcp = TcpStream::connect(relay.addr).await.unwrap();
    let (status, head) = client_handshake(
        &mut tcp,
        &relay.addr.to_string(),
        "/openai/v1/responses",
        &[],
    )
    .await;
    assert_eq!(status, 426, "{head:?}");
    let mut body = vec![0u8; r#"{"error":"upgrade required"}"#.len()];
    tokio::time::timeout(WAIT, tcp.read_exact(&mut body))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(body, br#"{"error":"upgrade required"}"#);
}

#[tokio::test]
async fn an_upstream_that_drops_the_connection_closes_the_client_side() {
    let up = Upstream::start(
        None,
        handler(|mut req| async move {
            let res = switching(&req, None);
            let upgrade = hyper::upgrade::on(&mut req);
            tokio::spawn(async move {
                if let Ok(up) = upgrade.await {
                    let mut io = hyper_util::rt::TokioIo::new(up);
                    let _ = io
                        .write_all(&frame(1, b"{\"type\":\"bye\"}", false, None))
                        .await;
                    // Gone without a close frame.
                }
            });
            res
        }),
    )
    .await;
    let relay = Relay::start(&["--upstream".into(), up.mount("openai", "")]);
    let mut tcp = TcpStream::connect(relay.addr).await.unwrap();
    let (status, _) = client_handshake(
        &mut tcp,
        &relay.addr.to_string(),
        "/openai/v1/responses",
        &[],
    )
    .await;
    assert_eq!(status, 101);
    let mut rest = Vec::new();
    tokio::time::timeout(WAIT, tcp.read_to_end(&mut rest))
        .await
        .expect("the client side closes when the upstream goes")
        .unwrap();
    assert_eq!(rest, frame(1, b"{\"type\":\"bye\"}", false, None));
}

/// Bytes that arrive together with a handshake (a frame the client sends right behind its
/// upgrade request; the upstream's first bytes in the same packet as its `101`) are read
/// ahead by the HTTP layer; they must still reach the other side, first and once.
#[tokio::test]
async fn bytes_sent_right_behind_either_handshake_are_not_lost() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let Ok((mut tcp, _)) = listener.accept().await else {
            return;
        };
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            match tcp.read(&mut buf).await {
                Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
                _ => return,
            }
        }
        // The 101 and the upstream's first bytes in one write, then an echo of the rest.
        let _ = tcp
            .write_all(b"HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: websocket\r\nsec-websocket-accept: x\r\n\r\nhello from upstream|")
            .await;
        let end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let _ = tcp.write_all(&got[end..]).await;
        let (mut r, mut w) = tcp.split();
        let _ = tokio::io::copy(&mut r, &mut w).await;
    });
    let relay = Relay::start(&[format!("--upstream=t=http://{up}")]);
    let mut tcp = TcpStream::connect(relay.addr).await.unwrap();
    // The upgrade request and the client's first bytes in one write.
    tcp.write_all(
        b"GET /t/tunnel HTTP/1.1\r\nhost: relay\r\nconnection: Upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\nearly from client|",
    )
    .await
    .unwrap();
    let want = b"hello from upstream|early from client|";
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(WAIT, tcp.read(&mut buf))
            .await
            .expect("the tunnel's bytes within the wait bound")
            .unwrap();
        assert!(n > 0, "closed early: {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            if got.len() >= end + 4 + want.len() {
                assert!(
                    got.starts_with(b"HTTP/1.1 101"),
                    "{:?}",
                    String::from_utf8_lossy(&got)
                );
                assert_eq!(
                    &got[end + 4..],
                    want.as_slice(),
                    "{:?}",
                    String::from_utf8_lossy(&got)
                );
                break;
            }
        }
    }
}

/// An upstream that answers one upgrade with a 101 and hands the upgraded connection to
/// `then`.
async fn raw_tunnel_upstream<F, Fut>(then: F) -> Upstream
where
    F: FnOnce(hyper_util::rt::TokioIo<hyper::upgrade::Upgraded>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let then = Arc::new(Mutex::new(Some(then)));
    Upstream::start(
        None,
        handler(move |mut req| {
            let then = then.lock().unwrap().take();
            async move {
                let res = switching(&req, None);
                let upgrade = hyper::upgrade::on(&mut req);
                tokio::spawn(async move {
                    if let (Ok(up), Some(then)) = (upgrade.await, then) {
                        then(hyper_util::rt::TokioIo::new(up)).await;
                    }
                });
                res
            }
        }),
    )
    .await
}

/// Opens a tunnel through `relay` to mount `t`, past the 101.
async fn open_raw_tunnel(relay: &Relay) -> TcpStream {
    let mut tcp = TcpStream::connect(relay.addr).await.unwrap();
    let (status, _) = client_handshake(&mut tcp, "relay", "/t/tunnel", &[]).await;
    assert_eq!(status, 101);
    tcp
}

#[tokio::test]
async fn a_reader_that_stops_holds_its_sender_back_and_then_gets_every_byte() {
    // More than the loopback socket buffers of both hops can hold.
    const TOTAL: usize = 64 << 20;
    let block = Arc::new(pattern(TOTAL, 13));
    let sent = block.clone();
    let written = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = written.clone();
    let up = raw_tunnel_upstream(move |mut tcp| async move {
        for chunk in sent.chunks(64 * 1024) {
            if tcp.write_all(chunk).await.is_err() {
                return;
            }
            counter.fetch_add(chunk.len(), std::sync::atomic::Ordering::SeqCst);
        }
        let _ = tcp.shutdown().await;
        let mut rest = Vec::new();
        let _ = tcp.read_to_end(&mut rest).await;
    })
    .await;
    let relay = Relay::start(&["--upstream".into(), up.mount("t", "")]);
    let mut tcp = open_raw_tunnel(&relay).await;
    // Not reading: the upstream gets as far as the socket buffers and the relay's one
    // waiting read let it, and no further.
    let mut last = usize::MAX;
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let now = written.load(std::sync::atomic::Ordering::SeqCst);
        if now == last {
            break;
        }
        last = now;
    }
    assert!(
        last < TOTAL,
        "the upstream wrote everything to a reader that was not reading"
    );
    let mut got = Vec::with_capacity(TOTAL);
    tokio::time::timeout(WAIT, tcp.read_to_end(&mut got))
        .await
        .expect("every byte within the wait bound")
        .unwrap();
    assert_eq!(got.len(), TOTAL);
    assert!(got == *block, "bytes differ");
}

#[tokio::test]
async fn an_end_that_finishes_is_passed_on_and_the_other_may_still_answer() {
    let up = raw_tunnel_upstream(|mut tcp| async move {
        let mut question = Vec::new();
        // Returns only once the client's end has been passed on.
        tcp.read_to_end(&mut question).await.unwrap();
        let mut answer = b"answer to ".to_vec();
        answer.extend_from_slice(&question);
        tcp.write_all(&answer).await.unwrap();
        let _ = tcp.shutdown().await;
    })
    .await;
    let relay = Relay::start(&["--upstream".into(), up.mount("t", "")]);
    let mut tcp = open_raw_tunnel(&relay).await;
    tcp.write_all(b"question").await.unwrap();
    tcp.shutdown().await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(WAIT, tcp.read_to_end(&mut got))
        .await
        .expect("the answer and the end within the wait bound")
        .unwrap();
    assert_eq!(got, b"answer to question");
}

/// An upstream that answers every upgrade with a 101 (whatever it asks for) and then holds
/// the tunnel, sending nothing, until its client goes; any other request gets `200 ok`. With
/// the count of requests it got.
async fn silent_tunnels_upstream() -> (Upstream, Arc<std::sync::atomic::AtomicUsize>) {
    let requests = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = requests.clone();
    let up = Upstream::start(
        None,
        handler(move |mut req| {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move {
                if !req.headers().contains_key("upgrade") {
                    return hyper::Response::new(full("ok"));
                }
                let res = switching(&req, None);
                let upgrade = hyper::upgrade::on(&mut req);
                tokio::spawn(async move {
                    if let Ok(up) = upgrade.await {
                        let mut io = hyper_util::rt::TokioIo::new(up);
                        let mut rest = Vec::new();
                        let _ = io.read_to_end(&mut rest).await;
                    }
                });
                res
            }
        }),
    )
    .await;
    (up, requests)
}

#[tokio::test]
async fn silent_tunnels_leave_room_under_the_connection_cap_for_other_clients() {
    let (up, _) = silent_tunnels_upstream().await;
    let relay = Relay::start(&[
        "--upstream".into(),
        up.mount("t", ""),
        "--max-connections".into(),
        "8".into(),
    ]);
    // Seven of eight places may be tunnels that send nothing at all.
    let mut tunnels = Vec::new();
    for _ in 0..7 {
        tunnels.push(open_raw_tunnel(&relay).await);
    }
    // A new client that is not a tunnel is served (once the relay has counted each upgraded
    // connection as its tunnel alone).
    let plain = || async {
        let mut tcp = TcpStream::connect(relay.addr).await.unwrap();
        tcp.write_all(b"GET /t/plain HTTP/1.1\r\nHost: relay\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(WAIT, tcp.read_to_end(&mut answer))
            .await
            .expect("an answer within the wait bound")
            .unwrap();
        String::from_utf8_lossy(&answer).into_owned()
    };
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let answer = plain().await;
        if answer.starts_with("HTTP/1.1 200") && answer.ends_with("ok") {
            break;
        }
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        assert!(
            std::time::Instant::now() < deadline,
            "never served: {answer}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // The eighth handshake is refused, naming the cause, and its connection closes: it must
    // not hold the place kept for other clients.
    let mut tcp = TcpStream::connect(relay.addr).await.unwrap();
    let (status, head) = client_handshake(&mut tcp, "relay", "/t/tunnel", &[]).await;
    assert_eq!(status, 503, "a tunnel past the tunnel cap");
    assert!(
        head.iter()
            .any(|l| l.eq_ignore_ascii_case("connection: close")),
        "{head:?}"
    );
    let mut rest = Vec::new();
    tokio::time::timeout(WAIT, tcp.read_to_end(&mut rest))
        .await
        .expect("the refused connection closes")
        .unwrap();
    relay.wait_log("at the tunnel cap");
    let answer = plain().await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // One tunnel closes: its place is free again.
    drop(tunnels.pop());
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let mut tcp = TcpStream::connect(relay.addr).await.unwrap();
        let (status, _) = client_handshake(&mut tcp, "relay", "/t/tunnel", &[]).await;
        if status == 101 {
            break;
        }
        // The relay may not have seen the close yet.
        assert_eq!(status, 503);
        assert!(
            std::time::Instant::now() < deadline,
            "the place never came back"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_tunnel_that_passes_nothing_for_the_idle_timeout_is_closed_on_both_sides() {
    let (up, _) = silent_tunnels_upstream().await;
    let relay = Relay::start(&[
        "--upstream".into(),
        up.mount("t", ""),
        "--tunnel-idle-timeout".into(),
        "200".into(),
    ]);
    let mut tcp = open_raw_tunnel(&relay).await;
    let mut rest = Vec::new();
    tokio::time::timeout(WAIT, tcp.read_to_end(&mut rest))
        .await
        .expect("the relay closes an idle tunnel")
        .unwrap();
    assert!(rest.is_empty(), "nothing came through a silent tunnel");
    relay.wait_log("a WebSocket tunnel that passed nothing");
}

#[tokio::test]
async fn a_switch_to_any_protocol_but_websocket_is_refused_and_never_reaches_the_upstream() {
    let (up, requests) = silent_tunnels_upstream().await;
    let relay = Relay::start(&["--upstream".into(), up.mount("t", "")]);
    for (method, upgrade) in [
        ("GET", "h2c"),
        ("GET", "websocket, h2c"),
        ("POST", "websocket"),
        ("GET", "TLS/1.0"),
    ] {
        let mut tcp = TcpStream::connect(relay.addr).await.unwrap();
        let req = format!(
            "{method} /t/switch HTTP/1.1\r\nHost: relay\r\nConnection: Upgrade, HTTP2-Settings\r\n\
             Upgrade: {upgrade}\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
             Content-Length: 0\r\n\r\n"
        );
        tcp.write_all(req.as_bytes()).await.unwrap();
        let mut head = vec![0u8; 12];
        tokio::time::timeout(WAIT, tcp.read_exact(&mut head))
            .await
            .expect("an answer within the wait bound")
            .unwrap();
        assert_eq!(
            &head,
            b"HTTP/1.1 501",
            "{method} with Upgrade: {upgrade}: {}",
            String::from_utf8_lossy(&head)
        );
    }
    assert_eq!(
        requests.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "a refused switch reached the upstream"
    );
}

/// An upstream that answers every request with a `101` whose head is `switch` (after the
/// status line).
async fn switching_to(switch: &'static str) -> Upstream {
    Upstream::start(
        None,
        handler(move |_req| async move {
            let mut b = hyper::Response::builder().status(101);
            for line in switch.split("\r\n").filter(|l| !l.is_empty()) {
                let (name, value) = line.split_once(": ").unwrap();
                b = b.header(name, value);
            }
            b.body(full("")).unwrap()
        }),
    )
    .await
}

#[tokio::test]
async fn a_101_that_is_no_websocket_switch_is_answered_502_and_no_tunnel_opens() {
    for switch in [
        "upgrade: h2c\r\nconnection: Upgrade",
        "connection: Upgrade",
        "upgrade: websocket",
        "upgrade: websocket, h2c\r\nconnection: Upgrade",
    ] {
        let up = switching_to(switch).await;
        let relay = Relay::start(&["--upstream".into(), up.mount("t", "")]);
        let mut tcp = TcpStream::connect(relay.addr).await.unwrap();
        let (status, _) = client_handshake(&mut tcp, "relay", "/t/tunnel", &[]).await;
        assert_eq!(status, 502, "a 101 with {switch:?}");
    }
    // A switch the request never asked for (a chunked POST, which hyper's door serves).
    let up = switching_to("upgrade: websocket\r\nconnection: Upgrade").await;
    let relay = Relay::start(&["--upstream".into(), up.mount("t", "")]);
    let mut tcp = TcpStream::connect(relay.addr).await.unwrap();
    tcp.write_all(
        b"POST /t/x HTTP/1.1\r\nHost: relay\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    )
    .await
    .unwrap();
    let mut head = vec![0u8; 12];
    tokio::time::timeout(WAIT, tcp.read_exact(&mut head))
        .await
        .expect("an answer within the wait bound")
        .unwrap();
    assert_eq!(&head, b"HTTP/1.1 502", "{}", String::from_utf8_lossy(&head));
}
