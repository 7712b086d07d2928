//! Relay benchmark (not a test): a scripted upstream and a client on loopback, the same
//! workloads run direct, through the relay binary (observers on) and through two reference
//! proxies, nginx and HAProxy, all in the same run, interleaved round by round in an order
//! that turns each round ([`turn`]).
//!
//! - added per-event latency for SSE and WebSocket (p50, p99): the upstream stamps each event
//!   with its send time on CLOCK_MONOTONIC, the client subtracts on receipt;
//! - throughput for one stream of 20,000 1 KiB SSE events, and each proxy's CPU time
//!   (utime + stime from /proc, every process of the proxy, read once the proxy has stopped
//!   using CPU after the run: observers finish after the client) per MB relayed over those
//!   runs;
//! - the same for one WebSocket `response.create` answered by 20,000 1 KiB text messages, on
//!   the observed `GET /openai/v1/responses` route;
//! - 200 and 1,000 concurrent SSE streams of small events 10 ms apart: errors, every byte
//!   checked, p99 latency, the proxy's peak RSS (VmHWM, summed over its processes; a fresh
//!   proxy per run), and the proxy's CPU time over the run (per event relayed, and how much
//!   of it in the kernel); and 200 concurrent WebSocket streams of the same shape, observed
//!   too. Each target runs once per round, interleaved, paired with a direct run of the
//!   same round, and the row reports medians: one run's p99 moved by several times from run
//!   to run;
//! - start-up: from spawn to the port accepting and to the first forwarded response, median of
//!   several starts.
//!
//! The references get what windowtap gets: two workers (windowtap's runtime has one worker
//! thread per core, 2 here; nginx `worker_processes 2`, HAProxy `nbthread 2`), streaming with
//! no buffering, HTTP/1.1 with keep-alive to the upstream, WebSocket upgrades passed through,
//! no access log. Their configs are written to a temp dir at run time. A reference whose
//! binary is not installed (`apt-get install -y nginx-light haproxy`) is skipped.
//!
//! A fourth row, `floor`, is no product: this bench binary re-run as a bare TCP copy loop on
//! two current-thread tokio runtimes (no HTTP, no pooling, no observation; [`floor_proxy`]).
//! It is what relaying costs on this machine at the least, the loopback TCP work and system
//! calls every proxy pays, for reading the others against. windowtap's latency,
//! throughput (SSE and WebSocket) and concurrency rows also run once on a path no observer
//! watches (`windowtap unobserved`), so the cost of observation is measured rather than
//! assumed.
//!
//! windowtap runs with `--capture`; when one of its processes stops, the bench says how many
//! of the streams it observed lost their observation (an observer that falls behind its
//! bound stops observing its stream, which forwarding never waits for): rows measured on
//! such streams carry less observation work than the others.
//!
//! `--idle-clients N` keeps N idle keep-alive connections open to every proxy while the
//! rows run, renewed each round: a host between two model calls holds one, and a proxy may
//! keep a timer for it (windowtap's forwarding cores no longer do: crates/relay/src/timers.rs).
//!
//! `--upstream-tls` puts the upstream behind TLS, the path users take (the built-in mounts are
//! all `https`): a private CA made at run time that every proxy is given, stateless session
//! tickets as public API front ends issue, and direct speaking TLS to the upstream itself as a
//! host without a proxy does. The upstream counts full and resumed handshakes, and each row
//! says how many upstream TLS sessions its proxy resumed. mitmproxy (`mitmdump`, streaming
//! every body) joins as the observing proxy a user would otherwise pick; the floor then
//! speaks TLS upstream too.
//!
//! Run: `cargo bench --bench relay` (`-- --quick` for a shorter run, `-- --rounds N`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::BodyExt;
use testkit::*;
use tokio_tungstenite::tungstenite::Message;

/// The text of SSE event `k` of a stream with `pad` bytes of payload, stamped `ts`.
fn delta_event(k: u64, ts: u64, pad: usize) -> String {
    let text: String = (0..pad)
        .map(|i| (b'a' + ((k as usize + i) % 26) as u8) as char)
        .collect();
    format!(
        "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{text}\"}},\"k\":{k},\"ts\":{ts}}}\n\n"
    )
}

const PROLOGUE: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_b\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"m\",\"stop_reason\":null,\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n";
const EPILOGUE: &str = "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":2}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

/// The upstream's TLS, when the run asks for it (`--upstream-tls`).
struct UpstreamTls {
    /// Holds `ca.pem`, the private CA every proxy is told to trust.
    dir: tempfile::TempDir,
    acceptor: tokio_rustls::TlsAcceptor,
    /// How direct (and the TLS floor) reach the upstream.
    connector: tokio_rustls::TlsConnector,
    full: AtomicU64,
    resumed: AtomicU64,
}

static TLS: std::sync::OnceLock<UpstreamTls> = std::sync::OnceLock::new();

/// The upstream's address once it listens: the one address dialled over TLS when TLS is on.
static UPSTREAM: std::sync::OnceLock<SocketAddr> = std::sync::OnceLock::new();

impl UpstreamTls {
    fn new() -> UpstreamTls {
        use rustls_pki_types::pem::PemObject;
        let pki = testkit::pki();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), &pki.ca_pem).unwrap();
        let mut server = (*pki.server).clone();
        // Stateless tickets, as the APIs' front ends issue them: any ticket a client still
        // holds resumes, so how many sessions a proxy resumes is its own doing.
        server.ticketer = rustls::crypto::ring::Ticketer::new().unwrap();
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        let ca = rustls_pki_types::CertificateDer::from_pem_slice(pki.ca_pem.as_bytes()).unwrap();
        UpstreamTls {
            dir,
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(server)),
            connector: tls_client(ca),
            full: AtomicU64::new(0),
            resumed: AtomicU64::new(0),
        }
    }

    fn ca_file(&self) -> std::path::PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// Full and resumed handshakes the upstream has completed so far.
    fn handshakes() -> (u64, u64) {
        TLS.get().map_or((0, 0), |t| {
            (
                t.full.load(Ordering::Relaxed),
                t.resumed.load(Ordering::Relaxed),
            )
        })
    }

    /// `tcp` as a TLS client connection to the upstream.
    async fn dial(&self, tcp: tokio::net::TcpStream) -> std::io::Result<Io> {
        let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
        Ok(Box::new(self.connector.connect(name, tcp).await?))
    }
}

