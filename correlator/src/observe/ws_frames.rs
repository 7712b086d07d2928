//! RFC 6455 frame decoding over a byte copy of one direction of a WebSocket, with
//! permessage-deflate (RFC 7692).
//!
//! The relay splices raw bytes, extensions included, so the observer must follow the framing
//! itself: 7/16/64-bit lengths, masking (client frames are masked, server frames are not; either
//! is accepted), fragmented messages with control frames between fragments, and compressed
//! messages (RSV1 on a message's first frame; raw DEFLATE; the `00 00 ff ff` tail the sender
//! removed is appended back; the sliding window carries over to the next message unless
//! `*_no_context_takeover` was negotiated). A decompressor with a 32 KiB window reads any
//! `*_max_window_bits`. Compressed messages are inflated even when their content is not wanted
//! (binary), because the next message may refer back to them.
//!
//! Only a masked payload is copied before it is read (to unmask it). An unmasked one is read
//! where it lies in the bytes fed, and a whole uncompressed text message in one frame (a
//! server's usual message) reaches `on_message` without ever being copied.

use flate2::{Decompress, FlushDecompress, Status};
use thiserror::Error;

use super::lost::Lost;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum FrameError {
    /// The bytes break RFC 6455 / RFC 7692 (the message names the rule, never the payload).
    #[error("bad WebSocket frame: {0}")]
    Frame(&'static str),
    /// A compressed message does not inflate.
    #[error("permessage-deflate data does not inflate")]
    Inflate,
    /// A message larger than the bound, after inflating.
    #[error("WebSocket message exceeds the limit of {0} bytes")]
    Overflow(usize),
}

impl FrameError {
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            FrameError::Frame(_) => Lost::FRAME.0,
            FrameError::Inflate => Lost::DECODE.0,
            FrameError::Overflow(_) => Lost::OVERFLOW.0,
        }
    }
}

/// The negotiated permessage-deflate parameters (from the server's 101 response).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PerMessageDeflate {
    pub server_no_context_takeover: bool,
    pub client_no_context_takeover: bool,
}

/// Reads a `Sec-WebSocket-Extensions` value as accepted by the server: `Ok(None)` without
/// extensions, the parameters for permessage-deflate, and an error for any other extension
/// (its use of the RSV bits could not be followed).
pub fn negotiated(extensions: Option<&str>) -> Result<Option<PerMessageDeflate>, FrameError> {
    let mut found = None;
    for ext in extensions.unwrap_or("").split(',') {
        let mut parts = ext.split(';').map(str::trim);
        let name = parts.next().unwrap_or("");
        if name.is_empty() {
            continue;
        }
        if !name.eq_ignore_ascii_case("permessage-deflate") || found.is_some() {
            return Err(FrameError::Frame("unsupported extension negotiated"));
        }
        let mut p = PerMessageDeflate::default();
        for param in parts {
            let key = param.split('=').next().unwrap_or("").trim();
            if key.eq_ignore_ascii_case("server_no_context_takeover") {
                p.server_no_context_takeover = true;
            } else if key.eq_ignore_ascii_case("client_no_context_takeover") {
                p.client_no_context_takeover = true;
            }
            // *_max_window_bits: a 32 KiB window decoder reads any smaller window.
        }
        found = Some(p);
    }
    Ok(found)
}

/// A complete message (or control frame) seen in one direction.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Message<'a> {
    /// A text message's bytes (inflated, unvalidated UTF-8).
    Text(&'a [u8]),
    /// A binary message (its content is not kept).
    Binary,
    Close,
    Ping,
    Pong,
}

enum State {
    Header,
    Payload {
        remaining: u64,
        mask: Option<[u8; 4]>,
        mask_pos: usize,
        opcode: u8,
        fin: bool,
    },
}

struct Assembly {
    text: bool,
    compressed: bool,
    data: Vec<u8>,
}

