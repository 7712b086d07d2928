//! Host identity (docs/design.md §3 "Host"): which host process (one Claude Code or Codex,
//! with all its subagents) a stream or an MCP call belongs to, so that one relay can serve
//! every session of its user at once.
//!
//! - A stream's host is the local process that owns the client end of its connection: the
//!   relay asks [`Hosts::connection`] at accept time, and the stream's observer waits for the
//!   answer before it sends `stream_open` (bounded by [`WAIT`]). Its source stays pending
//!   meanwhile, so the watermark (the live pipeline's) holds every decision back until the stream's
//!   opening, host included, has reached the correlator.
//! - An MCP call's host is the nearest ancestor of its wrapper (pid from the ingest socket's
//!   peer credentials, never from what the wrapper says) that owns or owned a client
//!   connection of this relay: [`Hosts::ancestors`] once per wrapper connection, then
//!   [`Hosts::host_among`] per call.
//!
//! A host is a [`Host`]: mostly a process ([`ProcId`]: pid and start time, so a reused pid is
//! another host); where the process cannot be known but the kernel still says who is at the
//! other end, another user id (`uid:N`) or another machine (`remote`). Its id in events is
//! [`Host::raw`], pseudonymized like every other id by the sanitizing door. Unknown (`None`)
//! when nothing can be known: another OS, a process gone before it was seen, or host
//! resolution turned off ([`Hosts::off`], `--hosts off`); a null host never rules anything out.
//!
//! All `/proc` reading happens on one thread of its own ([`resolver`]), never on the data
//! path: the accept loop only queues a request, and nobody waits longer than [`WAIT`].

#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

mod identity;
#[cfg(target_os = "linux")]
mod procfs;
mod resolver;
#[cfg(target_os = "linux")]
mod sockdiag;

pub use identity::{relay_uid, Host, Principal, ProcId, WAIT};
use identity::{Answer, PrincipalAnswer};

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// The value of environment variable `name` in the nearest ancestor of this process (run by
/// this user) that had it when it started, with that ancestor's pid; `None` where there is
/// none, or no process table to read.
pub fn ancestor_env(name: &str) -> Option<(u32, std::ffi::OsString)> {
    #[cfg(target_os = "linux")]
    {
        procfs::ancestor_env(name)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = name;
        None
    }
}

use tokio::sync::watch;

/// The answer for one accepted connection, once known.
#[derive(Debug, Clone)]
pub struct ConnHost {
    answer: Answer,
    /// `windowtap run`'s host, for a connection the resolver found no other owner for.
    sole: Option<Answer>,
    /// The connection's principal, answered as soon as the socket table has been read.
    principal: PrincipalAnswer,
    /// Its principal when none can be known: itself alone.
    alone: Principal,
}

impl ConnHost {
    /// An answer already known (no host support, resolution off); the principal unknown.
    pub fn known(host: Option<Host>) -> ConnHost {
        ConnHost {
            answer: watch::channel(Some(host)).1,
            sole: None,
            principal: watch::channel(Some(None)).1,
            alone: Principal::alone(),
        }
    }

    /// Whose the connection is ([`Principal`]), waiting for the socket table (a lookup of
    /// tens of microseconds on the resolver thread) up to [`WAIT`]; unknown, this connection
    /// alone.
    pub async fn principal(&self) -> Principal {
        let mut answer = self.principal.clone();
        let known = tokio::time::timeout(WAIT, answer.wait_for(Option::is_some)).await;
        match known {
            Ok(Ok(v)) => v.flatten().unwrap_or(self.alone),
            _ => self.alone,
        }
    }

    /// An answer still to come, and where to give it: what [`Hosts::connection`] hands out
    /// while the resolver works (tests use it to hold an answer back).
    pub fn pending() -> (watch::Sender<Option<Option<Host>>>, ConnHost) {
        let (tx, rx) = watch::channel(None);
        (
            tx,
            ConnHost {
                answer: rx,
                sole: None,
                principal: watch::channel(Some(None)).1,
                alone: Principal::alone(),
            },
        )
    }

    /// The connection's host, waiting for the resolver (and for `run`'s host to be adopted)
    /// up to [`WAIT`] in all.
    pub async fn wait(self) -> Option<Host> {
        let ConnHost { answer, sole, .. } = self;
        let both = async move {
            match (given(answer).await, sole) {
                (Some(host), _) => Some(host),
                (None, Some(sole)) => given(sole).await,
                (None, None) => None,
            }
        };
        // The resolver went away or is behind: unknown.
        tokio::time::timeout(WAIT, both).await.ok().flatten()
    }
}

