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

use std::borrow::Cow;
use std::fmt;

use serde_json::Value;

use crate::event::{Event, EventKind, Hints, Text};
use crate::pseudo::Pseudonymizer;
use crate::records::Record;
use crate::trace;

/// The longest name admitted (a replayed trace's file name), in bytes.
pub(crate) const MAX_NAME: usize = 1024;
/// The longest tool or model name admitted, in bytes: the longest name the model APIs take
/// (Codex cuts MCP names to 128, docs/design.md §4).
pub(crate) const MAX_TOOL_NAME: usize = 128;
/// The longest word admitted, in bytes.
pub(crate) const MAX_WORD: usize = 64;
/// The longest opaque id a replayed trace may carry, in bytes.
pub(crate) const MAX_ID: usize = 1024;

/// The allow-listed kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Pseudonym,
    Id,
    Name,
    ToolName,
    ModelName,
    Word,
    Number,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Pseudonym => "pseudonymous id (32 lowercase hex digits)",
            Kind::Id => "id (1 to 1024 bytes, no control character)",
            Kind::Name => "name (1 to 1024 bytes, no control character)",
            Kind::ToolName => "tool name ([A-Za-z0-9_.:-], 1 to 128 bytes, or ~ and a pseudonym)",
            Kind::ModelName => {
                "model name ([A-Za-z0-9_.:/@-], 1 to 128 bytes, or ~ and a pseudonym)"
            }
            Kind::Word => "word ([a-z0-9_], at most 64 bytes)",
            Kind::Number => "number",
        })
    }
}

/// A value the door would not let out. Names the field and the kind it failed, never the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("field `{field}`: not written, it is not a valid {kind}")]
pub struct Refused {
    pub field: &'static str,
    pub(crate) kind: Kind,
}

/// An HMAC pseudonym as [`Pseudonymizer::id`] writes it.
pub(crate) fn is_pseudonym(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// An opaque id of a trace file (a capture's pseudonym, or a hand-written `s1`).
pub(crate) fn is_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_ID && !s.chars().any(char::is_control)
}

/// A trace's file name: short, one line, no control characters.
pub(crate) fn is_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_NAME && !s.chars().any(char::is_control)
}

/// What [`Scrub`] writes for a name it does not admit: `~` and a pseudonym.
fn is_pseudonymized_name(s: &str) -> bool {
    s.strip_prefix('~').is_some_and(is_pseudonym)
}

/// 1 to [`MAX_TOOL_NAME`] bytes, each `[A-Za-z0-9_.:-]` or one of `extra`.
fn is_api_name(s: &str, extra: &[u8]) -> bool {
    !s.is_empty()
        && s.len() <= MAX_TOOL_NAME
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.:-".contains(&b) || extra.contains(&b))
}

/// A model-visible tool name, namespace, MCP alias or MCP tool name, as the APIs allow them
/// (docs/design.md §7), or the pseudonym written for one that is not.
pub fn is_tool_name(s: &str) -> bool {
    is_api_name(s, b"") || is_pseudonymized_name(s)
}

/// A model name: a tool name's characters and `/`, `@` (`org/model`, `model@version`), or the
/// pseudonym written for one that is not.
pub fn is_model_name(s: &str) -> bool {
    is_api_name(s, b"/@") || is_pseudonymized_name(s)
}

/// A fixed word: what reasons, statuses and types are made of.
pub(crate) fn is_word(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_WORD
        && s.bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_'))
}

/// A value from input, as an error message may quote it: a short token or a pseudonym as
/// is, anything else only by its length (it could be content, or a credential).
pub fn quote(s: &str) -> Cow<'_, str> {
    let token = s.len() <= 24
        && !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'));
    if token || is_pseudonym(s) {
        Cow::Borrowed(s)
    } else {
        Cow::Owned(format!("<{} bytes withheld>", s.len()))
    }
}

/// Log fields whose text (not just numbers) may be written, and only from windowtap's own
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
];

