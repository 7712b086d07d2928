//! HTTP upstream connections driven by the exchange that uses them.
//!
//! hyper's pooled client runs every upstream connection in a task of its own, which hands the
//! response body to the client connection's task through a channel: each chunk crossed two
//! tasks (on the multi-threaded runtime usually with a wake-up of the other worker: an
//! eventfd write and an `epoll_wait` per chunk) and went out to the client in a write of its
//! own. Here the exchange polls its upstream connection itself: while it waits for the
//! response head, then from the response body's `poll_frame`. One task reads from the
//! upstream and writes to the client, and the chunks of one upstream read leave in one write.
//!
//! Idle keep-alive connections are kept per core, origin and principal (a connection belongs
//! to the reactor of the core that opened it, [`super::cores`]; its exchanges to one user's
//! connections, [`hostid::Principal`]) and handed to the next exchange. Nobody polls an idle
//! connection: one the upstream closed meanwhile, or wrote to unasked, is found so when it is
//! taken out, just before the next request is written to it, and a request it could not
//! start is sent again on a fresh connection, as hyper's pooled client does. A sweeper closes
//! those idle past the idle time.
//!
//! What no HTTP/1.1 client can rule out is an upstream that writes a response nobody asked
//! for *after* the next request went out on the connection: that request reads it as its
//! answer. The principal bounds who that can be: an exchange of the same user (or of the same
//! remote address; of the same client connection where nothing is known), never another
//! user's, whose connections never meet this one's (docs/usage.md, "Upstream connections").
//!
//! The verbatim path ([`super::verbatim`]) keeps bare streams instead ([`Stream`]), pooled
//! the same way: per core, origin and principal, most recent first, up to the same count, swept by the
//! same sweeper; one that reads as closed (or holds bytes nobody asked for) when taken out is
//! dropped.

use std::collections::HashMap;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, Uri};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_rustls::MaybeHttpsStream;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tower_service::Service;

use hostid::Principal;

use super::body::RelayBody;
use super::timers::Timers;
use crate::tls::UpstreamConnector;

