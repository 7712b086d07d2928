//! The verbatim path: plain HTTP/1.1 exchanges forwarded with their bytes as received.
//!
//! hyper decodes an upstream's chunked body into frames and its server encodes them again
//! for the client: per event a decode, a body channel, a frame, a chunk header, a dozen
//! polls. The bench measured what that costs: a bare copy loop relayed an SSE event with
//! 25–35 µs less added latency than windowtap's hyper path did, and the hyper path
//! unobserved was no faster than observed, so the cost was forwarding, not observation.
//! Here a client connection is read by the relay itself, and everything about an exchange
//! is decided by the sans-IO [`h1`] crate: which request heads the relay frames itself
//! ([`h1::parse_request`]), the head it writes upstream (the mount prefix, `Host`, hop-by-hop
//! headers, one `Content-Length` of the parsed length), and then one [`Exchange`] machine
//! per request: the body's bytes and no more, the response head, the body passed as it
//! comes (byte for byte with a known length, else one chunk of the relay's own per upstream
//! read), keep-alive, the deadlines. This file is its driver: it reads and writes the two
//! sockets, gets the upstream connection, tells the observer and the log what the machine
//! says, and keeps the one timer the machine asks for ([`Deadline`]).
//!
//! Anything else (a WebSocket upgrade, `Expect`, a chunked or ambiguous request body, `HEAD`,
//! `CONNECT`, a head too large or malformed, a path no mount routes) hands the connection to
//! hyper, with the bytes read so far put back in front of it: hyper then serves it to its end
//! as before ([`super::dispatch::serve_hyper`]). What the verbatim path serves it serves as
//! hyper did: the same header changes, the same timeouts (the header timeout from the start
//! of waiting for a head; the response timeout until the response head), the same error
//! answers ([`super::failure`]), the same log line and observation. Where it differs, it is
//! closer to the upstream: the reason phrase and trailers pass, and an upstream that answers
//! before the whole request body came (a `413`) gets its answer to the client.
//!
//! The one task of the connection does everything, as with hyper: no channel between the
//! upstream's reader and the client's writer.

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{StatusCode, Uri};
use http_body_util::BodyExt;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_util::io::poll_read_buf;

use super::answers;
use super::exchange::{ExchangeLog, ResBody};
use super::failure::{Failure, Phase};
use super::mounts::{Mount, Mounts};
use super::state::State;
use super::tap::{Tap, TapMsg};
use super::timers::{Deadline, Timers, SEND_TIMEOUT};
use super::upstream::{self, Stream, Upstreams};
use crate::mounts::rest_path;
use crate::prefixed::Prefixed;
use h1::{Cut, ExchangeEnd as End, ExchangeEvent as Event, Unanswered, MAX_PIECES};
use h1::{Exchange, Parsed, RequestHead, Timeouts};

/// Read buffer growth.
const READ_CHUNK: usize = 16 * 1024;

/// Serves one client connection until it ends, handing it to hyper at the first request the
/// verbatim path does not take.
pub(super) async fn serve_connection(
    io: TcpStream,
    state: Arc<State>,
    mut drain: watch::Receiver<bool>,
) {
    let mut client = Client {
        io,
        buf: BytesMut::with_capacity(READ_CHUNK),
        timers: state.timers.clone(),
        principal: None,
    };
    loop {
        let next = tokio::select! {
            biased;
            // Draining: an idle connection closes at once.
            _ = draining(&mut drain) => return,
            next = state.timers.timeout(
                state.clients.header_timeout,
                client.next_request(&state.mounts),
            ) => next,
        };
        let request = match next {
            Err(_) | Ok(Next::Closed) => return,
            Ok(Next::Hyper) => {
                let io = Prefixed::new(client.buf.freeze(), client.io);
                return super::dispatch::serve_hyper(io, state, drain).await;
            }
            Ok(Next::Request(r)) => r,
        };
        let keep = exchange(&mut client, &state, *request).await;
        if !keep || *drain.borrow() {
            let _ = client.io.shutdown().await;
            return;
        }
    }
}

