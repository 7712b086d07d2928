//! The harnesses of the `h1` crate (the relay's HTTP/1.1 head decisions and body framing):
//! one function per target, panicking when an invariant breaks.
//!
//! This file serves two builds, as `fuzz/src/lib.rs` does for the correlator: the libFuzzer
//! targets `h1_request`, `h1_response`, `h1_framing`, `h1_exchange` and `h1_tunnel` in
//! `h1/fuzz/fuzz_targets/`, and `h1/tests/fuzz_seeds.rs`, which includes it with `#[path]`
//! and replays every seed, every fixed finding and a stream of generated inputs under plain
//! `cargo test`. It uses `h1`'s
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
            Parsed::Handover => assert!(cut > h1::MAX_HEAD, "handed over at {cut} of {len}"),
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
            ResponseParsed::Bad => assert!(cut > h1::MAX_RESPONSE_HEAD),
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
            let trailers = framing.trailers();
            // The trailer section goes to the client as received: only CRLF-ended lines,
            // no CR or LF anywhere else, never a folded line.
            assert!(trailers.is_empty() || trailers.ends_with(b"\r\n"));
            for line in trailers.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                let field = line
                    .strip_suffix(b"\r")
                    .expect("a trailer line ends in CRLF");
                assert!(!field.contains(&b'\r'), "a CR inside a trailer line");
                assert!(!field.starts_with(b" ") && !field.starts_with(b"\t"));
            }
            return Ok((out, used, true, trailers.to_vec()));
        }
        assert_eq!(s.used, piece.len(), "bytes left over before the end");
    }
    Ok((out, used, false, Vec::new()))
}

/// Bytes `Framing` finds as payload in `wire` (a response head, then its body) and whether
/// the body ended; `closed`: the connection ends after `wire`.
fn response_payload(wire: &[u8], closed: bool) -> Option<(Vec<u8>, bool)> {
    let mut at = 0;
    let mut head = loop {
        match parse_response(&wire[at..]) {
            ResponseParsed::Interim(n) => at += n,
            ResponseParsed::Complete(n, head) => {
                at += n;
                break head;
            }
            _ => return None,
        }
    };
    let mut ranges = Vec::new();
    let scanned = head.framing.scan(&wire[at..], &mut ranges).ok()?;
    let payload = ranges
        .iter()
        .flat_map(|r| wire[at + r.start..at + r.end].iter().copied())
        .collect();
    let done = scanned.done || (closed && matches!(head.framing, Framing::UntilClose));
    Some((payload, done))
}

/// A small deterministic generator for the schedule, seeded from the input.
struct Schedule(u64);

impl Schedule {
    fn next(&mut self, below: usize) -> usize {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % below.max(1)
    }
}

