//! windowtap's sans-IO core.
//!
//! Events in, attribution records out; time arrives with each event and nothing here reads a
//! clock or touches a socket or file. That is what makes replay exact and fuzzing easy.
//!
//! - [`event`]: the event model of trace v2.
//! - [`trace`]: the strict trace v2 reader (v1 too) and its writer.
//! - [`Correlator`], [`Config`], [`replay`]: the decision rule (docs/design.md §4) over
//!   threads, chains and windows (§3); their bookkeeping is private.
//! - [`records`]: records v1.
//! - [`route`]: model-visible tool names to MCP alias and tool, per host.
//! - [`observe`]: protocol observers turning copied bytes into events.
//! - [`pseudo`]: keyed pseudonymization of raw ids.
//! - [`sanitize`]: the one door out: what may be written anywhere (docs/design.md §7).
//! - [`ingest`]: the wrapper→relay report lines (ingest protocol v1).

#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

mod decide;
pub mod event;
pub mod ingest;
pub mod json;
mod lines;
pub mod observe;
pub mod pseudo;
pub mod records;
pub mod route;
pub mod sanitize;
pub mod trace;
mod windows;

pub use decide::{replay, Candidates, Config, Correlator, WindowOpen};
pub use event::{Event, EventKind, Millis};
pub use lines::LineError;
pub use records::Record;
