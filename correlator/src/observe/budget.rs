//! One memory budget across every observer of a process.
//!
//! Each observer holds an [`Account`] on the shared [`Budget`]. Before a step it asks how much
//! it may hold ([`Account::allowance`]: its share of the budget, less what other observers
//! hold), bounds its buffers and decoders by that, and after the step settles what it really
//! holds ([`Account::settle`]). A stream whose observation would need more is marked
//! `observation_lost` with reason `budget` and lets its buffers go; forwarding never learns
//! of it. Without a budget (tests, replay) an account allows everything up to the observers'
//! fixed caps.
//!
//! Steps of different observers may run at once (one per observation thread), each seeing the
//! same free room before either settles: the budget can be overshot by at most one share per
//! concurrent step, which the caller sizes its threads and the share for.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Buffers larger than this are released after each event or step instead of being kept for
/// the next one: a stream's steady state holds only small buffers.
pub(super) const KEEP: usize = 64 * 1024;

/// The process-wide budget. Cheap to clone (an `Arc`).
#[derive(Debug, Clone)]
pub struct Budget {
    shared: Arc<Pool>,
}

#[derive(Debug)]
struct Pool {
    limit: usize,
    /// What one stream may hold at most.
    share: usize,
    held: AtomicUsize,
}

impl Budget {
    /// A budget of `limit` bytes of which one stream may hold at most `share`.
    pub fn new(limit: usize, share: usize) -> Budget {
        Budget {
            shared: Arc::new(Pool {
                limit,
                share: share.min(limit),
                held: AtomicUsize::new(0),
            }),
        }
    }

    /// No budget: accounts allow everything (the observers' own caps still apply).
    pub fn unlimited() -> Budget {
        Budget::new(usize::MAX, usize::MAX)
    }

    /// Bytes held now, by all accounts and holds (what tests check the accounting against).
    pub fn held(&self) -> usize {
        self.shared.held.load(Ordering::Relaxed)
    }

    /// Holds `bytes` if the budget has room for them (what every account and every hold
    /// already holds, plus these, within the limit); `false` holds nothing. For memory that is
    /// no observer's own buffers but is there because of observation: the relay's copies
    /// queued for an observer. Give them back with [`Budget::release`].
    pub fn try_hold(&self, bytes: usize) -> bool {
        let s = &self.shared;
        s.held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                held.checked_add(bytes).filter(|&total| total <= s.limit)
            })
            .is_ok()
    }

    /// Gives back `bytes` held with [`Budget::try_hold`].
    pub fn release(&self, bytes: usize) {
        self.shared.held.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// A new, empty account for one stream.
    pub fn account(&self) -> Account {
        Account {
            budget: self.clone(),
            held: 0,
        }
    }
}

/// One stream's part of the budget. Dropping it gives back what it held.
#[derive(Debug)]
pub struct Account {
    budget: Budget,
    held: usize,
}

impl Default for Account {
    fn default() -> Self {
        Budget::unlimited().account()
    }
}

impl Account {
    /// How many bytes this stream may hold in total for its next step: its share, or what it
    /// holds plus what is free, whichever is smaller.
    pub(crate) fn allowance(&self) -> usize {
        let s = &self.budget.shared;
        let others = s.held.load(Ordering::Relaxed).saturating_sub(self.held);
        s.share.min(s.limit.saturating_sub(others))
    }

    /// Whether the budget limits this account at all (`false` for [`Budget::unlimited`]).
    pub(crate) fn is_limited(&self) -> bool {
        self.budget.shared.limit != usize::MAX
    }

    /// Records that the stream now holds `bytes`.
    pub(crate) fn settle(&mut self, bytes: usize) {
        let held = &self.budget.shared.held;
        if bytes > self.held {
            held.fetch_add(bytes - self.held, Ordering::Relaxed);
        } else {
            held.fetch_sub(self.held - bytes, Ordering::Relaxed);
        }
        self.held = bytes;
    }
}

impl Drop for Account {
    fn drop(&mut self) {
        self.settle(0);
    }
}

/// Empties `v`, releasing its allocation if it grew past [`KEEP`].
pub(super) fn clear_or_release(v: &mut Vec<u8>) {
    if v.capacity() > KEEP {
        *v = Vec::new();
    } else {
        v.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_share_the_limit_with_the_accounts() {
        let b = Budget::new(100, 60);
        let mut a = b.account();
        a.settle(50);
        assert!(b.try_hold(40));
        assert!(!b.try_hold(11), "past the limit nothing is held");
        assert_eq!(b.held(), 90);
        assert_eq!(
            b.account().allowance(),
            10,
            "held copies leave an account less room"
        );
        b.release(40);
        assert!(b.try_hold(50));
        assert!(Budget::unlimited().try_hold(usize::MAX / 2));
    }

    #[test]
    fn a_share_and_the_free_room_bound_each_account() {
        let b = Budget::new(100, 60);
        let mut a = b.account();
        let mut c = b.account();
        assert_eq!(a.allowance(), 60, "the share");
        a.settle(50);
        assert_eq!(c.allowance(), 50, "what is free");
        assert_eq!(a.allowance(), 60, "its own holding counts as its own");
        c.settle(50);
        assert_eq!(b.held(), 100);
        drop(a);
        assert_eq!(b.held(), 50);
        assert_eq!(c.allowance(), 60);
        c.settle(10);
        assert_eq!(b.held(), 10);
    }

    #[test]
    fn unlimited_allows_everything() {
        let a = Account::default();
        assert!(!a.is_limited());
        assert_eq!(a.allowance(), usize::MAX);
    }
}