/// One exchange through the [`h1::Exchange`] machine, its bytes cut and its steps ordered
/// by a schedule drawn from the input: a request with a body of 0–7 bytes (and a smuggled
/// request behind it), the input's bytes as the upstream's answer. Whatever the order:
/// - the upstream gets exactly the request body, at most its length, never a byte of what
///   follows it, and the observer gets the same pieces;
/// - the exchange ends once, and nothing is written to either side after it;
/// - a response that ends `Done` reads back (by `h1` itself, from the head the client got)
///   as the payload the upstream's bytes carry, ending exactly where the client's bytes
///   end; the observer's copies are that payload; the upstream connection is reused only
///   if nothing followed the body; the client's only if it did not ask to close.
pub fn h1_exchange(data: &[u8]) {
    use bytes::BytesMut;
    use h1::{Exchange, Timeouts};
    use h1::{ExchangeEnd as End, ExchangeEvent as Event};
    use std::time::{Duration, Instant};

    let Some((&first, upstream)) = data.split_first() else {
        return;
    };
    let body_len = (first & 7) as usize;
    let close = first & 8 != 0;
    let seed = data.iter().fold(0x9E37_79B9_7F4A_7C15u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01B3)
    });
    let mut schedule = Schedule(seed | 1);
    let head = format!(
        "POST /x HTTP/1.1\r\nContent-Length: {body_len}\r\n{}\r\n",
        if close { "Connection: close\r\n" } else { "" }
    );
    let Parsed::Complete(_, request) = parse_request(head.as_bytes()) else {
        panic!("the harness's own request head is not taken");
    };
    let body = &b"abcdefg"[..body_len];
    let mut client_wire = body.to_vec();
    client_wire.extend_from_slice(b"GET /smuggled HTTP/1.1\r\n\r\n");

    let t0 = Instant::now();
    let mut now = t0;
    let timeouts = Timeouts {
        response: Duration::from_secs(100),
        client_body_idle: Duration::from_secs(30),
        upstream_body_idle: Duration::from_secs(50),
        send: Duration::from_secs(20),
    };
    let mut ex = Exchange::new(&request, timeouts, now);
    // The driver writes the head first (or, drawn here, is still connecting).
    if schedule.next(8) != 0 {
        ex.handle_upstream_written(now);
    }
    let (mut client_at, mut upstream_at) = (0, 0);
    let (mut client_buf, mut upstream_buf) = (BytesMut::new(), BytesMut::new());
    let (mut sent_up, mut told_up, mut to_client, mut copies) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut piece_owed = false;
    let mut upstream_closed = false;
    let mut ends = Vec::new();
    // An observer that copies (or one that stopped: then no copy is made).
    let want_copies = schedule.next(4) != 0;
    for _ in 0..10_000 {
        while let Some(event) = ex.poll_event() {
            match event {
                Event::RequestBody(b) => told_up.extend_from_slice(&b),
                Event::End(end) => ends.push(end),
                Event::RequestEnd | Event::ResponseHead { .. } => {}
            }
        }
        if ex.is_ended() {
            break;
        }
        match schedule.next(8) {
            0 | 1 if ex.wants_request_body() && client_at < client_wire.len() => {
                let n = 1 + schedule.next(client_wire.len() - client_at);
                client_buf.extend_from_slice(&client_wire[client_at..client_at + n]);
                client_at += n;
                ex.handle_client_bytes(&mut client_buf, now);
            }
            2 => {
                if let Some(piece) = ex.poll_transmit_upstream() {
                    assert!(!piece_owed, "a second piece before the first was written");
                    sent_up.extend_from_slice(&piece);
                    piece_owed = true;
                } else if piece_owed {
                    ex.handle_upstream_written(now);
                    piece_owed = false;
                }
            }
            3 | 4 if ex.wants_upstream_read() && !upstream_closed => {
                if upstream_at < upstream.len() {
                    let n = 1 + schedule.next(upstream.len() - upstream_at);
                    upstream_buf.extend_from_slice(&upstream[upstream_at..upstream_at + n]);
                    upstream_at += n;
                    ex.handle_upstream_bytes(&mut upstream_buf, now);
                } else {
                    upstream_closed = true;
                    ex.handle_upstream_closed(false);
                }
            }
            5 if ex.has_transmit() => {
                let mut out = Vec::new();
                let copy = ex.poll_transmit(&mut out, want_copies);
                assert!(out.len() <= h1::MAX_PIECES);
                copies.extend(copy.iter().flat_map(|c| c.iter().copied()));
                for piece in &out {
                    to_client.extend_from_slice(piece);
                }
                if schedule.next(3) == 0 {
                    ex.handle_client_write_waits(now);
                }
                ex.handle_client_written(now);
            }
            6 => {
                now += Duration::from_secs(schedule.next(40) as u64);
                ex.handle_timeout(now);
            }
            7 if schedule.next(50) == 0 => ex.handle_client_closed(),
            _ => {}
        }
    }
    while let Some(event) = ex.poll_event() {
        if let Event::End(end) = event {
            ends.push(end);
        }
    }
    assert!(ends.len() <= 1, "ended twice: {ends:?}");
    assert!(
        body.starts_with(&sent_up),
        "the upstream got bytes that are not the body"
    );
    assert!(told_up.starts_with(&sent_up) && told_up.len() <= body_len);
    // The machine took a prefix of the body off the client's bytes and left the rest.
    assert_eq!(
        &client_buf[..],
        &client_wire[told_up.len()..client_at],
        "the client's bytes left are not what follows the body taken"
    );
    let Some(end) = ends.first() else {
        // Out of steps: nothing more to judge.
        return;
    };
    assert!(ex.poll_transmit_upstream().is_none() && !ex.has_transmit());
    if let End::Done {
        keep_client,
        reuse_upstream,
    } = *end
    {
        let (want, done) = response_payload(&upstream[..upstream_at], upstream_closed)
            .expect("a response that ends Done was a response");
        assert!(done, "Done before the upstream's body ended");
        let (got, got_done) =
            response_payload(&to_client, false).expect("the client's bytes read back");
        assert_eq!(got, want, "the client's payload is not the upstream's");
        assert!(got_done, "the client's body does not end");
        if want_copies {
            assert_eq!(copies, want, "the observer's copies are not the payload");
        } else {
            assert!(copies.is_empty());
        }
        assert!(!keep_client || (!close && told_up.len() == body_len));
        assert!(!reuse_upstream || upstream_buf.is_empty());
    }
}

