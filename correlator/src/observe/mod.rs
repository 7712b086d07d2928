//! Protocol observers: sans-IO parsers fed with copies of relayed bytes.
//!
//! Each takes bytes as they arrive and returns what it saw; none of them ever touches the
//! forwarded stream. Anything an observer cannot follow is reported as a loss for that stream.

pub mod jsonrpc;
