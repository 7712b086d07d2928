//! windowtap's HTTP/1.1 data plane, sans I/O: bytes in, decisions out; no socket, no clock.
//!
//! The relay forwards every credential its users have, so where a message ends must be
//! decided once, from what was parsed, and said the same way to the next hop. This crate
//! holds those decisions, apart from the relay's sockets and tasks, so that they can be read
//! whole, tested on their own and fuzzed (`fuzz/`, targets `h1_request`, `h1_response`,
//! `h1_framing`, `h1_exchange`, `h1_tunnel`, `h1_target`). The two machines, [`Exchange`] and [`Tunnel`],
//! are built as the correlator is: `handle_*` takes what happened, `poll_*` gives what to do,
//! `poll_timeout` the next deadline; each has its own event and end
//! ([`ExchangeEvent`]/[`ExchangeEnd`], [`TunnelEvent`]/[`TunnelEnd`]).
//!
//! The modules are private; what the drivers (the relay, the fuzz harness) need is
//! re-exported here, and nothing else is reachable from outside.
//!
//! - `head`: which request heads the relay forwards itself ([`parse_request`]) and which
//!   it hands over to hyper; response heads ([`parse_response`]) and how their bodies end;
//!   the heads it writes on ([`upstream_head`], [`client_head`]), framed from the parse.
//! - `exchange`: one exchange from a taken request head to its end ([`Exchange`]): the
//!   request body's bytes, the response head, the body rechunked where it must be, keep-alive
//!   and the deadlines.
//! - `framing`: following a body's framing as its bytes go by ([`Framing::scan`]): where
//!   it ends, which bytes are payload, the trailers.
//! - `headers`: tokens of a value, hop-by-hop headers, and the framing headers that no
//!   `Connection` line can make hop-by-hop.
//! - `target`: request paths as an upstream may read them: a dot segment in any spelling
//!   ([`has_dot_segment`]), the route a normalizing upstream serves ([`route_path`]).
//! - `tunnel`: a tunnel after an upgrade ([`Tunnel`]): one read in flight per direction,
//!   copies stamped before the write, send timeout, half-close with its grace.
#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

mod exchange;
mod framing;
mod head;
mod headers;
mod target;
mod tunnel;

pub use exchange::{
    Cut, End as ExchangeEnd, Event as ExchangeEvent, Exchange, Timeouts, Unanswered, MAX_PIECES,
};
pub use framing::{Chunked, Framing, FramingError, Scanned};
pub use head::{
    client_head, parse_request, parse_response, upstream_head, Parsed, RequestHead, ResponseHead,
    ResponseParsed, MAX_HEAD, MAX_RESPONSE_HEAD,
};
pub use headers::{connection_names, end_to_end, tokens};
pub use target::{has_dot_segment, route_path};
pub use tunnel::{Direction, End as TunnelEnd, Event as TunnelEvent, ReadEnd, Transmit, Tunnel};