/// Resolves once the relay drains (or nobody can tell this connection any more).
async fn draining(drain: &mut watch::Receiver<bool>) {
    drop(drain.wait_for(|d| *d).await);
}

struct Client {
    io: TcpStream,
    /// Bytes read and not yet used: the next request head, body bytes.
    buf: BytesMut,
    /// Where its exchanges' timers run.
    timers: Timers,
    /// Whose idle upstream connections its exchanges share, once its first exchange asked:
    /// a connection's owner does not change, so it is not asked again per exchange.
    principal: Option<hostid::Principal>,
}

enum Next {
    Request(Box<Routed>),
    /// Not for the verbatim path: hyper serves the connection from here.
    Hyper,
    /// The client closed (or broke) the connection between requests.
    Closed,
}

/// A request head the verbatim path takes, with where it goes.
struct Routed {
    head: RequestHead,
    mount: Mount,
    rest: String,
    uri: Uri,
}

impl Client {
    /// Reads until a whole request head is buffered and decides who serves it. The head is
    /// taken off the buffer only when the verbatim path serves it.
    async fn next_request(&mut self, mounts: &Mounts) -> Next {
        loop {
            if !self.buf.is_empty() {
                match parse_request(&self.buf, mounts) {
                    Parsed::Partial => {}
                    Parsed::Handover => return Next::Hyper,
                    Parsed::Complete(len, routed) => {
                        self.buf.advance(len);
                        return Next::Request(Box::new(routed));
                    }
                }
            }
            if self.buf.capacity() - self.buf.len() < 1024 {
                self.buf.reserve(READ_CHUNK);
            }
            match poll_fn(|cx| poll_read_buf(Pin::new(&mut self.io), cx, &mut self.buf)).await {
                Ok(0) if self.buf.is_empty() => return Next::Closed,
                // A partial head and then the end: hyper says what it says to that.
                Ok(0) => return Next::Hyper,
                Ok(_) => {}
                Err(_) => return Next::Closed,
            }
        }
    }
}

/// Parses a request head ([`h1::parse_request`]) and routes it: a head `h1` takes whose
/// path a mount routes is the verbatim path's; anything else is hyper's.
fn parse_request(buf: &[u8], mounts: &Mounts) -> Parsed<Routed> {
    let (len, head) = match h1::parse_request(buf) {
        Parsed::Complete(len, head) => (len, head),
        Parsed::Partial => return Parsed::Partial,
        Parsed::Handover => return Parsed::Handover,
    };
    let Some((mount, rest)) = mounts.route(&head.target) else {
        return Parsed::Handover;
    };
    let Ok(uri) = mount.upstream_uri(rest) else {
        return Parsed::Handover;
    };
    let (mount, rest) = (mount.clone(), rest.to_string());
    Parsed::Complete(
        len,
        Routed {
            head,
            mount,
            rest,
            uri,
        },
    )
}

/// The request head for the upstream: origin-form target and `Host` from the upstream URL,
/// the rest as [`h1::upstream_head`] writes it.
fn upstream_head(r: &Routed) -> Bytes {
    let path = r.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let host = upstream::host_value(&r.uri);
    h1::upstream_head(&r.head, path, host.as_ref().map(HeaderValue::as_bytes))
}

/// Starts observing the exchange if its route is observed.
fn observe(state: &State, r: &Routed) -> Option<Tap> {
    state.observations.as_ref()?;
    let mut headers = HeaderMap::new();
    for (name, value) in &r.head.headers {
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
            headers.append(n, v);
        }
    }
    super::observer::observe(state, &r.head.method, &r.rest, &headers)
}

