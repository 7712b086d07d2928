//! The first line of a trace: what it says, and the version it declares.

/// The first line of every trace this crate writes (version 2).
pub const HEADER: &str = r#"{"type":"trace","version":2}"#;

/// The first line of a trace v1 file, still read (as v2 with every host null).
pub const HEADER_V1: &str = r#"{"type":"trace","version":1}"#;

/// The version a trace's header declared: what its lines may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Version {
    V1,
    V2,
}
