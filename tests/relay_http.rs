//! HTTP forwarding through the relay binary: bytes pass unchanged both ways, SSE is never
//! buffered, only what a reverse proxy must change changes, and each upstream failure class
//! gets a clear answer.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// What the upstream saw of one request.
#[derive(Debug, Clone, Default)]
struct Seen {
    path: String,
    headers: Vec<(String, String)>,
    body_sha: [u8; 32],
    body_len: usize,
}

fn header<'a>(seen: &'a Seen, name: &str) -> Option<&'a str> {
    seen.headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// An upstream that records each request and answers with `x-reply-len` pattern bytes
/// (seed `x-reply-seed`), in 16 KiB frames.
async fn echo_upstream(
    tls: Option<Arc<rustls::ServerConfig>>,
) -> (Upstream, Arc<Mutex<Vec<Seen>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let keep = seen.clone();
    let up = Upstream::start(
        tls,
        handler(move |req| {
            let keep = keep.clone();
            async move {
                let path = req.uri().path_and_query().unwrap().to_string();
                let headers = req
                    .headers()
                    .iter()
                    .map(|(n, v)| (n.to_string(), v.to_str().unwrap_or("").to_string()))
                    .collect();
                let num = |name: &str| -> u64 {
                    req.headers()
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0)
                };
                let (len, seed) = (num("x-reply-len") as usize, num("x-reply-seed"));
                let body = read_body(req.into_body()).await;
                keep.lock().unwrap().push(Seen {
                    path,
                    headers,
                    body_sha: sha(&body),
                    body_len: body.len(),
                });
                hyper::Response::builder()
                    .status(200)
                    .header("content-type", "application/octet-stream")
                    .header("content-encoding", "zstd")
                    .header("x-upstream", "yes")
                    .body(chunked_body(Arc::new(pattern(len, seed)), 16 * 1024))
                    .unwrap()
            }
        }),
    )
    .await;
    (up, seen)
}

async fn round_trip(
    relay: &Relay,
    path: &str,
    up_len: usize,
    down_len: usize,
    seed: u64,
) -> Vec<u8> {
    let sent = Arc::new(pattern(up_len, seed));
    let req = request("POST", relay.addr, path)
        .header("x-reply-len", down_len.to_string())
        .header("x-reply-seed", (seed + 1).to_string())
        .header("content-length", up_len.to_string())
        .body(chunked_body(sent, 64 * 1024))
        .unwrap();
    let res = tokio::time::timeout(WAIT, send(relay.addr, req))
        .await
        .expect("answer within the wait bound")
        .expect("response");
    assert_eq!(res.status(), 200);
    assert_eq!(
        res.headers()["content-encoding"],
        "zstd",
        "encodings pass untouched"
    );
    collect(res.into_body()).await.expect("whole body")
}

#[tokio::test]
async fn bodies_from_empty_to_large_pass_byte_exact_over_plain_and_tls() {
    let pki = pki();
    let dir = tempfile::tempdir().unwrap();
    let ca = write_file(dir.path(), "ca.pem", &pki.ca_pem);
    let (plain, plain_seen) = echo_upstream(None).await;
    let (tls, tls_seen) = echo_upstream(Some(pki.server.clone())).await;
    let relay = Relay::start(&[
        "--upstream".into(),
        plain.mount("plain", "/base"),
        "--upstream".into(),
        tls.mount("secure", ""),
        "--upstream-ca".into(),
        ca.display().to_string(),
    ]);
    let cases = [(0usize, 0usize), (1, 1), (70_001, 300_017), (1 << 20, 3)];
    for (i, (up, down)) in cases.into_iter().enumerate() {
        for (mount, seen) in [("plain", &plain_seen), ("secure", &tls_seen)] {
            let seed = 10 + i as u64;
            let got = round_trip(&relay, &format!("/{mount}/v1/echo?n={i}"), up, down, seed).await;
            assert_eq!(got.len(), down, "{mount} case {i}");
            assert_eq!(
                sha(&got),
                sha(&pattern(down, seed + 1)),
                "{mount} case {i}: bytes down"
            );
            let last = seen.lock().unwrap().last().cloned().unwrap();
            assert_eq!(last.body_len, up, "{mount} case {i}");
            assert_eq!(
                last.body_sha,
                sha(&pattern(up, seed)),
                "{mount} case {i}: bytes up"
            );
        }
    }
    let last = plain_seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(
        last.path, "/base/v1/echo?n=3",
        "only the mount prefix changes"
    );
}

