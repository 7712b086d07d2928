//! windowtap's sans-IO core.
//!
//! Events in, attribution records out; time arrives with each event and nothing here reads a
//! clock or touches a socket or file. That is what makes replay exact and fuzzing easy.
//!
//! The modules are private except where a namespace helps the caller; the root re-exports what
//! callers use and nothing else.
//!
//! - [`Event`], [`EventKind`] and their parts ([`Hints`], [`Usage`], …): the event model of
//!   trace v2.
//! - [`trace`]: the strict trace v2 reader (v1 too) and its writer.
//! - [`Correlator`], [`Config`], [`replay`]: the decision rule (docs/design.md §4) over
//!   threads, chains and windows (§3); their bookkeeping is private.
//! - [`records`]: records v1 ([`Record`] is re-exported here).
//! - [`resolves`]: whether a model-visible tool name is an MCP alias and tool, per host.
//! - [`observe`]: protocol observers turning copied bytes into events; [`observe::jsonrpc`]
//!   is the wrapper's MCP stdio scanner.
//! - [`Pseudonymizer`]: keyed pseudonymization of raw ids.
//! - [`sanitize`]: the one door out: what may be written anywhere (docs/design.md §7).
//! - [`ingest`]: the wrapper→relay report lines (ingest protocol v1).
//! - [`json`]: the JSON string and millisecond writers (fixed format), shared with the shell.

#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

mod decide;
mod event;
pub mod ingest;
mod intern;
pub mod json;
mod lines;
pub mod observe;
mod pseudo;
pub mod records;
mod route;
pub mod sanitize;
pub mod trace;
mod windows;

pub use decide::{replay, Candidates, Config, Correlator, Held, WindowOpen};
pub use event::{
    CallKind, Client, Event, EventKind, Hints, McpTransport, Millis, Outcome, ResponseStatus,
    Rounds, StopReason, Text, Transport, Usage,
};
pub use lines::LineError;
pub use pseudo::{Pseudonymizer, PSEUDONYM_KEY_LEN};
pub use records::Record;
pub use route::resolves;
