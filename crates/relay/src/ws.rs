//! WebSocket forwarding: the upgrade request goes upstream, the upstream's `101` comes back as
//! received, then raw bytes are spliced both ways on the connection's core, one read in flight
//! per direction. Frames are never parsed or re-framed, so negotiated extensions
//! (permessage-deflate) stay end to end.

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use h1::{Direction, ReadEnd, Transmit, Tunnel};
use h1::{TunnelEnd as End, TunnelEvent as Event};
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode, Version};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper::upgrade::Upgraded;
use hyper_rustls::MaybeHttpsStream;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_util::io::poll_read_buf;

use super::answers;
use super::body::{Flow, RelayBody};
use super::exchange::{ExchangeLog, ResBody};
use super::failure::{Failure, Phase};
use super::headers::strip_hop_by_hop;
use super::http::respond;
use super::mounts::Mount;
use super::mounts::{rest_path, route_path};
use super::observer;
use super::prefixed::Prefixed;
use super::state::State;
use super::tap::{Stamp, Tap};
use super::timers::{Deadline, Timers, SEND_TIMEOUT};

/// How long one direction of a tunnel may still run after the other ended cleanly (the
/// client's close frame sent, say, while the upstream's answer is under way).
const HALF_CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Bytes offered to each read.
const READ_CHUNK: usize = 16 * 1024;

pub(crate) async fn forward_upgrade(
    state: Arc<State>,
    mount: Mount,
    rest: String,
    mut req: Request<Incoming>,
) -> Response<ResBody> {
    let log = ExchangeLog::new(&state.failed, &mount.name, req.method(), rest_path(&rest));
    let plan = match &state.observations {
        Some(_) => observer::plan(
            req.method().as_str(),
            &route_path(&rest),
            true,
            req.headers(),
        ),
        None => None,
    };
    let uri = match mount.upstream_uri(&rest) {
        Ok(uri) => uri,
        Err(why) => return answers::bad_path(&log, &mount.name, why),
    };
    let Some(claim) = state.tunnels.claim(state.clients.max_tunnels) else {
        return answers::tunnels_at_capacity(&log, &mount.name);
    };
    let client_upgrade = hyper::upgrade::on(&mut req);
    let (mut parts, body) = req.into_parts();
    // The handshake keeps `Connection: upgrade` and `Upgrade`; every other hop-by-hop goes.
    let upgrade = parts.headers.get(header::UPGRADE).cloned();
    strip_hop_by_hop(&mut parts.headers);
    parts.headers.remove(header::HOST);
    parts
        .headers
        .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    if let Some(u) = upgrade {
        parts.headers.insert(header::UPGRADE, u);
    }
    parts.uri = uri;
    parts.version = Version::HTTP_11;
    let upstream_req = Request::from_parts(
        parts,
        RelayBody::new(body, Flow::Request, None, log.up.clone()),
    );

    let res = match state
        .timers
        .timeout(state.response_timeout, state.client.request(upstream_req))
        .await
    {
        Err(_) => Err(Failure::Timeout),
        Ok(Err(e)) => Err(Failure::classify(&e)),
        Ok(Ok(res)) => Ok(res),
    };
    let mut res = match res {
        Ok(r) => r,
        Err(f) => return answers::upstream_failed(&log, &mount.name, f, Phase::Handshake),
    };
    if res.status() != StatusCode::SWITCHING_PROTOCOLS {
        // Refused upgrade: an ordinary response, passed back as one.
        return respond(&state, res, None, None, log);
    }
    if !switches_to_websocket(res.headers()) {
        // A 101 to another protocol (or none named): the tunnel would carry what nobody
        // asked for, unparsed, both ways.
        return answers::upstream_failed(&log, &mount.name, Failure::Other, Phase::Handshake);
    }
    log.status.store(101, Ordering::Relaxed);
    let tap = plan.and_then(|plan| {
        let extensions = res
            .headers()
            .get(header::SEC_WEBSOCKET_EXTENSIONS)
            .and_then(|v| v.to_str().ok());
        let joins = state
            .observations
            .as_ref()
            .and_then(|l| l.host_parents.as_ref());
        state.start_tap(|stream, out| plan.open_ws(stream, extensions, &state.budget, joins, out))
    });
    let upstream_upgrade = hyper::upgrade::on(&mut res);
    let timers = state.timers.clone();
    let idle = state.tunnel_idle;
    // Tracked, so that a graceful stop waits for the tunnel (up to --drain) and then cuts it.
    state.tunnels.spawn(async move {
        let _claim = claim;
        let (client, upstream) = match tokio::try_join!(client_upgrade, upstream_upgrade) {
            Ok(pair) => pair,
            Err(_) => {
                log.fail(Failure::Reset);
                return;
            }
        };
        splice(open(client), open(upstream), tap, &log, &timers, idle).await;
    });
    // The 101 goes back exactly as the upstream sent it (its `Connection`/`Upgrade` included).
    let (mut parts, _) = res.into_parts();
    parts.version = Version::HTTP_11;
    Response::from_parts(parts, Either::Right(Full::default()))
}

