//! The body that the relay streams through on hyper's door: each frame passes as it
//! arrives, unchanged (the same `Bytes`, never re-buffered), while its length is counted and,
//! on an observed stream, a clone is handed to the tap. A body that sends nothing for its
//! idle bound fails ([`BodyError::Idle`]), as on the verbatim path (`--body-timeout`,
//! `--client-body-timeout`): hyper then cuts the response to the client, or the request to
//! the upstream.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

use super::tap::{Tap, TapMsg};
use super::timers::{Deadline, Timers};

/// Why a relayed body failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError<E> {
    /// The body's own stream failed.
    #[error("the body's stream failed")]
    Inner(#[source] E),
    /// The peer sent nothing of the body for its idle bound.
    #[error("the body sent nothing for its idle bound")]
    Idle,
}

/// A body's idle bound: how long one wait for the peer may last, counted from the first
/// poll that found nothing (a body its reader does not poll, held up by the other side,
/// waits for nobody); one timer for the whole body ([`Deadline`]).
struct IdleBound {
    wait: Duration,
    /// Since when the body has been waiting for its peer.
    since: Option<Instant>,
    deadline: Deadline,
}

/// Which way a body flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Client to upstream.
    Request,
    /// Upstream to client.
    Response,
}

impl Flow {
    /// The tap's copy of WebSocket bytes flowing this way.
    pub(super) fn websocket_copy(self, bytes: Bytes) -> TapMsg {
        match self {
            Flow::Request => TapMsg::ClientBytes(bytes),
            Flow::Response => TapMsg::ServerBytes(bytes),
        }
    }
}

pub(crate) struct RelayBody<B> {
    inner: B,
    flow: Flow,
    tap: Option<Arc<Tap>>,
    bytes: Arc<AtomicU64>,
    ended: bool,
    failed: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// Whatever must live as long as the body streams (the exchange's log line).
    keep: Option<Arc<dyn Send + Sync>>,
    idle: Option<IdleBound>,
}

impl<B: Body<Data = Bytes> + Unpin> RelayBody<B> {
    /// Wraps `inner`. A request body that is already complete (no body at all) tells the tap
    /// at once, since the client may never poll it.
    pub(crate) fn new(inner: B, flow: Flow, tap: Option<Arc<Tap>>, bytes: Arc<AtomicU64>) -> Self {
        let mut b = RelayBody {
            inner,
            flow,
            tap,
            bytes,
            ended: false,
            failed: None,
            keep: None,
            idle: None,
        };
        if b.inner.is_end_stream() {
            b.end();
        }
        b
    }

    /// Sets a flag raised if the inner body fails (for the exchange log).
    pub(crate) fn on_failure(mut self, flag: Arc<std::sync::atomic::AtomicBool>) -> Self {
        self.failed = Some(flag);
        self
    }

    /// Fails the body once it has sent nothing for `wait` (its timer on `timers`).
    pub(crate) fn idle_timeout(mut self, timers: &Timers, wait: Duration) -> Self {
        self.idle = Some(IdleBound {
            wait,
            since: None,
            deadline: Deadline::new(timers),
        });
        self
    }

    /// Keeps `value` alive until the body is dropped.
    pub(crate) fn keep(mut self, value: Arc<dyn Send + Sync>) -> Self {
        self.keep = Some(value);
        self
    }

    fn end(&mut self) {
        if self.ended {
            return;
        }
        self.ended = true;
        if self.flow == Flow::Request {
            if let Some(tap) = &self.tap {
                tap.send(TapMsg::RequestEnd);
            }
        }
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for RelayBody<B> {
    type Data = Bytes;
    type Error = BodyError<B::Error>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Pending => {
                let Some(idle) = &mut this.idle else {
                    return Poll::Pending;
                };
                let since = *idle.since.get_or_insert_with(Instant::now);
                loop {
                    let at = since + idle.wait;
                    match idle.deadline.poll(cx, Some(at)) {
                        Poll::Ready(now) if now >= at => break,
                        Poll::Ready(_) => {}
                        Poll::Pending => return Poll::Pending,
                    }
                }
                if let Some(f) = &this.failed {
                    f.store(true, Ordering::Relaxed);
                }
                this.ended = true;
                Poll::Ready(Some(Err(BodyError::Idle)))
            }
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(idle) = &mut this.idle {
                    idle.since = None;
                }
                if let Some(data) = frame.data_ref() {
                    this.bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
                    if let Some(tap) = &this.tap {
                        if !data.is_empty() {
                            tap.send(match this.flow {
                                Flow::Request => TapMsg::RequestChunk(data.clone()),
                                Flow::Response => TapMsg::ResponseChunk(data.clone()),
                            });
                        }
                    }
                }
                // A body of known length may never be polled again once complete.
                if this.inner.is_end_stream() {
                    this.end();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                if let Some(f) = &this.failed {
                    f.store(true, Ordering::Relaxed);
                }
                // No end: the observer learns the stream broke when the tap closes.
                this.ended = true;
                Poll::Ready(Some(Err(BodyError::Inner(e))))
            }
            Poll::Ready(None) => {
                this.end();
                Poll::Ready(None)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
