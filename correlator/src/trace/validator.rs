//! What is open at a point of a trace, and the order rules checked against it: time never
//! goes backwards and every event names a stream, response or call that is open. Kept apart
//! from the reading of lines because a piece of a trace starts from a state it did not read
//! ([`OpenState`], seeded from the piece header), and because what is open, not the length
//! of the trace, bounds the reader's memory.

use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};
use serde_json::Value;

use crate::event::*;
use crate::intern::Interner;
use crate::json::{push_ms, push_str};
use crate::lines::{fault, order, Fault, Problem, Token};

/// An id of the trace in a state it cannot be in (`stream `s1` is not open`).
fn id_fault(what: &'static str, id: &str, state: &'static str) -> Fault {
    fault(
        what,
        Problem::Id {
            what,
            id: Token::of(id),
            state,
        },
    )
}

#[derive(Default)]
struct StreamState {
    lost: bool,
    /// Responses started on this stream and not yet ended.
    open_responses: FxHashSet<String>,
}

/// Checks the order rules of a trace across lines: time never goes backwards, and every
/// event names a stream or response that is open. Bounded by what is open.
#[derive(Default)]
pub(crate) struct Validator {
    last_t: Option<Millis>,
    streams: FxHashMap<String, StreamState>,
    /// Running MCP calls: interval id -> (alias, tool, start).
    running: FxHashMap<String, (Arc<str>, Arc<str>, Millis)>,
    /// Aliases and tools repeat on every call: one copy each.
    names: Interner,
}

