//! HTTP/1.1 body framing, sans I/O: where a message body ends and which of its bytes are
//! payload, without rewriting anything.
//!
//! The relay's verbatim path passes an upstream's response body to the client
//! as it arrives and has to know three things: when the body has ended (so that both
//! connections can carry the next exchange), which bytes are the payload (what the client's
//! chunks carry, and the observer's copy), and a chunked body's trailers. A [`Framing`]
//! answers as bytes go by: [`Framing::scan`] takes whatever one read returned, says how many
//! of those bytes belong to the body and whether it has ended, and lists the payload's
//! ranges. Nothing is copied or buffered beyond one line and the trailer section.
//!
//! Chunked framing is checked as strictly as a client would check it (RFC 9112 §7.1): a
//! chunk-size line parsed by `httparse`, CRLF after every chunk's data, trailer lines up to
//! the empty line. A body that breaks the framing is an error, and the verbatim path cuts the
//! client's response short, which is what the client would have seen talking to the upstream
//! directly: a body that does not end cleanly.

use std::ops::Range;

/// A chunk-size line (with extensions) longer than this is refused.
const MAX_LINE: usize = 4 * 1024;
/// Trailer section bytes beyond this are refused.
const MAX_TRAILERS: usize = 16 * 1024;

/// How a body's end is found.
#[derive(Debug)]
pub enum Framing {
    /// No body (a `204`, a `304`, a request without `Content-Length`).
    Empty,
    /// `Content-Length`: this many bytes are left.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked(Chunked),
    /// Neither: the body ends when the connection does.
    UntilClose,
}

/// Where a chunked body's reader stands.
#[derive(Debug, Default)]
pub struct Chunked {
    state: State,
    /// The part of a line (chunk size, CRLF after data, trailer) seen so far.
    line: Vec<u8>,
    /// The trailer lines seen, as received.
    trailers: Vec<u8>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum State {
    #[default]
    Size,
    Data(u64),
    DataEnd,
    Trailer,
    Done,
}

/// Why a body's framing is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FramingError {
    /// A chunk-size line that does not parse, or is too long.
    ChunkSize,
    /// Chunk data not followed by CRLF.
    ChunkEnd,
    /// A trailer section that is too long.
    Trailers,
    /// A trailer line that is not a header field as a head's would be: not ended by CRLF, a
    /// folded line, or a name or value a header may not have. Passed on, the client would
    /// read a head it cannot parse (or, worse, one it parses differently from the relay).
    TrailerLine,
}

/// What one [`Framing::scan`] found.
#[derive(Debug, PartialEq, Eq)]
pub struct Scanned {
    /// Bytes of the input that belong to the body (all of them unless it ended).
    pub used: usize,
    /// The body ended within them.
    pub done: bool,
}

impl Framing {
    /// Reads `buf`, the next bytes of the body's connection: pushes the payload's ranges
    /// (offsets into `buf`) onto `payload` and says how far the body goes.
    pub fn scan(
        &mut self,
        buf: &[u8],
        payload: &mut Vec<Range<usize>>,
    ) -> Result<Scanned, FramingError> {
        match self {
            Framing::Empty => Ok(Scanned {
                used: 0,
                done: true,
            }),
            Framing::Length(left) => {
                let take = (*left).min(buf.len() as u64) as usize;
                if take > 0 {
                    payload.push(0..take);
                }
                *left -= take as u64;
                Ok(Scanned {
                    used: take,
                    done: *left == 0,
                })
            }
            Framing::UntilClose => {
                if !buf.is_empty() {
                    payload.push(0..buf.len());
                }
                Ok(Scanned {
                    used: buf.len(),
                    done: false,
                })
            }
            Framing::Chunked(c) => c.scan(buf, payload),
        }
    }

    /// The trailer section of a chunked body that has ended (its lines as received, without
    /// the empty line that ends it).
    pub fn trailers(&self) -> &[u8] {
        match self {
            Framing::Chunked(c) if c.state == State::Done => &c.trailers,
            _ => &[],
        }
    }

    /// Whether the body has ended (an `UntilClose` body never has: its end is the
    /// connection's).
    pub fn is_done(&self) -> bool {
        match self {
            Framing::Empty => true,
            Framing::Length(left) => *left == 0,
            Framing::Chunked(c) => c.state == State::Done,
            Framing::UntilClose => false,
        }
    }
}

