//! The head decisions against hyper's: every request head `h1` takes, hyper's HTTP/1.1 server
//! takes too, as the same method with a body of the same length; every response head `h1`
//! takes, hyper's HTTP/1.1 client takes too, as the same status with a body framed the same
//! way.
//!
//! A head the relay takes it forwards on its own framing, and one it hands over goes to hyper
//! (which answers it or refuses it). So the one disagreement that matters is a head `h1`
//! takes that hyper would refuse or frame otherwise: then the relay and a standard server
//! would read the same bytes as different requests. Heads are generated from the pieces
//! smuggling is made of (`heads`), each body of the length `h1` parsed follows its head, and
//! hyper serves the bytes over an in-memory pipe with a service that reads the whole body.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use h1::parse_request;
use h1::{parse_response, Framing, Parsed, ResponseParsed};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use proptest::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod heads;
use heads::{request_head, response_head};

/// What hyper made of one request: its method and how many body bytes it delivered.
#[derive(Debug, PartialEq, Eq)]
struct Served {
    method: String,
    body_len: u64,
}

/// Serves `bytes` (then the end of the input, a half-close hyper is told to allow, so that it
/// answers what came before) with hyper's HTTP/1.1 server; the requests it took, and whether
/// its answer to the first was a success.
async fn hyper_serves(bytes: Vec<u8>) -> (Vec<Served>, bool) {
    let (client, server) = tokio::io::duplex(1 << 20);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let log = log.clone();
        async move {
            let method = req.method().to_string();
            let body = req.into_body().collect().await.map(|b| b.to_bytes());
            if let Ok(body) = &body {
                log.lock().unwrap().push(Served {
                    method,
                    body_len: body.len() as u64,
                });
            }
            Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::new())))
        }
    });
    let serving = tokio::spawn(async move {
        let _ = hyper::server::conn::http1::Builder::new()
            .half_close(true)
            .serve_connection(TokioIo::new(server), service)
            .await;
    });
    let (mut read, mut write) = tokio::io::split(client);
    write.write_all(&bytes).await.unwrap();
    write.shutdown().await.unwrap();
    let mut answer = Vec::new();
    let _ = read.read_to_end(&mut answer).await;
    let _ = serving.await;
    let ok = answer.starts_with(b"HTTP/1.1 200");
    let served = std::mem::take(&mut *seen.lock().unwrap());
    (served, ok)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Checks one input; returns whether `h1` took it (for the tally).
fn agree(rt: &tokio::runtime::Runtime, data: &[u8]) -> Result<bool, TestCaseError> {
    let Parsed::Complete(len, head) = parse_request(data) else {
        return Ok(false);
    };
    // A body is capped by the generator's lengths (under 100,000 bytes).
    let mut bytes = data[..len].to_vec();
    bytes.extend(std::iter::repeat_n(b'x', head.body_len as usize));
    let (served, ok) = rt.block_on(hyper_serves(bytes));
    prop_assert!(
        ok,
        "hyper refused a head h1 takes: {:?}",
        String::from_utf8_lossy(&data[..len])
    );
    prop_assert_eq!(
        served.first(),
        Some(&Served {
            method: head.method.to_string(),
            body_len: head.body_len,
        }),
        "hyper framed {:?} otherwise",
        String::from_utf8_lossy(&data[..len])
    );
    Ok(true)
}

/// Runs `check` on 1,500 heads from `heads`; fails unless more than 100 were taken (the
/// generator must reach heads h1 takes, or the check says nothing).
fn check_generated(
    heads: impl Strategy<Value = Vec<u8>>,
    check: fn(&tokio::runtime::Runtime, &[u8]) -> Result<bool, TestCaseError>,
) {
    let rt = runtime();
    let taken = std::cell::Cell::new(0usize);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 1500,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    runner
        .run(&heads, |data| {
            taken.set(taken.get() + usize::from(check(&rt, &data)?));
            Ok(())
        })
        .unwrap();
    let taken = taken.get();
    assert!(
        taken > 100,
        "only {taken} of 1,500 generated heads were taken"
    );
}

