//! Where data leaves (the second half): each field checked against its kind, then written.

use serde_json::Value;

use crate::event::{Event, EventKind, Hints};
use crate::records::Record;
use crate::trace;

use super::kinds::*;

/// A value the door would not let out. Names the field and the kind it failed, never the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("field `{field}`: not written, it is not a valid {kind}")]
pub struct Refused {
    pub field: &'static str,
    pub(crate) kind: Kind,
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
