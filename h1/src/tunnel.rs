//! A tunnel after an upgrade (a WebSocket's `101`), sans I/O: raw bytes spliced both ways,
//! never parsed or re-framed, with every decision the splice makes and none of its I/O.
//!
//! The driver reads, writes and sets timers; [`Tunnel`] says what to do next:
//!
//! - **One read in flight per direction.** A direction is read again only once its last read
//!   has been written out in full and flushed ([`Tunnel::wants_read`]), so a side that stops
//!   taking bytes holds its sender back through the socket buffers instead of piling them up
//!   in the relay: one read's bytes per direction is all the relay ever holds.
//! - **Copies for an observer, stamped before the write.** When the tunnel is observed, each
//!   read is [`Event::Stamp`]ed before its first byte may be written (the moment the bytes
//!   passed: a host may act on the first part of a long write before the write returns) and
//!   its [`Event::Copy`] follows once the write is done, or as soon as the write has to wait,
//!   so that a side that stops reading does not hold the observer's watermark. Both directions
//!   share one observer, which dates a copy at the latest stamp it has seen, so copies come out
//!   in the order their stamps did.
//! - **A send timeout.** A write that has waited [`Tunnel::new`]'s `send_timeout` without
//!   finishing ends the tunnel (nginx's `send_timeout`). A write taken at once sets no
//!   deadline, and reads and writes take no time argument: the forwarding path reads no clock.
//! - **Half-close with a grace.** A clean end of one direction is passed on (its writer is
//!   shut down) and the other direction may still finish, for `half_close_grace`; a read or
//!   write that fails ends the tunnel at once.
//! - **An idle bound** ([`Tunnel::with_idle_timeout`]). A tunnel through which nothing was
//!   read either way for a whole idle period ends. Any bytes count, so a WebSocket whose
//!   server pings (and whose client answers) is never idle, however quiet its turns; one that
//!   sends nothing at all holds a descriptor pair and a connection slot, and a peer could
//!   hold every slot that way. Reads still take no clock: the machine notes that a read
//!   happened, and at each period's deadline asks whether one did since the last (so a tunnel
//!   ends between one and two periods after its last byte).
//!
//! The relay's driver is `crates/relay/src/ws.rs` (`splice`); `fuzz/` drives the same machine with
//! arbitrary interleavings (`h1_tunnel`).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;

/// Which way bytes go through the tunnel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Read from the client, written to the upstream.
    Up,
    /// Read from the upstream, written to the client.
    Down,
}

impl Direction {
    /// Both directions, `Up` first.
    pub const BOTH: [Direction; 2] = [Direction::Up, Direction::Down];

    /// The opposite direction.
    pub fn other(self) -> Direction {
        match self {
            Direction::Up => Direction::Down,
            Direction::Down => Direction::Up,
        }
    }

    /// `0` for `Up`, `1` for `Down`: an index into per-direction arrays.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// How a direction's reading ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadEnd {
    /// A clean end of stream: the sender is done and says so.
    Clean,
    /// The read failed (a reset, an abrupt close).
    Broken,
}

/// What the driver does next on a direction's writer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transmit<'a> {
    /// Write (some of) these bytes, then report [`Tunnel::handle_written`].
    Write(&'a [u8]),
    /// Flush what was written, then report [`Tunnel::handle_flushed`]: a read is passed on
    /// whole before the next one (a TLS writer may hold the last record otherwise).
    Flush,
    /// Shut the writer down (the direction's clean end, passed on), then report
    /// [`Tunnel::handle_shut`], whether it succeeded or not.
    Shutdown,
}

/// Why a tunnel ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// Both directions ended cleanly and both ends were passed on.
    Clean,
    /// A read from, or a write to, one side failed; the direction is the one whose read or
    /// write it was.
    Reset(Direction),
    /// A write in this direction waited for the send timeout without finishing.
    SendTimeout(Direction),
    /// One direction ended cleanly and the other did not finish within the grace.
    GraceExpired,
    /// Nothing was read either way for a whole idle period.
    Idle,
}