/// The tunnel machine ([`h1::Tunnel`]) under an arbitrary interleaving of what its two sides
/// and the clock can do, read from `data` two bytes a step (an operation, its argument). The
/// harness plays the driver and both sides; after every step, and at the end, it checks:
/// - what each side is given to write is exactly the bytes read from the other, in order,
///   from the first byte not yet written (none lost, none twice);
/// - no read is allowed while bytes of that direction wait unwritten or unflushed;
/// - nothing is written before its read's stamp was taken, a copy follows its stamp, in the
///   order of the stamps, only once its write was tried, and holds the bytes read; copies of a
///   direction cover every byte written there;
/// - the machine ends, once, last, when the sides finish or its deadlines pass.
pub fn h1_tunnel(data: &[u8]) {
    use h1::{Direction, ReadEnd, Transmit, Tunnel, TunnelEnd as End, TunnelEvent as Event};
    use std::collections::VecDeque;
    use std::time::{Duration, Instant};

    const SEND: Duration = Duration::from_secs(60);
    const GRACE: Duration = Duration::from_secs(5);
    const IDLE: Duration = Duration::from_secs(20);

    /// One direction as the harness sees it.
    #[derive(Default)]
    struct Side {
        /// Every byte read, in order (each byte numbers its place, so a byte lost or sent
        /// twice shows).
        read: Vec<u8>,
        /// Every byte the writer took.
        written: Vec<u8>,
        /// Every byte handed over as a copy.
        copied: Vec<u8>,
        /// The bytes of the read in flight.
        chunk: Vec<u8>,
        /// Its write was tried (bytes taken, a wait, a failure, the flush).
        tried: bool,
        flushed: bool,
        read_end: Option<ReadEnd>,
        shut: bool,
    }

    struct Driver {
        tunnel: Tunnel,
        observed: bool,
        sides: [Side; 2],
        /// Stamps taken, not yet followed by their copy, in order: (direction, bytes).
        stamps: VecDeque<(Direction, Vec<u8>)>,
        /// The read in flight has been stamped.
        stamped: [bool; 2],
        ended: Option<(End, bool)>,
        now: Instant,
    }

    impl Driver {
        fn events(&mut self) {
            while let Some(event) = self.tunnel.poll_event() {
                assert!(self.ended.is_none(), "{event:?} after the end");
                match event {
                    Event::Stamp(dir) => {
                        assert!(self.observed, "a stamp in an unobserved tunnel");
                        let side = &self.sides[dir.index()];
                        assert!(!self.stamped[dir.index()], "stamped twice");
                        self.stamped[dir.index()] = true;
                        self.stamps.push_back((dir, side.chunk.clone()));
                    }
                    Event::Copy(dir, bytes) => {
                        assert!(self.observed, "a copy in an unobserved tunnel");
                        // In stamp order; at the end, stamps whose writes were never tried
                        // are dropped, so a later copy may pass them.
                        let at = if self.tunnel.is_ended() {
                            self.stamps.iter().position(|(d, _)| *d == dir)
                        } else {
                            Some(0)
                        };
                        let (stamped, chunk) = at
                            .and_then(|at| self.stamps.remove(at))
                            .expect("a copy with no stamp");
                        assert_eq!(stamped, dir, "a copy out of stamp order");
                        assert_eq!(&bytes[..], &chunk[..], "a copy of other bytes");
                        let side = &mut self.sides[dir.index()];
                        assert!(
                            side.tried || side.chunk != chunk,
                            "a copy before its write was tried"
                        );
                        side.copied.extend_from_slice(&bytes);
                    }
                    Event::Ended { why, failed } => self.ended = Some((why, failed)),
                }
            }
        }

        fn check(&self) {
            for dir in Direction::BOTH {
                let side = &self.sides[dir.index()];
                assert!(
                    side.read.starts_with(&side.written),
                    "written bytes not read"
                );
                if self.tunnel.wants_read(dir) {
                    assert_eq!(
                        side.written.len(),
                        side.read.len(),
                        "a read while bytes wait"
                    );
                    assert!(
                        side.flushed || side.chunk.is_empty(),
                        "a read before the flush"
                    );
                    assert!(side.read_end.is_none(), "a read after the end");
                }
                if let Some(Transmit::Write(bytes)) = self.tunnel.poll_transmit(dir) {
                    assert_eq!(
                        bytes,
                        &side.read[side.written.len()..],
                        "given to write: not the unwritten rest"
                    );
                    assert!(
                        !self.observed || self.stamped[dir.index()],
                        "unstamped write"
                    );
                }
                if self.observed {
                    assert!(
                        side.read.starts_with(&side.copied),
                        "copies: not the bytes read"
                    );
                }
                if self.ended.is_some() {
                    assert!(
                        !self.tunnel.wants_read(dir) && self.tunnel.poll_transmit(dir).is_none()
                    );
                }
            }
        }

        fn read(&mut self, dir: Direction, len: usize) {
            if !self.tunnel.wants_read(dir) {
                return;
            }
            let side = &mut self.sides[dir.index()];
            let start = side.read.len();
            let chunk: Vec<u8> = (start..start + len).map(|i| (i % 251) as u8).collect();
            side.read.extend_from_slice(&chunk);
            side.chunk = chunk.clone();
            side.tried = false;
            side.flushed = false;
            self.stamped[dir.index()] = false;
            self.tunnel.handle_read(dir, chunk.into());
        }

        /// One step of `dir`'s writer; `take`: how much of a write it takes (`None`: it
        /// waits; `Some(0)`: it fails).
        fn write(&mut self, dir: Direction, take: Option<usize>) {
            let Some(transmit) = self.tunnel.poll_transmit(dir) else {
                return;
            };
            let side = &mut self.sides[dir.index()];
            let Some(take) = take else {
                if !matches!(transmit, Transmit::Shutdown) {
                    side.tried = true;
                }
                self.tunnel.handle_write_waits(dir, self.now);
                return;
            };
            match transmit {
                Transmit::Write(bytes) => {
                    let n = take.min(bytes.len());
                    side.written.extend_from_slice(&bytes[..n]);
                    side.tried = true;
                    self.tunnel.handle_written(dir, n);
                }
                Transmit::Flush => {
                    side.tried = true;
                    side.flushed = true;
                    self.tunnel.handle_flushed(dir);
                }
                Transmit::Shutdown => {
                    assert_eq!(
                        side.written.len(),
                        side.read.len(),
                        "shut with bytes unwritten"
                    );
                    assert_eq!(
                        side.read_end,
                        Some(ReadEnd::Clean),
                        "shut without a clean end"
                    );
                    side.shut = true;
                    self.tunnel.handle_shut(dir);
                }
            }
        }

        fn read_end(&mut self, dir: Direction, end: ReadEnd) {
            if end == ReadEnd::Clean && !self.tunnel.wants_read(dir) {
                return;
            }
            self.sides[dir.index()].read_end.get_or_insert(end);
            self.tunnel.handle_read_end(dir, end, self.now);
        }

        fn advance(&mut self, by: Duration) {
            self.events();
            let before = self.ended.is_some();
            let deadline = self.tunnel.poll_timeout();
            self.now += by;
            self.tunnel.handle_timeout(self.now);
            self.events();
            if !before && self.ended.is_some() {
                assert!(
                    deadline.is_some_and(|d| d <= self.now),
                    "ended before its deadline"
                );
            }
        }
    }

    let Some((&first, ops)) = data.split_first() else {
        return;
    };
    let observed = first & 1 == 1;
    let now = Instant::now();
    let mut tunnel = Tunnel::new(observed, SEND, GRACE);
    if first & 2 == 2 {
        tunnel = tunnel.with_idle_timeout(IDLE, now);
    }
    let mut d = Driver {
        tunnel,
        observed,
        sides: Default::default(),
        stamps: VecDeque::new(),
        stamped: [false; 2],
        ended: None,
        now,
    };
    for op in ops.chunks(2) {
        let (code, arg) = (op[0], op.get(1).copied().unwrap_or(0));
        let dir = if code & 0x80 == 0 {
            Direction::Up
        } else {
            Direction::Down
        };
        match code & 0x7f {
            0..=29 => d.read(dir, 1 + usize::from(arg) % 24),
            30..=69 => d.write(dir, Some(1 + usize::from(arg) % 24)),
            70..=89 => d.write(dir, None),
            90..=99 => d.events(),
            100..=109 => d.read_end(dir, ReadEnd::Clean),
            110..=111 => d.read_end(dir, ReadEnd::Broken),
            112 => d.write(dir, Some(0)),
            _ => d.advance(Duration::from_millis(u64::from(arg) * 500)),
        }
        d.check();
    }
    // The sides finish: every write taken, both ends clean. The machine must end.
    for _ in 0..8 {
        d.events();
        for dir in Direction::BOTH {
            for _ in 0..4 {
                d.write(dir, Some(usize::MAX));
            }
            d.read_end(dir, ReadEnd::Clean);
        }
        d.events();
        d.check();
    }
    if d.ended.is_none() {
        // Not ended by the sides: only a deadline (a grace already running) can end it.
        d.advance(GRACE + SEND);
    }
    d.check();
    let (why, failed) = d.ended.expect("the tunnel never ended");
    assert!(d.tunnel.poll_event().is_none(), "an event after the end");
    if why == End::Idle {
        assert!(!failed, "an idle end is no failure");
    }
    if why == End::Clean {
        assert!(!failed);
        for side in &d.sides {
            assert_eq!(side.written, side.read, "a clean end with bytes unwritten");
            assert!(side.shut, "a clean end not passed on");
        }
    }
    if observed {
        for side in &d.sides {
            assert!(
                side.copied.len() >= side.written.len(),
                "bytes written were never copied"
            );
        }
    }
}

