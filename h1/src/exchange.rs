//! One HTTP/1.1 exchange as the relay forwards it, sans I/O: bytes and time in, bytes to
//! write and decisions out; no socket, no clock.
//!
//! An [`Exchange`] starts from a request head [`crate::parse_request`] took and ends with an
//! [`End`]: whether both connections can carry another exchange, or why not. In between it
//! decides everything the relay's driver would otherwise decide inline:
//!
//! - which client bytes are this request's body (its one parsed length, never more), passed
//!   to the upstream one piece at a time, with a copy for the observer;
//! - the response head: interim responses dropped, a bad head refused, the head the client
//!   gets ([`crate::client_head`]) and whether the client connection closes after it;
//! - the response body, followed by its [`Framing`]: the payload of each upstream read
//!   leaves in one write, rechunked when the upstream's framing is chunked or by close, then
//!   the end of the body and its trailers;
//! - keep-alive: the client connection is kept only if the client did not ask to close and
//!   its whole body was read; the upstream connection only if the response said so, its
//!   body ended with nothing after it and the whole request body went up;
//! - the deadlines: the response head within `response` of the start, a request body that
//!   does not stall for `client_body_idle` (counted only while the upstream is not the one
//!   holding it up), a response body that does not stall for `upstream_body_idle`, a client
//!   write that does not wait longer than `send`.
//!
//! The names follow the correlator's (and quinn-proto's): `handle_*` takes what happened,
//! `poll_*` gives what to do, [`Exchange::poll_timeout`] the next deadline. The driver reads
//! and writes, sets one timer at [`Exchange::poll_timeout`] and calls
//! [`Exchange::handle_timeout`] when it fires (a deadline that moved on meanwhile is not
//! expired: a timer set once serves a whole body).
//!
//! Bytes arrive in the driver's buffers (`&mut BytesMut`, which the machine splits; what it
//! does not take stays there: the client's next request, bytes after a response). Nothing
//! is copied but the observer's copy of a read with several payload pieces and the
//! chunk-size lines.

use std::collections::VecDeque;
use std::ops::Range;
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::framing::Framing;
use crate::head::{client_head, parse_response, RequestHead, ResponseParsed};

/// Bytes a client may send ahead (its next request) while its response streams.
pub(crate) const MAX_AHEAD: usize = 64 * 1024;

/// Payload pieces of one read up to this many leave as slices of the read (one vectored
/// write); more are copied into one buffer first (tiny chunks, and the system call's vector
/// limit).
pub(crate) const MAX_SLICES: usize = 8;

/// Pieces one client write takes at most: the head, a chunk-size line, the payload slices
/// of one read, the end of a chunk and of the body.
pub const MAX_PIECES: usize = 2 * MAX_SLICES + 8;

/// The bounds of one exchange.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// From the start of the exchange to the response head.
    pub response: Duration,
    /// How long the client may send nothing of its request body.
    pub client_body_idle: Duration,
    /// How long the upstream may send nothing of its response body.
    pub upstream_body_idle: Duration,
    /// How long one write to the client may wait.
    pub send: Duration,
}

/// What the driver tells the observer and the log, in order.
#[derive(Debug, PartialEq, Eq)]
pub enum Event {
    /// A piece of the request body, as it goes up (the same bytes as the piece to write).
    RequestBody(Bytes),
    /// The request body has ended (at once for a request without one).
    RequestEnd,
    /// The final response head came.
    ResponseHead {
        status: u16,
        content_type: Option<Bytes>,
        content_encoding: Option<Bytes>,
    },
    /// The exchange is over.
    End(End),
}

/// How an exchange ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The response body ended.
    Done {
        /// The client connection can carry the next request.
        keep_client: bool,
        /// The upstream connection can carry the next exchange.
        reuse_upstream: bool,
    },
    /// No response head came: the relay answers with an error response of its own, then
    /// keeps the client connection only if `keep_client`.
    Unanswered { why: Unanswered, keep_client: bool },
    /// The exchange was cut: the client connection closes (a response under way has no
    /// other way to say it did not end).
    Cut(Cut),
}

/// Why no response head came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unanswered {
    /// The upstream closed the connection first.
    UpstreamClosed,
    /// The upstream connection failed (the driver knows how).
    UpstreamFailed,
    /// The upstream sent a head no client could read.
    BadHead,
    /// Not within [`Timeouts::response`].
    Timeout,
}