/// What the driver must do, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Take the moment of the copy of `Direction`'s last read now: its bytes are about to be
    /// written. ([`Tunnel::poll_transmit`] holds the bytes back until this is polled.)
    Stamp(Direction),
    /// The copy of the bytes stamped last in `Direction`: hand it over with that stamp.
    Copy(Direction, Bytes),
    /// The tunnel is over: close both sides. A stamp not followed by its copy (bytes whose
    /// write was never tried) is dropped; every read whose write was tried has had its copy. `failed`: the tunnel broke before either side ended
    /// cleanly (after a clean end, the side that ended said it was done, and the other
    /// direction's end is the end of a finished exchange).
    Ended { why: End, failed: bool },
}

/// Where a direction's writer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Nothing to write: the direction may be read (if it has not ended).
    Idle,
    /// The last read's bytes from `written` on are to be written.
    Write,
    /// Written in full; to be flushed.
    Flush,
    /// The direction ended cleanly; its writer is to be shut down.
    Shut,
    /// Ended and passed on.
    Done,
}

/// One direction's state.
#[derive(Debug)]
struct Way {
    stage: Stage,
    /// The last read's bytes, kept until they are written and their copy is out.
    chunk: Bytes,
    written: usize,
    /// A [`Event::Stamp`] for this direction is queued, not yet polled.
    stamp_queued: bool,
    /// The last read's copy has not been handed over yet.
    copy_owed: bool,
    /// Its write was tried (done, waiting or failed): the copy may go once the copies
    /// stamped before it have.
    copy_ready: bool,
    /// When the write that is waiting must have finished.
    send_deadline: Option<Instant>,
}

impl Way {
    fn new() -> Way {
        Way {
            stage: Stage::Idle,
            chunk: Bytes::new(),
            written: 0,
            stamp_queued: false,
            copy_owed: false,
            copy_ready: false,
            send_deadline: None,
        }
    }
}

/// The splice of one tunnel; see the module's documentation.
#[derive(Debug)]
pub struct Tunnel {
    ways: [Way; 2],
    /// Whether reads are stamped and copied (an observer is attached).
    observed: bool,
    send_timeout: Duration,
    half_close_grace: Duration,
    /// Set at the first clean end: the other direction must finish by then.
    grace_deadline: Option<Instant>,
    /// The idle period, and when the current one ends.
    idle: Option<(Duration, Instant)>,
    /// Something was read since the current idle period began.
    read_in_period: bool,
    /// Directions with a copy owed, in the order their stamps went out.
    stamp_order: VecDeque<Direction>,
    events: VecDeque<Event>,
    ended: bool,
}

impl Tunnel {
    /// A tunnel whose two directions are open. `observed`: stamp and copy every read.
    pub fn new(observed: bool, send_timeout: Duration, half_close_grace: Duration) -> Tunnel {
        Tunnel {
            ways: [Way::new(), Way::new()],
            observed,
            send_timeout,
            half_close_grace,
            grace_deadline: None,
            idle: None,
            read_in_period: false,
            stamp_order: VecDeque::with_capacity(2),
            events: VecDeque::with_capacity(4),
            ended: false,
        }
    }

    /// Ends the tunnel once nothing has been read either way for a whole `idle` period, the
    /// first of which begins at `now`.
    pub fn with_idle_timeout(mut self, idle: Duration, now: Instant) -> Tunnel {
        self.idle = Some((idle, now + idle));
        self
    }

    fn way(&mut self, dir: Direction) -> &mut Way {
        &mut self.ways[dir.index()]
    }

    /// Whether a read may be issued in `dir` now: the direction is open and its last read is
    /// written out (and its copy handed over). Bytes the driver already holds (read ahead
    /// before the tunnel began) are given as a read while this is true.
    pub fn wants_read(&self, dir: Direction) -> bool {
        let way = &self.ways[dir.index()];
        !self.ended && way.stage == Stage::Idle && !way.copy_owed
    }

