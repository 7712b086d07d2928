//! WebSocket forwarding: the upgrade request goes upstream, the upstream's `101` comes back as
//! received, then raw bytes are spliced both ways on the connection's core, one read in flight
//! per direction. Frames are never parsed or re-framed, so negotiated extensions
//! (permessage-deflate) stay end to end.

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode, Version};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper::upgrade::Upgraded;
use hyper_rustls::MaybeHttpsStream;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::body::{Flow, RelayBody};
use super::dispatch::rest_path;
use super::exchange::{ExchangeLog, ResBody};
use super::failure::{self, Failure, Phase};
use super::headers::strip_hop_by_hop;
use super::http::respond;
use super::mounts::Mount;
use super::observer;
use super::state::State;
use super::tap::{Stamp, Tap};
use super::timers::{Timers, SEND_TIMEOUT};
use super::verbatim::Prefixed;

/// How long one direction of a tunnel may still run after the other ended cleanly (the
/// client's close frame sent, say, while the upstream's answer is under way).
const HALF_CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Bytes offered to each read.
const READ_CHUNK: usize = 16 * 1024;

pub async fn forward_upgrade(
    state: Arc<State>,
    mount: Mount,
    rest: String,
    mut req: Request<Incoming>,
) -> Response<ResBody> {
    let log = ExchangeLog::new(&mount.name, req.method(), rest_path(&rest));
    let plan = match &state.live {
        Some(_) => observer::plan(req.method().as_str(), rest_path(&rest), true, req.headers()),
        None => None,
    };
    let Ok(uri) = mount.upstream_uri(&rest) else {
        return failure::bad_path(&log, &mount.name);
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
        Err(f) => return failure::upstream_failed(&log, &mount.name, f, Phase::Handshake),
    };
    if res.status() != StatusCode::SWITCHING_PROTOCOLS {
        // Refused upgrade: an ordinary response, passed back as one.
        return respond(&state, res, None, None, log);
    }
    log.status.store(101, Ordering::Relaxed);
    let tap = plan.and_then(|plan| {
        let extensions = res
            .headers()
            .get(header::SEC_WEBSOCKET_EXTENSIONS)
            .and_then(|v| v.to_str().ok());
        let joins = state.live.as_ref().and_then(|l| l.host_parents.as_ref());
        state.start_tap(|stream, out| plan.open_ws(stream, extensions, &state.budget, joins, out))
    });
    let upstream_upgrade = hyper::upgrade::on(&mut res);
    let timers = state.timers.clone();
    // Tracked, so that a graceful stop waits for the tunnel (up to --drain) and then cuts it.
    state.tunnels.spawn(async move {
        let (client, upstream) = match tokio::try_join!(client_upgrade, upstream_upgrade) {
            Ok(pair) => pair,
            Err(_) => {
                log.fail(Failure::Reset);
                return;
            }
        };
        splice(open(client), open(upstream), tap, &log, &timers).await;
    });
    // The 101 goes back exactly as the upstream sent it (its `Connection`/`Upgrade` included).
    let (mut parts, _) = res.into_parts();
    parts.version = Version::HTTP_11;
    Response::from_parts(parts, Either::Right(Full::default()))
}

enum End {
    /// The reader saw a clean end of stream.
    Eof,
    /// Reading or writing failed (a reset, an abrupt close).
    Broken,
}

/// Copies one direction until it ends. Each read is written out in full and flushed before the
/// next; a clone of the same bytes goes to the tap.
async fn pump<R, W>(
    mut from: R,
    mut to: W,
    tap: Option<&Tap>,
    flow: Flow,
    log: &ExchangeLog,
    timers: &Timers,
) -> (W, End)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    loop {
        if buf.capacity() < READ_CHUNK / 4 {
            buf.reserve(READ_CHUNK);
        }
        match from.read_buf(&mut buf).await {
            Ok(0) => return (to, End::Eof),
            Ok(_) => {}
            Err(_) => return (to, End::Broken),
        }
        // A peer that takes nothing for SEND_TIMEOUT ends the tunnel (its copy was handed
        // over when the write began to wait: it holds no watermark meanwhile).
        let passed = timers.timeout_if_waits(
            SEND_TIMEOUT,
            pass(buf.split().freeze(), &mut to, tap, flow, log.bytes(flow)),
        );
        if passed.await != Ok(true) {
            return (to, End::Broken);
        }
    }
}