/// Why an exchange was cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// The client closed or broke its connection.
    ClientGone,
    /// The client sent nothing of its request body for [`Timeouts::client_body_idle`].
    ClientIdle,
    /// A write to the client waited longer than [`Timeouts::send`].
    ClientStopped,
    /// The upstream closed or broke the body, or broke its framing.
    UpstreamBroken,
    /// The upstream sent nothing of the body for [`Timeouts::upstream_body_idle`].
    UpstreamIdle,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The request goes up; the response head is awaited.
    Request,
    /// The response body comes down.
    Body,
    Ended,
}

/// One exchange: see the module's documentation.
#[derive(Debug)]
pub struct Exchange {
    phase: Phase,
    timeouts: Timeouts,
    /// Request body bytes not yet taken from the client.
    left: u64,
    /// The client asked to close after this exchange.
    client_close: bool,
    /// A request piece for the upstream, not yet handed out.
    to_upstream: Option<Bytes>,
    /// A request piece (first the head, which the driver writes itself) handed out and not
    /// yet written: the upstream holds the body up then, not the client.
    upstream_owes: bool,
    /// The response head for the client, until the first write takes it.
    head_out: Option<Bytes>,
    framing: Framing,
    /// The client gets the body in chunks of the relay's own.
    rechunk: bool,
    /// The client connection closes after this response.
    close: bool,
    /// The response allows the upstream connection's reuse.
    reusable: bool,
    /// The last read of the body and its payload ranges, until [`Exchange::poll_transmit`].
    read: Bytes,
    payload: Vec<Range<usize>>,
    /// The payload's length, summed once as the read is scanned.
    payload_len: usize,
    /// Whether the body ended (within `read`, or by the upstream's close).
    body_done: bool,
    /// Nothing came after the body on the upstream connection.
    clean: bool,
    /// The chunk-size lines, cut from one buffer: no allocation per read.
    lines: BytesMut,
    started: Instant,
    /// The last progress of the body under way (request: the client's; response: either's).
    last_progress: Instant,
    /// A write to the client is under way (from [`Exchange::poll_transmit`] to
    /// [`Exchange::handle_client_written`]): the upstream is not read meanwhile.
    writing: bool,
    /// Since when a write to the client has been waiting.
    blocked_since: Option<Instant>,
    events: VecDeque<Event>,
    /// [`Event::End`] has been queued.
    ended: bool,
}

impl Exchange {
    /// An exchange for `request` (parsed by [`crate::parse_request`]), started at `now`. The
    /// driver writes the request head upstream ([`crate::upstream_head`]) and says when it is
    /// written with [`Exchange::handle_upstream_written`]; until then the body waits.
    pub fn new(request: &RequestHead, timeouts: Timeouts, now: Instant) -> Exchange {
        let mut events = VecDeque::new();
        if request.body_len == 0 {
            events.push_back(Event::RequestEnd);
        }
        Exchange {
            phase: Phase::Request,
            timeouts,
            left: request.body_len,
            client_close: request.close,
            to_upstream: None,
            upstream_owes: true,
            head_out: None,
            framing: Framing::Empty,
            rechunk: false,
            close: request.close,
            reusable: false,
            read: Bytes::new(),
            payload: Vec::new(),
            payload_len: 0,
            body_done: false,
            clean: true,
            lines: BytesMut::new(),
            started: now,
            last_progress: now,
            writing: false,
            blocked_since: None,
            events,
            ended: false,
        }
    }

    /// Whether the request body wants bytes from the client now: it has not all come, the
    /// last piece has been written up, and no response head has cut it short.
    pub fn wants_request_body(&self) -> bool {
        self.phase == Phase::Request
            && self.left > 0
            && self.to_upstream.is_none()
            && !self.upstream_owes
    }

    /// Whether the client connection may be read now, with `buffered` bytes of it unused:
    /// for the request body, or, while the response streams, to notice a client that leaves
    /// (bounded: a client may send [`MAX_AHEAD`] bytes ahead, then waits).
    pub fn wants_client_read(&self, buffered: usize) -> bool {
        match self.phase {
            Phase::Request => self.wants_request_body() && buffered == 0,
            Phase::Body => buffered < MAX_AHEAD,
            Phase::Ended => false,
        }
    }

    /// Whether the upstream connection is to be read: for the response head and body.
    pub fn wants_upstream_read(&self) -> bool {
        self.phase != Phase::Ended && !self.writing && !self.has_transmit()
    }

    /// Bytes the client sent: the request body's share of them is taken off `buf` (the
    /// rest, a next request, stays).
    pub fn handle_client_bytes(&mut self, buf: &mut BytesMut, now: Instant) {
        if !self.wants_request_body() || buf.is_empty() {
            return;
        }
        let take = self.left.min(buf.len() as u64) as usize;
        let piece = buf.split_to(take).freeze();
        self.left -= take as u64;
        self.last_progress = now;
        self.events.push_back(Event::RequestBody(piece.clone()));
        if self.left == 0 {
            self.events.push_back(Event::RequestEnd);
        }
        self.to_upstream = Some(piece);
    }

