//! Shared test support: the relay as the built binary, a scripted upstream (plain or TLS with
//! a CA made at test time), a minimal HTTP/1.1 client and byte hashing.
//!
//! Everything listens on 127.0.0.1 with ephemeral ports; every wait is bounded.
#![allow(dead_code)]

pub mod ws;

use std::convert::Infallible;
use std::future::Future;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use sha2::{Digest, Sha256};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// A bound for every wait in the tests: generous, since CI shares 2 cores.
pub const WAIT: Duration = Duration::from_secs(30);

pub type Body = BoxBody<Bytes, std::io::Error>;

pub fn sha(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Deterministic pseudo-random bytes (xorshift), so both ends can agree without storing them.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        let n = (len - v.len()).min(8);
        v.extend_from_slice(&b[..n]);
    }
    v
}

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never: Infallible| match never {})
        .boxed()
}

/// A body fed from a channel: each `Bytes` sent becomes one frame, written when sent.
pub fn channel_body() -> (mpsc::Sender<Result<Bytes, std::io::Error>>, Body) {
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item.map(Frame::data), rx))
    });
    (tx, StreamBody::new(stream).boxed())
}

/// A body of `chunks` frames of `pattern(len, seed)`, cut in `chunk` sized pieces.
pub fn chunked_body(data: Arc<Vec<u8>>, chunk: usize) -> Body {
    let n = data.len().div_ceil(chunk.max(1));
    let stream = futures_util::stream::iter((0..n).map(move |i| {
        let end = ((i + 1) * chunk).min(data.len());
        Ok::<_, std::io::Error>(Frame::data(Bytes::copy_from_slice(&data[i * chunk..end])))
    }));
    StreamBody::new(stream).boxed()
}

// ---------------------------------------------------------------------------------------
// The relay binary
// ---------------------------------------------------------------------------------------

pub struct Relay {
    child: Option<Child>,
    pub addr: SocketAddr,
    pub stderr: Arc<Mutex<Vec<String>>>,
    /// This relay's own ingest socket (relays of concurrent tests must not share one).
    pub ingest: PathBuf,
    _dir: tempfile::TempDir,
}

impl Relay {
    /// Starts `windowtap relay --listen 127.0.0.1:0 ARGS...` and waits for its banner.
    pub fn start(args: &[String]) -> Relay {
        Relay::start_with_stdout(args, Stdio::null())
    }

    /// [`Relay::start`] with the relay's stdout (where records go without `--records`) set to
    /// `stdout`; a pipe stays open, unread, for as long as the `Relay` lives.
    pub fn start_with_stdout(args: &[String], stdout: Stdio) -> Relay {
        Relay::start_full(args, stdout, None)
    }

    /// A relay on its default ingest socket, as a user starts one: `windowtap relay` with no
    /// `--ingest`, `XDG_RUNTIME_DIR` unset and `TMPDIR` set to `tmpdir`, so its socket is
    /// `<tmpdir>/windowtap-<uid>/ingest.sock` (what `ingest` says), where a wrapper given no
    /// path finds it.
    #[allow(dead_code)] // not every test binary has two relays side by side
    pub fn start_at_default(args: &[String], tmpdir: &Path) -> Relay {
        Relay::start_full(args, Stdio::null(), Some(tmpdir))
    }

