//! What a log line may show: text only from windowtap's own code and fields, everything
//! else withheld.

/// code: each carries a path template, a method, a mount name, a fault or error class our
/// code chose, never a header value or anything from a body.
pub(crate) const LOG_TEXT_FIELDS: &[&str] = &[
    "mount",
    "method",
    "path",
    "fault",
    "error",
    "error_kind",
    "failure",
    // An MCP server's alias, only as `live::ingest::shown_alias` lets it out (the name rule
    // of docs/design.md §7, else a fixed phrase).
    "server",
];

/// The log targets (crates) whose messages are written: their log calls take literal
/// messages only (tests/sanitize_door.rs holds the source to that, and every crate of the
/// workspace that logs to this list). Other crates' messages
/// (hyper, rustls, ...) are withheld whatever the level, keeping their numbers and booleans.
pub(crate) const LOG_OWN_TARGETS: &[&str] = &[
    "windowtap",
    "correlator",
    "hostid",
    "hosts",
    "live",
    "otlp",
    "relay",
    "report",
    "sys",
];

/// What a log line may show of one field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogField {
    /// Written as is.
    Admit,
    /// Written as `<withheld>`.
    Withhold,
}

/// Whether an event of `target` comes from windowtap's own code.
pub fn log_target_is_own(target: &str) -> bool {
    LOG_OWN_TARGETS
        .iter()
        .any(|t| target == *t || target.strip_prefix(t).is_some_and(|r| r.starts_with("::")))
}

/// The log policy for a field with a text value (`message` included); numbers and booleans
/// are always admitted.
pub fn log_text(target: &str, field: &str) -> LogField {
    let own = log_target_is_own(target);
    if own && (field == "message" || LOG_TEXT_FIELDS.contains(&field)) {
        LogField::Admit
    } else {
        LogField::Withhold
    }
}
