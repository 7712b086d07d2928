//! The relay's upstream connections: an exchange drives its own upstream connection and hands
//! it back for the next one (per relay core), so keep-alive works as with a pooled client; a
//! connection the upstream closed while idle never costs a request; and idle connections are
//! let go: a burst of streams must not leave as many upstream sockets open for good (found by
//! the soak, docs/soak.md: the relay's descriptors never came back down after the load).

mod support;

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// A raw HTTP/1.1 upstream: answers each request head (no request bodies here) with
/// `body`, counts the connections it accepted, and closes each connection after
/// `per_conn` answers without saying so (no `Connection: close`), as an upstream dropping an
/// idle keep-alive connection does.
async fn raw_upstream(body: &'static str, per_conn: usize) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                for _ in 0..per_conn {
                    // Read one request head.
                    loop {
                        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            buf.drain(..end + 4);
                            break;
                        }
                        let mut chunk = [0u8; 4096];
                        match tcp.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let res = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if tcp.write_all(res.as_bytes()).await.is_err() {
                        return;
                    }
                }
                // Dropping `tcp` closes the connection.
            });
        }
    });
    (format!("pool=http://{addr}"), accepted)
}

/// The relay keeps idle upstream connections per core (a connection belongs to the reactor
/// of the core that opened it), and hands client connections to its cores in turn.
fn relay_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

async fn get_through(relay: &Relay, path: &str) -> (u16, Vec<u8>) {
    let req = request("GET", relay.addr, path).body(full("")).unwrap();
    let res = send(relay.addr, req).await.expect("relay answers");
    let status = res.status().as_u16();
    (status, collect(res.into_body()).await.expect("whole body"))
}

#[tokio::test]
async fn sequential_exchanges_reuse_one_upstream_connection() {
    let (mount, accepted) = raw_upstream("pooled", usize::MAX).await;
    let relay = Relay::start(&["--upstream".into(), mount]);
    let exchanges = 3 * relay_cores() + 2;
    for i in 0..exchanges {
        let (status, body) = get_through(&relay, &format!("/pool/v1/models?i={i}")).await;
        assert_eq!((status, body.as_slice()), (200, &b"pooled"[..]));
    }
    let opened = accepted.load(Ordering::SeqCst);
    assert!(
        opened <= relay_cores(),
        "{exchanges} exchanges one after the other opened {opened} upstream connections, \
         more than one per relay core"
    );
}

#[tokio::test]
async fn empty_bodies_hand_their_connection_back_too() {
    // `Content-Length: 0`: the relay's client side never polls such a body.
    let (mount, accepted) = raw_upstream("", usize::MAX).await;
    let relay = Relay::start(&["--upstream".into(), mount]);
    let exchanges = 3 * relay_cores() + 2;
    for i in 0..exchanges {
        let (status, body) = get_through(&relay, &format!("/pool/v1/models?i={i}")).await;
        assert_eq!((status, body.len()), (200, 0));
    }
    assert!(accepted.load(Ordering::SeqCst) <= relay_cores());
}

#[tokio::test]
async fn an_idle_connection_the_upstream_closed_is_replaced_without_failing_a_request() {
    // Every upstream connection answers once and then closes.
    let (mount, accepted) = raw_upstream("once", 1).await;
    let relay = Relay::start(&["--upstream".into(), mount]);
    for i in 0..4 {
        let (status, body) = get_through(&relay, &format!("/pool/v1/models?i={i}")).await;
        assert_eq!(
            (status, body.as_slice()),
            (200, &b"once"[..]),
            "exchange {i} failed on a connection the upstream had closed"
        );
        // Let the close arrive before the next exchange takes the idle connection.
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_upstream_connection_is_closed_after_the_idle_timeout() {
    // An upstream that says when each of its connections has ended.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (ended_tx, mut ended) = mpsc::unbounded_channel::<()>();
    let server = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let ended_tx = ended_tx.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|req: hyper::Request<_>| async move {
                    let _ = read_body(req.into_body()).await;
                    Ok::<_, Infallible>(hyper::Response::new(full("pong")))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                    .await;
                let _ = ended_tx.send(());
            });
        }
    });
    let relay = Relay::start(&[
        "--upstream".into(),
        format!("anthropic=http://{addr}"),
        "--upstream-idle".into(),
        "200".into(),
    ]);

    let req = request("POST", relay.addr, "/anthropic/v1/ping")
        .body(full("ping"))
        .unwrap();
    let res = send(relay.addr, req).await.unwrap();
    assert_eq!(collect(res.into_body()).await.unwrap(), b"pong");

    // The relay keeps the upstream connection for reuse, then closes it once idle.
    tokio::time::timeout(WAIT, ended.recv())
        .await
        .expect("the idle upstream connection was closed within the wait bound")
        .unwrap();
    server.abort();
}

