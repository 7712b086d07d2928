//! Records v1: one attribution record per MCP interval, written in decision order
//! (docs/design.md §6). Field order and number format are fixed so that replay output is
//! byte-identical from run to run.

use std::fmt;
use std::io::BufRead;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::event::Millis;
use crate::json::{push_key, push_ms, push_opt_str, push_str};
use crate::lines::{fault, kind_of, order, Fault, Fields, LineError, LineSource, Problem, Token};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    Incomplete,
    Ambiguous,
    Unclosed,
    IdentityConflict,
    NoWindow,
}

impl Reason {
    pub const ALL: [Reason; 5] = [
        Reason::Incomplete,
        Reason::Ambiguous,
        Reason::Unclosed,
        Reason::IdentityConflict,
        Reason::NoWindow,
    ];

    /// Every reason's word, in [`Reason::ALL`] order.
    pub(crate) const WORDS: &'static [&'static str] = &[
        "incomplete",
        "ambiguous",
        "unclosed",
        "identity_conflict",
        "no_window",
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Incomplete => "incomplete",
            Reason::Ambiguous => "ambiguous",
            Reason::Unclosed => "unclosed",
            Reason::IdentityConflict => "identity_conflict",
            Reason::NoWindow => "no_window",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What agreed between an interval and the window it was attributed to, in record order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Evidence {
    Containment,
    ToolUseId,
    ItemId,
    CallId,
    Thread,
    /// The interval's host and the window's stream's host are both known and equal.
    Host,
    Route,
}

impl Evidence {
    pub fn as_str(self) -> &'static str {
        match self {
            Evidence::Containment => "containment",
            Evidence::ToolUseId => "tool_use_id",
            Evidence::ItemId => "item_id",
            Evidence::CallId => "call_id",
            Evidence::Thread => "thread",
            Evidence::Host => "host",
            Evidence::Route => "route",
        }
    }

    /// Every evidence word, in [`Evidence::ALL`] order.
    pub(crate) const WORDS: &'static [&'static str] = &[
        "containment",
        "tool_use_id",
        "item_id",
        "call_id",
        "thread",
        "host",
        "route",
    ];

    pub const ALL: [Evidence; 7] = [
        Evidence::Containment,
        Evidence::ToolUseId,
        Evidence::ItemId,
        Evidence::CallId,
        Evidence::Thread,
        Evidence::Host,
        Evidence::Route,
    ];

    pub(crate) fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.as_str() == s)
    }
}

/// The window an interval was attributed to.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowRef {
    pub thread: Option<Arc<str>>,
    pub stream: Arc<str>,
    pub response: Arc<str>,
    /// The request that continued the response (closed the window).
    pub request: Option<Arc<str>>,
    pub open: Millis,
    pub close: Option<Millis>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub interval: Arc<str>,
    pub alias: Arc<str>,
    pub tool: Arc<str>,
    pub start: Millis,
    pub end: Millis,
    /// `None` means attributed; `Some(reason)` means abstained for that reason.
    pub reason: Option<Reason>,
    pub evidence: Vec<Evidence>,
    pub candidates: usize,
    pub window: Option<WindowRef>,
    pub decided_at: Millis,
}

impl Record {
    pub(crate) fn attributed(&self) -> bool {
        self.reason.is_none()
    }

