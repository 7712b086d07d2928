//! Taps: the data path hands cheap copies (`Bytes` clones) of what it forwards to a stream's
//! observer task through a bounded channel, and never waits for it.
//!
//! If the channel is full the copy is dropped, the tap stops copying for good and the observer
//! is told `lost("overflow")` (stamped with the moment of the first dropped copy) once it has
//! taken up everything queued before. Each copy is stamped on the data path, when the bytes
//! passed; the observer stamps the events a copy produces with that time, never its own.
//!
//! A copy wakes nobody. Waking the observer's task from the data path meant, per relayed
//! event, a lock on the observation runtime's queue and usually a write to its eventfd (a
//! system call and an inter-processor interrupt on the forwarding thread); with 200 streams of
//! sparse events that was one per event. Instead the tap raises its stream's flag, and the
//! first copy after the flag was lowered puts the stream on the [`Doorbell`]'s list (a lock,
//! no system call); a ticker on the observation thread rings the listed streams once per
//! [`TICK`], where waking a task is a local queue push. A stream's copies are taken up at
//! most a tick after they passed; the watermark waits for them meanwhile, as for any queued
//! copy (the live correlator itself decides every 20 ms while it has anything to decide).
//! After a quiet spell the ticker parks, and the first stream listed wakes it: one wake per
//! quiet spell, not per copy. A fast stream whose queue passes a quarter of either bound
//! (copies or bytes) wakes its observer at once, once until it has caught up, so it never
//! runs into the bound between ticks. The end of a stream and an overflow also wake its
//! observer at once.
//!
//! The tick is 5 ms, not 1: the observation thread waking each millisecond met each event
//! of a stream paced in milliseconds (as the benchmark's are, and its timer's) and added
//! 10–20 µs to the WebSocket latency p50; at 5 ms it no longer shows (docs/performance.md,
//! "Observation off the forwarding path, and the 5 ms tick").

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use correlator::observe::Budget;
use correlator::{EventKind, Millis};
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{mpsc, Notify};

use super::cores::Spawner;
use crate::feed::{SourceGuard, Timed};
use hostid::ConnHost;
use sys::clock::Clock;

/// What a copy is.
#[derive(Debug)]
pub(crate) enum TapMsg {
    /// HTTP request body bytes, as received from the client.
    RequestChunk(Bytes),
    /// The whole request has passed.
    RequestEnd,
    /// The upstream's response head.
    ResponseHead {
        status: u16,
        content_type: Option<String>,
        content_encoding: Option<String>,
    },
    /// HTTP response body bytes, as received from the upstream.
    ResponseChunk(Bytes),
    /// WebSocket bytes from the client (raw frames, masked).
    ClientBytes(Bytes),
    /// WebSocket bytes from the upstream (raw frames).
    ServerBytes(Bytes),
}

/// A stream observer as the tap drives it: one of `correlator::observe`'s observers.
pub(crate) trait StreamObserver: Send {
    fn take(&mut self, msg: TapMsg, out: &mut Vec<EventKind>);
    fn lost(&mut self, reason: &'static str, out: &mut Vec<EventKind>);
    fn close(&mut self, out: &mut Vec<EventKind>);
}

/// Contains an observer's panics: a fault in a parser loses observation of its stream (reason
/// `observer`), never the relay's forwarding nor, through a dead task, the watermark.
pub(crate) struct Contained {
    inner: Box<dyn StreamObserver>,
    stream: String,
    failed: bool,
}

impl Contained {
    pub(crate) fn new(stream: String, inner: Box<dyn StreamObserver>) -> Self {
        Contained {
            inner,
            stream,
            failed: false,
        }
    }

    fn guard(
        &mut self,
        out: &mut Vec<EventKind>,
        f: impl FnOnce(&mut dyn StreamObserver, &mut Vec<EventKind>),
    ) {
        if self.failed {
            return;
        }
        let before = out.len();
        let inner = &mut *self.inner;
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(inner, out)));
        if caught.is_err() {
            out.truncate(before);
            self.failed = true;
            tracing::warn!("an observer failed; observation of its stream stops");
            out.push(EventKind::ObservationLost {
                stream: self.stream.clone(),
                reason: "observer".to_string(),
            });
        }
    }
}

impl StreamObserver for Contained {
    fn take(&mut self, msg: TapMsg, out: &mut Vec<EventKind>) {
        self.guard(out, |o, out| o.take(msg, out));
    }
    fn lost(&mut self, reason: &'static str, out: &mut Vec<EventKind>) {
        self.guard(out, |o, out| o.lost(reason, out));
    }
    fn close(&mut self, out: &mut Vec<EventKind>) {
        if !self.failed {
            self.guard(out, |o, out| o.close(out));
        }
        if self.failed {
            out.push(EventKind::StreamClose {
                stream: self.stream.clone(),
            });
        }
    }
}

const NONE: u64 = u64::MAX;

/// How often the doorbell rings the streams that have copies waiting.
const TICK: std::time::Duration = std::time::Duration::from_millis(5);

/// Bytes of copies one stream may have queued. The channel bounds the number of copies; this
/// bounds their size (an upload's chunks can be large), so a stalled observer costs at most
/// this much memory before its stream is marked lost.
pub(crate) const MAX_QUEUED_BYTES: usize = 4 << 20;

