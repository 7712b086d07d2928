//! The live pipeline: everything the relay's observations and the wrappers' reports go
//! through on their way to records (docs/design.md §4).
//!
//! Relay events and MCP reports go to ONE correlator (the same code as replay), in `t`
//! order, behind the watermark the data plane offers (`relay::Sources`): a time before which
//! no relay event can still arrive. Sources of events:
//! - each observed stream: its observer task stamps events with the time the bytes passed
//!   through the relay, so they arrive here late and slightly out of order across streams;
//! - the ingest socket ([`ingest`]): MCP reports, whose `t` is when they reached the
//!   correlator.
//!
//! One concern per module:
//! - [`task`]: the correlator task (events in, records and capture out, OTLP spans on the
//!   side); [`sequencer`]: holding events until the watermark passes them;
//!   [`mod@capture`]: the capture file and its header; `records_out`: the records writer
//!   thread; [`rotate`]: files cut into pieces by size or age; [`mcp_tally`]: model tool
//!   calls to MCP tools that no wrapper reported.
//! - [`ingest`]: the socket wrappers report to, and whether to trust it.
//! - [`service`]: the data plane and this pipeline started and stopped together, for
//!   `windowtap relay` and `windowtap run`.

#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

pub mod capture;
pub mod ingest;
pub mod mcp_tally;
mod records_out;
pub mod rotate;
pub mod sequencer;
pub mod service;
pub mod task;

pub use capture::{capture_header, Capture, CaptureSink, Sinks};
pub use records_out::Tail as RecordsTail;
pub use task::{spawn, Finished, LiveConfig};
