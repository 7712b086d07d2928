//! What the strict JSON Lines readers (traces, records v1) share: the error that names a
//! source, line and field, and typed access to one line's fields.

use std::fmt;
use std::io::BufRead;

use serde_json::{Map, Value};

use crate::sanitize::quote;

use crate::event::Millis;

/// A malformed line of a trace or records file.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct LineError {
    /// The file (or other source) the line came from.
    pub source_name: String,
    /// 1-based line number.
    pub line: usize,
    /// The field at fault, when one is (`window.close` for a field inside a record's window).
    pub field: Option<&'static str>,
    pub message: String,
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: ", self.source_name, self.line)?;
        if let Some(field) = self.field {
            write!(f, "field `{field}`: ")?;
        }
        f.write_str(&self.message)
    }
}

/// A fault found on one line, before it is tied to a source and line number.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Fault {
    pub field: Option<&'static str>,
    pub message: String,
}

impl Fault {
    pub fn at(self, source_name: &str, line: usize) -> LineError {
        LineError {
            source_name: source_name.to_string(),
            line,
            field: self.field,
            message: self.message,
        }
    }
}

pub(crate) fn fault(field: &'static str, message: impl Into<String>) -> Fault {
    Fault {
        field: Some(field),
        message: message.into(),
    }
}

pub(crate) fn line_fault(message: impl Into<String>) -> Fault {
    Fault {
        field: None,
        message: message.into(),
    }
}

/// A line that could not be read: not UTF-8, or an I/O error.
pub(crate) fn read_fault(e: &std::io::Error) -> Fault {
    if e.kind() == std::io::ErrorKind::InvalidData {
        line_fault("not valid UTF-8")
    } else {
        line_fault(format!("read error: {e}"))
    }
}

pub(crate) fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn bare(k: &'static str) -> &'static str {
    k
}

/// Typed access to one object's fields; `name` maps a key to what errors call it.
pub(crate) struct Fields<'a> {
    pub obj: &'a Map<String, Value>,
    pub name: fn(&'static str) -> &'static str,
}

impl<'a> Fields<'a> {
    pub fn new(obj: &'a Map<String, Value>) -> Self {
        Fields { obj, name: bare }
    }

    pub fn get(&self, k: &'static str) -> Result<&Value, Fault> {
        self.obj
            .get(k)
            .ok_or_else(|| fault((self.name)(k), "missing"))
    }

    pub fn wrong(&self, k: &'static str, want: &str, got: &Value) -> Fault {
        fault(
            (self.name)(k),
            format!("expected {want}, got {}", kind_of(got)),
        )
    }

    pub fn string(&self, k: &'static str) -> Result<String, Fault> {
        match self.get(k)? {
            Value::String(s) => Ok(s.clone()),
            other => Err(self.wrong(k, "a string", other)),
        }
    }

    pub fn opt_string(&self, k: &'static str) -> Result<Option<String>, Fault> {
        match self.get(k)? {
            Value::String(s) => Ok(Some(s.clone())),
            Value::Null => Ok(None),
            other => Err(self.wrong(k, "a string or null", other)),
        }
    }

    /// An optional field: absent and null both mean "none".
    pub fn hint(&self, k: &'static str) -> Result<Option<String>, Fault> {
        if self.obj.contains_key(k) {
            self.opt_string(k)
        } else {
            Ok(None)
        }
    }

    pub fn time(&self, k: &'static str) -> Result<Millis, Fault> {
        match self.get(k)? {
            Value::Number(n) => match n.as_f64() {
                Some(t) if t.is_finite() && t >= 0.0 => Ok(t),
                _ => Err(fault(
                    (self.name)(k),
                    format!("must be a finite number >= 0, got {n}"),
                )),
            },
            other => Err(self.wrong(k, "a number", other)),
        }
    }

    pub fn opt_time(&self, k: &'static str) -> Result<Option<Millis>, Fault> {
        match self.get(k)? {
            Value::Null => Ok(None),
            _ => self.time(k).map(Some),
        }
    }

    pub fn word<T>(
        &self,
        k: &'static str,
        parse: fn(&str) -> Option<T>,
        words: &[&str],
    ) -> Result<T, Fault> {
        let s = self.string(k)?;
        parse(&s).ok_or_else(|| {
            fault(
                (self.name)(k),
                format!("`{}` is not one of {}", quote(&s), words.join(", ")),
            )
        })
    }

    pub fn string_array(&self, k: &'static str) -> Result<Vec<String>, Fault> {
        match self.get(k)? {
            Value::Array(items) => items
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.clone()),
                    other => Err(fault(
                        (self.name)(k),
                        format!("expected strings, found {}", kind_of(other)),
                    )),
                })
                .collect(),
            other => Err(self.wrong(k, "an array", other)),
        }
    }
}

/// One line's JSON object, or what was wrong with the line.
pub(crate) fn object(line: &str) -> Result<Map<String, Value>, Fault> {
    match serde_json::from_str::<Value>(line) {
        Ok(Value::Object(obj)) => Ok(obj),
        Ok(other) => Err(line_fault(format!(
            "expected a JSON object, got {}",
            kind_of(&other)
        ))),
        Err(e) => Err(line_fault(format!("bad JSON: {e}"))),
    }
}

/// The lines of a JSON Lines input, one JSON object at a time, blank lines skipped. After the
/// first error it yields nothing more: a reader never guesses past a bad line.
pub(crate) struct LineSource<R> {
    input: R,
    source_name: String,
    line_no: usize,
    buf: String,
    failed: bool,
}

impl<R: BufRead> LineSource<R> {
    pub fn new(input: R, source_name: String) -> Self {
        LineSource {
            input,
            source_name,
            line_no: 0,
            buf: String::new(),
            failed: false,
        }
    }

    /// The next non-blank line as an object; `None` at the end or after an error.
    pub fn next_object(&mut self) -> Option<Result<Map<String, Value>, LineError>> {
        if let Err(e) = self.next_line()? {
            return Some(Err(e));
        }
        Some(object(self.line()).map_err(|f| self.fail(f)))
    }

    /// Moves to the next non-blank line, whose text [`LineSource::line`] then gives; `None` at
    /// the end or after an error. (Lets a reader try a faster typed parse before [`object`].)
    pub fn next_line(&mut self) -> Option<Result<(), LineError>> {
        if self.failed {
            return None;
        }
        loop {
            self.buf.clear();
            self.line_no += 1;
            match self.input.read_line(&mut self.buf) {
                Ok(0) => return None,
                Ok(_) => {}
                Err(e) => return Some(Err(self.fail(read_fault(&e)))),
            }
            if self.buf.trim().is_empty() {
                continue;
            }
            return Some(Ok(()));
        }
    }

    /// The current line, without its line break.
    pub fn line(&self) -> &str {
        self.buf.trim_end_matches(['\n', '\r'])
    }

    /// Ends the input with `f` at the current line.
    pub fn fail(&mut self, f: Fault) -> LineError {
        self.failed = true;
        f.at(&self.source_name, self.line_no)
    }

    pub fn failed(&self) -> bool {
        self.failed
    }
}
