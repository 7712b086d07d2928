//! The verbatim path: plain HTTP/1.1 exchanges pass with their bytes as received, response
//! chunk framing included (crates/relay/src/verbatim.rs). What it does not serve is handed to hyper
//! mid-connection with nothing lost; a keep-alive client connection carries exchanges of both
//! kinds, pipelined ones, and a body the upstream ends by closing; an upstream that answers
//! before the request body is complete gets its answer through.

mod support;

use std::time::Duration;

use http_body_util::BodyExt;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A chunked body with a chunk extension and a trailer, as an upstream may frame it.
const FRAMED: &[u8] = b"5;x=1\r\nhello\r\n6\r\n world\r\n0\r\nx-t: 1\r\n\r\n";

/// Reads one request (head, and a body by `Content-Length` or chunk framing); `None` at the end.
async fn read_request(tcp: &mut TcpStream, buf: &mut Vec<u8>) -> Option<(String, Vec<u8>)> {
    async fn more(tcp: &mut TcpStream, buf: &mut Vec<u8>) -> Option<()> {
        let mut chunk = [0u8; 65536];
        match tokio::time::timeout(WAIT, tcp.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => {
                buf.extend_from_slice(&chunk[..n]);
                Some(())
            }
            _ => None,
        }
    }
    let end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        more(tcp, buf).await?;
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    buf.drain(..end);
    let path = head.split(' ').nth(1).unwrap_or("").to_string();
    let len = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok());
    let body = if head.contains("transfer-encoding: chunked") {
        // Good enough for the tests' bodies: single-line sizes, no extensions, no trailers.
        let mut body = Vec::new();
        loop {
            let line_end = loop {
                if let Some(p) = buf.windows(2).position(|w| w == b"\r\n") {
                    break p;
                }
                more(tcp, buf).await?;
            };
            let size =
                usize::from_str_radix(std::str::from_utf8(&buf[..line_end]).ok()?, 16).ok()?;
            buf.drain(..line_end + 2);
            while buf.len() < size + 2 {
                more(tcp, buf).await?;
            }
            body.extend_from_slice(&buf[..size]);
            buf.drain(..size + 2);
            if size == 0 {
                break body;
            }
        }
    } else if path.contains("early") {
        // Answers before the body: leaves it unread.
        Vec::new()
    } else {
        let len = len.unwrap_or(0);
        while buf.len() < len {
            more(tcp, buf).await?;
        }
        buf.drain(..len).collect()
    };
    Some((path, body))
}

