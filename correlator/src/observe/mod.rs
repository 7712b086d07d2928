//! Protocol observers: sans-IO parsers fed with copies of relayed bytes.
//!
//! Each takes bytes as they arrive and returns what it saw as trace v2 events with **raw** ids
//! (the shell pseudonymizes and time-stamps them); none of them ever touches the forwarded
//! stream or reads a clock. Anything an observer cannot follow (a decode failure, a bad frame,
//! JSON it must read but cannot, a call whose response is not unique, a buffer cap) becomes an
//! `observation_lost` event for that stream, never an error to the caller.
//!
//! The public surface is what the relay, the wrapper and the fuzz targets drive:
//! [`HttpObserver`], [`WsObserver`] with [`classify`] / [`observed_route`], the shared
//! [`Budget`], the request-body scanners [`messages_request`] and [`responses_request`],
//! [`negotiated`] (permessage-deflate), and [`jsonrpc`] (MCP stdio lines for the wrapper).
//! Inside: `exchange` (the entry points, route and client classification); `sse`,
//! `ws_frames`, `decode` (framing and content decoding); `anthropic`, `responses` (the
//! per-protocol state machines); `body`; `budget` (the memory budget shared by every observer
//! of a process); `lost` (the reason words of `observation_lost`, one list for every observer).

mod anthropic;
mod body;
mod budget;
mod decode;
mod exchange;
pub mod jsonrpc;
mod lenient;
mod lost;
pub mod mcp_http;
mod peek;
mod responses;
mod sse;
#[cfg(test)]
mod testkit;
mod ws_frames;

pub use body::{messages_request, responses_request};
pub use budget::Budget;
pub use exchange::{classify, observed_route, Api, ExchangeInfo, HttpObserver, WsObserver};
pub use ws_frames::negotiated;