    /// `attributed` or `abstained`.
    pub fn decision(&self) -> &'static str {
        if self.attributed() {
            "attributed"
        } else {
            "abstained"
        }
    }

    /// Appends the record as one JSON line (without the newline).
    pub(crate) fn write_json(&self, out: &mut String) {
        self.write_json_from(None, out);
    }

    /// Appends the record as one JSON line (without the newline), with the optional `trace`
    /// field last when the record comes from one of several traces replayed together.
    pub fn write_json_from(&self, trace: Option<&str>, out: &mut String) {
        out.push_str("{\"type\":\"attribution\",\"version\":1,");
        push_key(out, "interval");
        push_str(out, &self.interval);
        out.push(',');
        push_key(out, "alias");
        push_str(out, &self.alias);
        out.push(',');
        push_key(out, "tool");
        push_str(out, &self.tool);
        out.push_str(",\"start\":");
        push_ms(out, self.start);
        out.push_str(",\"end\":");
        push_ms(out, self.end);
        out.push_str(",\"decision\":\"");
        out.push_str(self.decision());
        out.push_str("\",\"reason\":");
        push_opt_str(out, self.reason.map(Reason::as_str));
        out.push_str(",\"evidence\":[");
        for (i, e) in self.evidence.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            push_str(out, e.as_str());
        }
        out.push_str("],\"candidates\":");
        crate::json::push_u64(out, self.candidates as u64);
        out.push_str(",\"window\":");
        match &self.window {
            None => out.push_str("null"),
            Some(w) => {
                out.push('{');
                push_key(out, "thread");
                push_opt_str(out, w.thread.as_deref());
                out.push(',');
                push_key(out, "stream");
                push_str(out, &w.stream);
                out.push(',');
                push_key(out, "response");
                push_str(out, &w.response);
                out.push(',');
                push_key(out, "request");
                push_opt_str(out, w.request.as_deref());
                out.push_str(",\"open\":");
                push_ms(out, w.open);
                out.push_str(",\"close\":");
                match w.close {
                    Some(c) => push_ms(out, c),
                    None => out.push_str("null"),
                }
                out.push('}');
            }
        }
        out.push_str(",\"decided_at\":");
        push_ms(out, self.decided_at);
        if let Some(t) = trace {
            out.push(',');
            push_key(out, "trace");
            push_str(out, t);
        }
        out.push('}');
    }

    /// The record as one JSON line, newline included.
    pub fn to_line(&self) -> String {
        let mut s = String::with_capacity(320);
        self.write_json(&mut s);
        s.push('\n');
        s
    }
}

/// Counts for the one-line summary: `N intervals: A attributed, B abstained (incomplete x, ...)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub attributed: usize,
    /// Abstentions per reason, in [`Reason::ALL`] order.
    pub abstained: [usize; 5],
}

impl Summary {
    pub fn add(&mut self, r: &Record) {
        match r.reason {
            None => self.attributed += 1,
            Some(reason) => {
                let i = Reason::ALL.iter().position(|x| *x == reason).unwrap_or(0);
                self.abstained[i] += 1;
            }
        }
    }

    pub fn total(&self) -> usize {
        self.attributed + self.abstained.iter().sum::<usize>()
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let abstained: usize = self.abstained.iter().sum();
        let total = self.total();
        write!(
            f,
            "{total} interval{}: {} attributed, {} abstained (",
            if total == 1 { "" } else { "s" },
            self.attributed,
            abstained
        )?;
        for (i, reason) in Reason::ALL.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{} {}", reason, self.abstained[i])?;
        }
        f.write_str(")")
    }
}

// ---------------------------------------------------------------------------------------
// The strict records v1 reader.
//
// Mirrors `trace::TraceReader`: every malformed line is an error naming the source, the line,
// the field when there is one, and what was wrong; it never guesses. Beyond fields and types it
// checks what the decision rule guarantees of every record (docs/design.md §4, §6), so that a
// checker run over a records file catches a correlator that breaks its own rule.

/// A malformed records line: source, line number, field and what was wrong.
pub type RecordError = LineError;