type ReqBody = RelayBody<Incoming>;
type Conn = http1::Connection<MaybeHttpsStream<TokioIo<tokio::net::TcpStream>>, ReqBody>;
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The pooled client WebSocket handshakes go through (their connection is handed over to
/// the splice once upgraded).
pub(crate) type UpstreamClient = Client<UpstreamConnector, RelayBody<Incoming>>;

/// The pooled upstream client over `connector` (WebSocket handshakes), idle connections
/// closed after `pool_idle`.
pub(super) fn client(
    connector: UpstreamConnector,
    pool_idle: Duration,
    timers: Timers,
) -> UpstreamClient {
    Client::builder(TokioExecutor::new())
        .http1_preserve_header_case(true)
        // A handshake's connection becomes its tunnel; one whose upgrade was refused is not
        // kept either: this pool knows no principals ([`Upstreams`] does), and handshakes
        // are few (one per WebSocket).
        .pool_max_idle_per_host(0)
        .pool_idle_timeout(pool_idle)
        // Without a timer the pool never reaps idle connections (only on a later checkout),
        // so a burst of streams left as many upstream sockets open for good: the soak's
        // descriptors never came back down.
        // Off the cores, as every timer the relay sets ([`super::timers`]).
        .pool_timer(timers)
        .build(connector)
}

/// Idle connections kept per origin; more are closed.
const MAX_IDLE_PER_ORIGIN: usize = 64;

/// A connection the exchange holds: the request side and the connection itself, which only
/// makes progress when the holder polls it.
pub(crate) struct Lease {
    sender: SendRequest<ReqBody>,
    /// `None` once the connection has ended.
    conn: Option<Pin<Box<Conn>>>,
    origin: Arc<str>,
    pool: Arc<Upstreams>,
}

impl Lease {
    /// Lets the connection read, decode and write what it can; registers `cx` for more.
    fn drive(&mut self, cx: &mut Context<'_>) {
        if let Some(conn) = &mut self.conn {
            // Its end (clean or not) also reaches the response body or the pending request.
            if conn.as_mut().poll(cx).is_ready() {
                self.conn = None;
            }
        }
    }

    /// The exchange is over: back to the pool if the connection can take another request.
    fn release(mut self, cx: &mut Context<'_>) {
        self.drive(cx);
        if self.conn.is_some() && self.sender.is_ready() {
            let pool = self.pool.clone();
            pool.put(self);
        }
    }
}

/// An upstream connection the verbatim path ([`super::verbatim`]) reads and writes itself.
pub(crate) type Stream = TokioIo<MaybeHttpsStream<TokioIo<tokio::net::TcpStream>>>;

/// Idle connections of one kind per origin key, most recently idle last, each with the time
/// it became idle.
struct IdlePool<T>(Mutex<HashMap<Arc<str>, IdleList<T>>>);

/// Connections with the time each became idle.
type IdleList<T> = Vec<(T, Instant)>;

impl<T> IdlePool<T> {
    fn new() -> Self {
        IdlePool(Mutex::new(HashMap::new()))
    }

    /// The most recently idle connection to `origin` that has not timed out and that
    /// `usable` accepts; the others looked at are dropped.
    fn take(
        &self,
        origin: &str,
        timeout: Duration,
        mut usable: impl FnMut(&mut T) -> bool,
    ) -> Option<T> {
        let mut idle = self.0.lock().ok()?;
        let list = idle.get_mut(origin)?;
        while let Some((mut conn, since)) = list.pop() {
            if since.elapsed() < timeout && usable(&mut conn) {
                return Some(conn);
            }
        }
        None
    }

    /// Keeps `conn` for the next exchange to `origin`, unless [`MAX_IDLE_PER_ORIGIN`] are
    /// already kept.
    fn put(&self, origin: Arc<str>, conn: T, timeout: Duration) {
        let Ok(mut idle) = self.0.lock() else {
            return;
        };
        let list = idle.entry(origin).or_default();
        let now = Instant::now();
        list.retain(|(_, since)| now.duration_since(*since) < timeout);
        if list.len() < MAX_IDLE_PER_ORIGIN {
            list.push((conn, now));
        }
    }

    /// Drops the connections idle for `timeout` or longer.
    fn sweep(&self, timeout: Duration) {
        let Ok(mut idle) = self.0.lock() else {
            return;
        };
        let now = Instant::now();
        for list in idle.values_mut() {
            list.retain(|(_, since)| now.duration_since(*since) < timeout);
        }
        idle.retain(|_, list| !list.is_empty());
    }
}

/// The origins' idle connections and how to open new ones.
pub(crate) struct Upstreams {
    connector: UpstreamConnector,
    builder: http1::Builder,
    idle: IdlePool<Lease>,
    /// The verbatim path's idle connections: bare streams, between two exchanges.
    idle_streams: IdlePool<Stream>,
    idle_timeout: Duration,
}

impl Upstreams {
    pub(crate) fn new(connector: UpstreamConnector, idle_timeout: Duration) -> Arc<Self> {
        let mut builder = http1::Builder::new();
        builder.preserve_header_case(true);
        Arc::new(Upstreams {
            connector,
            builder,
            idle: IdlePool::new(),
            idle_streams: IdlePool::new(),
            idle_timeout,
        })
    }

    /// Sends `req` (absolute URI) to its origin and returns the response head, with the
    /// connection its body must be read through.
    pub(crate) async fn send(
        self: &Arc<Self>,
        mut req: Request<ReqBody>,
    ) -> Result<(Response<Incoming>, Lease), BoxError> {
        let uri = req.uri().clone();
        if uri.scheme().is_none() || uri.authority().is_none() {
            return Err("the upstream URI is not absolute".into());
        }
        let origin = Upstreams::pool_key(&uri, connection_principal().await);
        set_host(&mut req, &uri);
        origin_form(&mut req);
        loop {
            let idle = self.idle.take(&origin, self.idle_timeout, |_| true);
            let (mut lease, reused) = match idle {
                Some(l) => (l, true),
                None => (self.connect(&uri, origin.clone()).await?, false),
            };
            if !ready(&mut lease, reused).await {
                if reused {
                    continue;
                }
                return Err("the upstream connection closed before the request".into());
            }
            let mut sent = std::pin::pin!(lease.sender.try_send_request(req));
            let res = poll_fn(|cx| {
                lease.drive(cx);
                sent.as_mut().poll(cx)
            })
            .await;
            match res {
                Ok(res) => return Ok((res, lease)),
                Err(mut e) => match e.take_message() {
                    // Not started on a connection the upstream had closed: a fresh one.
                    Some(again) if reused => req = again,
                    _ => return Err(e.into_error().into()),
                },
            }
        }
    }

    /// A new connection to `uri`'s origin (TLS for `https`).
    async fn open(
        &self,
        uri: &Uri,
    ) -> Result<MaybeHttpsStream<TokioIo<tokio::net::TcpStream>>, BoxError> {
        let mut connector = self.connector.clone();
        poll_fn(|cx| connector.poll_ready(cx)).await?;
        connector.call(uri.clone()).await
    }

    async fn connect(self: &Arc<Self>, uri: &Uri, origin: Arc<str>) -> Result<Lease, BoxError> {
        let io = self.open(uri).await?;
        let (sender, conn) = self.builder.handshake(io).await?;
        Ok(Lease {
            sender,
            conn: Some(Box::pin(conn)),
            origin,
            pool: self.clone(),
        })
    }

    /// Closes the idle connections that have timed out. Nobody else looks at an origin no
    /// exchange uses any more, so without this its sockets would stay open for good.
    fn sweep(&self) {
        self.idle.sweep(self.idle_timeout);
        self.idle_streams.sweep(self.idle_timeout);
    }

    /// The pool key of `uri`'s origin on the calling core (a connection belongs to the
    /// reactor of the core that opened it), for exchanges of `principal`.
    pub(crate) fn pool_key(uri: &Uri, principal: Principal) -> Arc<str> {
        let core = super::cores::current();
        let scheme = uri.scheme_str().unwrap_or("http");
        let authority = uri.authority().map(|a| a.as_str()).unwrap_or("");
        Arc::from(format!("{core} {} {scheme}://{authority}", principal.key()))
    }

    /// An idle stream to `origin` that is still open, most recently used first. One the
    /// upstream closed (or wrote to unasked) meanwhile is dropped.
    pub(crate) fn take_stream(&self, origin: &str) -> Option<Stream> {
        self.idle_streams
            .take(origin, self.idle_timeout, still_open)
    }

    /// A fresh stream to `uri`'s origin (TLS for `https`).
    pub(crate) async fn connect_stream(&self, uri: &Uri) -> Result<Stream, BoxError> {
        Ok(TokioIo::new(self.open(uri).await?))
    }

    /// Keeps `stream` for the next exchange to `origin`.
    pub(crate) fn put_stream(&self, origin: Arc<str>, stream: Stream) {
        self.idle_streams.put(origin, stream, self.idle_timeout);
    }

    /// Sweeps every quarter of the idle time (at least every 10 ms) for as long as the pool
    /// exists.
    pub(crate) fn spawn_sweeper(self: &Arc<Self>) {
        let pool = Arc::downgrade(self);
        let every = (self.idle_timeout / 4).max(Duration::from_millis(10));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                match pool.upgrade() {
                    Some(p) => p.sweep(),
                    None => return,
                }
            }
        });
    }

    fn put(&self, lease: Lease) {
        self.idle
            .put(lease.origin.clone(), lease, self.idle_timeout);
    }
}

