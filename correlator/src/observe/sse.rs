//! Incremental Server-Sent Events framing (WHATWG HTML §9.2.6, "event stream interpretation").
//!
//! Bytes arrive in arbitrary chunks: a boundary may fall mid-line, between `\r` and `\n`, or
//! inside a UTF-8 sequence. Lines end in `\r\n`, `\n` or `\r`; `:` starts a comment; `data:`
//! lines of one event are joined with `\n`; a blank line dispatches the event.
//!
//! Model streams are dominated by bulk deltas the correlator never needs. The consumer names
//! the events it wants with a predicate on the `event:` name; once an unwanted name is seen, that
//! event's `data:` lines are dropped as they stream past, never buffered or parsed. Buffers are
//! bounded: a line or an event larger than the limit is an [`SseError::Overflow`].

use memchr::memchr2;

use super::budget::clear_or_release;
use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub(crate) enum SseError {
    #[error("an SSE line or event exceeds the limit of {0} bytes")]
    Overflow(usize),
}

/// The event name the WHATWG rules give an event that has no `event:` line.
pub(super) const DEFAULT_EVENT: &str = "message";

pub(super) struct SseParser {
    /// Whether an event with this name is wanted; unwanted events are dropped unbuffered.
    wants: fn(&str) -> bool,
    max: usize,
    line: Vec<u8>,
    /// The rest of the current line is data of an unwanted event: drop it as it arrives.
    discard_line: bool,
    /// The previous chunk ended in `\r`: a leading `\n` of the next one ends no new line.
    after_cr: bool,
    first_line: bool,
    event: Option<String>,
    data: Vec<u8>,
    has_data: bool,
    skip: bool,
}

impl SseParser {
    /// `max` bounds one line and one event's joined data.
    pub(super) fn new(wants: fn(&str) -> bool, max: usize) -> SseParser {
        SseParser {
            wants,
            max,
            line: Vec::new(),
            discard_line: false,
            after_cr: false,
            first_line: true,
            event: None,
            data: Vec::new(),
            has_data: false,
            skip: false,
        }
    }

