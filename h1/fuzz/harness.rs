//! The harnesses of the `h1` crate (the relay's HTTP/1.1 head decisions and body framing):
//! one function per target, panicking when an invariant breaks.
//!
//! This file serves two builds, as `fuzz/src/lib.rs` does for the correlator: the libFuzzer
//! targets `h1_request`, `h1_response` and `h1_framing` in `h1/fuzz/fuzz_targets/`, and
//! `h1/tests/fuzz_seeds.rs`, which includes it with `#[path]` and replays every seed, every
//! fixed finding and a stream of generated inputs under plain `cargo test`. It uses `h1`'s
//! public API and `httparse` (to read back what the relay writes) only.
//!
//! The invariants are the ones request smuggling breaks:
//! - a head's decision does not depend on where the bytes were cut: every proper prefix of a
//!   complete head is `Partial` (or handed over, past the head's bound), and every longer
//!   input gives the same head (pipelined bytes after it change nothing);
//! - the head the relay writes on reads back, by a strict parser, with exactly the framing
//!   the relay decided: one `Content-Length` of the parsed length and no coding for a request
//!   or a body of known length; `chunked` and no length for a chunked or close-delimited
//!   response; no length on a `204`;
//! - a body's framing gives the same payload, end and error however its bytes are cut.

use h1::{
    client_head, parse_request, parse_response, upstream_head, Framing, Parsed, ResponseParsed,
};

/// Header lines of a head read back by `httparse`: (lowercased name, value).
fn lines(headers: &[httparse::Header<'_>]) -> Vec<(String, Vec<u8>)> {
    headers
        .iter()
        .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
        .collect()
}

fn values<'a>(lines: &'a [(String, Vec<u8>)], name: &str) -> Vec<&'a [u8]> {
    lines
        .iter()
        .filter(|(n, _)| n == name)
        .map(|(_, v)| v.as_slice())
        .collect()
}

/// A request head: the decision is the same at every cut, and the head written upstream
/// frames the body with the parsed length and nothing else.
pub fn h1_request(data: &[u8]) {
    let whole = parse_request(data);
    let Parsed::Complete(len, head) = &whole else {
        // Not taken: no prefix may be taken either (a head is complete only at its end).
        for cut in 0..data.len() {
            assert!(
                !matches!(parse_request(&data[..cut]), Parsed::Complete(..)),
                "a prefix of {cut} bytes is a complete head the whole input is not"
            );
        }
        return;
    };
    assert!(*len <= data.len());
    for cut in 0..*len {
        match parse_request(&data[..cut]) {
            Parsed::Partial => {}
            Parsed::Handover => assert!(cut > h1::head::MAX_HEAD, "handed over at {cut} of {len}"),
            Parsed::Complete(l, _) => panic!("complete at {l} bytes, the whole head is {len}"),
        }
    }
    // What follows the head (a body, a pipelined request) changes nothing.
    let mut longer = data[..*len].to_vec();
    longer.extend_from_slice(b"GET /next HTTP/1.1\r\n\r\n");
    match parse_request(&longer) {
        Parsed::Complete(l, h) => {
            assert_eq!(l, *len);
            assert_eq!((h.body_len, h.close), (head.body_len, head.close));
        }
        _ => panic!("the head plus more bytes is no longer a head"),
    }

    let written = upstream_head(head, "/up/x", Some(b"upstream.test"));
    let mut slots = [httparse::EMPTY_HEADER; 256];
    let mut req = httparse::Request::new(&mut slots);
    match req.parse(&written) {
        Ok(httparse::Status::Complete(n)) => {
            assert_eq!(n, written.len(), "one head, nothing after it")
        }
        other => panic!("the upstream head does not read back: {other:?}"),
    }
    assert_eq!(req.method, Some(head.method.as_str()));
    let got = lines(req.headers);
    assert!(
        values(&got, "transfer-encoding").is_empty(),
        "a coding upstream"
    );
    let lengths = values(&got, "content-length");
    let sent_length = head
        .headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case(b"content-length"));
    if sent_length {
        assert_eq!(
            lengths,
            [head.body_len.to_string().as_bytes()],
            "the length upstream"
        );
    } else {
        assert!(lengths.is_empty() && head.body_len == 0);
    }
    assert_eq!(values(&got, "host"), [&b"upstream.test"[..]]);
    // And it is a head the relay would take again, with the same length.
    match parse_request(&written) {
        Parsed::Complete(_, again) => assert_eq!(again.body_len, head.body_len),
        _ => panic!("the relay would not take its own upstream head"),
    }
}

