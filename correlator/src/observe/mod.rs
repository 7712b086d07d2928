//! Protocol observers: sans-IO parsers fed with copies of relayed bytes.
//!
//! Each takes bytes as they arrive and returns what it saw as trace v2 events with **raw** ids
//! (the shell pseudonymizes and time-stamps them); none of them ever touches the forwarded
//! stream or reads a clock. Anything an observer cannot follow (a decode failure, a bad frame,
//! JSON it must read but cannot, a call whose response is not unique, a buffer cap) becomes an
//! `observation_lost` event for that stream, never an error to the caller.
//!
//! - [`exchange`]: the entry points the relay drives ([`HttpObserver`], [`WsObserver`]) and
//!   route / client classification.
//! - [`sse`], [`ws_frames`], [`decode`]: framing and content decoding.
//! - [`anthropic`], [`responses`]: the per-protocol state machines.
//! - [`body`]: request-body scanners.
//! - [`budget`]: the memory budget shared by every observer of a process.
//! - [`jsonrpc`]: MCP stdio lines (for the wrapper), `tools/call` starts and ends.

pub mod anthropic;
pub mod body;
pub mod budget;
pub mod decode;
pub mod exchange;
pub mod jsonrpc;
mod lenient;
mod peek;
pub mod responses;
pub mod sse;
#[cfg(test)]
mod testkit;
pub mod ws_frames;

pub use exchange::{classify, observed_route, Api, ExchangeInfo, HttpObserver, WsObserver};

/// Why observation of a stream stopped: the fixed `observation_lost` reason word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lost(pub &'static str);

impl Lost {
    /// Content-Encoding or permessage-deflate data that cannot be decoded.
    pub const DECODE: Lost = Lost("decode");
    /// A WebSocket frame that breaks RFC 6455 (or an extension this observer cannot follow).
    pub const FRAME: Lost = Lost("frame");
    /// A buffer bound was exceeded.
    pub const OVERFLOW: Lost = Lost("overflow");
    /// Observing the stream further would exceed its share of the observer budget.
    pub const BUDGET: Lost = Lost("budget");
    /// An output item or error whose response is not unique.
    pub const AMBIGUOUS: Lost = Lost("ambiguous_response");
    /// JSON the observer must read but cannot.
    pub const JSON: Lost = Lost("json");
    /// Events out of the protocol's order (a call outside any response, …).
    pub const PROTOCOL: Lost = Lost("protocol");
}
