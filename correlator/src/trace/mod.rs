//! Trace v2: a strict reader (of versions 1 and 2) and a writer whose lines the reader
//! accepts (docs/design.md §5).
//!
//! Version 2 adds `host` (string or null, required) to `stream_open`, `mcp_start` and
//! `mcp_interval`, and optional `model` on `response_start`, `usage` and `stop_reason` on
//! `response_end` (absent or null when unknown; the writer omits them then). A version 1 trace
//! is read as version 2 with every host null and none of the optional fields: in a v1 line
//! those keys are not fields, and are ignored like any other unknown key.
//!
//! The reader never guesses: every malformed line is an error naming the source, the line
//! number, the field when there is one, and what was wrong. Its bookkeeping is bounded by what
//! is open (streams, responses, running MCP calls), not by the length of the trace.
//!
//! One file per step a line goes through. `header`: the first line and the version it
//! declares. `fast`: the one-pass scanner that reads the lines windowtap writes, or says
//! "don't know". `parse`: the strict reading of a line's JSON, the only one that rejects, so
//! every message comes from one implementation. `validator`: the order rules across lines,
//! against what is open (and [`OpenState`], what a piece header carries of it). `reader`:
//! those steps in order, one line at a time. `writer`: the lines the reader reads back as the
//! same events. The reader's tests sit beside it and hold the two readings to each other and
//! the writer to the reader.

mod fast;
mod header;
mod parse;
mod reader;
mod validator;
mod writer;

pub use header::{HEADER, HEADER_V1};
pub use reader::{read_all, TraceError, TraceReader};
pub use validator::OpenState;
pub use writer::{event_line, write_event};
