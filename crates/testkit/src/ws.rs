//! WebSocket for tests: RFC 6455 frames, permessage-deflate payloads (RFC 7692) and, with the
//! `net` feature, the client handshake, a scripted server's 101, tungstenite streams on either
//! end and a stream that hashes every byte it carries.
//!
//! Every frame is built by tungstenite's own [`Frame`] and [`FrameHeader`]: their public
//! fields reach all the relay's observer has to meet (FIN clear for fragments, RSV1 for
//! compressed messages, any of the 16 opcodes, a client's mask or none, a header announcing a
//! payload that is streamed or never comes). So there is no hand encoder of frame bytes here.
//! What tungstenite 0.30 does not do is permessage-deflate: [`Deflater`] makes the compressed
//! payloads, and the frame carrying one gets RSV1 from the caller.

use tungstenite::protocol::frame::coding::OpCode;
use tungstenite::protocol::frame::{Frame, FrameHeader};

/// One frame with FIN set. `mask` for client frames; `rsv1` marks a compressed message.
pub fn frame(opcode: u8, payload: &[u8], rsv1: bool, mask: Option<[u8; 4]>) -> Vec<u8> {
    encode(header(true, rsv1, opcode, mask), payload)
}

/// The header of a frame: FIN as `fin` says (a fragment of a message when clear), RSV1,
/// opcode (its low 4 bits) and the client's mask if any.
pub fn header(fin: bool, rsv1: bool, opcode: u8, mask: Option<[u8; 4]>) -> FrameHeader {
    FrameHeader {
        is_final: fin,
        rsv1,
        opcode: OpCode::from(opcode & 0x0f),
        mask,
        ..FrameHeader::default()
    }
}

/// The bytes of one frame: `header`, then `payload` (masked when the header has a mask).
pub fn encode(header: FrameHeader, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 14);
    Frame::from_payload(header, payload.to_vec().into())
        .format(&mut out)
        .expect("a frame formats into a Vec");
    out
}

/// The header alone of an unmasked frame whose payload is `len` bytes, for a payload written
/// after it piece by piece (or never).
pub fn head(fin: bool, rsv1: bool, opcode: u8, len: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(14);
    header(fin, rsv1, opcode, None)
        .format(len, &mut out)
        .expect("a header formats into a Vec");
    out
}

/// One direction of permessage-deflate (RFC 7692 §7.2.1): raw DEFLATE, a sync flush per
/// message, the flush's trailing `00 00 ff ff` removed; with context takeover the window
/// carries over from message to message, without it each message starts afresh.
pub struct Deflater {
    c: flate2::Compress,
    takeover: bool,
}

impl Default for Deflater {
    /// The default level, with context takeover.
    fn default() -> Self {
        Deflater::new(flate2::Compression::default(), true)
    }
}

impl Deflater {
    pub fn new(level: flate2::Compression, takeover: bool) -> Self {
        Deflater {
            c: flate2::Compress::new(level, false),
            takeover,
        }
    }

    /// The compressed payload of one message (sync flush, trailing `00 00 ff ff` removed).
    pub fn message(&mut self, msg: impl AsRef<[u8]>) -> Vec<u8> {
        if !self.takeover {
            self.c.reset();
        }
        let mut out = deflate_sync(&mut self.c, msg.as_ref()).expect("deflate into a Vec");
        assert!(out.ends_with(&[0, 0, 0xff, 0xff]), "sync flush tail");
        out.truncate(out.len() - 4);
        out
    }
}

/// Compresses all of `input` with a sync flush, its trailing `00 00 ff ff` kept.
pub fn deflate_sync(c: &mut flate2::Compress, input: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(input.len() + 64);
    let mut pos = 0usize;
    loop {
        if out.capacity() - out.len() < 64 {
            out.reserve(out.capacity().max(1024));
        }
        let (before_in, before_out) = (c.total_in(), out.len());
        c.compress_vec(&input[pos..], &mut out, flate2::FlushCompress::Sync)
            .map_err(|e| e.to_string())?;
        pos += (c.total_in() - before_in) as usize;
        if c.total_in() == before_in && out.len() == before_out && pos < input.len() {
            return Err("deflate made no progress".into());
        }
        // Done when all input is in and the flush left spare room (nothing more pending).
        if pos >= input.len() && out.capacity() > out.len() {
            return Ok(out);
        }
    }
}

#[cfg(feature = "net")]
pub use self::net::*;

