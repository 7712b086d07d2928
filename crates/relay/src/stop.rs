//! Stopping the data plane: no new connections, what is in flight ends within the drain
//! bound (or at once, on a second signal), tunnels are cut.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::cores::Cores;
use crate::exchange::FailedExchanges;
use crate::server::Relay;

/// How a stop went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drain {
    /// Everything in flight ended within the bound.
    Drained,
    /// Something was still in flight at the bound; it was cut.
    Cut,
    /// Stopped at once on this signal, without waiting for what was in flight.
    AtOnce(i32),
}

/// A data plane that stopped accepting and drained: how the drain went. It still holds the
/// runtimes the connections ran on, so that whatever was cut keeps its observers until the
/// caller has taken their last events; [`Drained::finish`] lets them go.
pub struct Drained {
    pub how: Drain,
    failed: Arc<FailedExchanges>,
    cores: Cores,
    observers: Cores,
}

impl Drained {
    /// Ends what still ran on the relay's runtimes (connections first, then the observation
    /// threads) and returns its failed exchanges: (mount, failure word, how many), by mount
    /// then word. An exchange cut here counts too.
    pub fn finish(self) -> Vec<(String, &'static str, u64)> {
        drop(self.cores);
        drop(self.observers);
        self.failed.counts()
    }
}

impl Relay {
    /// Failed exchanges so far, as [`Drained::finish`] gives them at the end: for whoever
    /// watches a running relay (`windowtap run` says within seconds that its host's upstream
    /// keeps failing, rather than only once the host has given up).
    pub fn failed_so_far(&self) -> Vec<(String, &'static str, u64)> {
        self.failed.counts()
    }

    /// How long in-flight requests and streams may take to end at the stop (`--drain`).
    pub fn drain_bound(&self) -> Duration {
        self.drain
    }

    /// Stops accepting, then lets what is in flight end, up to the drain bound, or until
    /// `at_once` completes (a second signal, yielding its number), then cuts the tunnels.
    /// `signalled`: whether the stop follows a signal, so that the log says "a second
    /// signal" only then.
    pub async fn drain(self, signalled: bool, at_once: impl Future<Output = i32>) -> Drained {
        tokio::pin!(at_once);
        let _ = self.stop_accepting.send(());
        // The listener is closed once the accept loop has returned: new connections are
        // refused from here on.
        let _ = self.server.await;
        // Idle keep-alive connections close now; ones with a request in flight after it.
        let _ = self.draining.send(true);
        let streams = || self.sources.as_ref().map_or(0, |s| s.len());
        let connections = self.draining.receiver_count();
        let tunnels = self.tunnels.len();
        let drain_ms = self.drain.as_millis() as u64;
        if signalled {
            tracing::info!(
                connections,
                streams = streams(),
                tunnels,
                drain_ms,
                "draining: no new connections; a second signal stops at once"
            );
        } else {
            tracing::info!(
                connections,
                streams = streams(),
                tunnels,
                drain_ms,
                "draining: no new connections; a signal stops at once"
            );
        }
        let draining = &self.draining;
        let open_tunnels = &self.tunnels;
        let ended = async {
            draining.closed().await;
            // Observed streams deregister once their observer has sent its last events,
            // which may be a little after their connection ended; tunnels live on after
            // their connection's task.
            while streams() > 0 || open_tunnels.len() > 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        let how = tokio::select! {
            r = tokio::time::timeout(self.drain, ended) => match r {
                Ok(()) => Drain::Drained,
                Err(_) => Drain::Cut,
            },
            signo = &mut at_once => Drain::AtOnce(signo),
        };
        match how {
            Drain::Drained => {}
            Drain::Cut => tracing::warn!(
                connections = self.draining.receiver_count(),
                streams = streams(),
                tunnels = self.tunnels.len(),
                "still in flight after --drain: cut, and their remaining events not correlated"
            ),
            Drain::AtOnce(_) => tracing::warn!(
                connections = self.draining.receiver_count(),
                streams = streams(),
                tunnels = self.tunnels.len(),
                "second signal: stopping at once, in-flight streams cut"
            ),
        }
        // HTTP streams still open end with the runtime; tunnels are ended here, so that an
        // in-process caller (`run`) does not keep them either.
        self.tunnels.cut();
        Drained {
            how,
            failed: self.failed,
            cores: self.cores,
            observers: self.observers,
        }
    }
}