/// One exchange, driven: the [`Exchange`] machine decides, this reads, writes, tells the
/// observer and the log, and sets the one timer the machine asks for. Returns whether the
/// client connection can carry another exchange.
async fn exchange(client: &mut Client, state: &State, r: Routed) -> bool {
    let log = ExchangeLog::new(
        &state.failed,
        &r.mount.name,
        &r.head.method,
        rest_path(&r.rest),
    );
    let tap = observe(state, &r);
    let timeouts = Timeouts {
        response: state.response_timeout,
        client_body_idle: state.client_body_timeout,
        upstream_body_idle: state.body_timeout,
        send: SEND_TIMEOUT,
    };
    let mut ex = Exchange::new(&r.head, timeouts, Instant::now());
    let mut deadline = Deadline::new(&client.timers);
    // How the upstream connection failed, when it did (the machine only knows that it did).
    let mut failed = Failure::Other;
    // Whose idle upstream connections this exchange may take and give back.
    let principal = match client.principal {
        Some(p) => p,
        None => *client
            .principal
            .insert(upstream::connection_principal().await),
    };
    let pool_key = Upstreams::pool_key(&r.uri, principal);
    let open = open_upstream(state, &r, &pool_key);
    tokio::pin!(open);
    let opened = loop {
        tokio::select! {
            biased;
            up = &mut open => break Some(up),
            now = poll_fn(|cx| deadline.poll(cx, ex.poll_timeout())) => {
                ex.handle_timeout(now);
                if ex.is_ended() {
                    break None;
                }
            }
        }
    };
    let mut up = match opened {
        Some(Ok(up)) => {
            ex.handle_upstream_written(Instant::now());
            Some(up)
        }
        Some(Err(f)) => {
            failed = f;
            ex.handle_upstream_closed(true);
            None
        }
        None => None,
    };
    let mut ubuf = BytesMut::with_capacity(READ_CHUNK);
    if let Some(up) = &mut up {
        send(client, up, &mut ex, &mut ubuf, &mut deadline, &mut failed).await;
    }
    let end = loop {
        match tell(&mut ex, tap.as_ref(), &log) {
            Some(end) => break end,
            // Only once a response head has come (anything else ends the exchange).
            None => {
                let up = up.as_mut().expect("a response head came on a connection");
                pass_body(
                    client,
                    up,
                    &mut ex,
                    &mut ubuf,
                    &mut deadline,
                    tap.as_ref(),
                    &log,
                )
                .await;
            }
        }
    };
    match end {
        End::Done {
            keep_client,
            reuse_upstream,
        } => {
            if let (true, Some(up)) = (reuse_upstream, up) {
                state.upstreams.put_stream(pool_key.clone(), up);
            }
            keep_client
        }
        End::Unanswered { why, keep_client } => {
            let f = match why {
                Unanswered::UpstreamClosed => Failure::Reset,
                Unanswered::UpstreamFailed => failed,
                Unanswered::BadHead => Failure::Other,
                Unanswered::Timeout => Failure::Timeout,
            };
            let res = answers::upstream_failed(&log, &r.mount.name, f, Phase::Exchange);
            write_response(&mut client.io, res, keep_client)
                .await
                .is_ok()
                && keep_client
        }
        End::Cut(cut) => {
            match cut {
                Cut::UpstreamBroken => log.failed.store(true, Ordering::Relaxed),
                Cut::UpstreamIdle => log.fail(Failure::Timeout),
                Cut::ClientIdle => tracing::info!(
                    mount = %r.mount.name,
                    "a client sent nothing of its request body for --client-body-timeout; the exchange ends"
                ),
                Cut::ClientGone | Cut::ClientStopped => {}
            }
            false
        }
    }
}