struct Handoff {
    guard: SourceGuard,
    /// The time of the first dropped copy (`NONE` while nothing was dropped).
    overflow_at: AtomicU64,
    /// When the data path let go of the tap (`NONE` while it holds it).
    closed_at: AtomicU64,
    /// Bytes of copies queued and not yet taken up.
    queued_bytes: AtomicUsize,
    /// The observers' budget: what is queued is held there too, so that a thousand streams
    /// whose readers fall behind cannot queue a thousand times [`MAX_QUEUED_BYTES`].
    budget: Budget,
    /// Raised by the data path when it queues a copy, lowered by the observer when it has
    /// taken up everything: while it is up, the stream is on the doorbell's list (or its
    /// observer is about to look again), so further copies need not list it.
    rung: AtomicBool,
    /// Raised by the data path when it woke the observer of a filling queue at once, lowered
    /// with `rung`: one such wake until the observer has caught up.
    hurried: AtomicBool,
    wake: Notify,
}

impl Drop for Handoff {
    fn drop(&mut self) {
        // Copies still queued when the tap and its task are both gone (a task that did not
        // drain, at a shutdown) are freed with the channel: give their bytes back.
        self.budget.release(*self.queued_bytes.get_mut());
    }
}

impl Handoff {
    fn time(v: &AtomicU64) -> Option<Millis> {
        match v.load(Ordering::SeqCst) {
            NONE => None,
            bits => Some(f64::from_bits(bits)),
        }
    }
}

/// The streams whose observers have copies to take up, rung together once per [`TICK`] by a
/// ticker on the observation threads (see the module documentation).
pub(crate) struct Doorbell {
    ready: Mutex<Vec<Arc<Handoff>>>,
    /// The ticker stopped ticking after [`IDLE_TICKS`] ticks with nothing to ring; the next
    /// stream listed wakes it (one wake after a quiet spell, not one per copy).
    parked: AtomicBool,
    unpark: Notify,
}

/// Ticks with nothing to ring before the ticker parks instead of ticking on.
const IDLE_TICKS: u32 = 8;

impl Doorbell {
    /// A doorbell with its ticker running on `observers` (it ends with their runtime).
    pub(crate) fn start(observers: &Spawner) -> Arc<Doorbell> {
        let doorbell = Doorbell::unticked();
        let ticker = doorbell.clone();
        observers.spawn(move || ticker.tick());
        doorbell
    }

    /// A doorbell with no ticker: nobody rings it but whoever holds it (tests).
    fn unticked() -> Arc<Doorbell> {
        Arc::new(Doorbell {
            ready: Mutex::new(Vec::new()),
            parked: AtomicBool::new(false),
            unpark: Notify::new(),
        })
    }

    fn list(&self, stream: &Arc<Handoff>) {
        if let Ok(mut ready) = self.ready.lock() {
            ready.push(stream.clone());
        }
        if self.parked.swap(false, Ordering::SeqCst) {
            self.unpark.notify_one();
        }
    }

    /// Wakes the observers of the streams listed since the last ring (`rung` is scratch
    /// space); whether there were any.
    fn ring(&self, rung: &mut Vec<Arc<Handoff>>) -> bool {
        if let Ok(mut ready) = self.ready.lock() {
            std::mem::swap(rung, &mut *ready);
        }
        let any = !rung.is_empty();
        for stream in rung.drain(..) {
            stream.wake.notify_one();
        }
        any
    }

    fn is_empty(&self) -> bool {
        self.ready.lock().map(|r| r.is_empty()).unwrap_or(true)
    }

    /// Rings the listed streams once per tick; parks after a quiet spell.
    async fn tick(self: Arc<Self>) {
        let mut rung = Vec::new();
        let mut idle = 0;
        loop {
            tokio::time::sleep(TICK).await;
            if self.ring(&mut rung) {
                idle = 0;
                continue;
            }
            idle += 1;
            if idle >= IDLE_TICKS {
                idle = 0;
                // Parked first, then looked: a stream listed in between finds it parked and
                // leaves a permit, so the wait below returns at once.
                self.parked.store(true, Ordering::SeqCst);
                if self.is_empty() {
                    self.unpark.notified().await;
                }
                self.parked.store(false, Ordering::SeqCst);
            }
        }
    }
}

/// The data-path end. Dropping it (when the exchange or connection is over) closes the
/// observer's stream.
pub(crate) struct Tap {
    tx: mpsc::Sender<(Millis, TapMsg)>,
    shared: Arc<Handoff>,
    doorbell: Arc<Doorbell>,
    clock: Clock,
}

impl Tap {
    /// Hands one copy to the observer, or drops it if the observer is behind.
    pub(crate) fn send(&self, msg: TapMsg) {
        if let Some(stamp) = self.stamp() {
            stamp.send(msg);
        }
    }

    /// The moment of a copy whose bytes are about to be written on; the copy itself follows
    /// with [`Stamp::send`] once they are. The write goes first so that handing the copy over
    /// (the channel, the doorbell, their atomics) is not between the upstream's bytes and the
    /// client's; the stamp is taken before, so the copy's time is still when the bytes passed
    /// (a host that reads the first part of a long write may act before the write returns).
    /// `None` when the tap has stopped copying.
    ///
    /// Copies are queued in the order they are sent, and the observer dates each at the
    /// latest stamp it has seen. Where two sequences of writes share a tap (a WebSocket
    /// tunnel's two directions, in one task), a copy held across a write that waits could be
    /// queued after a copy stamped later and be dated late; there the copy is sent before the
    /// task yields (`ws::splice`, the `h1::Tunnel` machine).
    pub(crate) fn stamp(&self) -> Option<Stamp<'_>> {
        if Handoff::time(&self.shared.overflow_at).is_some() {
            return None;
        }
        // Held from here until the copy is queued or dropped: the watermark stays at or
        // before this stamp meanwhile, however long the write takes.
        self.shared.guard.source().begin();
        Some(Stamp {
            tap: self,
            t: self.clock.now_ms(),
        })
    }

    fn queue(&self, t: Millis, msg: TapMsg) {
        let source = self.shared.guard.source();
        let size = msg.size();
        let queued = self.shared.queued_bytes.fetch_add(size, Ordering::SeqCst) + size;
        let held = queued <= MAX_QUEUED_BYTES && self.shared.budget.try_hold(size);
        let sent = held && self.tx.try_send((t, msg)).is_ok();
        if held && !sent {
            self.shared.budget.release(size);
        }
        if sent {
            if !self.shared.rung.swap(true, Ordering::SeqCst) {
                self.doorbell.list(&self.shared);
            } else if (queued > MAX_QUEUED_BYTES / 4
                || self.tx.capacity() < self.tx.max_capacity() / 4 * 3)
                && !self.shared.hurried.swap(true, Ordering::SeqCst)
            {
                self.shared.wake.notify_one();
            }
        } else {
            self.shared.queued_bytes.fetch_sub(size, Ordering::SeqCst);
            // The unit stays pending until the observer has reported the loss; only the
            // first overflow counts (two directions may race here).
            if self
                .shared
                .overflow_at
                .compare_exchange(NONE, t.to_bits(), Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
            {
                source.done();
            }
            self.shared.wake.notify_one();
        }
    }
}