/// A response head: the decision is the same at every cut, and the head written to the client
/// says the framing the relay passes the body with.
pub fn h1_response(data: &[u8]) {
    let whole = parse_response(data);
    let len = match &whole {
        ResponseParsed::Complete(len, _) | ResponseParsed::Interim(len) => *len,
        ResponseParsed::Partial | ResponseParsed::Bad => return,
    };
    for cut in 0..len {
        match parse_response(&data[..cut]) {
            ResponseParsed::Partial => {}
            ResponseParsed::Bad => assert!(cut > h1::head::MAX_RESPONSE_HEAD),
            _ => panic!("a head at {cut} bytes, the whole head is {len}"),
        }
    }
    let ResponseParsed::Complete(_, head) = whole else {
        return;
    };
    for close in [false, true] {
        let written = client_head(&head, close);
        let mut slots = [httparse::EMPTY_HEADER; 256];
        let mut res = httparse::Response::new(&mut slots);
        match res.parse(&written) {
            Ok(httparse::Status::Complete(n)) => assert_eq!(n, written.len()),
            other => panic!("the client head does not read back: {other:?}"),
        }
        assert_eq!(res.code, Some(head.status));
        let got = lines(res.headers);
        let lengths = values(&got, "content-length");
        let codings = values(&got, "transfer-encoding");
        match &head.framing {
            Framing::Length(n) => {
                assert_eq!(lengths, [n.to_string().as_bytes()]);
                assert!(codings.is_empty());
            }
            Framing::Chunked(_) | Framing::UntilClose => {
                assert!(lengths.is_empty());
                assert_eq!(codings, [&b"chunked"[..]]);
            }
            Framing::Empty => {
                assert!(codings.is_empty());
                if head.status == 204 {
                    assert!(lengths.is_empty());
                } else {
                    assert!(lengths.len() <= 1);
                }
            }
        }
        let says_close = values(&got, "connection")
            .iter()
            .any(|v| v.eq_ignore_ascii_case(b"close"));
        assert_eq!(says_close, close);
    }
}

/// A body's framing: `data[0]` picks it (even: chunked; odd: a length from `data[1..3]`),
/// `data[3]` seeds the cuts; the rest is the body's connection bytes. Fed whole and fed in
/// pieces, the payload, the bytes used, the end and the error are the same.
pub fn h1_framing(data: &[u8]) {
    let pick = data.first().copied().unwrap_or(0);
    let len = u16::from_le_bytes([
        data.get(1).copied().unwrap_or(0),
        data.get(2).copied().unwrap_or(0),
    ]);
    let mut seed = u64::from(data.get(3).copied().unwrap_or(1)) | 1;
    let wire = data.get(4..).unwrap_or(&[]);
    let make = || {
        if pick % 2 == 0 {
            Framing::Chunked(h1::Chunked::default())
        } else {
            Framing::Length(u64::from(len))
        }
    };
    let whole = feed(&mut make(), wire, &[]);
    let mut cuts = Vec::new();
    let mut at = 0usize;
    while at < wire.len() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        at += 1 + (seed % 9) as usize;
        cuts.push(at);
    }
    assert_eq!(feed(&mut make(), wire, &cuts), whole, "cut at {cuts:?}");
}

type Outcome = Result<(Vec<u8>, usize, bool, Vec<u8>), h1::FramingError>;

fn feed(framing: &mut Framing, wire: &[u8], cuts: &[usize]) -> Outcome {
    let mut bounds = vec![0];
    bounds.extend(cuts.iter().copied().filter(|&c| c > 0 && c < wire.len()));
    bounds.push(wire.len());
    let (mut out, mut used) = (Vec::new(), 0);
    for w in bounds.windows(2) {
        let piece = &wire[w[0]..w[1]];
        let mut ranges = Vec::new();
        let s = framing.scan(piece, &mut ranges)?;
        for r in ranges {
            assert!(r.end <= s.used, "payload past the bytes used");
            out.extend_from_slice(&piece[r]);
        }
        used += s.used;
        if s.done {
            return Ok((out, used, true, framing.trailers().to_vec()));
        }
        assert_eq!(s.used, piece.len(), "bytes left over before the end");
    }
    Ok((out, used, false, Vec::new()))
}
