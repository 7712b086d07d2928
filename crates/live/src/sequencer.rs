//! Holding events back until the watermark passes them, and releasing them in `t` order.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use correlator::{Event, EventKind, Millis};

#[derive(Debug)]
struct Held {
    t: Millis,
    seq: u64,
    kind: EventKind,
}

impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Held {
    // Reversed: BinaryHeap is a max-heap and we want the oldest (then first-arrived) first.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .t
            .total_cmp(&self.t)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

/// How many events the [`Sequencer`] holds at most (a few tens of MB). A source that holds
/// the watermark for long (an observer stuck on one stream) would otherwise let every other
/// stream's events pile up behind it for as long as it is stuck. Past the bound the oldest
/// events are released whatever the watermark says: memory stays bounded, and the price is
/// paid by the late stream alone (its events, when they come, are moved up like any late
/// event, and a decision near them may have been taken without them), counted in
/// [`Sequencer::forced`] and logged.
pub const MAX_HELD: usize = 1 << 18;

/// Holds events back until the watermark passes them and releases them in `t` order (ties in
/// arrival order), holding at most a bound of them ([`MAX_HELD`]). Sans-IO, so the ordering
/// rules are unit-tested on their own.
#[derive(Debug)]
pub struct Sequencer {
    heap: BinaryHeap<Held>,
    seq: u64,
    bound: usize,
    /// Every event released so far is older than this.
    released: Millis,
    /// Events that arrived stamped before what was already released and were moved up.
    pub late: u64,
    /// Events released before the watermark passed them, because the bound was reached.
    pub forced: u64,
}

impl Default for Sequencer {
    fn default() -> Self {
        Sequencer::with_bound(MAX_HELD)
    }
}

impl Sequencer {
    /// A sequencer holding at most `bound` events between two releases.
    pub fn with_bound(bound: usize) -> Self {
        Sequencer {
            heap: BinaryHeap::new(),
            seq: 0,
            bound,
            released: 0.0,
            late: 0,
            forced: 0,
        }
    }

    /// Offers an event. One stamped before what was already released cannot be fed in its
    /// place any more; it is moved up to the release point (for MCP reports that is simply
    /// when the report reached the correlator, which is what their `t` means).
    pub fn offer(&mut self, t: Millis, kind: EventKind) {
        let t = if t < self.released {
            self.late += 1;
            self.released
        } else {
            t
        };
        self.seq += 1;
        self.heap.push(Held {
            t,
            seq: self.seq,
            kind,
        });
    }

    /// Releases, in order, every held event older than `w`, and then the oldest of the rest
    /// while more than the bound are held.
    pub fn release(&mut self, w: Millis, mut each: impl FnMut(Event)) {
        while let Some(h) = self.heap.peek() {
            if h.t >= w {
                if self.heap.len() <= self.bound {
                    break;
                }
                self.forced += 1;
            }
            let h = self.heap.pop().expect("peeked");
            if h.t > self.released {
                self.released = h.t;
            }
            each(Event {
                t: h.t,
                kind: h.kind,
            });
        }
        if w > self.released {
            self.released = w;
        }
    }

    /// Whether no event is held.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Releases everything (shutdown).
    pub fn release_all(&mut self, mut each: impl FnMut(Event)) {
        while let Some(h) = self.heap.pop() {
            if h.t > self.released {
                self.released = h.t;
            }
            each(Event {
                t: h.t,
                kind: h.kind,
            });
        }
    }

    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.heap.len()
    }
}