impl Chunked {
    fn scan(
        &mut self,
        buf: &[u8],
        payload: &mut Vec<Range<usize>>,
    ) -> Result<Scanned, FramingError> {
        let mut at = 0;
        while at < buf.len() && self.state != State::Done {
            match self.state {
                State::Data(left) => {
                    let take = left.min((buf.len() - at) as u64) as usize;
                    payload.push(at..at + take);
                    at += take;
                    self.state = if left == take as u64 {
                        State::DataEnd
                    } else {
                        State::Data(left - take as u64)
                    };
                }
                State::Size | State::DataEnd | State::Trailer => {
                    // A line: up to and including its LF.
                    let rest = &buf[at..];
                    let (piece, complete) = match rest.iter().position(|&b| b == b'\n') {
                        Some(i) => (&rest[..=i], true),
                        None => (rest, false),
                    };
                    at += piece.len();
                    self.line.extend_from_slice(piece);
                    if !complete {
                        self.check_partial()?;
                        continue;
                    }
                    self.end_line()?;
                }
                State::Done => {}
            }
        }
        Ok(Scanned {
            used: at,
            done: self.state == State::Done,
        })
    }

    /// A line not yet complete may still become a valid one.
    fn check_partial(&self) -> Result<(), FramingError> {
        match self.state {
            State::Size if self.line.len() > MAX_LINE => Err(FramingError::ChunkSize),
            State::DataEnd if self.line != b"\r"[..self.line.len().min(1)] => {
                Err(FramingError::ChunkEnd)
            }
            State::Trailer if self.trailers.len() + self.line.len() > MAX_TRAILERS => {
                Err(FramingError::Trailers)
            }
            _ => Ok(()),
        }
    }

    /// A complete line (ending in LF) is in `self.line`.
    fn end_line(&mut self) -> Result<(), FramingError> {
        let line = std::mem::take(&mut self.line);
        self.state = match self.state {
            // The length is checked here too: a whole line can arrive in one read.
            State::Size if line.len() > MAX_LINE => return Err(FramingError::ChunkSize),
            State::Size => match httparse::parse_chunk_size(&line) {
                Ok(httparse::Status::Complete((used, size))) if used == line.len() => {
                    if size == 0 {
                        State::Trailer
                    } else {
                        State::Data(size)
                    }
                }
                _ => return Err(FramingError::ChunkSize),
            },
            State::DataEnd if line == b"\r\n" => State::Size,
            State::DataEnd => return Err(FramingError::ChunkEnd),
            State::Trailer if line == b"\r\n" => State::Done,
            State::Trailer => {
                if self.trailers.len() + line.len() > MAX_TRAILERS {
                    return Err(FramingError::Trailers);
                }
                if !is_field_line(&line) {
                    return Err(FramingError::TrailerLine);
                }
                self.trailers.extend_from_slice(&line);
                State::Trailer
            }
            s => s,
        };
        // Keep the allocation for the next line.
        self.line = line;
        self.line.clear();
        Ok(())
    }
}

