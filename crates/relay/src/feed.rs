//! What the data plane hands on, and the one interface it offers whoever listens: events
//! stamped with the time their bytes passed ([`Timed`], on [`Observations::events`]), the
//! watermark's sources (every observed stream that may still produce events, [`Sources`]),
//! and the host's trace parents read from request headers ([`HostParents`]).
//!
//! The relay knows nothing of what is done with them. The live pipeline (`live`) correlates
//! them behind the watermark `W`: a time before which no observed stream can still produce
//! an event. How `W` is known without locks on the data path: every observed stream is a
//! [`Source`] with a `pending` counter (copies handed to its observer and not yet fully
//! turned into events) and `last_t` (the time of the copy its observer last took up). The
//! data path increments `pending` *before* reading the clock for a copy; the observer sends
//! the copy's events *before* decrementing it. So, reading the clock first (`now0`) and then
//! each source: a source with nothing pending cannot produce an event older than `now0`, and
//! one with something pending cannot produce one older than its `last_t` (observers never
//! stamp backwards). The reader reads the marks first ([`Sources::watermark`]) and drains
//! the events after, so every event older than `W` has arrived when `W` is used.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use correlator::{EventKind, Millis};
use dashmap::DashMap;
use sys::clock::Clock;
use tokio::sync::mpsc;

use crate::host_trace::HostParents;

/// Where the relay's observations go: whoever starts the relay makes one, keeps the
/// receiving end of `events` and reads the watermark from `sources`.
#[derive(Clone)]
pub struct Observations {
    pub events: mpsc::Sender<Timed>,
    pub sources: Arc<Sources>,
    /// Where the relay leaves a stream's host parent (`--join-host-trace`).
    pub host_parents: Option<Arc<HostParents>>,
}

/// One timed event, as sources hand them over (raw ids; pseudonymized here).
pub type Timed = (Millis, EventKind);

/// How many relay events may wait between the observers and the correlator task before the
/// observers wait (they are off the data path, so waiting there is harmless).
pub const EVENT_QUEUE: usize = 8192;

/// The watermark state of one observed stream (see the module docs).
#[derive(Debug)]
pub struct Source {
    pending: AtomicU64,
    last_t: AtomicU64,
}

impl Source {
    /// Counts one copy (or other unit of observer work) as pending. Call before reading the
    /// clock for its time.
    pub fn begin(&self) {
        self.pending.fetch_add(1, Ordering::SeqCst);
    }

    /// One pending unit is done: its events (if any) were sent.
    pub fn done(&self) {
        self.pending.fetch_sub(1, Ordering::SeqCst);
    }

    /// The observer took up work stamped `t` (non-decreasing).
    pub fn took_up(&self, t: Millis) {
        self.last_t.store(t.to_bits(), Ordering::SeqCst);
    }

    fn mark(&self, now0: Millis) -> Millis {
        if self.pending.load(Ordering::SeqCst) == 0 {
            now0
        } else {
            f64::from_bits(self.last_t.load(Ordering::SeqCst))
        }
    }
}

/// Every observed stream that may still produce events.
///
/// A concurrent map (dashmap): every stream's task registers and deregisters here, and the
/// correlator task reads every mark each round. The reader visits the map shard by shard,
/// so it can miss a stream only if that stream was registered after the reader passed its
/// shard, so after `now0` was read: registration comes before any of the stream's times is
/// read from the clock, and none of them can be older than `now0`. The watermark argument
/// above holds as it did under one lock.
#[derive(Debug, Default)]
pub struct Sources {
    next: AtomicU64,
    live: DashMap<u64, Arc<Source>>,
}

/// A registered source; deregisters when dropped (after its last events were sent).
#[derive(Debug)]
pub struct SourceGuard {
    id: u64,
    source: Arc<Source>,
    sources: Arc<Sources>,
}

impl SourceGuard {
    pub fn source(&self) -> &Arc<Source> {
        &self.source
    }
}

impl Drop for SourceGuard {
    fn drop(&mut self) {
        self.sources.live.remove(&self.id);
    }
}

impl Sources {
    /// Registers a stream with one unit of work already pending (its opening), before any
    /// of its times is read from `clock`.
    pub fn register(self: &Arc<Self>, clock: &Clock) -> SourceGuard {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let source = Arc::new(Source {
            pending: AtomicU64::new(1),
            last_t: AtomicU64::new(0f64.to_bits()),
        });
        self.live.insert(id, source.clone());
        // Stamped after registration: the watermark may already have passed an earlier time.
        source.took_up(clock.now_ms());
        SourceGuard {
            id,
            source,
            sources: self.clone(),
        }
    }

    /// The watermark given `now0`, a clock reading taken before this call.
    pub fn watermark(&self, now0: Millis) -> Millis {
        self.live
            .iter()
            .fold(now0, |w, s| w.min(s.value().mark(now0)))
    }

    /// Streams still registered (in flight).
    pub fn len(&self) -> usize {
        self.live.len()
    }

    /// Whether no stream is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_source_holds_nothing_back_and_a_busy_one_holds_at_its_last_work() {
        let clock = Clock::start();
        let sources = Arc::new(Sources::default());
        let g = sources.register(&clock);
        let registered = f64::from_bits(g.source().last_t.load(Ordering::SeqCst));
        // Its opening is pending: the watermark stays at its registration.
        assert_eq!(sources.watermark(1e9), registered);
        g.source().took_up(registered + 2.0);
        assert_eq!(sources.watermark(1e9), registered + 2.0);
        g.source().done();
        assert_eq!(sources.watermark(1e9), 1e9);
        g.source().begin();
        assert_eq!(sources.watermark(1e9), registered + 2.0);
        g.source().done();
        drop(g);
        assert_eq!(sources.len(), 0);
        assert_eq!(sources.watermark(7.0), 7.0);
    }
}
