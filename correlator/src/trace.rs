//! Trace v2: a strict reader (of versions 1 and 2) and a writer whose lines the reader
//! accepts (docs/design.md §5).
//!
//! Version 2 adds `host` (string or null, required) to `stream_open`, `mcp_start` and
//! `mcp_interval`, and optional `model` on `response_start`, `usage` and `stop_reason` on
//! `response_end` (absent or null when unknown; the writer omits them then). A version 1 trace
//! is read as version 2 with every host null and none of the optional fields: in a v1 line
//! those keys are not fields, and are ignored like any other unknown key.
//!
//! The reader never guesses: every malformed line is an error naming the source, the line
//! number, the field when there is one, and what was wrong. Its bookkeeping is bounded by what
//! is open (streams, responses, running MCP calls), not by the length of the trace.

use std::fmt::Write as _;
use std::io::BufRead;
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};
use serde_json::{Map, Value};

use crate::event::*;
use crate::intern::Interner;
use crate::json::{push_key, push_ms, push_opt_str, push_str};
use crate::lines::{
    fault, kind_of, line_fault, object, order, Fault, Fields, LineError, LineSource, Problem, Token,
};

/// The first line of every trace this crate writes (version 2).
pub const HEADER: &str = r#"{"type":"trace","version":2}"#;

/// The first line of a trace v1 file, still read (as v2 with every host null).
pub const HEADER_V1: &str = r#"{"type":"trace","version":1}"#;

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

/// The version a trace's header declared: what its lines may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Version {
    V1,
    V2,
}

/// A malformed trace line: source, line number, field and what was wrong.
pub type TraceError = LineError;

/// `usage` of a `response_end`: absent or null is none; else an object whose four counts are
/// each absent, null or a non-negative integer (other keys are ignored, as at the top level).
fn usage(f: &Fields<'_>) -> Result<Option<Usage>, Fault> {
    let obj = match f.obj.get("usage") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(obj)) => obj,
        Some(other) => return Err(f.wrong("usage", "an object or null", other)),
    };
    let count = |k: &'static str| -> Result<Option<u64>, Fault> {
        match obj.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => n.as_u64().map(Some).ok_or_else(|| {
                fault(
                    "usage",
                    Problem::NotACountIn {
                        key: k,
                        got: Token::of(&n.to_string()),
                    },
                )
            }),
            Some(other) => Err(fault(
                "usage",
                Problem::NotACountIn {
                    key: k,
                    got: Token::of(kind_of(other)),
                },
            )),
        }
    };
    Ok(Some(Usage {
        input: count("input")?,
        output: count("output")?,
        cache_read: count("cache_read")?,
        cache_creation: count("cache_creation")?,
    }))
}

fn outcome_of(f: &Fields<'_>) -> Result<Outcome, Fault> {
    f.word("outcome", Outcome::parse, Outcome::WORDS)
}

/// The optional Multi Round-Trip fields of an `mcp_interval`: `rounds` (an integer, at least
/// 1), `input_wait` (milliseconds, at most the interval's length) and `outcome_detail` (only
/// `input_unanswered`, only with outcome `cancelled`). All absent is a call of one request.
fn rounds(f: &Fields<'_>, outcome: Outcome, length: Millis) -> Result<Option<Rounds>, Fault> {
    let (r, w, d) = (
        f.obj.get("rounds"),
        f.obj.get("input_wait"),
        f.obj.get("outcome_detail"),
    );
    if r.is_none() && w.is_none() && d.is_none() {
        return Ok(None);
    }
    let rounds = match r {
        None => 1,
        Some(v) => match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
            Some(n) if n >= 1 => n,
            _ => return Err(f.wrong("rounds", "an integer of at least 1", v)),
        },
    };
    let input_wait = match w {
        None => 0.0,
        Some(v) => match v.as_f64() {
            Some(ms) if ms.is_finite() && ms >= 0.0 && ms <= length => ms,
            _ => return Err(f.wrong("input_wait", "milliseconds, at most end - start", v)),
        },
    };
    let unanswered = match d {
        None => false,
        Some(v)
            if v.as_str() == Some(Rounds::INPUT_UNANSWERED) && outcome == Outcome::Cancelled =>
        {
            true
        }
        Some(v) => {
            return Err(f.wrong(
                "outcome_detail",
                "\"input_unanswered\", with outcome \"cancelled\"",
                v,
            ))
        }
    };
    Ok(Some(Rounds {
        rounds,
        input_wait,
        unanswered,
    }))
}

/// `stop_reason` of a `response_end`: absent or null is none, else one of the fixed words.
fn stop_reason(f: &Fields<'_>) -> Result<Option<StopReason>, Fault> {
    match f.obj.get("stop_reason") {
        None | Some(Value::Null) => Ok(None),
        Some(_) => f
            .word("stop_reason", StopReason::parse, StopReason::WORDS)
            .map(Some),
    }
}

/// Parses one event line's JSON into an [`Event`], checking fields and types only.
fn parse_event<'a>(obj: &'a Map<String, Value>, version: Version) -> Result<Event<&'a str>, Fault> {
    let f = Fields::new(obj);
    let v2 = version == Version::V2;
    // Required in v2 (a string or null); not a field of v1, where every host is null.
    let host = |f: &Fields<'a>| if v2 { f.opt_string("host") } else { Ok(None) };
    let ty = f.string("type")?;
    if ty == "trace" {
        return Err(fault("type", Problem::Rule("a second trace header")));
    }
    let t = f.time("t")?;
    let kind = match ty {
        "stream_open" => EventKind::StreamOpen {
            stream: f.string("stream")?,
            client: f.word("client", Client::parse, Client::WORDS)?,
            transport: f.word("transport", Transport::parse, Transport::WORDS)?,
            thread: f.opt_string("thread")?,
            host: host(&f)?,
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
            model: if v2 { f.hint("model")? } else { None },
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
            usage: if v2 { usage(&f)? } else { None },
            stop_reason: if v2 { stop_reason(&f)? } else { None },
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
                return Err(order("start", start, "is after the report time t=", t, ""));
            }
            EventKind::McpStart {
                interval: f.string("interval")?,
                alias: f.string("alias")?,
                tool: f.string("tool")?,
                start,
                host: host(&f)?,
            }
        }
        "mcp_interval" => {
            let start = f.time("start")?;
            let end = f.time("end")?;
            if end < start {
                return Err(order("end", end, "is before start ", start, ""));
            }
            if end > t {
                return Err(order("end", end, "is after the report time t=", t, ""));
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
                host: host(&f)?,
                // Keys of v2 only: in a v1 line they are not fields, like `host`.
                rounds: if v2 {
                    rounds(&f, outcome_of(&f)?, end - start)?
                } else {
                    None
                },
            }
        }
        other => {
            return Err(fault(
                "type",
                Problem::UnknownType {
                    what: "event",
                    got: Token::of(other),
                    hint: "",
                },
            ))
        }
    };
    Ok(Event { t, kind })
}