/// The log targets (crates) whose messages are written: their log calls take literal
/// messages only (a test in the binary holds the source to that). Other crates' messages
/// (hyper, rustls, ...) are withheld whatever the level, keeping their numbers and booleans.
pub(crate) const LOG_OWN_TARGETS: &[&str] =
    &["windowtap", "correlator", "hostid", "otlp", "relay", "sys"];

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

/// Where observed data enters the writable domain: ids pseudonymized, names checked.
#[derive(Clone)]
pub struct Scrub {
    pseudo: Pseudonymizer,
}

impl Scrub {
    pub fn new(pseudo: Pseudonymizer) -> Self {
        Scrub { pseudo }
    }

    /// A tool name as is when the APIs allow it, else `~` and the pseudonym of its bytes.
    pub(crate) fn tool_name(&self, name: String) -> String {
        if is_tool_name(&name) {
            name
        } else {
            format!("~{}", self.pseudo.id(&name))
        }
    }

    /// A model name as is when the APIs allow it, else `~` and the pseudonym of its bytes.
    pub(crate) fn model_name(&self, name: String) -> String {
        if is_model_name(&name) {
            name
        } else {
            format!("~{}", self.pseudo.id(&name))
        }
    }

    /// A word as is when it is one, else `other`.
    fn word(word: String) -> String {
        if is_word(&word) {
            word
        } else {
            "other".to_string()
        }
    }

    fn id(&self, raw: &str) -> String {
        self.pseudo.id(raw)
    }

    /// The event with every id pseudonymized and every name and word admissible; kinds,
    /// statuses and times are kept.
    pub fn event(&self, kind: EventKind) -> EventKind {
        kind.map_strings(|text, s| match text {
            Text::Id => self.id(&s),
            Text::ToolName => self.tool_name(s),
            Text::ModelName => self.model_name(s),
            Text::Word => Self::word(s),
        })
    }
}

/// One line the door let out (newline included). Only this module makes one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line(String);

impl AsRef<[u8]> for Line {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl Line {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

/// A record the door let out: its line, and the record itself for exporters that lay it out
/// differently (OTLP) but may only do so from what was checked.
#[derive(Debug, Clone)]
pub struct Cleared<'r> {
    record: &'r Record,
    line: Line,
}

impl<'r> Cleared<'r> {
    pub fn record(&self) -> &'r Record {
        self.record
    }

    pub fn line(&self) -> &Line {
        &self.line
    }
}

/// Which ids the door expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ids {
    /// Live output: every id must be a pseudonym made under this run's key.
    Pseudonyms,
    /// Replay output: ids are the input trace's own (already the ids of a sanitized file).
    Opaque,
}

/// The checks, then the writer.
#[derive(Debug, Clone, Copy)]
pub struct Door {
    ids: Ids,
}

impl Door {
    /// For what a live run writes: ids must be pseudonyms.
    pub const fn live() -> Door {
        Door {
            ids: Ids::Pseudonyms,
        }
    }

    /// For what replay of a trace writes: ids are the trace's.
    pub const fn replay() -> Door {
        Door { ids: Ids::Opaque }
    }

    fn id(&self, field: &'static str, s: &str) -> Result<(), Refused> {
        let (ok, kind) = match self.ids {
            Ids::Pseudonyms => (is_pseudonym(s), Kind::Pseudonym),
            Ids::Opaque => (is_id(s), Kind::Id),
        };
        if ok {
            Ok(())
        } else {
            Err(Refused { field, kind })
        }
    }

    fn opt_id(&self, field: &'static str, s: Option<&str>) -> Result<(), Refused> {
        s.map_or(Ok(()), |s| self.id(field, s))
    }

    fn name(field: &'static str, s: &str) -> Result<(), Refused> {
        if is_name(s) {
            Ok(())
        } else {
            Err(Refused {
                field,
                kind: Kind::Name,
            })
        }
    }

    fn tool_name(field: &'static str, s: &str) -> Result<(), Refused> {
        if is_tool_name(s) {
            Ok(())
        } else {
            Err(Refused {
                field,
                kind: Kind::ToolName,
            })
        }
    }