/// A copy's moment, taken before its bytes were written on ([`Tap::stamp`]). It holds the
/// stream's watermark until [`Stamp::send`] queues the copy; dropped unsent (the write's
/// future cancelled), it lets go.
#[must_use = "a stamp holds the watermark until its copy is sent"]
pub(crate) struct Stamp<'a> {
    tap: &'a Tap,
    t: Millis,
}

impl Stamp<'_> {
    /// Queues the copy with this stamp's time (or drops it, as [`Tap::send`] would).
    pub(crate) fn send(self, msg: TapMsg) {
        let this = std::mem::ManuallyDrop::new(self);
        this.tap.queue(this.t, msg);
    }
}

impl Drop for Stamp<'_> {
    fn drop(&mut self) {
        self.tap.shared.guard.source().done();
    }
}

impl TapMsg {
    /// The bytes this copy holds.
    pub(crate) fn size(&self) -> usize {
        match self {
            TapMsg::RequestChunk(b)
            | TapMsg::ResponseChunk(b)
            | TapMsg::ClientBytes(b)
            | TapMsg::ServerBytes(b) => b.len(),
            TapMsg::RequestEnd | TapMsg::ResponseHead { .. } => 0,
        }
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.shared.guard.source().begin();
        let t = self.clock.now_ms();
        self.shared.closed_at.store(t.to_bits(), Ordering::SeqCst);
        self.shared.wake.notify_one();
    }
}

/// Test hook: an observer that takes nothing up until its stream has ended on the data path.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stall(pub bool);

/// What every tap of a run shares.
#[derive(Clone)]
pub(crate) struct Settings {
    pub clock: Clock,
    /// Copies queued per stream before it is marked `observation_lost`.
    pub queue: usize,
    /// Where observers send their events (the live correlator).
    pub events: mpsc::Sender<Timed>,
    pub stall: Stall,
    /// Where observer tasks run: the observation threads, never a forwarding core.
    pub observers: Spawner,
    /// Rings observers whose streams have copies waiting (its ticker runs on `observers`).
    pub doorbell: Arc<Doorbell>,
    /// The observers' memory budget, which copies queued for them count against too.
    pub budget: Budget,
}

impl Settings {
    pub(crate) fn new(
        clock: Clock,
        queue: usize,
        events: mpsc::Sender<Timed>,
        stall: Stall,
        observers: Spawner,
    ) -> Settings {
        let doorbell = Doorbell::start(&observers);
        Settings {
            clock,
            queue,
            events,
            stall,
            observers,
            doorbell,
            budget: Budget::unlimited(),
        }
    }

    /// The same, with copies queued for observers counted against `budget`.
    pub(crate) fn with_budget(self, budget: Budget) -> Settings {
        Settings { budget, ..self }
    }
}

/// Starts the observer task for one stream and returns its tap. The observer's `opening`
/// events go out stamped `t_open`, once the stream's `host` is known (the opening unit stays
/// pending meanwhile, so the watermark waits for them); the source in `guard` must have been
/// registered before `t_open` was read.
pub(crate) fn start(
    guard: SourceGuard,
    t_open: Millis,
    observer: Box<dyn StreamObserver>,
    opening: Vec<EventKind>,
    host: Option<ConnHost>,
    settings: &Settings,
) -> Tap {
    let Settings {
        clock,
        queue,
        events,
        stall,
        observers,
        doorbell,
        budget,
    } = settings.clone();
    let (tx, rx) = mpsc::channel(queue.max(1));
    let shared = Arc::new(Handoff {
        guard,
        overflow_at: AtomicU64::new(NONE),
        closed_at: AtomicU64::new(NONE),
        queued_bytes: AtomicUsize::new(0),
        budget,
        rung: AtomicBool::new(false),
        hurried: AtomicBool::new(false),
        wake: Notify::new(),
    });
    let task_shared = shared.clone();
    let opening = Opening {
        events: opening,
        host,
        t: t_open,
    };
    observers.spawn(move || run(task_shared, rx, observer, opening, events, stall));
    Tap {
        tx,
        shared,
        doorbell,
        clock,
    }
}

/// A stream's opening events, stamped `t`, to go out once its host is known.
struct Opening {
    events: Vec<EventKind>,
    host: Option<ConnHost>,
    t: Millis,
}

