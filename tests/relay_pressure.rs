//! The relay under pressure from its clients (issue 13): slow clients are closed, a client
//! over the connection cap is refused at once instead of hanging, and a flood of malformed
//! ingest lines makes a handful of log lines. Every wait is bounded; no timing thresholds.

mod support;

use std::time::Duration;

use bytes::Bytes;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Reads until the relay closes the connection (bounded by [`WAIT`]); returns what it sent.
async fn read_to_close(tcp: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(WAIT, tcp.read(&mut buf))
            .await
            .expect("the relay closes the connection within the wait bound")
            .unwrap_or(0);
        if n == 0 {
            return got;
        }
        got.extend_from_slice(&buf[..n]);
    }
}

/// A relay started with `flag value` in front of an upstream that echoes request bodies.
async fn echo_relay(flag: &str, value: &str) -> (Upstream, Relay) {
    let up = Upstream::start(
        None,
        handler(|req| async move {
            let body = read_body(req.into_body()).await;
            hyper::Response::new(full(Bytes::from(body)))
        }),
    )
    .await;
    let relay = Relay::start(&[
        "--upstream".into(),
        up.mount("a", ""),
        flag.into(),
        value.into(),
    ]);
    (up, relay)
}

/// POSTs `len` patterned bytes through the relay to the echo; on a 200, asserts they came
/// back intact. Returns the status.
async fn echo_through(relay: &Relay, len: usize, seed: u64) -> u16 {
    let body = pattern(len, seed);
    let res = send(
        relay.addr,
        request("POST", relay.addr, "/a/echo")
            .body(full(body.clone()))
            .unwrap(),
    )
    .await
    .unwrap();
    let status = res.status().as_u16();
    if status == 200 {
        assert_eq!(sha(&collect(res.into_body()).await.unwrap()), sha(&body));
    }
    status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_connections_are_closed() {
    let (_up, relay) = echo_relay("--header-timeout", "300").await;
    let mut tasks = Vec::new();
    for i in 0..20 {
        let addr = relay.addr;
        tasks.push(tokio::spawn(async move {
            let mut tcp = TcpStream::connect(addr).await.unwrap();
            // A request head that never ends: one header byte every 50 ms, for as long as the
            // relay keeps the connection.
            tcp.write_all(b"POST /a/x HTTP/1.1\r\nhost: x\r\n")
                .await
                .unwrap();
            let (mut rd, mut wr) = tcp.into_split();
            let trickle = tokio::spawn(async move {
                loop {
                    if wr.write_all(b"x").await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            });
            let mut buf = [0u8; 1024];
            loop {
                let n = tokio::time::timeout(WAIT, rd.read(&mut buf))
                    .await
                    .unwrap_or_else(|_| panic!("slow client {i} was never closed"))
                    .unwrap_or(0);
                if n == 0 {
                    break;
                }
            }
            trickle.abort();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // The relay still serves, bytes intact.
    assert_eq!(echo_through(&relay, 100_000, 7).await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_connection_cap_new_clients_get_a_clean_refusal() {
    let (_up, relay) = echo_relay("--max-connections", "4").await;
    // Four keep-alive connections, each with an answered request, so the relay has admitted
    // every one of them.
    let mut held = Vec::new();
    for _ in 0..4 {
        let tcp = TcpStream::connect(relay.addr).await.unwrap();
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
                .await
                .unwrap();
        let conn = tokio::spawn(conn);
        let res = sender
            .send_request(
                request("POST", relay.addr, "/a/x")
                    .body(full("hi"))
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        assert_eq!(collect(res.into_body()).await.unwrap(), b"hi");
        held.push((sender, conn));
    }
    // The fifth: answered at once with a 503 naming the cause, and closed.
    let mut tcp = TcpStream::connect(relay.addr).await.unwrap();
    tcp.write_all(b"GET /a/x HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let answer = String::from_utf8_lossy(&read_to_close(&mut tcp).await).into_owned();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains(r#""class":"at_capacity""#), "{answer}");
    relay.wait_log("at the connection cap");

    // One closes: a new client is served again, bytes intact.
    let (sender, conn) = held.pop().unwrap();
    drop(sender);
    let _ = conn.await;
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let status = echo_through(&relay, 50_000, 3).await;
        if status == 200 {
            break;
        }
        // The relay may not have seen the close yet.
        assert_eq!(status, 503);
        assert!(std::time::Instant::now() < deadline, "never admitted again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(held);
}

/// One SSE event that never ends: `len` bytes of data after its `data:`, gzip-compressed
/// (63 MiB become about 64 KiB).
fn gzip_event_bomb(len: usize) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(b"event: response.output_text.done\ndata: ")
        .unwrap();
    let zeros = vec![b'0'; 1 << 20];
    for _ in 0..len >> 20 {
        e.write_all(&zeros).unwrap();
    }
    e.finish().unwrap()
}

/// The reasons of the `observation_lost` events of a capture.
fn lost_reasons(capture: &std::path::Path) -> Vec<String> {
    capture_lines(capture)
        .iter()
        .filter(|e| e["type"] == "observation_lost")
        .map(|e| e["reason"].as_str().unwrap_or("").to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_streams_lose_their_observation_to_the_budget_and_every_byte_is_forwarded() {
    let bomb = Bytes::from(gzip_event_bomb(63 << 20));
    // An unfinished request body: 63 MiB of zeros as zstd, about 2 KiB.
    let req_bomb = Bytes::from(zstd::stream::encode_all(&vec![0u8; 63 << 20][..], 19).unwrap());
    let served = bomb.clone();
    let up = Upstream::start(
        None,
        handler(move |req| {
            let bomb = served.clone();
            async move {
                if req.headers().contains_key("content-encoding") {
                    // The unfinished upload: answer with the digest of what arrived so far,
                    // once all of it has.
                    let want: usize = req.headers()["x-len"].to_str().unwrap().parse().unwrap();
                    let mut body = req.into_body();
                    let mut got = Vec::new();
                    while got.len() < want {
                        use http_body_util::BodyExt;
                        match body.frame().await {
                            Some(Ok(f)) => got.extend_from_slice(f.data_ref().unwrap()),
                            _ => break,
                        }
                    }
                    return hyper::Response::new(full(sha(&got).to_vec()));
                }
                let _ = read_body(req.into_body()).await;
                let mut res = sse_response(full(bomb));
                res.headers_mut()
                    .insert("content-encoding", "gzip".parse().unwrap());
                res
            }
        }),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let capture = dir.path().join("capture.jsonl");
    let mut relay = Relay::start(&[
        "--upstream".into(),
        up.mount("a", ""),
        "--observer-budget".into(),
        "8".into(),
        "--capture".into(),
        capture.display().to_string(),
    ]);
    let mut tasks = Vec::new();
    for i in 0..20 {
        let addr = relay.addr;
        let (bomb, req_bomb) = (bomb.clone(), req_bomb.clone());
        tasks.push(tokio::spawn(async move {
            if i % 2 == 0 {
                let res = send(
                    addr,
                    request("POST", addr, "/a/v1/responses")
                        .header("content-type", "application/json")
                        .body(full(r#"{"model":"m","input":"hi","stream":true}"#))
                        .unwrap(),
                )
                .await
                .unwrap();
                assert_eq!(res.status(), 200);
                let got = collect(res.into_body()).await.unwrap();
                assert_eq!(sha(&got), sha(&bomb), "stream {i}: bytes differ");
            } else {
                let (tx, body) = channel_body();
                tx.send(Ok(req_bomb.clone())).await.unwrap();
                let res = send(
                    addr,
                    request("POST", addr, "/a/v1/responses")
                        .header("content-type", "application/json")
                        .header("content-encoding", "zstd")
                        .header("x-len", req_bomb.len().to_string())
                        .body(body)
                        .unwrap(),
                )
                .await
                .unwrap();
                let got = collect(res.into_body()).await.unwrap();
                assert_eq!(got, sha(&req_bomb).to_vec(), "upload {i}: bytes differ");
                // The body never ends: the client goes away with it unfinished.
                drop(tx);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    relay.stop();
    let reasons = lost_reasons(&capture);
    assert_eq!(
        reasons.iter().filter(|r| *r == "budget").count(),
        20,
        "every hostile stream loses its observation to the budget: {reasons:?}"
    );
}
