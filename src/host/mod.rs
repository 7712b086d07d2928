//! Host identity (docs/design.md §3 "Host"): which host process (one Claude Code or Codex,
//! with all its subagents) a stream or an MCP call belongs to, so that one relay can serve
//! every session of its user at once.
//!
//! - A stream's host is the local process that owns the client end of its connection: the
//!   relay asks [`Hosts::connection`] at accept time, and the stream's observer waits for the
//!   answer before it sends `stream_open` (bounded by [`WAIT`]). Its source stays pending
//!   meanwhile, so the watermark (`crate::live`) holds every decision back until the stream's
//!   opening, host included, has reached the correlator.
//! - An MCP call's host is the nearest ancestor of its wrapper (pid from the ingest socket's
//!   peer credentials, never from what the wrapper says) that owns or owned a client
//!   connection of this relay: [`Hosts::ancestors`] once per wrapper connection, then
//!   [`Hosts::host_among`] per call.
//!
//! A host is a [`ProcId`]: pid and start time, so a reused pid is another host. Its id in
//! events is [`ProcId::raw`], pseudonymized like every other id by the sanitizing door.
//! Unknown (`None`) when the process table cannot tell: another OS, a remote client, a
//! process gone before it was seen; a null host never rules anything out.
//!
//! All `/proc` reading happens on one thread of its own ([`resolver`]), never on the data
//! path: the accept loop only queues a request, and nobody waits longer than [`WAIT`].

#[cfg(target_os = "linux")]
mod procfs;
mod resolver;
#[cfg(target_os = "linux")]
mod sockdiag;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

/// How long anyone waits for an answer before taking the host as unknown. Resolutions take
/// a few milliseconds (docs/hosts.md); this only bounds a stuck or flooded resolver.
pub const WAIT: Duration = Duration::from_secs(2);

/// Most host processes remembered per run (each is 16 bytes; a run sees a handful).
const MAX_SEEN: usize = 65_536;

/// One process as the kernel knows it: pid and start time (clock ticks after boot, field 22
/// of `/proc/<pid>/stat`), so two processes that had the same pid are never one host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProcId {
    pub pid: u32,
    pub start: u64,
}

impl ProcId {
    /// The raw host id, `pid:start`; only its pseudonym is ever written.
    pub fn raw(&self) -> String {
        format!("{}:{}", self.pid, self.start)
    }
}

/// The answer for one accepted connection, once known.
#[derive(Debug, Clone)]
pub struct ConnHost(watch::Receiver<Option<Option<ProcId>>>);

impl ConnHost {
    /// An answer already known (`windowtap run`'s host, or no host support).
    pub fn known(host: Option<ProcId>) -> ConnHost {
        ConnHost(watch::channel(Some(host)).1)
    }

    /// An answer still to come, and where to give it (for tests).
    #[cfg(test)]
    pub fn pending() -> (watch::Sender<Option<Option<ProcId>>>, ConnHost) {
        let (tx, rx) = watch::channel(None);
        (tx, ConnHost(rx))
    }

    /// The connection's host, waiting for the resolver up to [`WAIT`].
    pub async fn wait(mut self) -> Option<ProcId> {
        match tokio::time::timeout(WAIT, self.0.wait_for(Option::is_some)).await {
            Ok(Ok(v)) => v.flatten(),
            // The resolver went away or is behind: unknown.
            _ => None,
        }
    }
}

tokio::task_local! {
    /// The host of the client connection whose task this is (set by the relay's accept loop
    /// around each connection, read where its streams start).
    static CONNECTION: ConnHost;
}

/// Runs `f` with `host` as its connection's host.
pub async fn with_connection<F: std::future::Future>(host: ConnHost, f: F) -> F::Output {
    CONNECTION.scope(host, f).await
}

/// The host of the connection the current task serves, if the accept loop set one.
pub fn connection_host() -> Option<ConnHost> {
    CONNECTION.try_with(Clone::clone).ok()
}

/// Puts `host` (its raw id; the sanitizing door pseudonymizes it) on the `stream_open` among
/// a stream's opening events.
pub fn stamp_stream_open(opening: &mut [correlator::EventKind], host: Option<ProcId>) {
    for ev in opening {
        if let correlator::EventKind::StreamOpen { host: h, .. } = ev {
            *h = host.map(|id| id.raw());
        }
    }
}

/// What the relay knows about hosts in one run: the processes seen owning a client
/// connection, and the resolver that finds them. Cheap to clone.
#[derive(Clone)]
pub struct Hosts {
    seen: Arc<Mutex<HashSet<ProcId>>>,
    resolver: resolver::Handle,
    /// `windowtap run`'s one host, once adopted: the answer for every connection.
    sole: Option<Arc<watch::Sender<Option<Option<ProcId>>>>>,
}

impl Hosts {
    /// Starts the resolver thread (on Linux; elsewhere every answer is unknown at once).
    pub fn start() -> Hosts {
        let seen = Arc::new(Mutex::new(HashSet::new()));
        Hosts {
            resolver: resolver::Handle::start(seen.clone()),
            seen,
            sole: None,
        }
    }

    /// For a relay that serves one host it launches itself (`windowtap run`): every
    /// connection is that host's, known from its pid ([`Hosts::adopt`]) rather than looked up.
    /// Looking up would be right too, but a client that closes its connection before the
    /// resolver reads the process table (one request per connection) would be left unknown.
    pub fn start_sole() -> Hosts {
        Hosts {
            sole: Some(Arc::new(watch::channel(None).0)),
            ..Hosts::start()
        }
    }

    /// Starts finding the process that owns the client end of the connection accepted from
    /// `peer` on `local`. Returns at once; the process table is read on the resolver thread.
    pub fn connection(&self, peer: SocketAddr, local: SocketAddr) -> ConnHost {
        if let Some(sole) = &self.sole {
            return ConnHost(sole.subscribe());
        }
        if !peer.ip().is_loopback() {
            // A remote client's process is not in our table.
            return ConnHost::known(None);
        }
        self.resolver.connection(peer, local)
    }

    /// A host known without looking (`windowtap run` spawned it): remembered like one seen
    /// on a connection, so its wrappers find it, and with [`Hosts::start_sole`] the host of
    /// every connection. `None` if it has already gone.
    pub async fn adopt(&self, pid: u32) -> Option<ProcId> {
        let id = self.resolver.adopt(pid).await;
        if let Some(sole) = &self.sole {
            sole.send_replace(Some(id));
        }
        id
    }

    /// The ancestors of the process `pid` (a wrapper), nearest first, read once (bounded by
    /// [`WAIT`]).
    pub async fn ancestors(&self, pid: u32) -> Vec<ProcId> {
        self.resolver.ancestors(pid).await
    }

    /// The nearest of `ancestors` that owns or owned a client connection of this relay, once
    /// every connection accepted so far has been resolved (bounded by [`WAIT`]).
    pub async fn host_among(&self, ancestors: &[ProcId]) -> Option<ProcId> {
        if ancestors.is_empty() {
            return None;
        }
        self.resolver.settled().await;
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        ancestors.iter().find(|a| seen.contains(a)).copied()
    }
}

/// Remembers `host` as one seen owning a client connection (bounded: past [`MAX_SEEN`] new
/// ones are not remembered, and their wrappers' calls get no host).
fn remember(seen: &Mutex<HashSet<ProcId>>, host: ProcId) {
    let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
    if seen.len() < MAX_SEEN {
        seen.insert(host);
    }
}

#[cfg(test)]
#[path = "host_tests.rs"]
mod tests;