    /// Bytes read in `dir` (not empty: an empty read is an end, [`Tunnel::handle_read_end`]).
    /// Only while [`Tunnel::wants_read`]; otherwise ignored, as a driver's mistake.
    pub fn handle_read(&mut self, dir: Direction, bytes: Bytes) {
        debug_assert!(
            self.wants_read(dir),
            "a read {dir:?} while one is in flight"
        );
        if bytes.is_empty() || !self.wants_read(dir) {
            return;
        }
        let observed = self.observed;
        self.read_in_period = true;
        let way = self.way(dir);
        way.stage = Stage::Write;
        way.chunk = bytes;
        way.written = 0;
        if observed {
            way.stamp_queued = true;
            way.copy_owed = true;
            way.copy_ready = false;
            self.stamp_order.push_back(dir);
            self.events.push_back(Event::Stamp(dir));
        }
    }

    /// Reading in `dir` ended. A clean end is passed on (the writer of `dir` is shut down,
    /// [`Transmit::Shutdown`]) and starts the grace of the other direction; a broken one ends
    /// the tunnel.
    pub fn handle_read_end(&mut self, dir: Direction, end: ReadEnd, now: Instant) {
        if self.ended {
            return;
        }
        if end == ReadEnd::Broken {
            self.end(End::Reset(dir));
            return;
        }
        debug_assert!(
            self.wants_read(dir),
            "an end {dir:?} while a read is in flight"
        );
        if self.ways[dir.index()].stage != Stage::Idle {
            return;
        }
        self.way(dir).stage = Stage::Shut;
        if self.grace_deadline.is_none() {
            self.grace_deadline = Some(now + self.half_close_grace);
        }
    }

