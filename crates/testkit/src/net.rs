//! The network side of the kit: the scripted upstream (plain or TLS with a CA made at test
//! time), a minimal HTTP/1.1 client, bodies and byte hashing.
//!
//! Everything listens on 127.0.0.1 with ephemeral ports; every wait is bounded.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
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

/// A plain upstream that reads each request's body and answers with an SSE stream whose
/// frames `stream` sends on the feed it is given (spawning a task to do so if it waits).
pub async fn sse_upstream<F>(stream: F) -> Upstream
where
    F: Fn(Feed) + Send + Sync + 'static,
{
    let stream = Arc::new(stream);
    let answer = move |req: Request<Incoming>| {
        let stream = stream.clone();
        async move {
            read_body(req.into_body()).await;
            let (tx, body) = channel_body();
            stream(tx);
            sse_response(body)
        }
    };
    Upstream::start(None, handler(answer)).await
}

/// An Anthropic upstream whose every SSE body is handed to the test to feed.
pub async fn scripted_upstream() -> (Upstream, mpsc::UnboundedReceiver<Feed>) {
    let (feeds, fed) = mpsc::unbounded_channel::<Feed>();
    let up = sse_upstream(move |tx| {
        let _ = feeds.send(tx);
    })
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

/// An SSE response streaming `text` one event per frame, as a model API streams them (each
/// event ends at its blank line).
pub fn event_per_frame(text: String) -> Response<Body> {
    let (tx, body) = channel_body();
    tokio::spawn(async move {
        for ev in text.split_inclusive("\n\n") {
            if tx.send(Ok(Bytes::from(ev.to_string()))).await.is_err() {
                return;
            }
        }
    });
    sse_response(body)
}