#[test]
fn hyper_takes_every_head_h1_takes_with_the_same_length() {
    check_generated(request_head(), agree);
}

#[test]
fn the_desync_suites_heads_agree_too() {
    let rt = runtime();
    for head in [
        &b"POST /up/a HTTP/1.1\r\nHost: relay\r\nConnection: Content-Length\r\nContent-Length: 5\r\n\r\n"[..],
        b"POST /up/a HTTP/1.1\r\nConnection: close, content-length\r\nContent-Length: 3\r\ncontent-length: 03\r\n\r\n",
        b"POST /up/a HTTP/1.1\nHost: relay\nContent-Length: 2\n\n",
        b"GET /up/x HTTP/1.1\r\nConnection: keep-alive, Transfer-Encoding, host\r\n\r\n",
    ] {
        assert!(agree(&rt, head).unwrap(), "{:?}", String::from_utf8_lossy(head));
    }
}

/// What hyper's client made of one response: its status and how many body bytes it delivered
/// before the body ended (`None` for the body: it ended in an error).
#[derive(Debug, PartialEq, Eq)]
struct Received {
    status: u16,
    body_len: Option<u64>,
}

/// Sends a `GET` with hyper's HTTP/1.1 client and answers it with `bytes`, then the end of
/// the connection; what hyper received, or `None` if it refused the head.
async fn hyper_receives(bytes: Vec<u8>) -> Option<Received> {
    let (client, server) = tokio::io::duplex(1 << 20);
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(client))
        .await
        .unwrap();
    let driving = tokio::spawn(connection);
    let answering = tokio::spawn(async move {
        let (mut read, mut write) = tokio::io::split(server);
        write.write_all(&bytes).await.unwrap();
        write.shutdown().await.unwrap();
        // Takes the request, so that the client's write never waits.
        let mut request = Vec::new();
        let _ = read.read_to_end(&mut request).await;
    });
    let request = hyper::Request::get("/")
        .header("host", "up")
        .body(http_body_util::Empty::<Bytes>::new())
        .unwrap();
    let received = match sender.send_request(request).await {
        Err(_) => None,
        Ok(res) => {
            let status = res.status().as_u16();
            let body = res.into_body().collect().await.map(|b| b.to_bytes());
            Some(Received {
                status,
                body_len: body.ok().map(|b| b.len() as u64),
            })
        }
    };
    drop(sender);
    let _ = driving.await;
    answering.abort();
    received
}

/// Bytes that follow every body: read as body where the framing is wrong.
const AFTER: &[u8] = b"JUNK";

/// Checks one input; returns whether `h1` took it as a final response.
fn agree_on_response(rt: &tokio::runtime::Runtime, data: &[u8]) -> Result<bool, TestCaseError> {
    let ResponseParsed::Complete(len, head) = parse_response(data) else {
        return Ok(false);
    };
    // A body as `h1` framed it, then more bytes and the end of the connection; the body
    // `h1` would pass on is `payload` bytes long.
    let mut bytes = data[..len].to_vec();
    let payload = match head.framing {
        Framing::Empty => 0,
        Framing::Length(n) => {
            bytes.extend(std::iter::repeat_n(b'x', n as usize));
            n
        }
        Framing::Chunked(_) => {
            bytes.extend_from_slice(b"5\r\nhello\r\n0\r\n\r\n");
            5
        }
        Framing::UntilClose => AFTER.len() as u64,
    };
    bytes.extend_from_slice(AFTER);
    let received = rt.block_on(hyper_receives(bytes));
    let shown = String::from_utf8_lossy(&data[..len]);
    prop_assert!(
        received.is_some(),
        "hyper refused a response head h1 takes: {:?}",
        shown
    );
    prop_assert_eq!(
        received.unwrap(),
        Received {
            status: head.status,
            body_len: Some(payload),
        },
        "hyper framed {:?} ({:?}) otherwise",
        shown,
        head.framing
    );
    Ok(true)
}

#[test]
fn hyper_takes_every_response_head_h1_takes_with_the_same_framing() {
    check_generated(response_head(), agree_on_response);
}
