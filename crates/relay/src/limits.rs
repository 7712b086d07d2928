//! Limits: the process's open files, and how many clients the relay serves at once and how
//! long it waits for their request heads.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sys::ratelimit::Repeated;

use rustix::process::{getrlimit, setrlimit, Resource};

/// Each relayed stream holds two sockets; the usual soft limit of 1024 descriptors would cap
/// the relay near 500 streams, so the soft limit is raised to the hard one.
pub fn raise_open_files_limit() {
    let lim = getrlimit(Resource::Nofile);
    if lim.current < lim.maximum || (lim.current.is_some() && lim.maximum.is_none()) {
        let raised = rustix::process::Rlimit {
            current: lim.maximum,
            maximum: lim.maximum,
        };
        if setrlimit(Resource::Nofile, raised).is_err() {
            tracing::debug!("could not raise the open files limit");
        }
    }
}

/// Descriptors kept back from client connections: files, the ingest socket and its
/// wrappers, the listener, refusals in flight.
const RESERVED_FDS: u64 = 256;

/// What one client connection may hold at most while it forwards, for the default cap: its
/// read buffer with a request read ahead (up to 80 KiB), the upstream read buffer (16–32 KiB),
/// TLS buffers both ways on the upstream side (about 2 × 34 KiB with rustls), the tunnel or
/// exchange state; rounded up. Observation's memory is bounded apart (`--observer-budget`).
const CONNECTION_BYTES: usize = 256 * 1024;

/// The share of the machine's memory the default cap lets connections use at their most.
const CONNECTION_MEMORY_SHARE: usize = 4;

/// The default connection cap: what the open files allow (each client connection holds its
/// own socket and, while forwarding, one to the upstream) and what a quarter of the memory
/// allows at [`CONNECTION_BYTES`] each, whichever is smaller. With descriptors alone, a large
/// open files limit (a million is common) let the connections outgrow the machine.
pub(crate) fn default_max_connections() -> usize {
    let soft = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    connection_cap(soft, physical_memory())
}

/// The cap for `soft` open files and `memory` bytes (at least 16).
fn connection_cap(soft: u64, memory: usize) -> usize {
    let by_files = (soft.saturating_sub(RESERVED_FDS) / 2).min(1 << 20) as usize;
    let by_memory = memory / CONNECTION_MEMORY_SHARE / CONNECTION_BYTES;
    by_files.min(by_memory).max(16)
}

/// The machine's memory in bytes (1 GiB when the system does not say).
pub fn physical_memory() -> usize {
    let info = rustix::system::sysinfo();
    let total = (info.totalram as usize).saturating_mul((info.mem_unit as usize).max(1));
    if total > 0 {
        total
    } else {
        1 << 30
    }
}

/// How the relay treats its clients: how long a connection may take to send a request head,
/// and how many may be open at once.
#[derive(Debug)]
pub(crate) struct Clients {
    /// From a connection's start or the end of its previous response to a complete request
    /// head (slow and idle clients alike are closed past it).
    pub header_timeout: Duration,
    /// Open client connections (WebSocket tunnels included) beyond which new clients are
    /// refused with a 503.
    pub max: usize,
    /// Tunnels beyond which a WebSocket handshake is refused with a 503 ([`tunnel_cap`]).
    pub max_tunnels: usize,
    open: Arc<AtomicUsize>,
    refusing: Arc<AtomicUsize>,
}

/// A client connection counted as open for as long as this lives.
pub(crate) struct Admitted(Arc<AtomicUsize>);

impl Drop for Admitted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What to do with a connection just accepted.
pub(crate) enum Admission {
    Admit(Admitted),
    /// At the cap: answer 503 and close.
    Refuse(Admitted),
    /// At the cap with too many refusals already in flight: close at once.
    Drop,
}

/// Refusals answered at once; past this many in flight, new connections are closed unanswered
/// (a refusal holds a descriptor for as long as the client takes to send its request head).
const MAX_REFUSING: usize = 64;