impl Validator {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    pub(super) fn check<S: AsRef<str>>(&mut self, ev: &Event<S>) -> Result<(), Fault> {
        if let Some(last) = self.last_t {
            if ev.t < last {
                return Err(order(
                    "t",
                    ev.t,
                    "goes backwards (previous event at ",
                    last,
                    ")",
                ));
            }
        }
        self.last_t = Some(ev.t);
        match &ev.kind {
            EventKind::StreamOpen { stream, .. } => {
                let stream = stream.as_ref();
                if self.streams.contains_key(stream) {
                    return Err(id_fault("stream", stream, "is already open"));
                }
                self.streams
                    .insert(stream.to_owned(), StreamState::default());
            }
            EventKind::StreamClose { stream } => {
                let stream = stream.as_ref();
                self.streams
                    .remove(stream)
                    .ok_or_else(|| id_fault("stream", stream, "is not open"))?;
            }
            EventKind::ObservationLost { stream, .. } => {
                let st = self.live_stream(stream.as_ref())?;
                st.lost = true;
            }
            EventKind::Request { stream, .. } => {
                self.live_stream(stream.as_ref())?;
            }
            EventKind::ResponseStart {
                stream, response, ..
            } => {
                let response = response.as_ref();
                let st = self.live_stream(stream.as_ref())?;
                if !st.open_responses.insert(response.to_owned()) {
                    return Err(id_fault("response", response, "is already open"));
                }
            }
            EventKind::ToolCall {
                stream, response, ..
            } => {
                let (stream, response) = (stream.as_ref(), response.as_ref());
                let st = self.live_stream(stream)?;
                if !st.open_responses.contains(response) {
                    return Err(fault(
                        "response",
                        Problem::NotOpenOn {
                            response: Token::of(response),
                            stream: Token::of(stream),
                        },
                    ));
                }
            }
            EventKind::ResponseEnd {
                stream, response, ..
            } => {
                let (stream, response) = (stream.as_ref(), response.as_ref());
                let st = self.live_stream(stream)?;
                if !st.open_responses.remove(response) {
                    return Err(fault(
                        "response",
                        Problem::NotOpenOn {
                            response: Token::of(response),
                            stream: Token::of(stream),
                        },
                    ));
                }
            }
            EventKind::McpStart {
                interval,
                alias,
                tool,
                start,
                ..
            } => {
                let interval = interval.as_ref();
                if self.running.contains_key(interval) {
                    return Err(id_fault("interval", interval, "already started"));
                }
                let names = (
                    self.names.get(alias.as_ref()),
                    self.names.get(tool.as_ref()),
                );
                self.running
                    .insert(interval.to_owned(), (names.0, names.1, *start));
            }
            EventKind::McpInterval {
                interval,
                alias,
                tool,
                start,
                ..
            } => {
                let interval = interval.as_ref();
                if let Some((a, tl, s)) = self.running.remove(interval) {
                    if *a != *alias.as_ref() || *tl != *tool.as_ref() || s != *start {
                        return Err(id_fault(
                            "interval",
                            interval,
                            "disagrees with its mcp_start (alias, tool or start)",
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
            None => Err(id_fault("stream", stream, "is not open")),
            Some(st) if st.lost => Err(id_fault(
                "stream",
                stream,
                "lost observation; only stream_close may follow",
            )),
            Some(st) => Ok(st),
        }
    }
}

/// What a trace has open at one point of it: streams (lost or not, with their open
/// responses) and running MCP calls. It is what a reader must know to check the events that
/// follow, so a rotated capture's piece carries it in its header (`open`, docs/trace-v2.md
/// "Pieces"): each piece is then checked on its own as strictly as the whole capture is.
#[derive(Default)]
pub struct OpenState(Validator);

impl OpenState {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes `ev` into account (the writer's events are valid; one that is not changes
    /// nothing a reader would accept either).
    pub fn apply(&mut self, ev: &Event) {
        let _ = self.0.check(ev);
    }

    /// Every id and name it holds, each with the field it stands for (for the door).
    pub fn strings(&self) -> impl Iterator<Item = (&'static str, &str)> {
        let streams = self.0.streams.iter().flat_map(|(s, st)| {
            std::iter::once(("stream", s.as_str()))
                .chain(st.open_responses.iter().map(|r| ("response", r.as_str())))
        });
        let running =
            self.0.running.iter().flat_map(|(i, (a, t, _))| {
                [("interval", i.as_str()), ("alias", &**a), ("tool", &**t)]
            });
        streams.chain(running)
    }

    /// The header value: `{"streams":[[stream,lost,[response,…]],…],"running":[[interval,
    /// alias,tool,start],…]}`, each list sorted, so the same state is always the same text.
    pub fn json(&self) -> String {
        let mut streams: Vec<_> = self.0.streams.iter().collect();
        streams.sort_by(|a, b| a.0.cmp(b.0));
        let mut out = String::from(r#"{"streams":["#);
        for (k, (id, st)) in streams.into_iter().enumerate() {
            if k > 0 {
                out.push(',');
            }
            out.push('[');
            push_str(&mut out, id);
            out.push_str(if st.lost { ",true,[" } else { ",false,[" });
            let mut responses: Vec<_> = st.open_responses.iter().collect();
            responses.sort();
            for (j, r) in responses.into_iter().enumerate() {
                if j > 0 {
                    out.push(',');
                }
                push_str(&mut out, r);
            }
            out.push_str("]]");
        }
        out.push_str(r#"],"running":["#);
        let mut running: Vec<_> = self.0.running.iter().collect();
        running.sort_by(|a, b| a.0.cmp(b.0));
        for (k, (id, (alias, tool, start))) in running.into_iter().enumerate() {
            if k > 0 {
                out.push(',');
            }
            out.push('[');
            push_str(&mut out, id);
            out.push(',');
            push_str(&mut out, alias);
            out.push(',');
            push_str(&mut out, tool);
            out.push(',');
            push_ms(&mut out, *start);
            out.push(']');
        }
        out.push_str("]}");
        out
    }

    /// Whether nothing is open.
    pub fn is_empty(&self) -> bool {
        self.0.streams.is_empty() && self.0.running.is_empty()
    }
}

impl Validator {
    /// Starts from a header's `open` (see [`OpenState::json`]); anything else in it is an
    /// error of the header, never guessed around.
    pub(super) fn seed(&mut self, open: &Value) -> Result<(), Fault> {
        const BAD: Problem = Problem::Rule(
            "must be {\"streams\":[[stream,lost,[response,…]],…],\"running\":[[interval,alias,tool,start],…]}",
        );
        let bad = || fault("open", BAD);
        let obj = open.as_object().ok_or_else(bad)?;
        let list = |key: &str| -> Result<&Vec<Value>, Fault> {
            match obj.get(key) {
                Some(Value::Array(a)) => Ok(a),
                _ => Err(bad()),
            }
        };
        for s in list("streams")? {
            let [Value::String(id), Value::Bool(lost), Value::Array(responses)] =
                s.as_array().map(Vec::as_slice).ok_or_else(bad)?
            else {
                return Err(bad());
            };
            let mut st = StreamState {
                lost: *lost,
                ..StreamState::default()
            };
            for r in responses {
                let r = r.as_str().ok_or_else(bad)?;
                if !st.open_responses.insert(r.to_string()) {
                    return Err(fault("open", Problem::Twice { got: Token::of(r) }));
                }
            }
            if self.streams.insert(id.clone(), st).is_some() {
                return Err(fault("open", Problem::Twice { got: Token::of(id) }));
            }
        }
        for r in list("running")? {
            let [Value::String(id), Value::String(alias), Value::String(tool), Value::Number(start)] =
                r.as_array().map(Vec::as_slice).ok_or_else(bad)?
            else {
                return Err(bad());
            };
            let start = start
                .as_f64()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(bad)?;
            if self
                .running
                .insert(
                    id.clone(),
                    (self.names.get(alias), self.names.get(tool), start),
                )
                .is_some()
            {
                return Err(fault("open", Problem::Twice { got: Token::of(id) }));
            }
        }
        Ok(())
    }
}
