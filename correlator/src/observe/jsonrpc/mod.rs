//! MCP `tools/call` observation over stdio JSON-RPC (docs/design.md §4, protocols.md §4).
//!
//! The wrapper forwards every byte itself; this module only watches copies of the lines, one
//! direction at a time, and says when a `tools/call` started and when it ended. Sans-IO: time
//! comes in with each line as an opaque monotonic reading (the wrapper passes nanoseconds).
//!
//! Two parts:
//! - [`LineScanner`] digests one line, fed in pieces of any size, into a small *skeleton*: the
//!   same JSON with every subtree the observer never reads dropped (arguments, result content,
//!   nested `_meta` objects). A 32 MiB tool result therefore costs one linear pass and a few
//!   hundred bytes of memory, and the answer is the same as for the whole line. Lines that are
//!   not JSON or not UTF-8 digest to nothing.
//! - [`Observer`] pairs requests and responses by JSON-RPC id. `tools/call` only flows client →
//!   server, so only client requests are tracked; their responses come server → client, and a
//!   client `notifications/cancelled` ends them too. Server requests (sampling, elicitation)
//!   live in the server's own id space and are ignored, as are the client's answers to them.
//!   `server/discover` and `initialize` sessions send the same `tools/call`; what the
//!   2026-07-28 revision adds for it, Multi Round-Trip Requests (a call answered
//!   `input_required` and retried with the input), is one call for the host and is reported
//!   as one: see [`Observer`].
//!
//! The parts are files: `scanner` ([`LineScanner`]), `observer` ([`Observer`] and what it
//! reports), and `state_digest`, the SHA-256 of a `requestState` that both need (the scanner
//! digests it as it streams by, the observer digests one it holds whole) and that needs
//! neither. The tests sit here because they hold the two parts to each other: a line scanned
//! in pieces must be observed as the whole line is.

mod observer;
mod scanner;
mod state_digest;

pub use observer::{Call, Direction, Observation, Observer};
pub use scanner::LineScanner;
// What the MCP mount observer (`observe::mcp_http`) shares with the wrapper's: ids compared
// by type and value, hints read from `_meta` the one way, `requestState` digests, and which
// waiting call a multi-round retry continues.
pub(crate) use observer::{
    fill_hints, hints_agree, hints_conflict, pick_continued, state_key, tools_call_of, Id,
    MAX_RUNNING, MAX_WAITING,
};

#[cfg(test)]
mod tests;