/// Decodes one direction's frames.
pub(super) struct FrameDecoder {
    header: [u8; 14],
    header_len: usize,
    state: State,
    /// The raw-DEFLATE decompressor when permessage-deflate is on, and whether to reset it
    /// after each message (no context takeover for this direction's sender).
    inflater: Option<(Decompress, bool)>,
    /// Inflate output passes through this buffer (allocated once, when deflate is on).
    inflate_buf: Box<[u8]>,
    msg: Option<Assembly>,
    /// The previous message's buffer, kept for the next one.
    spare: Vec<u8>,
    control: Vec<u8>,
    scratch: Vec<u8>,
    closed: bool,
    max_message: usize,
}

impl FrameDecoder {
    /// `deflate`: `Some(no_context_takeover)` when permessage-deflate applies to this sender.
    pub(super) fn new(deflate: Option<bool>, max_message: usize) -> FrameDecoder {
        FrameDecoder {
            header: [0; 14],
            header_len: 0,
            state: State::Header,
            inflater: deflate.map(|reset| (Decompress::new(false), reset)),
            inflate_buf: match deflate {
                Some(_) => vec![0; 32 * 1024].into_boxed_slice(),
                None => Box::default(),
            },
            msg: None,
            spare: Vec::new(),
            control: Vec::new(),
            scratch: Vec::new(),
            closed: false,
            max_message,
        }
    }

    /// Sets the bound on one message from here on (a budget that shrank).
    pub(super) fn set_max(&mut self, max_message: usize) {
        self.max_message = max_message;
    }

    /// An estimate of the heap this decoder holds (the inflater's state included).
    pub(super) fn held(&self) -> usize {
        let inflater = if self.inflater.is_some() {
            48 * 1024
        } else {
            0
        };
        inflater
            + self.inflate_buf.len()
            + self.msg.as_ref().map_or(0, |m| m.data.capacity())
            + self.spare.capacity()
            + self.control.capacity()
            + self.scratch.capacity()
    }

    /// The client→server decoder for the negotiated parameters.
    pub(super) fn client(pmd: Option<PerMessageDeflate>, max_message: usize) -> FrameDecoder {
        Self::new(pmd.map(|p| p.client_no_context_takeover), max_message)
    }

    /// The server→client decoder for the negotiated parameters.
    pub(super) fn server(pmd: Option<PerMessageDeflate>, max_message: usize) -> FrameDecoder {
        Self::new(pmd.map(|p| p.server_no_context_takeover), max_message)
    }

