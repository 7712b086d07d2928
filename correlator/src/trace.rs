//! Trace v1: a strict reader and a writer whose lines the reader accepts (design.md §5).
//!
//! The reader never guesses: every malformed line is an error naming the source, the line
//! number, the field when there is one, and what was wrong. Its bookkeeping is bounded by what
//! is open (streams, responses, running MCP calls), not by the length of the trace.

use std::collections::{HashMap, HashSet};
use std::io::BufRead;

use serde_json::{Map, Value};

use crate::event::*;
use crate::json::{push_key, push_ms, push_opt_str, push_str};
use crate::lines::{fault, line_fault, Fault, Fields, LineError, LineSource};

/// The first line of every trace v1 file.
pub const HEADER: &str = r#"{"type":"trace","version":1}"#;

/// A malformed trace line: source, line number, field and what was wrong.
pub type TraceError = LineError;

/// Parses one event line's JSON into an [`Event`], checking fields and types only.
fn parse_event(obj: &Map<String, Value>) -> Result<Event, Fault> {
    let f = Fields::new(obj);
    let ty = f.string("type")?;
    if ty == "trace" {
        return Err(fault("type", "a second trace header"));
    }
    let t = f.time("t")?;
    let kind = match ty.as_str() {
        "stream_open" => EventKind::StreamOpen {
            stream: f.string("stream")?,
            client: f.word("client", Client::parse, Client::WORDS)?,
            transport: f.word("transport", Transport::parse, Transport::WORDS)?,
            thread: f.opt_string("thread")?,
        },
        "request" => EventKind::Request {
            stream: f.string("stream")?,
            request: f.string("request")?,
            previous_response: f.opt_string("previous_response")?,
            outputs: f.string_array("outputs")?,
        },
        "response_start" => EventKind::ResponseStart {
            stream: f.string("stream")?,
            response: f.string("response")?,
            request: f.opt_string("request")?,
        },
        "tool_call" => EventKind::ToolCall {
            stream: f.string("stream")?,
            response: f.string("response")?,
            call: f.string("call")?,
            item: f.opt_string("item")?,
            name: f.string("name")?,
            namespace: f.opt_string("namespace")?,
            kind: f.word("kind", CallKind::parse, CallKind::WORDS)?,
        },
        "response_end" => EventKind::ResponseEnd {
            stream: f.string("stream")?,
            response: f.string("response")?,
            status: f.word("status", ResponseStatus::parse, ResponseStatus::WORDS)?,
        },
        "stream_close" => EventKind::StreamClose {
            stream: f.string("stream")?,
        },
        "observation_lost" => EventKind::ObservationLost {
            stream: f.string("stream")?,
            reason: f.string("reason")?,
        },
        "mcp_start" => {
            let start = f.time("start")?;
            if start > t {
                return Err(fault(
                    "start",
                    format!("{start} is after the report time t={t}"),
                ));
            }
            EventKind::McpStart {
                interval: f.string("interval")?,
                alias: f.string("alias")?,
                tool: f.string("tool")?,
                start,
            }
        }
        "mcp_interval" => {
            let start = f.time("start")?;
            let end = f.time("end")?;
            if end < start {
                return Err(fault("end", format!("{end} is before start {start}")));
            }
            if end > t {
                return Err(fault(
                    "end",
                    format!("{end} is after the report time t={t}"),
                ));
            }
            EventKind::McpInterval {
                interval: f.string("interval")?,
                alias: f.string("alias")?,
                tool: f.string("tool")?,
                start,
                end,
                outcome: f.word("outcome", Outcome::parse, Outcome::WORDS)?,
                hints: Hints {
                    tool_use_id: f.hint("tool_use_id")?,
                    item_id: f.hint("item_id")?,
                    call_id: f.hint("call_id")?,
                    thread: f.hint("thread")?,
                },
            }
        }
        other => return Err(fault("type", format!("unknown event type `{other}`"))),
    };
    Ok(Event { t, kind })
}