/// Whose the client connection this task serves is: idle upstream connections are shared
/// only between exchanges of one principal. Outside a client connection (never, on the
/// relay's paths), a principal alone.
pub(crate) async fn connection_principal() -> Principal {
    match hostid::connection_host() {
        Some(host) => host.principal().await,
        None => Principal::alone(),
    }
}

/// Whether the connection can take a request. A fresh one is driven until it can; a reused
/// one must be able to at once (otherwise it is closed or busy and is dropped).
async fn ready(lease: &mut Lease, reused: bool) -> bool {
    poll_fn(|cx| {
        lease.drive(cx);
        if lease.conn.is_none() {
            return Poll::Ready(false);
        }
        match lease.sender.poll_ready(cx) {
            Poll::Ready(r) => Poll::Ready(r.is_ok()),
            Poll::Pending if reused => Poll::Ready(false),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

/// Whether an idle stream is still open: a read that would block. End of stream, an error
/// or bytes nobody asked for all mean it cannot carry a request.
fn still_open(stream: &mut Stream) -> bool {
    use tokio::io::AsyncRead;
    let mut byte = [0u8; 1];
    let mut buf = tokio::io::ReadBuf::new(&mut byte);
    let mut cx = Context::from_waker(std::task::Waker::noop());
    Pin::new(stream).poll_read(&mut cx, &mut buf).is_pending()
}

/// `Host` for the upstream URI, as hyper's pooled client sets it (the port only when it is
/// not the scheme's default).
pub(crate) fn host_value(uri: &Uri) -> Option<HeaderValue> {
    let host = uri.host()?;
    let default_port = match uri.scheme_str() {
        Some("https") => 443,
        _ => 80,
    };
    let value = match uri.port_u16() {
        Some(p) if p != default_port => HeaderValue::from_str(&format!("{host}:{p}")),
        _ => HeaderValue::from_str(host),
    };
    value.ok()
}

fn set_host(req: &mut Request<ReqBody>, uri: &Uri) {
    if let Some(v) = host_value(uri) {
        req.headers_mut().entry(header::HOST).or_insert(v);
    }
}

/// The request target in origin form (`/path?query`), as hyper's pooled client sends it.
fn origin_form(req: &mut Request<ReqBody>) {
    if req.method() == Method::CONNECT {
        return;
    }
    let uri = req.uri_mut();
    *uri = match uri.path_and_query() {
        Some(p) if p.as_str() != "/" => {
            let mut parts = http::uri::Parts::default();
            parts.path_and_query = Some(p.clone());
            Uri::from_parts(parts).unwrap_or_default()
        }
        _ => Uri::default(),
    };
}

/// Data already decoded when a chunk is taken is merged into it, up to this many bytes: one
/// chunk to the client (one chunk header, one tap copy) per upstream read rather than one per
/// upstream chunk. Nothing is waited for: a lone chunk passes as it is, uncopied. Chunk
/// boundaries are hop-by-hop framing; the bytes are the same.
const MERGE_MAX: usize = 64 * 1024;

type Polled = Option<Result<Frame<Bytes>, hyper::Error>>;

/// A response body read through the connection it arrives on: polling the body polls the
/// connection. Once the body has ended the connection goes back to the pool.
pub(crate) struct Driven {
    inner: Incoming,
    lease: Option<Lease>,
    /// What was taken while merging and is due next (a trailers frame, an error, the end).
    held: Option<Polled>,
}

impl Driven {
    pub(crate) fn new(inner: Incoming, lease: Option<Lease>) -> Self {
        Driven {
            inner,
            lease,
            held: None,
        }
    }

    fn end(&mut self, cx: &mut Context<'_>) {
        if let Some(lease) = self.lease.take() {
            lease.release(cx);
        }
    }

    /// The next frame from the connection.
    fn poll_one(&mut self, cx: &mut Context<'_>) -> Poll<Polled> {
        if let Some(held) = self.held.take() {
            return Poll::Ready(held);
        }
        let mut polled = Pin::new(&mut self.inner).poll_frame(cx);
        if polled.is_pending() {
            if let Some(lease) = &mut self.lease {
                // Nothing decoded yet: let the connection read and decode the next chunk.
                lease.drive(cx);
                polled = Pin::new(&mut self.inner).poll_frame(cx);
            }
        }
        match &polled {
            Poll::Ready(None) => self.end(cx),
            // A body of known length may never be polled again once complete.
            Poll::Ready(Some(Ok(_))) if self.inner.is_end_stream() => self.end(cx),
            // A broken body: the connection is not reused.
            Poll::Ready(Some(Err(_))) => self.lease = None,
            _ => {}
        }
        polled
    }
}

impl Body for Driven {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Polled> {
        let this = &mut *self;
        let first = match this.poll_one(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            other => return other,
        };
        let first = match first.into_data() {
            Ok(data) => data,
            Err(frame) => return Poll::Ready(Some(Ok(frame))),
        };
        let mut merged: Option<BytesMut> = None;
        let mut len = first.len();
        while len < MERGE_MAX && !this.inner.is_end_stream() {
            let more = match this.poll_one(cx) {
                Poll::Pending => break,
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => data,
                    Err(frame) => {
                        this.held = Some(Some(Ok(frame)));
                        break;
                    }
                },
                Poll::Ready(other) => {
                    this.held = Some(other);
                    break;
                }
            };
            len += more.len();
            merged
                .get_or_insert_with(|| {
                    let mut buf = BytesMut::with_capacity(MERGE_MAX.min(len * 2));
                    buf.extend_from_slice(&first);
                    buf
                })
                .extend_from_slice(&more);
        }
        let data = match merged {
            Some(buf) => buf.freeze(),
            None => first,
        };
        Poll::Ready(Some(Ok(Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.held.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Driven {
    /// A body that was complete from the start (`Content-Length: 0`, a `204`) is never polled;
    /// its connection still goes back. One dropped before its end is closed.
    fn drop(&mut self) {
        if self.inner.is_end_stream() {
            self.end(&mut Context::from_waker(std::task::Waker::noop()));
        }
    }
}