#[cfg(feature = "net")]
mod net {
    use std::io;
    use std::pin::Pin;
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll};

    use sha2::{Digest, Sha256};
    use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
    use tokio_tungstenite::tungstenite::protocol::Role;
    use tokio_tungstenite::WebSocketStream;

    use crate::{full, Body, WAIT};

    /// SHA-256 and length of everything read and everything written through a stream.
    #[derive(Default)]
    pub struct Tally {
        read: Sha256,
        read_len: usize,
        written: Sha256,
        written_len: usize,
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Digests {
        pub read: ([u8; 32], usize),
        pub written: ([u8; 32], usize),
    }

    impl Tally {
        pub fn digests(&self) -> Digests {
            Digests {
                read: (self.read.clone().finalize().into(), self.read_len),
                written: (self.written.clone().finalize().into(), self.written_len),
            }
        }
    }

    pub struct Hashing<S> {
        pub inner: S,
        pub tally: Arc<Mutex<Tally>>,
    }

    impl<S> Hashing<S> {
        pub fn new(inner: S) -> (Self, Arc<Mutex<Tally>>) {
            let tally = Arc::new(Mutex::new(Tally::default()));
            (
                Hashing {
                    inner,
                    tally: tally.clone(),
                },
                tally,
            )
        }
    }

    impl<S: AsyncRead + Unpin> AsyncRead for Hashing<S> {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let before = buf.filled().len();
            let r = Pin::new(&mut self.inner).poll_read(cx, buf);
            if let Poll::Ready(Ok(())) = r {
                let new = &buf.filled()[before..];
                let mut t = self.tally.lock().unwrap();
                t.read.update(new);
                t.read_len += new.len();
            }
            r
        }
    }

    impl<S: AsyncWrite + Unpin> AsyncWrite for Hashing<S> {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let r = Pin::new(&mut self.inner).poll_write(cx, buf);
            if let Poll::Ready(Ok(n)) = r {
                let mut t = self.tally.lock().unwrap();
                t.written.update(&buf[..n]);
                t.written_len += n;
            }
            r
        }
        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_flush(cx)
        }
        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_shutdown(cx)
        }
    }

    /// Sends a WebSocket upgrade request for `path` and reads the response head byte by byte (so
    /// nothing after it is consumed). Returns the status and the head's lines.
    pub async fn client_handshake<S: AsyncRead + AsyncWrite + Unpin>(
        tcp: &mut S,
        host: &str,
        path: &str,
        extra_headers: &[(&str, &str)],
    ) -> (u16, Vec<String>) {
        let mut req = format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        );
        for (n, v) in extra_headers {
            req.push_str(&format!("{n}: {v}\r\n"));
        }
        req.push_str("\r\n");
        tcp.write_all(req.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            let n = tokio::time::timeout(WAIT, tcp.read(&mut b))
                .await
                .expect("handshake answer within the wait bound")
                .unwrap();
            assert_eq!(n, 1, "connection closed during the handshake");
            head.push(b[0]);
        }
        let text = String::from_utf8(head).unwrap();
        let lines: Vec<String> = text.split("\r\n").map(str::to_string).collect();
        let status = lines[0].split(' ').nth(1).unwrap().parse().unwrap();
        (status, lines)
    }

    /// A 101 answer to an upgrade request, echoing `extensions` when given.
    pub fn switching(
        req: &hyper::Request<hyper::body::Incoming>,
        extensions: Option<&str>,
    ) -> hyper::Response<Body> {
        let key = req.headers()["sec-websocket-key"].as_bytes();
        let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key);
        let mut b = hyper::Response::builder()
            .status(101)
            .header("upgrade", "websocket")
            .header("connection", "Upgrade")
            .header("sec-websocket-accept", accept);
        if let Some(e) = extensions {
            b = b.header("sec-websocket-extensions", e);
        }
        b.body(full("")).unwrap()
    }

    /// A tungstenite client on `io`, whose handshake is already done (e.g. by
    /// [`client_handshake`]): no extension, so frames it sends are never compressed.
    pub async fn client<S: AsyncRead + AsyncWrite + Unpin>(io: S) -> WebSocketStream<S> {
        WebSocketStream::from_raw_socket(io, Role::Client, None).await
    }

    /// A tungstenite server on `io`, past its 101 (see [`switching`]).
    pub async fn server<S: AsyncRead + AsyncWrite + Unpin>(io: S) -> WebSocketStream<S> {
        WebSocketStream::from_raw_socket(io, Role::Server, None).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_rfc_6455_bytes() {
        // RFC 6455 §5.7: a single-frame unmasked and masked text message "Hello".
        assert_eq!(frame(1, b"Hello", false, None), b"\x81\x05Hello");
        assert_eq!(
            frame(1, b"Hello", false, Some([0x37, 0xfa, 0x21, 0x3d])),
            [0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58]
        );
        // A fragment (FIN clear), RSV1, and the 16- and 64-bit lengths.
        assert_eq!(encode(header(false, true, 2, None), b""), [0x42, 0x00]);
        let long = frame(2, &[7; 300], false, None);
        assert_eq!(long[..4], [0x82, 126, 0x01, 0x2c]);
        assert_eq!(long.len(), 4 + 300);
        assert_eq!(
            head(true, false, 1, 100 << 20),
            [0x81, 127, 0, 0, 0, 0, 0x06, 0x40, 0, 0]
        );
    }

    #[test]
    fn deflated_messages_inflate_back_with_and_without_takeover() {
        for takeover in [true, false] {
            let mut d = Deflater::new(flate2::Compression::fast(), takeover);
            let mut inflate = flate2::Decompress::new(false);
            for msg in [
                "{\"type\":\"response.create\"}",
                "{\"type\":\"response.create\"}",
            ] {
                if !takeover {
                    inflate.reset(false);
                }
                let mut data = d.message(msg);
                data.extend_from_slice(&[0, 0, 0xff, 0xff]);
                let mut out = Vec::with_capacity(1024);
                inflate
                    .decompress_vec(&data, &mut out, flate2::FlushDecompress::Sync)
                    .unwrap();
                assert_eq!(out, msg.as_bytes());
            }
        }
    }
}
