//! The one way an observer stops following a stream: a fixed reason word, never an error to
//! the caller (the module above says why). Every observer names its reasons from here, so the
//! `observation_lost` vocabulary is one list.

/// Why observation of a stream stopped: the fixed `observation_lost` reason word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lost(pub &'static str);

impl Lost {
    /// Content-Encoding or permessage-deflate data that cannot be decoded.
    pub(crate) const DECODE: Lost = Lost("decode");
    /// A WebSocket frame that breaks RFC 6455 (or an extension this observer cannot follow).
    pub(crate) const FRAME: Lost = Lost("frame");
    /// A buffer bound was exceeded.
    pub(crate) const OVERFLOW: Lost = Lost("overflow");
    /// Observing the stream further would exceed its share of the observer budget.
    pub(crate) const BUDGET: Lost = Lost("budget");
    /// An output item or error whose response is not unique.
    pub(crate) const AMBIGUOUS: Lost = Lost("ambiguous_response");
    /// JSON the observer must read but cannot.
    pub(crate) const JSON: Lost = Lost("json");
    /// Events out of the protocol's order (a call outside any response, …).
    pub(crate) const PROTOCOL: Lost = Lost("protocol");
}
