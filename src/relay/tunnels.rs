//! The spliced WebSocket tunnels in flight, for the stop to wait for and then cut.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::watch;

/// The spliced WebSocket tunnels in flight. Once upgraded, a tunnel has left its HTTP
/// connection (whose task has ended), so the drain cannot see it there: each tunnel task is
/// registered here instead, and the stop waits for them like for HTTP streams, up to the
/// same bound, then cuts them.
#[derive(Debug)]
pub struct Tunnels {
    open: Arc<AtomicUsize>,
    cut: watch::Sender<bool>,
}

impl Default for Tunnels {
    fn default() -> Self {
        Tunnels {
            open: Arc::default(),
            cut: watch::channel(false).0,
        }
    }
}

/// Counts one tunnel as open for as long as it lives.
struct TunnelGuard(Arc<AtomicUsize>);

impl Drop for TunnelGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Tunnels {
    /// Registers a tunnel now (before its task is spawned, so a stop that starts meanwhile
    /// sees it) and returns its task: `splice` until it ends or the tunnels are cut.
    pub fn track(
        &self,
        splice: impl std::future::Future<Output = ()>,
    ) -> impl std::future::Future<Output = ()> {
        self.open.fetch_add(1, Ordering::SeqCst);
        let guard = TunnelGuard(self.open.clone());
        let mut cut = self.cut.subscribe();
        async move {
            let _guard = guard;
            tokio::select! {
                _ = splice => {}
                // Dropping the splice closes both sockets.
                _ = async {
                    if cut.wait_for(|c| *c).await.is_err() {
                        // Nobody can cut any more: the tunnel runs to its own end.
                        std::future::pending::<()>().await;
                    }
                } => {}
            }
        }
    }

    /// Tunnels still open.
    pub fn len(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// Ends every tunnel, open or still to be registered.
    pub(super) fn cut(&self) {
        self.cut.send_replace(true);
    }
}
