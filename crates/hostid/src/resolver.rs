//! The resolver: one thread that reads the process table for [`super::Hosts`], so that no
//! `/proc` reading ever happens on the data path or on the async runtime.
//!
//! Its cost is bounded: requests queue up to [`QUEUE`] (past that a connection's host is
//! unknown, at once); they are taken in batches of up to [`MAX_BATCH`], and one batch costs
//! one exact `sock_diag` query per connection (or, where netlink is not there, one read of
//! the IPv4 TCP table and of the IPv6 one if needed), a look at the fd tables of the hosts
//! already seen (most connections come from a host that made one before), and only for
//! inodes still not found one walk over the process table (at most [`MAX_SCAN`] processes,
//! only the relay user's, stopping once every inode is found). The relay's own fd table, the
//! largest on the machine, is never walked. A socket owned by another user is that user's
//! host (`uid:N`) without a walk, and a peer whose address is not this machine's is
//! `remote` ([`decide`]).
//!
//! The thread runs at the relay's own priority, not below it like the observers: a stream's
//! opening waits for its host (at most [`WAIT`]), and on a busy machine a lowered thread
//! made that wait long (the opening was still unsent when a forced stop came in a test
//! under load). Its work per connection is an exact socket query, tens of microseconds.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::{oneshot, watch};

use crate::identity::{Host, Principal, PrincipalAnswer, ProcId, WAIT};

/// Requests waiting for the resolver thread, at most.
const QUEUE: usize = 4096;
/// Connections resolved together, at most.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
const MAX_BATCH: usize = 256;
/// Processes one walk of the process table looks at, at most.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
const MAX_SCAN: usize = 65_536;
/// Hosts whose fd tables are looked at first (the most recently seen).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
const MAX_OWNERS: usize = 64;

type Answer = watch::Sender<Option<Option<Host>>>;
type PrincipalSender = watch::Sender<Option<Option<Principal>>>;

enum Request {
    Connection {
        /// Its place in the order connections were accepted.
        seq: u64,
        peer: SocketAddr,
        local: SocketAddr,
        /// Only its socket's owner is asked (`windowtap run`: the adopted host is ours).
        owner_only: bool,
        answer: Answer,
        /// Given first, once the socket table has been read.
        principal: PrincipalSender,
        /// When the connection was accepted.
        queued: std::time::Instant,
    },
    Adopt {
        pid: u32,
        answer: oneshot::Sender<Option<ProcId>>,
    },
    Ancestors {
        pid: u32,
        answer: oneshot::Sender<Vec<ProcId>>,
    },
}

/// The async side's handle on the resolver thread.
#[derive(Clone)]
pub(crate) struct Handle {
    /// `None` where there is no process table to read.
    tx: Option<std::sync::mpsc::SyncSender<Request>>,
    /// Connections queued so far (the lock makes numbering and queueing one step, so every
    /// number handed out reaches the thread).
    submitted: Arc<Mutex<u64>>,
    /// Every connection numbered up to this has been answered.
    done: watch::Receiver<u64>,
}

impl Handle {
    /// The resolver for a relay run by the user `me`.
    pub(crate) fn start(seen: Arc<Mutex<HashSet<ProcId>>>, me: u32) -> Handle {
        let (done_tx, done) = watch::channel(0);
        #[cfg(target_os = "linux")]
        let tx = {
            let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
            let resolver = Resolver::new(seen, Some(std::process::id() as i32), me);
            match std::thread::Builder::new()
                .name("windowtap-hosts".into())
                .spawn(move || resolver.run(rx, done_tx))
            {
                Ok(_) => Some(tx),
                Err(e) => {
                    tracing::warn!(error = %e, "host resolution unavailable: no thread");
                    None
                }
            }
        };
        #[cfg(not(target_os = "linux"))]
        let tx = {
            let _ = (seen, done_tx, QUEUE, me);
            None
        };
        Handle {
            tx,
            submitted: Arc::new(Mutex::new(0)),
            done,
        }
    }

