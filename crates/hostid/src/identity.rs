//! What a host is: a process by pid and start time, another user, or another machine; and
//! how long anyone waits to learn which.

use std::collections::HashSet;
use std::sync::Mutex;
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

/// Who a stream or an MCP call belongs to, as far as the kernel says (docs/design.md §3
/// "Host"). Two hosts that differ are known to be two sessions; only `None` (unknown) rules
/// nothing out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Host {
    /// A process of the relay's own user.
    Proc(ProcId),
    /// Some process of another user id. Its process is not looked for: another user's
    /// wrappers cannot reach this relay's private ingest socket, so none of its streams can
    /// hold one of our calls, and that is all the rule needs to know.
    User(u32),
    /// A client on an address that is not this machine's (another machine, a container
    /// behind a bridge): its process is in no table of ours.
    Remote,
}

impl Host {
    /// The raw host id: `pid:start`, `uid:N` or `remote` (they never collide: a pid is a
    /// number); only its pseudonym is ever written.
    pub fn raw(&self) -> String {
        match self {
            Host::Proc(p) => p.raw(),
            Host::User(uid) => format!("uid:{uid}"),
            Host::Remote => "remote".to_string(),
        }
    }
}

/// Whose a client connection is, for what the relay shares between connections (its idle
/// upstream connections): known from the socket table alone, before the host process is.
/// Two connections of one principal may share; two of different principals never do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Principal {
    /// A socket of this machine, owned by this user id.
    User(u32),
    /// A client on another machine's address.
    Remote(std::net::IpAddr),
    /// Nothing is known (resolution off or flooded, the socket gone, another OS): this one
    /// connection (the number tells connections apart; it is nothing else).
    Connection(u64),
}

impl Principal {
    /// A principal of its own, shared with nobody.
    pub fn alone() -> Principal {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Principal::Connection(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }
}

impl Principal {
    /// A key naming the principal, for maps keyed by text (never written anywhere: a remote
    /// principal's key holds its address).
    pub fn key(&self) -> String {
        match self {
            Principal::User(uid) => format!("uid:{uid}"),
            Principal::Remote(ip) => format!("remote:{ip}"),
            Principal::Connection(n) => format!("conn:{n}"),
        }
    }
}

/// A principal to come: `None` until given, then the principal (`Some(None)`: unknown).
pub(crate) type PrincipalAnswer = watch::Receiver<Option<Option<Principal>>>;

/// The relay's effective user id: the one its sockets and files are owned by, and so the
/// one a client socket of its own user is owned by.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub fn relay_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// An answer to come: `None` until given, then the host (`Some(None)`: unknown).
pub(crate) type Answer = watch::Receiver<Option<Option<Host>>>;

/// Remembers `host` as one seen owning a client connection (bounded: past [`MAX_SEEN`] new
/// ones are not remembered, and their wrappers' calls get no host).
pub(crate) fn remember(seen: &Mutex<HashSet<ProcId>>, host: ProcId) {
    let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
    if seen.len() < MAX_SEEN {
        seen.insert(host);
    }
}
