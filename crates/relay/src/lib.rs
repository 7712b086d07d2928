//! The data plane: the relay Claude Code and Codex are pointed at.
//!
//! It forwards every byte to the real API and back, unchanged ([`verbatim`] drives `h1`'s
//! exchange machine for plain HTTP/1.1; [`dispatch`] hands the rest to hyper, [`http`] and
//! [`ws`]); observed streams hand copies to observer tasks through taps ([`tap`],
//! [`observer`]), whose events leave through the one interface this crate offers
//! ([`Observations`]: timed events, the watermark's sources, the host's trace parents).
//! Nothing on the observation side can delay, alter or break forwarding, and nothing here
//! knows who listens: the live pipeline, the ingest socket, `run` and the stop's summary
//! are other crates' (docs/architecture.md).
//!
//! One concern per module:
//! - [`server`]: start-up and the accept loop; [`cores`]: the runtimes connections run on;
//!   [`limits`]: the open files limit and the connection cap; [`stop`]: the drain.
//! - [`dispatch`]: a request to its mount, then to [`http`] or [`ws`] forwarding;
//!   [`headers`], [`exchange`] (response body, log line, failed exchanges), [`failure`] (what
//!   went wrong, as a fixed word) and [`answers`] (every error response, made in one place)
//!   are what both share; [`prefixed`]: a connection the verbatim path hands to hyper; [`upstream`]: upstream
//!   connections and their pool; [`tls`]: upstream TLS; [`body`]: the body frames pass
//!   through; [`tunnels`]: WebSocket tunnels in flight; [`timers`]: the connections' timers.
//! - [`state`]: what every handler shares; [`tap`], [`observer`], [`feed`], [`host_trace`]:
//!   the observation side.

#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

mod answers;
mod body;
mod cores;
mod dispatch;
mod exchange;
mod failure;
mod feed;
mod headers;
mod host_trace;
mod http;
mod limits;
mod mounts;
mod observer;
mod prefixed;
mod server;
mod state;
mod stop;
mod tap;
mod timers;
mod tls;
mod tunnels;
mod upstream;
mod verbatim;
mod ws;

pub use failure::Failure;
pub use feed::{Observations, Source, SourceGuard, Sources, Timed, EVENT_QUEUE};
pub use host_trace::{HostParent, HostParents};
pub use limits::{physical_memory, raise_open_files_limit};
pub use mounts::{BadPath, Mount, Mounts};
pub use server::{banner, bind, Bound, Config, Relay};
pub use stop::{Drain, Drained};
pub use tap::Stall;
pub use tls::{
    https_connector, CaFileError, ExtraRoots, TlsError, UpstreamConnector, UpstreamRoots,
};