/// Whether a `101`'s head switches to WebSocket: `Upgrade` is the one token `websocket` and
/// `Connection` names `upgrade` (RFC 6455 §4.1, what a client checks).
fn switches_to_websocket(headers: &http::HeaderMap) -> bool {
    let tokens_of = |name: header::HeaderName| {
        headers
            .get_all(name)
            .iter()
            .flat_map(|v| h1::tokens(v.as_bytes()))
            .filter(|t| !t.is_empty())
            .map(<[u8]>::to_ascii_lowercase)
            .collect::<Vec<_>>()
    };
    tokens_of(header::UPGRADE) == [b"websocket".to_vec()]
        && tokens_of(header::CONNECTION)
            .iter()
            .any(|t| t == b"upgrade")
}

/// One end of a tunnel, split for the two directions.
pub(super) type Reader = Box<dyn AsyncRead + Unpin + Send>;
pub(super) type Writer = Box<dyn AsyncWrite + Unpin + Send>;

/// Splits one end of a tunnel for the splice, with the bytes hyper had already read from it
/// (a frame sent right behind the handshake): a plain socket (the client's, an `http`
/// upstream's) into owned halves, with no lock and no dynamic I/O layers between a read and
/// the socket; a TLS upstream, or an I/O type nothing here knows (none today), with a lock.
fn open(end: Upgraded) -> (Bytes, Reader, Writer) {
    let end = match end.downcast::<TokioIo<Prefixed>>() {
        Ok(parts) => {
            let (ahead, socket) = parts.io.into_inner().into_parts();
            let mut early = BytesMut::from(&ahead[..]);
            early.extend_from_slice(&parts.read_buf);
            let (r, w) = socket.into_split();
            return (early.freeze(), Box::new(r), Box::new(w));
        }
        Err(end) => end,
    };
    match end.downcast::<MaybeHttpsStream<TokioIo<TcpStream>>>() {
        Ok(parts) => match parts.io {
            MaybeHttpsStream::Http(socket) => {
                let (r, w) = socket.into_inner().into_split();
                (parts.read_buf, Box::new(r), Box::new(w))
            }
            tls => {
                let (r, w) = tokio::io::split(TokioIo::new(tls));
                (parts.read_buf, Box::new(r), Box::new(w))
            }
        },
        Err(end) => {
            let (r, w) = tokio::io::split(TokioIo::new(end));
            (Bytes::new(), Box::new(r), Box::new(w))
        }
    }
}

/// Drives one tunnel's [`Tunnel`] machine: the reads, writes and timer it asks for, and the
/// copies it says to stamp and hand over. Nothing here decides what comes next.
struct Splice<'t> {
    tunnel: Tunnel,
    /// Indexed by [`Direction::index`]: `Up` reads the client and writes the upstream.
    readers: [Reader; 2],
    writers: [Writer; 2],
    bufs: [BytesMut; 2],
    tap: Option<&'t Tap>,
    stamps: [Option<Stamp<'t>>; 2],
    log: &'t ExchangeLog,
    /// The timer for the machine's next deadline.
    deadline: Deadline,
}

fn flow(dir: Direction) -> Flow {
    match dir {
        Direction::Up => Flow::Request,
        Direction::Down => Flow::Response,
    }
}

impl<'t> Splice<'t> {
    /// Carries out the machine's events; its end, once it ends.
    fn run_events(&mut self) -> Option<(End, bool)> {
        while let Some(event) = self.tunnel.poll_event() {
            match event {
                Event::Stamp(dir) => self.stamps[dir.index()] = self.tap.and_then(Tap::stamp),
                Event::Copy(dir, bytes) => {
                    if let Some(stamp) = self.stamps[dir.index()].take() {
                        stamp.send(flow(dir).websocket_copy(bytes));
                    }
                }
                Event::Ended { why, failed } => return Some((why, failed)),
            }
        }
        None
    }