/// The fast way to read an event line: one pass over its bytes into typed fields, with no
/// `Value` tree, no map of owned keys and no copies but the ids the event keeps. It only ever
/// says "this line is exactly this event" or "don't know": anything unusual (an escape in a
/// string, an unknown or repeated key, a value of another type, a number in exponent form or
/// with many digits, an unknown type word, a value out of range) is left to [`parse_event`]
/// over the line's `Value`, which accepts or rejects it and names what was wrong. So the strict
/// reader's answers and messages stay those of one implementation; this one only has to agree
/// on the lines it takes, and the tests check that it does.
mod fast {
    use crate::event::*;

    /// A field that may be absent, `null` or a value: the trace distinguishes absent from
    /// `null` for some fields ("missing" is an error where `null` is not).
    #[derive(Default, Clone, Copy)]
    enum Slot<'a> {
        #[default]
        Absent,
        Null,
        Is(&'a str),
    }

    impl<'a> Slot<'a> {
        /// A required string: present and not `null`.
        fn value(self) -> Option<&'a str> {
            match self {
                Slot::Is(v) => Some(v),
                _ => None,
            }
        }

        /// A field that must be present and may be `null`.
        fn nullable(self) -> Option<Option<&'a str>> {
            match self {
                Slot::Absent => None,
                Slot::Null => Some(None),
                Slot::Is(v) => Some(Some(v)),
            }
        }

        /// A hint: absent and `null` both mean none.
        fn hint(self) -> Option<&'a str> {
            self.value()
        }
    }

    /// Every field any event type has, as read from one line.
    #[derive(Default)]
    struct Line<'a> {
        ty: Option<&'a str>,
        t: Option<f64>,
        stream: Slot<'a>,
        client: Option<&'a str>,
        transport: Option<&'a str>,
        thread: Slot<'a>,
        request: Slot<'a>,
        previous_response: Slot<'a>,
        outputs: Option<Vec<&'a str>>,
        response: Slot<'a>,
        call: Slot<'a>,
        item: Slot<'a>,
        name: Slot<'a>,
        namespace: Slot<'a>,
        kind: Option<&'a str>,
        status: Option<&'a str>,
        reason: Slot<'a>,
        interval: Slot<'a>,
        alias: Slot<'a>,
        tool: Slot<'a>,
        start: Option<f64>,
        end: Option<f64>,
        outcome: Option<&'a str>,
        tool_use_id: Slot<'a>,
        item_id: Slot<'a>,
        call_id: Slot<'a>,
        host: Slot<'a>,
        model: Slot<'a>,
        /// Absent, `null`, or an object of plain counts.
        usage: Option<Option<Usage>>,
        stop_reason: Slot<'a>,
        /// Whether any key of trace v2 only was seen (a v1 line with one is left to the
        /// strict path, which ignores it).
        v2_keys: bool,
    }

    /// Whether a line has no `\` and no control byte (below 0x20) anywhere: then each of its
    /// strings ends at the next `"`, and the only whitespace it can have is the space. One pass
    /// over the line (without an early exit, so the compiler does it 16 bytes at a time) is
    /// cheaper than asking at every byte of every string; a line with either is left to the
    /// strict path (escapes are rare in a trace, tabs rarer). `Some(spaced)` for a plain line:
    /// whether it has a space at all (a line as windowtap writes it has none, and then no
    /// token need look for one: that was a seventh of the scan).
    fn plain(line: &[u8]) -> Option<bool> {
        let (bad, spaced) = line.iter().fold((false, false), |(bad, spaced), &c| {
            (bad | (c == b'\\') | (c < 0x20), spaced | (c == b' '))
        });
        (!bad).then_some(spaced)
    }

    /// Flags (the high bit of a byte) where the eight bytes of `w` (little-endian) are `"`: the
    /// classic "has a zero byte" test on `w` XOR eight quotes. Non-zero exactly when there is
    /// one, and its lowest flag is the first (a false flag can only follow a true one, where
    /// the subtraction borrowed).
    fn quotes(w: u64) -> u64 {
        const ONES: u64 = 0x0101_0101_0101_0101;
        const HIGH: u64 = 0x8080_8080_8080_8080;
        let v = w ^ (ONES * u64::from(b'"'));
        v.wrapping_sub(ONES) & !v & HIGH
    }

    /// Where the first `"` of `b` is: eight bytes at a time (ids and keys are 1 to 20 bytes:
    /// memchr's setup cost more than it saved), then byte by byte near the line's end.
    fn until_quote(b: &[u8]) -> Option<usize> {
        let mut at = 0;
        while let Some(word) = b.get(at..at + 8) {
            let found = quotes(u64::from_le_bytes(word.try_into().ok()?));
            if found != 0 {
                return Some(at + found.trailing_zeros() as usize / 8);
            }
            at += 8;
        }
        Some(at + b.get(at..)?.iter().position(|&c| c == b'"')?)
    }

    #[test]
    fn the_word_test_finds_exactly_the_quotes_the_byte_test_does() {
        for at in 0..8 {
            for byte in 0..=255u8 {
                let mut word = [b'a'; 8];
                word[at] = byte;
                let flags = quotes(u64::from_le_bytes(word));
                assert_eq!(flags != 0, byte == b'"', "{byte:#x} at {at}");
                if byte == b'"' {
                    assert_eq!(flags.trailing_zeros() / 8, at as u32, "{byte:#x} at {at}");
                }
            }
        }
        // Bytes of UTF-8 sequences (0x80 and up) are never quotes, whatever their neighbours.
        assert_eq!(quotes(u64::from_le_bytes(*b"\xe2\x80\x94a\xff\x80 ~")), 0);
        // Two quotes, or a quote before bytes that borrow: the first is found.
        for word in [*b"ab\"\x00\\\"\x1fc", *b"\"!\"\"#\x00\x01\"", *b"ab\"#####"] {
            let first = word.iter().position(|&c| c == b'"').unwrap() as u32;
            assert_eq!(quotes(u64::from_le_bytes(word)).trailing_zeros() / 8, first);
        }
    }

    #[test]
    fn a_line_is_plain_exactly_when_no_byte_is_a_backslash_or_a_control_byte() {
        for len in [0, 1, 15, 16, 17, 31, 33, 140] {
            for at in 0..len {
                for byte in 0..=255u8 {
                    let mut line = vec![b'a'; len];
                    line[at] = byte;
                    assert_eq!(
                        plain(&line),
                        (byte != b'\\' && byte >= 0x20).then_some(byte == b' '),
                        "{byte:#x} at {at}/{len}"
                    );
                }
            }
        }
    }

    /// Powers of ten up to 10^18 (a number has at most 18 digits here), each an exact `f64`.
    const POW10: [f64; 19] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
        1e17, 1e18,
    ];

    #[test]
    fn the_fast_number_is_the_parsed_number() {
        // xorshift: whole parts of 1 to 12 digits, fractions of 1 to 6, every value the fast
        // path takes checked against std's correctly rounded parser.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..50_000 {
            let whole = next() % 10u64.pow(1 + (next() % 12) as u32);
            let places = 1 + (next() % 6) as usize;
            let frac = next() % 10u64.pow(places as u32);
            let text = format!("{whole}.{frac:0places$}");
            let mut sc = Scan {
                s: &text,
                i: 0,
                spaced: false,
            };
            let v = sc.number().expect("a plain number");
            assert_eq!(v, text.parse::<f64>().unwrap(), "{text}");
        }
    }

    /// A cursor over one line.
    struct Scan<'a> {
        s: &'a str,
        i: usize,
        /// The line has a space somewhere ([`plain`]).
        spaced: bool,
    }

    impl<'a> Scan<'a> {
        /// The next byte after whitespace (only spaces: the line is [`plain`]).
        fn peek(&mut self) -> Option<u8> {
            let b = self.s.as_bytes();
            if self.spaced {
                while b.get(self.i) == Some(&b' ') {
                    self.i += 1;
                }
            }
            b.get(self.i).copied()
        }

        fn eat(&mut self, c: u8) -> Option<()> {
            (self.peek()? == c).then(|| self.i += 1)
        }

        /// A string, borrowed from the line: on a [`plain`] line, everything up to the next
        /// `"` (cut at ASCII quotes, so it stays valid UTF-8).
        fn string(&mut self) -> Option<&'a str> {
            self.eat(b'"')?;
            let start = self.i;
            let len = until_quote(self.s.as_bytes().get(start..)?)?;
            self.i += len + 1;
            self.s.get(start..start + len)
        }

        /// A key: its bytes up to the next `"` (keys are plain words, compared as bytes; a
        /// key that is not one of ours sends the line to the strict path either way).
        fn key(&mut self) -> Option<&'a [u8]> {
            self.eat(b'"')?;
            let rest = self.s.as_bytes().get(self.i..)?;
            let len = until_quote(rest)?;
            self.i += len + 1;
            Some(&rest[..len])
        }

        /// A string, or `null`.
        fn slot(&mut self) -> Option<Slot<'a>> {
            if self.peek()? == b'n' {
                self.s[self.i..].starts_with("null").then(|| {
                    self.i += 4;
                    Slot::Null
                })
            } else {
                self.string().map(Slot::Is)
            }
        }

        /// A non-negative number without exponent and with at most 18 digits, correctly
        /// rounded (std's parser, as serde_json's `float_roundtrip` is), so both readers give
        /// the same `f64`.
        fn number(&mut self) -> Option<f64> {
            self.peek()?;
            let b = self.s.as_bytes();
            let start = self.i;
            let mut m = 0u64;
            let mut digits = |i: &mut usize| {
                let from = *i;
                while let Some(&c @ b'0'..=b'9') = b.get(*i) {
                    // At most 18 digits are kept (checked below), which cannot overflow.
                    m = m.wrapping_mul(10).wrapping_add(u64::from(c - b'0'));
                    *i += 1;
                }
                *i - from
            };
            let whole = digits(&mut self.i);
            // JSON allows no leading zero before another digit.
            if whole == 0 || (whole > 1 && b[start] == b'0') {
                return None;
            }
            let mut frac = 0;
            if b.get(self.i) == Some(&b'.') {
                self.i += 1;
                frac = digits(&mut self.i);
                if frac == 0 {
                    return None;
                }
            }
            if whole + frac > 18 {
                return None;
            }
            match frac {
                0 => Some(m as f64),
                // Clinger's fast path: a mantissa below 2^53 and a power of ten below 10^23
                // are both exact doubles, so one IEEE division is the correctly rounded
                // quotient, the same `f64` a correct parser gives.
                f if m < (1 << 53) => Some(m as f64 / POW10[f]),
                _ => self.s[start..self.i].parse().ok(),
            }
        }

        /// A non-negative integer of at most 18 digits, not followed by a fraction or an
        /// exponent (those are left to the strict path).
        fn integer(&mut self) -> Option<u64> {
            self.peek()?;
            let b = self.s.as_bytes();
            let start = self.i;
            let mut m = 0u64;
            while let Some(&c @ b'0'..=b'9') = b.get(self.i) {
                if self.i > start && m == 0 {
                    return None;
                }
                m = m * 10 + u64::from(c - b'0');
                self.i += 1;
                if self.i - start > 18 {
                    return None;
                }
            }
            let done = self.i > start && !matches!(b.get(self.i), Some(b'.' | b'e' | b'E'));
            done.then_some(m)
        }

        /// A `usage` value: `null`, or an object of the four counts, each at most once.
        fn usage(&mut self) -> Option<Option<Usage>> {
            if self.peek()? == b'n' {
                return self.s[self.i..].starts_with("null").then(|| {
                    self.i += 4;
                    None
                });
            }
            self.eat(b'{')?;
            let mut u = Usage::default();
            if self.peek()? == b'}' {
                self.i += 1;
                return Some(Some(u));
            }
            loop {
                let key = self.string()?;
                self.eat(b':')?;
                let slot = match key {
                    "input" => &mut u.input,
                    "output" => &mut u.output,
                    "cache_read" => &mut u.cache_read,
                    "cache_creation" => &mut u.cache_creation,
                    _ => return None,
                };
                if slot.is_some() {
                    return None;
                }
                *slot = Some(self.integer()?);
                match self.peek()? {
                    b',' => self.i += 1,
                    b'}' => {
                        self.i += 1;
                        return Some(Some(u));
                    }
                    _ => return None,
                }
            }
        }

        /// An array of strings.
        fn strings(&mut self) -> Option<Vec<&'a str>> {
            self.eat(b'[')?;
            let mut out = Vec::new();
            if self.peek()? == b']' {
                self.i += 1;
                return Some(out);
            }
            loop {
                out.push(self.string()?);
                match self.peek()? {
                    b',' => self.i += 1,
                    b']' => {
                        self.i += 1;
                        return Some(out);
                    }
                    _ => return None,
                }
            }
        }
    }

    /// Reads one line's fields into `l`; `None` if it is not a flat object of known keys, each
    /// once, with values of the expected JSON type. (The caller's `l` rather than a returned
    /// one: a `Line` is several hundred bytes, and handing it out through an `Option` copied
    /// it.)
    fn scan<'a>(line: &'a str, spaced: bool, l: &mut Line<'a>) -> Option<()> {
        let mut sc = Scan {
            s: line,
            i: 0,
            spaced,
        };
        let mut seen = 0u32;
        sc.eat(b'{')?;
        if sc.peek()? != b'}' {
            loop {
                let key = sc.key()?;
                sc.eat(b':')?;
                // By length first, then the text: a match on the text alone compared it with
                // each key in turn.
                let (bit, ok) = match (key.len(), key) {
                    (4, b"type") => (0, sc.string().map(|v| l.ty = Some(v))),
                    (1, b"t") => (1, sc.number().map(|v| l.t = Some(v))),
                    (6, b"stream") => (2, sc.slot().map(|v| l.stream = v)),
                    (6, b"client") => (3, sc.string().map(|v| l.client = Some(v))),
                    (9, b"transport") => (4, sc.string().map(|v| l.transport = Some(v))),
                    (6, b"thread") => (5, sc.slot().map(|v| l.thread = v)),
                    (7, b"request") => (6, sc.slot().map(|v| l.request = v)),
                    (17, b"previous_response") => (7, sc.slot().map(|v| l.previous_response = v)),
                    (7, b"outputs") => (8, sc.strings().map(|v| l.outputs = Some(v))),
                    (8, b"response") => (9, sc.slot().map(|v| l.response = v)),
                    (4, b"call") => (10, sc.slot().map(|v| l.call = v)),
                    (4, b"item") => (11, sc.slot().map(|v| l.item = v)),
                    (4, b"name") => (12, sc.slot().map(|v| l.name = v)),
                    (9, b"namespace") => (13, sc.slot().map(|v| l.namespace = v)),
                    (4, b"kind") => (14, sc.string().map(|v| l.kind = Some(v))),
                    (6, b"status") => (15, sc.string().map(|v| l.status = Some(v))),
                    (6, b"reason") => (16, sc.slot().map(|v| l.reason = v)),
                    (8, b"interval") => (17, sc.slot().map(|v| l.interval = v)),
                    (5, b"alias") => (18, sc.slot().map(|v| l.alias = v)),
                    (4, b"tool") => (19, sc.slot().map(|v| l.tool = v)),
                    (5, b"start") => (20, sc.number().map(|v| l.start = Some(v))),
                    (3, b"end") => (21, sc.number().map(|v| l.end = Some(v))),
                    (7, b"outcome") => (22, sc.string().map(|v| l.outcome = Some(v))),
                    (11, b"tool_use_id") => (23, sc.slot().map(|v| l.tool_use_id = v)),
                    (7, b"item_id") => (24, sc.slot().map(|v| l.item_id = v)),
                    (7, b"call_id") => (25, sc.slot().map(|v| l.call_id = v)),
                    (4, b"host") => (26, sc.slot().map(|v| l.host = v)),
                    (5, b"model") => (27, sc.slot().map(|v| l.model = v)),
                    (5, b"usage") => (28, sc.usage().map(|v| l.usage = Some(v))),
                    (11, b"stop_reason") => (29, sc.slot().map(|v| l.stop_reason = v)),
                    _ => return None,
                };
                l.v2_keys |= bit >= 26;
                ok?;
                // A repeated key: the strict reader decides which value counts.
                if seen & (1 << bit) != 0 {
                    return None;
                }
                seen |= 1 << bit;
                match sc.peek()? {
                    b',' => sc.i += 1,
                    b'}' => break,
                    _ => return None,
                }
            }
        }
        sc.i += 1;
        // Nothing but whitespace may follow the object.
        (sc.peek().is_none()).then_some(())
    }

    /// The same range check as `Fields::time`.
    fn time(t: Option<f64>) -> Option<Millis> {
        t.filter(|t| t.is_finite() && *t >= 0.0)
    }

    fn word<T>(w: Option<&str>, parse: fn(&str) -> Option<T>) -> Option<T> {
        parse(w?)
    }

    /// The event on this line if it is plainly a good one; `None` to let the strict path
    /// decide. Mirrors `parse_event` field for field.
    pub(super) fn event<'a>(line: &'a str, version: super::Version) -> Option<Event<&'a str>> {
        let spaced = plain(line.as_bytes())?;
        let mut l = Line::default();
        scan(line, spaced, &mut l)?;
        if version == super::Version::V1 && l.v2_keys {
            return None;
        }
        let t = time(l.t)?;
        // Required (string or null) in v2; not a field of v1, where every host is null.
        let host = |h: Slot<'a>| match version {
            super::Version::V2 => h.nullable(),
            super::Version::V1 => Some(None),
        };
        let kind = match l.ty? {
            "stream_open" => EventKind::StreamOpen {
                stream: l.stream.value()?,
                client: word(l.client, Client::parse)?,
                transport: word(l.transport, Transport::parse)?,
                thread: l.thread.nullable()?,
                host: host(l.host)?,
            },
            "request" => EventKind::Request {
                stream: l.stream.value()?,
                request: l.request.value()?,
                previous_response: l.previous_response.nullable()?,
                outputs: l.outputs?,
            },
            "response_start" => EventKind::ResponseStart {
                stream: l.stream.value()?,
                response: l.response.value()?,
                request: l.request.nullable()?,
                model: l.model.hint(),
            },
            "tool_call" => EventKind::ToolCall {
                stream: l.stream.value()?,
                response: l.response.value()?,
                call: l.call.value()?,
                item: l.item.nullable()?,
                name: l.name.value()?,
                namespace: l.namespace.nullable()?,
                kind: word(l.kind, CallKind::parse)?,
            },
            "response_end" => EventKind::ResponseEnd {
                stream: l.stream.value()?,
                response: l.response.value()?,
                status: word(l.status, ResponseStatus::parse)?,
                usage: l.usage.flatten(),
                stop_reason: match l.stop_reason {
                    Slot::Is(w) => Some(StopReason::parse(w)?),
                    _ => None,
                },
            },
            "stream_close" => EventKind::StreamClose {
                stream: l.stream.value()?,
            },
            "observation_lost" => EventKind::ObservationLost {
                stream: l.stream.value()?,
                reason: l.reason.value()?,
            },
            "mcp_start" => {
                let start = time(l.start).filter(|s| *s <= t)?;
                EventKind::McpStart {
                    interval: l.interval.value()?,
                    alias: l.alias.value()?,
                    tool: l.tool.value()?,
                    start,
                    host: host(l.host)?,
                }
            }
            "mcp_interval" => {
                let start = time(l.start)?;
                let end = time(l.end).filter(|e| *e >= start && *e <= t)?;
                EventKind::McpInterval {
                    interval: l.interval.value()?,
                    alias: l.alias.value()?,
                    tool: l.tool.value()?,
                    start,
                    end,
                    outcome: word(l.outcome, Outcome::parse)?,
                    hints: Hints {
                        tool_use_id: l.tool_use_id.hint(),
                        item_id: l.item_id.hint(),
                        call_id: l.call_id.hint(),
                        thread: l.thread.hint(),
                    },
                    host: host(l.host)?,
                    // A line with the Multi Round-Trip fields has keys this path does not
                    // know, so it went to the strict path.
                    rounds: None,
                }
            }
            // The header again, or an unknown type: the strict path says which.
            _ => return None,
        };
        Some(Event { t, kind })
    }
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

    fn check<S: AsRef<str>>(&mut self, ev: &Event<S>) -> Result<(), Fault> {
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
    fn seed(&mut self, open: &Value) -> Result<(), Fault> {
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

/// Appends one event as a trace v2 line (without the newline), fields in table order; the
/// optional fields of v2 (`model`, `usage` and its counts, `stop_reason`) only when known.
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
            host,
        } => {
            s(out, "stream", stream);
            s(out, "client", client.as_str());
            s(out, "transport", transport.as_str());
            o(out, "thread", thread.as_deref());
            o(out, "host", host.as_deref());
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
            model,
        } => {
            s(out, "stream", stream);
            s(out, "response", response);
            o(out, "request", request.as_deref());
            if let Some(model) = model {
                s(out, "model", model);
            }
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
            usage,
            stop_reason,
        } => {
            s(out, "stream", stream);
            s(out, "response", response);
            s(out, "status", status.as_str());
            if let Some(usage) = usage {
                write_usage(out, usage);
            }
            if let Some(reason) = stop_reason {
                s(out, "stop_reason", reason.as_str());
            }
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
            host,
        } => {
            s(out, "interval", interval);
            s(out, "alias", alias);
            s(out, "tool", tool);
            out.push_str(",\"start\":");
            push_ms(out, *start);
            o(out, "host", host.as_deref());
        }
        EventKind::McpInterval {
            interval,
            alias,
            tool,
            start,
            end,
            outcome,
            hints,
            host,
            rounds,
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
            o(out, "host", host.as_deref());
            if let Some(r) = rounds {
                out.push_str(",\"rounds\":");
                out.push_str(&r.rounds.to_string());
                out.push_str(",\"input_wait\":");
                push_ms(out, r.input_wait);
                if r.unanswered {
                    s(out, "outcome_detail", Rounds::INPUT_UNANSWERED);
                }
            }
        }
    }
    out.push('}');
}