/// A raw HTTP/1.1 upstream answering by path: `/framed` a chunked body with an extension
/// and a trailer, `/close` a body ended by closing, `/early` a 413 before reading the body
/// (then closing), `/trickle` a chunked body whose chunk-size lines and data come in writes
/// of their own, `/stall` a chunked body's first chunk and then nothing for a minute with
/// the connection open, anything else an echo of the request body.
async fn raw_upstream() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                while let Some((path, body)) = read_request(&mut tcp, &mut buf).await {
                    let reply = if path.ends_with("/framed") {
                        let mut r = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
                        r.extend_from_slice(FRAMED);
                        r
                    } else if path.ends_with("/close") {
                        let _ = tcp
                            .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nuntil ")
                            .await;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        let _ = tcp.write_all(b"the close").await;
                        return;
                    } else if path.ends_with("/trickle") {
                        // Chunk framing and data in separate writes, each after a pause.
                        let pieces: [&[u8]; 5] = [
                            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
                            b"5\r\n",
                            b"hello\r\n",
                            b"0\r\n",
                            b"\r\n",
                        ];
                        for piece in pieces {
                            if tcp.write_all(piece).await.is_err() {
                                return;
                            }
                            tokio::time::sleep(Duration::from_millis(30)).await;
                        }
                        continue;
                    } else if path.ends_with("/stall") {
                        let _ = tcp
                            .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
                            .await;
                        tokio::time::sleep(Duration::from_secs(60)).await;
                        return;
                    } else if path.ends_with("/early") {
                        let _ = tcp
                            .write_all(b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 8\r\nconnection: close\r\n\r\ntoo long")
                            .await;
                        // Let the answer leave before the close.
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        return;
                    } else {
                        let mut r =
                            format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len())
                                .into_bytes();
                        r.extend_from_slice(&body);
                        r
                    };
                    if tcp.write_all(&reply).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

async fn relay() -> Relay {
    let up = raw_upstream().await;
    Relay::start(&[format!("--upstream=t=http://{up}")])
}

/// Reads from `tcp` until `buf` ends with `end`.
async fn read_until_end(tcp: &mut TcpStream, end: &[u8]) -> Vec<u8> {
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    while !got.ends_with(end) {
        let n = tokio::time::timeout(WAIT, tcp.read(&mut chunk))
            .await
            .expect("the rest of the response within the wait bound")
            .unwrap();
        assert!(
            n > 0,
            "the connection closed early: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&chunk[..n]);
    }
    got
}

/// Decodes a chunked body (strictly: sizes, CRLFs, trailer lines) into its payload and its
/// trailer section; `None` if it is not one complete chunked body.
fn dechunk(mut wire: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut payload = Vec::new();
    loop {
        let eol = wire.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&wire[..eol]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?, 16).ok()?;
        wire = &wire[eol + 2..];
        if size == 0 {
            let end = wire
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .map(|p| p + 2);
            return match end {
                Some(t) if wire.len() == t + 2 => Some((payload, wire[..t].to_vec())),
                None if wire == b"\r\n" => Some((payload, Vec::new())),
                _ => None,
            };
        }
        payload.extend_from_slice(wire.get(..size)?);
        if wire.get(size..size + 2)? != b"\r\n" {
            return None;
        }
        wire = &wire[size + 2..];
    }
}

#[tokio::test]
async fn a_chunked_body_reaches_the_client_with_its_payload_and_trailers() {
    let relay = relay().await;
    let mut tcp = TcpStream::connect(relay.addr).await.unwrap();
    tcp.write_all(b"POST /t/v1/framed HTTP/1.1\r\nhost: relay\r\ncontent-length: 2\r\n\r\nhi")
        .await
        .unwrap();
    let got = read_until_end(&mut tcp, b"x-t: 1\r\n\r\n").await;
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    let body = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let (payload, trailers) = dechunk(&got[body..]).expect("one complete chunked body");
    assert_eq!(payload, b"hello world", "{text}");
    assert_eq!(trailers, b"x-t: 1\r\n", "the trailer passes: {text}");
}

/// One client connection, driven by hyper's client.
async fn connection(relay: &Relay) -> http1::SendRequest<Body> {
    let tcp = TcpStream::connect(relay.addr).await.unwrap();
    let (sender, conn) = http1::handshake(TokioIo::new(tcp)).await.unwrap();
    tokio::spawn(conn);
    sender
}

async fn exchange(
    sender: &mut http1::SendRequest<Body>,
    req: http::Request<Body>,
) -> (u16, Vec<u8>) {
    sender
        .ready()
        .await
        .expect("the connection carries another request");
    let res = tokio::time::timeout(WAIT, sender.send_request(req))
        .await
        .expect("an answer within the wait bound")
        .unwrap();
    let status = res.status().as_u16();
    let body = res.into_body().collect().await.unwrap().to_bytes().to_vec();
    (status, body)
}

fn post(relay: &Relay, path: &str, body: Body) -> http::Request<Body> {
    request("POST", relay.addr, path).body(body).unwrap()
}

#[tokio::test]
async fn one_connection_carries_verbatim_exchanges_then_hyper_after_a_chunked_upload() {
    let relay = relay().await;
    let mut sender = connection(&relay).await;
    let data = pattern(300_000, 7);
    // Verbatim: a body of known length.
    let (status, body) = exchange(&mut sender, post(&relay, "/t/echo", full(data.clone()))).await;
    assert_eq!((status, sha(&body)), (200, sha(&data)));
    // A chunked upload: handed to hyper, with the connection.
    let chunked = chunked_body(std::sync::Arc::new(data.clone()), 10_000);
    let (status, body) = exchange(&mut sender, post(&relay, "/t/echo", chunked)).await;
    assert_eq!((status, sha(&body)), (200, sha(&data)));
    // The same connection goes on (served by hyper now).
    let (status, body) = exchange(&mut sender, post(&relay, "/t/echo", full("again"))).await;
    assert_eq!((status, body.as_slice()), (200, b"again".as_slice()));
}

#[tokio::test]
async fn a_body_the_upstream_ends_by_closing_is_chunked_and_the_connection_lives_on() {
    let relay = relay().await;
    let mut sender = connection(&relay).await;
    let (status, body) = exchange(&mut sender, post(&relay, "/t/close", full(""))).await;
    assert_eq!(
        (status, body.as_slice()),
        (200, b"until the close".as_slice())
    );
    let (status, body) = exchange(&mut sender, post(&relay, "/t/echo", full("next"))).await;
    assert_eq!((status, body.as_slice()), (200, b"next".as_slice()));
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() {
    let relay = relay().await;
    let mut tcp = TcpStream::connect(relay.addr).await.unwrap();
    tcp.write_all(
        b"POST /t/echo HTTP/1.1\r\ncontent-length: 5\r\n\r\nfirstPOST /t/echo HTTP/1.1\r\ncontent-length: 6\r\n\r\nsecond",
    )
    .await
    .unwrap();
    let got = read_until_end(&mut tcp, b"second").await;
    let text = String::from_utf8_lossy(&got);
    let first = text.find("\r\n\r\nfirst").expect("the first answer");
    let second = text.find("\r\n\r\nsecond").expect("the second answer");
    assert!(first < second, "{text}");
    assert_eq!(text.matches("HTTP/1.1 200 OK").count(), 2, "{text}");
}

#[tokio::test]
async fn an_answer_before_the_whole_upload_reaches_the_client_and_the_connection_closes() {
    let relay = relay().await;
    let mut tcp = TcpStream::connect(relay.addr).await.unwrap();
    tcp.write_all(b"POST /t/early HTTP/1.1\r\ncontent-length: 10000000\r\n\r\n")
        .await
        .unwrap();
    tcp.write_all(&[b'x'; 4096]).await.unwrap();
    let mut got = Vec::new();
    let read = tokio::time::timeout(WAIT, tcp.read_to_end(&mut got)).await;
    assert!(
        read.is_ok(),
        "the relay closes the connection after the answer"
    );
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.starts_with("HTTP/1.1 413 Payload Too Large\r\n"),
        "{text}"
    );
    assert!(
        text.to_ascii_lowercase().contains("connection: close"),
        "{text}"
    );
    assert!(text.ends_with("too long"), "{text}");
}

/// Sends `request` through a relay with `flag` (a body bound set short) and reads until the
/// relay closes the connection, which it must do within `within`.
async fn closed_after(flag: &str, request: &[u8], within: Duration) -> String {
    let up = raw_upstream().await;
    let relay = Relay::start(&[format!("--upstream=t=http://{up}"), flag.to_string()]);
    let mut tcp = TcpStream::connect(relay.addr).await.unwrap();
    tcp.write_all(request).await.unwrap();
    let mut got = Vec::new();
    let read = tokio::time::timeout(within, tcp.read_to_end(&mut got)).await;
    assert!(read.is_ok(), "the relay ends the exchange and closes");
    String::from_utf8_lossy(&got).into_owned()
}

/// An upstream that stops sending mid-body ends its exchange after `--body-timeout`: the
/// client gets what came, no end of the body (so it can tell), and a closed connection.
#[tokio::test]
async fn an_upstream_quiet_mid_body_ends_its_exchange_after_the_body_timeout() {
    let verbatim: &[u8] = b"POST /t/stall HTTP/1.1\r\nhost: t\r\ncontent-length: 2\r\n\r\n{}";
    // A chunked upload goes through hyper's door: the same bound there, well short of the
    // upstream's own minute of silence and of the test upstream's reads.
    let hyper: &[u8] = b"POST /t/stall HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n";
    for (request, within) in [(verbatim, WAIT), (hyper, Duration::from_secs(10))] {
        let text = closed_after("--body-timeout=300", request, within).await;
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(
            text.ends_with("5\r\nfirst\r\n"),
            "the body is cut, not ended: {text}"
        );
    }
}

/// A client that announces a body and stops sending it ends its exchange after
/// `--client-body-timeout` (before: it held its connection and an upstream one for the
/// response timeout, five minutes).
#[tokio::test]
async fn a_client_quiet_mid_body_ends_its_exchange_after_the_client_body_timeout() {
    let text = closed_after(
        "--client-body-timeout=300",
        b"POST /t/echo HTTP/1.1\r\nhost: t\r\ncontent-length: 1000\r\n\r\n0123456789",
        WAIT,
    )
    .await;
    assert!(text.is_empty(), "no answer: {text}");
}

/// On hyper's door too (a chunked upload is handed to hyper), a client quiet mid-body ends its
/// exchange after `--client-body-timeout`, not after the upstream's patience.
#[tokio::test]
async fn on_hyper_s_door_a_client_quiet_mid_body_ends_its_exchange_after_the_client_body_timeout() {
    // The test upstream itself gives up on a quiet request after 30 s.
    let text = closed_after(
        "--client-body-timeout=300",
        b"POST /t/echo HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n",
        Duration::from_secs(10),
    )
    .await;
    assert!(
        !text.starts_with("HTTP/1.1 200"),
        "an exchange whose request never ended got a success: {text}"
    );
}

/// A read that carries chunk framing and no payload (a chunk-size line on its own) leaves
/// nothing to write; the relay reads on and the body arrives whole.
#[tokio::test]
async fn a_body_whose_chunk_lines_come_apart_from_their_data_arrives_whole() {
    let relay = relay().await;
    let mut tcp = TcpStream::connect(relay.addr).await.unwrap();
    tcp.write_all(b"GET /t/trickle HTTP/1.1\r\nhost: t\r\n\r\n")
        .await
        .unwrap();
    let got = tokio::time::timeout(WAIT, read_until_end(&mut tcp, b"0\r\n\r\n"))
        .await
        .expect("the whole body within the wait");
    let text = String::from_utf8_lossy(&got);
    let body = &got[text.find("\r\n\r\n").unwrap() + 4..];
    let (payload, trailers) = dechunk(body).expect("a chunked body");
    assert_eq!((&payload[..], &trailers[..]), (&b"hello"[..], &b""[..]));
}