    /// Feeds a chunk; calls `on_event(name, data)` for every complete wanted event, in order.
    /// An error from `on_event` stops the feed and is returned.
    pub(super) fn feed<E: From<SseError>>(
        &mut self,
        bytes: &[u8],
        mut on_event: impl FnMut(&str, &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut i = 0;
        while i < bytes.len() {
            if self.after_cr {
                self.after_cr = false;
                if bytes[i] == b'\n' {
                    i += 1;
                    continue;
                }
            }
            match memchr2(b'\n', b'\r', &bytes[i..]) {
                Some(off) => {
                    self.append(&bytes[i..i + off])?;
                    self.end_line(&mut on_event)?;
                    self.after_cr = bytes[i + off] == b'\r';
                    i += off + 1;
                }
                None => {
                    self.append(&bytes[i..])?;
                    break;
                }
            }
        }
        Ok(())
    }

    fn append(&mut self, seg: &[u8]) -> Result<(), SseError> {
        if self.discard_line || seg.is_empty() {
            return Ok(());
        }
        if self.skip && self.line.len() < 5 {
            // Decide as soon as the field name is known, before buffering the value.
            let need = 5 - self.line.len();
            self.line.extend_from_slice(&seg[..need.min(seg.len())]);
            if self.line.starts_with(b"data:") {
                self.discard_line = true;
                self.line.clear();
                return Ok(());
            }
            self.line.extend_from_slice(&seg[need.min(seg.len())..]);
        } else {
            self.line.extend_from_slice(seg);
        }
        if self.line.len() > self.max {
            return Err(SseError::Overflow(self.max));
        }
        Ok(())
    }

    fn end_line<E: From<SseError>>(
        &mut self,
        on_event: &mut impl FnMut(&str, &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        if std::mem::take(&mut self.discard_line) {
            return Ok(());
        }
        let mut line = std::mem::take(&mut self.line);
        if std::mem::take(&mut self.first_line) && line.starts_with(b"\xEF\xBB\xBF") {
            line.drain(..3);
        }
        let result = self.process_line(&line, on_event);
        // Keep a small allocation for the next line; let a large one go.
        clear_or_release(&mut line);
        self.line = line;
        result
    }

    fn process_line<E: From<SseError>>(
        &mut self,
        line: &[u8],
        on_event: &mut impl FnMut(&str, &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        if line.is_empty() {
            return self.dispatch(on_event);
        }
        if line[0] == b':' {
            return Ok(()); // comment (keep-alive)
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(c) => {
                let v = &line[c + 1..];
                (&line[..c], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"event" => {
                let name = String::from_utf8_lossy(value).into_owned();
                self.skip = !(self.wants)(&name);
                if self.skip {
                    self.data.clear();
                    self.has_data = false;
                }
                self.event = Some(name);
            }
            b"data" if !self.skip => {
                if self.data.len() + value.len() + 1 > self.max {
                    return Err(SseError::Overflow(self.max).into());
                }
                self.data.extend_from_slice(value);
                self.data.push(b'\n');
                self.has_data = true;
            }
            // `id`, `retry`, unknown fields, and data of skipped events.
            _ => {}
        }
        Ok(())
    }

    fn dispatch<E>(
        &mut self,
        on_event: &mut impl FnMut(&str, &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let name = self.event.take();
        let skip = std::mem::take(&mut self.skip);
        let has_data = std::mem::take(&mut self.has_data);
        let result = if has_data && !skip {
            let data = &self.data[..self.data.len() - 1]; // the last `\n` is not data
            on_event(name.as_deref().unwrap_or(DEFAULT_EVENT), data)
        } else {
            Ok(())
        };
        clear_or_release(&mut self.data);
        result
    }

    /// Sets the bound on one line and one event's data from here on (a budget that shrank).
    pub(super) fn set_max(&mut self, max: usize) {
        self.max = max;
    }

    /// The heap this parser holds.
    pub(super) fn held(&self) -> usize {
        self.line.capacity()
            + self.data.capacity()
            + self.event.as_ref().map_or(0, |e| e.capacity())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn not_deltas(name: &str) -> bool {
        !name.ends_with(".delta") && name != "content_block_delta"
    }

    fn parse_chunks(chunks: &[&[u8]], max: usize) -> Result<Vec<(String, String)>, SseError> {
        let mut p = SseParser::new(not_deltas, max);
        let mut out = Vec::new();
        for c in chunks {
            p.feed(c, |n: &str, d: &[u8]| {
                out.push((n.to_string(), String::from_utf8_lossy(d).into_owned()));
                Ok::<(), SseError>(())
            })?;
        }
        Ok(out)
    }

    fn parse(input: &str) -> Vec<(String, String)> {
        parse_chunks(&[input.as_bytes()], 1 << 20).unwrap()
    }

    fn ev(n: &str, d: &str) -> (String, String) {
        (n.to_string(), d.to_string())
    }

    #[test]
    fn framing_cases() {
        type Case<'a> = (&'a str, &'a str, Vec<(String, String)>);
        let cases: &[Case] = &[
            ("basic", "event: a\ndata: {\"x\":1}\n\n", vec![ev("a", "{\"x\":1}")]),
            ("no space after colon", "event:a\ndata:1\n\n", vec![ev("a", "1")]),
            ("only one space stripped", "data:  1\n\n", vec![ev("message", " 1")]),
            ("crlf", "event: a\r\ndata: 1\r\n\r\n", vec![ev("a", "1")]),
            ("bare cr", "event: a\rdata: 1\r\r", vec![ev("a", "1")]),
            ("multi-line data", "data: a\ndata: b\n\n", vec![ev("message", "a\nb")]),
            ("empty data line", "data\n\n", vec![ev("message", "")]),
            ("comment ignored", ": keep-alive\n\nevent: a\n: c\ndata: 1\n\n", vec![ev("a", "1")]),
            ("no data, no event", "event: a\n\n", vec![]),
            ("id and retry ignored", "id: 7\nretry: 10\ndata: 1\n\n", vec![ev("message", "1")]),
            ("incomplete event at end is dropped", "data: 1\n\ndata: 2\n", vec![ev("message", "1")]),
            ("bom stripped", "\u{feff}event: a\ndata: 1\n\n", vec![ev("a", "1")]),
            (
                "name resets between events",
                "event: a\ndata: 1\n\ndata: 2\n\n",
                vec![ev("a", "1"), ev("message", "2")],
            ),
            (
                "deltas skipped",
                "event: response.output_text.delta\ndata: {\"delta\":\"x\"}\n\nevent: b\ndata: 2\n\n",
                vec![ev("b", "2")],
            ),
            (
                "data before an unwanted name is dropped",
                "data: 1\nevent: content_block_delta\ndata: 2\n\n",
                vec![],
            ),
        ];
        for (name, input, want) in cases {
            assert_eq!(&parse(input), want, "{name}");
        }
    }

    #[test]
    fn chunk_boundaries_anywhere_give_the_same_events() {
        let input = "event: a\r\ndata: {\"t\":\"h\u{e9}llo \u{1f600}\"}\r\n\r\n: c\revent: x.delta\rdata: zzz\r\revent: b\ndata: 2\ndata: 3\n\n";
        let whole = parse(input);
        assert_eq!(whole.len(), 2);
        let bytes = input.as_bytes();
        for i in 0..bytes.len() {
            for j in i..bytes.len() {
                let got = parse_chunks(&[&bytes[..i], &bytes[i..j], &bytes[j..]], 1 << 20).unwrap();
                assert_eq!(got, whole, "split at {i},{j}");
            }
        }
    }

    #[test]
    fn skipped_data_is_never_buffered_even_past_the_limit() {
        let big = "x".repeat(10_000);
        let input = format!("event: content_block_delta\ndata: {big}\n\nevent: a\ndata: 1\n\n");
        assert_eq!(
            parse_chunks(&[input.as_bytes()], 100),
            Ok(vec![ev("a", "1")])
        );
    }

    #[test]
    fn oversized_lines_and_events_overflow() {
        let long_line = format!("data: {}\n\n", "x".repeat(200));
        assert_eq!(
            parse_chunks(&[long_line.as_bytes()], 100),
            Err(SseError::Overflow(100))
        );
        let many_lines = "data: 0123456789\n".repeat(20) + "\n";
        assert_eq!(
            parse_chunks(&[many_lines.as_bytes()], 100),
            Err(SseError::Overflow(100))
        );
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..512), cut in 0usize..512) {
            let cut = cut.min(data.len());
            let _ = parse_chunks(&[&data[..cut], &data[cut..]], 64);
        }

        #[test]
        fn any_split_matches_the_whole(events in prop::collection::vec(("[a-z.]{1,12}", "[ -~]{0,20}"), 0..8),
                                       eol in prop::sample::select(vec!["\n", "\r\n", "\r"]),
                                       cuts in prop::collection::vec(0usize..400, 0..6)) {
            let mut s = String::new();
            for (n, d) in &events {
                s.push_str(&format!("event: {n}{eol}data: {d}{eol}{eol}"));
            }
            let whole = parse(&s);
            let bytes = s.as_bytes();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(bytes.len())).collect();
            cuts.sort();
            let mut pieces = Vec::new();
            let mut last = 0;
            for c in cuts { pieces.push(&bytes[last..c]); last = c; }
            pieces.push(&bytes[last..]);
            prop_assert_eq!(parse_chunks(&pieces, 1 << 20).unwrap(), whole);
        }
    }
}
