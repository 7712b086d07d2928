//! The one door out (docs/design.md §7).
//!
//! Everything windowtap writes about the traffic (records, captures, the `ingest` debug
//! command's trace, OTLP spans, log fields and error messages that mention input) leaves
//! through this module, which admits only the allow-listed kinds of data:
//!
//! | kind | what | checked as |
//! |---|---|---|
//! | id | stream, request, response, call, item, thread, host, interval, hints | live: an HMAC pseudonym (32 lowercase hex); replay: an opaque token of a trace file |
//! | tool name | model-visible tool names, namespaces, MCP aliases and tools | `[A-Za-z0-9_.:-]`, 1 to 128 bytes (`MAX_TOOL_NAME`), or `~` and a pseudonym |
//! | model name | model names as the API reports them | the same with `/` and `@`, or `~` and a pseudonym |
//! | name | the file name of a replayed trace (the user's own) | at most 1024 bytes (`MAX_NAME`), no control character |
//! | word | event types, statuses, outcomes, reasons, stop reasons, evidence | a fixed word: `[a-z0-9_]`, at most 64 bytes |
//! | number | times, counts (token usage included) | a number |
//!
//! Nothing else has a way out: no header value, credential, body, prompt, argument, result or
//! model text, and no raw id where pseudonyms are due. Two halves:
//!
//! - [`Scrub`] is where observed data enters the writable domain: every id becomes its
//!   pseudonym and a tool or model name outside what the APIs allow (docs/design.md §7: a
//!   space, a quote, a newline, too long) becomes `~` and the pseudonym of its bytes, so no
//!   free text rides out in a name. The same raw name gives the same pseudonym wherever it
//!   is seen; a host's translation of it (`mcp__my_server__t` for alias `my server`) does
//!   not, so such a name loses its `route` match.
//! - [`Door`] is where it leaves: [`Door::event`], [`Door::record`] and [`Door::meta`] check
//!   each field against its kind and only then serialize. [`Line`] and [`Cleared`] can be made
//!   nowhere else, and the sinks (capture, records, the OTLP exporter) accept nothing else.
//!   A refusal names the field and the kind, never the value.
//!
//! There is no constructor from raw text and no option that skips a check or writes raw ids.
//!
//! The files follow that split: `kinds` (the table: what each kind admits, and [`quote`] for
//! errors), `scrub` (the way in), `door` (the way out), `log` (what a log line may show).
//! `kinds` imports nothing of its own crate, so every reader's error can quote through it
//! without reaching the door, which itself writes through the trace writer and the records.

mod door;
mod kinds;
mod log;
mod scrub;

pub use door::{Cleared, Door, Line, Refused};
pub(crate) use kinds::is_name;
pub use kinds::{is_model_name, is_tool_name, quote, Kind};
pub use log::{log_target_is_own, log_text, LogField};
pub use scrub::Scrub;

#[cfg(test)]
mod tests;
