//! The reader: lines in, events out. Each line is read by the fast path, else by the strict
//! one (which alone rejects, so the fast path can only ever be faster, never different), then
//! checked against what is open; a line is borrowed, not copied, so replay allocates only
//! for what the events keep.

use std::io::BufRead;

use serde_json::{Map, Value};

use crate::event::*;
use crate::lines::{
    fault, line_fault, object, Fault, Fields, LineError, LineSource, Problem, Token,
};

use super::fast;
use super::header::{Version, HEADER};
use super::parse::parse_event;
use super::validator::Validator;

/// A malformed trace line: source, line number, field and what was wrong.
pub type TraceError = LineError;

/// Reads a trace (v2, or v1) from any buffered reader, one event at a time.
pub struct TraceReader<R> {
    lines: LineSource<R>,
    header_seen: bool,
    header: Option<Map<String, Value>>,
    version: Version,
    validator: Validator,
    /// The last line the fast path left to the strict one, parsed: the event read from it
    /// borrows its strings.
    strict: Option<Map<String, Value>>,
}

impl<R: BufRead> TraceReader<R> {
    /// `source_name` is what errors call the input (usually the file path).
    pub fn new(input: R, source_name: impl Into<String>) -> Self {
        TraceReader {
            lines: LineSource::new(input, source_name.into()),
            header_seen: false,
            header: None,
            version: Version::V2,
            validator: Validator::new(),
            strict: None,
        }
    }

    /// The header line's fields, once the first event (or the end) has been read. Extra
    /// header fields are allowed; replay reads its options from them.
    pub fn header(&self) -> Option<&Map<String, Value>> {
        self.header.as_ref()
    }

    /// The first line's object, which must be the header.
    fn header_line(&mut self, obj: Map<String, Value>) -> Result<(), Fault> {
        {
            let f = Fields::new(&obj);
            let ty = f.string("type")?;
            if ty != "trace" {
                return Err(fault(
                    "type",
                    Problem::NotAHeader {
                        header: HEADER,
                        got: Token::of(ty),
                    },
                ));
            }
            self.version = match f.get("version")? {
                Value::Number(n) if n.as_u64() == Some(1) => Version::V1,
                Value::Number(n) if n.as_u64() == Some(2) => Version::V2,
                other => {
                    return Err(fault(
                        "version",
                        Problem::Version {
                            what: "trace",
                            got: Token::of_value(other),
                            readable: "1 and 2 are read",
                        },
                    ));
                }
            };
            // A piece of a rotated capture starts with what was open at its cut.
            if let Some(open) = obj.get("open").filter(|v| !v.is_null()) {
                self.validator.seed(open)?;
            }
            self.header_seen = true;
            self.header = Some(obj);
            Ok(())
        }
    }
}

impl<R: BufRead> TraceReader<R> {
    /// The next event, its ids borrowed from the line it was read from (or from that line's
    /// parsed object): nothing is copied but what the caller keeps. `None` at the end or after
    /// an error; the owned form is the [`Iterator`].
    pub fn next_event(&mut self) -> Option<Result<Event<&str>, TraceError>> {
        if self.lines.failed() {
            return None;
        }
        if !self.header_seen {
            if let Err(e) = self.read_header() {
                return Some(Err(e));
            }
        }
        let (line, at) = match self.lines.next_line()? {
            Ok(line) => line,
            Err(e) => return Some(Err(e)),
        };
        // The fast path first; anything it does not take, the strict path decides.
        let ev = match fast::event(line, self.version) {
            Some(ev) => ev,
            None => {
                let obj = match object(line) {
                    Ok(obj) => self.strict.insert(obj),
                    Err(f) => return Some(Err(at.fail(f))),
                };
                match parse_event(obj, self.version) {
                    Ok(ev) => ev,
                    Err(f) => return Some(Err(at.fail(f))),
                }
            }
        };
        Some(match self.validator.check(&ev) {
            Ok(()) => Ok(ev),
            Err(f) => Err(at.fail(f)),
        })
    }

    /// Reads the first line, which must be the header, unless it has been read: then
    /// [`Self::header`] has it before any event is read.
    pub fn read_header(&mut self) -> Result<(), TraceError> {
        if self.header_seen {
            return Ok(());
        }
        let obj = match self.lines.next_line() {
            Some(Ok((line, _))) => object(line),
            Some(Err(e)) => return Err(e),
            None => Err(line_fault(Problem::EmptyTrace { header: HEADER })),
        };
        obj.and_then(|obj| self.header_line(obj))
            .map_err(|f| self.lines.fail(f))
    }
}

impl<R: BufRead> Iterator for TraceReader<R> {
    type Item = Result<Event, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        Some(self.next_event()?.map(Event::into_owned))
    }
}

/// Reads a whole trace into memory (for tests and small traces).
pub fn read_all(input: impl BufRead, source_name: &str) -> Result<Vec<Event>, TraceError> {
    TraceReader::new(input, source_name).collect()
}

#[cfg(test)]
#[path = "reader_tests.rs"]
mod tests;
