//! Message heads, sans I/O: which request heads the relay forwards itself and with what
//! body length, which response heads it can pass and how their bodies end, and the heads it
//! writes on (a reverse proxy's changes, and framing from what was parsed).
//!
//! Each decision is made once, here, from the bytes as parsed; the head that leaves says
//! exactly that decision. A request the relay cannot frame with certainty from one length
//! (two lengths that differ, a length and a coding, a coding at all, an expectation, an
//! upgrade, `HEAD`, `CONNECT`, a target not in origin form, a head past its bound) is handed
//! over whole to a server that answers it (hyper), never guessed at.

use bytes::{BufMut, Bytes, BytesMut};
use http::Method;

use crate::framing::{Chunked, Framing};
use crate::headers::{connection_names, end_to_end, tokens};

/// A request head longer than this is handed over (hyper answers it).
pub const MAX_HEAD: usize = 64 * 1024;
/// A response head longer than this is refused.
pub const MAX_RESPONSE_HEAD: usize = 256 * 1024;
/// Header lines per head parsed here; a request with more is handed over.
pub(crate) const MAX_HEADERS: usize = 128;

/// What parsing a request head gave.
#[derive(Debug)]
pub enum Parsed<T> {
    /// Not a whole head yet (and still within bounds).
    Partial,
    /// Not a head the relay forwards itself: hand the connection, these bytes first, over.
    Handover,
    /// A whole head of this many bytes.
    Complete(usize, T),
}

/// A request head the relay forwards itself.
#[derive(Debug)]
pub struct RequestHead {
    pub method: Method,
    /// The request target (origin form: it starts with `/`).
    pub target: String,
    /// Header lines as received, names and values.
    pub headers: Vec<(Bytes, Bytes)>,
    /// The body's length: the one `Content-Length` (repeats agree), else 0.
    pub body_len: u64,
    /// The client asked to close after this exchange.
    pub close: bool,
}

fn is(name: &str, want: &str) -> bool {
    name.eq_ignore_ascii_case(want)
}

fn parse_length(value: &[u8]) -> Option<u64> {
    let v = value.trim_ascii();
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

/// Parses a request head and says whether the verbatim path takes it: a complete head of
/// HTTP/1.1 in origin form whose body's end its one length (or none) says, or a hand-over.
pub fn parse_request(buf: &[u8]) -> Parsed<RequestHead> {
    let mut lines = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut lines);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() <= MAX_HEAD => return Parsed::Partial,
        _ => return Parsed::Handover,
    };
    let (Some(method), Some(target), Some(1)) = (req.method, req.path, req.version) else {
        return Parsed::Handover;
    };
    let Ok(method) = Method::from_bytes(method.as_bytes()) else {
        return Parsed::Handover;
    };
    if method == Method::CONNECT || method == Method::HEAD || !target.starts_with('/') {
        return Parsed::Handover;
    }
    let (mut body_len, mut close) = (None, false);
    for h in req.headers.iter() {
        let name = h.name;
        if is(name, "transfer-encoding") || is(name, "expect") || is(name, "upgrade") {
            return Parsed::Handover;
        }
        if is(name, "content-length") {
            match (parse_length(h.value), body_len) {
                (Some(n), None) => body_len = Some(n),
                (Some(n), Some(m)) if n == m => {}
                _ => return Parsed::Handover,
            }
        }
        if is(name, "connection") {
            for t in tokens(h.value) {
                if t.eq_ignore_ascii_case(b"upgrade") {
                    return Parsed::Handover;
                }
                close |= t.eq_ignore_ascii_case(b"close");
            }
        }
    }
    let headers = owned(req.headers);
    Parsed::Complete(
        len,
        RequestHead {
            method,
            target: target.to_string(),
            headers,
            body_len: body_len.unwrap_or(0),
            close,
        },
    )
}