/// A TLS client trusting `ca` alone, with rustls's defaults (its session cache included).
fn tls_client(ca: rustls_pki_types::CertificateDer<'static>) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// A client connection: plain TCP, or TLS to the upstream.
trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Stream for S {}
type Io = Box<dyn Stream>;

/// Connects to `addr`: over TLS when it is the upstream and the run has TLS on (direct), over
/// plain TCP otherwise (to a proxy, as a host reaches windowtap on loopback).
async fn dial(addr: SocketAddr) -> std::io::Result<Io> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let _ = tcp.set_nodelay(true);
    match TLS.get() {
        Some(tls) if UPSTREAM.get() == Some(&addr) => tls.dial(tcp).await,
        _ => Ok(Box::new(tcp)),
    }
}

/// One request on a fresh connection to `addr` ([`dial`]).
async fn send_to(
    addr: SocketAddr,
    req: hyper::Request<Body>,
) -> Result<hyper::Response<hyper::body::Incoming>, String> {
    let io = dial(addr).await.map_err(|e| format!("connect: {e}"))?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io))
            .await
            .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(conn);
    sender.send_request(req).await.map_err(|e| e.to_string())
}

/// The scripted upstream, like the tests' [`Upstream`] but with `TCP_NODELAY` on every
/// connection: without it Nagle's algorithm holds a small write back until the previous one
/// is acknowledged, and the client's delayed ACK turns that into ~30-40 ms stalls that would
/// swamp every p99 here.
struct BenchUpstream {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for BenchUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve_upstream(handler: Handler) -> BenchUpstream {
    let listener = listen_loopback();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let _ = tcp.set_nodelay(true);
            let handler = handler.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let h = handler.clone();
                    async move { Ok::<_, std::convert::Infallible>(h(req).await) }
                });
                let io: Io = match TLS.get() {
                    None => Box::new(tcp),
                    Some(tls) => {
                        let Ok(conn) = tls.acceptor.accept(tcp).await else {
                            return;
                        };
                        let counter = match conn.get_ref().1.handshake_kind() {
                            Some(rustls::HandshakeKind::Resumed) => &tls.resumed,
                            _ => &tls.full,
                        };
                        counter.fetch_add(1, Ordering::Relaxed);
                        Box::new(conn)
                    }
                };
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(io), service)
                    .with_upgrades()
                    .await;
            });
        }
    });
    let _ = UPSTREAM.set(addr);
    BenchUpstream { addr, task }
}

/// The upstream: `POST .../v1/messages` streams `x-events` deltas of `x-pad` bytes, `x-gap-us`
/// apart (0: as fast as the client takes them); `GET .../v1/responses` is a WebSocket that
/// answers each `response.create` with `x-events` deltas.
async fn upstream() -> BenchUpstream {
    serve_upstream(handler(|mut req| async move {
            let num = |name: &str| -> u64 {
                req.headers()
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0)
            };
            let (events, pad, gap) = (num("x-events"), num("x-pad") as usize, num("x-gap-us"));
            // The WebSocket deltas' text: `pad` x's (the latency runs ask for one).
            let delta = "x".repeat(pad);
            if req.headers().contains_key("upgrade") {
                let res = testkit::ws::switching(&req, None);
                let upgrade = hyper::upgrade::on(&mut req);
                tokio::spawn(async move {
                    let Ok(up) = upgrade.await else { return };
                    let mut ws = testkit::ws::server(hyper_util::rt::TokioIo::new(up))
                    .await;
                    while let Some(Ok(Message::Text(_))) = ws.next().await {
                        let created = r#"{"type":"response.created","response":{"id":"resp_b","status":"in_progress","output":[]}}"#;
                        if ws.send(Message::text(created)).await.is_err() {
                            return;
                        }
                        for k in 0..events {
                            if gap > 0 {
                                tokio::time::sleep(Duration::from_micros(gap)).await;
                            }
                            let ev = ws_delta(k, testkit::proc::mono_ns(), &delta);
                            if ws.send(Message::text(ev)).await.is_err() {
                                return;
                            }
                        }
                        let done = r#"{"type":"response.completed","response":{"id":"resp_b","status":"completed","output":[]}}"#;
                        let _ = ws.send(Message::text(done)).await;
                    }
                });
                return res;
            }
            let _ = read_body(req.into_body()).await;
            let (tx, body) = channel_body();
            tokio::spawn(async move {
                if tx.send(Ok(Bytes::from_static(PROLOGUE.as_bytes()))).await.is_err() {
                    return;
                }
                for k in 0..events {
                    if gap > 0 {
                        tokio::time::sleep(Duration::from_micros(gap)).await;
                    }
                    let ev = delta_event(k, testkit::proc::mono_ns(), pad);
                    if tx.send(Ok(Bytes::from(ev))).await.is_err() {
                        return;
                    }
                }
                let _ = tx.send(Ok(Bytes::from_static(EPILOGUE.as_bytes()))).await;
            });
            sse_response(body)
        }))
    .await
}