    fn model_name(field: &'static str, s: &str) -> Result<(), Refused> {
        if is_model_name(s) {
            Ok(())
        } else {
            Err(Refused {
                field,
                kind: Kind::ModelName,
            })
        }
    }

    fn word(field: &'static str, s: &str) -> Result<(), Refused> {
        if is_word(s) {
            Ok(())
        } else {
            Err(Refused {
                field,
                kind: Kind::Word,
            })
        }
    }

    fn hints(&self, h: &Hints) -> Result<(), Refused> {
        self.opt_id("tool_use_id", h.tool_use_id.as_deref())?;
        self.opt_id("item_id", h.item_id.as_deref())?;
        self.opt_id("call_id", h.call_id.as_deref())?;
        self.opt_id("thread", h.thread.as_deref())
    }

    /// Checks every string of the event against its kind, then writes its trace v2 line.
    /// (Usage counts and the stop reason are typed numbers and words already.)
    pub fn event(&self, ev: &Event) -> Result<Line, Refused> {
        match &ev.kind {
            EventKind::StreamOpen {
                stream,
                thread,
                host,
                ..
            } => {
                self.id("stream", stream)?;
                self.opt_id("thread", thread.as_deref())?;
                self.opt_id("host", host.as_deref())?;
            }
            EventKind::Request {
                stream,
                request,
                previous_response,
                outputs,
            } => {
                self.id("stream", stream)?;
                self.id("request", request)?;
                self.opt_id("previous_response", previous_response.as_deref())?;
                for o in outputs {
                    self.id("outputs", o)?;
                }
            }
            EventKind::ResponseStart {
                stream,
                response,
                request,
                model,
            } => {
                self.id("stream", stream)?;
                self.id("response", response)?;
                self.opt_id("request", request.as_deref())?;
                model
                    .as_deref()
                    .map_or(Ok(()), |m| Self::model_name("model", m))?;
            }
            EventKind::ToolCall {
                stream,
                response,
                call,
                item,
                name,
                namespace,
                ..
            } => {
                self.id("stream", stream)?;
                self.id("response", response)?;
                self.id("call", call)?;
                self.opt_id("item", item.as_deref())?;
                Self::tool_name("name", name)?;
                namespace
                    .as_deref()
                    .map_or(Ok(()), |n| Self::tool_name("namespace", n))?;
            }
            EventKind::ResponseEnd {
                stream, response, ..
            } => {
                self.id("stream", stream)?;
                self.id("response", response)?;
            }
            EventKind::StreamClose { stream } => self.id("stream", stream)?,
            EventKind::ObservationLost { stream, reason } => {
                self.id("stream", stream)?;
                Self::word("reason", reason)?;
            }
            EventKind::McpStart {
                interval,
                alias,
                tool,
                host,
                ..
            }
            | EventKind::McpInterval {
                interval,
                alias,
                tool,
                host,
                ..
            } => {
                self.id("interval", interval)?;
                Self::tool_name("alias", alias)?;
                Self::tool_name("tool", tool)?;
                if let EventKind::McpInterval { hints, .. } = &ev.kind {
                    self.hints(hints)?;
                }
                self.opt_id("host", host.as_deref())?;
            }
        }
        let mut s = String::with_capacity(160);
        trace::write_event(&mut s, ev);
        s.push('\n');
        Ok(Line(s))
    }