async fn run(
    shared: Arc<Handoff>,
    mut rx: mpsc::Receiver<(Millis, TapMsg)>,
    mut observer: Box<dyn StreamObserver>,
    opening: Opening,
    events: mpsc::Sender<Timed>,
    stall: Stall,
) {
    let source = shared.guard.source().clone();
    let mut last_t = opening.t;
    source.took_up(last_t);
    let mut out = opening.events;
    let host = opening.host;
    // Copies queue meanwhile (bounded as ever); the wait is bounded by `host::WAIT`.
    let host = match host {
        Some(h) => h.wait().await,
        None => None,
    };
    hostid::stamp_stream_open(&mut out, host);
    emit(&events, last_t, &mut out).await;
    source.done();

    if stall.0 {
        while Handoff::time(&shared.closed_at).is_none() {
            shared.wake.notified().await;
        }
    }

    let mut lost_reported = false;
    loop {
        let mut msg = rx.try_recv();
        if let Err(TryRecvError::Empty) = msg {
            // Everything queued is taken up: lower the flag, then look once more, since a
            // copy queued before the flag came down did not list the stream.
            shared.rung.store(false, Ordering::SeqCst);
            shared.hurried.store(false, Ordering::SeqCst);
            msg = rx.try_recv();
        }
        let msg = match msg {
            Ok(m) => Some(m),
            Err(TryRecvError::Disconnected) => None,
            Err(TryRecvError::Empty) => {
                if Handoff::time(&shared.closed_at).is_some() {
                    // The data path let go; what is queued is all there will be.
                    rx.close();
                } else if lost_reported || Handoff::time(&shared.overflow_at).is_none() {
                    // Rung by the doorbell, or at once for an end or an overflow.
                    shared.wake.notified().await;
                }
                None
            }
        };
        match msg {
            Some((t, m)) => {
                shared.queued_bytes.fetch_sub(m.size(), Ordering::SeqCst);
                shared.budget.release(m.size());
                last_t = last_t.max(t);
                source.took_up(last_t);
                if !lost_reported {
                    observer.take(m, &mut out);
                    emit(&events, last_t, &mut out).await;
                }
                source.done();
            }
            None if rx.is_closed() && rx.is_empty() => break,
            None => {}
        }
        if !lost_reported && rx.is_empty() {
            if let Some(t) = Handoff::time(&shared.overflow_at) {
                last_t = last_t.max(t);
                source.took_up(last_t);
                observer.lost("overflow", &mut out);
                emit(&events, last_t, &mut out).await;
                lost_reported = true;
                source.done();
            }
        }
    }
    // Everything queued has been taken up: report a late overflow, then the end.
    if !lost_reported {
        if let Some(t) = Handoff::time(&shared.overflow_at) {
            last_t = last_t.max(t);
            source.took_up(last_t);
            observer.lost("overflow", &mut out);
            emit(&events, last_t, &mut out).await;
            source.done();
        }
    }
    // What the close brings besides the stream's own end was made whole by the stream's last
    // bytes (a JSON answer is parsed at its end; an SSE decoder's tail): it happened when those
    // bytes passed, `last_t`, stamped before they were written on. The data path lets go of the
    // stream later, after the client may have read the whole answer and acted on it (an agent
    // SDK's non-streaming create runs its MCP call at once): stamped then, its call would
    // start before the window it ran in opened. Only `stream_close` is the data path's.
    observer.close(&mut out);
    let ends = out
        .iter()
        .position(|e| matches!(e, EventKind::StreamClose { .. }));
    let mut end = ends.map(|i| out.split_off(i)).unwrap_or_default();
    emit(&events, last_t, &mut out).await;
    let t_close = Handoff::time(&shared.closed_at)
        .unwrap_or(last_t)
        .max(last_t);
    source.took_up(t_close);
    emit(&events, t_close, &mut end).await;
    source.done();
    // `shared` (and with it the source registration) goes when this task ends.
}