    /// The next request piece to write to the upstream; the driver says when it is written
    /// (and flushed) with [`Exchange::handle_upstream_written`].
    pub fn poll_transmit_upstream(&mut self) -> Option<Bytes> {
        let piece = self.to_upstream.take()?;
        self.upstream_owes = true;
        Some(piece)
    }

    /// The last request piece is written and flushed.
    pub fn handle_upstream_written(&mut self, now: Instant) {
        self.upstream_owes = false;
        self.last_progress = now;
    }

    /// The client closed its connection, or it broke.
    pub fn handle_client_closed(&mut self) {
        self.end(End::Cut(Cut::ClientGone));
    }

    /// Bytes the upstream sent: the response head, then the body. Takes what belongs to this
    /// exchange off `buf`; what follows the body stays (and keeps the upstream connection
    /// from reuse).
    pub fn handle_upstream_bytes(&mut self, buf: &mut BytesMut, now: Instant) {
        if self.phase == Phase::Request {
            self.read_head(buf);
        }
        if self.phase != Phase::Body || buf.is_empty() {
            return;
        }
        if self.body_done {
            // Bytes after a body that has ended: the upstream connection is not reused.
            self.clean = false;
            return;
        }
        if !self.payload.is_empty() {
            // The last read has not left yet: one read in flight.
            return;
        }
        self.last_progress = now;
        self.payload.clear();
        match self.framing.scan(buf, &mut self.payload) {
            Ok(scanned) => {
                self.payload_len = self.payload.iter().map(|r| r.len()).sum();
                self.body_done = scanned.done;
                self.read = buf.split_to(scanned.used).freeze();
                self.clean = buf.is_empty();
            }
            Err(_) => self.end(End::Cut(Cut::UpstreamBroken)),
        }
    }

    fn read_head(&mut self, buf: &mut BytesMut) {
        loop {
            if buf.is_empty() {
                return;
            }
            match parse_response(buf) {
                ResponseParsed::Partial => return,
                ResponseParsed::Interim(len) => buf.advance(len),
                ResponseParsed::Bad => return self.unanswered(Unanswered::BadHead),
                ResponseParsed::Complete(len, res) => {
                    buf.advance(len);
                    let find = |want: &str| {
                        res.headers
                            .iter()
                            .find(|(n, _)| n.eq_ignore_ascii_case(want.as_bytes()))
                            .map(|(_, v)| v.clone())
                    };
                    self.events.push_back(Event::ResponseHead {
                        status: res.status,
                        content_type: find("content-type"),
                        content_encoding: find("content-encoding"),
                    });
                    // An upstream that answered before the whole request body came: the
                    // rest of it is not sent, and neither connection can be reused (nobody
                    // knows where the next request would start).
                    self.close = self.client_close || self.left > 0;
                    self.reusable = res.reusable && self.left == 0;
                    self.rechunk = matches!(res.framing, Framing::Chunked(_) | Framing::UntilClose);
                    self.head_out = Some(client_head(&res, self.close).freeze());
                    self.body_done = res.framing.is_done();
                    self.framing = res.framing;
                    self.to_upstream = None;
                    self.phase = Phase::Body;
                    return;
                }
            }
        }
    }

    /// The upstream closed its connection (`failed`: it broke).
    pub fn handle_upstream_closed(&mut self, failed: bool) {
        match self.phase {
            Phase::Request => self.unanswered(if failed {
                Unanswered::UpstreamFailed
            } else {
                Unanswered::UpstreamClosed
            }),
            Phase::Body if !failed && matches!(self.framing, Framing::UntilClose) => {
                // The close was the end.
                self.body_done = true;
                self.reusable = false;
            }
            Phase::Body => self.end(End::Cut(Cut::UpstreamBroken)),
            // The body has ended; its last write is under way.
            Phase::Ended => self.reusable = false,
        }
    }

    /// Whether a write to the client is due ([`Exchange::poll_transmit`] has something).
    pub fn has_transmit(&self) -> bool {
        self.phase == Phase::Body
            && !self.writing
            && (self.head_out.is_some() || !self.payload.is_empty() || self.body_done)
    }

    /// How many payload bytes the write due to the client carries (the observer's copy is
    /// stamped before the write, and only for payload).
    pub fn payload_len(&self) -> usize {
        if self.payload.is_empty() {
            0
        } else {
            self.payload_len
        }
    }

