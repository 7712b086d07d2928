//! What the strict JSON Lines readers (traces, records v1) share: the error that names a
//! source, line and field, and typed access to one line's fields.
//!
//! An error never echoes input (a trace's `version` could be a pasted secret): what was wrong
//! is a [`Problem`], a matchable value built only from our own words, kinds (`a string`),
//! numbers the reader parsed, and [`Token`]s, which hold a piece of input only as
//! [`crate::sanitize::quote`] lets it out (a short plain token, else its length).

use std::fmt;
use std::io::BufRead;

use serde_json::{Map, Value};

use crate::sanitize::quote;

use crate::event::Millis;

/// A malformed line of a trace or records file.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct LineError {
    /// The file (or other source) the line came from.
    pub(crate) source_name: String,
    /// 1-based line number.
    pub line: usize,
    /// The field at fault, when one is (`window.close` for a field inside a record's window).
    pub field: Option<&'static str>,
    pub problem: Problem,
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: ", self.source_name, self.line)?;
        if let Some(field) = self.field {
            write!(f, "field `{field}`: ")?;
        }
        write!(f, "{}", self.problem)
    }
}

/// A piece of input as an error may show it: [`quote`]d when it is made, so a short plain
/// token as it is and anything else only by its length. There is no other way to make one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    pub(crate) fn of(s: &str) -> Token {
        Token(quote(s).into_owned())
    }

    /// A JSON value from input: a string, number or word as [`Token::of`] shows its text;
    /// arrays and objects by their kind only.
    pub(crate) fn of_value(v: &Value) -> Token {
        match v {
            Value::String(s) => Token::of(s),
            Value::Number(n) => Token::of(&n.to_string()),
            Value::Null | Value::Bool(_) => Token(v.to_string()),
            Value::Array(_) | Value::Object(_) => Token(kind_of(v).to_string()),
        }
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What is wrong with a line or a field. Every part is our own text, a kind, a number the
/// reader parsed, or a [`Token`]: no variant can carry raw input.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Problem {
    #[error("missing")]
    Missing,
    #[error("expected {want}, got {got}")]
    WrongType {
        want: &'static str,
        got: &'static str,
    },
    #[error("expected strings, found {got}")]
    NotStrings { got: &'static str },
    #[error("must be a finite number >= 0, got {got}")]
    NotATime { got: Token },
    #[error("must be a whole number >= 0, got {got}")]
    NotACount { got: Token },
    #[error("`{key}` must be a non-negative integer, got {got}")]
    NotACountIn { key: &'static str, got: Token },
    #[error("{got} is too large")]
    TooLarge { got: u64 },
    #[error("`{got}` is not one of {}{}", .words.join(", "), if *.or_null { " (or null)" } else { "" })]
    NotOneOf {
        got: Token,
        words: &'static [&'static str],
        or_null: bool,
    },
    #[error("`{got}` is listed twice")]
    Twice { got: Token },
    #[error("unsupported {what} version {got} ({readable})")]
    Version {
        what: &'static str,
        got: Token,
        readable: &'static str,
    },
    #[error("unknown {what} type `{got}`{hint}")]
    UnknownType {
        what: &'static str,
        got: Token,
        hint: &'static str,
    },
    #[error("empty trace: the first line must be {header}")]
    EmptyTrace { header: &'static str },
    #[error("the first line must be the trace header {header}, got type `{got}`")]
    NotAHeader { header: &'static str, got: Token },
    /// An id in a state it cannot be in: `stream `s1` is not open`.
    #[error("{what} `{id}` {state}")]
    Id {
        what: &'static str,
        id: Token,
        state: &'static str,
    },
    #[error("response `{response}` is not open on stream `{stream}`")]
    NotOpenOn { response: Token, stream: Token },
    /// Two times in the wrong order: `{value} {relation}{other}{tail}`.
    #[error("{value} {relation}{other}{tail}")]
    Order {
        value: f64,
        relation: &'static str,
        other: f64,
        tail: &'static str,
    },
    #[error("`{reason}` means {want} candidates, got {got}")]
    Candidates {
        reason: &'static str,
        want: &'static str,
        got: usize,
    },
    #[error("must be null when the decision is attributed, got `{got}`")]
    NotNullWhenAttributed { got: &'static str },
    /// A rule the line breaks, in our words.
    #[error("{0}")]
    Rule(&'static str),
    #[error("expected a JSON object, got {got}")]
    NotAnObject { got: &'static str },
    #[error("bad JSON ({class} error at column {column})")]
    BadJson { class: &'static str, column: usize },
    #[error("not valid UTF-8")]
    NotUtf8,
    #[error("read error ({kind})")]
    Read { kind: std::io::ErrorKind },
}

/// A fault found on one line, before it is tied to a source and line number.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Fault {
    pub(crate) field: Option<&'static str>,
    pub(crate) problem: Problem,
}

impl Fault {
    pub(crate) fn at(self, source_name: &str, line: usize) -> LineError {
        LineError {
            source_name: source_name.to_string(),
            line,
            field: self.field,
            problem: self.problem,
        }
    }
}

pub(crate) fn fault(field: &'static str, problem: Problem) -> Fault {
    Fault {
        field: Some(field),
        problem,
    }
}

pub(crate) fn line_fault(problem: Problem) -> Fault {
    Fault {
        field: None,
        problem,
    }
}

/// Two times of a line in the wrong order, at `field`.
pub(crate) fn order(
    field: &'static str,
    value: f64,
    relation: &'static str,
    other: f64,
    tail: &'static str,
) -> Fault {
    fault(
        field,
        Problem::Order {
            value,
            relation,
            other,
            tail,
        },
    )
}

/// A line that could not be read: not UTF-8, or an I/O error.
pub(crate) fn read_fault(e: &std::io::Error) -> Fault {
    if e.kind() == std::io::ErrorKind::InvalidData {
        line_fault(Problem::NotUtf8)
    } else {
        line_fault(Problem::Read { kind: e.kind() })
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
    pub(crate) obj: &'a Map<String, Value>,
    pub(crate) name: fn(&'static str) -> &'static str,
}

impl<'a> Fields<'a> {
    pub(crate) fn new(obj: &'a Map<String, Value>) -> Self {
        Fields { obj, name: bare }
    }

    pub(crate) fn get(&self, k: &'static str) -> Result<&'a Value, Fault> {
        self.obj
            .get(k)
            .ok_or_else(|| fault((self.name)(k), Problem::Missing))
    }

    pub(crate) fn wrong(&self, k: &'static str, want: &'static str, got: &Value) -> Fault {
        fault(
            (self.name)(k),
            Problem::WrongType {
                want,
                got: kind_of(got),
            },
        )
    }

    pub(crate) fn string(&self, k: &'static str) -> Result<&'a str, Fault> {
        match self.get(k)? {
            Value::String(s) => Ok(s),
            other => Err(self.wrong(k, "a string", other)),
        }
    }

    pub(crate) fn opt_string(&self, k: &'static str) -> Result<Option<&'a str>, Fault> {
        match self.get(k)? {
            Value::String(s) => Ok(Some(s)),
            Value::Null => Ok(None),
            other => Err(self.wrong(k, "a string or null", other)),
        }
    }

    /// An optional field: absent and null both mean "none".
    pub(crate) fn hint(&self, k: &'static str) -> Result<Option<&'a str>, Fault> {
        if self.obj.contains_key(k) {
            self.opt_string(k)
        } else {
            Ok(None)
        }
    }

    pub(crate) fn time(&self, k: &'static str) -> Result<Millis, Fault> {
        match self.get(k)? {
            Value::Number(n) => match n.as_f64() {
                Some(t) if t.is_finite() && t >= 0.0 => Ok(t),
                _ => Err(fault(
                    (self.name)(k),
                    Problem::NotATime {
                        got: Token::of(&n.to_string()),
                    },
                )),
            },
            other => Err(self.wrong(k, "a number", other)),
        }
    }

    pub(crate) fn opt_time(&self, k: &'static str) -> Result<Option<Millis>, Fault> {
        match self.get(k)? {
            Value::Null => Ok(None),
            _ => self.time(k).map(Some),
        }
    }

    pub(crate) fn word<T>(
        &self,
        k: &'static str,
        parse: fn(&str) -> Option<T>,
        words: &'static [&'static str],
    ) -> Result<T, Fault> {
        let s = self.string(k)?;
        parse(s).ok_or_else(|| {
            fault(
                (self.name)(k),
                Problem::NotOneOf {
                    got: Token::of(s),
                    words,
                    or_null: false,
                },
            )
        })
    }

    pub(crate) fn string_array(&self, k: &'static str) -> Result<Vec<&'a str>, Fault> {
        match self.get(k)? {
            Value::Array(items) => items
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.as_str()),
                    other => Err(fault(
                        (self.name)(k),
                        Problem::NotStrings {
                            got: kind_of(other),
                        },
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
        Ok(other) => Err(line_fault(Problem::NotAnObject {
            got: kind_of(&other),
        })),
        // serde_json's message can quote the input ("invalid type: string \"…\""): only
        // its class and column are shown.
        Err(e) => Err(line_fault(Problem::BadJson {
            class: match e.classify() {
                serde_json::error::Category::Io => "read",
                serde_json::error::Category::Syntax => "syntax",
                serde_json::error::Category::Data => "data",
                serde_json::error::Category::Eof => "unexpected end",
            },
            column: e.column(),
        })),
    }
}

/// The lines of a JSON Lines input, one JSON object at a time, blank lines skipped. After the
/// first error it yields nothing more: a reader never guesses past a bad line.
///
/// Lines are read in place from one buffer of the input's bytes and handed out as borrowed
/// text: no line is copied or allocated (reading lines was most of replay's cost; a long line
/// only grows the buffer). A line is checked as UTF-8 on its own, so a bad byte is named by
/// its line, as `BufRead::read_line` named it.
pub(crate) struct LineSource<R> {
    input: R,
    at: At,
    /// `buf[start..end]` is read and not yet handed out.
    buf: Vec<u8>,
    start: usize,
    end: usize,
    eof: bool,
}

/// Where a line source is (its name and line number), and whether it has failed: handed out
/// with each line, so that a reader can fail at that line while it still holds the line's text.
pub(crate) struct At {
    source_name: String,
    line_no: usize,
    failed: std::cell::Cell<bool>,
}

impl At {
    /// Ends the input with `f` at the current line.
    pub(crate) fn fail(&self, f: Fault) -> LineError {
        self.failed.set(true);
        f.at(&self.source_name, self.line_no)
    }
}

/// The buffer's first size: many lines per read, and large enough that the input's own
/// buffer (a `BufReader`) is bypassed when it is empty.
const BUF: usize = 256 * 1024;

impl<R: BufRead> LineSource<R> {
    pub(crate) fn new(input: R, source_name: String) -> Self {
        LineSource {
            input,
            at: At {
                source_name,
                line_no: 0,
                failed: std::cell::Cell::new(false),
            },
            buf: Vec::new(),
            start: 0,
            end: 0,
            eof: false,
        }
    }

    /// The next non-blank line as an object; `None` at the end or after an error.
    pub(crate) fn next_object(&mut self) -> Option<Result<Map<String, Value>, LineError>> {
        let parsed = match self.next_line()? {
            Ok((line, _)) => object(line),
            Err(e) => return Some(Err(e)),
        };
        Some(parsed.map_err(|f| self.fail(f)))
    }

    /// The byte range of the next raw line (up to, not including, its `\n`), or `None` at
    /// the end of the input.
    fn raw_line(&mut self) -> std::io::Result<Option<(usize, usize)>> {
        let mut scanned = self.start;
        loop {
            if let Some(i) = memchr::memchr(b'\n', &self.buf[scanned..self.end]) {
                let range = (self.start, scanned + i);
                self.start = scanned + i + 1;
                return Ok(Some(range));
            }
            scanned = self.end;
            if self.eof {
                // The last line may lack its line break.
                if self.start < self.end {
                    let range = (self.start, self.end);
                    self.start = self.end;
                    return Ok(Some(range));
                }
                return Ok(None);
            }
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                scanned -= self.start;
                self.start = 0;
            }
            if self.end == self.buf.len() {
                let grown = (self.buf.len() * 2).max(BUF);
                self.buf.resize(grown, 0);
            }
            match self.input.read(&mut self.buf[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(n) => self.end += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// The next non-blank line, without its line break, and where it is (to fail there while
    /// its text is still borrowed); `None` at the end or after an error. (Lets a reader try a
    /// faster typed parse before [`object`], and read fields borrowed from the line.)
    pub(crate) fn next_line(&mut self) -> Option<Result<(&str, &At), LineError>> {
        if self.at.failed.get() {
            return None;
        }
        let (start, end) = loop {
            self.at.line_no += 1;
            let (start, end) = match self.raw_line() {
                Ok(Some(range)) => range,
                Ok(None) => return None,
                Err(e) => return Some(Err(self.fail(read_fault(&e)))),
            };
            let bytes = &self.buf[start..end];
            // The usual line begins with `{` and is not blank: checked as UTF-8 once, below.
            if bytes.first() == Some(&b'{') {
                break (start, end);
            }
            match std::str::from_utf8(bytes) {
                Err(_) => return Some(Err(self.fail(line_fault(Problem::NotUtf8)))),
                Ok(text) if text.trim().is_empty() => continue,
                Ok(_) => break (start, end),
            }
        };
        match simdutf8::basic::from_utf8(&self.buf[start..end]) {
            Ok(text) => Some(Ok((text.trim_end_matches(['\n', '\r']), &self.at))),
            Err(_) => Some(Err(self.fail(line_fault(Problem::NotUtf8)))),
        }
    }

    /// Ends the input with `f` at the current line.
    pub(crate) fn fail(&self, f: Fault) -> LineError {
        self.at.fail(f)
    }

    pub(crate) fn failed(&self) -> bool {
        self.at.failed.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_shows_short_tokens_and_only_the_length_of_anything_else() {
        let secret = "sk-ant-api03-0123456789abcdefghijklmnop";
        let f = fault(
            "version",
            Problem::Version {
                what: "trace",
                got: Token::of_value(&Value::String(secret.into())),
                readable: "1 and 2 are read",
            },
        )
        .at("t.jsonl", 1);
        let shown = f.to_string();
        assert!(!shown.contains("sk-ant"), "{shown}");
        assert!(shown.contains("bytes withheld"), "{shown}");
        // Matchable: callers and tests tell faults apart by variant, not by text.
        assert!(matches!(f.problem, Problem::Version { what: "trace", .. }));
        assert_eq!(Token::of("s1").0, "s1");
        assert_eq!(
            Token::of_value(&serde_json::json!({"k": secret})).0,
            "an object"
        );
    }
}