/// A client that sent one request, read its answer, and keeps its connection open without
/// another, as a host does between two model calls: the proxy holds an idle keep-alive
/// connection (and whatever timer it keeps for it) while the rows run (`--idle-clients N`).
/// Dropping it closes the connection.
async fn idle_client(
    addr: SocketAddr,
    path: &str,
) -> hyper::client::conn::http1::SendRequest<Body> {
    let mut sender = connect(addr).await;
    let req = request("POST", addr, path)
        .header("content-type", "application/json")
        .header("x-events", "1")
        .header("x-pad", "8")
        .header("x-gap-us", "0")
        .body(full(r#"{"model":"m","stream":true,"messages":[]}"#))
        .unwrap();
    let res = sender
        .send_request(req)
        .await
        .expect("an idle client's request");
    collect(res.into_body())
        .await
        .expect("an idle client's answer");
    sender
}

#[derive(Default)]
struct StreamResult {
    latencies_ns: Vec<u64>,
    bytes: u64,
    error: Option<String>,
}

/// One SSE stream: checks every byte against what the upstream must have sent.
async fn sse_stream(
    addr: SocketAddr,
    path: &str,
    events: u64,
    pad: usize,
    gap_us: u64,
) -> StreamResult {
    let mut r = StreamResult::default();
    let req = request("POST", addr, path)
        .header("content-type", "application/json")
        .header("x-events", events.to_string())
        .header("x-pad", pad.to_string())
        .header("x-gap-us", gap_us.to_string())
        .header("x-claude-code-session-id", "bench")
        .body(full(r#"{"model":"m","stream":true,"messages":[]}"#))
        .unwrap();
    let res = match send_to(addr, req).await {
        Ok(r) => r,
        Err(e) => {
            r.error = Some(format!("request: {e}"));
            return r;
        }
    };
    let mut body = res.into_body();
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 16);
    let mut pos = 0usize;
    let mut next_k = 0u64;
    let mut prologue_ok = false;
    loop {
        let frame = match tokio::time::timeout(WAIT, body.frame()).await {
            Err(_) => {
                r.error = Some("stalled".into());
                return r;
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                r.error = Some(format!("body: {e}"));
                return r;
            }
            Ok(Some(Ok(f))) => f,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let now = testkit::proc::mono_ns();
        r.bytes += data.len() as u64;
        buf.extend_from_slice(&data);
        if !prologue_ok {
            if buf.len() < PROLOGUE.len() {
                continue;
            }
            if &buf[..PROLOGUE.len()] != PROLOGUE.as_bytes() {
                r.error = Some("prologue differs".into());
                return r;
            }
            pos = PROLOGUE.len();
            prologue_ok = true;
        }
        while next_k < events {
            let Some(end) = memfind(&buf[pos..], b"\n\n") else {
                break;
            };
            let ev = &buf[pos..pos + end + 2];
            let ts = parse_ts(ev);
            let want = delta_event(next_k, ts, pad);
            if ev != want.as_bytes() {
                r.error = Some(format!("event {next_k} differs"));
                return r;
            }
            r.latencies_ns.push(now.saturating_sub(ts));
            pos += end + 2;
            next_k += 1;
        }
        if pos > (1 << 20) {
            buf.drain(..pos);
            pos = 0;
        }
    }
    if next_k != events || &buf[pos..] != EPILOGUE.as_bytes() {
        r.error = Some(format!("ended after {next_k} of {events} events"));
    }
    r
}

fn memfind(h: &[u8], n: &[u8]) -> Option<usize> {
    h.windows(n.len()).position(|w| w == n)
}

fn parse_ts(ev: &[u8]) -> u64 {
    let s = std::str::from_utf8(ev).unwrap_or("");
    s.rsplit("\"ts\":")
        .next()
        .and_then(|t| t.split('}').next())
        .and_then(|t| t.parse().ok())
        .unwrap_or(0)
}

/// The text of WebSocket delta `k` with text `delta`, stamped `ts`.
fn ws_delta(k: u64, ts: u64, delta: &str) -> String {
    format!(
        "{{\"type\":\"response.output_text.delta\",\"item_id\":\"msg_b\",\"output_index\":0,\"content_index\":0,\"delta\":\"{delta}\",\"k\":{k},\"ts\":{ts}}}"
    )
}

/// One WebSocket turn of `events` deltas of `pad` bytes: checks every message's text.
async fn ws_stream(
    addr: SocketAddr,
    path: &str,
    events: u64,
    pad: usize,
    gap_us: u64,
) -> StreamResult {
    let mut r = StreamResult::default();
    let mut tcp = match dial(addr).await {
        Ok(io) => io,
        Err(e) => {
            r.error = Some(format!("connect: {e}"));
            return r;
        }
    };
    let (status, _) = testkit::ws::client_handshake(
        &mut tcp,
        &addr.to_string(),
        path,
        &[
            ("x-events", &events.to_string()),
            ("x-pad", &pad.to_string()),
            ("x-gap-us", &gap_us.to_string()),
            ("thread-id", "bench"),
        ],
    )
    .await;
    if status != 101 {
        r.error = Some(format!("handshake status {status}"));
        return r;
    }
    let mut ws = testkit::ws::client(tcp).await;
    let create = r#"{"type":"response.create","model":"m","input":[]}"#;
    ws.send(Message::text(create)).await.unwrap();
    let delta = "x".repeat(pad);
    let mut next_k = 0;
    loop {
        let msg = match tokio::time::timeout(WAIT, ws.next()).await {
            Ok(Some(Ok(m))) => m,
            _ => {
                r.error = Some("ws ended early".into());
                return r;
            }
        };
        let now = testkit::proc::mono_ns();
        let Message::Text(t) = msg else { continue };
        r.bytes += t.len() as u64;
        if t.contains("response.completed") {
            break;
        }
        if t.contains("output_text.delta") {
            let ts = parse_ts(t.as_bytes());
            if t.as_str() != ws_delta(next_k, ts, &delta) {
                r.error = Some(format!("ws event {next_k} differs"));
                return r;
            }
            r.latencies_ns.push(now.saturating_sub(ts));
            next_k += 1;
        }
    }
    if next_k != events {
        r.error = Some(format!("ws: {next_k} of {events} events"));
    }
    r
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

#[derive(Clone, Copy)]
struct Lat {
    p50_us: f64,
    p99_us: f64,
}

fn lat(mut all: Vec<u64>) -> Lat {
    all.sort_unstable();
    Lat {
        p50_us: pct(&all, 0.50),
        p99_us: pct(&all, 0.99),
    }
}

/// The order in which round `round` runs `n` targets: the first `fixed` (direct, the pairing
/// reference) first, then the others turned by one place per round, so that each takes each
/// place in turn. In a fixed order two copies of the same windowtap binary, one right behind
/// direct and one further on, differed by 13–16 µs of SSE p50 in three runs out of three:
/// the place, not the proxy.
fn turn(n: usize, fixed: usize, round: usize) -> Vec<usize> {
    let fixed = fixed.min(n);
    let rest = n - fixed;
    (0..fixed)
        .chain((0..rest).map(|k| fixed + (k + round) % rest))
        .collect()
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

// ---------------------------------------------------------------------------------------
// The proxies under test
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Windowtap,
    /// Another windowtap binary (`--windowtap-before PATH`), for before/after comparisons.
    Before(&'static str),
    Nginx,
    Haproxy,
    /// mitmproxy's `mitmdump` as a reverse proxy streaming every body: the observing proxy a
    /// user would otherwise pick (its flows are parsed, as windowtap's are observed).
    Mitmproxy,
    /// The floor: this bench binary run as a bare TCP copy loop ([`floor_proxy`]), no HTTP, no
    /// observation. A yardstick, not a product: what any tokio proxy costs on this machine at
    /// the least.
    Floor,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Windowtap => "windowtap",
            Kind::Before(_) => "windowtap-before",
            Kind::Nginx => "nginx",
            Kind::Haproxy => "haproxy",
            Kind::Mitmproxy => "mitmproxy",
            Kind::Floor => "floor",
        }
    }

    /// The program to run, or `None` when it is not installed.
    fn program(self) -> Option<String> {
        let name = match self {
            Kind::Windowtap => return Some(env!("CARGO_BIN_EXE_windowtap").to_string()),
            Kind::Before(path) => return Some(path.to_string()),
            Kind::Floor => {
                return std::env::current_exe()
                    .ok()
                    .map(|p| p.to_string_lossy().into_owned())
            }
            Kind::Nginx => "nginx",
            Kind::Haproxy => "haproxy",
            Kind::Mitmproxy => "mitmdump",
        };
        let path = std::env::var("PATH").unwrap_or_default();
        let found = ["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"]
            .into_iter()
            .chain(path.split(':'))
            .map(|d| format!("{d}/{name}"))
            .find(|p| std::path::Path::new(p).exists());
        found
    }
}

/// nginx as a streaming reverse proxy: no buffering either way, HTTP/1.1 upstream with
/// keep-alive (the map gives WebSocket handshakes `Connection: upgrade` and everything else an
/// empty `Connection`, which is what lets nginx keep upstream connections), `/NAME/...` to
/// `/...` like windowtap's mounts.
fn nginx_conf(dir: &std::path::Path, port: u16, up: SocketAddr) -> String {
    let d = dir.display();
    // Over TLS: the CA checked, the name sent, sessions reused (nginx's default, said here).
    let (scheme, tls) = match TLS.get() {
        None => ("http", String::new()),
        Some(t) => (
            "https",
            format!(
                "    proxy_ssl_trusted_certificate {};\n    proxy_ssl_verify on;\n    proxy_ssl_name localhost;\n    proxy_ssl_server_name on;\n    proxy_ssl_session_reuse on;\n",
                t.ca_file().display()
            ),
        ),
    };
    format!(
        "daemon off;
master_process on;
worker_processes 2;
worker_rlimit_nofile 16384;
pid {d}/nginx.pid;
error_log stderr warn;
events {{ worker_connections 8192; }}
http {{
  access_log off;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  tcp_nodelay on;
  map $http_upgrade $connection_upgrade {{ default upgrade; '' ''; }}
  upstream up {{ server {up}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{port};
{tls}    proxy_buffering off;
    proxy_request_buffering off;
    proxy_http_version 1.1;
    proxy_set_header Upgrade $http_upgrade;
    proxy_set_header Connection $connection_upgrade;
    proxy_read_timeout 300s;
    location /anthropic/ {{ proxy_pass {scheme}://up/; }}
    location /openai/ {{ proxy_pass {scheme}://up/; }}
  }}
}}
"
    )
}

/// HAProxy in HTTP mode, `option http-no-delay` (no waiting to merge small writes), its
/// default keep-alive to the upstream, WebSocket tunnels passed, `/NAME/...` to `/...`.
fn haproxy_conf(port: u16, up: SocketAddr) -> String {
    // Over TLS: the CA checked, the name sent, `http/1.1` offered (sessions are reused by
    // default).
    let tls = TLS.get().map_or(String::new(), |t| {
        format!(
            " ssl verify required ca-file {} sni str(localhost) alpn http/1.1",
            t.ca_file().display()
        )
    });
    format!(
        "global
  nbthread 2
  maxconn 8000
defaults
  mode http
  option http-no-delay
  timeout connect 10s
  timeout client 300s
  timeout server 300s
  timeout tunnel 300s
frontend fe
  bind 127.0.0.1:{port}
  default_backend be
backend be
  http-request replace-path ^/(anthropic|openai)(/.*)$ \\2
  server up {up}{tls}
"
    )
}

/// The floor proxy (`--floor-proxy LISTEN UPSTREAM`, run by the bench as a process of its
/// own): two threads, each a current-thread tokio runtime accepting on the same listener (as
/// nginx's two workers do), each connection copied both ways to a fresh upstream connection
/// with one buffer per direction ([`floor_read_size`]). No HTTP parsing (the upstream
/// ignores the `/NAME` prefix), no pooling, no observation: the system calls and loopback TCP
/// work every proxy here pays, plus the least a tokio task adds. With `tls_ca` (a run with
/// `--upstream-tls`) the upstream side is a rustls client trusting that CA, with rustls's
/// default session cache: the least a proxy that speaks TLS upstream pays. Never returns.
fn floor_proxy(listen: SocketAddr, up: SocketAddr, tls_ca: Option<std::path::PathBuf>) -> ! {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let tls = tls_ca.map(|ca| {
        use rustls_pki_types::pem::PemObject;
        tls_client(rustls_pki_types::CertificateDer::from_pem_file(ca).unwrap())
    });
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_reuseaddr(true).unwrap();
    socket.bind(listen).expect("binding the floor proxy");
    let listener = socket.listen(LISTEN_BACKLOG).unwrap().into_std().unwrap();
    let read_size = floor_read_size();
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let listener = listener.try_clone().unwrap();
            let tls = tls.clone();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_io()
                    .build()
                    .unwrap();
                rt.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                    loop {
                        let Ok((client, _)) = listener.accept().await else {
                            continue;
                        };
                        let tls = tls.clone();
                        tokio::spawn(async move {
                            let Ok(upstream) = tokio::net::TcpStream::connect(up).await else {
                                return;
                            };
                            let _ = client.set_nodelay(true);
                            let _ = upstream.set_nodelay(true);
                            async fn copy(
                                mut from: impl tokio::io::AsyncRead + Unpin,
                                mut to: impl tokio::io::AsyncWrite + Unpin,
                                read_size: usize,
                            ) {
                                let mut buf = vec![0u8; read_size];
                                while let Ok(n @ 1..) = from.read(&mut buf).await {
                                    if to.write_all(&buf[..n]).await.is_err() {
                                        break;
                                    }
                                }
                                let _ = to.shutdown().await;
                            }
                            let (cr, cw) = client.into_split();
                            match tls {
                                None => {
                                    let (ur, uw) = upstream.into_split();
                                    tokio::join!(copy(cr, uw, read_size), copy(ur, cw, read_size));
                                }
                                Some(tls) => {
                                    let name = rustls_pki_types::ServerName::try_from("localhost")
                                        .unwrap();
                                    let Ok(conn) = tls.connect(name, upstream).await else {
                                        return;
                                    };
                                    let (ur, uw) = tokio::io::split(conn);
                                    tokio::join!(copy(cr, uw, read_size), copy(ur, cw, read_size));
                                }
                            }
                        });
                    }
                })
            })
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
    std::process::exit(1)
}

/// The floor's read size: 16 KiB (windowtap's), or `FLOOR_READ` bytes from the environment,
/// to see what the read size alone does to a bare loop (nginx reads a page at a time:
/// `scripts/floor-as-before.sh` runs a floor of another read size in the `windowtap-before`
/// slot, beside the 16 KiB one).
fn floor_read_size() -> usize {
    std::env::var("FLOOR_READ")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(16 * 1024)
}

/// Listen backlog of the bench's own sockets (the upstream, the floor), as windowtap's:
/// `bind`'s 128 overflows when 1,000 streams open at once, and each overflow costs that
/// stream a one-second SYN retransmission.
const LISTEN_BACKLOG: u32 = 1024;

/// A loopback listener on a free port with [`LISTEN_BACKLOG`].
fn listen_loopback() -> tokio::net::TcpListener {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    socket.listen(LISTEN_BACKLOG).unwrap()
}

/// A free loopback port (there is a small window in which something else could take it).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A proxy process started for this run.
struct Proxy {
    kind: Kind,
    addr: SocketAddr,
    child: std::process::Child,
    dir: tempfile::TempDir,
}

impl Proxy {
    /// Spawns `kind` listening on a fresh port in front of `up` (it may not be ready yet).
    fn spawn(kind: Kind, up: SocketAddr) -> Option<Proxy> {
        let program = kind.program()?;
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let mut cmd = std::process::Command::new(program);
        match kind {
            Kind::Windowtap | Kind::Before(_) => {
                let base = match TLS.get() {
                    None => format!("http://{up}"),
                    Some(_) => format!("https://localhost:{}", up.port()),
                };
                cmd.args(["relay", "--listen", &format!("127.0.0.1:{port}")])
                    .arg("--ingest")
                    .arg(dir.path().join("ingest.sock"))
                    .args(["--upstream", &format!("anthropic={base}")])
                    .args(["--upstream", &format!("openai={base}")])
                    .args(["--log", "warn"])
                    // Read when the proxy stops: how many streams lost their observation.
                    .arg("--capture")
                    .arg(dir.path().join("capture.jsonl"))
                    .env_remove("RUST_LOG");
                if let Some(t) = TLS.get() {
                    cmd.arg("--upstream-ca").arg(t.ca_file());
                }
            }
            Kind::Nginx => {
                let conf = dir.path().join("nginx.conf");
                std::fs::write(&conf, nginx_conf(dir.path(), port, up)).unwrap();
                cmd.arg("-p").arg(dir.path()).arg("-c").arg(&conf);
            }
            Kind::Haproxy => {
                let conf = dir.path().join("haproxy.cfg");
                std::fs::write(&conf, haproxy_conf(port, up)).unwrap();
                cmd.arg("-db").arg("-f").arg(&conf);
            }
            Kind::Mitmproxy => {
                // Reverse mode to the upstream; every body streamed (`stream_large_bodies=1`:
                // past one byte); quiet; its own config dir (it makes a CA there at start).
                let scheme = if TLS.get().is_some() { "https" } else { "http" };
                cmd.args(["-q", "--mode"])
                    .arg(format!("reverse:{scheme}://localhost:{}", up.port()))
                    .args([
                        "--listen-host",
                        "127.0.0.1",
                        "--listen-port",
                        &port.to_string(),
                    ])
                    .args(["--set", "stream_large_bodies=1"])
                    .arg("--set")
                    .arg(format!("confdir={}", dir.path().display()));
                if let Some(t) = TLS.get() {
                    cmd.arg("--set").arg(format!(
                        "ssl_verify_upstream_trusted_ca={}",
                        t.ca_file().display()
                    ));
                }
            }
            Kind::Floor => {
                cmd.args([
                    "--floor-proxy",
                    &format!("127.0.0.1:{port}"),
                    &up.to_string(),
                ]);
                if let Some(t) = TLS.get() {
                    cmd.arg("--floor-tls-ca").arg(t.ca_file());
                }
            }
        }
        let log = std::fs::File::create(dir.path().join("stderr.log")).unwrap();
        let child = cmd
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", kind.name()));
        Some(Proxy {
            kind,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            child,
            dir,
        })
    }

    /// Spawns `kind` and waits until it forwards a request.
    async fn start(kind: Kind, up: SocketAddr) -> Option<Proxy> {
        let mut p = Proxy::spawn(kind, up)?;
        let ready = p.wait_accepting().await.is_some() && p.wait_forwarding().await.is_some();
        assert!(ready, "{} did not start: {}", kind.name(), p.stderr());
        Some(p)
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr.log")).unwrap_or_default()
    }

    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Polls until the port accepts a connection (bounded).
    async fn wait_accepting(&mut self) -> Option<Instant> {
        let deadline = Instant::now() + WAIT;
        while Instant::now() < deadline && self.running() {
            if tokio::net::TcpStream::connect(self.addr).await.is_ok() {
                return Some(Instant::now());
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        None
    }

    /// Retries a one-event SSE exchange until it comes back whole (bounded).
    async fn wait_forwarding(&mut self) -> Option<Instant> {
        let deadline = Instant::now() + WAIT;
        while Instant::now() < deadline && self.running() {
            let r = sse_stream(self.addr, "/anthropic/v1/messages", 1, 8, 0).await;
            if r.error.is_none() {
                return Some(Instant::now());
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        None
    }

    /// The proxy's processes: the one spawned and its descendants (nginx's workers).
    fn pids(&self) -> Vec<u32> {
        let mut pids = vec![self.child.id()];
        let mut i = 0;
        while i < pids.len() {
            let parent = pids[i];
            for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
                let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                    continue;
                };
                if stat_fields(pid).and_then(|f| f.get(1).copied()) == Some(parent as u64) {
                    pids.push(pid);
                }
            }
            i += 1;
        }
        pids
    }

    /// CPU seconds so far in user mode and in the kernel, over all of the proxy's processes:
    /// utime and stime, fields 14 and 15 of /proc/PID/stat (12 and 13 after `comm`).
    fn cpu_split(&self) -> (f64, f64) {
        let tick = testkit::proc::clock_ticks_per_second() as f64;
        let (user, kernel) = self
            .pids()
            .into_iter()
            .filter_map(stat_fields)
            .map(|f| {
                (
                    f.get(11).copied().unwrap_or(0),
                    f.get(12).copied().unwrap_or(0),
                )
            })
            .fold((0, 0), |(u, k), (du, dk)| (u + du, k + dk));
        (user as f64 / tick, kernel as f64 / tick)
    }

    /// Waits until the proxy has stopped using CPU (its counter still over 60 ms, at most 3 s)
    /// and returns [`Proxy::cpu_split`] then. A run's cost is not over when its client has the
    /// last byte: windowtap's observers take up their queued copies after it, at a lower
    /// priority. Read at once, that work was left out of windowtap's CPU and ran into the
    /// next target's run instead.
    async fn settled_cpu(&self) -> (f64, f64) {
        let deadline = Instant::now() + Duration::from_secs(3);
        let mut last = self.cpu_split();
        let mut still = 0;
        while still < 3 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let now = self.cpu_split();
            still = if now == last { still + 1 } else { 0 };
            last = now;
        }
        last
    }

    /// Peak RSS summed over the proxy's processes, in KiB.
    fn peak_rss_kib(&self) -> u64 {
        self.pids().into_iter().map(peak_rss_kib).sum()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // SIGTERM first: nginx's master then stops its workers instead of orphaning them.
        let pids = self.pids();
        testkit::proc::terminate(self.child.id());
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        for pid in pids.into_iter().skip(1) {
            testkit::proc::signal(pid, testkit::proc::Signal::KILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if matches!(self.kind, Kind::Windowtap | Kind::Before(_)) {
            report_observation(self.kind.name(), &self.dir.path().join("capture.jsonl"));
        }
    }
}

/// Says how many of a windowtap run's observed streams lost their observation, from its
/// capture: a stream whose observer fell behind the bound is forwarded on but no longer
/// observed, so the rows measured on it include less observation work than asked for.
fn report_observation(name: &str, capture: &std::path::Path) {
    let Ok(text) = std::fs::read_to_string(capture) else {
        println!("{name}: no capture to count observation losses in");
        return;
    };
    let (mut streams, mut lost) = (0, std::collections::BTreeMap::<String, usize>::new());
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        match v["type"].as_str() {
            Some("stream_open") => streams += 1,
            Some("observation_lost") => {
                let reason = v["reason"].as_str().unwrap_or("?").to_string();
                *lost.entry(reason).or_default() += 1;
            }
            _ => {}
        }
    }
    let total: usize = lost.values().sum();
    if streams <= 1 && total == 0 {
        // A start-up probe's proxy: nothing to say.
        return;
    }
    println!(
        "{name}: observation lost on {total} of {streams} observed streams {lost:?} (the rows above, this proxy)"
    );
}

/// The numeric fields of /proc/PID/stat after `comm` (so index 0 is field 3, `state`, as 0).
fn stat_fields(pid: u32) -> Option<Vec<u64>> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    Some(
        rest.split_whitespace()
            .map(|t| t.parse().unwrap_or(0))
            .collect(),
    )
}

fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// One way to reach the upstream: direct, or through a proxy whose mounts are `/anthropic`
/// and `/openai`.
struct Target {
    name: &'static str,
    addr: SocketAddr,
    sse: &'static str,
    ws: &'static str,
    proxy: Option<Proxy>,
}

impl Target {
    fn direct(up: &BenchUpstream) -> Target {
        Target {
            name: "direct",
            addr: up.addr,
            sse: "/v1/messages",
            ws: "/v1/responses",
            proxy: None,
        }
    }

    fn through(p: Proxy) -> Target {
        Target {
            name: p.kind.name(),
            addr: p.addr,
            sse: "/anthropic/v1/messages",
            ws: "/openai/v1/responses",
            proxy: Some(p),
        }
    }
}

/// One throughput workload's runs through one target.
#[derive(Default)]
struct Flow {
    mbps: Vec<f64>,
    cpu_secs: f64,
    mb: f64,
}

impl Flow {
    /// Runs one stream through `t`, timing it and taking the proxy's CPU time around it (to
    /// when the proxy has settled, [`Proxy::settled_cpu`]).
    async fn run(
        &mut self,
        t: &Target,
        what: &str,
        stream: impl std::future::Future<Output = StreamResult>,
    ) {
        let cpu0 = match &t.proxy {
            Some(p) => p.settled_cpu().await,
            None => (0.0, 0.0),
        };
        let t0 = Instant::now();
        let r = stream.await;
        let secs = t0.elapsed().as_secs_f64();
        let cpu1 = match &t.proxy {
            Some(p) => p.settled_cpu().await,
            None => (0.0, 0.0),
        };
        let (cpu0, cpu1) = (cpu0.0 + cpu0.1, cpu1.0 + cpu1.1);
        assert!(r.error.is_none(), "{} {what}: {:?}", t.name, r.error);
        self.mbps.push(r.bytes as f64 / secs / 1e6);
        self.cpu_secs += cpu1 - cpu0;
        self.mb += r.bytes as f64 / 1e6;
    }
}

/// One concurrency row's runs through one target.
#[derive(Default)]
struct Conc {
    /// Upstream TLS handshakes over the runs: full, resumed.
    handshakes: (u64, u64),
    p99: Vec<f64>,
    ratio: Vec<f64>,
    cpu_us: Vec<f64>,
    kernel_us: Vec<f64>,
    rss_mib: f64,
    errors: u64,
}

impl Conc {
    fn add(&mut self, errors: u64, p99: f64, ratio: f64, rss_mib: f64, cpu_us: (f64, f64)) {
        self.errors += errors;
        self.p99.push(p99);
        self.ratio.push(ratio);
        self.cpu_us.push(cpu_us.0 + cpu_us.1);
        self.kernel_us.push(cpu_us.1);
        self.rss_mib = self.rss_mib.max(rss_mib);
    }
}

/// Everything measured for one target.
#[derive(Default)]
struct Tally {
    sse: Vec<u64>,
    ws: Vec<u64>,
    sse_flow: Flow,
    ws_flow: Flow,
}

fn fmt_added(l: Lat, d: Lat) -> String {
    format!(
        "{:>7.1} {:>7.1} | {:>+7.1} {:>+7.1}",
        l.p50_us,
        l.p99_us,
        l.p50_us - d.p50_us,
        l.p99_us - d.p99_us
    )
}

/// `streams` concurrent SSE (or WebSocket, `ws`) streams of 50 small events 10 ms apart:
/// errors and all latencies.
async fn concurrent(addr: SocketAddr, path: &'static str, ws: bool, streams: usize) -> (u64, Lat) {
    let errors = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..streams {
        let errors = errors.clone();
        tasks.push(tokio::spawn(async move {
            let r = if ws {
                ws_stream(addr, path, 50, 32, 10_000).await
            } else {
                sse_stream(addr, path, 50, 32, 10_000).await
            };
            if r.error.is_some() {
                errors.fetch_add(1, Ordering::Relaxed);
            }
            r.latencies_ns
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap_or_default());
    }
    (errors.load(Ordering::Relaxed), lat(all))
}

fn print_latency(
    targets: &[Target],
    sse: &[Lat],
    ws: &[Lat],
    unobserved: (Vec<u64>, Vec<u64>),
    rounds: usize,
) {
    let (unobserved, ws_unobserved) = unobserved;
    println!("\nper-event latency, us (500 events 1 ms apart x {rounds} runs; added = minus direct; targets added p50 <= 20, p99 <= 60)");
    println!(
        "{:<22} {:>7} {:>7} | {:>7} {:>7}",
        "SSE", "p50", "p99", "+p50", "+p99"
    );
    for (t, l) in targets.iter().zip(sse) {
        println!("{:<22} {}", t.name, fmt_added(*l, sse[0]));
    }
    if !unobserved.is_empty() {
        println!(
            "{:<22} {}",
            "windowtap unobserved",
            fmt_added(lat(unobserved), sse[0])
        );
    }
    println!(
        "{:<22} {:>7} {:>7} | {:>7} {:>7}",
        "WebSocket", "p50", "p99", "+p50", "+p99"
    );
    for (t, l) in targets.iter().zip(ws) {
        println!("{:<22} {}", t.name, fmt_added(*l, ws[0]));
    }
    if !ws_unobserved.is_empty() {
        println!(
            "{:<22} {}",
            "windowtap unobserved",
            fmt_added(lat(ws_unobserved), ws[0])
        );
    }
}

fn print_throughput(
    targets: &[Target],
    flows: &mut [&mut Flow],
    unobserved: &mut Flow,
    what: &str,
    rounds: usize,
) {
    println!("\nthroughput (20,000 x 1 KiB {what}, median of {rounds}; target windowtap >= 0.8x direct) and CPU per MB relayed");
    let mbps: Vec<f64> = flows.iter_mut().map(|f| median(&mut f.mbps)).collect();
    for (t, (m, c)) in targets.iter().zip(mbps.iter().zip(flows.iter())) {
        let cpu = if t.proxy.is_some() {
            format!("{:>6.2} ms CPU/MB", c.cpu_secs * 1000.0 / c.mb)
        } else {
            String::new()
        };
        println!(
            "{:<22} {m:>7.1} MB/s {:>5.2}x direct {cpu}",
            t.name,
            m / mbps[0]
        );
    }
    // windowtap on a path no observer watches: what forwarding alone costs per MB.
    if !unobserved.mbps.is_empty() {
        let m = median(&mut unobserved.mbps);
        println!(
            "{:<22} {m:>7.1} MB/s {:>5.2}x direct {:>6.2} ms CPU/MB",
            "windowtap unobserved",
            m / mbps[0],
            unobserved.cpu_secs * 1000.0 / unobserved.mb
        );
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--floor-proxy") {
        let (listen, up) = (&args[i + 1], &args[i + 2]);
        let ca = args
            .iter()
            .position(|a| a == "--floor-tls-ca")
            .map(|i| std::path::PathBuf::from(&args[i + 1]));
        floor_proxy(listen.parse().unwrap(), up.parse().unwrap(), ca);
    }
    let quick = args.iter().any(|a| a == "--quick");
    let opt = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let rounds = opt("--rounds")
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 2 } else { 4 });
    let rounds: usize = rounds;
    // For profiling one thing at a time: `--only
    // sse,ws,throughput,ws-throughput,streams,ws-streams,startup` and
    // `--proxies windowtap,nginx,haproxy,floor` (default: all).
    let only = opt("--only");
    let idle_clients: usize = opt("--idle-clients").map_or(0, |n| n.parse().unwrap());
    let want = |w: &str| only.as_ref().is_none_or(|o| o.split(',').any(|x| x == w));
    let picked = opt("--proxies");
    let starts = if quick { 3 } else { 7 };
    if args.iter().any(|a| a == "--upstream-tls") {
        let _ = TLS.set(UpstreamTls::new());
    }
    let up = upstream().await;

    let mut kinds = vec![Kind::Windowtap];
    if let Some(path) = opt("--windowtap-before") {
        kinds.push(Kind::Before(Box::leak(path.into_boxed_str())));
    }
    kinds.extend([Kind::Nginx, Kind::Haproxy, Kind::Mitmproxy, Kind::Floor]);
    let mut targets = vec![Target::direct(&up)];
    for kind in kinds {
        if picked
            .as_ref()
            .is_some_and(|p| !p.split(',').any(|x| x == kind.name()))
        {
            continue;
        }
        match Proxy::start(kind, up.addr).await {
            Some(p) => targets.push(Target::through(p)),
            None => println!("{}: not installed, skipped", kind.name()),
        }
    }
    let names: Vec<&str> = targets.iter().map(|t| t.name).collect();
    println!(
        "relay bench: {rounds} rounds, each running every workload through {} in turn, upstream over {}",
        names.join(", "),
        if TLS.get().is_some() { "TLS" } else { "plain TCP" }
    );
    let mut tally: Vec<Tally> = targets.iter().map(|_| Tally::default()).collect();
    let mut unobserved = Vec::new();
    let mut ws_unobserved = Vec::new();
    let mut unobserved_flow = Flow::default();
    let mut ws_unobserved_flow = Flow::default();

    let mut held = Vec::new();
    for round in 0..rounds {
        let order = turn(targets.len(), 1, round);
        // Fresh each round, so that no proxy's keep-alive timeout closes them mid-row.
        held.clear();
        for t in targets.iter().filter(|t| t.name != "direct") {
            for _ in 0..idle_clients {
                held.push(idle_client(t.addr, t.sse).await);
            }
        }
        // Per-event latency, SSE: 500 small events 1 ms apart per run; windowtap also once on
        // a path no observer watches (forwarding alone).
        for &i in &order {
            let (t, out) = (&targets[i], &mut tally[i]);
            if !want("sse") {
                break;
            }
            let r = sse_stream(t.addr, t.sse, 500, 64, 1000).await;
            assert!(r.error.is_none(), "{} SSE: {:?}", t.name, r.error);
            out.sse.extend(r.latencies_ns);
            if t.name == "windowtap" && want("unobserved") {
                let r = sse_stream(t.addr, "/anthropic/v1/unobserved", 500, 64, 1000).await;
                assert!(r.error.is_none(), "{} SSE: {:?}", t.name, r.error);
                unobserved.extend(r.latencies_ns);
            }
        }
        // Per-event latency, WebSocket.
        for &i in &order {
            let (t, out) = (&targets[i], &mut tally[i]);
            if !want("ws") {
                break;
            }
            let r = ws_stream(t.addr, t.ws, 500, 1, 1000).await;
            assert!(r.error.is_none(), "{} WS: {:?}", t.name, r.error);
            out.ws.extend(r.latencies_ns);
            if t.name == "windowtap" && want("unobserved") {
                let r = ws_stream(t.addr, "/openai/v1/unobserved", 500, 1, 1000).await;
                assert!(r.error.is_none(), "{} WS: {:?}", t.name, r.error);
                ws_unobserved.extend(r.latencies_ns);
            }
        }
        // Throughput: 20,000 1 KiB events, as fast as they are taken; the proxy's CPU time.
        for &i in &order {
            let (t, out) = (&targets[i], &mut tally[i]);
            if !want("throughput") {
                break;
            }
            let stream = sse_stream(t.addr, t.sse, 20_000, 1024, 0);
            out.sse_flow.run(t, "throughput", stream).await;
            if t.name == "windowtap" && want("unobserved") {
                let stream = sse_stream(t.addr, "/anthropic/v1/unobserved", 20_000, 1024, 0);
                unobserved_flow.run(t, "throughput", stream).await;
            }
        }
        // The same over WebSocket: 20,000 1 KiB messages answering one `response.create`.
        for &i in &order {
            let (t, out) = (&targets[i], &mut tally[i]);
            if !want("ws-throughput") {
                break;
            }
            let stream = ws_stream(t.addr, t.ws, 20_000, 1024, 0);
            out.ws_flow.run(t, "WS throughput", stream).await;
            if t.name == "windowtap" && want("unobserved") {
                let stream = ws_stream(t.addr, "/openai/v1/unobserved", 20_000, 1024, 0);
                ws_unobserved_flow.run(t, "WS throughput", stream).await;
            }
        }
    }

    let sse: Vec<Lat> = tally.iter().map(|t| lat(t.sse.clone())).collect();
    let ws: Vec<Lat> = tally.iter().map(|t| lat(t.ws.clone())).collect();
    if want("sse") || want("ws") {
        print_latency(&targets, &sse, &ws, (unobserved, ws_unobserved), rounds);
    }
    if want("throughput") {
        let mut flows: Vec<&mut Flow> = tally.iter_mut().map(|t| &mut t.sse_flow).collect();
        print_throughput(
            &targets,
            &mut flows,
            &mut unobserved_flow,
            "SSE events",
            rounds,
        );
    }
    if want("ws-throughput") {
        let mut flows: Vec<&mut Flow> = tally.iter_mut().map(|t| &mut t.ws_flow).collect();
        print_throughput(
            &targets,
            &mut flows,
            &mut ws_unobserved_flow,
            "WebSocket messages",
            rounds,
        );
    }
    // Concurrency: a fresh proxy per run, so its peak RSS is that run's.
    let proxies: Vec<(Kind, &'static str, &'static str)> = targets
        .iter()
        .filter_map(|t| t.proxy.as_ref().map(|p| (p.kind, t.sse, t.ws)))
        .collect();
    let direct = (targets[0].sse, targets[0].ws);
    drop(targets);
    let runs = [(200usize, false), (1000, false), (200, true)];
    for (streams, ws) in runs {
        if !want(if ws { "ws-streams" } else { "streams" }) {
            continue;
        }
        let proto = if ws { "WebSocket" } else { "SSE" };
        println!(
            "\n{streams} concurrent {proto} streams (50 events 10 ms apart each; medians of {rounds} runs: p99 us, p99 against the same round's direct run, CPU per event and the part of it in the kernel (each a median on its own); errors summed; peak RSS the highest)"
        );
        let path = if ws { direct.1 } else { direct.0 };
        // windowtap also on a path no observer watches: what observation costs per event.
        let mut entries: Vec<(Kind, &str, &str)> = Vec::new();
        for (kind, sse_path, ws_path) in &proxies {
            entries.push((*kind, kind.name(), if ws { ws_path } else { sse_path }));
            if *kind == Kind::Windowtap && want("unobserved") {
                let path = if ws {
                    "/openai/v1/unobserved"
                } else {
                    "/anthropic/v1/unobserved"
                };
                entries.push((*kind, "windowtap unobserved", path));
            }
        }
        // One run per target per round, interleaved, each paired with a direct run of the same
        // round: a single run's p99 moved by several times from one run to the next.
        let mut direct_runs = Conc::default();
        let mut results: Vec<Conc> = entries.iter().map(|_| Conc::default()).collect();
        for round in 0..rounds {
            let (ed, ld) = concurrent(up.addr, path, ws, streams).await;
            direct_runs.add(ed, ld.p99_us, 1.0, 0.0, (0.0, 0.0));
            for i in turn(entries.len(), 0, round) {
                let ((kind, _, path), out) = (&entries[i], &mut results[i]);
                let p = Proxy::start(*kind, up.addr).await.expect("started before");
                let (user0, kernel0) = p.settled_cpu().await;
                let (full0, resumed0) = UpstreamTls::handshakes();
                let (e, l) = concurrent(p.addr, path, ws, streams).await;
                let (full1, resumed1) = UpstreamTls::handshakes();
                out.handshakes.0 += full1 - full0;
                out.handshakes.1 += resumed1 - resumed0;
                let (user1, kernel1) = p.settled_cpu().await;
                let rss = p.peak_rss_kib() as f64 / 1024.0;
                let per_event = |secs: f64| secs * 1e6 / (streams * 50) as f64;
                out.add(
                    e,
                    l.p99_us,
                    l.p99_us / ld.p99_us,
                    rss,
                    (per_event(user1 - user0), per_event(kernel1 - kernel0)),
                );
            }
        }
        println!(
            "{:<22} p99 {:>9.1}  errors {}",
            "direct",
            median(&mut direct_runs.p99),
            direct_runs.errors
        );
        for ((_, name, _), mut r) in entries.iter().zip(results) {
            let tls = match TLS.get() {
                None => String::new(),
                Some(_) => format!(
                    "  upstream TLS {} full, {} resumed",
                    r.handshakes.0, r.handshakes.1
                ),
            };
            println!(
                "{:<22} p99 {:>9.1}  errors {}  ({:.2}x direct)  RSS {:.1} MiB  CPU {:.1} us/event  (kernel {:.1}){tls}",
                name,
                median(&mut r.p99),
                r.errors,
                median(&mut r.ratio),
                r.rss_mib,
                median(&mut r.cpu_us),
                median(&mut r.kernel_us)
            );
        }
    }

    // Start-up: spawn to accepting and to the first forwarded response, interleaved.
    if want("startup") {
        println!("\nstart-up, ms (median of {starts})");
    }
    let mut times: Vec<(Vec<f64>, Vec<f64>)> = proxies.iter().map(|_| Default::default()).collect();
    let starts = if want("startup") { starts } else { 0 };
    for start in 0..starts {
        for i in turn(proxies.len(), 0, start) {
            let ((kind, ..), (accept, first)) = (&proxies[i], &mut times[i]);
            let t0 = Instant::now();
            let mut p = Proxy::spawn(*kind, up.addr).expect("started before");
            let a = p.wait_accepting().await.expect("accepting");
            let f = p.wait_forwarding().await.expect("forwarding");
            accept.push((a - t0).as_secs_f64() * 1000.0);
            first.push((f - t0).as_secs_f64() * 1000.0);
        }
    }
    for ((kind, ..), (accept, first)) in proxies.iter().zip(times.iter_mut()) {
        if starts == 0 {
            break;
        }
        println!(
            "{:<22} accepting {:>6.1}  first response {:>6.1}",
            kind.name(),
            median(accept),
            median(first)
        );
    }
}