    fn start_full(args: &[String], stdout: Stdio, default_under: Option<&Path>) -> Relay {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_windowtap"));
        cmd.arg("relay").args(["--listen", "127.0.0.1:0"]);
        let ingest = match default_under {
            None => {
                let ingest = dir.path().join("ingest.sock");
                cmd.arg("--ingest").arg(&ingest);
                ingest
            }
            Some(tmp) => {
                cmd.env("TMPDIR", tmp)
                    .env_remove("XDG_RUNTIME_DIR")
                    .env_remove("WINDOWTAP_INGEST");
                // SAFETY: getuid cannot fail.
                let uid = unsafe { libc::getuid() };
                tmp.join(format!("windowtap-{uid}")).join("ingest.sock")
            }
        };
        let mut child = cmd
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting windowtap relay");
        let stderr = child.stderr.take().expect("piped stderr");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let keep = lines.clone();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            let mut addr = None;
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.split("listening on http://").nth(1) {
                    addr = Some(rest.trim().to_string());
                }
                let banner_done = line.contains("ChatGPT login");
                keep.lock().unwrap().push(line);
                // The banner's last line: the whole banner is in `keep` now.
                if banner_done {
                    if let (Some(tx), Some(a)) = (tx.take(), addr.take()) {
                        let _ = tx.send(a);
                    }
                }
            }
        });
        let addr = match rx.recv_timeout(WAIT) {
            Ok(a) => a.parse().expect("banner address"),
            Err(_) => {
                let _ = child.kill();
                panic!("relay did not start: {:?}", lines.lock().unwrap());
            }
        };
        Relay {
            child: Some(child),
            addr,
            stderr: lines,
            ingest,
            _dir: dir,
        }
    }

    /// SIGTERM, then wait (bounded) for a clean exit.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                // Let the stderr reader catch the last lines.
                std::thread::sleep(Duration::from_millis(50));
                return status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("relay did not stop on SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends `sig` to the relay without waiting for anything.
    pub fn signal(&self, sig: i32) {
        let pid = self.pid();
        assert!(pid != 0, "the relay is not running");
        // SAFETY: kill only sends a signal to the child this test started.
        unsafe {
            libc::kill(pid as i32, sig);
        }
    }

    /// Waits (bounded by [`WAIT`]) for the relay to exit on its own; panics if it does not.
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                // Let the stderr reader catch the last lines.
                std::thread::sleep(Duration::from_millis(50));
                return status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("relay did not exit within {WAIT:?}: {}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits (bounded by [`WAIT`]) until a stderr line contains `needle`.
    pub fn wait_log(&self, needle: &str) {
        let deadline = std::time::Instant::now() + WAIT;
        while !self
            .stderr
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains(needle))
        {
            if std::time::Instant::now() > deadline {
                panic!("the relay never logged `{needle}`: {}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    pub fn log(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

// ---------------------------------------------------------------------------------------
// TLS material made at test time
// ---------------------------------------------------------------------------------------

pub struct Pki {
    pub ca_pem: String,
    pub server: Arc<rustls::ServerConfig>,
}

/// A CA and a leaf for `localhost` / `127.0.0.1` signed by it.
pub fn pki() -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    // Names of their own: with rcgen's one default name on both, OpenSSL (nginx, HAProxy)
    // takes the leaf for self-signed (its issuer is its subject) and refuses it.
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "windowtap test CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf_key = KeyPair::generate().unwrap();
    let mut leaf_params =
        CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    leaf_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "localhost");
    let leaf = leaf_params.signed_by(&leaf_key, &issuer).unwrap();
    let key = rustls_pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into());
    let server = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![leaf.der().clone()], key)
    .unwrap();
    Pki {
        ca_pem: ca_cert.pem(),
        server: Arc::new(server),
    }
}

pub fn write_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

// ---------------------------------------------------------------------------------------
// The scripted upstream
// ---------------------------------------------------------------------------------------

pub type Handler = Arc<
    dyn Fn(Request<Incoming>) -> Pin<Box<dyn Future<Output = Response<Body>> + Send>> + Send + Sync,
>;

pub fn handler<F, Fut>(f: F) -> Handler
where
    F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    Arc::new(move |req| Box::pin(f(req)))
}

pub struct Upstream {
    pub addr: SocketAddr,
    pub tls: bool,
    task: tokio::task::JoinHandle<()>,
}