/// An upstream that answers every request with `answer:<path>`, except that after answering
/// `/stray` it waits a second and writes a second response nobody asked for on the same
/// connection, before it reads the next request there.
async fn stray_upstream() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    // One request head, and a chunked body's end if it has one.
                    let head = loop {
                        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break buf.drain(..end + 4).collect::<Vec<u8>>();
                        }
                        let mut chunk = [0u8; 4096];
                        match tcp.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
                    if head.contains("transfer-encoding: chunked") {
                        while !buf.windows(5).any(|w| w == b"0\r\n\r\n") {
                            let mut chunk = [0u8; 4096];
                            match tcp.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        }
                        let end = buf.windows(5).position(|w| w == b"0\r\n\r\n").unwrap();
                        buf.drain(..end + 5);
                    }
                    let path = head.split(' ').nth(1).unwrap_or("").to_string();
                    let body = format!("answer:{path}");
                    let res = format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if tcp.write_all(res.as_bytes()).await.is_err() {
                        return;
                    }
                    if path == "/stray" {
                        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                        let stray = "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nSTRAY";
                        if tcp.write_all(stray.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    format!("pool=http://{addr}")
}

/// Runs, as the user `uid`, a client that sends `count` requests for `/pool/victim/<n>`, one
/// connection each, one after the other (`chunked`: with a chunked body, which hyper's door
/// serves), and returns each whole answer.
fn requests_as(uid: u32, relay: &Relay, count: usize, chunked: bool) -> Vec<String> {
    use std::os::unix::process::CommandExt;
    const CLIENT: &str = r#"
import socket, sys
port, count, chunked = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
for n in range(count):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    if chunked:
        req = "POST /pool/victim/%d HTTP/1.1\r\nHost: relay\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n" % n
    else:
        req = "GET /pool/victim/%d HTTP/1.1\r\nHost: relay\r\nConnection: close\r\n\r\n" % n
    s.sendall(req.encode())
    answer = b""
    while True:
        part = s.recv(4096)
        if not part:
            break
        answer += part
    print(answer.decode("latin-1").replace("\r\n", " "))
    s.close()
"#;
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            CLIENT,
            &relay.addr.port().to_string(),
            &count.to_string(),
            if chunked { "1" } else { "0" },
        ])
        .uid(uid)
        .gid(uid)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stray_upstream_response_never_reaches_another_user_s_request() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("SKIPPED: not root; a client of another user (uid 65534) needs it");
        return;
    }
    let python = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !python {
        eprintln!("SKIPPED: python3 is not installed; the other user's client needs it");
        return;
    }
    for chunked in [false, true] {
        let relay = Relay::start(&["--upstream".into(), stray_upstream().await]);
        // This user's exchange leaves its upstream connection idle, with a stray response
        // on its way.
        let (status, body) = get_through(&relay, "/pool/stray").await;
        assert_eq!((status, body.as_slice()), (200, &b"answer:/stray"[..]));
        // Another user's requests, at least one on each relay core, before the stray comes.
        let count = 2 * relay_cores();
        let relay_for = &relay;
        let answers = tokio::task::block_in_place(|| requests_as(65534, relay_for, count, chunked));
        assert_eq!(answers.len(), count, "{answers:?}");
        for (n, answer) in answers.iter().enumerate() {
            assert!(
                answer.starts_with("HTTP/1.1 200")
                    && answer.contains(&format!("answer:/victim/{n}")),
                "chunked {chunked}: the other user's request {n} got {answer:?}"
            );
        }
    }
}