    /// The next write to the client, as pieces appended to `out` (empty when none is due),
    /// and, if `copy`, the payload it carries for the observer. Report the write's progress
    /// with [`Exchange::handle_client_write_waits`] and [`Exchange::handle_client_written`].
    pub fn poll_transmit(&mut self, out: &mut Vec<Bytes>, copy: bool) -> Option<Bytes> {
        if !self.has_transmit() {
            return None;
        }
        self.writing = true;
        if let Some(head) = self.head_out.take() {
            out.push(head);
        }
        let mut copied = None;
        if !self.payload.is_empty() {
            let read = std::mem::take(&mut self.read);
            let len = self.payload_len;
            let joined = (self.payload.len() > 1 && (copy || self.payload.len() > MAX_SLICES))
                .then(|| {
                    let mut joined = BytesMut::with_capacity(len);
                    for r in &self.payload {
                        joined.put_slice(&read[r.clone()]);
                    }
                    joined.freeze()
                });
            if copy {
                copied = Some(match &joined {
                    Some(j) => j.clone(),
                    None => read.slice(self.payload[0].clone()),
                });
            }
            if self.rechunk {
                out.push(chunk_size_line(len, &mut self.lines));
            }
            match joined {
                Some(j) if self.payload.len() > MAX_SLICES => out.push(j),
                _ => out.extend(self.payload.iter().map(|r| read.slice(r.clone()))),
            }
            if self.rechunk {
                out.push(Bytes::from_static(b"\r\n"));
            }
            self.payload.clear();
        }
        if self.body_done {
            if self.rechunk {
                out.push(Bytes::from_static(b"0\r\n"));
                let trailers = self.framing.trailers();
                if !trailers.is_empty() {
                    out.push(Bytes::copy_from_slice(trailers));
                }
                out.push(Bytes::from_static(b"\r\n"));
            }
            self.phase = Phase::Ended;
        }
        copied
    }

    /// The client's socket cannot take the rest of the write now.
    pub fn handle_client_write_waits(&mut self, now: Instant) {
        self.blocked_since.get_or_insert(now);
    }

    /// The write from [`Exchange::poll_transmit`] has gone out whole. After the one that
    /// ends the body, the exchange ends.
    pub fn handle_client_written(&mut self, now: Instant) {
        self.writing = false;
        self.blocked_since = None;
        self.last_progress = now;
        if self.phase == Phase::Ended && !self.ended {
            self.ended = true;
            self.events.push_back(Event::End(End::Done {
                keep_client: !self.close,
                reuse_upstream: self.reusable && self.clean,
            }));
        }
    }

    /// The next deadline, if any: call [`Exchange::handle_timeout`] at it.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.phase {
            Phase::Request => {
                let response = self.started + self.timeouts.response;
                let waiting_for_client = self.left > 0 && !self.upstream_owes;
                Some(if waiting_for_client {
                    response.min(self.last_progress + self.timeouts.client_body_idle)
                } else {
                    response
                })
            }
            Phase::Body => Some(match self.blocked_since {
                Some(since) => since + self.timeouts.send,
                None => self.last_progress + self.timeouts.upstream_body_idle,
            }),
            Phase::Ended => self.blocked_since.map(|since| since + self.timeouts.send),
        }
    }

    /// Time has come to `now`: ends the exchange if a deadline has passed (one that moved on
    /// since the timer was set has not).
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.is_ended() {
            return;
        }
        let Some(deadline) = self.poll_timeout() else {
            return;
        };
        if now < deadline {
            return;
        }
        match self.phase {
            Phase::Request if now >= self.started + self.timeouts.response => {
                self.unanswered(Unanswered::Timeout)
            }
            Phase::Request => self.end(End::Cut(Cut::ClientIdle)),
            _ if self.blocked_since.is_some() => self.end(End::Cut(Cut::ClientStopped)),
            _ => self.end(End::Cut(Cut::UpstreamIdle)),
        }
    }

    /// What to tell the observer and the log next.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Whether the exchange's [`Event::End`] has been given (or is queued).
    pub fn is_ended(&self) -> bool {
        self.ended
    }

    fn unanswered(&mut self, why: Unanswered) {
        // The relay's answer keeps the connection only where the next request's start is
        // known: the whole body was read.
        let keep_client = self.left == 0 && !self.client_close;
        self.end(End::Unanswered { why, keep_client });
    }

    fn end(&mut self, end: End) {
        if self.ended {
            return;
        }
        self.ended = true;
        self.phase = Phase::Ended;
        self.head_out = None;
        self.payload.clear();
        self.to_upstream = None;
        self.events.push_back(Event::End(end));
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

#[cfg(test)]
#[path = "exchange_tests.rs"]
mod tests;
