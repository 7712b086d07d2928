//! The verbatim path: plain HTTP/1.1 exchanges forwarded with their bytes as received.
//!
//! hyper decodes an upstream's chunked body into frames and its server encodes them again
//! for the client: per event a decode, a body channel, a frame, a chunk header, a dozen
//! polls. The bench measured what that costs: a bare copy loop relayed an SSE event with
//! 25–35 µs less added latency than windowtap's hyper path did, and the hyper path
//! unobserved was no faster than observed, so the cost was forwarding, not observation.
//! Here a client connection is read by the relay itself: each request head is parsed and
//! decided by the sans-IO [`h1`] crate (which heads the relay frames itself, the heads it
//! writes on, framed from the parse), and an exchange it can pass is forwarded on a bare
//! upstream stream: the request head rewritten as a reverse proxy must (the mount prefix,
//! `Host`, hop-by-hop headers, one `Content-Length` of the parsed length), the request body
//! passed byte for byte, the response head likewise, and the response body as it arrives,
//! one write per upstream read. [`h1::Framing`] follows the
//! body's framing as the bytes go by: where it ends, which bytes are payload (for the
//! observer's copy and the client's chunks), the trailers. A body of known length passes byte
//! for byte; a chunked one leaves as one chunk per upstream read (see [`pass_body`]).
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
use std::ops::Range;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{StatusCode, Uri};
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_util::io::poll_read_buf;

use super::dispatch::rest_path;
use super::exchange::{ExchangeLog, ResBody};
use super::failure::{self, Failure, Phase};
use super::mounts::{Mount, Mounts};
use super::state::State;
use super::tap::{Tap, TapMsg};
use super::timers::{IdleTimer, Timers, SEND_TIMEOUT};
use super::upstream::{self, Stream, Upstreams};
use h1::{client_head, parse_response, Framing, Parsed, RequestHead, ResponseHead, ResponseParsed};

/// Read buffer growth.
const READ_CHUNK: usize = 16 * 1024;
/// Bytes a client may send ahead (its next request) while its response streams.
const MAX_AHEAD: usize = 64 * 1024;

/// Serves one client connection until it ends, handing it to hyper at the first request the
/// verbatim path does not take.
pub(super) async fn serve(io: TcpStream, state: Arc<State>, mut drain: watch::Receiver<bool>) {
    let mut client = Client {
        io,
        buf: BytesMut::with_capacity(READ_CHUNK),
        timers: state.timers.clone(),
        body_timeout: state.body_timeout,
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
                let io = Prefixed {
                    ahead: client.buf.freeze(),
                    io: client.io,
                };
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
    /// Where the send timeout's timer runs.
    timers: Timers,
    /// How long its exchanges' upstreams may send nothing of a response body.
    body_timeout: Duration,
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
    state.live.as_ref()?;
    let mut headers = HeaderMap::new();
    for (name, value) in &r.head.headers {
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
            headers.append(n, v);
        }
    }
    super::observer::observe(state, &r.head.method, &r.rest, &headers)
}

/// Why sending a request did not get a response head.
enum Unsent {
    /// The client left (or broke) before its request body was complete.
    Client,
    Upstream(Failure),
}