    /// What to do next on `dir`'s writer, if anything: the same until reported done.
    pub fn poll_transmit(&self, dir: Direction) -> Option<Transmit<'_>> {
        let way = &self.ways[dir.index()];
        if self.ended || way.stamp_queued {
            return None;
        }
        match way.stage {
            Stage::Write => Some(Transmit::Write(&way.chunk[way.written..])),
            Stage::Flush => Some(Transmit::Flush),
            Stage::Shut => Some(Transmit::Shutdown),
            Stage::Idle | Stage::Done => None,
        }
    }

    /// `n` bytes of [`Transmit::Write`] were taken. Zero means the side takes no more: the
    /// tunnel ends as if the write had failed.
    pub fn handle_written(&mut self, dir: Direction, n: usize) {
        if self.ended || self.ways[dir.index()].stage != Stage::Write {
            return;
        }
        if n == 0 {
            self.handle_write_failed(dir);
            return;
        }
        let way = self.way(dir);
        way.written = (way.written + n).min(way.chunk.len());
        if way.written == way.chunk.len() {
            way.stage = Stage::Flush;
        }
    }

    /// The [`Transmit::Flush`] is done: the read is passed on, its copy may go, the direction
    /// may be read again.
    pub fn handle_flushed(&mut self, dir: Direction) {
        if self.ended || self.ways[dir.index()].stage != Stage::Flush {
            return;
        }
        let way = self.way(dir);
        way.stage = Stage::Idle;
        way.send_deadline = None;
        if way.copy_owed {
            way.copy_ready = true;
            self.release_copies();
        } else {
            way.chunk = Bytes::new();
        }
    }

    /// The [`Transmit::Shutdown`] is done (or failed: the end was passed on as far as it can
    /// be). Both directions passed on: the tunnel ends cleanly.
    pub fn handle_shut(&mut self, dir: Direction) {
        if self.ended || self.ways[dir.index()].stage != Stage::Shut {
            return;
        }
        self.way(dir).stage = Stage::Done;
        if self.ways.iter().all(|w| w.stage == Stage::Done) {
            self.end(End::Clean);
        }
    }

    /// The current transmit of `dir` has to wait for the side to take bytes: its copy goes
    /// now, and a write or flush gets until `now` + the send timeout (from its first wait).
    pub fn handle_write_waits(&mut self, dir: Direction, now: Instant) {
        if self.ended {
            return;
        }
        let send_timeout = self.send_timeout;
        let way = self.way(dir);
        if !matches!(way.stage, Stage::Write | Stage::Flush) {
            return;
        }
        way.send_deadline.get_or_insert(now + send_timeout);
        if way.copy_owed && !way.copy_ready {
            way.copy_ready = true;
            self.release_copies();
        }
    }

    /// Writing in `dir` failed: the tunnel ends. The copy of the bytes being written is still
    /// handed over (their write was tried; the peer may have taken part of them).
    pub fn handle_write_failed(&mut self, dir: Direction) {
        if self.ended {
            return;
        }
        let way = self.way(dir);
        if way.copy_owed && !way.copy_ready && matches!(way.stage, Stage::Write | Stage::Flush) {
            way.copy_ready = true;
            self.release_copies();
        }
        self.end(End::Reset(dir));
    }

    /// Time has passed: a deadline at or before `now` ends the tunnel.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.ended {
            return;
        }
        for dir in Direction::BOTH {
            if self.ways[dir.index()]
                .send_deadline
                .is_some_and(|d| d <= now)
            {
                self.end(End::SendTimeout(dir));
                return;
            }
        }
        if self.grace_deadline.is_some_and(|d| d <= now) {
            self.end(End::GraceExpired);
            return;
        }
        if let Some((period, end)) = self.idle {
            if end <= now {
                if std::mem::take(&mut self.read_in_period) {
                    self.idle = Some((period, now + period));
                } else {
                    self.end(End::Idle);
                }
            }
        }
    }

    /// The next deadline ([`Tunnel::handle_timeout`] is due then), if any: a waiting write's
    /// send timeout, the grace after a clean end, the end of the idle period.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.ended {
            return None;
        }
        self.ways
            .iter()
            .filter_map(|w| w.send_deadline)
            .chain(self.grace_deadline)
            .chain(self.idle.map(|(_, end)| end))
            .min()
    }

    /// The next thing the driver must do, in order; [`Event::Ended`] is the last.
    pub fn poll_event(&mut self) -> Option<Event> {
        let event = self.events.pop_front()?;
        if let Event::Stamp(dir) = event {
            self.way(dir).stamp_queued = false;
        }
        Some(event)
    }

    /// Whether the tunnel has ended (its [`Event::Ended`] may still be queued).
    pub fn is_ended(&self) -> bool {
        self.ended
    }

    /// Queues the copies whose writes were tried, in stamp order: a copy whose write was
    /// tried waits for the ones stamped before it.
    fn release_copies(&mut self) {
        while let Some(&dir) = self.stamp_order.front() {
            let way = &mut self.ways[dir.index()];
            if !way.copy_ready {
                break;
            }
            self.stamp_order.pop_front();
            way.copy_owed = false;
            way.copy_ready = false;
            let bytes = if way.stage == Stage::Idle {
                // Written: the tunnel keeps no reference (the driver's read buffer can be
                // reused once the copy is gone).
                std::mem::take(&mut way.chunk)
            } else {
                way.chunk.clone()
            };
            self.events.push_back(Event::Copy(dir, bytes));
        }
    }

    fn end(&mut self, why: End) {
        if self.ended {
            return;
        }
        self.ended = true;
        // An idle tunnel broke nothing: both sides were silent, and each sees a close.
        let failed = !matches!(why, End::Clean | End::Idle) && self.grace_deadline.is_none();
        // Copies whose writes were tried (some of their bytes taken, at least) go, even where a
        // copy stamped before them never will (its stamp is dropped: it dates nothing); the
        // rest are dropped with their stamps.
        for dir in std::mem::take(&mut self.stamp_order) {
            let way = &mut self.ways[dir.index()];
            if way.copy_ready || way.written > 0 {
                self.events
                    .push_back(Event::Copy(dir, std::mem::take(&mut way.chunk)));
            }
        }
        for way in &mut self.ways {
            way.chunk = Bytes::new();
            way.copy_owed = false;
        }
        self.events.push_back(Event::Ended { why, failed });
    }
}

#[cfg(test)]
#[path = "tunnel_tests.rs"]
mod tests;