/// A request path (the input as text, cut at `?`, after a `/`): one [`h1::has_dot_segment`]
/// lets through stays under the mount's base path for an upstream that decodes it once, drops
/// control bytes, reads `\` as `/`, drops `;` parameters and then resolves dot segments (RFC 3986 §5.2.4, written
/// out below as the RFC gives it); [`h1::route_path`] leaves no `//` and no `;`, and routes a
/// path without encodings the same twice.
pub fn h1_target(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let path = format!("/{}", text.split(['?', '#']).next().unwrap_or(""));
    let routed = h1::route_path(&path);
    assert!(
        !routed.contains("//") && !routed.contains(';'),
        "{routed:?}"
    );
    // Decoding is once only (`%%36d` is `%6d` to an upstream, not `m`), so only a path
    // without encodings routes the same twice.
    if !path.contains('%') {
        assert_eq!(
            h1::route_path(&routed),
            routed,
            "route_path is not idempotent"
        );
    }
    if h1::has_dot_segment(&path) {
        return;
    }
    let joined = format!("/base{path}");
    let mut decoded = Vec::with_capacity(joined.len());
    let bytes = joined.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).and_then(|&b| hex(b)),
            bytes.get(i + 2).and_then(|&b| hex(b)),
        ) {
            (b'%', Some(h), Some(l)) => {
                decoded.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                decoded.push(b);
                i += 1;
            }
        }
    }
    // An upstream that drops control bytes after decoding (NUL, say) reads what is left.
    decoded.retain(|b| !b.is_ascii_control());
    let decoded = String::from_utf8_lossy(&decoded).replace('\\', "/");
    let unparam: Vec<&str> = decoded
        .split('/')
        .map(|seg| seg.split(';').next().unwrap_or(seg))
        .collect();
    let resolved = remove_dot_segments(&unparam.join("/"));
    assert!(
        resolved == "/base" || resolved.starts_with("/base/"),
        "{path:?} resolves to {resolved:?}"
    );
}

/// RFC 3986 §5.2.4, step by step.
fn remove_dot_segments(path: &str) -> String {
    let mut input = path.to_string();
    let mut output = String::new();
    while !input.is_empty() {
        if let Some(rest) = input.strip_prefix("../") {
            input = rest.to_string();
        } else if let Some(rest) = input.strip_prefix("./") {
            input = rest.to_string();
        } else if input.starts_with("/./") {
            input = input[2..].to_string();
        } else if input == "/." {
            input = "/".to_string();
        } else if input.starts_with("/../") || input == "/.." {
            input = format!("/{}", &input[if input == "/.." { 3 } else { 4 }..]);
            match output.rfind('/') {
                Some(i) => output.truncate(i),
                None => output.clear(),
            }
        } else if input == "." || input == ".." {
            input.clear();
        } else {
            let start = usize::from(input.starts_with('/'));
            let end = input[start..].find('/').map_or(input.len(), |i| i + start);
            output.push_str(&input[..end]);
            input = input[end..].to_string();
        }
    }
    output
}
