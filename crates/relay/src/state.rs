//! What every connection handler shares.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use correlator::observe::Budget;

use super::limits::Clients;
use super::mounts::Mounts;
use super::tap;
use super::timers::Timers;
use super::tunnels::Tunnels;
use super::upstream::{self, UpstreamClient};
use crate::exchange::FailedExchanges;
use crate::feed::Observations;
use sys::clock::Clock;

/// Everything a connection handler needs.
pub(crate) struct State {
    pub mounts: Mounts,
    /// For WebSocket handshakes (their connection is handed over to the splice).
    pub client: UpstreamClient,
    /// For everything else: connections the exchange drives itself ([`upstream`]).
    pub upstreams: Arc<upstream::Upstreams>,
    pub clock: Clock,
    /// Where observations go (`None`: every stream is forwarded unobserved).
    pub observations: Option<Observations>,
    pub response_timeout: Duration,
    /// How long an upstream may send nothing of a response body ([`h1::Exchange`]).
    pub body_timeout: Duration,
    /// How long a client may send nothing of a request body it announced.
    pub client_body_timeout: Duration,
    /// How long a tunnel may pass nothing either way ([`h1::Tunnel::with_idle_timeout`]).
    pub tunnel_idle: Duration,
    /// The timers connections set, kept off the cores ([`super::timers`]).
    pub(super) timers: Timers,
    /// Spliced WebSocket tunnels in flight (the stop drains and cuts them).
    pub tunnels: Arc<Tunnels>,
    /// Failed exchanges by mount and failure word, for the stop's summary.
    pub failed: Arc<FailedExchanges>,
    /// Client timeouts and the connection cap.
    pub clients: Clients,
    /// The memory budget every observer of the run shares.
    pub budget: Budget,
    /// Who the hosts are: each accepted connection is resolved here (off the data path).
    pub hosts: hostid::Hosts,
    pub(super) tap_settings: tap::Settings,
    pub(super) next_stream: AtomicU64,
}

impl State {
    /// Starts observing a stream: registers it with the watermark, opens its observer and
    /// returns the data path's tap (`None` when nothing observes).
    pub(crate) fn start_tap(
        &self,
        open: impl FnOnce(String, &mut Vec<correlator::EventKind>) -> Box<dyn tap::StreamObserver>,
    ) -> Option<tap::Tap> {
        let observations = self.observations.as_ref()?;
        let guard = observations.sources.register(&self.clock);
        let t_open = self.clock.now_ms();
        let mut opening = Vec::new();
        let stream = self.next_stream();
        let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            open(stream.clone(), &mut opening)
        }));
        let Ok(observer) = opened else {
            // The stream goes unobserved; its registration ends with `guard` here.
            tracing::warn!("an observer failed to open; the stream is forwarded unobserved");
            return None;
        };
        let observer = Box::new(tap::Contained::new(stream, observer));
        Some(tap::start(
            guard,
            t_open,
            observer,
            opening,
            hostid::connection_host(),
            &self.tap_settings,
        ))
    }

    /// A fresh stream id (a per-run counter; it is pseudonymized like every id).
    pub(crate) fn next_stream(&self) -> String {
        format!("s{}", self.next_stream.fetch_add(1, Ordering::Relaxed) + 1)
    }
}