#[tokio::test]
async fn sixty_four_mebibytes_each_way() {
    let (up, seen) = echo_upstream(None).await;
    let relay = Relay::start(&["--upstream".into(), up.mount("big", "")]);
    let n = 64 << 20;
    let got = round_trip(&relay, "/big/v1/upload", n, n, 99).await;
    assert_eq!(got.len(), n);
    assert_eq!(sha(&got), sha(&pattern(n, 100)));
    let last = seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!((last.body_len, last.body_sha), (n, sha(&pattern(n, 99))));
}

#[tokio::test]
async fn only_host_hop_by_hop_headers_and_the_prefix_change() {
    let (up, seen) = echo_upstream(None).await;
    let relay = Relay::start(&["--upstream".into(), up.mount("m", "/root")]);
    let req = request("POST", relay.addr, "/m/v1/messages?beta=true")
        .header("Connection", "keep-alive, x-hop")
        .header("x-hop", "drop me")
        .header("keep-alive", "timeout=5")
        .header("te", "trailers")
        .header("X-Custom-Case", "Kept As Is")
        .header("anthropic-beta", "a,b")
        .header("content-encoding", "gzip")
        .header("content-length", "3")
        .body(full("abc"))
        .unwrap();
    let res = send(relay.addr, req).await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["x-upstream"], "yes");
    let _ = collect(res.into_body()).await;
    let s = seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(s.path, "/root/v1/messages?beta=true");
    assert_eq!(header(&s, "host"), Some(up.addr.to_string().as_str()));
    for gone in ["connection", "x-hop", "keep-alive", "te"] {
        assert_eq!(header(&s, gone), None, "{gone} is hop-by-hop");
    }
    assert_eq!(header(&s, "x-custom-case"), Some("Kept As Is"));
    assert_eq!(header(&s, "anthropic-beta"), Some("a,b"));
    assert_eq!(header(&s, "content-encoding"), Some("gzip"));
    assert_eq!(header(&s, "content-length"), Some("3"));
}

/// The upstream writes SSE event k+1 only after the client has received event k in full:
/// a relay that buffered anything would stall here.
#[tokio::test]
async fn each_sse_event_reaches_the_client_before_the_upstream_writes_the_next() {
    const EVENTS: usize = 12;
    let (ack_tx, ack_rx) = tokio::sync::mpsc::channel::<usize>(1);
    let ack_rx = Arc::new(tokio::sync::Mutex::new(ack_rx));
    let up = sse_upstream(move |tx| {
        let ack_rx = ack_rx.clone();
        tokio::spawn(async move {
            let mut acks = ack_rx.lock().await;
            for k in 0..EVENTS {
                let ev = sse_event("ping", &serde_json::json!({"type": "ping", "k": k}));
                if tx.send(Ok(Bytes::from(ev))).await.is_err() {
                    return;
                }
                match tokio::time::timeout(WAIT, acks.recv()).await {
                    Ok(Some(got)) if got == k => {}
                    _ => return,
                }
            }
        });
    })
    .await;
    let relay = Relay::start(&["--upstream".into(), up.mount("anthropic", "")]);
    let req = request("POST", relay.addr, "/anthropic/v1/messages")
        .header("content-type", "application/json")
        .body(full(r#"{"stream":true}"#))
        .unwrap();
    let res = send(relay.addr, req).await.unwrap();
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    let mut body = res.into_body();
    let mut buf = Vec::new();
    for k in 0..EVENTS {
        let want = sse_event("ping", &serde_json::json!({"type": "ping", "k": k}));
        while buf.len() < want.len() {
            let frame = tokio::time::timeout(WAIT, body.frame())
                .await
                .unwrap_or_else(|_| panic!("event {k} never arrived: the relay held it back"))
                .expect("stream open")
                .expect("frame");
            if let Ok(data) = frame.into_data() {
                buf.extend_from_slice(&data);
            }
        }
        assert_eq!(&buf[..want.len()], want.as_bytes(), "event {k} unchanged");
        buf.drain(..want.len());
        ack_tx.send(k).await.unwrap();
    }
}

async fn error_of(relay: &Relay, path: &str) -> (u16, serde_json::Value) {
    let req = request("GET", relay.addr, path).body(full("")).unwrap();
    let res = tokio::time::timeout(WAIT, send(relay.addr, req))
        .await
        .unwrap()
        .unwrap();
    let status = res.status().as_u16();
    let body = collect(res.into_body()).await.unwrap();
    (
        status,
        serde_json::from_slice(&body).expect("a JSON error body"),
    )
}

#[tokio::test]
async fn a_refused_connection_is_a_502_naming_the_mount_and_class() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let relay = Relay::start(&["--upstream".into(), format!("gone=http://127.0.0.1:{port}")]);
    let (status, body) = error_of(&relay, "/gone/v1/models").await;
    assert_eq!(status, 502);
    assert_eq!(body["error"]["mount"], "gone");
    assert_eq!(body["error"]["class"], "refused");
}

#[tokio::test]
async fn an_upstream_that_never_answers_is_a_504() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // Accepts and holds connections without a byte of answer.
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    let relay = Relay::start(&[
        "--upstream".into(),
        format!("slow=http://{addr}"),
        "--response-timeout".into(),
        "300".into(),
    ]);
    let (status, body) = error_of(&relay, "/slow/v1/models").await;
    assert_eq!(status, 504);
    assert_eq!(body["error"]["class"], "timeout");
    hold.abort();
}