fn in_window(k: &'static str) -> &'static str {
    match k {
        "thread" => "window.thread",
        "stream" => "window.stream",
        "response" => "window.response",
        "request" => "window.request",
        "open" => "window.open",
        "close" => "window.close",
        other => other,
    }
}

/// Parses one `attribution` line, checking fields, types and the rule's invariants.
fn parse_record(obj: &Map<String, Value>) -> Result<Record, Fault> {
    let f = Fields::new(obj);
    match f.get("version")? {
        Value::Number(n) if n.as_u64() == Some(1) => {}
        other => {
            return Err(fault(
                "version",
                Problem::Version {
                    what: "records",
                    got: Token::of_value(other),
                    readable: "1 is read",
                },
            ))
        }
    }
    let interval = f.string("interval")?;
    let alias = f.string("alias")?;
    let tool = f.string("tool")?;
    let start = f.time("start")?;
    let end = f.time("end")?;
    if end < start {
        return Err(order("end", end, "is before start ", start, ""));
    }
    let decision = f.string("decision")?;
    let attributed = match decision {
        "attributed" => true,
        "abstained" => false,
        other => {
            return Err(fault(
                "decision",
                Problem::NotOneOf {
                    got: Token::of(other),
                    words: &["attributed", "abstained"],
                    or_null: false,
                },
            ))
        }
    };
    let reason = match f.opt_string("reason")? {
        None => None,
        Some(s) => Some(Reason::parse(s).ok_or_else(|| {
            fault(
                "reason",
                Problem::NotOneOf {
                    got: Token::of(s),
                    words: Reason::WORDS,
                    or_null: true,
                },
            )
        })?),
    };
    let evidence = match f.get("evidence")? {
        Value::Array(items) => {
            let mut out: Vec<Evidence> = Vec::with_capacity(items.len());
            for v in items {
                let Value::String(s) = v else {
                    return Err(fault("evidence", Problem::NotStrings { got: kind_of(v) }));
                };
                let e = Evidence::parse(s).ok_or_else(|| {
                    fault(
                        "evidence",
                        Problem::NotOneOf {
                            got: Token::of(s),
                            words: Evidence::WORDS,
                            or_null: false,
                        },
                    )
                })?;
                if out.contains(&e) {
                    return Err(fault("evidence", Problem::Twice { got: Token::of(s) }));
                }
                out.push(e);
            }
            out
        }
        other => return Err(f.wrong("evidence", "an array", other)),
    };
    let candidates = match f.get("candidates")? {
        Value::Number(n) => match n.as_u64() {
            Some(c) => {
                usize::try_from(c).map_err(|_| fault("candidates", Problem::TooLarge { got: c }))?
            }
            None => {
                return Err(fault(
                    "candidates",
                    Problem::NotACount {
                        got: Token::of(&n.to_string()),
                    },
                ))
            }
        },
        other => return Err(f.wrong("candidates", "a number", other)),
    };
    let window = match f.get("window")? {
        Value::Null => None,
        Value::Object(w) => {
            let wf = Fields {
                obj: w,
                name: in_window,
            };
            let open = wf.time("open")?;
            let close = wf.opt_time("close")?;
            Some(WindowRef {
                thread: wf.opt_string("thread")?.map(Arc::from),
                stream: wf.string("stream")?.into(),
                response: wf.string("response")?.into(),
                request: wf.opt_string("request")?.map(Arc::from),
                open,
                close,
            })
        }
        other => return Err(f.wrong("window", "an object or null", other)),
    };
    let decided_at = f.time("decided_at")?;
    if decided_at < end {
        return Err(order(
            "decided_at",
            decided_at,
            "is before the interval's end ",
            end,
            ": no decision precedes its report",
        ));
    }

    if attributed {
        if let Some(r) = reason {
            return Err(fault(
                "reason",
                Problem::NotNullWhenAttributed { got: r.as_str() },
            ));
        }
        let Some(w) = &window else {
            return Err(fault(
                "window",
                Problem::Rule("an attributed record must name its window"),
            ));
        };
        if evidence.first() != Some(&Evidence::Containment) {
            return Err(fault(
                "evidence",
                Problem::Rule("an attributed record's evidence starts with `containment`"),
            ));
        }
        if candidates != 1 {
            return Err(fault(
                "candidates",
                Problem::Candidates {
                    reason: "attributed",
                    want: "exactly 1",
                    got: candidates,
                },
            ));
        }
        let Some(close) = w.close else {
            return Err(fault(
                "window.close",
                Problem::Rule("an attributed record's window has closed (null is not allowed)"),
            ));
        };
        if w.open > start {
            return Err(order(
                "window.open",
                w.open,
                "is after the interval's start ",
                start,
                ": the window does not contain it",
            ));
        }
        if close < end {
            return Err(order(
                "window.close",
                close,
                "is before the interval's end ",
                end,
                ": the window does not contain it",
            ));
        }
        if close > decided_at {
            return Err(order(
                "window.close",
                close,
                "is after decided_at ",
                decided_at,
                ": the window closed before the decision",
            ));
        }
        if w.request.is_none() {
            return Err(fault(
                "window.request",
                Problem::Rule(
                    "a closed window names the request that closed it (null is not allowed)",
                ),
            ));
        }
    } else {
        let Some(r) = reason else {
            return Err(fault(
                "reason",
                Problem::Rule("an abstained record names its reason (null is not allowed)"),
            ));
        };
        if window.is_some() {
            return Err(fault(
                "window",
                Problem::Rule("must be null when the decision is abstained"),
            ));
        }
        let ok = match r {
            Reason::Incomplete => true,
            Reason::Ambiguous => candidates >= 2,
            Reason::Unclosed => candidates == 1,
            // 0 by default (no eligible window contains it, docs/design.md §4 rule 4), 1 under
            // `--candidates all` (the one containing window, contradicted by a hint).
            Reason::IdentityConflict => candidates <= 1,
            Reason::NoWindow => candidates == 0,
        };
        if !ok {
            let want = match r {
                Reason::Ambiguous => "2 or more",
                Reason::NoWindow => "0",
                Reason::IdentityConflict => "0 or 1",
                _ => "exactly 1",
            };
            return Err(fault(
                "candidates",
                Problem::Candidates {
                    reason: r.as_str(),
                    want,
                    got: candidates,
                },
            ));
        }
    }
    Ok(Record {
        interval: interval.into(),
        alias: alias.into(),
        tool: tool.into(),
        start,
        end,
        reason,
        evidence,
        candidates,
        window,
        decided_at,
    })
}

/// Reads records v1 from any buffered reader, one record at a time. An optional live-run
/// header (`{"type":"run",…}`) may come first; it is checked for place and skipped, not returned as a record.
pub struct RecordReader<R> {
    lines: LineSource<R>,
    seen_line: bool,
    /// The `trace` field of the record last returned.
    trace: Option<String>,
}

impl<R: BufRead> RecordReader<R> {
    /// `source_name` is what errors call the input (usually the file path).
    pub fn new(input: R, source_name: impl Into<String>) -> Self {
        RecordReader {
            lines: LineSource::new(input, source_name.into()),
            seen_line: false,
            trace: None,
        }
    }

    /// The trace the record last returned came from (its optional `trace` field: replay of
    /// several traces names each record's), or `None`.
    pub(crate) fn trace(&self) -> Option<&str> {
        self.trace.as_deref()
    }

    /// One line's object: a record, or the run header (`None`).
    fn parse_object(&mut self, obj: Map<String, Value>) -> Result<Option<Record>, Fault> {
        let first = !self.seen_line;
        self.seen_line = true;
        let ty = Fields::new(&obj).string("type")?;
        match ty {
            "attribution" => {
                let r = parse_record(&obj)?;
                self.trace = match Fields::new(&obj).hint("trace")? {
                    Some(t) if !crate::sanitize::is_name(t) => {
                        return Err(fault(
                            "trace",
                            Problem::Rule("a trace's name: 1 to 1024 bytes, no control character"),
                        ))
                    }
                    t => t.map(str::to_owned),
                };
                Ok(Some(r))
            }
            "run" if first => Ok(None),
            "run" => Err(fault(
                "type",
                Problem::Rule("a run header may only be the first line"),
            )),
            "trace" => Err(fault(
                "type",
                Problem::Rule("this is a trace header, not a record (is this a trace file?)"),
            )),
            other => Err(fault(
                "type",
                Problem::UnknownType {
                    what: "record",
                    got: Token::of(other),
                    hint: " (expected `attribution`)",
                },
            )),
        }
    }
}

impl<R: BufRead> Iterator for RecordReader<R> {
    type Item = Result<Record, RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let obj = match self.lines.next_object()? {
                Ok(obj) => obj,
                Err(e) => return Some(Err(e)),
            };
            match self.parse_object(obj) {
                Ok(Some(r)) => return Some(Ok(r)),
                Ok(None) => continue,
                Err(f) => return Some(Err(self.lines.fail(f))),
            }
        }
    }
}