impl Upstream {
    /// Serves `handler` on 127.0.0.1:0 (HTTP/1.1, upgrades allowed), TLS when `tls` is given.
    pub async fn start(tls: Option<Arc<rustls::ServerConfig>>, handler: Handler) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let is_tls = tls.is_some();
        let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let handler = handler.clone();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let h = handler.clone();
                        async move { Ok::<_, Infallible>(h(req).await) }
                    });
                    let builder = hyper::server::conn::http1::Builder::new();
                    match acceptor {
                        Some(a) => {
                            let Ok(tls) = a.accept(tcp).await else { return };
                            let _ = builder
                                .serve_connection(TokioIo::new(tls), service)
                                .with_upgrades()
                                .await;
                        }
                        None => {
                            let _ = builder
                                .serve_connection(TokioIo::new(tcp), service)
                                .with_upgrades()
                                .await;
                        }
                    }
                });
            }
        });
        Upstream {
            addr,
            tls: is_tls,
            task,
        }
    }

    /// The `--upstream` argument mounting this upstream as `name`.
    pub fn mount(&self, name: &str, base: &str) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        let host = if self.tls {
            format!("localhost:{}", self.addr.port())
        } else {
            self.addr.to_string()
        };
        format!("{name}={scheme}://{host}{base}")
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ---------------------------------------------------------------------------------------
// A scripted Anthropic upstream: the test feeds each SSE body
// ---------------------------------------------------------------------------------------

/// Where the test feeds one SSE body.
pub type Feed = mpsc::Sender<Result<Bytes, std::io::Error>>;

/// An Anthropic upstream whose every SSE body is handed to the test to feed.
pub async fn scripted_upstream() -> (Upstream, mpsc::UnboundedReceiver<Feed>) {
    let (feeds, fed) = mpsc::unbounded_channel::<Feed>();
    let up = Upstream::start(
        None,
        handler(move |req| {
            let feeds = feeds.clone();
            async move {
                let _ = read_body(req.into_body()).await;
                let (tx, body) = channel_body();
                let _ = feeds.send(tx);
                sse_response(body)
            }
        }),
    )
    .await;
    (up, fed)
}

/// The next body to feed (bounded wait).
pub async fn next_feed(fed: &mut mpsc::UnboundedReceiver<Feed>) -> Feed {
    tokio::time::timeout(WAIT, fed.recv())
        .await
        .expect("the upstream got the request within the wait bound")
        .expect("upstream running")
}

/// Sends a Claude request through the relay and returns the response body once its head is in.
pub async fn open_stream(relay: &Relay, body: serde_json::Value) -> Incoming {
    let req = request("POST", relay.addr, "/anthropic/v1/messages")
        .header("content-type", "application/json")
        .header("x-claude-code-session-id", "sess-1")
        .body(full(body.to_string()))
        .unwrap();
    let res = tokio::time::timeout(WAIT, send(relay.addr, req))
        .await
        .expect("response head within the wait bound")
        .unwrap();
    assert_eq!(res.status(), 200);
    res.into_body()
}

/// Feeds SSE events, each as one chunk.
pub async fn feed(tx: &Feed, events: &[String]) {
    for ev in events {
        tx.send(Ok(Bytes::from(ev.clone()))).await.unwrap();
    }
}

// ---------------------------------------------------------------------------------------
// A plain HTTP/1.1 client
// ---------------------------------------------------------------------------------------

/// A client connection to `addr`, its driver spawned: it stays open (idle between requests)
/// until the sender is dropped.
pub async fn connect(addr: SocketAddr) -> hyper::client::conn::http1::SendRequest<Body> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

pub async fn send(
    addr: SocketAddr,
    req: Request<Body>,
) -> Result<Response<Incoming>, hyper::Error> {
    connect(addr).await.send_request(req).await
}

pub fn request(method: &str, addr: SocketAddr, path: &str) -> http::request::Builder {
    Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string())
}

/// Reads a whole body (bounded in time).
pub async fn collect(body: Incoming) -> Result<Vec<u8>, hyper::Error> {
    let collected = tokio::time::timeout(WAIT, body.collect())
        .await
        .expect("body within the wait bound")?;
    Ok(collected.to_bytes().to_vec())
}

/// Reads a whole request body on the upstream side.
pub async fn read_body(body: Incoming) -> Vec<u8> {
    body.collect()
        .await
        .map(|c| c.to_bytes().to_vec())
        .unwrap_or_default()
}