/// One exchange. Returns whether the client connection can carry another.
async fn exchange(client: &mut Client, state: &State, r: Routed) -> bool {
    let log = ExchangeLog::new(&r.mount.name, &r.head.method, rest_path(&r.rest));
    let tap = observe(state, &r);
    if let (Some(tap), 0) = (&tap, r.head.body_len) {
        tap.send(TapMsg::RequestEnd);
    }
    let origin = Upstreams::origin_key(&r.uri);
    let mut left = r.head.body_len;
    let mut ubuf = BytesMut::with_capacity(READ_CHUNK);
    let sent = state
        .timers
        .timeout(
            state.response_timeout,
            send(client, state, &r, &mut left, &mut ubuf, tap.as_ref(), &log),
        )
        .await;
    let (mut up, mut res) = match sent {
        Ok(Ok(pair)) => pair,
        Ok(Err(Unsent::Client)) => return false,
        Ok(Err(Unsent::Upstream(f))) => {
            return answer_failure(client, &log, &r, f, left == 0).await;
        }
        Err(_) => return answer_failure(client, &log, &r, Failure::Timeout, left == 0).await,
    };
    // An upstream that answered before the whole request body came: the rest of it is not
    // sent, and neither connection can be reused (nobody knows where the next request starts).
    let body_done = left == 0;
    let close = r.head.close || !body_done;
    log.status.store(res.status, Ordering::Relaxed);
    if let Some(tap) = &tap {
        let find = |want: &str| {
            res.headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(want.as_bytes()))
                .and_then(|(_, v)| std::str::from_utf8(v).ok())
                .map(str::to_string)
        };
        tap.send(TapMsg::ResponseHead {
            status: res.status,
            content_type: find("content-type"),
            content_encoding: find("content-encoding"),
        });
    }
    let head = client_head(&res, close);
    let end = pass_body(
        client,
        &mut up,
        ubuf,
        head,
        &mut res.framing,
        tap.as_ref(),
        &log,
    )
    .await;
    match end {
        BodyEnd::Done { clean_upstream } => {
            if clean_upstream && res.reusable && body_done {
                state.upstreams.put_stream(origin, up);
            }
            !close
        }
        BodyEnd::UpstreamBroken => {
            log.failed.store(true, Ordering::Relaxed);
            false
        }
        BodyEnd::UpstreamIdle => {
            log.fail(Failure::Timeout);
            false
        }
        BodyEnd::ClientGone => false,
    }
}

/// Sends the request (head, then body as it comes) and reads the response head. A connection
/// the head cannot be written to (a pooled one the upstream closed meanwhile) is replaced by
/// a fresh one, once: nothing of the request has reached the upstream then.
async fn send(
    client: &mut Client,
    state: &State,
    r: &Routed,
    left: &mut u64,
    ubuf: &mut BytesMut,
    tap: Option<&Tap>,
    log: &ExchangeLog,
) -> Result<(Stream, ResponseHead), Unsent> {
    let head = upstream_head(r);
    let origin = Upstreams::origin_key(&r.uri);
    let mut up = match state.upstreams.take_stream(&origin) {
        Some(s) => s,
        None => connect(state, &r.uri).await?,
    };
    if up.write_all(&head).await.is_err() {
        up = connect(state, &r.uri).await?;
        if let Err(e) = up.write_all(&head).await {
            return Err(Unsent::Upstream(Failure::classify(&e)));
        }
    }
    let mut pending = Bytes::new();
    let mut flushed = false;
    let mut idle = IdleTimer::new(&client.timers, state.client_body_timeout);
    poll_fn(|cx| {
        let before = *left;
        if let Err(e) = pump_request(
            client,
            &mut up,
            cx,
            &mut pending,
            &mut flushed,
            left,
            tap,
            log,
        ) {
            return Poll::Ready(Err(e));
        }
        if *left != before {
            idle.progress();
        }
        if *left > 0 && pending.is_empty() && idle.poll_expired(cx).is_ready() {
            // The client stopped sending its body: the exchange ends (the upstream's
            // connection with it, which holds half a request).
            tracing::info!(
                mount = %r.mount.name,
                "a client sent nothing of its request body for --client-body-timeout; the exchange ends"
            );
            return Poll::Ready(Err(Unsent::Client));
        }
        poll_response_head(&mut up, cx, ubuf)
    })
    .await
    .map(|res| (up, res))
}

async fn connect(state: &State, uri: &Uri) -> Result<Stream, Unsent> {
    state
        .upstreams
        .connect_stream(uri)
        .await
        .map_err(|e| Unsent::Upstream(Failure::classify(&*e)))
}

