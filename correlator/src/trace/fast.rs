//! The fast way to read an event line: one pass over its bytes into typed fields, with no
//! `Value` tree, no map of owned keys and no copies but the ids the event keeps. It only ever
//! says "this line is exactly this event" or "don't know": anything unusual (an escape in a
//! string, an unknown or repeated key, a value of another type, a number in exponent form or
//! with many digits, an unknown type word, a value out of range) is left to [`parse_event`](super::parse::parse_event)
//! over the line's `Value`, which accepts or rejects it and names what was wrong. So the strict
//! reader's answers and messages stay those of one implementation; this one only has to agree
//! on the lines it takes, and the tests check that it does.

use crate::event::*;

use super::header::Version;

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

/// `transport` of an MCP event, as `parse::mcp_transport` reads it: absent is stdio, `"http"`
/// in v2; anything else is left to the strict path, which names the fault.
fn mcp_transport(w: Option<&str>, version: Version) -> Option<McpTransport> {
    match (w, version) {
        (None, _) | (Some(_), Version::V1) => Some(McpTransport::Stdio),
        (Some(w), Version::V2) => McpTransport::parse(w),
    }
}

/// The event on this line if it is plainly a good one; `None` to let the strict path
/// decide. Mirrors `parse_event` field for field.
pub(super) fn event<'a>(line: &'a str, version: Version) -> Option<Event<&'a str>> {
    let spaced = plain(line.as_bytes())?;
    let mut l = Line::default();
    scan(line, spaced, &mut l)?;
    if version == Version::V1 && l.v2_keys {
        return None;
    }
    let t = time(l.t)?;
    // Required (string or null) in v2; not a field of v1, where every host is null.
    let host = |h: Slot<'a>| match version {
        Version::V2 => h.nullable(),
        Version::V1 => Some(None),
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
                transport: mcp_transport(l.transport, version)?,
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
                transport: mcp_transport(l.transport, version)?,
            }
        }
        // The header again, or an unknown type: the strict path says which.
        _ => return None,
    };
    Some(Event { t, kind })
}