/// The host `answer` gives, once it is given (`None` if its giver went away first).
async fn given(mut answer: Answer) -> Option<Host> {
    match answer.wait_for(Option::is_some).await {
        Ok(v) => v.flatten(),
        Err(_) => None,
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
pub fn stamp_stream_open(opening: &mut [correlator::EventKind], host: Option<Host>) {
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
    sole: Option<Arc<watch::Sender<Option<Option<Host>>>>>,
    /// Resolution is on (`--hosts on`, the default).
    on: bool,
}

impl Hosts {
    /// Starts the resolver thread (on Linux; elsewhere every answer is unknown at once).
    pub fn start() -> Hosts {
        Hosts::start_as(relay_uid())
    }

    /// [`Hosts::start`] for a relay run by `me` (tests take another user's place with it).
    fn start_as(me: u32) -> Hosts {
        let seen = Arc::new(Mutex::new(HashSet::new()));
        Hosts {
            resolver: resolver::Handle::start(seen.clone(), me),
            seen,
            sole: None,
            on: true,
        }
    }

    /// Host resolution off (`--hosts off`): every stream's and every call's host is null, and
    /// nothing is read from `/proc` or the socket table (no resolver thread). For clients
    /// whose hosts the tables would get wrong or cannot show; then the calls' own ids
    /// (docs/design.md §4, "same identity") are what keeps sessions apart.
    pub fn off() -> Hosts {
        Hosts {
            seen: Arc::new(Mutex::new(HashSet::new())),
            resolver: resolver::Handle::off(),
            sole: None,
            on: false,
        }
    }

    /// For a relay that serves one host it launches itself (`windowtap run`): every
    /// connection of the relay's user is that host's, known from its pid ([`Hosts::adopt`])
    /// rather than looked up in the process table. Looking up would be right too, but a
    /// client that closes its connection before the resolver reads the process table (one
    /// request per connection) would be left unknown. Only the socket's owner is asked (one
    /// exact query), so that another user's connection to run's port is still `uid:N` and a
    /// remote one `remote`.
    pub fn start_sole() -> Hosts {
        Hosts::start_sole_as(relay_uid())
    }

    /// [`Hosts::start_sole`] for a relay run by `me`.
    fn start_sole_as(me: u32) -> Hosts {
        Hosts {
            sole: Some(Arc::new(watch::channel(None).0)),
            ..Hosts::start_as(me)
        }
    }

    /// Starts finding the process that owns the client end of the connection accepted from
    /// `peer` on `local`. Returns at once; the process table is read on the resolver thread.
    pub fn connection(&self, peer: SocketAddr, local: SocketAddr) -> ConnHost {
        // A remote peer is queued too: telling another machine's address from one of ours
        // takes a system call, which is the resolver thread's to make.
        let (answer, principal) = self.resolver.connection(peer, local, self.sole.is_some());
        ConnHost {
            answer,
            sole: self.sole.as_ref().map(|s| s.subscribe()),
            principal,
            alone: Principal::alone(),
        }
    }

    /// A host known without looking (`windowtap run` spawned it): remembered like one seen
    /// on a connection, so its wrappers find it, and with [`Hosts::start_sole`] the host of
    /// every connection. `None` if it has already gone.
    pub async fn adopt(&self, pid: u32) -> Option<ProcId> {
        let id = self.resolver.adopt(pid).await;
        if let Some(sole) = &self.sole {
            sole.send_replace(Some(id.map(Host::Proc)));
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

    /// The host of an MCP call made now by a wrapper whose ancestors are `ancestors`: the
    /// nearest that owns or owned a client connection ([`Hosts::host_among`]); null with
    /// resolution off. Never `uid:N` or `remote`: those are whoever is at the other end of
    /// a connection, and a wrapper is found among processes, not connections. (A wrapper of
    /// another user that reaches the ingest socket, root's or one in a container with the
    /// socket mounted, has no ancestor among our hosts: null, which rules nothing out; its
    /// user id would be wrong for a container's client, whose streams are `remote`.)
    pub async fn call_host(&self, ancestors: &[ProcId]) -> Option<Host> {
        if !self.on {
            return None;
        }
        self.host_among(ancestors).await.map(Host::Proc)
    }
}

#[cfg(test)]
#[path = "host_tests.rs"]
mod tests;