/// Hands the machine's events to the observer and the log, up to the exchange's end (then
/// `Some`).
fn tell(ex: &mut Exchange, tap: Option<&Tap>, log: &ExchangeLog) -> Option<End> {
    while let Some(event) = ex.poll_event() {
        match event {
            Event::RequestBody(piece) => {
                log.up.fetch_add(piece.len() as u64, Ordering::Relaxed);
                if let Some(tap) = tap {
                    tap.send(TapMsg::RequestChunk(piece));
                }
            }
            Event::RequestEnd => {
                if let Some(tap) = tap {
                    tap.send(TapMsg::RequestEnd);
                }
            }
            Event::ResponseHead {
                status,
                content_type,
                content_encoding,
            } => {
                log.status.store(status, Ordering::Relaxed);
                if let Some(tap) = tap {
                    let text = |v: Option<Bytes>| {
                        v.and_then(|v| std::str::from_utf8(&v).ok().map(str::to_string))
                    };
                    tap.send(TapMsg::ResponseHead {
                        status,
                        content_type: text(content_type),
                        content_encoding: text(content_encoding),
                    });
                }
            }
            Event::End(end) => return Some(end),
        }
    }
    None
}

/// An upstream connection with the request head written to it: a pooled one, or a fresh
/// one. A pooled connection the head cannot be written to (the upstream closed it meanwhile)
/// is replaced by a fresh one, once: nothing of the request has reached the upstream then.
async fn open_upstream(state: &State, r: &Routed, pool_key: &str) -> Result<Stream, Failure> {
    let head = upstream_head(r);
    let mut up = match state.upstreams.take_stream(pool_key) {
        Some(s) => s,
        None => connect(state, &r.uri).await?,
    };
    if up.write_all(&head).await.is_err() {
        up = connect(state, &r.uri).await?;
        up.write_all(&head)
            .await
            .map_err(|e| Failure::classify(&e))?;
    }
    Ok(up)
}

async fn connect(state: &State, uri: &Uri) -> Result<Stream, Failure> {
    state
        .upstreams
        .connect_stream(uri)
        .await
        .map_err(|e| Failure::classify(&*e))
}

/// Sends the request body as the client sends it and reads until the response head, the
/// exchange's end, or a deadline.
async fn send(
    client: &mut Client,
    up: &mut Stream,
    ex: &mut Exchange,
    ubuf: &mut BytesMut,
    deadline: &mut Deadline,
    failed: &mut Failure,
) {
    let mut pending = Bytes::new();
    let mut flushed = true;
    poll_fn(|cx| loop {
        if ex.is_ended() || ex.has_transmit() {
            return Poll::Ready(());
        }
        let mut moved = false;
        let mut upstream_failed = |ex: &mut Exchange, e: io::Error| {
            *failed = Failure::classify(&e);
            ex.handle_upstream_closed(true);
        };
        // The request body, up as far as it goes without waiting.
        if pending.is_empty() && flushed {
            if let Some(piece) = ex.poll_transmit_upstream() {
                (pending, flushed) = (piece, false);
            }
        }
        if !pending.is_empty() {
            moved = match Pin::new(&mut *up).poll_write(cx, &pending) {
                Poll::Ready(Ok(0)) => {
                    ex.handle_upstream_closed(false);
                    true
                }
                Poll::Ready(Ok(n)) => {
                    pending.advance(n);
                    true
                }
                Poll::Ready(Err(e)) => {
                    upstream_failed(ex, e);
                    true
                }
                Poll::Pending => false,
            };
        } else if !flushed {
            // TLS buffers what it is given.
            match Pin::new(&mut *up).poll_flush(cx) {
                Poll::Ready(Ok(())) => {
                    flushed = true;
                    ex.handle_upstream_written(Instant::now());
                    moved = true;
                }
                Poll::Ready(Err(e)) => {
                    upstream_failed(ex, e);
                    moved = true;
                }
                Poll::Pending => {}
            }
        }
        if ex.wants_request_body() {
            if client.buf.is_empty() {
                if client.buf.capacity() < 1024 {
                    client.buf.reserve(READ_CHUNK);
                }
                match poll_read_buf(Pin::new(&mut client.io), cx, &mut client.buf) {
                    Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => {
                        ex.handle_client_closed();
                        moved = true;
                    }
                    Poll::Ready(Ok(_)) | Poll::Pending => {}
                }
            }
            if !client.buf.is_empty() {
                ex.handle_client_bytes(&mut client.buf, Instant::now());
                moved = true;
            }
        }
        // The response head (interim ones are dropped), read while the body goes up.
        if ex.wants_upstream_read() {
            if ubuf.capacity() - ubuf.len() < 1024 {
                ubuf.reserve(READ_CHUNK);
            }
            let read = poll_read_buf(Pin::new(&mut *up), cx, ubuf);
            moved |= read.is_ready();
            match read {
                Poll::Ready(Ok(0)) => ex.handle_upstream_closed(false),
                Poll::Ready(Ok(_)) => ex.handle_upstream_bytes(ubuf, Instant::now()),
                Poll::Ready(Err(e)) => upstream_failed(ex, e),
                Poll::Pending => {}
            }
        }
        if let Poll::Ready(now) = deadline.poll(cx, ex.poll_timeout()) {
            ex.handle_timeout(now);
            moved = true;
        }
        if !moved {
            return Poll::Pending;
        }
    })
    .await
}