    /// Checks every string of the record against its kind, then writes its records v1 line.
    /// (Decision, reason and evidence are typed words already.)
    pub fn record<'r>(&self, r: &'r Record) -> Result<Cleared<'r>, Refused> {
        self.record_from(r, None)
    }

    /// [`Door::record`] with the name of the trace the record came from, when several are
    /// replayed together: a name (a file name, as the user gave it).
    pub fn record_from<'r>(
        &self,
        r: &'r Record,
        trace: Option<&str>,
    ) -> Result<Cleared<'r>, Refused> {
        let mut s = String::with_capacity(320);
        self.write_record(r, trace, &mut s)?;
        Ok(Cleared {
            record: r,
            line: Line(s),
        })
    }

    /// [`Door::record_from`]'s line appended to `out` (with its newline), for a writer that
    /// reuses one buffer rather than allocate a line per record; `out` is unchanged when the
    /// record is refused.
    pub fn write_record(
        &self,
        r: &Record,
        trace: Option<&str>,
        out: &mut String,
    ) -> Result<(), Refused> {
        if let Some(t) = trace {
            Self::name("trace", t)?;
        }
        self.id("interval", &r.interval)?;
        Self::tool_name("alias", &r.alias)?;
        Self::tool_name("tool", &r.tool)?;
        if let Some(w) = &r.window {
            self.opt_id("window.thread", w.thread.as_deref())?;
            self.id("window.stream", &w.stream)?;
            self.id("window.response", &w.response)?;
            self.opt_id("window.request", w.request.as_deref())?;
        }
        r.write_json_from(trace, out);
        out.push('\n');
        Ok(())
    }

    /// A metadata line (a trace header): a JSON object whose values are numbers, booleans,
    /// null or words, and nothing else.
    pub fn meta(&self, text: &str) -> Result<Line, Refused> {
        fn admissible(v: &Value) -> bool {
            match v {
                Value::Null | Value::Bool(_) | Value::Number(_) => true,
                Value::String(s) => is_word(s),
                Value::Array(_) | Value::Object(_) => false,
            }
        }
        let refused = Refused {
            field: "header",
            kind: Kind::Word,
        };
        let Ok(Value::Object(map)) = serde_json::from_str::<Value>(text) else {
            return Err(refused);
        };
        if !map.iter().all(|(k, v)| is_word(k) && admissible(v)) {
            return Err(refused);
        }
        let mut s = text.trim_end_matches('\n').to_string();
        s.push('\n');
        Ok(Line(s))
    }

    /// A rotated capture's piece header: `header` as [`Door::meta`] admits it, with the
    /// state open at the cut (`open`) put in before its last field (`end`, which is patched
    /// in place and so must stay last). Every id in `open` is checked as an event's id is,
    /// every alias and tool name as a tool name.
    pub fn piece_header(
        &self,
        header: &str,
        open: &crate::trace::OpenState,
    ) -> Result<Line, Refused> {
        let flat = self.meta(header)?;
        for (field, s) in open.strings() {
            match field {
                "alias" | "tool" => Self::tool_name(field, s)?,
                _ => self.id(field, s)?,
            }
        }
        let at = flat.0.rfind(r#","end":"#).ok_or(Refused {
            field: "header",
            kind: Kind::Word,
        })?;
        let mut s = String::with_capacity(flat.0.len() + 64);
        s.push_str(&flat.0[..at]);
        s.push_str(r#","open":"#);
        s.push_str(&open.json());
        s.push_str(&flat.0[at..]);
        Ok(Line(s))
    }

    /// A number as it is patched into a line already written (a header's `end`), padded
    /// with spaces to `width` bytes; `null` when there is none or it would not fit.
    pub fn padded_number(&self, v: Option<f64>, width: usize) -> Line {
        let mut s = String::with_capacity(width);
        match v {
            Some(t) if t.is_finite() => crate::json::push_ms(&mut s, t),
            _ => s.push_str("null"),
        }
        if s.len() > width {
            s = "null".to_string();
        }
        while s.len() < width {
            s.push(' ');
        }
        Line(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Client, Outcome, Transport};
    use crate::pseudo::PSEUDONYM_KEY_LEN;
    use crate::records::WindowRef;

    fn scrub() -> Scrub {
        Scrub::new(Pseudonymizer::new(&[3; PSEUDONYM_KEY_LEN]))
    }

    fn ev(kind: EventKind) -> Event {
        Event { t: 1.0, kind }
    }

    fn mcp(interval: &str, alias: &str, tool: &str, hint: Option<&str>) -> EventKind {
        EventKind::McpInterval {
            rounds: None,
            interval: interval.into(),
            alias: alias.into(),
            tool: tool.into(),
            start: 1.0,
            end: 2.0,
            outcome: Outcome::Result,
            hints: Hints {
                tool_use_id: hint.map(Into::into),
                ..Hints::default()
            },
            host: None,
        }
    }

    #[test]
    fn a_scrubbed_event_passes_the_live_door_and_a_raw_one_does_not() {
        let raw = mcp("7", "fs", "read_file", Some("toolu_01ABC"));
        let err = Door::live().event(&ev(raw.clone())).unwrap_err();
        assert_eq!(err.field, "interval");
        assert_eq!(err.kind, Kind::Pseudonym);
        let line = Door::live().event(&ev(scrub().event(raw))).unwrap();
        assert!(!line.as_str().contains("toolu_01ABC"));
        assert!(line.as_str().contains("\"read_file\""));
        assert!(line.as_str().ends_with('\n'));
    }

    #[test]
    fn the_replay_door_takes_trace_ids_but_not_text() {
        let door = Door::replay();
        assert!(door
            .event(&ev(mcp("i1", "fs", "read", Some("tu1"))))
            .is_ok());
        let err = door
            .event(&ev(mcp("i1", "fs", "read", Some("two\nlines"))))
            .unwrap_err();
        assert_eq!(err.field, "tool_use_id");
        let err = door
            .event(&ev(mcp("i1", "fs\nsecond line", "read", None)))
            .unwrap_err();
        assert_eq!((err.field, err.kind), ("alias", Kind::ToolName));
    }

    #[test]
    fn a_refusal_never_carries_the_value() {
        let secret = "sk-ant-CANARY-refusal";
        let err = Door::live()
            .event(&ev(EventKind::StreamOpen {
                stream: secret.into(),
                client: Client::Claude,
                transport: Transport::Http,
                thread: None,
                host: None,
            }))
            .unwrap_err();
        assert!(!err.to_string().contains("CANARY"), "{err}");
        assert!(err.to_string().contains("`stream`"));
    }

    #[test]
    fn names_that_are_not_names_become_pseudonyms_the_same_on_both_sides() {
        let s = scrub();
        let long = "x".repeat(MAX_TOOL_NAME + 1);
        let a = s.tool_name(long.clone());
        assert_eq!(a, s.tool_name(long));
        assert!(a.starts_with('~') && is_tool_name(&a) && a.len() == 33);
        assert_eq!(s.tool_name("mcp__fs__read".into()), "mcp__fs__read");
        assert!(s.tool_name("a\u{7}b".into()).starts_with('~'));
    }

    #[test]
    fn names_are_admitted_only_as_the_apis_allow_them() {
        let s = scrub();
        // What the APIs take stays, up to 128 bytes.
        for ok in ["mcp__fs__read", "my.tool:v2", "a-b_c", &"t".repeat(128)] {
            assert_eq!(s.tool_name(ok.to_string()), ok);
        }
        for ok in ["claude-sonnet-4-5", "gpt-5.1-codex", "openai/gpt-oss@2026"] {
            assert_eq!(s.model_name(ok.to_string()), ok);
        }
        // Anything else is a pseudonym: free text, quotes, non-ASCII, a slash in a tool name,
        // one byte too many.
        for bad in [
            "read file",
            "tool\"name",
            "ok; ignore previous instructions",
            "caf\u{e9}",
            "a/b",
            &"t".repeat(129),
        ] {
            let got = s.tool_name(bad.to_string());
            assert_eq!(got, format!("~{}", s.pseudo.id(bad)), "{bad:?}");
        }
        for bad in ["gpt 5", "model\twith\ttabs", &"m".repeat(129)] {
            let got = s.model_name(bad.to_string());
            assert_eq!(got, format!("~{}", s.pseudo.id(bad)), "{bad:?}");
        }
        // Every place a name goes through the same rule.
        let EventKind::ToolCall {
            name, namespace, ..
        } = s.event(EventKind::ToolCall {
            stream: "s".into(),
            response: "r".into(),
            call: "c".into(),
            item: None,
            name: "CANARY tool name".into(),
            namespace: Some("CANARY namespace".into()),
            kind: crate::event::CallKind::Function,
        })
        else {
            panic!()
        };
        assert!(name.starts_with('~') && namespace.unwrap().starts_with('~'));
        let EventKind::McpInterval { alias, tool, .. } =
            s.event(mcp("i", "my server", "CANARY tool", None))
        else {
            panic!()
        };
        assert!(alias.starts_with('~') && tool.starts_with('~'));
    }

    #[test]
    fn the_door_refuses_names_the_apis_would_not_take() {
        let door = Door::replay();
        let err = door
            .event(&ev(mcp("i1", "fs", "read file", None)))
            .unwrap_err();
        assert_eq!((err.field, err.kind), ("tool", Kind::ToolName));
        let tool_call = |name: &str, namespace: Option<&str>| EventKind::ToolCall {
            stream: "s1".into(),
            response: "r1".into(),
            call: "c1".into(),
            item: None,
            name: name.into(),
            namespace: namespace.map(Into::into),
            kind: crate::event::CallKind::Function,
        };
        assert_eq!(
            door.event(&ev(tool_call("a b", None))).unwrap_err().field,
            "name"
        );
        assert_eq!(
            door.event(&ev(tool_call("echo", Some("mcp/x"))))
                .unwrap_err()
                .field,
            "namespace"
        );
        // The pseudonym written for a name passes; `~` and anything else does not.
        let pseudonymized = scrub().tool_name("a b".into());
        assert!(door.event(&ev(tool_call(&pseudonymized, None))).is_ok());
        assert!(door
            .event(&ev(tool_call("~not-a-pseudonym", None)))
            .is_err());
        let mut r = record("i1", "r1");
        r.tool = "x".repeat(129).into();
        assert_eq!(door.record(&r).unwrap_err().field, "tool");
    }

    #[test]
    fn hints_and_outputs_map_like_the_ids_they_name() {
        let p = Pseudonymizer::new(&[7; PSEUDONYM_KEY_LEN]);
        let EventKind::Request { outputs, .. } = Scrub::new(p.clone()).event(EventKind::Request {
            stream: "s".into(),
            request: "q".into(),
            previous_response: None,
            outputs: vec!["call_1".into()],
        }) else {
            panic!()
        };
        assert_eq!(outputs, vec![p.id("call_1")]);
    }

    #[test]
    fn hosts_are_ids_and_model_names_are_names() {
        let s = scrub();
        let EventKind::McpInterval { host, .. } = s.event(EventKind::McpInterval {
            rounds: None,
            interval: "i".into(),
            alias: "a".into(),
            tool: "t".into(),
            start: 1.0,
            end: 2.0,
            outcome: Outcome::Result,
            hints: Hints::default(),
            host: Some("pid 4242 start 99".into()),
        }) else {
            panic!()
        };
        let host = host.unwrap();
        assert!(is_pseudonym(&host), "{host}");
        // The same raw host maps to the same pseudonym on a stream.
        let EventKind::StreamOpen { host: h2, .. } = s.event(EventKind::StreamOpen {
            stream: "s".into(),
            client: Client::Claude,
            transport: Transport::Http,
            thread: None,
            host: Some("pid 4242 start 99".into()),
        }) else {
            panic!()
        };
        assert_eq!(h2.as_deref(), Some(host.as_str()));
        // A raw host id never passes the live door.
        let raw = EventKind::StreamOpen {
            stream: s.pseudo.id("s"),
            client: Client::Claude,
            transport: Transport::Http,
            thread: None,
            host: Some("4242".into()),
        };
        assert_eq!(Door::live().event(&ev(raw)).unwrap_err().field, "host");
        // A model "name" that is not a name becomes a pseudonym; a real one stays.
        let start = |model: &str| EventKind::ResponseStart {
            stream: "s".into(),
            response: "r".into(),
            request: None,
            model: Some(model.into()),
        };
        let EventKind::ResponseStart { model, .. } = s.event(start("claude-sonnet-4-5")) else {
            panic!()
        };
        assert_eq!(model.as_deref(), Some("claude-sonnet-4-5"));
        let EventKind::ResponseStart { model, .. } = s.event(start("CANARY\nsecret")) else {
            panic!()
        };
        assert!(model.unwrap().starts_with('~'));
        let err = Door::replay().event(&ev(start("two\nlines"))).unwrap_err();
        assert_eq!((err.field, err.kind), ("model", Kind::ModelName));
    }

    #[test]
    fn lost_reasons_outside_the_word_shape_become_other() {
        let EventKind::ObservationLost { reason, .. } = scrub().event(EventKind::ObservationLost {
            stream: "s".into(),
            reason: "Secret Text".into(),
        }) else {
            panic!("kind changed")
        };
        assert_eq!(reason, "other");
    }

    fn record(interval: &str, response: &str) -> Record {
        Record {
            interval: interval.into(),
            alias: "fs".into(),
            tool: "read".into(),
            start: 1.0,
            end: 2.0,
            reason: None,
            evidence: vec![],
            candidates: 1,
            window: Some(WindowRef {
                thread: None,
                stream: "s1".into(),
                response: response.into(),
                request: None,
                open: 0.5,
                close: Some(3.0),
            }),
            decided_at: 4.0,
        }
    }

    #[test]
    fn records_are_checked_down_to_their_window() {
        let r = record("i1", "resp_RAW\twith a tab");
        assert_eq!(
            Door::replay().record(&r).unwrap_err().field,
            "window.response"
        );
        let ok = record("i1", "r1");
        let cleared = Door::replay().record(&ok).unwrap();
        assert_eq!(cleared.line().as_str(), ok.to_line());
        assert_eq!(cleared.record(), &ok);
        assert_eq!(Door::live().record(&ok).unwrap_err().field, "interval");
    }

    #[test]
    fn meta_lines_hold_numbers_and_words_only() {
        let door = Door::live();
        let ok = r#"{"type":"trace","version":2,"close_wait":2000,"end":null   }"#;
        assert_eq!(door.meta(ok).unwrap().as_str(), format!("{ok}\n"));
        assert!(door.meta(r#"{"type":"trace","note":"free text"}"#).is_err());
        assert!(door.meta(r#"{"type":"trace","x":{"y":1}}"#).is_err());
        assert!(door.meta("not json").is_err());
    }

    #[test]
    fn padded_numbers_keep_their_width() {
        let door = Door::live();
        assert_eq!(door.padded_number(Some(12.5), 8).as_str(), "12.5    ");
        assert_eq!(door.padded_number(None, 6).as_str(), "null  ");
        assert_eq!(door.padded_number(Some(1e300), 6).as_str(), "null  ");
    }

    #[test]
    fn logs_admit_own_words_and_withhold_everything_else() {
        assert_eq!(log_text("windowtap::relay::http", "path"), LogField::Admit);
        assert_eq!(log_text("windowtap", "message"), LogField::Admit);
        assert_eq!(
            log_text("windowtap::relay", "authorization"),
            LogField::Withhold
        );
        assert_eq!(log_text("hyper::proto::h1", "message"), LogField::Withhold);
        assert_eq!(log_text("windowtapx", "message"), LogField::Withhold);
        assert_eq!(log_text("rustls::client", "error"), LogField::Withhold);
    }

    #[test]
    fn quotes_keep_short_tokens_and_withhold_the_rest() {
        assert_eq!(quote("nope"), "nope");
        assert_eq!(quote(&"a".repeat(32)), "a".repeat(32));
        assert_eq!(
            quote("sk-ant-api03-0123456789abcdef"),
            "<29 bytes withheld>"
        );
        assert_eq!(quote("two words"), "<9 bytes withheld>");
        assert_eq!(quote(""), "<0 bytes withheld>");
    }
}