    /// No resolver (host resolution off): every answer is unknown at once, and nobody waits.
    pub(crate) fn off() -> Handle {
        Handle {
            tx: None,
            submitted: Arc::new(Mutex::new(0)),
            done: watch::channel(0).1,
        }
    }

    /// The answers to come for one connection, its host and its principal (unknown at once
    /// where there is no resolver or it is flooded); with `owner_only`, a host of the relay's
    /// own user is left unknown for the caller to fill in, and no process is looked for.
    pub(crate) fn connection(
        &self,
        peer: SocketAddr,
        local: SocketAddr,
        owner_only: bool,
    ) -> (crate::identity::Answer, PrincipalAnswer) {
        let unknown = || (watch::channel(Some(None)).1, watch::channel(Some(None)).1);
        let Some(tx) = &self.tx else {
            return unknown();
        };
        let (answer, rx) = watch::channel(None);
        let (principal, principal_rx) = watch::channel(None);
        let mut submitted = self.submitted.lock().unwrap_or_else(|p| p.into_inner());
        let req = Request::Connection {
            seq: *submitted + 1,
            peer,
            local,
            owner_only,
            answer,
            principal,
            queued: std::time::Instant::now(),
        };
        match tx.try_send(req) {
            Ok(()) => {
                *submitted += 1;
                (rx, principal_rx)
            }
            // Flooded (or gone): this one's host is unknown, and nobody waits for it.
            Err(_) => unknown(),
        }
    }

    pub(crate) async fn adopt(&self, pid: u32) -> Option<ProcId> {
        let (answer, rx) = oneshot::channel();
        self.ask(Request::Adopt { pid, answer }, rx).await.flatten()
    }

    pub(crate) async fn ancestors(&self, pid: u32) -> Vec<ProcId> {
        let (answer, rx) = oneshot::channel();
        self.ask(Request::Ancestors { pid, answer }, rx)
            .await
            .unwrap_or_default()
    }

    async fn ask<T>(&self, req: Request, rx: oneshot::Receiver<T>) -> Option<T> {
        self.tx.as_ref()?.try_send(req).ok()?;
        tokio::time::timeout(WAIT, rx).await.ok()?.ok()
    }

    /// Returns once every connection queued before the call has been answered (or after
    /// [`WAIT`]).
    pub(crate) async fn settled(&self) {
        let target = *self.submitted.lock().unwrap_or_else(|p| p.into_inner());
        let mut done = self.done.clone();
        let _ = tokio::time::timeout(WAIT, done.wait_for(|d| *d >= target)).await;
    }
}

/// What the kernel's socket table says of one connection's client end, before any process
/// is looked for (docs/design.md §3 "Host").
#[cfg(target_os = "linux")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Decision {
    /// Known without a process: another user's, another machine's, or nothing to know.
    Known(Option<Host>),
    /// A socket of the relay's own user, this inode: the process holding it is the host.
    Find(u64),
}

/// The decision for one connection: `socket` is its client end as the socket table has it
/// (inode, owner), `None` when there is no live one; `relay_uid` is the relay's user;
/// `own_address` whether the peer's address is one of this machine's (only asked when there
/// is no socket).
#[cfg(target_os = "linux")]
pub(super) fn decide(
    socket: Option<(u64, u32)>,
    relay_uid: u32,
    own_address: impl FnOnce() -> bool,
) -> Decision {
    match socket {
        Some((inode, uid)) if uid == relay_uid => Decision::Find(inode),
        // Another user's: not looked for (its wrappers cannot reach our ingest socket, so
        // knowing which of its processes it is would rule nothing more out), which also
        // spares reading other users' processes.
        Some((_, uid)) => Decision::Known(Some(Host::User(uid))),
        // One of our addresses: a local client that closed its end before it was looked up
        // (or one in another network namespace on a shared address): nothing can be known.
        None if own_address() => Decision::Known(None),
        // No process of this machine can hold a socket on another machine's address.
        None => Decision::Known(Some(Host::Remote)),
    }
}