/// Writes a response the relay made (an error answer) with its length.
async fn write_response(
    io: &mut TcpStream,
    res: http::Response<ResBody>,
    keep: bool,
) -> io::Result<()> {
    let (parts, body) = res.into_parts();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let mut out = BytesMut::with_capacity(256 + body.len());
    let status: StatusCode = parts.status;
    out.put_slice(b"HTTP/1.1 ");
    out.put_slice(status.as_str().as_bytes());
    out.put_u8(b' ');
    out.put_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.put_slice(b"\r\n");
    for (name, value) in &parts.headers {
        out.put_slice(name.as_str().as_bytes());
        out.put_slice(b": ");
        out.put_slice(value.as_bytes());
        out.put_slice(b"\r\n");
    }
    out.put_slice(format!("content-length: {}\r\n", body.len()).as_bytes());
    if !keep {
        out.put_slice(b"connection: close\r\n");
    }
    out.put_slice(b"\r\n");
    out.put_slice(&body);
    io.write_all(&out).await
}

/// Passes the response body as it comes, one upstream read at a time, each with one
/// vectored write (the head leaves with the first), until the machine has an event for the
/// caller (the end). The observer's copy of a read is stamped before its write and handed
/// over after it, or as soon as the write has to wait for the client, so that a client that
/// stops reading holds no watermark ([`Tap::stamp`]).
async fn pass_body(
    client: &mut Client,
    up: &mut Stream,
    ex: &mut Exchange,
    ubuf: &mut BytesMut,
    deadline: &mut Deadline,
    tap: Option<&Tap>,
    log: &ExchangeLog,
) {
    let mut out: Vec<Bytes> = Vec::with_capacity(MAX_PIECES);
    loop {
        if ex.has_transmit() {
            let len = ex.payload_len();
            log.down.fetch_add(len as u64, Ordering::Relaxed);
            // No copy once the tap has stopped copying (an overflow).
            let stamp = tap.filter(|_| len > 0).and_then(Tap::stamp);
            let copy = ex.poll_transmit(&mut out, stamp.is_some());
            let mut copy = stamp.zip(copy);
            let written = poll_fn(|cx| loop {
                match poll_write_some(&mut client.io, &mut out, cx) {
                    Poll::Ready(Ok(true)) => return Poll::Ready(true),
                    Poll::Ready(Ok(false)) => continue,
                    Poll::Ready(Err(_)) => return Poll::Ready(false),
                    Poll::Pending => {}
                }
                // A client that stops reading must not hold the watermark (and with it
                // every decision of every session) while it does.
                if let Some((stamp, bytes)) = copy.take() {
                    stamp.send(TapMsg::ResponseChunk(bytes));
                }
                ex.handle_client_write_waits(Instant::now());
                match deadline.poll(cx, ex.poll_timeout()) {
                    Poll::Ready(now) => {
                        ex.handle_timeout(now);
                        if ex.is_ended() {
                            return Poll::Ready(true);
                        }
                    }
                    Poll::Pending => return Poll::Pending,
                }
            })
            .await;
            if let Some((stamp, bytes)) = copy {
                stamp.send(TapMsg::ResponseChunk(bytes));
            }
            out.clear();
            if !written {
                ex.handle_client_closed();
            } else if !ex.is_ended() {
                ex.handle_client_written(Instant::now());
            }
            if ex.is_ended() {
                return;
            }
        }
        // Wait for the upstream; meanwhile notice a client that leaves. Reads stay large
        // (a fast stream fills a quarter of the chunk at least per read).
        poll_fn(|cx| {
            // A read that brought no payload (chunk framing only) leaves nothing to write:
            // read again, so that the upstream's waker is registered before waiting.
            while ex.wants_upstream_read() {
                if ubuf.capacity() - ubuf.len() < READ_CHUNK / 4 {
                    ubuf.reserve(READ_CHUNK);
                }
                match poll_read_buf(Pin::new(&mut *up), cx, ubuf) {
                    Poll::Ready(Ok(0)) => ex.handle_upstream_closed(false),
                    Poll::Ready(Ok(_)) => ex.handle_upstream_bytes(ubuf, Instant::now()),
                    Poll::Ready(Err(_)) => ex.handle_upstream_closed(true),
                    Poll::Pending => break,
                }
                if ex.has_transmit() || ex.is_ended() {
                    return Poll::Ready(());
                }
            }
            if ex.wants_client_read(client.buf.len()) {
                if client.buf.capacity() - client.buf.len() < 1024 {
                    client.buf.reserve(READ_CHUNK);
                }
                match poll_read_buf(Pin::new(&mut client.io), cx, &mut client.buf) {
                    Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => {
                        ex.handle_client_closed();
                        return Poll::Ready(());
                    }
                    // The client's next request, kept for after this exchange.
                    Poll::Ready(Ok(_)) => cx.waker().wake_by_ref(),
                    Poll::Pending => {}
                }
            }
            if let Poll::Ready(now) = deadline.poll(cx, ex.poll_timeout()) {
                ex.handle_timeout(now);
                return Poll::Ready(());
            }
            Poll::Pending
        })
        .await;
        if ex.is_ended() {
            return;
        }
    }
}

