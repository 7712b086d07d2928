//! windowtap's test kit: what its tests, benches, examples and fuzz harnesses share, written
//! once.
//!
//! - [`ws`]: RFC 6455 frames (built by tungstenite's own frame types), permessage-deflate
//!   payloads, and with the `net` feature the WebSocket handshake, client and hashing streams.
//! - [`sse`]: the fake model streams: Anthropic `/v1/messages` and OpenAI Responses events as
//!   the real APIs send them, and their SSE records.
//! - `net` (feature `net`): the scripted upstream (plain or TLS with a CA made at test time),
//!   a minimal HTTP/1.1 client, bodies and byte patterns. Its items are re-exported here.
//! - `proc` (feature `net`): signals, the uid, the monotonic clock, pipes and a child's peak
//!   memory, all without `unsafe`.
//!
//! A dev-only crate (`publish = false`) that depends on no workspace crate, so the relay, the
//! correlator and h1 can each dev-depend on it without a cycle. The fuzz harnesses build it
//! without default features: frames, deflate and SSE events only, no tokio.
#![forbid(unsafe_code)]

pub mod sse;
pub mod ws;

#[cfg(feature = "net")]
mod net;
#[cfg(feature = "net")]
pub mod proc;

#[cfg(feature = "net")]
pub use net::*;