/// The principal of a connection from `peer` whose client socket the table shows as `socket`
/// (inode, owner): its owner; another machine's address; else unknown.
#[cfg(target_os = "linux")]
pub(super) fn principal_of(socket: Option<(u64, u32)>, peer: SocketAddr) -> Option<Principal> {
    match socket {
        Some((_, uid)) => Some(Principal::User(uid)),
        None if own_address(peer.ip()) => None,
        None => Some(Principal::Remote(peer.ip().to_canonical())),
    }
}

/// Whether `ip` is an address of this machine (of this network namespace): loopback, or
/// one a socket can be bound to (the kernel refuses any other, EADDRNOTAVAIL). Where binding
/// to foreign addresses is allowed (`ip_nonlocal_bind`) every address looks like ours: then
/// a client gone before it was looked up is unknown rather than remote, which rules nothing
/// out.
#[cfg(target_os = "linux")]
pub(super) fn own_address(ip: std::net::IpAddr) -> bool {
    let ip = ip.to_canonical();
    ip.is_loopback() || std::net::UdpSocket::bind((ip, 0)).is_ok()
}

/// The resolver thread's state.
#[cfg(target_os = "linux")]
pub(super) struct Resolver {
    seen: Arc<Mutex<HashSet<ProcId>>>,
    /// Never a host: the relay itself (its fd table holds the server ends of every stream).
    skip: Option<i32>,
    /// The relay's user: only its sockets are looked for among processes.
    me: u32,
    /// Pids of hosts seen, most recent first.
    owners: Vec<i32>,
    /// Exact socket lookups; `None` once the interface has failed (then the TCP table).
    pub(super) diag: Option<crate::sockdiag::SockDiag>,
    /// Fd tables read by walks so far (for the debug log and the tests).
    pub(super) fd_tables_read: u64,
}

/// One connection to resolve.
#[cfg(target_os = "linux")]
pub(super) struct Pending {
    pub peer: SocketAddr,
    pub local: SocketAddr,
    /// Only the socket's owner is asked: a socket of the relay's user stays unknown.
    pub owner_only: bool,
    pub host: Option<Host>,
}

#[cfg(target_os = "linux")]
impl Resolver {
    pub(super) fn new(seen: Arc<Mutex<HashSet<ProcId>>>, skip: Option<i32>, me: u32) -> Resolver {
        let diag = match crate::sockdiag::SockDiag::open() {
            Ok(d) => Some(d),
            Err(e) => {
                tracing::debug!(error = %e, "sock_diag unavailable: reading the TCP table");
                None
            }
        };
        Resolver {
            seen,
            skip,
            me,
            owners: Vec::new(),
            diag,
            fd_tables_read: 0,
        }
    }

