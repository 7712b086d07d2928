//! The coding hosts' side: what windowtap does to and for Claude Code and Codex.
//!
//! - [`run`]: `windowtap run`, one command that starts the relay service privately, points
//!   a host at it and wraps every stdio MCP server; [`plan`]: which host, which servers, and
//!   how each is wrapped; [`claude`], [`codex`]: each host's configuration, read and
//!   rewritten; `telemetry`: the host's own trace export (`--join-host-trace`).
//! - [`env`]: `windowtap env`, the override that points a host at a running relay.
//! - [`wrap`]: `windowtap wrap`, the stdio MCP pass-through that reports when each
//!   `tools/call` really ran.
//!
//! Which process a socket belongs to (host identity) is the `hostid` crate's: the relay and
//! the ingest socket need it below this one.

#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

pub mod claude;
pub mod codex;
pub mod env;
pub mod plan;
pub mod run;
mod telemetry;
pub mod wrap;