#[derive(Default)]
struct StreamState {
    lost: bool,
    /// Responses started on this stream and not yet ended.
    open_responses: HashSet<String>,
}

/// Checks the order rules of trace v1 across lines: time never goes backwards, and every
/// event names a stream or response that is open. Bounded by what is open.
#[derive(Default)]
pub struct Validator {
    last_t: Option<Millis>,
    streams: HashMap<String, StreamState>,
    /// Running MCP calls: interval id -> (alias, tool, start).
    running: HashMap<String, (String, String, Millis)>,
}

impl Validator {
    pub fn new() -> Self {
        Self::default()
    }

    fn check(&mut self, ev: &Event) -> Result<(), Fault> {
        if let Some(last) = self.last_t {
            if ev.t < last {
                return Err(fault(
                    "t",
                    format!("{} goes backwards (previous event at {last})", ev.t),
                ));
            }
        }
        self.last_t = Some(ev.t);
        match &ev.kind {
            EventKind::StreamOpen { stream, .. } => {
                if self.streams.contains_key(stream) {
                    return Err(fault(
                        "stream",
                        format!("stream `{stream}` is already open"),
                    ));
                }
                self.streams.insert(stream.clone(), StreamState::default());
            }
            EventKind::StreamClose { stream } => {
                self.streams
                    .remove(stream)
                    .ok_or_else(|| fault("stream", format!("stream `{stream}` is not open")))?;
            }
            EventKind::ObservationLost { stream, .. } => {
                let st = self.live_stream(stream)?;
                st.lost = true;
            }
            EventKind::Request { stream, .. } => {
                self.live_stream(stream)?;
            }
            EventKind::ResponseStart {
                stream, response, ..
            } => {
                let st = self.live_stream(stream)?;
                if !st.open_responses.insert(response.clone()) {
                    return Err(fault(
                        "response",
                        format!("response `{response}` is already open"),
                    ));
                }
            }
            EventKind::ToolCall {
                stream, response, ..
            } => {
                let st = self.live_stream(stream)?;
                if !st.open_responses.contains(response) {
                    return Err(fault(
                        "response",
                        format!("response `{response}` is not open on stream `{stream}`"),
                    ));
                }
            }
            EventKind::ResponseEnd {
                stream, response, ..
            } => {
                let st = self.live_stream(stream)?;
                if !st.open_responses.remove(response) {
                    return Err(fault(
                        "response",
                        format!("response `{response}` is not open on stream `{stream}`"),
                    ));
                }
            }
            EventKind::McpStart {
                interval,
                alias,
                tool,
                start,
            } => {
                if self.running.contains_key(interval) {
                    return Err(fault(
                        "interval",
                        format!("interval `{interval}` already started"),
                    ));
                }
                self.running
                    .insert(interval.clone(), (alias.clone(), tool.clone(), *start));
            }
            EventKind::McpInterval {
                interval,
                alias,
                tool,
                start,
                ..
            } => {
                if let Some((a, tl, s)) = self.running.remove(interval) {
                    if &a != alias || &tl != tool || s != *start {
                        return Err(fault(
                            "interval",
                            format!(
                                "`{interval}` disagrees with its mcp_start (alias, tool or start)"
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// A stream that is open and whose observation has not been lost.
    fn live_stream(&mut self, stream: &str) -> Result<&mut StreamState, Fault> {
        match self.streams.get_mut(stream) {
            None => Err(fault("stream", format!("stream `{stream}` is not open"))),
            Some(st) if st.lost => Err(fault(
                "stream",
                format!("stream `{stream}` lost observation; only stream_close may follow"),
            )),
            Some(st) => Ok(st),
        }
    }
}

/// Reads a trace v1 from any buffered reader, one event at a time.
pub struct TraceReader<R> {
    lines: LineSource<R>,
    header_seen: bool,
    header: Option<Map<String, Value>>,
    validator: Validator,
}

impl<R: BufRead> TraceReader<R> {
    /// `source_name` is what errors call the input (usually the file path).
    pub fn new(input: R, source_name: impl Into<String>) -> Self {
        TraceReader {
            lines: LineSource::new(input, source_name.into()),
            header_seen: false,
            header: None,
            validator: Validator::new(),
        }
    }

    /// The header line's fields, once the first event (or the end) has been read. Extra
    /// header fields are allowed; replay reads its options from them.
    pub fn header(&self) -> Option<&Map<String, Value>> {
        self.header.as_ref()
    }

    /// One line's object: the header (`None`) or an event.
    fn parse_object(&mut self, obj: Map<String, Value>) -> Result<Option<Event>, Fault> {
        if !self.header_seen {
            let f = Fields::new(&obj);
            let ty = f.string("type")?;
            if ty != "trace" {
                return Err(fault(
                    "type",
                    format!("the first line must be the trace header {HEADER}, got type `{ty}`"),
                ));
            }
            match f.get("version")? {
                Value::Number(n) if n.as_u64() == Some(1) => {}
                other => {
                    return Err(fault(
                        "version",
                        format!("unsupported trace version {other}"),
                    ));
                }
            }
            self.header_seen = true;
            self.header = Some(obj);
            return Ok(None);
        }
        let ev = parse_event(&obj)?;
        self.validator.check(&ev)?;
        Ok(Some(ev))
    }
}

impl<R: BufRead> Iterator for TraceReader<R> {
    type Item = Result<Event, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let obj = match self.lines.next_object() {
                Some(Ok(obj)) => obj,
                Some(Err(e)) => return Some(Err(e)),
                None if !self.header_seen && !self.lines.failed() => {
                    return Some(Err(self.lines.fail(line_fault(format!(
                        "empty trace: the first line must be {HEADER}"
                    )))));
                }
                None => return None,
            };
            match self.parse_object(obj) {
                Ok(Some(ev)) => return Some(Ok(ev)),
                Ok(None) => continue,
                Err(f) => return Some(Err(self.lines.fail(f))),
            }
        }
    }
}

/// Reads a whole trace into memory (for tests and small traces).
pub fn read_all(input: impl BufRead, source_name: &str) -> Result<Vec<Event>, TraceError> {
    TraceReader::new(input, source_name).collect()
}

/// Appends one event as a trace v1 line (without the newline), fields in table order.
pub fn write_event(out: &mut String, ev: &Event) {
    out.push_str("{\"type\":\"");
    out.push_str(ev.kind.type_name());
    out.push_str("\",\"t\":");
    push_ms(out, ev.t);
    let s = |out: &mut String, k: &str, v: &str| {
        out.push(',');
        push_key(out, k);
        push_str(out, v);
    };
    let o = |out: &mut String, k: &str, v: Option<&str>| {
        out.push(',');
        push_key(out, k);
        push_opt_str(out, v);
    };
    match &ev.kind {
        EventKind::StreamOpen {
            stream,
            client,
            transport,
            thread,
        } => {
            s(out, "stream", stream);
            s(out, "client", client.as_str());
            s(out, "transport", transport.as_str());
            o(out, "thread", thread.as_deref());
        }
        EventKind::Request {
            stream,
            request,
            previous_response,
            outputs,
        } => {
            s(out, "stream", stream);
            s(out, "request", request);
            o(out, "previous_response", previous_response.as_deref());
            out.push_str(",\"outputs\":[");
            for (i, c) in outputs.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_str(out, c);
            }
            out.push(']');
        }
        EventKind::ResponseStart {
            stream,
            response,
            request,
        } => {
            s(out, "stream", stream);
            s(out, "response", response);
            o(out, "request", request.as_deref());
        }
        EventKind::ToolCall {
            stream,
            response,
            call,
            item,
            name,
            namespace,
            kind,
        } => {
            s(out, "stream", stream);
            s(out, "response", response);
            s(out, "call", call);
            o(out, "item", item.as_deref());
            s(out, "name", name);
            o(out, "namespace", namespace.as_deref());
            s(out, "kind", kind.as_str());
        }
        EventKind::ResponseEnd {
            stream,
            response,
            status,
        } => {
            s(out, "stream", stream);
            s(out, "response", response);
            s(out, "status", status.as_str());
        }
        EventKind::StreamClose { stream } => s(out, "stream", stream),
        EventKind::ObservationLost { stream, reason } => {
            s(out, "stream", stream);
            s(out, "reason", reason);
        }
        EventKind::McpStart {
            interval,
            alias,
            tool,
            start,
        } => {
            s(out, "interval", interval);
            s(out, "alias", alias);
            s(out, "tool", tool);
            out.push_str(",\"start\":");
            push_ms(out, *start);
        }
        EventKind::McpInterval {
            interval,
            alias,
            tool,
            start,
            end,
            outcome,
            hints,
        } => {
            s(out, "interval", interval);
            s(out, "alias", alias);
            s(out, "tool", tool);
            out.push_str(",\"start\":");
            push_ms(out, *start);
            out.push_str(",\"end\":");
            push_ms(out, *end);
            s(out, "outcome", outcome.as_str());
            o(out, "tool_use_id", hints.tool_use_id.as_deref());
            o(out, "item_id", hints.item_id.as_deref());
            o(out, "call_id", hints.call_id.as_deref());
            o(out, "thread", hints.thread.as_deref());
        }
    }
    out.push('}');
}

/// One event as a trace v1 line, newline included.
pub fn event_line(ev: &Event) -> String {
    let mut s = String::with_capacity(160);
    write_event(&mut s, ev);
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Vec<Event>, TraceError> {
        read_all(text.as_bytes(), "t.jsonl")
    }

    const OPEN: &str = r#"{"type":"stream_open","t":1,"stream":"s1","client":"codex","transport":"websocket","thread":"th1"}"#;

    #[test]
    fn a_written_trace_reads_back_identically() {
        let text = format!(
            "{HEADER}\n{OPEN}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n",
            r#"{"type":"request","t":2,"stream":"s1","request":"q1","previous_response":null,"outputs":[]}"#,
            r#"{"type":"response_start","t":3,"stream":"s1","response":"r1","request":"q1"}"#,
            r#"{"type":"tool_call","t":4.25,"stream":"s1","response":"r1","call":"c1","item":"fc1","name":"echo","namespace":"mcp__probe","kind":"function"}"#,
            r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed"}"#,
            r#"{"type":"mcp_start","t":6,"interval":"i1","alias":"probe","tool":"echo","start":5.5}"#,
            r#"{"type":"mcp_interval","t":8,"interval":"i1","alias":"probe","tool":"echo","start":5.5,"end":7,"outcome":"result","tool_use_id":null,"item_id":"fc1","call_id":"c1","thread":"th1"}"#,
            r#"{"type":"observation_lost","t":9,"stream":"s1","reason":"decode"}"#,
            r#"{"type":"stream_close","t":9,"stream":"s1"}"#,
        );
        let events = read(&text).unwrap();
        assert_eq!(events.len(), 9);
        let mut again = format!("{HEADER}\n");
        for ev in &events {
            again.push_str(&event_line(ev));
        }
        assert_eq!(again, text);
    }

    #[test]
    fn every_written_time_reads_back_exactly() {
        // The first was found by the trace_reader fuzz target (fuzz/regressions/trace_reader/):
        // without correctly rounded float parsing a time read, written and read again changed.
        let times = [
            1.988_888_888_888_889e26,
            1.988_888_888_888_889_3e26,
            1_234.567_890_123_456_7,
            9_007_199_254_740_993.0,
            0.1 + 0.2,
            5e-324,
            f64::MAX,
        ];
        for t in times {
            let ev = Event {
                t,
                kind: EventKind::StreamOpen {
                    stream: "s".into(),
                    client: Client::Codex,
                    transport: Transport::Http,
                    thread: None,
                },
            };
            let text = format!("{HEADER}\n{}", event_line(&ev));
            let back = read(&text).unwrap();
            assert_eq!(
                back[0].t.to_bits(),
                t.to_bits(),
                "{t:e} came back as {:e}",
                back[0].t
            );
        }
    }

    #[test]
    fn hints_may_be_absent() {
        let text = format!(
            "{HEADER}\n{}\n",
            r#"{"type":"mcp_interval","t":8,"interval":"i1","alias":"a","tool":"t","start":1,"end":2,"outcome":"error"}"#
        );
        let events = read(&text).unwrap();
        let EventKind::McpInterval { hints, .. } = &events[0].kind else {
            panic!()
        };
        assert_eq!(hints, &Hints::default());
    }

    /// Each malformed input names its line and, where there is one, the field.
    #[test]
    fn malformed_lines_are_rejected_precisely() {
        let cases: &[(&str, usize, Option<&str>, &str)] = &[
            ("", 1, None, "empty trace"),
            ("{\"type\":\"trace\",\"version\":2}\n", 1, Some("version"), "unsupported"),
            (OPEN, 1, Some("type"), "first line must be the trace header"),
            ("{HEADER}\nnot json\n", 2, None, "bad JSON"),
            ("{HEADER}\n[1,2]\n", 2, None, "expected a JSON object"),
            ("{HEADER}\n{\"type\":\"nope\",\"t\":1}\n", 2, Some("type"), "unknown event type `nope`"),
            ("{HEADER}\n{\"t\":1}\n", 2, Some("type"), "missing"),
            (
                "{HEADER}\n{\"type\":\"stream_close\",\"stream\":\"s\"}\n",
                2,
                Some("t"),
                "missing",
            ),
            (
                "{HEADER}\n{\"type\":\"stream_close\",\"t\":\"1\",\"stream\":\"s\"}\n",
                2,
                Some("t"),
                "expected a number",
            ),
            (
                "{HEADER}\n{\"type\":\"stream_close\",\"t\":-1,\"stream\":\"s\"}\n",
                2,
                Some("t"),
                ">= 0",
            ),
            (
                "{HEADER}\n{\"type\":\"stream_open\",\"t\":1,\"stream\":\"s\",\"client\":\"vim\",\"transport\":\"http\",\"thread\":null}\n",
                2,
                Some("client"),
                "`vim` is not one of",
            ),
            (
                "{HEADER}\n{\"type\":\"stream_open\",\"t\":1,\"stream\":5,\"client\":\"codex\",\"transport\":\"http\",\"thread\":null}\n",
                2,
                Some("stream"),
                "expected a string, got a number",
            ),
            (
                "{HEADER}\n{\"type\":\"stream_open\",\"t\":1,\"stream\":\"s\",\"client\":\"codex\",\"transport\":\"http\"}\n",
                2,
                Some("thread"),
                "missing",
            ),
            (
                "{HEADER}\n{OPEN}\n{\"type\":\"stream_close\",\"t\":0.5,\"stream\":\"s1\"}\n",
                3,
                Some("t"),
                "goes backwards",
            ),
            (
                "{HEADER}\n{\"type\":\"stream_close\",\"t\":1,\"stream\":\"s9\"}\n",
                2,
                Some("stream"),
                "not open",
            ),
            (
                "{HEADER}\n{OPEN}\n{OPEN}\n",
                3,
                Some("stream"),
                "already open",
            ),
            (
                "{HEADER}\n{OPEN}\n{\"type\":\"tool_call\",\"t\":2,\"stream\":\"s1\",\"response\":\"r9\",\"call\":\"c\",\"item\":null,\"name\":\"n\",\"namespace\":null,\"kind\":\"function\"}\n",
                3,
                Some("response"),
                "not open on stream",
            ),
            (
                "{HEADER}\n{OPEN}\n{\"type\":\"response_end\",\"t\":2,\"stream\":\"s1\",\"response\":\"r9\",\"status\":\"completed\"}\n",
                3,
                Some("response"),
                "not open",
            ),
            (
                "{HEADER}\n{OPEN}\n{\"type\":\"observation_lost\",\"t\":2,\"stream\":\"s1\",\"reason\":\"decode\"}\n{\"type\":\"request\",\"t\":3,\"stream\":\"s1\",\"request\":\"q\",\"previous_response\":null,\"outputs\":[]}\n",
                4,
                Some("stream"),
                "only stream_close may follow",
            ),
            (
                "{HEADER}\n{OPEN}\n{\"type\":\"request\",\"t\":3,\"stream\":\"s1\",\"request\":\"q\",\"previous_response\":null,\"outputs\":[1]}\n",
                3,
                Some("outputs"),
                "expected strings",
            ),
            (
                "{HEADER}\n{\"type\":\"mcp_interval\",\"t\":9,\"interval\":\"i\",\"alias\":\"a\",\"tool\":\"t\",\"start\":5,\"end\":4,\"outcome\":\"result\"}\n",
                2,
                Some("end"),
                "before start",
            ),
            (
                "{HEADER}\n{\"type\":\"mcp_interval\",\"t\":3,\"interval\":\"i\",\"alias\":\"a\",\"tool\":\"t\",\"start\":1,\"end\":4,\"outcome\":\"result\"}\n",
                2,
                Some("end"),
                "after the report time",
            ),
            (
                "{HEADER}\n{\"type\":\"mcp_interval\",\"t\":9,\"interval\":\"i\",\"alias\":\"a\",\"tool\":\"t\",\"start\":1,\"end\":4,\"outcome\":\"done\"}\n",
                2,
                Some("outcome"),
                "not one of",
            ),
            (
                "{HEADER}\n{\"type\":\"mcp_interval\",\"t\":9,\"interval\":\"i\",\"alias\":\"a\",\"tool\":\"t\",\"start\":1,\"end\":4,\"outcome\":\"result\",\"item_id\":7}\n",
                2,
                Some("item_id"),
                "expected a string or null",
            ),
            (
                "{HEADER}\n{\"type\":\"mcp_start\",\"t\":1,\"interval\":\"i\",\"alias\":\"a\",\"tool\":\"t\",\"start\":1}\n{\"type\":\"mcp_interval\",\"t\":9,\"interval\":\"i\",\"alias\":\"a\",\"tool\":\"other\",\"start\":1,\"end\":4,\"outcome\":\"result\"}\n",
                3,
                Some("interval"),
                "disagrees with its mcp_start",
            ),
            ("{HEADER}\n{HEADER}\n", 2, Some("type"), "second trace header"),
        ];
        for (input, line, field, needle) in cases {
            let input = input.replace("{HEADER}", HEADER).replace("{OPEN}", OPEN);
            let err = read(&input).expect_err(&input);
            assert_eq!(err.line, *line, "{input}\n{err}");
            assert_eq!(err.field, *field, "{input}\n{err}");
            assert!(err.message.contains(needle), "{input}\n{err}");
            assert!(
                err.to_string().starts_with(&format!("t.jsonl:{line}: ")),
                "{err}"
            );
        }
    }

    #[test]
    fn invalid_utf8_is_an_error_not_a_panic() {
        let mut bytes = format!("{HEADER}\n").into_bytes();
        bytes.extend_from_slice(b"{\"type\":\"\xff\"}\n");
        let err = read_all(&bytes[..], "bin.jsonl").unwrap_err();
        assert_eq!(err.line, 2);
        assert!(err.message.contains("UTF-8"));
    }
}