/// Sends a batch of events stamped `t`. A send fails only when the correlator task has
/// stopped (shutdown): nothing to do then but keep draining so the data path never notices.
async fn emit(events: &mpsc::Sender<Timed>, t: Millis, out: &mut Vec<EventKind>) {
    let mut open = true;
    for kind in out.drain(..) {
        if open && events.send((t, kind)).await.is_err() {
            open = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cores::Cores;
    use crate::feed::Sources;

    /// Records what it is told as `stream_close`-shaped marker events, so tests can read the
    /// order and the stamps.
    struct Recorder;

    fn mark(word: &str) -> EventKind {
        EventKind::ObservationLost {
            stream: "s".into(),
            reason: word.to_string(),
        }
    }

    impl StreamObserver for Recorder {
        fn take(&mut self, msg: TapMsg, out: &mut Vec<EventKind>) {
            out.push(mark(match msg {
                TapMsg::RequestChunk(_) => "req",
                TapMsg::RequestEnd => "req_end",
                TapMsg::ResponseHead { .. } => "head",
                TapMsg::ResponseChunk(_) => "resp",
                TapMsg::ClientBytes(_) => "client",
                TapMsg::ServerBytes(_) => "server",
            }));
        }
        fn lost(&mut self, reason: &'static str, out: &mut Vec<EventKind>) {
            out.push(mark(reason));
        }
        fn close(&mut self, out: &mut Vec<EventKind>) {
            out.push(mark("close"));
        }
    }

    /// Starts a [`Recorder`] observer whose stream opened now, with `opening`, and lets go of
    /// `settings` (so the events channel closes with the observer).
    fn recorded(
        guard: SourceGuard,
        clock: &Clock,
        opening: Vec<EventKind>,
        settings: Settings,
    ) -> Tap {
        start(
            guard,
            clock.now_ms(),
            Box::new(Recorder),
            opening,
            None,
            &settings,
        )
    }

    /// Settings whose doorbell nobody rings but the test, and that doorbell.
    fn unticked(
        clock: Clock,
        events: mpsc::Sender<Timed>,
        observers: &Cores,
    ) -> (Settings, Arc<Doorbell>) {
        let doorbell = Doorbell::unticked();
        let settings = Settings {
            clock,
            queue: 1000,
            events,
            stall: Stall(false),
            observers: observers.spawner(),
            doorbell: doorbell.clone(),
            budget: Budget::unlimited(),
        };
        (settings, doorbell)
    }

    /// What most of these tests start from: a clock, the watermark's sources, one observation
    /// thread and the channel the observers' events arrive on.
    struct Rig {
        clock: Clock,
        sources: Arc<Sources>,
        observers: Cores,
        tx: mpsc::Sender<Timed>,
        rx: mpsc::Receiver<Timed>,
    }

    fn rig() -> Rig {
        let (tx, rx) = mpsc::channel(1024);
        Rig {
            clock: Clock::start(),
            sources: Arc::new(Sources::default()),
            observers: Cores::start_observers(1).unwrap(),
            tx,
            rx,
        }
    }

    /// A [`Recorder`] tap on a rig: its stream registered and opened (with `opening`) now, at
    /// `t_open`, its queue `queue` copies long, its observer stalled when `stall`. Keep
    /// `observers` bound for as long as the test runs: the observer runs there.
    struct Recording {
        tap: Tap,
        t_open: Millis,
        clock: Clock,
        sources: Arc<Sources>,
        rx: mpsc::Receiver<Timed>,
        observers: Cores,
    }

    impl Rig {
        fn recording(self, queue: usize, stall: bool, opening: Vec<EventKind>) -> Recording {
            self.recording_within(queue, stall, opening, Budget::unlimited())
        }

        /// [`Rig::recording`] with its queued copies counted against `budget`.
        fn recording_within(
            self,
            queue: usize,
            stall: bool,
            opening: Vec<EventKind>,
            budget: Budget,
        ) -> Recording {
            let Rig {
                clock,
                sources,
                observers,
                tx,
                rx,
            } = self;
            let guard = sources.register(&clock);
            let t_open = clock.now_ms();
            let settings = Settings::new(clock, queue, tx, Stall(stall), observers.spawner())
                .with_budget(budget);
            let tap = start(guard, t_open, Box::new(Recorder), opening, None, &settings);
            Recording {
                tap,
                t_open,
                clock,
                sources,
                rx,
                observers,
            }
        }
    }

    fn word(k: &EventKind) -> String {
        match k {
            EventKind::ObservationLost { reason, .. } => reason.clone(),
            other => other.type_name().to_string(),
        }
    }

    async fn run_tap(queue: usize, stall: bool, copies: usize) -> (Vec<Timed>, Arc<Sources>) {
        let Recording {
            tap,
            sources,
            mut rx,
            observers: _observers,
            ..
        } = rig().recording(queue, stall, vec![mark("open")]);
        for _ in 0..copies {
            tap.send(TapMsg::ResponseChunk(Bytes::from_static(b"x")));
        }
        drop(tap);
        let mut got = Vec::new();
        while let Some(ev) = rx.recv().await {
            got.push(ev);
        }
        (got, sources)
    }

    #[tokio::test]
    async fn copies_become_events_in_order_then_the_close() {
        let (got, sources) = run_tap(64, false, 3).await;
        let words: Vec<String> = got.iter().map(|(_, k)| word(k)).collect();
        assert_eq!(words, ["open", "resp", "resp", "resp", "close"]);
        assert!(
            got.windows(2).all(|w| w[0].0 <= w[1].0),
            "stamps never go back"
        );
        assert_eq!(
            sources.watermark(1e12),
            1e12,
            "a finished stream holds nothing back"
        );
    }

    #[tokio::test]
    async fn a_stalled_observer_loses_copies_and_is_told_overflow_after_what_was_queued() {
        let (got, _) = run_tap(4, true, 50).await;
        let words: Vec<String> = got.iter().map(|(_, k)| word(k)).collect();
        assert_eq!(
            words,
            ["open", "resp", "resp", "resp", "resp", "overflow", "close"],
            "four copies fit the queue; the rest were dropped, never waited for"
        );
        assert!(got.windows(2).all(|w| w[0].0 <= w[1].0));
    }

    /// An observer whose close brings a whole answer's event (marked `whole`), then the
    /// stream's close, as a JSON body's does.
    struct WholeAtEnd;

    impl StreamObserver for WholeAtEnd {
        fn take(&mut self, _msg: TapMsg, _out: &mut Vec<EventKind>) {}
        fn lost(&mut self, _reason: &'static str, _out: &mut Vec<EventKind>) {}
        fn close(&mut self, out: &mut Vec<EventKind>) {
            out.push(mark("whole"));
            out.push(EventKind::StreamClose { stream: "s".into() });
        }
    }

    /// A JSON answer is whole when its last byte passed, not when the data path let go of the
    /// stream: what the close parses is stamped with the last copy's time, and only the
    /// stream's close with the time it ended.
    #[tokio::test]
    async fn what_the_end_makes_whole_is_stamped_when_the_last_bytes_passed() {
        let Rig {
            clock,
            sources,
            observers,
            tx,
            mut rx,
        } = rig();
        let guard = sources.register(&clock);
        let settings = Settings::new(clock, 64, tx, Stall(false), observers.spawner());
        let tap = start(
            guard,
            clock.now_ms(),
            Box::new(WholeAtEnd),
            Vec::new(),
            None,
            &settings,
        );
        drop(settings);
        let before = clock.now_ms();
        tap.send(TapMsg::ResponseChunk(Bytes::from_static(b"{}")));
        let after = clock.now_ms();
        // The exchange goes on a while after its last byte (the client's write, the pool).
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        let dropped = clock.now_ms();
        drop(tap);
        let mut got = Vec::new();
        while let Some(ev) = rx.recv().await {
            got.push(ev);
        }
        let words: Vec<String> = got.iter().map(|(_, k)| word(k)).collect();
        assert_eq!(words, ["whole", "stream_close"]);
        assert!(
            before <= got[0].0 && got[0].0 <= after,
            "whole at the last copy's time: {got:?}"
        );
        assert!(
            got[1].0 >= dropped,
            "the close when the stream ended: {got:?}"
        );
    }

    struct Faulty;

    impl StreamObserver for Faulty {
        fn take(&mut self, _msg: TapMsg, _out: &mut Vec<EventKind>) {
            panic!("a parser bug");
        }
        fn lost(&mut self, _reason: &'static str, _out: &mut Vec<EventKind>) {}
        fn close(&mut self, _out: &mut Vec<EventKind>) {}
    }

    #[test]
    fn a_panicking_observer_loses_its_stream_and_still_closes_it() {
        let mut c = Contained::new("s9".into(), Box::new(Faulty));
        let mut out = Vec::new();
        c.take(TapMsg::RequestEnd, &mut out);
        c.take(TapMsg::RequestEnd, &mut out);
        c.close(&mut out);
        assert_eq!(
            out,
            vec![
                EventKind::ObservationLost {
                    stream: "s9".into(),
                    reason: "observer".into()
                },
                EventKind::StreamClose {
                    stream: "s9".into()
                },
            ]
        );
    }

    #[tokio::test]
    async fn large_copies_overflow_on_bytes_before_the_queue_is_full() {
        let Recording {
            tap,
            mut rx,
            observers: _observers,
            ..
        } = rig().recording(1000, true, vec![]);
        let chunk = Bytes::from(vec![0u8; 1 << 20]);
        for _ in 0..10 {
            tap.send(TapMsg::RequestChunk(chunk.clone()));
        }
        drop(tap);
        let mut words = Vec::new();
        while let Some((_, k)) = rx.recv().await {
            words.push(word(&k));
        }
        assert_eq!(words, ["req", "req", "req", "req", "overflow", "close"]);
    }

    /// Copies queued for stalled observers count against the observers' one budget: the
    /// second stream finds no room left by the first and loses observation at once, instead
    /// of each queuing its own `MAX_QUEUED_BYTES`; everything is given back once taken up.
    #[tokio::test]
    async fn queued_copies_count_against_the_observer_budget() {
        let budget = Budget::new(2 * (1 << 20) + (1 << 19), usize::MAX);
        let chunk = Bytes::from(vec![0u8; 1 << 20]);
        let mut all_words = Vec::new();
        let mut recordings = Vec::new();
        for _ in 0..2 {
            let r = rig().recording_within(1000, true, vec![], budget.clone());
            for _ in 0..3 {
                r.tap.send(TapMsg::RequestChunk(chunk.clone()));
            }
            recordings.push(r);
        }
        assert_eq!(
            budget.held(),
            2 << 20,
            "two copies of the first stream fit, none of the second's"
        );
        for Recording {
            tap,
            mut rx,
            observers,
            ..
        } in recordings
        {
            drop(tap);
            let mut words = Vec::new();
            while let Some((_, k)) = rx.recv().await {
                words.push(word(&k));
            }
            all_words.push(words);
            drop(observers);
        }
        assert_eq!(
            all_words,
            [
                vec!["req", "req", "overflow", "close"],
                vec!["overflow", "close"]
            ]
        );
        assert_eq!(budget.held(), 0, "every queued byte given back");
    }

    /// The calling thread's name and nice value.
    fn this_thread() -> (String, i32) {
        let name = std::thread::current().name().unwrap_or("").to_string();
        let nice = rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap();
        (name, nice)
    }

    /// Records the thread each copy is taken up on.
    struct Where(Arc<std::sync::Mutex<Vec<(String, i32)>>>);

    impl StreamObserver for Where {
        fn take(&mut self, _msg: TapMsg, _out: &mut Vec<EventKind>) {
            self.0.lock().unwrap().push(this_thread());
        }
        fn lost(&mut self, _reason: &'static str, _out: &mut Vec<EventKind>) {}
        fn close(&mut self, _out: &mut Vec<EventKind>) {}
    }

    #[test]
    fn observers_run_on_the_observation_threads_not_the_data_paths() {
        // The data path: a core, as a connection runs on.
        let cores = Cores::start(1).unwrap();
        let observers = Cores::start_observers(1).unwrap();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let settings_observers = observers.spawner();
        let record = seen.clone();
        cores.spawner().spawn(move || async move {
            let clock = Clock::start();
            let sources = Arc::new(Sources::default());
            let (tx, mut rx) = mpsc::channel(1024);
            let settings = Settings::new(clock, 8, tx, Stall(false), settings_observers);
            let guard = sources.register(&clock);
            let tap = start(
                guard,
                clock.now_ms(),
                Box::new(Where(record)),
                vec![],
                None,
                &settings,
            );
            drop(settings);
            tap.send(TapMsg::ResponseChunk(Bytes::from_static(b"x")));
            drop(tap);
            while rx.recv().await.is_some() {}
            let _ = done_tx.send(this_thread());
        });
        let (core, core_nice) = done_rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .unwrap();
        assert!(core.starts_with("windowtap-core"), "{core}");
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1);
        let (observer, observer_nice) = &seen[0];
        assert!(observer.starts_with("windowtap-observe"), "{seen:?}");
        assert!(
            *observer_nice > core_nice || core_nice == 19,
            "observation runs below forwarding: {observer_nice} vs {core_nice}"
        );
    }

    #[tokio::test]
    async fn the_opening_waits_for_the_host_and_holds_the_watermark_meanwhile() {
        use correlator::{Client, Transport};
        let clock = Clock::start();
        let sources = Arc::new(Sources::default());
        let (tx, mut rx) = mpsc::channel(1024);
        let guard = sources.register(&clock);
        let t_open = clock.now_ms();
        let observers = Cores::start_observers(1).unwrap();
        let settings = Settings::new(clock, 8, tx, Stall(false), observers.spawner());
        let open = EventKind::StreamOpen {
            stream: "s".into(),
            client: Client::Claude,
            transport: Transport::Http,
            thread: None,
            host: None,
        };
        let (resolve, host) = ConnHost::pending();
        let tap = start(
            guard,
            t_open,
            Box::new(Recorder),
            vec![open],
            Some(host),
            &settings,
        );
        drop(settings);
        tap.send(TapMsg::ResponseChunk(Bytes::from_static(b"x")));
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(rx.try_recv().is_err(), "nothing before the host is known");
        let w = sources.watermark(clock.now_ms() + 1e6);
        assert!(
            w <= t_open,
            "watermark {w} passed the pending opening at {t_open}"
        );
        let id = hostid::ProcId { pid: 42, start: 7 };
        resolve.send_replace(Some(Some(hostid::Host::Proc(id))));
        drop(tap);
        let (t, first) = rx.recv().await.unwrap();
        assert_eq!(
            t, t_open,
            "stamped when the stream opened, not when its host was known"
        );
        assert!(
            matches!(&first, EventKind::StreamOpen { host: Some(h), .. } if h == "42:7"),
            "{first:?}"
        );
        let mut words = Vec::new();
        while let Some((_, k)) = rx.recv().await {
            words.push(word(&k));
        }
        assert_eq!(words, ["resp", "close"]);
    }

    #[tokio::test]
    async fn a_copy_wakes_nobody_its_stream_is_listed_once_and_taken_up_when_rung() {
        let Rig {
            clock,
            sources,
            observers,
            tx,
            mut rx,
        } = rig();
        let guard = sources.register(&clock);
        let (settings, doorbell) = unticked(clock, tx, &observers);
        let tap = recorded(guard, &clock, vec![mark("open")], settings);
        assert_eq!(word(&rx.recv().await.unwrap().1), "open");
        let mut scratch = Vec::new();
        // Whether the observer has taken everything up and lowered its stream's flag (it then
        // waits to be rung; a moment more lets it get from lowering the flag to the wait).
        let settled = |tap: &Tap| {
            let down = !tap.shared.rung.load(Ordering::SeqCst);
            async move {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                down
            }
        };
        // A first copy, rung: afterwards the observer waits with the flag down.
        tap.send(TapMsg::ResponseChunk(Bytes::from_static(b"x")));
        assert!(doorbell.ring(&mut scratch));
        assert_eq!(word(&rx.recv().await.unwrap().1), "resp");
        let mut waited = 0;
        while !settled(&tap).await {
            waited += 1;
            assert!(waited < 300, "the flag never came down");
        }
        for _ in 0..100 {
            tap.send(TapMsg::ResponseChunk(Bytes::from_static(b"x")));
        }
        assert_eq!(doorbell.ready.lock().unwrap().len(), 1, "listed once");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(rx.try_recv().is_err(), "nothing taken up before the ring");
        assert!(doorbell.ring(&mut scratch));
        for _ in 0..100 {
            assert_eq!(word(&rx.recv().await.unwrap().1), "resp");
        }
        // The end wakes the observer at once, with no ring.
        drop(tap);
        assert_eq!(word(&rx.recv().await.unwrap().1), "close");
        assert!(doorbell.ready.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_filling_queue_wakes_its_observer_without_a_ring() {
        let Rig {
            clock,
            sources,
            observers,
            tx,
            mut rx,
        } = rig();
        let (settings, doorbell) = unticked(clock, tx, &observers);
        let tap = recorded(
            sources.register(&clock),
            &clock,
            vec![mark("open")],
            settings,
        );
        // Once it has sent its opening the observer goes to wait (a moment lets it get there).
        assert_eq!(word(&rx.recv().await.unwrap().1), "open");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        // Just past a quarter of the bytes bound, in copies of 64 KiB: the last one wakes the
        // observer, which takes all of them up with no ring. (A copy sent after the observer
        // caught up would be listed for the next ring instead, which this test never gives.)
        let chunk = Bytes::from(vec![0u8; 64 << 10]);
        let n = MAX_QUEUED_BYTES / 4 / chunk.len() + 1;
        for _ in 0..n {
            tap.send(TapMsg::ResponseChunk(chunk.clone()));
        }
        let taken = async {
            for _ in 0..n {
                assert_eq!(word(&rx.recv().await.unwrap().1), "resp");
            }
        };
        // A bound for a failure to fail, not a timing: nothing would ever wake it otherwise.
        tokio::time::timeout(std::time::Duration::from_secs(60), taken)
            .await
            .expect("taken up without a ring");
        assert_eq!(
            doorbell.ready.lock().unwrap().len(),
            1,
            "listed by its first copy, never rung"
        );
        drop(tap);
        assert_eq!(word(&rx.recv().await.unwrap().1), "close");
    }

    #[tokio::test]
    async fn the_ticker_parks_when_quiet_and_the_next_copy_wakes_it() {
        let observers = Cores::start_observers(1).unwrap();
        let doorbell = Doorbell::start(&observers.spawner());
        let mut waited = 0;
        while !doorbell.parked.load(Ordering::SeqCst) {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            waited += 1;
            assert!(waited < 30_000, "the ticker never parked");
        }
        let (events, mut rx) = mpsc::channel(1024);
        let clock = Clock::start();
        let sources = Arc::new(Sources::default());
        let settings = Settings {
            clock,
            queue: 8,
            events,
            stall: Stall(false),
            observers: observers.spawner(),
            doorbell: doorbell.clone(),
            budget: Budget::unlimited(),
        };
        let tap = recorded(sources.register(&clock), &clock, vec![], settings);
        tap.send(TapMsg::ResponseChunk(Bytes::from_static(b"x")));
        // Taken up while the tap is still held: the parked ticker was woken and rang.
        assert_eq!(word(&rx.recv().await.unwrap().1), "resp");
        drop(tap);
        assert_eq!(word(&rx.recv().await.unwrap().1), "close");
    }

    #[tokio::test]
    async fn a_stamp_holds_the_watermark_through_the_write_and_dates_its_copy() {
        let Recording {
            tap,
            clock,
            sources,
            mut rx,
            observers: _observers,
            ..
        } = rig().recording(8, false, vec![mark("open")]);
        assert_eq!(word(&rx.recv().await.unwrap().1), "open");
        let stamp = tap.stamp().expect("the tap copies");
        let t = stamp.t;
        // The write: the copy is not queued yet, and the watermark may not pass its moment.
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let w = sources.watermark(clock.now_ms());
        assert!(w <= t, "watermark {w} passed a stamped copy at {t}");
        stamp.send(TapMsg::ResponseChunk(Bytes::from_static(b"x")));
        let (at, kind) = rx.recv().await.unwrap();
        assert_eq!(word(&kind), "resp");
        assert_eq!(
            at, t,
            "dated when its bytes passed, not when it was handed over"
        );
        // A stamp dropped with its write (the future cancelled) lets go of the watermark.
        let dropped = tap.stamp().expect("the tap copies");
        assert!(sources.watermark(clock.now_ms() + 1e6) < clock.now_ms() + 1e6);
        drop(dropped);
        for _ in 0..100 {
            let now = clock.now_ms();
            if sources.watermark(now) == now {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let now = clock.now_ms();
        assert_eq!(sources.watermark(now), now, "nothing pending holds it");
        drop(tap);
        while rx.recv().await.is_some() {}
    }

    #[tokio::test]
    async fn a_busy_stream_holds_the_watermark_at_its_last_work() {
        let Recording {
            tap,
            t_open,
            clock,
            sources,
            mut rx,
            observers: _observers,
        } = rig().recording(8, true, vec![mark("open")]);
        tap.send(TapMsg::ClientBytes(Bytes::from_static(b"x")));
        // Its copy is queued and not taken up: nothing after the opening may be released.
        let w = sources.watermark(clock.now_ms() + 1e6);
        assert!(
            w <= t_open,
            "watermark {w} passed the stream's pending work at {t_open}"
        );
        drop(tap);
        while rx.recv().await.is_some() {}
    }

    #[tokio::test]
    async fn a_tunnel_copy_whose_write_waits_is_queued_before_the_other_direction_goes_on() {
        use std::time::Duration;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let Recording {
            tap,
            mut rx,
            observers: _observers,
            ..
        } = rig().recording(8, false, vec![mark("open")]);
        assert_eq!(word(&rx.recv().await.unwrap().1), "open");
        let (mut client, client_end) = tokio::io::duplex(64);
        let (mut upstream, upstream_end) = tokio::io::duplex(64);
        // The client's side takes one byte and then waits until the client reads.
        let (to_client, mut client_reads) = tokio::io::duplex(1);
        let (cr, _) = tokio::io::split(client_end);
        let (ur, _) = tokio::io::split(upstream_end);
        let log =
            crate::exchange::ExchangeLog::new(&Default::default(), "t", &http::Method::GET, "/");
        let timers = crate::timers::Timers::new(tokio::runtime::Handle::current());
        let splice = super::super::ws::splice(
            (Bytes::new(), Box::new(cr), Box::new(to_client)),
            (Bytes::new(), Box::new(ur), Box::new(tokio::io::sink())),
            Some(tap),
            &log,
            &timers,
            Duration::from_secs(3600),
        );
        tokio::pin!(splice);
        // The splice runs for a while (it cannot end: both sides are open).
        let step = Duration::from_millis(2);
        upstream.write_all(b"down").await.unwrap();
        assert!(tokio::time::timeout(step, splice.as_mut()).await.is_err());
        // While the upstream's bytes wait to be written, the client's pass, stamped later.
        client.write_all(b"up").await.unwrap();
        assert!(tokio::time::timeout(step, splice.as_mut()).await.is_err());
        drop((client, upstream));
        let mut down = Vec::new();
        let (read, ()) = tokio::join!(client_reads.read_to_end(&mut down), splice);
        read.unwrap();
        assert_eq!(down, b"down");
        assert_eq!(
            log.bytes(crate::body::Flow::Request)
                .load(Ordering::Relaxed),
            2
        );
        assert_eq!(
            log.bytes(crate::body::Flow::Response)
                .load(Ordering::Relaxed),
            4
        );
        let mut got = Vec::new();
        while let Some(ev) = rx.recv().await {
            got.push(ev);
        }
        let words: Vec<String> = got.iter().map(|(_, k)| word(k)).collect();
        assert_eq!(
            words,
            ["server", "client", "close"],
            "queued in stamp order"
        );
        assert!(got[0].0 < got[1].0, "each dated by its own stamp");
    }
}
