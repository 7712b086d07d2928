//! windowtap's sans-IO core.
//!
//! Events in, attribution records out; time arrives with each event and nothing here reads a
//! clock or touches a socket or file. That is what makes replay exact and fuzzing easy.
//!
//! - [`event`]: the event model of trace v2.
//! - [`trace`]: the strict trace v2 reader and its writer.
//! - [`windows`]: threads, response chains and windows (design.md §3).
//! - [`decide`]: the decision rule (design.md §4), driven by [`Correlator`].
//! - [`records`]: records v1.
//! - [`route`]: model-visible tool names to MCP alias and tool, per host.
//! - [`observe`]: protocol observers turning copied bytes into events.
//! - [`pseudo`]: keyed pseudonymization of raw ids.
//! - [`sanitize`]: the one door out: what may be written anywhere (design.md §7).
//! - [`ingest`]: the wrapper→relay report lines (ingest protocol v1).

pub mod decide;
pub mod event;
pub mod ingest;
pub mod json;
pub mod lines;
pub mod observe;
pub mod pseudo;
pub mod records;
pub mod route;
pub mod sanitize;
pub mod trace;
pub mod windows;

pub use decide::{replay, Config, Correlator, WindowOpen};
pub use event::{Event, EventKind, Millis};
pub use records::Record;