/// How long a refused client has to send its request head before it is closed unanswered.
pub(crate) const REFUSAL_HEADER_TIMEOUT: Duration = Duration::from_secs(2);

impl Clients {
    pub(crate) fn new(header_timeout: Duration, max: usize) -> Self {
        Clients {
            header_timeout,
            max: max.max(1),
            max_tunnels: tunnel_cap(max.max(1)),
            open: Arc::default(),
            refusing: Arc::default(),
        }
    }

    /// Admits a connection if fewer than the cap are open, counting `tunnels` (upgraded
    /// connections, which have left their connection task) among them.
    pub(crate) fn admit(&self, tunnels: usize) -> Admission {
        let open = self.open.fetch_add(1, Ordering::SeqCst) + 1;
        let admitted = Admitted(self.open.clone());
        if open + tunnels <= self.max {
            return Admission::Admit(admitted);
        }
        drop(admitted);
        let refusing = self.refusing.fetch_add(1, Ordering::SeqCst) + 1;
        let refusal = Admitted(self.refusing.clone());
        if let Some(left_out) = AT_CAP_LOG.allow() {
            tracing::warn!(
                max_connections = self.max,
                left_out,
                "at the connection cap: new clients are refused with 503 (--max-connections)"
            );
        }
        if refusing <= MAX_REFUSING {
            Admission::Refuse(refusal)
        } else {
            Admission::Drop
        }
    }
}

/// The tunnels allowed under a connection cap of `max`: all but an eighth of it (at least one
/// place, and at least one kept for other clients once the cap is 2 or more). A tunnel lives
/// as long as its two sides want (hours, for a WebSocket whose server pings), while an HTTP
/// client's connection is bounded by the header timeout between requests; without a reserve,
/// tunnels that stay open (or a peer that opens them and sends nothing) held every place and
/// each new client got a 503 for as long as they stayed.
pub(crate) fn tunnel_cap(max: usize) -> usize {
    max.saturating_sub((max / 8).max(1)).max(1)
}

static AT_CAP_LOG: Repeated = Repeated::new(1, Duration::from_secs(10));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_cap_is_what_both_the_open_files_and_the_memory_allow() {
        const GIB: usize = 1 << 30;
        // A million descriptors on a small machine: memory decides (2 GiB / 4 / 256 KiB).
        assert_eq!(connection_cap(1 << 20, 2 * GIB), 2048);
        // The usual soft limit on a large one: descriptors decide ((1024 - 256) / 2).
        assert_eq!(connection_cap(1024, 64 * GIB), 384);
        // Never fewer than 16, nor more than a million.
        assert_eq!(connection_cap(100, 64 * GIB), 16);
        assert_eq!(connection_cap(u64::MAX, usize::MAX), 1 << 20);
        assert!(physical_memory() >= 1 << 20);
    }

    #[test]
    fn tunnels_leave_an_eighth_of_the_cap_to_other_clients() {
        assert_eq!(tunnel_cap(1), 1);
        assert_eq!(tunnel_cap(2), 1);
        assert_eq!(tunnel_cap(8), 7);
        assert_eq!(tunnel_cap(40), 35);
        assert_eq!(tunnel_cap(2048), 1792);
    }

    #[test]
    fn admits_up_to_the_cap_counting_tunnels_then_refuses_then_drops() {
        let c = Clients::new(Duration::from_secs(1), 3);
        let a = c.admit(0);
        let b = c.admit(1);
        assert!(matches!(a, Admission::Admit(_)) && matches!(b, Admission::Admit(_)));
        // Two connections and one tunnel: the cap.
        assert!(matches!(c.admit(1), Admission::Refuse(_)));
        let refusals: Vec<_> = (0..=MAX_REFUSING).map(|_| c.admit(1)).collect();
        assert!(matches!(refusals.last(), Some(Admission::Drop)));
        drop(refusals);
        drop(b);
        assert_eq!(c.open.load(Ordering::SeqCst), 1);
        assert!(matches!(c.admit(1), Admission::Admit(_)));
    }
}