/// One end of a tunnel, split for the two directions.
type Reader = Box<dyn AsyncRead + Unpin + Send>;
type Writer = Box<dyn AsyncWrite + Unpin + Send>;

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

/// Passes one read on in full (flushed), counted, with its copy to the tap; `false` if the
/// other end cannot take it. The copy is stamped before the write and, as on the verbatim
/// path, handed over after it, unless the write has to wait: then it is handed over before
/// the wait. Both directions feed one tap from one task, so a copy held across a wait could
/// be queued after a copy of the other direction stamped later ([`Tap::stamp`]); handed over
/// before this task yields, copies are queued in the order they were stamped.
pub(super) async fn pass<W: AsyncWrite + Unpin>(
    chunk: Bytes,
    to: &mut W,
    tap: Option<&Tap>,
    flow: Flow,
    count: &AtomicU64,
) -> bool {
    count.fetch_add(chunk.len() as u64, Ordering::Relaxed);
    let mut stamp = tap.and_then(Tap::stamp);
    let hand_over = |stamp: &mut Option<_>| {
        if let Some(stamp) = stamp.take() {
            Stamp::send(stamp, flow.websocket_copy(chunk.clone()));
        }
    };
    let mut written = 0;
    let passed = poll_fn(|cx| {
        while written < chunk.len() {
            match Pin::new(&mut *to).poll_write(cx, &chunk[written..]) {
                Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Poll::Ready(false),
                Poll::Ready(Ok(n)) => written += n,
                Poll::Pending => {
                    hand_over(&mut stamp);
                    return Poll::Pending;
                }
            }
        }
        match Pin::new(&mut *to).poll_flush(cx) {
            Poll::Ready(r) => Poll::Ready(r.is_ok()),
            Poll::Pending => {
                hand_over(&mut stamp);
                Poll::Pending
            }
        }
    })
    .await;
    hand_over(&mut stamp);
    passed
}

/// The splice: early bytes first, then both directions until one ends; a clean end is
/// passed on and the other direction gets [`HALF_CLOSE_GRACE`] to finish.
async fn splice(
    (client_early, cr, mut cw): (Bytes, Reader, Writer),
    (upstream_early, ur, mut uw): (Bytes, Reader, Writer),
    tap: Option<Tap>,
    log: &ExchangeLog,
    timers: &Timers,
) {
    let tap_ref = tap.as_ref();
    // What hyper had read ahead from either end (a frame sent right behind the handshake)
    // goes first.
    let mut early_passed = true;
    for (early, to, flow) in [
        (client_early, &mut uw, Flow::Request),
        (upstream_early, &mut cw, Flow::Response),
    ] {
        if early_passed && !early.is_empty() {
            early_passed = timers
                .timeout_if_waits(
                    SEND_TIMEOUT,
                    pass(early, to, tap_ref, flow, log.bytes(flow)),
                )
                .await
                == Ok(true);
        }
    }
    if !early_passed {
        log.fail(Failure::Reset);
        return;
    }
    let up = pump(cr, uw, tap_ref, Flow::Request, log, timers);
    let down = pump(ur, cw, tap_ref, Flow::Response, log, timers);
    tokio::pin!(up, down);
    tokio::select! {
        (mut uw, end) = &mut up => {
            if let End::Eof = end {
                // The client finished sending: pass the end on, let the upstream finish.
                let _ = uw.shutdown().await;
                let _ = timers.timeout(HALF_CLOSE_GRACE, &mut down).await;
            } else {
                log.fail(Failure::Reset);
            }
        }
        (mut cw, end) = &mut down => {
            if let End::Eof = end {
                let _ = cw.shutdown().await;
                let _ = timers.timeout(HALF_CLOSE_GRACE, &mut up).await;
            } else {
                log.fail(Failure::Reset);
            }
        }
    }
    // Dropping both halves of both sides closes the connections.
}