/// Whether `line` (ending in LF) is one header field line, checked as `httparse` checks a
/// head's (a token name, a colon, a value of visible characters, spaces and tabs), and ended
/// by CRLF: `httparse` also takes a bare LF, which is not the relay's to pass on, since the
/// trailer section goes to the client as received.
fn is_field_line(line: &[u8]) -> bool {
    let Some(body) = line.strip_suffix(b"\r\n") else {
        return false;
    };
    if body.contains(&b'\r') || body.contains(&b'\n') {
        return false;
    }
    // A field line and the end of a section: `httparse` parses exactly one field from it.
    let mut section = Vec::with_capacity(line.len() + 2);
    section.extend_from_slice(line);
    section.extend_from_slice(b"\r\n");
    let mut fields = [httparse::EMPTY_HEADER; 1];
    matches!(
        httparse::parse_headers(&section, &mut fields),
        Ok(httparse::Status::Complete((used, parsed))) if used == section.len() && parsed.len() == 1
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `wire` cut at `cuts`; returns the payload, the bytes used and whether it ended.
    fn feed(
        framing: &mut Framing,
        wire: &[u8],
        cuts: &[usize],
    ) -> Result<(Vec<u8>, usize, bool), FramingError> {
        let mut bounds = vec![0];
        bounds.extend(cuts.iter().copied().filter(|&c| c > 0 && c < wire.len()));
        bounds.push(wire.len());
        let (mut out, mut used) = (Vec::new(), 0);
        for w in bounds.windows(2) {
            let piece = &wire[w[0]..w[1]];
            let mut ranges = Vec::new();
            let s = framing.scan(piece, &mut ranges)?;
            for r in ranges {
                out.extend_from_slice(&piece[r]);
            }
            used += s.used;
            if s.done {
                return Ok((out, used, true));
            }
        }
        Ok((out, used, false))
    }

    const WIRE: &[u8] =
        b"5\r\nhello\r\n1;ext=\"a b\"\r\n \r\nA\r\n0123456789\r\n0\r\nx-trailer: 1\r\n\r\nNEXT";

    #[test]
    fn a_chunked_body_cut_anywhere_gives_its_payload_and_ends_before_the_next_bytes() {
        let end = WIRE.len() - 4;
        for a in 0..WIRE.len() {
            for b in a..WIRE.len() {
                let mut f = Framing::Chunked(Chunked::default());
                let (payload, used, done) = feed(&mut f, WIRE, &[a, b]).unwrap();
                assert_eq!(payload, b"hello 0123456789", "cuts {a} {b}");
                assert_eq!((used, done), (end, true), "cuts {a} {b}");
                assert!(f.is_done());
                assert_eq!(f.trailers(), b"x-trailer: 1\r\n");
            }
        }
    }

    #[test]
    fn an_unfinished_chunked_body_is_not_done() {
        let mut f = Framing::Chunked(Chunked::default());
        let (payload, used, done) = feed(&mut f, b"5\r\nhel", &[]).unwrap();
        assert_eq!((payload.as_slice(), used, done), (&b"hel"[..], 6, false));
        assert!(!f.is_done());
    }

    /// Hostile trailer sections: each is refused, cut anywhere, before its end is reached
    /// (so nothing of it is ever passed on); the well-formed one beside them passes.
    #[test]
    fn a_trailer_line_a_head_would_refuse_is_refused() {
        for wire in [
            &b"0\r\nx-t: 1\n\r\n"[..],
            b"0\r\nx-t: 1\r\n\n",
            b"0\r\nx-t: 1\r\n folded\r\n\r\n",
            b"0\r\nno-colon\r\n\r\n",
            b"0\r\nx-t : 1\r\n\r\n",
            b"0\r\nx-t: a\rb\r\n\r\n",
            b"0\r\nx-t: a\0b\r\n\r\n",
            b"0\r\nx(t): 1\r\n\r\n",
            b"0\r\n: 1\r\n\r\n",
        ] {
            for cut in 0..wire.len() {
                let mut f = Framing::Chunked(Chunked::default());
                assert_eq!(
                    feed(&mut f, wire, &[cut]).unwrap_err(),
                    FramingError::TrailerLine,
                    "{:?} cut {cut}",
                    String::from_utf8_lossy(wire)
                );
            }
        }
        let mut f = Framing::Chunked(Chunked::default());
        let (_, _, done) = feed(&mut f, b"0\r\nx-t: a\tb c\r\nY:\r\n\r\n", &[]).unwrap();
        assert!(done);
        assert_eq!(f.trailers(), b"x-t: a\tb c\r\nY:\r\n");
    }

    #[test]
    fn broken_chunk_framing_is_refused_at_the_byte_that_breaks_it() {
        for (wire, err) in [
            (&b"zz\r\nhello\r\n"[..], FramingError::ChunkSize),
            (b"5\r\nhelloX\r\n", FramingError::ChunkEnd),
            (b"5\r\nhello\rX", FramingError::ChunkEnd),
            (b"5\nhello\r\n", FramingError::ChunkSize),
        ] {
            for cut in 0..wire.len() {
                let mut f = Framing::Chunked(Chunked::default());
                assert_eq!(
                    feed(&mut f, wire, &[cut]).unwrap_err(),
                    err,
                    "{wire:?} cut {cut}"
                );
            }
        }
        let mut f = Framing::Chunked(Chunked::default());
        let long = vec![b'1'; MAX_LINE + 10];
        assert_eq!(
            feed(&mut f, &long, &[]).unwrap_err(),
            FramingError::ChunkSize
        );
        let mut f = Framing::Chunked(Chunked::default());
        let mut trailers = b"0\r\n".to_vec();
        trailers
            .extend(std::iter::repeat_n(b"a: b\r\n".as_slice(), MAX_TRAILERS / 6 + 2).flatten());
        assert_eq!(
            feed(&mut f, &trailers, &[]).unwrap_err(),
            FramingError::Trailers
        );
    }

    #[test]
    fn a_length_body_ends_at_its_length_and_an_empty_one_at_once() {
        let mut f = Framing::Length(5);
        let (payload, used, done) = feed(&mut f, b"helloNEXT", &[2]).unwrap();
        assert_eq!((payload.as_slice(), used, done), (&b"hello"[..], 5, true));
        let mut f = Framing::Empty;
        assert_eq!(feed(&mut f, b"NEXT", &[]).unwrap(), (Vec::new(), 0, true));
        let mut f = Framing::UntilClose;
        assert_eq!(
            feed(&mut f, b"all of it", &[3]).unwrap(),
            (b"all of it".to_vec(), 9, false)
        );
    }

    #[test]
    fn a_chunk_size_line_too_long_is_refused_even_when_it_arrives_in_one_read() {
        let mut wire = b"1;".to_vec();
        wire.extend(std::iter::repeat_n(b'a', MAX_LINE));
        wire.extend_from_slice(b"\r\nx\r\n0\r\n\r\n");
        for cuts in [&[][..], &[MAX_LINE / 2]] {
            let mut f = Framing::Chunked(Chunked::default());
            assert_eq!(
                feed(&mut f, &wire, cuts).unwrap_err(),
                FramingError::ChunkSize,
                "cuts {cuts:?}"
            );
        }
    }

    /// What a whole scan came to: the payload, the bytes used, the end and the trailers, or
    /// the error.
    type Outcome = Result<(Vec<u8>, usize, bool, Vec<u8>), FramingError>;

    fn outcome(wire: &[u8], cuts: &[usize]) -> Outcome {
        let mut f = Framing::Chunked(Chunked::default());
        let (payload, used, done) = feed(&mut f, wire, cuts)?;
        Ok((payload, used, done, f.trailers().to_vec()))
    }

    /// A chunked encoding of `payload` in chunks of `sizes` (cycled, each at least 1), each
    /// size line with an extension when `ext`, then `trailers` and the empty line.
    fn chunked(payload: &[u8], sizes: &[usize], ext: bool, trailers: &[u8]) -> Vec<u8> {
        let mut wire = Vec::new();
        let mut rest = payload;
        let mut size = sizes.iter().cycle();
        while !rest.is_empty() {
            let n = size.next().copied().unwrap_or(1).clamp(1, rest.len());
            let ext = if ext { ";e=\"1 2\"" } else { "" };
            wire.extend_from_slice(format!("{n:X}{ext}\r\n").as_bytes());
            wire.extend_from_slice(&rest[..n]);
            wire.extend_from_slice(b"\r\n");
            rest = &rest[n..];
        }
        wire.extend_from_slice(b"0\r\n");
        wire.extend_from_slice(trailers);
        wire.extend_from_slice(b"\r\n");
        wire
    }

    proptest::proptest! {
        /// Whatever the upstream sends, how its bytes were cut into reads changes nothing:
        /// the same payload, the same end, the same trailers, or the same refusal.
        #[test]
        fn any_bytes_give_the_same_outcome_however_they_are_cut(
            wire in proptest::collection::vec(
                proptest::sample::select(b"0123456789aAfF\r\n; =\"x\t".to_vec()),
                0..160,
            ),
            cuts in proptest::collection::vec(0usize..160, 0..8),
        ) {
            let mut cuts = cuts;
            cuts.sort_unstable();
            proptest::prop_assert_eq!(outcome(&wire, &cuts), outcome(&wire, &[]));
        }

        /// The same near the chunk-size line's limit: accepted or refused by its length
        /// alone, not by how it arrived.
        #[test]
        fn a_chunk_size_line_near_the_limit_gets_the_same_outcome_however_it_is_cut(
            ext in (MAX_LINE - 8)..(MAX_LINE + 8),
            cuts in proptest::collection::vec(0usize..(MAX_LINE + 32), 0..4),
        ) {
            let mut wire = b"1;".to_vec();
            wire.extend(std::iter::repeat_n(b'a', ext));
            wire.extend_from_slice(b"\r\nx\r\n0\r\n\r\n");
            let mut cuts = cuts;
            cuts.sort_unstable();
            let whole = outcome(&wire, &[]);
            proptest::prop_assert_eq!(whole.is_ok(), ext + 4 <= MAX_LINE);
            proptest::prop_assert_eq!(outcome(&wire, &cuts), whole);
        }

        /// A valid chunked body, however chunked and cut, gives back exactly its payload and
        /// trailers and ends where it ends, before the next message's bytes.
        #[test]
        fn a_valid_chunked_body_gives_its_payload_however_it_is_chunked_and_cut(
            payload in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
            sizes in proptest::collection::vec(1usize..40, 1..6),
            ext in proptest::bool::ANY,
            trailer_count in 0usize..3,
            cuts in proptest::collection::vec(0usize..400, 0..8),
        ) {
            let trailers: Vec<u8> =
                (0..trailer_count).flat_map(|i| format!("x-t{i}: v\r\n").into_bytes()).collect();
            let mut wire = chunked(&payload, &sizes, ext, &trailers);
            let end = wire.len();
            wire.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
            let mut cuts = cuts;
            cuts.sort_unstable();
            proptest::prop_assert_eq!(outcome(&wire, &cuts), Ok((payload, end, true, trailers)));
        }
    }
}