    fn run(mut self, rx: std::sync::mpsc::Receiver<Request>, done: watch::Sender<u64>) {
        while let Ok(first) = rx.recv() {
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(r) => batch.push(r),
                    Err(_) => break,
                }
            }
            let mut conns = Vec::new();
            let mut answers = Vec::new();
            let mut principals = Vec::new();
            let mut last = None;
            let mut oldest = None;
            for req in batch {
                match req {
                    Request::Connection {
                        seq,
                        peer,
                        local,
                        owner_only,
                        answer,
                        principal,
                        queued,
                    } => {
                        oldest = oldest.or(Some(queued));
                        conns.push(Pending {
                            peer,
                            local,
                            owner_only,
                            host: None,
                        });
                        answers.push(answer);
                        principals.push(principal);
                        last = Some(seq);
                    }
                    Request::Adopt { pid, answer } => {
                        let _ = answer.send(self.adopt(pid));
                    }
                    Request::Ancestors { pid, answer } => {
                        let _ = answer.send(crate::procfs::ancestors(pid as i32));
                    }
                }
            }
            let (began, read) = (std::time::Instant::now(), self.fd_tables_read);
            // The socket table first, and the principals it gives out at once: an exchange
            // waiting to share an upstream connection must not wait for a process walk.
            let sockets = self.client_inodes(&conns);
            for ((socket, c), principal) in sockets.iter().zip(&conns).zip(principals) {
                principal.send_replace(Some(principal_of(*socket, c.peer)));
            }
            self.resolve_sockets(&mut conns, sockets);
            if !conns.is_empty() {
                tracing::debug!(
                    connections = conns.len(),
                    unknown = conns.iter().filter(|c| c.host.is_none()).count(),
                    fd_tables = self.fd_tables_read - read,
                    queued_ms = oldest.map_or(0.0, |q| (began - q).as_secs_f64() * 1e3),
                    ms = began.elapsed().as_secs_f64() * 1e3,
                    "hosts resolved"
                );
            }
            for (c, answer) in conns.iter().zip(answers) {
                answer.send_replace(Some(c.host));
            }
            if let Some(seq) = last {
                done.send_replace(seq);
            }
        }
    }

    /// Remembers `pid` as a host; its id, if it is still there.
    pub(super) fn adopt(&mut self, pid: u32) -> Option<ProcId> {
        let (id, _) = crate::procfs::stat(pid as i32)?;
        self.owned(id);
        Some(id)
    }

    fn owned(&mut self, id: ProcId) {
        crate::identity::remember(&self.seen, id);
        let pid = id.pid as i32;
        self.owners.retain(|&p| p != pid);
        self.owners.insert(0, pid);
        self.owners.truncate(MAX_OWNERS);
    }

    /// Each connection's client socket (inode, owner), `None` where there is none: by exact
    /// lookup, or from the TCP tables where that interface is not there or fails.
    fn client_inodes(&mut self, conns: &[Pending]) -> Vec<Option<(u64, u32)>> {
        use crate::procfs::{client_inode, tcp_table};
        if let Some(found) = self.by_sock_diag(conns) {
            return found;
        }
        // The IPv4 table first: a loopback client's socket is almost always there (the relay
        // listens on 127.0.0.1 by default); the IPv6 one only for those not found.
        let rows = tcp_table(false);
        let mut found: Vec<_> = conns
            .iter()
            .map(|c| client_inode(&rows, c.peer, c.local))
            .collect();
        if found.iter().any(Option::is_none) {
            let rows = tcp_table(true);
            for (c, inode) in conns.iter().zip(found.iter_mut()) {
                if inode.is_none() {
                    *inode = client_inode(&rows, c.peer, c.local);
                }
            }
        }
        found
    }

    /// [`Self::client_inodes`] by `sock_diag`; `None` (and no more asking) once it fails.
    fn by_sock_diag(&mut self, conns: &[Pending]) -> Option<Vec<Option<(u64, u32)>>> {
        use crate::sockdiag::Lookup;
        let diag = self.diag.as_mut()?;
        let mut found = Vec::with_capacity(conns.len());
        for c in conns {
            match diag.client(c.peer, c.local) {
                Ok(Lookup::Found { inode, uid }) => found.push(Some((inode, uid))),
                Ok(Lookup::Absent) => found.push(None),
                Err(e) => {
                    tracing::debug!(error = %e, "sock_diag failed: reading the TCP table");
                    self.diag = None;
                    return None;
                }
            }
        }
        Some(found)
    }

    /// The highest ancestor of `pid` that holds `inode` too, through its parents while
    /// they do (never the relay), or `pid`.
    fn topmost_holder(&self, pid: i32, inode: u64) -> i32 {
        use crate::procfs::{held_among, stat};
        let one = HashSet::from([inode]);
        let mut holder = pid;
        for _ in 0..crate::procfs::MAX_DEPTH {
            match stat(holder) {
                Some((_, parent))
                    if parent > 0
                        && Some(parent) != self.skip
                        && !held_among(parent, &one).is_empty() =>
                {
                    holder = parent
                }
                _ => break,
            }
        }
        holder
    }

    /// Finds the host of each connection in `conns` (left `None` when it cannot be known).
    #[cfg(test)]
    pub(super) fn resolve(&mut self, conns: &mut [Pending]) {
        let sockets = self.client_inodes(conns);
        self.resolve_sockets(conns, sockets);
    }

    /// [`Self::resolve`] with each connection's client socket already looked up.
    fn resolve_sockets(&mut self, conns: &mut [Pending], sockets: Vec<Option<(u64, u32)>>) {
        use crate::procfs::{held_among, pids_newest_first, run_by, stat};
        if conns.is_empty() {
            return;
        }
        let decisions: Vec<Decision> = sockets
            .into_iter()
            .zip(conns.iter())
            .map(|(socket, c)| {
                match decide(socket, self.me, || own_address(c.peer.ip())) {
                    // `run`'s: its adopted host, which the caller knows.
                    Decision::Find(_) if c.owner_only => Decision::Known(None),
                    d => d,
                }
            })
            .collect();
        let mut wanted: HashSet<u64> = decisions
            .iter()
            .filter_map(|d| match d {
                Decision::Find(inode) => Some(*inode),
                Decision::Known(_) => None,
            })
            .collect();
        let uids = HashSet::from([self.me]);
        let mut found: Vec<(u64, i32)> = Vec::new();
        let mut tables = 0;
        let mut look = |pid: i32, wanted: &mut HashSet<u64>, found: &mut Vec<(u64, i32)>| {
            tables += 1;
            for inode in held_among(pid, wanted) {
                wanted.remove(&inode);
                found.push((inode, pid));
            }
        };
        let known = self.owners.clone();
        for &pid in &known {
            if wanted.is_empty() {
                break;
            }
            look(pid, &mut wanted, &mut found);
        }
        // Hosts already seen are taken as they were found then; only a new one is climbed.
        let from_known = found.len();
        if !wanted.is_empty() {
            // Newest first: a host not seen before is almost always a process that started
            // moments ago (a session's first connection), and a client that makes one
            // request per connection may close it a few milliseconds after its response:
            // the walk has to reach its fd table before that, or its host stays unknown
            // (seen in the shared-relay run: Codex over HTTP, a 2 ms exchange, a 3–6 ms
            // walk in pid order that found nothing).
            // Only the listing is read up front; who runs a process is asked as the walk
            // reaches it.
            for pid in pids_newest_first(MAX_SCAN) {
                if wanted.is_empty() {
                    break;
                }
                if Some(pid) != self.skip && !known.contains(&pid) && run_by(pid, &uids) {
                    look(pid, &mut wanted, &mut found);
                }
            }
        }
        self.fd_tables_read += tables;
        // A socket a child inherited is held by its parent too: the host is the topmost
        // holder (the walk, newest first, meets the child first).
        for (inode, pid) in &mut found[from_known..] {
            *pid = self.topmost_holder(*pid, *inode);
        }
        let mut ids: Vec<(i32, ProcId)> = Vec::new();
        for &(_, pid) in &found {
            if ids.iter().all(|(p, _)| *p != pid) {
                if let Some((id, _)) = stat(pid) {
                    ids.push((pid, id));
                }
            }
        }
        for (_, id) in &ids {
            self.owned(*id);
        }
        for (c, decision) in conns.iter_mut().zip(decisions) {
            c.host = match decision {
                Decision::Known(host) => host,
                Decision::Find(inode) => found
                    .iter()
                    .find(|(f, _)| *f == inode)
                    .and_then(|(_, pid)| ids.iter().find(|(p, _)| p == pid))
                    .map(|(_, id)| Host::Proc(*id)),
            };
        }
    }
}