/// Header lines as received, out of the buffer they were parsed from.
fn owned(lines: &[httparse::Header<'_>]) -> Vec<(Bytes, Bytes)> {
    lines
        .iter()
        .map(|h| {
            (
                Bytes::copy_from_slice(h.name.as_bytes()),
                Bytes::copy_from_slice(h.value),
            )
        })
        .collect()
}

/// The request head for the upstream: `path_and_query` as the origin-form target, `host`
/// as `Host` (none when `None`), the
/// client's other end-to-end header lines as received, and the body's length as the relay
/// parsed it: one `content-length` line where the client's first stood (the relay frames
/// what it forwards, so the upstream reads the body the relay sends, never more or less).
pub fn upstream_head(r: &RequestHead, path_and_query: &str, host: Option<&[u8]>) -> Bytes {
    let mut out = BytesMut::with_capacity(512);
    out.put_slice(r.method.as_str().as_bytes());
    out.put_u8(b' ');
    out.put_slice(path_and_query.as_bytes());
    out.put_slice(b" HTTP/1.1\r\n");
    if let Some(host) = host {
        out.put_slice(b"host: ");
        out.put_slice(host);
        out.put_slice(b"\r\n");
    }
    let named = connection_names(r.headers.iter().map(|(n, v)| (&n[..], &v[..])));
    let mut length_written = false;
    for (name, value) in &r.headers {
        if name.eq_ignore_ascii_case(b"content-length") {
            if !length_written {
                put_length(&mut out, name, r.body_len);
                length_written = true;
            }
            continue;
        }
        if name.eq_ignore_ascii_case(b"host") || !end_to_end(name, &named) {
            continue;
        }
        out.put_slice(name);
        out.put_slice(b": ");
        out.put_slice(value);
        out.put_slice(b"\r\n");
    }
    out.put_slice(b"\r\n");
    out.freeze()
}

/// A `Content-Length` line with the length the relay frames the body with (the name as the
/// peer spelled it).
fn put_length(out: &mut BytesMut, name: &[u8], len: u64) {
    out.put_slice(name);
    out.put_slice(b": ");
    out.put_slice(len.to_string().as_bytes());
    out.put_slice(b"\r\n");
}

/// An upstream's response head, as the relay passes it on.
pub struct ResponseHead {
    pub status: u16,
    pub reason: Bytes,
    pub headers: Vec<(Bytes, Bytes)>,
    pub framing: Framing,
    /// The upstream connection may carry another exchange once the body has ended.
    pub reusable: bool,
}

pub enum ResponseParsed {
    Partial,
    /// An interim (1xx) response of this many bytes: dropped, as hyper's client drops them.
    Interim(usize),
    Complete(usize, ResponseHead),
    Bad,
}

pub fn parse_response(buf: &[u8]) -> ResponseParsed {
    let mut lines = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut res = httparse::Response::new(&mut lines);
    let len = match res.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() <= MAX_RESPONSE_HEAD => {
            return ResponseParsed::Partial
        }
        _ => return ResponseParsed::Bad,
    };
    let (Some(status), Some(version)) = (res.code, res.version) else {
        return ResponseParsed::Bad;
    };
    if status < 100 {
        // Three digits, but no status (`000`, `099`): no client can read it, and written on
        // as a number it would not even be three digits. hyper refuses it the same way.
        return ResponseParsed::Bad;
    }
    if status == 101 {
        // Switching protocols was never asked for here.
        return ResponseParsed::Bad;
    }
    if (100..200).contains(&status) {
        return ResponseParsed::Interim(len);
    }
    let mut reusable = version == 1;
    let (mut chunked, mut coded, mut length) = (false, false, None);
    for h in res.headers.iter() {
        if is(h.name, "transfer-encoding") {
            for t in tokens(h.value) {
                coded = true;
                chunked = t.eq_ignore_ascii_case(b"chunked");
            }
        } else if is(h.name, "content-length") {
            match (parse_length(h.value), length) {
                (Some(n), None) => length = Some(n),
                (Some(n), Some(m)) if n == m => {}
                _ => return ResponseParsed::Bad,
            }
        } else if is(h.name, "connection") {
            for t in tokens(h.value) {
                if t.eq_ignore_ascii_case(b"close") {
                    reusable = false;
                }
            }
        }
    }
    if coded && version == 0 {
        // An HTTP/1.0 response has no transfer codings: its framing is faulty (RFC 9112
        // §6.1), and hyper's client and nginx refuse it.
        return ResponseParsed::Bad;
    }
    let framing = if status == 204 || status == 304 {
        // No body, whatever the head says; a 204 that announces one (a coding, or a length
        // other than 0) may still send it, and those bytes would be read as the next
        // response on this connection: not reused. (A 304's length is the representation's.)
        if coded || (status == 204 && length.is_some_and(|n| n > 0)) {
            reusable = false;
        }
        Framing::Empty
    } else if chunked {
        Framing::Chunked(Chunked::default())
    } else if coded {
        Framing::UntilClose
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        Framing::UntilClose
    };
    if matches!(framing, Framing::UntilClose) {
        reusable = false;
    }
    let headers = owned(res.headers);
    ResponseParsed::Complete(
        len,
        ResponseHead {
            status,
            reason: Bytes::copy_from_slice(res.reason.unwrap_or("").as_bytes()),
            headers,
            framing,
            reusable,
        },
    )
}

/// The response head for the client: the upstream's status line and end-to-end header
/// lines as received, then the framing the body is passed with, as the relay parsed it: a
/// body of known length keeps one `content-length` line (where the upstream's first stood,
/// with the parsed length), any other body leaves chunked, and a 204 has no length.
pub fn client_head(res: &ResponseHead, close: bool) -> BytesMut {
    let mut out = BytesMut::with_capacity(512);
    out.put_slice(b"HTTP/1.1 ");
    out.put_slice(res.status.to_string().as_bytes());
    out.put_u8(b' ');
    out.put_slice(&res.reason);
    out.put_slice(b"\r\n");
    let named = connection_names(res.headers.iter().map(|(n, v)| (&n[..], &v[..])));
    let chunked = matches!(res.framing, Framing::Chunked(_) | Framing::UntilClose);
    let mut length_written = false;
    for (name, value) in &res.headers {
        if name.eq_ignore_ascii_case(b"content-length") {
            match res.framing {
                Framing::Length(n) if !length_written => put_length(&mut out, name, n),
                // A 304's length describes the representation it did not send.
                Framing::Empty if res.status == 304 && !length_written => {
                    out.put_slice(name);
                    out.put_slice(b": ");
                    out.put_slice(value);
                    out.put_slice(b"\r\n");
                }
                _ => {}
            }
            length_written = true;
            continue;
        }
        if !end_to_end(name, &named) {
            continue;
        }
        out.put_slice(name);
        out.put_slice(b": ");
        out.put_slice(value);
        out.put_slice(b"\r\n");
    }
    if chunked {
        out.put_slice(b"transfer-encoding: chunked\r\n");
    }
    if close {
        out.put_slice(b"connection: close\r\n");
    }
    out.put_slice(b"\r\n");
    out
}

#[cfg(test)]
#[path = "head_tests.rs"]
mod tests;
