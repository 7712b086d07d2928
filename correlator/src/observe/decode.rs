//! Streaming decoders for HTTP `Content-Encoding` (RFC 9110 §8.4.1), applied to the observer's
//! *copy* of a body: the relay forwards the encoded bytes untouched.
//!
//! Codex compresses its request bodies with zstd; Claude Code advertises gzip, deflate, br and
//! zstd for responses. Every decoder writes into a sink with an output limit, so a small
//! compressed input can never make an observer allocate more than the caller allowed (a
//! decompression bomb ends in [`DecodeError::Overflow`], not in an out-of-memory kill).

use std::io::{self, Write};

use thiserror::Error;

use super::lost::Lost;

#[derive(Debug, Error, PartialEq, Eq)]
pub(crate) enum DecodeError {
    /// A coding this observer cannot undo (or a stack of several codings).
    #[error("unsupported content-encoding")]
    Unsupported,
    /// The encoded bytes are not a valid stream of their coding.
    #[error("corrupt {0} stream")]
    Corrupt(&'static str),
    /// Decoding would produce more than the caller's limit.
    #[error("decoded body exceeds the limit of {0} bytes")]
    Overflow(usize),
}

impl DecodeError {
    /// The fixed `observation_lost` reason word for this failure.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            DecodeError::Overflow(_) => Lost::OVERFLOW.0,
            DecodeError::Unsupported | DecodeError::Corrupt(_) => Lost::DECODE.0,
        }
    }
}

/// Where decoded bytes go: a buffer that refuses to grow past `limit`.
#[derive(Default)]
struct Sink {
    buf: Vec<u8>,
    limit: usize,
    overflowed: bool,
}