#[tokio::test]
async fn an_untrusted_upstream_certificate_is_a_tls_failure() {
    let trusted = pki();
    let other = pki();
    let dir = tempfile::tempdir().unwrap();
    let ca = write_file(dir.path(), "ca.pem", &trusted.ca_pem);
    let (up, _) = echo_upstream(Some(other.server.clone())).await;
    let relay = Relay::start(&[
        "--upstream".into(),
        up.mount("tls", ""),
        "--upstream-ca".into(),
        ca.display().to_string(),
    ]);
    let (status, body) = error_of(&relay, "/tls/v1/models").await;
    assert_eq!(status, 502);
    assert_eq!(body["error"]["class"], "tls");
}

/// `--upstream-ca NAME=FILE` trusts the CA for that mount's upstream only: another upstream
/// whose certificate the same CA signed is refused, as the API hosts would be.
#[tokio::test]
async fn a_ca_scoped_to_a_mount_is_trusted_for_that_upstream_only() {
    let pki = pki();
    let dir = tempfile::tempdir().unwrap();
    let ca = write_file(dir.path(), "ca.pem", &pki.ca_pem);
    let (mine, _) = echo_upstream(Some(pki.server.clone())).await;
    let (other, _) = echo_upstream(Some(pki.server.clone())).await;
    let relay = Relay::start(&[
        "--upstream".into(),
        mine.mount("mine", ""),
        "--upstream".into(),
        other.mount("other", ""),
        "--upstream-ca".into(),
        format!("mine={}", ca.display()),
    ]);
    let req = request("GET", relay.addr, "/mine/v1/models")
        .header("x-reply-len", "3")
        .body(full(""))
        .unwrap();
    let res = send(relay.addr, req).await.unwrap();
    assert_eq!(res.status(), 200);
    let (status, body) = error_of(&relay, "/other/v1/models").await;
    assert_eq!(status, 502);
    assert_eq!(body["error"]["class"], "tls");
}

/// An upstream that sends a response head and part of a chunked body, then resets.
async fn resetting_upstream(head_only: bool) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                if !head_only {
                    let _ = s
                        .write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                              transfer-encoding: chunked\r\n\r\n\
                              1b\r\nevent: ping\ndata: {\"a\":1}\n\n\r\n",
                        )
                        .await;
                    let _ = s.flush().await;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                // SO_LINGER 0: close with a reset rather than a clean end.
                let std = s.into_std().unwrap();
                let sock = socket_from(std);
                drop(sock);
            });
        }
    });
    addr
}

fn socket_from(s: std::net::TcpStream) -> std::net::TcpStream {
    testkit::proc::set_linger(&s, Some(std::time::Duration::ZERO));
    s
}

#[tokio::test]
async fn a_reset_before_the_response_is_a_502_reset() {
    let addr = resetting_upstream(true).await;
    let relay = Relay::start(&["--upstream".into(), format!("r=http://{addr}")]);
    let (status, body) = error_of(&relay, "/r/v1/models").await;
    assert_eq!(status, 502);
    assert_eq!(body["error"]["class"], "reset");
}

#[tokio::test]
async fn a_reset_mid_stream_breaks_the_client_stream_after_the_bytes_that_came() {
    let addr = resetting_upstream(false).await;
    let relay = Relay::start(&["--upstream".into(), format!("anthropic=http://{addr}")]);
    let req = request("POST", relay.addr, "/anthropic/v1/messages")
        .body(full("{}"))
        .unwrap();
    let res = send(relay.addr, req).await.unwrap();
    assert_eq!(res.status(), 200);
    assert!(
        res.headers().get("date").is_none(),
        "no header the upstream did not send"
    );
    let mut body = res.into_body();
    let mut got = Vec::new();
    let end = loop {
        match tokio::time::timeout(WAIT, body.frame())
            .await
            .expect("bounded")
        {
            Some(Ok(f)) => {
                if let Ok(d) = f.into_data() {
                    got.extend_from_slice(&d);
                }
            }
            Some(Err(_)) => break "error",
            None => break "clean end",
        }
    };
    assert_eq!(got, b"event: ping\ndata: {\"a\":1}\n\n");
    assert_eq!(
        end, "error",
        "the client must see the stream broke, not a clean end"
    );
}

