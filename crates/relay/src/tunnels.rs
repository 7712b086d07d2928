//! The spliced WebSocket tunnels in flight, for the stop to wait for and then cut.
//!
//! A tunnel is cut by aborting its task, not by a signal the task watches: a task that
//! selected over its splice and a shared stop signal polled that signal on every wake-up,
//! once per relayed message, and a signal's waiter is checked under its lock (one lock
//! shared by every tunnel of every core). The registry is touched when a tunnel opens,
//! when it ends and at the stop, never per message.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::task::AbortHandle;

/// The spliced WebSocket tunnels in flight. Once upgraded, a tunnel has left its HTTP
/// connection (whose task has ended), so the drain cannot see it there: each tunnel task is
/// registered here instead, and the stop waits for them like for HTTP streams, up to the
/// same bound, then cuts them.
#[derive(Debug, Default)]
pub(crate) struct Tunnels {
    open: Arc<AtomicUsize>,
    /// Tunnels open or being set up (a handshake under way): what [`Tunnels::claim`] bounds.
    claimed: Arc<AtomicUsize>,
    registry: Arc<Mutex<Registry>>,
}

/// A tunnel's place under the cap, held from before its handshake goes upstream until its
/// splice ends (or the handshake fails).
pub(crate) struct Claim(Arc<AtomicUsize>);

impl Drop for Claim {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[derive(Debug, Default)]
struct Registry {
    /// Set by [`Tunnels::cut`]: a tunnel that comes later is ended before it starts.
    cut: bool,
    next: u64,
    tasks: HashMap<u64, AbortHandle>,
    /// Tunnels whose task ended before its handle was registered (a task on another
    /// worker can run at once): their handle is not kept.
    ended_unregistered: HashSet<u64>,
}

impl Registry {
    fn lock(registry: &Mutex<Registry>) -> std::sync::MutexGuard<'_, Registry> {
        // Nothing panics while holding it; a poisoned registry is still consistent.
        registry.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Counts one tunnel as open, and keeps its abort handle registered, for as long as its
/// task lives (dropped when it ends, aborted or not).
struct TunnelGuard {
    id: u64,
    open: Arc<AtomicUsize>,
    registry: Arc<Mutex<Registry>>,
}

impl Drop for TunnelGuard {
    fn drop(&mut self) {
        let mut registry = Registry::lock(&self.registry);
        if registry.tasks.remove(&self.id).is_none() {
            registry.ended_unregistered.insert(self.id);
        }
        self.open.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Tunnels {
    /// Spawns `splice` as a tunnel task on the current runtime, registered until it ends or
    /// the tunnels are cut (dropping the splice closes both sockets). After a cut, `splice`
    /// is dropped unstarted.
    pub(crate) fn spawn(&self, splice: impl Future<Output = ()> + Send + 'static) {
        let id = {
            let mut registry = Registry::lock(&self.registry);
            if registry.cut {
                return;
            }
            registry.next += 1;
            self.open.fetch_add(1, Ordering::SeqCst);
            registry.next
        };
        let guard = TunnelGuard {
            id,
            open: self.open.clone(),
            registry: self.registry.clone(),
        };
        // Not under the lock: a runtime that is shutting down drops the task inside
        // `spawn`, on this thread, and its guard takes the lock.
        let task = tokio::spawn(async move {
            let _guard = guard;
            splice.await;
        });
        let mut registry = Registry::lock(&self.registry);
        if registry.ended_unregistered.remove(&id) {
            return;
        }
        if registry.cut {
            // The cut ran while the task was being spawned.
            task.abort();
            return;
        }
        registry.tasks.insert(id, task.abort_handle());
    }

    /// A place for one more tunnel, if fewer than `cap` are open or being set up. Counted
    /// before the handshake goes upstream, so handshakes in flight together cannot pass the
    /// cap.
    pub(crate) fn claim(&self, cap: usize) -> Option<Claim> {
        let before = self.claimed.fetch_add(1, Ordering::SeqCst);
        let claim = Claim(self.claimed.clone());
        (before < cap).then_some(claim)
    }

    /// Tunnels still open.
    pub(crate) fn len(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// Ends every tunnel, open or still to be registered.
    pub(super) fn cut(&self) {
        let mut registry = Registry::lock(&self.registry);
        registry.cut = true;
        for task in registry.tasks.values() {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sets its flag when dropped: the splice's sockets closing.
    struct Closes(Arc<std::sync::atomic::AtomicBool>);

    impl Drop for Closes {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    fn splice_until_dropped(
        closed: &Arc<std::sync::atomic::AtomicBool>,
    ) -> impl Future<Output = ()> {
        let sockets = Closes(closed.clone());
        async move {
            let _sockets = sockets;
            std::future::pending::<()>().await;
        }
    }

    async fn settle(tunnels: &Tunnels) {
        for _ in 0..1000 {
            if tunnels.len() == 0 {
                return;
            }
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_tunnel_counts_until_it_ends_and_leaves_no_handle_behind() {
        let tunnels = Tunnels::default();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tunnels.spawn(async move {
            let _ = rx.await;
        });
        assert_eq!(tunnels.len(), 1);
        tx.send(()).unwrap();
        settle(&tunnels).await;
        assert_eq!(tunnels.len(), 0);
        assert!(Registry::lock(&tunnels.registry).tasks.is_empty());
    }

    #[tokio::test]
    async fn a_cut_drops_every_open_tunnel_and_any_that_comes_later() {
        let tunnels = Tunnels::default();
        let closed: Vec<_> = (0..3)
            .map(|_| Arc::new(std::sync::atomic::AtomicBool::new(false)))
            .collect();
        for c in &closed {
            tunnels.spawn(splice_until_dropped(c));
        }
        tokio::task::yield_now().await;
        assert_eq!(tunnels.len(), 3);
        assert!(closed.iter().all(|c| !c.load(Ordering::SeqCst)));

        tunnels.cut();
        settle(&tunnels).await;
        assert_eq!(tunnels.len(), 0);
        assert!(closed.iter().all(|c| c.load(Ordering::SeqCst)));

        let late = Arc::new(std::sync::atomic::AtomicBool::new(false));
        tunnels.spawn(splice_until_dropped(&late));
        assert!(late.load(Ordering::SeqCst), "dropped unstarted");
        assert_eq!(tunnels.len(), 0);
    }
}