pub fn sse_response(body: Body) -> Response<Body> {
    Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(body)
        .unwrap()
}

/// One SSE record with a JSON payload.
pub fn sse_event(name: &str, data: &serde_json::Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// A Claude turn as SSE events: one `tool_use` block per `(id, name)`, or text when none.
pub fn claude_turn(id: &str, calls: &[(&str, &str)]) -> Vec<String> {
    let mut evs = vec![(
        "message_start",
        serde_json::json!({"type":"message_start","message":{"id":id,"type":"message","role":"assistant","content":[],"model":"claude","stop_reason":null,"usage":{"input_tokens":1,"output_tokens":1}}}),
    )];
    for (i, (call, name)) in calls.iter().enumerate() {
        evs.extend([
            (
                "content_block_start",
                serde_json::json!({"type":"content_block_start","index":i,"content_block":{"type":"tool_use","id":call,"name":name,"input":{}}}),
            ),
            (
                "content_block_stop",
                serde_json::json!({"type":"content_block_stop","index":i}),
            ),
        ]);
    }
    if calls.is_empty() {
        evs.extend([
            (
                "content_block_start",
                serde_json::json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
            ),
            (
                "content_block_delta",
                serde_json::json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"done"}}),
            ),
            (
                "content_block_stop",
                serde_json::json!({"type":"content_block_stop","index":0}),
            ),
        ]);
    }
    let stop = if calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    evs.extend([
        (
            "message_delta",
            serde_json::json!({"type":"message_delta","delta":{"stop_reason":stop,"stop_sequence":null},"usage":{"output_tokens":2}}),
        ),
        ("message_stop", serde_json::json!({"type":"message_stop"})),
    ]);
    evs.iter().map(|(n, d)| sse_event(n, d)).collect()
}

/// The capture's events of type `ty` (it may still be written to: an unreadable or partial
/// line is skipped).
pub fn capture_of_type(capture: &Path, ty: &str) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(capture).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["type"] == ty)
        .collect()
}

/// A relay for `up`'s mount `name` writing records and capture into `dir`, with `extra`
/// options; returns it with the records' and the capture's paths.
pub fn relay_with_files(
    up: &Upstream,
    name: &str,
    dir: &Path,
    extra: &[&str],
) -> (Relay, PathBuf, PathBuf) {
    let records = dir.join("records.jsonl");
    let capture = dir.join("capture.jsonl");
    let mut args = vec![
        "--upstream".to_string(),
        up.mount(name, ""),
        "--records".into(),
        records.display().to_string(),
        "--capture".into(),
        capture.display().to_string(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    (Relay::start(&args), records, capture)
}

/// A relay for `up`'s `anthropic` mount writing records and capture into `dir`
/// (`--close-wait 200`), draining for at most `drain_ms` when stopped.
pub fn anthropic_relay_with_files(
    up: &Upstream,
    dir: &Path,
    drain_ms: u64,
) -> (Relay, PathBuf, PathBuf) {
    let drain = drain_ms.to_string();
    relay_with_files(
        up,
        "anthropic",
        dir,
        &["--close-wait", "200", "--drain", &drain],
    )
}

/// `windowtap check` accepts the capture, and `windowtap replay` of it prints these records.
pub fn checked_replay(capture: &Path) -> String {
    let checked = std::process::Command::new(env!("CARGO_BIN_EXE_windowtap"))
        .arg("check")
        .arg(capture)
        .output()
        .unwrap();
    assert!(
        checked.status.success(),
        "check rejected the capture: {}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_windowtap"))
        .arg("replay")
        .arg(capture)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "replay rejected the capture: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Reads the records of a finished run's capture.
pub fn capture_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("capture lines are JSON"))
        .collect()
}

/// `windowtap check` accepts the file, and it ends on a complete line.
pub fn assert_checks_clean(path: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_windowtap"))
        .arg("check")
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "check rejected {}: {}{}",
        path.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read(path).unwrap();
    assert!(
        text.is_empty() || text.ends_with(b"\n"),
        "{} ends with a torn line",
        path.display()
    );
}
