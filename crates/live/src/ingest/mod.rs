//! The ingest socket: where wrappers report MCP intervals to the relay (docs/design.md §1, §4).
//!
//! A Unix domain socket (mode 0600) carrying JSON Lines from each wrapper to the relay, one
//! report per line, never anything back. Protocol version 1 (also in `docs/ingest.md`):
//!
//! ```text
//! {"v":1,"type":"start","id":"w4242-9f1c2a7e-1","alias":"probe","tool":"echo","start_ns":81234567890,
//!  "tool_use_id":"toolu_01","item_id":null,"call_id":null,"thread":null}
//! {"v":1,"type":"end","id":"w4242-9f1c2a7e-1","alias":"probe","tool":"echo","start_ns":81234567890,
//!  "end_ns":81299999999,"outcome":"result","tool_use_id":"toolu_01","item_id":null,"call_id":null,"thread":null}
//! ```
//!
//! - `id`: the interval id, unique across wrappers (the wrapper's pid, a random word fixed at its
//!   start, and a counter), at most 128 bytes.
//! - `start_ns`, `end_ns`: readings of CLOCK_MONOTONIC (`sys::clock::mono_ns`), which the
//!   relay shares; `start_ns` is when the `tools/call` line was written to the server, `end_ns`
//!   when its answer was read back (or the cancellation passed, or the server went away).
//! - `outcome`: `result`, `error`, `cancelled` or `lost`.
//! - hints (`tool_use_id`, `item_id`, `call_id`, `thread`): strings or null, optional on `start`
//!   (the relay uses them if the wrapper vanishes before the end).
//! - Unknown extra fields are ignored, so later minor additions stay readable.
//!
//! The relay turns `start` into `mcp_start` and `end` into `mcp_interval`, with times converted
//! by [`Clock::ms_at`] and the event's `t` the relay's clock when the line arrived. When a
//! wrapper's connection drops, each of its calls that started and did not end becomes an
//! `mcp_interval` with outcome `lost`, ending then; so does each call still running when the
//! relay closes the socket at its stop (after the drain: reports are taken until then). A bad
//! line is counted and logged by its fault
//! (never its content) and the connection goes on.

mod server;
mod trust;

// The line protocol itself is sans-IO and lives in the correlator, where it can be fuzzed.
pub use correlator::ingest::{Fault, Report, RoundsNs, ServerState, SpawnError, MAX_LINE};
pub use server::{
    note_path, serve, shown_alias, socket_owner, write_note, Counters, IngestHandle, RelayNote,
    ServersSeen, SocketOwner,
};
pub use trust::{
    connect_verified, default_path, listen_path, peer_pid, prepare_private_dir, wrapper_candidates,
    ConnectError, Untrusted, ENV,
};

#[cfg(test)]
mod tests;