#[tokio::test]
async fn unknown_paths_get_a_404_naming_no_mount() {
    let relay = Relay::start(&[]);
    let (status, body) = error_of(&relay, "/nowhere/v1/messages").await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["class"], "no_mount");
}

#[test]
fn the_banner_names_the_overrides_and_remote_listens_are_refused() {
    let mut relay = Relay::start(&[]);
    let log = relay.log();
    let base = format!("http://{}", relay.addr);
    assert!(
        log.contains(&format!("ANTHROPIC_BASE_URL={base}/anthropic")),
        "{log}"
    );
    assert!(
        log.contains(&format!("codex -c 'openai_base_url=\"{base}/openai/v1\"'")),
        "{log}"
    );
    assert!(
        log.contains(&format!("openai_base_url=\"{base}/chatgpt\"")),
        "{log}"
    );
    assert!(relay.stop().success());

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_windowtap"))
        .args(["relay", "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--allow-remote"));
}

/// What exposes credentials is said once, at the start, naming the risk; a password in an
/// upstream URL is refused without being echoed.
#[test]
fn risky_settings_are_warned_about_and_upstream_passwords_never_printed() {
    // A clear-text upstream off this machine (never contacted: no request is sent).
    let mut relay = Relay::start(&[
        "--upstream".into(),
        "gw=http://gateway.invalid/v1".into(),
        "--upstream".into(),
        "local=http://127.0.0.1:9".into(),
    ]);
    let log = relay.log();
    let warned: Vec<&str> = log.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warned.len(), 1, "{log}");
    assert!(
        warned[0].contains("/gw") && warned[0].contains("unencrypted"),
        "{log}"
    );
    assert!(relay.stop().success());

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_windowtap"))
        .args([
            "relay",
            "--upstream",
            "gw=https://me:pw-CANARY-91c@gateway.invalid",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("user name or password"), "{stderr}");
    assert!(
        !stderr.contains("CANARY") && !stderr.contains("me:"),
        "{stderr}"
    );

    // Listening beyond loopback, as asked: started, and said loudly.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_windowtap"))
        .args(["relay", "--allow-remote", "--listen", "0.0.0.0:0"])
        .arg("--ingest")
        .arg(tempfile::tempdir().unwrap().path().join("i.sock"))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = Vec::new();
    for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)) {
        let line = line.unwrap();
        let done = line.contains("ChatGPT login");
        lines.push(line);
        if done {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let remote: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("--allow-remote"))
        .collect();
    assert_eq!(remote.len(), 1, "{lines:?}");
    assert!(remote[0].contains("unencrypted"), "{lines:?}");
}

#[tokio::test]
async fn logs_carry_one_line_per_exchange_and_no_secret() {
    let (up, _) = echo_upstream(None).await;
    let mut relay = Relay::start(&["--upstream".into(), up.mount("m", "")]);
    let canary = "CANARY-7f3a9";
    let req = request("POST", relay.addr, &format!("/m/v1/messages?key={canary}"))
        .header("authorization", format!("Bearer {canary}"))
        .header("x-reply-len", "5")
        .body(full(format!("{{\"prompt\":\"{canary}\"}}")))
        .unwrap();
    let res = send(relay.addr, req).await.unwrap();
    let _ = collect(res.into_body()).await;
    // The exchange line is written when the exchange is over; stop flushes everything.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(relay.stop().success());
    let log = relay.log();
    assert!(!log.contains(canary), "a secret reached the log:\n{log}");
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("exchange")).collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(lines[0].contains("path=/v1/messages"), "{}", lines[0]);
    assert!(lines[0].contains("status=200"), "{}", lines[0]);
    assert!(lines[0].contains("bytes_down=5"), "{}", lines[0]);
}

/// `--upstream NAME:URL` (a colon for the `=`) gets an answer that names the flag once and
/// shows the form.
#[test]
fn an_upstream_without_its_equals_sign_is_answered_with_the_form() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_windowtap"))
        .args(["relay", "--upstream", "anthropic:http://127.0.0.1:9"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--upstream: expects NAME=URL"), "{err}");
    assert!(!err.contains("--upstream: --upstream"), "{err}");
}