    /// Feeds bytes; calls `on_message` for every complete message and control frame. Bytes
    /// after a close frame are ignored (nothing may follow it).
    pub(super) fn feed<E: From<FrameError>>(
        &mut self,
        mut bytes: &[u8],
        mut on_message: impl FnMut(Message<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        while !bytes.is_empty() && !self.closed {
            match self.state {
                State::Header => {
                    let used = self.read_header(bytes)?;
                    bytes = &bytes[used..];
                    // A frame with an empty payload is complete as soon as its header is.
                    if let State::Payload { remaining: 0, .. } = self.state {
                        self.end_frame(&mut on_message)?;
                    }
                }
                State::Payload {
                    ref mut remaining,
                    mask,
                    ref mut mask_pos,
                    opcode,
                    fin,
                } => {
                    let n = (*remaining).min(bytes.len() as u64) as usize;
                    let whole = n as u64 == *remaining;
                    *remaining -= n as u64;
                    let pos = std::mem::replace(mask_pos, (*mask_pos + n) & 3);
                    let (seg, rest) = bytes.split_at(n);
                    bytes = rest;
                    // The server's frames come unmasked: their payload is read where it lies,
                    // and a whole uncompressed text message in one frame is handed on without
                    // a copy (most of the volume: one delta per frame). A masked payload is
                    // unmasked in the scratch buffer first.
                    if mask.is_none() && whole && fin && opcode == 0x1 && self.take_single_text() {
                        on_message(Message::Text(seg))?;
                        continue;
                    }
                    let mut unmasked = std::mem::take(&mut self.scratch);
                    let payload = match mask {
                        None => seg,
                        Some(m) => {
                            unmasked.clear();
                            unmasked.extend_from_slice(seg);
                            for (i, b) in unmasked.iter_mut().enumerate() {
                                *b ^= m[(pos + i) & 3];
                            }
                            &unmasked[..]
                        }
                    };
                    let r = self.payload(payload);
                    self.scratch = unmasked;
                    r?;
                    if whole {
                        self.end_frame(&mut on_message)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Ends the current frame, if it is a whole uncompressed text message of its own
    /// (nothing of it assembled yet), without assembling it: the caller hands the payload on
    /// as it lies. Its cap was checked at the header.
    fn take_single_text(&mut self) -> bool {
        match self.msg.take() {
            Some(msg) if msg.text && !msg.compressed && msg.data.is_empty() => {
                self.state = State::Header;
                self.spare = msg.data;
                true
            }
            msg => {
                self.msg = msg;
                false
            }
        }
    }

    /// Consumes header bytes; once the header is complete, validates it and enters `Payload`.
    fn read_header(&mut self, bytes: &[u8]) -> Result<usize, FrameError> {
        let mut used = 0;
        loop {
            let need = if self.header_len < 2 {
                2
            } else {
                let len7 = self.header[1] & 0x7f;
                let ext = match len7 {
                    126 => 2,
                    127 => 8,
                    _ => 0,
                };
                let mask = if self.header[1] & 0x80 != 0 { 4 } else { 0 };
                2 + ext + mask
            };
            if self.header_len == need {
                break;
            }
            if used == bytes.len() {
                return Ok(used);
            }
            let take = (need - self.header_len).min(bytes.len() - used);
            self.header[self.header_len..self.header_len + take]
                .copy_from_slice(&bytes[used..used + take]);
            self.header_len += take;
            used += take;
        }
        let h = &self.header[..self.header_len];
        let fin = h[0] & 0x80 != 0;
        let rsv1 = h[0] & 0x40 != 0;
        let opcode = h[0] & 0x0f;
        let (len, rest) = match h[1] & 0x7f {
            126 => (u64::from(u16::from_be_bytes([h[2], h[3]])), &h[4..]),
            127 => {
                let mut b = [0u8; 8];
                b.copy_from_slice(&h[2..10]);
                (u64::from_be_bytes(b), &h[10..])
            }
            n => (u64::from(n), &h[2..]),
        };
        let mask = (h[1] & 0x80 != 0).then(|| [rest[0], rest[1], rest[2], rest[3]]);
        self.header_len = 0;

        if h[0] & 0x30 != 0 {
            return Err(FrameError::Frame("RSV2/RSV3 set"));
        }
        if len >> 63 != 0 {
            return Err(FrameError::Frame("payload length has its top bit set"));
        }
        match opcode {
            0x8..=0xA => {
                if !fin || len > 125 {
                    return Err(FrameError::Frame("fragmented or oversized control frame"));
                }
                if rsv1 {
                    return Err(FrameError::Frame("RSV1 on a control frame"));
                }
                self.control.clear();
            }
            0x1 | 0x2 => {
                if self.msg.is_some() {
                    return Err(FrameError::Frame("new message inside a fragmented one"));
                }
                if rsv1 && self.inflater.is_none() {
                    return Err(FrameError::Frame("RSV1 without permessage-deflate"));
                }
                let mut data = std::mem::take(&mut self.spare);
                data.clear();
                self.msg = Some(Assembly {
                    text: opcode == 0x1,
                    compressed: rsv1,
                    data,
                });
            }
            0x0 => {
                if self.msg.is_none() {
                    return Err(FrameError::Frame("continuation without a message"));
                }
                if rsv1 {
                    return Err(FrameError::Frame("RSV1 on a continuation frame"));
                }
            }
            _ => return Err(FrameError::Frame("reserved opcode")),
        }
        // An uncompressed text frame keeps all its payload: when the header already announces
        // more than the cap, fail now rather than buffer up to the cap before failing.
        if let Some(msg) = self.msg.as_ref().filter(|m| m.text && !m.compressed) {
            if opcode < 0x8 && (msg.data.len() as u64).saturating_add(len) > self.max_message as u64
            {
                return Err(FrameError::Overflow(self.max_message));
            }
        }
        self.state = State::Payload {
            remaining: len,
            mask,
            mask_pos: 0,
            opcode,
            fin,
        };
        Ok(used)
    }

    /// Unmasked payload bytes of the current frame.
    fn payload(&mut self, seg: &[u8]) -> Result<(), FrameError> {
        let State::Payload { opcode, .. } = self.state else {
            return Ok(());
        };
        if opcode >= 0x8 {
            self.control.extend_from_slice(seg);
            return Ok(());
        }
        let Some(msg) = self.msg.as_mut() else {
            return Ok(());
        };
        if msg.compressed {
            let (d, _) = self
                .inflater
                .as_mut()
                .ok_or(FrameError::Frame("RSV1 without permessage-deflate"))?;
            inflate(
                d,
                seg,
                &mut self.inflate_buf,
                &mut msg.data,
                msg.text,
                self.max_message,
                false,
            )
        } else if msg.text {
            if msg.data.len() + seg.len() > self.max_message {
                return Err(FrameError::Overflow(self.max_message));
            }
            msg.data.extend_from_slice(seg);
            Ok(())
        } else {
            Ok(()) // uncompressed binary: not needed, not kept
        }
    }

    fn end_frame<E: From<FrameError>>(
        &mut self,
        on_message: &mut impl FnMut(Message<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        let State::Payload { opcode, fin, .. } = std::mem::replace(&mut self.state, State::Header)
        else {
            return Ok(());
        };
        match opcode {
            0x8 => {
                self.closed = true;
                on_message(Message::Close)
            }
            0x9 => on_message(Message::Ping),
            0xA => on_message(Message::Pong),
            _ if !fin => Ok(()),
            _ => {
                let Some(mut msg) = self.msg.take() else {
                    return Ok(());
                };
                if msg.compressed {
                    if let Some((d, reset)) = self.inflater.as_mut() {
                        inflate(
                            d,
                            &[0, 0, 0xff, 0xff],
                            &mut self.inflate_buf,
                            &mut msg.data,
                            msg.text,
                            self.max_message,
                            true,
                        )?;
                        if *reset {
                            d.reset(false);
                        }
                    }
                }
                let r = if msg.text {
                    on_message(Message::Text(&msg.data))
                } else {
                    on_message(Message::Binary)
                };
                // Keep a small buffer for the next message; let a large one go.
                if msg.data.capacity() <= super::budget::KEEP {
                    self.spare = msg.data;
                }
                r
            }
        }
    }
}

/// Inflates `input` through the fixed buffer `buf`, appending to `out` when `keep` (else the
/// output is dropped, which still advances the sliding window); fails past `max` kept bytes.
/// A reused buffer matters: per-message scratch allocation (which flate2 zero-fills) cost
/// more than the inflating itself.
fn inflate(
    d: &mut Decompress,
    mut input: &[u8],
    buf: &mut [u8],
    out: &mut Vec<u8>,
    keep: bool,
    max: usize,
    sync: bool,
) -> Result<(), FrameError> {
    let flush = if sync {
        FlushDecompress::Sync
    } else {
        FlushDecompress::None
    };
    loop {
        let (in0, out0) = (d.total_in(), d.total_out());
        let status = d
            .decompress(input, buf, flush)
            .map_err(|_| FrameError::Inflate)?;
        let consumed = (d.total_in() - in0) as usize;
        let produced = (d.total_out() - out0) as usize;
        input = &input[consumed..];
        if keep {
            if out.len() + produced > max {
                return Err(FrameError::Overflow(max));
            }
            out.extend_from_slice(&buf[..produced]);
        }
        if status == Status::StreamEnd {
            // The sender ended its DEFLATE stream (BFINAL): what follows starts a new one.
            d.reset(false);
            if input.is_empty() || consumed == 0 && produced == 0 {
                break;
            }
            continue;
        }
        if consumed == 0 && produced == 0 {
            break; // needs more input
        }
        if input.is_empty() && produced < buf.len() {
            break; // everything available has come out
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use flate2::Compression;
    use proptest::prelude::*;

    /// Builds one frame: `mask` masks the payload (as a client must). The test kit's
    /// encoder (tungstenite's frames), under the argument order these tests use.
    pub(crate) fn frame(
        fin: bool,
        rsv1: bool,
        opcode: u8,
        payload: &[u8],
        mask: Option<[u8; 4]>,
    ) -> Vec<u8> {
        testkit::ws::encode(testkit::ws::header(fin, rsv1, opcode, mask), payload)
    }

    /// A permessage-deflate sender (the test kit's): sync-flush each message and strip the
    /// `00 00 ff ff` tail; with `context_takeover` off, a fresh compressor per message.
    pub(crate) struct Deflater(testkit::ws::Deflater);

    impl Deflater {
        pub(crate) fn new(takeover: bool) -> Self {
            Deflater(testkit::ws::Deflater::new(Compression::default(), takeover))
        }
        pub(crate) fn compress(&mut self, msg: &[u8]) -> Vec<u8> {
            self.0.message(msg)
        }
    }

    fn decode(d: &mut FrameDecoder, bytes: &[u8], chunk: usize) -> Result<Vec<String>, FrameError> {
        let mut seen = Vec::new();
        for c in bytes.chunks(chunk.max(1)) {
            d.feed(c, |m: Message<'_>| {
                seen.push(match m {
                    Message::Text(t) => format!("text:{}", String::from_utf8_lossy(t)),
                    other => format!("{other:?}"),
                });
                Ok::<(), FrameError>(())
            })?;
        }
        Ok(seen)
    }

    const MAX: usize = 1 << 20;

    #[test]
    fn lengths_masks_fragments_and_control_frames() {
        let mid = "m".repeat(300);
        let big = "b".repeat(70_000);
        let mut bytes = Vec::new();
        bytes.extend(frame(true, false, 1, b"short", None));
        bytes.extend(frame(true, false, 1, mid.as_bytes(), Some([1, 2, 3, 4])));
        bytes.extend(frame(true, false, 1, big.as_bytes(), None));
        // Fragmented text with a ping and a pong between fragments.
        bytes.extend(frame(false, false, 1, b"frag", Some([9, 8, 7, 6])));
        bytes.extend(frame(true, false, 9, b"p", Some([5, 5, 5, 5])));
        bytes.extend(frame(false, false, 0, b"men", Some([1, 1, 1, 1])));
        bytes.extend(frame(true, false, 10, b"", None));
        bytes.extend(frame(true, false, 0, b"ted", Some([2, 2, 2, 2])));
        bytes.extend(frame(true, false, 2, &[0, 1, 2], None));
        bytes.extend(frame(true, false, 1, b"", None));
        bytes.extend(frame(true, false, 8, &[0x03, 0xe8], None));
        bytes.extend(frame(true, false, 1, b"after close", None));
        let want = vec![
            "text:short".to_string(),
            format!("text:{mid}"),
            format!("text:{big}"),
            "Ping".into(),
            "Pong".into(),
            "text:fragmented".into(),
            "Binary".into(),
            "text:".into(),
            "Close".into(),
        ];
        for chunk in [1, 3, 125, 4096, bytes.len()] {
            let mut d = FrameDecoder::new(None, MAX);
            assert_eq!(
                decode(&mut d, &bytes, chunk).unwrap(),
                want,
                "chunk {chunk}"
            );
        }
    }

    #[test]
    fn permessage_deflate_with_and_without_context_takeover() {
        let msgs: Vec<String> = (0..5)
            .map(|i| format!("{{\"type\":\"response.output_text.delta\",\"delta\":\"hello hello hello {i}\"}}"))
            .collect();
        for takeover in [true, false] {
            let mut tx = Deflater::new(takeover);
            let mut bytes = Vec::new();
            for (i, m) in msgs.iter().enumerate() {
                let z = tx.compress(m.as_bytes());
                let mask = (i % 2 == 0).then_some([0xaa, 0x55, 0x0f, 0xf0]);
                if i == 2 {
                    // Fragmented compressed message, a ping between fragments; RSV1 on the first only.
                    let (a, b) = z.split_at(z.len() / 2);
                    bytes.extend(frame(false, true, 1, a, mask));
                    bytes.extend(frame(true, false, 9, b"", mask));
                    bytes.extend(frame(true, false, 0, b, mask));
                } else {
                    bytes.extend(frame(true, true, 1, &z, mask));
                }
            }
            // A compressed binary message in between still advances the shared window.
            let z = tx.compress(b"binary payload hello hello");
            bytes.extend(frame(true, true, 2, &z, None));
            let z = tx.compress(msgs[0].as_bytes());
            bytes.extend(frame(true, true, 1, &z, None));

            let mut want: Vec<String> = msgs.iter().map(|m| format!("text:{m}")).collect();
            want.insert(2, "Ping".into());
            want.push("Binary".into());
            want.push(format!("text:{}", msgs[0]));
            for chunk in [1, 7, bytes.len()] {
                let mut d = FrameDecoder::new(Some(!takeover), MAX);
                assert_eq!(
                    decode(&mut d, &bytes, chunk).unwrap(),
                    want,
                    "takeover {takeover}, chunk {chunk}"
                );
            }
        }
    }

    #[test]
    fn context_takeover_data_cannot_be_read_by_a_resetting_decoder() {
        let mut tx = Deflater::new(true);
        let m = b"the same words the same words the same words";
        let mut bytes = frame(true, true, 1, &tx.compress(m), None);
        bytes.extend(frame(true, true, 1, &tx.compress(m), None));
        // Decoding as if no_context_takeover was negotiated cannot resolve the back-reference.
        let mut d = FrameDecoder::new(Some(true), MAX);
        let r = decode(&mut d, &bytes, bytes.len());
        assert!(
            r.is_err() || r.as_ref().unwrap()[1] != format!("text:{}", String::from_utf8_lossy(m))
        );
    }

    #[test]
    fn frame_errors() {
        let cases: &[(&str, Vec<u8>, Option<bool>)] = &[
            ("rsv2", vec![0xa1, 0x00], None),
            (
                "rsv1 without deflate",
                frame(true, true, 1, b"x", None),
                None,
            ),
            ("reserved opcode", frame(true, false, 3, b"", None), None),
            ("fragmented ping", frame(false, false, 9, b"", None), None),
            ("long ping", frame(true, false, 9, &[0; 126], None), None),
            (
                "orphan continuation",
                frame(true, false, 0, b"x", None),
                None,
            ),
            ("rsv1 on ping", frame(true, true, 9, b"", None), Some(false)),
            (
                "message inside a message",
                [
                    frame(false, false, 1, b"a", None),
                    frame(true, false, 1, b"b", None),
                ]
                .concat(),
                None,
            ),
            (
                "rsv1 on continuation",
                [
                    frame(false, true, 1, b"", None),
                    frame(true, true, 0, b"", None),
                ]
                .concat(),
                Some(false),
            ),
            (
                "64-bit length top bit",
                vec![0x81, 127, 0x80, 0, 0, 0, 0, 0, 0, 0],
                None,
            ),
        ];
        for (name, bytes, deflate) in cases {
            let mut d = FrameDecoder::new(*deflate, MAX);
            let err = decode(&mut d, bytes, bytes.len()).unwrap_err();
            assert_eq!(err.reason(), "frame", "{name}: {err}");
        }
        let mut d = FrameDecoder::new(Some(false), MAX);
        let err = decode(
            &mut d,
            &frame(true, true, 1, b"\xff\xff\xff garbage", None),
            64,
        )
        .unwrap_err();
        assert_eq!(err, FrameError::Inflate);
    }

    #[test]
    fn oversized_messages_overflow() {
        let mut d = FrameDecoder::new(None, 100);
        let bytes = [
            frame(false, false, 1, &[b'a'; 60], None),
            frame(true, false, 0, &[b'a'; 60], None),
        ]
        .concat();
        assert_eq!(decode(&mut d, &bytes, 7), Err(FrameError::Overflow(100)));
        // A compression bomb stops at the bound.
        let mut tx = Deflater::new(true);
        let z = tx.compress(&vec![b'z'; 1 << 20]);
        let mut d = FrameDecoder::new(Some(false), 1000);
        assert_eq!(
            decode(&mut d, &frame(true, true, 1, &z, None), 4096),
            Err(FrameError::Overflow(1000))
        );
    }

    #[test]
    fn a_text_frame_announcing_more_than_the_cap_fails_at_its_header() {
        // Only the header: nothing of the payload has to arrive (or be kept) for the verdict.
        let mut header = vec![0x81u8, 127];
        header.extend_from_slice(&(100u64 << 20).to_be_bytes());
        let mut d = FrameDecoder::new(None, 1 << 20);
        assert_eq!(
            decode(&mut d, &header, 3),
            Err(FrameError::Overflow(1 << 20))
        );
        // A continuation that would carry the message past the cap fails the same way.
        let mut d = FrameDecoder::new(None, 100);
        let mut bytes = frame(false, false, 1, &[b'a'; 60], None);
        bytes.extend_from_slice(&[0x80, 60]);
        assert_eq!(decode(&mut d, &bytes, 7), Err(FrameError::Overflow(100)));
    }

    #[test]
    fn negotiated_extensions() {
        type Case<'a> = (Option<&'a str>, Result<Option<PerMessageDeflate>, ()>);
        let cases: &[Case] = &[
            (None, Ok(None)),
            (Some(""), Ok(None)),
            (
                Some("permessage-deflate"),
                Ok(Some(PerMessageDeflate::default())),
            ),
            (
                Some("permessage-deflate; client_max_window_bits=15; server_no_context_takeover"),
                Ok(Some(PerMessageDeflate {
                    server_no_context_takeover: true,
                    client_no_context_takeover: false,
                })),
            ),
            (
                Some("Permessage-Deflate;client_no_context_takeover"),
                Ok(Some(PerMessageDeflate {
                    server_no_context_takeover: false,
                    client_no_context_takeover: true,
                })),
            ),
            (Some("x-webkit-deflate-frame"), Err(())),
            (Some("permessage-deflate, permessage-deflate"), Err(())),
        ];
        for (value, want) in cases {
            assert_eq!(&negotiated(*value).map_err(|_| ()), want, "{value:?}");
        }
    }

    /// One message of a generated stream: its text, how many frames it is cut into, and
    /// whether the frames are masked.
    fn messages() -> impl Strategy<Value = Vec<(String, usize, bool)>> {
        prop::collection::vec(("[a-z{}\":]{0,300}", 1usize..4, any::<bool>()), 1..12)
    }

    proptest! {
        /// Where reads split a stream does not change what it decodes to: each message whole,
        /// in order, whether it came in one frame (handed on where it lies, when unmasked) or
        /// in several, masked or not, with a ping between fragments.
        #[test]
        fn any_split_decodes_the_messages_sent(msgs in messages(), cuts in prop::collection::vec(1usize..700, 1..40)) {
            let mut bytes = Vec::new();
            let mut want = Vec::new();
            for (text, parts, masked) in &msgs {
                let mask = masked.then_some([7, 1, 200, 42]);
                let size = text.len().div_ceil(*parts).max(1);
                let pieces: Vec<&[u8]> = if text.is_empty() { vec![&[]] } else { text.as_bytes().chunks(size).collect() };
                for (i, piece) in pieces.iter().enumerate() {
                    let last = i + 1 == pieces.len();
                    bytes.extend(frame(last, false, if i == 0 { 1 } else { 0 }, piece, mask));
                    if !last {
                        bytes.extend(frame(true, false, 9, b"p", mask));
                        want.push("Ping".to_string());
                    }
                }
                want.push(format!("text:{text}"));
            }
            let mut d = FrameDecoder::new(None, MAX);
            prop_assert_eq!(&decode(&mut d, &bytes, bytes.len()).unwrap(), &want);
            let mut d = FrameDecoder::new(None, MAX);
            let mut seen = Vec::new();
            let (mut at, mut k) = (0, 0);
            while at < bytes.len() {
                let end = (at + cuts[k % cuts.len()]).min(bytes.len());
                seen.extend(decode(&mut d, &bytes[at..end], end - at).unwrap());
                at = end;
                k += 1;
            }
            prop_assert_eq!(seen, want);
        }

        #[test]
        fn random_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..600),
                                     chunk in 1usize..40, deflate in any::<Option<bool>>()) {
            let mut d = FrameDecoder::new(deflate, 4096);
            let _ = decode(&mut d, &data, chunk);
        }
    }
}
