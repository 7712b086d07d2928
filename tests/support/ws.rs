//! WebSocket test support: a hashing byte stream, the client handshake done by hand (so only
//! post-handshake bytes are hashed), a scripted WebSocket upstream, and RFC 6455 frames built
//! by hand with permessage-deflate (tungstenite 0.30 has no deflate).
#![allow(dead_code)]

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

use super::{full, Body, WAIT};

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

/// One RFC 6455 frame (FIN set). `mask` for client frames; `rsv1` marks a compressed message.
pub fn frame(opcode: u8, payload: &[u8], rsv1: bool, mask: Option<[u8; 4]>) -> Vec<u8> {
    let mut f = vec![0x80 | if rsv1 { 0x40 } else { 0 } | opcode];
    let m = if mask.is_some() { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => f.push(m | n as u8),
        n if n < 65536 => {
            f.push(m | 126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            f.push(m | 127);
            f.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    match mask {
        Some(k) => {
            f.extend_from_slice(&k);
            f.extend(payload.iter().enumerate().map(|(i, b)| b ^ k[i % 4]));
        }
        None => f.extend_from_slice(payload),
    }
    f
}

/// permessage-deflate with context takeover: one raw deflate stream per direction.
pub struct Deflater(flate2::Compress);

impl Default for Deflater {
    fn default() -> Self {
        Deflater(flate2::Compress::new(flate2::Compression::default(), false))
    }
}

impl Deflater {
    /// The compressed payload of one message (sync flush, trailing 00 00 ff ff removed).
    pub fn message(&mut self, text: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(text.len() + 64);
        let mut input = text.as_bytes();
        loop {
            out.reserve(256);
            let before_in = self.0.total_in();
            self.0
                .compress_vec(input, &mut out, flate2::FlushCompress::Sync)
                .unwrap();
            let used = (self.0.total_in() - before_in) as usize;
            input = &input[used..];
            if input.is_empty() && out.len() < out.capacity() {
                break;
            }
        }
        assert!(out.ends_with(&[0, 0, 0xff, 0xff]));
        out.truncate(out.len() - 4);
        out
    }
}