impl Write for Sink {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.buf.len().saturating_add(data.len()) > self.limit {
            self.overflowed = true;
            return Err(io::Error::other("decoded output over limit"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

enum Inner {
    Identity,
    Gzip(flate2::write::MultiGzDecoder<Sink>),
    /// `deflate` before its first two bytes arrived: zlib or raw is decided on them.
    DeflatePending(Vec<u8>),
    Zlib(flate2::write::ZlibDecoder<Sink>),
    RawDeflate(flate2::write::DeflateDecoder<Sink>),
    Brotli(Box<brotli::DecompressorWriter<Sink>>),
    Zstd(zstd::stream::write::Decoder<'static, Sink>),
    /// A decoder that failed: it accepts nothing more.
    Failed,
}

/// One body's decoder. Feed it with [`Decoder::push`], end it with [`Decoder::finish`].
pub(super) struct Decoder {
    inner: Inner,
    /// Bytes decoded so far (a decoder's window fills with them, up to its size).
    produced: usize,
}

/// The largest zstd window accepted: 8 MiB, the limit RFC 9659 sets for zstd as an HTTP
/// content coding. Larger windows are refused (`decode`), so a frame cannot make a decoder
/// allocate up to zstd's own default of 128 MiB.
const ZSTD_WINDOW_LOG_MAX: u32 = 23;

impl Decoder {
    /// A decoder for a `Content-Encoding` value (`None` or empty: identity). Names are matched
    /// case-insensitively; `x-gzip` is gzip. Several codings stacked (`gzip, br`) are refused.
    pub(super) fn new(content_encoding: Option<&str>) -> Result<Decoder, DecodeError> {
        let codings: Vec<String> = content_encoding
            .unwrap_or("")
            .split(',')
            .map(|c| c.trim().to_ascii_lowercase())
            .filter(|c| !c.is_empty() && c != "identity")
            .collect();
        let inner = match codings.as_slice() {
            [] => Inner::Identity,
            [one] => match one.as_str() {
                "gzip" | "x-gzip" => {
                    Inner::Gzip(flate2::write::MultiGzDecoder::new(Sink::default()))
                }
                "deflate" => Inner::DeflatePending(Vec::new()),
                "br" => Inner::Brotli(Box::new(brotli::DecompressorWriter::new(
                    Sink::default(),
                    4096,
                ))),
                "zstd" => {
                    let mut d = zstd::stream::write::Decoder::new(Sink::default())
                        .map_err(|_| DecodeError::Corrupt("zstd"))?;
                    d.window_log_max(ZSTD_WINDOW_LOG_MAX)
                        .map_err(|_| DecodeError::Corrupt("zstd"))?;
                    Inner::Zstd(d)
                }
                _ => return Err(DecodeError::Unsupported),
            },
            _ => return Err(DecodeError::Unsupported),
        };
        Ok(Decoder { inner, produced: 0 })
    }

    /// Whether this decoder passes bytes through as they are.
    pub(super) fn is_identity(&self) -> bool {
        matches!(self.inner, Inner::Identity)
    }

    /// An estimate of the heap this decoder holds: its fixed state and its window, which
    /// fills with what it decoded up to the window's size. Output buffers are the caller's.
    pub(super) fn held(&self) -> usize {
        const KIB: usize = 1024;
        let (fixed, window) = match &self.inner {
            Inner::Identity | Inner::Failed => (0, 0),
            Inner::DeflatePending(head) => (head.capacity(), 0),
            // inflate state and flate2's 32 KiB write buffer; a 32 KiB window.
            Inner::Gzip(_) | Inner::Zlib(_) | Inner::RawDeflate(_) => (48 * KIB, 32 * KIB),
            // Up to a 16 MiB ring buffer (lgwin 24).
            Inner::Brotli(_) => (16 * KIB, 16 << 20),
            // Its in and out buffers (128 KiB blocks) and the window.
            Inner::Zstd(_) => (256 * KIB, 1 << ZSTD_WINDOW_LOG_MAX),
        };
        fixed + self.produced.min(window)
    }

    /// Decodes `input`, appending to `out`; fails rather than let `out` grow past `limit`.
    /// After an error the decoder is spent: every later call fails too.
    pub(super) fn push(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        limit: usize,
    ) -> Result<(), DecodeError> {
        if let Inner::DeflatePending(head) = &mut self.inner {
            head.extend_from_slice(input);
            if head.len() < 2 {
                return Ok(());
            }
            let head = std::mem::take(head);
            self.inner = if looks_like_zlib(head[0], head[1]) {
                Inner::Zlib(flate2::write::ZlibDecoder::new(Sink::default()))
            } else {
                // Some servers send raw deflate under `deflate` (RFC 9110 says zlib).
                Inner::RawDeflate(flate2::write::DeflateDecoder::new(Sink::default()))
            };
            return self.run(&head, out, limit, false);
        }
        self.run(input, out, limit, false)
    }

    /// The body ended: drains what the decoder still holds. A truncated compressed stream is
    /// not an error here (the body may have been cut; whatever decoded stays valid).
    pub(super) fn finish(&mut self, out: &mut Vec<u8>, limit: usize) -> Result<(), DecodeError> {
        if let Inner::DeflatePending(head) = &mut self.inner {
            if head.is_empty() {
                return Ok(());
            }
            // One byte cannot be a complete deflate stream of any content.
            self.inner = Inner::Failed;
            return Err(DecodeError::Corrupt("deflate"));
        }
        self.run(&[], out, limit, true)
    }

    fn run(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        limit: usize,
        finish: bool,
    ) -> Result<(), DecodeError> {
        let name = match &self.inner {
            Inner::Identity => {
                if out.len().saturating_add(input.len()) > limit {
                    self.inner = Inner::Failed;
                    return Err(DecodeError::Overflow(limit));
                }
                out.extend_from_slice(input);
                return Ok(());
            }
            Inner::Failed => return Err(DecodeError::Corrupt("failed")),
            Inner::DeflatePending(_) => return Ok(()),
            Inner::Gzip(_) => "gzip",
            Inner::Zlib(_) | Inner::RawDeflate(_) => "deflate",
            Inner::Brotli(_) => "br",
            Inner::Zstd(_) => "zstd",
        };
        // One step of a flate2 write-decoder: feed, then finish at the end (a truncated tail is
        // not an error) or flush what is decoded so far.
        macro_rules! flate_step {
            ($d:expr) => {
                with_sink(
                    $d,
                    |d| d.get_mut(),
                    out,
                    limit,
                    |d| {
                        d.write_all(input)?;
                        if finish {
                            d.try_finish().or_else(ignore_truncation)
                        } else {
                            d.flush()
                        }
                    },
                )
            };
        }
        // The sink takes `out` for the duration of the call, so decoded bytes land in place.
        let before = out.len();
        let r = match &mut self.inner {
            // The three flate2 decoders share no trait for `try_finish`, hence the macro.
            Inner::Gzip(d) => flate_step!(d),
            Inner::Zlib(d) => flate_step!(d),
            Inner::RawDeflate(d) => flate_step!(d),
            // Brotli and zstd write their output as they go; `flush` empties their buffers.
            Inner::Brotli(d) => with_sink(
                d.as_mut(),
                |d| d.get_mut(),
                out,
                limit,
                |d| {
                    d.write_all(input)?;
                    d.flush()
                },
            ),
            Inner::Zstd(d) => with_sink(
                d,
                |d| d.get_mut(),
                out,
                limit,
                |d| {
                    d.write_all(input)?;
                    d.flush()
                },
            ),
            Inner::Identity | Inner::DeflatePending(_) | Inner::Failed => Ok(()),
        };
        self.produced = self
            .produced
            .saturating_add(out.len().saturating_sub(before));
        r.map_err(|overflowed| {
            self.inner = Inner::Failed;
            if overflowed {
                DecodeError::Overflow(limit)
            } else {
                DecodeError::Corrupt(name)
            }
        })
    }
}

/// Runs `op` on a decoder whose sink temporarily owns `out`; `Err(true)` when the failure was
/// the output limit, `Err(false)` when the input was corrupt.
fn with_sink<D>(
    dec: &mut D,
    sink: impl Fn(&mut D) -> &mut Sink,
    out: &mut Vec<u8>,
    limit: usize,
    op: impl FnOnce(&mut D) -> io::Result<()>,
) -> Result<(), bool> {
    {
        let s = sink(dec);
        std::mem::swap(&mut s.buf, out);
        s.limit = limit;
        s.overflowed = false;
    }
    let r = op(dec);
    let s = sink(dec);
    std::mem::swap(&mut s.buf, out);
    r.map_err(|_| s.overflowed)
}

fn ignore_truncation(e: io::Error) -> io::Result<()> {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        Ok(())
    } else {
        Err(e)
    }
}

/// RFC 1950 header check: method 8 (deflate), window ≤ 32 KiB, and the check bits.
fn looks_like_zlib(cmf: u8, flg: u8) -> bool {
    cmf & 0x0f == 8 && cmf >> 4 <= 7 && (u16::from(cmf) << 8 | u16::from(flg)) % 31 == 0
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    const LIMIT: usize = 1 << 20;

    fn sample() -> Vec<u8> {
        let mut v = Vec::new();
        for i in 0..2000 {
            v.extend_from_slice(format!("data: {{\"n\":{i},\"t\":\"héllo\"}}\n\n").as_bytes());
        }
        v
    }

    pub(crate) fn encode(coding: &str, plain: &[u8]) -> Vec<u8> {
        use flate2::Compression;
        match coding {
            "gzip" => {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), Compression::default());
                e.write_all(plain).unwrap();
                e.finish().unwrap()
            }
            "deflate" => {
                let mut e = flate2::write::ZlibEncoder::new(Vec::new(), Compression::default());
                e.write_all(plain).unwrap();
                e.finish().unwrap()
            }
            "raw-deflate" => {
                let mut e = flate2::write::DeflateEncoder::new(Vec::new(), Compression::default());
                e.write_all(plain).unwrap();
                e.finish().unwrap()
            }
            "br" => {
                let mut out = Vec::new();
                {
                    let mut w = brotli::CompressorWriter::new(&mut out, 4096, 5, 22);
                    w.write_all(plain).unwrap();
                }
                out
            }
            "zstd" => zstd::stream::encode_all(plain, 3).unwrap(),
            "identity" => plain.to_vec(),
            other => panic!("test encoder for {other}"),
        }
    }

    fn decode_in_chunks(
        coding: &str,
        encoded: &[u8],
        chunk: usize,
    ) -> Result<Vec<u8>, DecodeError> {
        let header = if coding == "raw-deflate" {
            "deflate"
        } else {
            coding
        };
        let mut d = Decoder::new(Some(header))?;
        let mut out = Vec::new();
        for c in encoded.chunks(chunk.max(1)) {
            d.push(c, &mut out, LIMIT)?;
        }
        d.finish(&mut out, LIMIT)?;
        Ok(out)
    }

    #[test]
    fn every_coding_round_trips_whole_and_in_small_chunks() {
        let plain = sample();
        for coding in ["gzip", "deflate", "raw-deflate", "br", "zstd", "identity"] {
            let enc = encode(coding, &plain);
            for chunk in [1, 7, 4096, enc.len()] {
                assert_eq!(
                    decode_in_chunks(coding, &enc, chunk).as_deref(),
                    Ok(&plain[..]),
                    "{coding} in chunks of {chunk}"
                );
            }
        }
    }

    #[test]
    fn decoded_bytes_are_available_before_the_body_ends() {
        // SSE must be observed as it streams: a flushed gzip member yields its bytes at once.
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(b"event: ping\n\n").unwrap();
        e.flush().unwrap();
        let partial = e.get_ref().clone();
        let mut d = Decoder::new(Some("gzip")).unwrap();
        let mut out = Vec::new();
        d.push(&partial, &mut out, LIMIT).unwrap();
        assert_eq!(out, b"event: ping\n\n");
    }

    #[test]
    fn names_are_case_insensitive_and_identity_is_a_no_op() {
        for name in [None, Some(""), Some("identity"), Some(" Identity ")] {
            let mut d = Decoder::new(name).unwrap();
            let mut out = Vec::new();
            d.push(b"abc", &mut out, LIMIT).unwrap();
            assert_eq!(out, b"abc");
        }
        assert!(Decoder::new(Some("GZIP")).is_ok());
        assert!(Decoder::new(Some("x-gzip")).is_ok());
    }

    #[test]
    fn unknown_or_stacked_codings_are_refused() {
        for name in ["compress", "snappy", "gzip, br"] {
            let err = Decoder::new(Some(name)).err();
            assert_eq!(err, Some(DecodeError::Unsupported), "{name}");
            assert_eq!(DecodeError::Unsupported.reason(), "decode");
        }
    }

    #[test]
    fn a_decompression_bomb_stops_at_the_limit() {
        let zeros = vec![0u8; 2 << 20];
        for coding in ["gzip", "deflate", "br", "zstd"] {
            let enc = encode(coding, &zeros);
            let mut d = Decoder::new(Some(coding)).unwrap();
            let mut out = Vec::new();
            let err = d.push(&enc, &mut out, LIMIT).unwrap_err();
            assert_eq!(err, DecodeError::Overflow(LIMIT), "{coding}");
            assert_eq!(err.reason(), "overflow");
            assert!(out.len() <= LIMIT, "{coding}: {} bytes", out.len());
            // Spent: nothing more comes out of it.
            assert!(d.push(b"x", &mut out, LIMIT).is_err());
        }
    }

    #[test]
    fn corrupt_input_is_a_decode_error() {
        for coding in ["gzip", "br", "zstd", "deflate"] {
            let r = decode_in_chunks(coding, b"\x1f\x8b\x08\x00garbage that is not compressed", 5);
            // Raw deflate may accept some garbage as stored/fixed blocks; all others must fail.
            if coding != "deflate" {
                assert!(matches!(r, Err(DecodeError::Corrupt(_))), "{coding}: {r:?}");
            }
        }
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(coding in prop::sample::select(vec!["gzip", "deflate", "br", "zstd", "identity"]),
                                     data in prop::collection::vec(any::<u8>(), 0..600),
                                     chunk in 1usize..64) {
            let mut d = Decoder::new(Some(coding)).unwrap();
            let mut out = Vec::new();
            for c in data.chunks(chunk) {
                if d.push(c, &mut out, 4096).is_err() { break; }
            }
            let _ = d.finish(&mut out, 4096);
            prop_assert!(out.len() <= 4096);
        }
    }
}