/// Writes as much of `bufs` as the socket takes now, in one `writev`; `true` once all of it
/// is written.
fn poll_write_some(
    io: &mut TcpStream,
    bufs: &mut [Bytes],
    cx: &mut Context<'_>,
) -> Poll<io::Result<bool>> {
    let first = bufs.iter().position(|b| !b.is_empty());
    let Some(first) = first else {
        return Poll::Ready(Ok(true));
    };
    // On the stack: this runs once per relayed read.
    let mut slices = [io::IoSlice::new(&[]); MAX_PIECES];
    let count = (bufs.len() - first).min(MAX_PIECES);
    for (slice, buf) in slices.iter_mut().zip(&bufs[first..]) {
        *slice = io::IoSlice::new(buf);
    }
    let mut n = match Pin::new(&mut *io).poll_write_vectored(cx, &slices[..count]) {
        Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
        Poll::Ready(Ok(n)) => n,
        Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
        Poll::Pending => return Poll::Pending,
    };
    for buf in &mut bufs[first..] {
        let take = n.min(buf.len());
        buf.advance(take);
        n -= take;
        if n == 0 {
            break;
        }
    }
    Poll::Ready(Ok(bufs.iter().all(Bytes::is_empty)))
}

#[cfg(test)]
#[path = "verbatim_tests.rs"]
mod tests;