/// Passes request body bytes from the client to the upstream as far as that goes without
/// waiting; registers `cx` where it has to wait.
#[allow(clippy::too_many_arguments)]
fn pump_request(
    client: &mut Client,
    up: &mut Stream,
    cx: &mut Context<'_>,
    pending: &mut Bytes,
    flushed: &mut bool,
    left: &mut u64,
    tap: Option<&Tap>,
    log: &ExchangeLog,
) -> Result<(), Unsent> {
    loop {
        if !pending.is_empty() {
            match Pin::new(&mut *up).poll_write(cx, pending) {
                Poll::Ready(Ok(0)) => return Err(Unsent::Upstream(Failure::Reset)),
                Poll::Ready(Ok(n)) => {
                    pending.advance(n);
                    *flushed = false;
                    continue;
                }
                Poll::Ready(Err(e)) => return Err(Unsent::Upstream(Failure::classify(&e))),
                Poll::Pending => return Ok(()),
            }
        }
        if !*flushed {
            // TLS buffers what it is given.
            match Pin::new(&mut *up).poll_flush(cx) {
                Poll::Ready(Ok(())) => *flushed = true,
                Poll::Ready(Err(e)) => return Err(Unsent::Upstream(Failure::classify(&e))),
                Poll::Pending => return Ok(()),
            }
        }
        if *left == 0 {
            return Ok(());
        }
        if client.buf.is_empty() {
            if client.buf.capacity() < 1024 {
                client.buf.reserve(READ_CHUNK);
            }
            match poll_read_buf(Pin::new(&mut client.io), cx, &mut client.buf) {
                Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Err(Unsent::Client),
                Poll::Ready(Ok(_)) => {}
                Poll::Pending => return Ok(()),
            }
        }
        let take = (*left).min(client.buf.len() as u64) as usize;
        let piece = client.buf.split_to(take).freeze();
        *left -= take as u64;
        log.up.fetch_add(take as u64, Ordering::Relaxed);
        if let Some(tap) = tap {
            tap.send(TapMsg::RequestChunk(piece.clone()));
            if *left == 0 {
                tap.send(TapMsg::RequestEnd);
            }
        }
        *pending = piece;
    }
}

/// Reads until a final response head is buffered; interim responses are dropped.
fn poll_response_head(
    up: &mut Stream,
    cx: &mut Context<'_>,
    ubuf: &mut BytesMut,
) -> Poll<Result<ResponseHead, Unsent>> {
    loop {
        if !ubuf.is_empty() {
            match parse_response(ubuf) {
                ResponseParsed::Complete(len, head) => {
                    ubuf.advance(len);
                    return Poll::Ready(Ok(head));
                }
                ResponseParsed::Interim(len) => {
                    ubuf.advance(len);
                    continue;
                }
                ResponseParsed::Bad => return Poll::Ready(Err(Unsent::Upstream(Failure::Other))),
                ResponseParsed::Partial => {}
            }
        }
        if ubuf.capacity() - ubuf.len() < 1024 {
            ubuf.reserve(READ_CHUNK);
        }
        match poll_read_buf(Pin::new(&mut *up), cx, ubuf) {
            Poll::Ready(Ok(0)) => return Poll::Ready(Err(Unsent::Upstream(Failure::Reset))),
            Poll::Ready(Ok(_)) => {}
            Poll::Ready(Err(e)) => {
                return Poll::Ready(Err(Unsent::Upstream(Failure::classify(&e))))
            }
            Poll::Pending => return Poll::Pending,
        }
    }
}