    /// Writes, flushes and shutdowns the machine asks for, each until it is done or waits.
    fn run_transmits(&mut self, cx: &mut Context<'_>) {
        for dir in Direction::BOTH {
            let mut to = Pin::new(&mut self.writers[dir.index()]);
            while let Some(transmit) = self.tunnel.poll_transmit(dir) {
                let done = match transmit {
                    Transmit::Write(bytes) => to.as_mut().poll_write(cx, bytes).map(|r| match r {
                        Ok(n) => self.tunnel.handle_written(dir, n),
                        Err(_) => self.tunnel.handle_write_failed(dir),
                    }),
                    Transmit::Flush => to.as_mut().poll_flush(cx).map(|r| match r {
                        Ok(()) => self.tunnel.handle_flushed(dir),
                        Err(_) => self.tunnel.handle_write_failed(dir),
                    }),
                    // Passing an end on is as far as it goes: an error there is no news.
                    Transmit::Shutdown => to
                        .as_mut()
                        .poll_shutdown(cx)
                        .map(|_| self.tunnel.handle_shut(dir)),
                };
                if done.is_pending() {
                    self.tunnel.handle_write_waits(dir, Instant::now());
                    break;
                }
            }
        }
    }

    /// Reads the machine allows; whether any completed.
    fn run_reads(&mut self, cx: &mut Context<'_>) -> bool {
        let mut moved = false;
        for dir in Direction::BOTH {
            if !self.tunnel.wants_read(dir) {
                continue;
            }
            let buf = &mut self.bufs[dir.index()];
            if buf.capacity() < READ_CHUNK / 4 {
                buf.reserve(READ_CHUNK);
            }
            let from = Pin::new(&mut self.readers[dir.index()]);
            match poll_read_buf(from, cx, buf) {
                Poll::Pending => continue,
                Poll::Ready(Ok(0)) => {
                    self.tunnel
                        .handle_read_end(dir, ReadEnd::Clean, Instant::now())
                }
                Poll::Ready(Ok(n)) => {
                    self.log
                        .bytes(flow(dir))
                        .fetch_add(n as u64, Ordering::Relaxed);
                    self.tunnel.handle_read(dir, buf.split().freeze());
                }
                Poll::Ready(Err(_)) => {
                    self.tunnel
                        .handle_read_end(dir, ReadEnd::Broken, Instant::now())
                }
            }
            moved = true;
        }
        moved
    }

    /// The timer for the machine's next deadline, set only when there is one (a write that
    /// waits, a half-close); whether it fired.
    fn run_timer(&mut self, cx: &mut Context<'_>) -> bool {
        match self.deadline.poll(cx, self.tunnel.poll_timeout()) {
            Poll::Ready(now) => {
                self.tunnel.handle_timeout(now);
                true
            }
            Poll::Pending => false,
        }
    }

    fn poll_end(&mut self, cx: &mut Context<'_>) -> Poll<(End, bool)> {
        loop {
            // Stamps before the writes they date, copies before this task reads on or waits.
            if let Some(end) = self.run_events() {
                return Poll::Ready(end);
            }
            self.run_transmits(cx);
            if let Some(end) = self.run_events() {
                return Poll::Ready(end);
            }
            // A write that finished lets its direction be read; one that waits holds it back.
            if !self.run_reads(cx) && !self.run_timer(cx) {
                return Poll::Pending;
            }
        }
    }
}

/// The splice: what hyper had read ahead from either end (a frame sent right behind the
/// handshake) first, then both directions until the tunnel ends (the [`Tunnel`] machine).
pub(super) async fn splice(
    (client_early, cr, cw): (Bytes, Reader, Writer),
    (upstream_early, ur, uw): (Bytes, Reader, Writer),
    tap: Option<Tap>,
    log: &ExchangeLog,
    timers: &Timers,
    idle: Duration,
) {
    let mut splice = Splice {
        tunnel: Tunnel::new(tap.is_some(), SEND_TIMEOUT, HALF_CLOSE_GRACE)
            .with_idle_timeout(idle, Instant::now()),
        readers: [cr, ur],
        writers: [uw, cw],
        bufs: [BytesMut::new(), BytesMut::new()],
        tap: tap.as_ref(),
        stamps: [None, None],
        log,
        deadline: Deadline::new(timers),
    };
    for (dir, early) in [
        (Direction::Up, client_early),
        (Direction::Down, upstream_early),
    ] {
        if !early.is_empty() {
            log.bytes(flow(dir))
                .fetch_add(early.len() as u64, Ordering::Relaxed);
            splice.tunnel.handle_read(dir, early);
        }
    }
    let (why, failed) = poll_fn(|cx| splice.poll_end(cx)).await;
    if why == End::Idle {
        tracing::info!(
            mount = %log.mount,
            "a WebSocket tunnel that passed nothing either way for --tunnel-idle-timeout was closed"
        );
    }
    if failed {
        log.fail(Failure::Reset);
    }
    // Dropping both halves of both sides closes the connections.
}