/// Reads a whole records file into memory, each record with the trace it names (if any).
pub fn read_all_from(
    input: impl BufRead,
    source_name: &str,
) -> Result<Vec<(Record, Option<String>)>, RecordError> {
    let mut reader = RecordReader::new(input, source_name);
    let mut out = Vec::new();
    while let Some(r) = reader.next() {
        out.push((r?, reader.trace().map(str::to_string)));
    }
    Ok(out)
}

/// Reads a whole records file into memory.
pub fn read_all(input: impl BufRead, source_name: &str) -> Result<Vec<Record>, RecordError> {
    RecordReader::new(input, source_name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_design_example_is_written_exactly() {
        let r = Record {
            interval: "i1".into(),
            alias: "probe".into(),
            tool: "echo".into(),
            start: 7187.0,
            end: 7264.0,
            reason: None,
            evidence: vec![Evidence::Containment, Evidence::ItemId, Evidence::Thread],
            candidates: 1,
            window: Some(WindowRef {
                thread: Some("th1".into()),
                stream: "s1".into(),
                response: "r1".into(),
                request: Some("q2".into()),
                open: 6905.0,
                close: Some(7278.0),
            }),
            decided_at: 7280.0,
        };
        assert_eq!(
            r.to_line(),
            concat!(
                r#"{"type":"attribution","version":1,"interval":"i1","alias":"probe","tool":"echo","start":7187,"end":7264,"#,
                r#""decision":"attributed","reason":null,"evidence":["containment","item_id","thread"],"candidates":1,"#,
                r#""window":{"thread":"th1","stream":"s1","response":"r1","request":"q2","open":6905,"close":7278},"#,
                r#""decided_at":7280}"#,
                "\n"
            )
        );
    }

    #[test]
    fn summary_line_names_every_reason() {
        let s = Summary {
            attributed: 3,
            abstained: [0, 2, 0, 0, 0],
        };
        assert_eq!(
            s.to_string(),
            "5 intervals: 3 attributed, 2 abstained (incomplete 0, ambiguous 2, unclosed 0, identity_conflict 0, no_window 0)"
        );
        let one = Summary {
            attributed: 1,
            abstained: [0; 5],
        };
        assert!(
            one.to_string().starts_with("1 interval: 1 attributed"),
            "{one}"
        );
    }

    #[test]
    fn identity_conflict_has_no_candidate_by_default_and_one_under_candidates_all() {
        let record = |candidates| Record {
            interval: "i1".into(),
            alias: "probe".into(),
            tool: "echo".into(),
            start: 10.0,
            end: 20.0,
            reason: Some(Reason::IdentityConflict),
            evidence: vec![],
            candidates,
            window: None,
            decided_at: 21.0,
        };
        for ok in [0, 1] {
            let line = record(ok).to_line();
            assert!(read_all(line.as_bytes(), "r.jsonl").is_ok(), "{line}");
        }
        let line = record(2).to_line();
        let err = read_all(line.as_bytes(), "r.jsonl")
            .unwrap_err()
            .to_string();
        assert!(err.contains("0 or 1"), "{err}");
    }

    #[test]
    fn written_records_read_back_identically() {
        let attributed = Record {
            interval: "i1".into(),
            alias: "probe".into(),
            tool: "echo".into(),
            start: 7187.5,
            end: 7264.0,
            reason: None,
            evidence: vec![Evidence::Containment, Evidence::ItemId, Evidence::Route],
            candidates: 1,
            window: Some(WindowRef {
                thread: None,
                stream: "s1".into(),
                response: "r1".into(),
                request: Some("q2".into()),
                open: 6905.0,
                close: Some(7278.0),
            }),
            decided_at: 7280.0,
        };
        let abstained = Record {
            interval: "i\"2<".into(),
            reason: Some(Reason::Ambiguous),
            evidence: vec![],
            candidates: 2,
            window: None,
            ..attributed.clone()
        };
        let text = format!(
            "{{\"type\":\"run\",\"epoch\":\"2026-11-29T21:00:00Z\"}}\n{}\n{}",
            attributed.to_line(),
            abstained.to_line()
        );
        let back: Vec<Record> = RecordReader::new(text.as_bytes(), "r.jsonl")
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(back, vec![attributed, abstained]);
    }

    #[test]
    fn an_empty_records_file_has_no_records() {
        assert_eq!(read_all(&b""[..], "e.jsonl").unwrap(), vec![]);
    }
}