/// Writes the relay's own error answer. The connection stays open only if the request
/// body was read to its end.
async fn answer_failure(
    client: &mut Client,
    log: &ExchangeLog,
    r: &Routed,
    f: Failure,
    body_done: bool,
) -> bool {
    let res = failure::upstream_failed(log, &r.mount.name, f, Phase::Exchange);
    let keep = body_done && !r.head.close;
    write_response(&mut client.io, res, keep).await.is_ok() && keep
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

enum BodyEnd {
    /// The body ended; `clean_upstream` when nothing followed it on the upstream connection.
    Done { clean_upstream: bool },
    /// The upstream broke the body (closed early, broke the framing).
    UpstreamBroken,
    /// The upstream sent nothing of the body for `--body-timeout`.
    UpstreamIdle,
    /// The client went away.
    ClientGone,
}

/// Payload ranges of one read up to this many leave as slices of the read (one `writev`);
/// more are copied into one buffer first (tiny chunks, and the system call's vector limit).
const MAX_SLICES: usize = 8;

/// Passes the response body as it comes, one upstream read at a time, each with one write
/// (the head leaves with the first). A body of known length passes byte for byte. A chunked
/// body, and one the upstream ends by closing, leave in chunks of the relay's own, one per
/// upstream read whatever chunks it held, then the upstream's trailers: chunk boundaries
/// are hop-by-hop, the payload is the same, and a client decodes one chunk per read instead
/// of one per event (the bench's client took a fast stream at a third of the speed when it
/// got the upstream's 1 KiB chunks as they were). The observer gets the payload, stamped
/// before the write and handed over after it, or as soon as the write has to wait for the
/// client, so that a client that stops reading holds no watermark ([`Tap::stamp`]).
async fn pass_body(
    client: &mut Client,
    up: &mut Stream,
    mut ubuf: BytesMut,
    head: BytesMut,
    framing: &mut Framing,
    tap: Option<&Tap>,
    log: &ExchangeLog,
) -> BodyEnd {
    let chunked = matches!(framing, Framing::Chunked(_) | Framing::UntilClose);
    let mut out: Vec<Bytes> = vec![head.freeze()];
    let mut payload: Vec<Range<usize>> = Vec::new();
    // The chunk-size lines, cut from one buffer: no allocation per read.
    let mut lines = BytesMut::new();
    let mut upstream_ended = false;
    let mut idle = IdleTimer::new(&client.timers, client.body_timeout);
    loop {
        let mut done = framing.is_done();
        let mut clean = true;
        // The observer's copy of this read, handed over after the write.
        let mut copy = None;
        if !ubuf.is_empty() && !done {
            let read = ubuf.split().freeze();
            payload.clear();
            let scanned = match framing.scan(&read, &mut payload) {
                Ok(s) => s,
                Err(_) => return BodyEnd::UpstreamBroken,
            };
            done = scanned.done;
            clean = scanned.used == read.len();
            let len: usize = payload.iter().map(|r| r.len()).sum();
            log.down.fetch_add(len as u64, Ordering::Relaxed);
            // No copy once the tap has stopped copying (an overflow): then no joining for it.
            let stamp = tap.filter(|_| !payload.is_empty()).and_then(Tap::stamp);
            let joined = (payload.len() > 1 && (stamp.is_some() || payload.len() > MAX_SLICES))
                .then(|| {
                    let mut joined = BytesMut::with_capacity(len);
                    for r in &payload {
                        joined.put_slice(&read[r.clone()]);
                    }
                    joined.freeze()
                });
            copy = stamp.map(|stamp| match &joined {
                Some(j) => (stamp, j.clone()),
                None => (stamp, read.slice(payload[0].clone())),
            });
            if len > 0 {
                if chunked {
                    out.push(chunk_size_line(len, &mut lines));
                }
                match joined {
                    Some(j) if payload.len() > MAX_SLICES => out.push(j),
                    _ => out.extend(payload.iter().map(|r| read.slice(r.clone()))),
                }
                if chunked {
                    out.push(Bytes::from_static(b"\r\n"));
                }
            }
        }
        if upstream_ended {
            // `UntilClose`: the close was the end.
            done = true;
        }
        if done && chunked {
            out.push(Bytes::from_static(b"0\r\n"));
            let trailers = framing.trailers();
            if !trailers.is_empty() {
                out.push(Bytes::copy_from_slice(trailers));
            }
            out.push(Bytes::from_static(b"\r\n"));
        }
        // The copy is handed over after the write, or as soon as the write has to wait for
        // the client: a client that stops reading must not hold the watermark (and with it
        // every decision of every session) while it does. A client that takes nothing for
        // SEND_TIMEOUT ends the exchange.
        let mut hand_over = || {
            if let Some((stamp, bytes)) = copy.take() {
                stamp.send(TapMsg::ResponseChunk(bytes));
            }
        };
        let written = client
            .timers
            .timeout_if_waits(
                SEND_TIMEOUT,
                write_all(&mut client.io, &mut out, &mut hand_over),
            )
            .await;
        hand_over();
        if !matches!(written, Ok(Ok(()))) {
            return BodyEnd::ClientGone;
        }
        idle.progress();
        if done {
            return BodyEnd::Done {
                clean_upstream: clean && ubuf.is_empty(),
            };
        }
        // Wait for the upstream; meanwhile notice a client that leaves. Reads stay large
        // (a fast stream fills a quarter of the chunk at least per read).
        if ubuf.capacity() - ubuf.len() < READ_CHUNK / 4 {
            ubuf.reserve(READ_CHUNK);
        }
        let read = poll_fn(|cx| {
            if let Poll::Ready(r) = poll_read_buf(Pin::new(&mut *up), cx, &mut ubuf) {
                return Poll::Ready(Some(r));
            }
            if client.buf.len() < MAX_AHEAD {
                if client.buf.capacity() - client.buf.len() < 1024 {
                    client.buf.reserve(READ_CHUNK);
                }
                match poll_read_buf(Pin::new(&mut client.io), cx, &mut client.buf) {
                    Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Poll::Ready(None),
                    // The client's next request, kept for after this exchange.
                    Poll::Ready(Ok(_)) => cx.waker().wake_by_ref(),
                    Poll::Pending => {}
                }
            }
            if idle.poll_expired(cx).is_ready() {
                return Poll::Ready(Some(Err(io::ErrorKind::TimedOut.into())));
            }
            Poll::Pending
        })
        .await;
        match read {
            None => return BodyEnd::ClientGone,
            Some(Err(e)) if e.kind() == io::ErrorKind::TimedOut => return BodyEnd::UpstreamIdle,
            Some(Ok(0)) if matches!(framing, Framing::UntilClose) => upstream_ended = true,
            Some(Ok(0)) | Some(Err(_)) => return BodyEnd::UpstreamBroken,
            Some(Ok(_)) => {}
        }
    }
}

/// `len` as a chunk-size line (lower-case hex, CRLF), cut from `lines`, which allocates a
/// block for many lines at a time.
fn chunk_size_line(len: usize, lines: &mut BytesMut) -> Bytes {
    use std::fmt::Write as _;
    // 16 hex digits and CRLF at most: room for one line, or a new block.
    if lines.capacity() - lines.len() < 18 {
        lines.reserve(256);
    }
    write!(lines, "{len:x}\r\n").expect("a BytesMut grows as it is written");
    lines.split().freeze()
}

/// Pieces one `writev` takes at most (the head, a chunk-size line, the payload slices of one
/// read, the end of a chunk and of the body).
const MAX_IOV: usize = 2 * MAX_SLICES + 8;

/// Writes `bufs` in order, as few system calls as the socket allows; leaves `bufs` empty.
/// `waits` runs each time the socket cannot take more at once.
async fn write_all(
    io: &mut TcpStream,
    bufs: &mut Vec<Bytes>,
    waits: &mut impl FnMut(),
) -> io::Result<()> {
    let mut first = 0;
    while first < bufs.len() {
        // On the stack: this runs once per relayed read.
        let mut slices = [io::IoSlice::new(&[]); MAX_IOV];
        let count = (bufs.len() - first).min(MAX_IOV);
        for (slice, buf) in slices.iter_mut().zip(&bufs[first..]) {
            *slice = io::IoSlice::new(buf);
        }
        let mut n = match io.try_write_vectored(&slices[..count]) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                waits();
                io.writable().await?;
                continue;
            }
            Err(e) => return Err(e),
        };
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        while n > 0 {
            let len = bufs[first].len();
            if n >= len {
                n -= len;
                first += 1;
            } else {
                bufs[first].advance(n);
                n = 0;
            }
        }
        // Empty pieces (none are made, but a zero-length head would be) are passed over.
        while first < bufs.len() && bufs[first].is_empty() {
            first += 1;
        }
    }
    bufs.clear();
    Ok(())
}

/// A connection handed to hyper: the bytes the verbatim path already read come first.
pub(super) struct Prefixed {
    ahead: Bytes,
    io: TcpStream,
}

impl Prefixed {
    /// The bytes not yet read, and the socket.
    pub(super) fn into_parts(self) -> (Bytes, TcpStream) {
        (self.ahead, self.io)
    }
}

impl AsyncRead for Prefixed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.ahead.is_empty() {
            let n = self.ahead.len().min(buf.remaining());
            buf.put_slice(&self.ahead[..n]);
            self.ahead.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Prefixed {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
#[path = "verbatim_tests.rs"]
mod tests;