/// `,"usage":{…}` with the counts that are known, in trace order.
fn write_usage(out: &mut String, usage: &Usage) {
    out.push_str(",\"usage\":{");
    let mut first = true;
    for (k, v) in usage.fields() {
        if let Some(v) = v {
            if !first {
                out.push(',');
            }
            first = false;
            push_key(out, k);
            let _ = write!(out, "{v}");
        }
    }
    out.push('}');
}

/// One event as a trace v2 line, newline included.
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

    const OPEN: &str = r#"{"type":"stream_open","t":1,"stream":"s1","client":"codex","transport":"websocket","thread":"th1","host":"h1"}"#;

    #[test]
    fn a_written_trace_reads_back_identically() {
        let text = format!(
            "{HEADER}\n{OPEN}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n",
            r#"{"type":"request","t":2,"stream":"s1","request":"q1","previous_response":null,"outputs":[]}"#,
            r#"{"type":"response_start","t":3,"stream":"s1","response":"r1","request":"q1"}"#,
            r#"{"type":"tool_call","t":4.25,"stream":"s1","response":"r1","call":"c1","item":"fc1","name":"echo","namespace":"mcp__probe","kind":"function"}"#,
            r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed"}"#,
            r#"{"type":"mcp_start","t":6,"interval":"i1","alias":"probe","tool":"echo","start":5.5,"host":null}"#,
            r#"{"type":"mcp_interval","t":8,"interval":"i1","alias":"probe","tool":"echo","start":5.5,"end":7,"outcome":"result","tool_use_id":null,"item_id":"fc1","call_id":"c1","thread":"th1","host":"h1"}"#,
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
                    host: None,
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
    fn multi_round_trip_fields_read_back_and_are_checked() {
        let ok = [
            (
                r#"{"type":"mcp_interval","t":8,"interval":"i1","alias":"a","tool":"t","start":1,"end":5,"outcome":"result","tool_use_id":"tu","item_id":null,"call_id":null,"thread":null,"host":null,"rounds":2,"input_wait":2.5}"#,
                Rounds {
                    rounds: 2,
                    input_wait: 2.5,
                    unanswered: false,
                },
            ),
            (
                r#"{"type":"mcp_interval","t":8,"interval":"i2","alias":"a","tool":"t","start":1,"end":5,"outcome":"cancelled","tool_use_id":null,"item_id":null,"call_id":null,"thread":null,"host":null,"rounds":1,"input_wait":4,"outcome_detail":"input_unanswered"}"#,
                Rounds {
                    rounds: 1,
                    input_wait: 4.0,
                    unanswered: true,
                },
            ),
        ];
        for (line, want) in ok {
            let text = format!("{HEADER}\n{line}\n");
            let events = read(&text).unwrap();
            let EventKind::McpInterval { rounds, .. } = &events[0].kind else {
                panic!()
            };
            assert_eq!(rounds, &Some(want));
            // Written back the same (the fast path hands these lines to the strict one).
            assert_eq!(event_line(&events[0]), format!("{line}\n"));
        }
        let base = r#"{"type":"mcp_interval","t":8,"interval":"i1","alias":"a","tool":"t","start":1,"end":5,"host":null,"#;
        for (rest, field) in [
            (r#""outcome":"result","rounds":0}"#, "rounds"),
            (r#""outcome":"result","rounds":1.5}"#, "rounds"),
            (r#""outcome":"result","input_wait":4}"#, ""),
            (r#""outcome":"result","input_wait":-1}"#, "input_wait"),
            (
                r#""outcome":"result","outcome_detail":"input_unanswered"}"#,
                "outcome_detail",
            ),
            (
                r#""outcome":"cancelled","outcome_detail":"bored"}"#,
                "outcome_detail",
            ),
        ] {
            let line = format!("{base}{rest}");
            let got = read(&format!("{HEADER}\n{line}\n"));
            if field.is_empty() {
                assert!(got.is_ok(), "{line}: {got:?}");
            } else {
                let err = got.expect_err(&line).to_string();
                assert!(err.contains(field), "{line}: {err}");
            }
        }
        let too_long = format!(r#"{base}"outcome":"result","input_wait":4.5}}"#);
        assert!(read(&format!("{HEADER}\n{too_long}\n")).is_err());
    }

    #[test]
    fn hints_may_be_absent() {
        let text = format!(
            "{HEADER}\n{}\n",
            r#"{"type":"mcp_interval","t":8,"interval":"i1","alias":"a","tool":"t","start":1,"end":2,"outcome":"error","host":null}"#
        );
        let events = read(&text).unwrap();
        let EventKind::McpInterval { hints, .. } = &events[0].kind else {
            panic!()
        };
        assert_eq!(hints, &Hints::default());
    }

    /// The strict path's answer for one event line.
    fn strict(line: &str) -> Result<Event, Fault> {
        parse_event(&object(line)?, Version::V2).map(Event::into_owned)
    }

    fn strict_v1(line: &str) -> Result<Event, Fault> {
        parse_event(&object(line)?, Version::V1).map(Event::into_owned)
    }

    /// Lines the fast path must take, each as the strict path reads it.
    const TAKEN: &[&str] = &[
        OPEN,
        r#"{"type":"stream_open","t":0,"stream":"s2é","client":"claude","transport":"http","thread":null,"host":null}"#,
        r#"{"type":"request","t":2,"stream":"s1","request":"q1","previous_response":null,"outputs":[]}"#,
        r#"{"type":"request","t":2.5,"stream":"s1","request":"q2","previous_response":"r1","outputs":["c1","c2"]}"#,
        r#"{"type":"response_start","t":3,"stream":"s1","response":"r1","request":"q1"}"#,
        r#"{"type":"response_start","t":3,"stream":"s1","response":"r1","request":null}"#,
        r#"{"type":"response_start","t":3,"stream":"s1","response":"r1","request":null,"model":"gpt-5.1-codex"}"#,
        r#"{"type":"response_start","t":3,"stream":"s1","response":"r1","request":null,"model":null}"#,
        r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed","usage":{"input":12,"output":0,"cache_read":1000000,"cache_creation":7},"stop_reason":"tool_use"}"#,
        r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed","usage":{},"stop_reason":null}"#,
        r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed","usage":{ "output" : 3 },"stop_reason":"other"}"#,
        r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed","usage":null}"#,
        r#"{"type":"tool_call","t":4.25,"stream":"s1","response":"r1","call":"c1","item":"fc1","name":"echo","namespace":"mcp__probe","kind":"function"}"#,
        r#"{"type":"tool_call","t":4.25,"stream":"s1","response":"r1","call":"c1","item":null,"name":"mcp__p__e","namespace":null,"kind":"tool_use"}"#,
        r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"incomplete"}"#,
        r#"{"type":"mcp_start","t":6,"interval":"i1","alias":"probe","tool":"echo","start":6,"host":"h2"}"#,
        r#"{"type":"mcp_interval","t":8,"interval":"i1","alias":"probe","tool":"echo","start":5.5,"end":8,"outcome":"result","tool_use_id":null,"item_id":"fc1","call_id":"c1","thread":"th1","host":null}"#,
        r#"{"type":"mcp_interval","t":8,"interval":"i1","alias":"probe","tool":"echo","start":5.5,"end":5.5,"outcome":"lost","host":"h"}"#,
        r#"{"type":"observation_lost","t":9,"stream":"s1","reason":"decode"}"#,
        r#"{"type":"stream_close","t":1000,"stream":"s1"}"#,
        r#" { "t" : 9 , "type" : "stream_close" , "stream" : "s1" } "#,
        // Numbers as `json::push_ms` writes them, down to the last bit.
        r#"{"type":"stream_close","t":0.05,"stream":"s1"}"#,
        r#"{"type":"stream_close","t":0.30000000000000004,"stream":"s1"}"#,
        r#"{"type":"stream_close","t":123456789012.25,"stream":"s1"}"#,
        r#"{"type":"stream_close","t":0.1,"stream":"s1"}"#,
    ];

    #[test]
    fn the_fast_path_reads_every_written_line_as_the_strict_path_does() {
        for &line in TAKEN {
            let fast = fast::event(line, Version::V2).map(Event::into_owned);
            assert!(fast.is_some(), "the fast path should take {line}");
            assert_eq!(fast.map(Ok), Some(strict(line)), "{line}");
        }
    }

    #[test]
    fn a_line_changed_anywhere_is_read_by_the_fast_path_as_the_strict_path_reads_it_or_left_to_it()
    {
        // Each taken line with one to three bytes replaced, inserted or removed (bytes that
        // matter to JSON most of the time): whatever the fast path takes, the strict path
        // must read the same.
        const BYTES: &[u8] = b"\"\\:,{}[] \t\n0123456789.-eEnultrsa\x00\x1f\x7f\xc3\xa9";
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut taken = 0;
        for _ in 0..200_000 {
            let mut line = TAKEN[next() as usize % TAKEN.len()].as_bytes().to_vec();
            for _ in 0..1 + next() % 3 {
                let at = next() as usize % (line.len() + 1);
                let byte = BYTES[next() as usize % BYTES.len()];
                match next() % 3 {
                    0 if at < line.len() => line[at] = byte,
                    1 => line.insert(at, byte),
                    _ if at < line.len() => {
                        line.remove(at);
                    }
                    _ => {}
                }
            }
            let Ok(line) = std::str::from_utf8(&line) else {
                continue;
            };
            if let Some(fast) = fast::event(line, Version::V2).map(Event::into_owned) {
                assert_eq!(Ok(fast), strict(line), "{line}");
                taken += 1;
            }
        }
        assert!(
            taken > 5_000,
            "the fast path took only {taken} changed lines"
        );
    }

    #[test]
    fn the_fast_path_reads_written_times_to_the_same_bit() {
        // SplitMix64 over times of every magnitude and precision a trace may hold.
        let mut x = 7u64;
        let mut taken = 0;
        for _ in 0..20_000 {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            let t = (z >> 24) as f64 / f64::from(1u32 << (z % 32));
            let ev = Event {
                t,
                kind: EventKind::StreamClose {
                    stream: "s1".into(),
                },
            };
            let line = event_line(&ev);
            let line = line.trim_end();
            if let Some(fast) = fast::event(line, Version::V2).map(Event::into_owned) {
                assert_eq!(Ok(fast.clone()), strict(line), "{line}");
                assert_eq!(fast, ev, "{line}");
                taken += 1;
            }
        }
        assert!(taken > 10_000, "the fast path took only {taken} lines");
    }

    const ESCAPED: &str = r#"{"type":"stream_open","t":0,"stream":"s\"2\u00e9","client":"claude","transport":"http","thread":null,"host":null}"#;

    #[test]
    fn the_fast_path_leaves_every_doubtful_line_to_the_strict_path() {
        // Each is either refused by the fast path or read identically by both.
        let lines = [
            // Unknown and repeated keys, even harmless ones.
            r#"{"type":"stream_close","t":9,"stream":"s1","extra":[[[1]]]}"#,
            r#"{"type":"stream_close","t":9,"stream":"s1","stream":"s2"}"#,
            r#"{"type":"stream_close","t":9,"t":10,"stream":"s1"}"#,
            // Fields of other event types, with or without the type the strict path wants.
            r#"{"type":"stream_close","t":9,"stream":"s1","start":"x"}"#,
            r#"{"type":"stream_close","t":9,"stream":"s1","reason":"why","start":1}"#,
            // Missing versus null.
            r#"{"type":"stream_open","t":1,"stream":"s1","client":"codex","transport":"http"}"#,
            r#"{"type":"stream_open","t":1,"stream":"s1","client":"codex","transport":"http","thread":null}"#,
            r#"{"type":"stream_open","t":1,"stream":"s1","client":"codex","transport":"http","thread":null,"host":7}"#,
            r#"{"type":"mcp_start","t":6,"interval":"i1","alias":"a","tool":"t","start":6}"#,
            r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed","usage":{"input":1.0}}"#,
            r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed","usage":{"input":1e3}}"#,
            r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed","usage":{"input":-1}}"#,
            r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed","usage":{"input":01}}"#,
            r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed","usage":{"input":1,"input":2}}"#,
            r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed","usage":{"input":null}}"#,
            r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed","usage":{"reasoning":5}}"#,
            r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed","usage":{"input":123456789012345678901}}"#,
            r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed","usage":[1]}"#,
            r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed","stop_reason":"Because"}"#,
            r#"{"type":"response_start","t":3,"stream":"s1","response":"r1","request":null,"model":"gpt\n5"}"#,
            r#"{"type":"response_start","t":3,"stream":"s1","response":"r1","request":null,"model":5}"#,
            r#"{"type":"stream_open","t":1,"stream":null,"client":"codex","transport":"http","thread":null}"#,
            r#"{"type":"request","t":2,"stream":"s1","request":"q","outputs":[]}"#,
            r#"{"type":"request","t":2,"stream":"s1","request":"q","previous_response":null,"outputs":null}"#,
            r#"{"type":"request","t":2,"stream":"s1","request":"q","previous_response":null,"outputs":[1]}"#,
            r#"{"type":"mcp_interval","t":8,"interval":"i","alias":"a","tool":"t","start":1,"end":2,"outcome":"error","thread":null,"item_id":7}"#,
            // Values out of range, words out of the vocabulary.
            r#"{"type":"stream_close","t":-1,"stream":"s1"}"#,
            r#"{"type":"stream_close","t":1e400,"stream":"s1"}"#,
            r#"{"type":"stream_close","t":"9","stream":"s1"}"#,
            r#"{"type":"stream_open","t":1,"stream":"s1","client":"vim","transport":"http","thread":null}"#,
            r#"{"type":"mcp_start","t":6,"interval":"i1","alias":"a","tool":"t","start":6.25}"#,
            r#"{"type":"mcp_interval","t":8,"interval":"i","alias":"a","tool":"t","start":5,"end":4,"outcome":"result"}"#,
            r#"{"type":"mcp_interval","t":3,"interval":"i","alias":"a","tool":"t","start":1,"end":4,"outcome":"result"}"#,
            // Escapes, exponents, long or malformed numbers.
            ESCAPED,
            r#"{"type":"request","t":2.5,"stream":"s1","request":"q2","previous_response":"r1","outputs":["c1","c\n2"]}"#,
            r#"{"type":"stream_close","t":1e3,"stream":"s1"}"#,
            r#"{"type":"stream_close","t":1E-3,"stream":"s1"}"#,
            r#"{"type":"stream_close","t":12345678901234567890.5,"stream":"s1"}"#,
            r#"{"type":"stream_close","t":05,"stream":"s1"}"#,
            r#"{"type":"stream_close","t":5.,"stream":"s1"}"#,
            r#"{"type":"stream_close","t":.5,"stream":"s1"}"#,
            r#"{"type":"stream_close","t":1.2.3,"stream":"s1"}"#,
            r#"{"type":"stream_close","t":-0,"stream":"s1"}"#,
            r#"{"type":"stream_close","t":9,"stream":nul}"#,
            r#"{"type":"stream_close","t":9,"stream":"s1",}"#,
            "{\"type\":\"stream_close\",\"t\":9,\"stream\":\"s\t1\"}",
            r#"{}"#,
            // Not an event at all.
            r#"{"type":"trace","version":1}"#,
            r#"{"type":"nope","t":1}"#,
            r#"{"type":"stream_close","t":9,"stream":"s1"} x"#,
            r#"{"type":"stream_close","t":9,"stream":"\ud800"}"#,
            "[1,2]",
            "not json",
        ];
        for line in lines {
            if let Some(ev) = fast::event(line, Version::V2).map(Event::into_owned) {
                assert_eq!(Ok(ev), strict(line), "{line}");
            }
        }
        assert!(fast::event(lines[0], Version::V2).is_none() && strict(lines[0]).is_ok());
        assert!(fast::event(lines[1], Version::V2).is_none() && strict(lines[1]).is_ok());
        // Refused lines that the strict path takes still read, through it.
        let escaped = format!("{HEADER}\n{ESCAPED}\n");
        let events = read(&escaped).unwrap();
        assert_eq!(events[0].kind.stream(), Some("s\"2é"));
    }

    /// Each malformed input names its line and, where there is one, the field.
    #[test]
    fn malformed_lines_are_rejected_precisely() {
        let cases: &[(&str, usize, Option<&str>, &str)] = &[
            ("", 1, None, "empty trace"),
            ("{\"type\":\"trace\",\"version\":3}\n", 1, Some("version"), "unsupported"),
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
                "{HEADER}\n{\"type\":\"mcp_start\",\"t\":1,\"interval\":\"i\",\"alias\":\"a\",\"tool\":\"t\",\"start\":1,\"host\":null}\n{\"type\":\"mcp_interval\",\"t\":9,\"interval\":\"i\",\"alias\":\"a\",\"tool\":\"other\",\"start\":1,\"end\":4,\"outcome\":\"result\",\"host\":null}\n",
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
            assert!(err.problem.to_string().contains(needle), "{input}\n{err}");
            assert!(
                err.to_string().starts_with(&format!("t.jsonl:{line}: ")),
                "{err}"
            );
        }
    }

    #[test]
    fn a_v1_trace_reads_as_v2_with_every_host_null() {
        let v1 = [
            r#"{"type":"stream_open","t":1,"stream":"s1","client":"codex","transport":"http","thread":"th1"}"#,
            // v2 keys in a v1 line are not fields: ignored like any unknown key.
            r#"{"type":"stream_open","t":1,"stream":"s2","client":"codex","transport":"http","thread":null,"host":"h1"}"#,
            r#"{"type":"response_start","t":3,"stream":"s1","response":"r1","request":null,"model":"m"}"#,
            r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed","usage":{"input":1},"stop_reason":"end_turn"}"#,
            r#"{"type":"mcp_start","t":6,"interval":"i1","alias":"a","tool":"t","start":6}"#,
            r#"{"type":"mcp_interval","t":8,"interval":"i1","alias":"a","tool":"t","start":6,"end":7,"outcome":"result","host":"h9"}"#,
        ];
        for line in v1 {
            let ev = strict_v1(line).unwrap();
            if let Some(fast) = fast::event(line, Version::V1).map(Event::into_owned) {
                assert_eq!(fast, ev, "{line}");
            }
            let text = event_line(&ev);
            for absent in ["\"host\":\"", "model", "usage", "stop_reason"] {
                assert!(!text.contains(absent), "{line} -> {text}");
            }
        }
        // The plain v1 lines still take the fast path.
        assert!(fast::event(v1[0], Version::V1).is_some());
        assert!(fast::event(v1[4], Version::V1).is_some());
        // A whole v1 file reads, and written again it is v2 with null hosts.
        let text = format!("{HEADER_V1}\n{}\n{}\n", v1[0], v1[4]);
        let mut reader = TraceReader::new(text.as_bytes(), "v1.jsonl");
        let events: Vec<Event> = reader.by_ref().collect::<Result<_, _>>().unwrap();
        assert_eq!(reader.version, Version::V1);
        assert!(event_line(&events[0]).ends_with(
            r#""thread":"th1","host":null}
"#
        ));
        // In v2 the host is required.
        let err = read(&format!("{HEADER}\n{}\n", v1[0])).unwrap_err();
        assert_eq!((err.line, err.field), (2, Some("host")));
    }

    #[test]
    fn optional_v2_fields_are_omitted_when_unknown_and_kept_when_known() {
        let mut ev = Event {
            t: 5.0,
            kind: EventKind::ResponseEnd {
                stream: "s1".into(),
                response: "r1".into(),
                status: ResponseStatus::Completed,
                usage: None,
                stop_reason: None,
            },
        };
        assert_eq!(
            event_line(&ev),
            "{\"type\":\"response_end\",\"t\":5,\"stream\":\"s1\",\"response\":\"r1\",\"status\":\"completed\"}\n"
        );
        if let EventKind::ResponseEnd {
            usage, stop_reason, ..
        } = &mut ev.kind
        {
            *usage = Some(Usage {
                input: Some(3),
                output: None,
                cache_read: Some(0),
                cache_creation: Some(u64::MAX),
            });
            *stop_reason = Some(StopReason::MaxTokens);
        }
        let line = event_line(&ev);
        assert!(line.contains(r#""usage":{"input":3,"cache_read":0,"cache_creation":18446744073709551615},"stop_reason":"max_tokens"}"#), "{line}");
        assert_eq!(strict(line.trim_end()), Ok(ev.clone()));
        assert_eq!(
            StopReason::from_api("finish_for_some_new_reason"),
            StopReason::Other
        );
        assert_eq!(StopReason::from_api("end_turn"), StopReason::EndTurn);
    }

    #[test]
    fn invalid_utf8_is_an_error_not_a_panic() {
        let mut bytes = format!("{HEADER}\n").into_bytes();
        bytes.extend_from_slice(b"{\"type\":\"\xff\"}\n");
        let err = read_all(&bytes[..], "bin.jsonl").unwrap_err();
        assert_eq!(err.line, 2);
        assert!(err.problem.to_string().contains("UTF-8"));
    }

    /// An input that hands out at most a few bytes per read, as a pipe may.
    struct Trickle<'a>(&'a [u8], usize);

    impl std::io::Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.1.min(buf.len()).min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    /// Lines are read in place from a buffer: lines cut across reads, a line longer than the
    /// buffer, CRLF endings, blank lines and a last line without its break read as they do
    /// whole, and a bad line is still named by its number.
    #[test]
    fn lines_cut_across_reads_or_longer_than_the_buffer_read_as_whole() {
        let long = "x".repeat(700 * 1024);
        let text = format!(
            "{{\"type\":\"trace\",\"version\":2,\"note\":\"{long}\"}}\r\n\n  \n{OPEN}\r\n{}\n\n{}",
            r#"{"type":"request","t":2,"stream":"s1","request":"q1","previous_response":null,"outputs":[]}"#,
            r#"{"type":"stream_close","t":3,"stream":"s1"}"#,
        );
        let whole = read(&text).unwrap();
        assert_eq!(whole.len(), 3);
        for step in [1, 3, 7, 4096, 300 * 1024] {
            let input = std::io::BufReader::with_capacity(5, Trickle(text.as_bytes(), step));
            assert_eq!(read_all(input, "t.jsonl").unwrap(), whole, "step {step}");
        }
        let bad = format!("{text}\n{{\"type\":\"wat\",\"t\":4}}\n");
        for step in [1, 7, 300 * 1024] {
            let input = std::io::BufReader::with_capacity(5, Trickle(bad.as_bytes(), step));
            let err = read_all(input, "t.jsonl").unwrap_err();
            assert_eq!(err.line, 8, "step {step}");
            assert_eq!(err.field, Some("type"));
        }
    }

    /// A rotated capture's piece starts with what was open at its cut: its header's `open`
    /// lets it check on its own exactly as the whole capture does.
    #[test]
    fn a_piece_header_carries_what_is_open_and_the_piece_checks_on_its_own() {
        let whole = [
            OPEN,
            r#"{"type":"response_start","t":2,"stream":"s1","response":"r1","request":null}"#,
            r#"{"type":"mcp_start","t":3,"interval":"i1","alias":"probe","tool":"echo","start":3,"host":null}"#,
            r#"{"type":"tool_call","t":4,"stream":"s1","response":"r1","call":"c1","item":null,"name":"echo","namespace":null,"kind":"tool_use"}"#,
            r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed"}"#,
            r#"{"type":"mcp_interval","t":6,"interval":"i1","alias":"probe","tool":"echo","start":3,"end":6,"outcome":"result","host":null}"#,
            r#"{"type":"stream_close","t":7,"stream":"s1"}"#,
        ];
        for cut in 0..=whole.len() {
            let mut open = OpenState::new();
            let before = format!("{HEADER}\n{}\n", whole[..cut].join("\n"));
            for ev in read(&before).unwrap() {
                open.apply(&ev);
            }
            let header = format!(
                r#"{{"type":"trace","version":2,"capture":"c","piece":1,"open":{}}}"#,
                open.json()
            );
            let piece = format!("{header}\n{}\n", whole[cut..].join("\n"));
            let events = read(&piece).unwrap_or_else(|e| panic!("cut {cut}: {e}"));
            assert_eq!(events.len(), whole.len() - cut);
            if cut > 0 && cut < whole.len() {
                // Without it, what follows the cut does not check.
                let bare = format!("{HEADER}\n{}\n", whole[cut..].join("\n"));
                assert!(read(&bare).is_err(), "cut {cut}");
            }
        }
    }

    #[test]
    fn a_header_open_that_is_not_the_written_shape_is_an_error() {
        for open in [
            r#"[]"#,
            r#"{"streams":[]}"#,
            r#"{"streams":[["s1",false]],"running":[]}"#,
            r#"{"streams":[["s1",false,[]],["s1",false,[]]],"running":[]}"#,
            r#"{"streams":[],"running":[["i1","a","t",-1]]}"#,
        ] {
            let text = format!("{{\"type\":\"trace\",\"version\":2,\"open\":{open}}}\n{OPEN}\n");
            let err = read(&text).unwrap_err();
            assert_eq!((err.line, err.field), (1, Some("open")), "{open}");
        }
    }
}
