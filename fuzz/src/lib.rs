//! The fuzz harnesses: one function per target, each driving `correlator`'s public API with
//! bytes the fuzzer chose and panicking when an invariant breaks.
//!
//! This one file serves two builds: the libFuzzer targets in `fuzz_targets/` (this crate's
//! library) and the regression test `correlator/tests/fuzz_seeds.rs`, which includes it with
//! `#[path]` and replays every seed and fixed crash under plain `cargo test`. Including the file
//! keeps the harnesses on the public API only and adds no feature or public surface to the
//! library; it only needs `correlator`, `flate2`, `brotli`, `zstd`, `serde_json` and the test
//! kit's frames and permessage-deflate (`testkit` without its default `net` feature), which
//! the correlator's tests can use as they are.
//!
//! Input layouts (little-endian; a missing byte reads as 0, a length past the end is cut to the
//! end, so every byte string is a valid input):
//! - `http_exchange`: `flags u8`, `shape u8`, `seed u64`, `request len u32`, request, response.
//! - `ws_connection`: `ext u8`, `mode u8`, `seed u64`, then in built mode records
//!   `flags u8, len u16, payload`, in raw mode records `to_server u8, len u16, bytes`.
//! - `jsonrpc_lines`: `directions u64`, `seed u64`, then lines separated by `\n`.
//! - `mcp_mount`: `flags u8`, `seed u64`, `request len u32`, request, response (the response
//!   also replayed on a GET of the same session, so it may answer calls across exchanges).
//! - `body_scanners`, `trace_reader`, `ingest_line`: the bytes as they are (the readers take
//!   their chunking from the first byte).

use std::io::{BufRead, BufReader, Read, Write};

use correlator::observe::jsonrpc::{Direction, LineScanner, Observation, Observer};
use correlator::observe::{
    messages_request, responses_request, Api, ExchangeInfo, HttpObserver, WsObserver,
};
use correlator::trace::{event_line, TraceReader, HEADER};
use correlator::Record;
use correlator::{Event, EventKind};
use flate2::Compression;
use serde_json::Value;
use testkit::ws::{self, Deflater};

// ---------------------------------------------------------------------------------------------
// Input decoding and chunking.

/// Reads fuzzer bytes as a structured input.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }

    fn u32(&mut self) -> u32 {
        u32::from(self.u16()) | (u32::from(self.u16()) << 16)
    }

    fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }

    fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.0.split_at(n.min(self.0.len()));
        self.0 = rest;
        head
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Cuts a byte string into pieces whose sizes come from `seed`: often 1 byte, often a few,
/// sometimes large, so boundaries land inside every token. Seed 0 means "whole".
fn chunks(bytes: &[u8], seed: u64) -> Vec<&[u8]> {
    if seed == 0 {
        return vec![bytes];
    }
    let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut below = |n: usize| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % n.max(1) as u64) as usize
    };
    let mut out = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let n = match below(4) {
            0 => 1,
            1 => 1 + below(8),
            2 => 1 + below(64),
            _ => 1 + below(4096),
        }
        .min(rest.len());
        out.push(&rest[..n]);
        rest = &rest[n..];
    }
    out
}

/// Asserts that observer output (stamped 0, 1, 2, …) is a valid trace v2 that reads back equal,
/// with exactly one `stream_open` first and one `stream_close` last.
fn assert_valid_trace(events: &[EventKind]) {
    assert!(
        matches!(events.first(), Some(EventKind::StreamOpen { .. })),
        "the first event is not stream_open: {events:?}"
    );
    assert!(
        matches!(events.last(), Some(EventKind::StreamClose { .. })),
        "the last event is not stream_close: {events:?}"
    );
    let closes = events
        .iter()
        .filter(|e| matches!(e, EventKind::StreamClose { .. }))
        .count();
    assert_eq!(closes, 1, "stream_close more than once: {events:?}");
    let stamped: Vec<Event> = events
        .iter()
        .enumerate()
        .map(|(i, kind)| Event {
            t: i as f64,
            kind: kind.clone(),
        })
        .collect();
    let mut text = format!("{HEADER}\n");
    for ev in &stamped {
        text.push_str(&event_line(ev));
    }
    match correlator::trace::read_all(text.as_bytes(), "observer output") {
        Ok(back) => assert_eq!(back, stamped, "the trace does not read back equal"),
        Err(e) => panic!("observer output is not a valid trace: {e}\n{text}"),
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP exchanges (`sse`, `responses`).

/// Content-Encoding names the harness can produce (index 5 is one no decoder knows).
const ENCODINGS: [Option<&str>; 6] = [
    None,
    Some("gzip"),
    Some("deflate"),
    Some("br"),
    Some("zstd"),
    Some("x-unknown"),
];

/// Encodes `plain` with a known Content-Encoding (`None`: unchanged).
fn encode(coding: Option<&str>, plain: &[u8]) -> Vec<u8> {
    use flate2::Compression;
    match coding {
        Some("gzip") => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), Compression::fast());
            e.write_all(plain).expect("writing to a Vec");
            e.finish().expect("writing to a Vec")
        }
        Some("deflate") => {
            let mut e = flate2::write::ZlibEncoder::new(Vec::new(), Compression::fast());
            e.write_all(plain).expect("writing to a Vec");
            e.finish().expect("writing to a Vec")
        }
        Some("br") => {
            let mut out = Vec::new();
            {
                let mut w = brotli::CompressorWriter::new(&mut out, 4096, 1, 18);
                w.write_all(plain).expect("writing to a Vec");
            }
            out
        }
        Some("zstd") => zstd::stream::encode_all(plain, 1).expect("zstd into a Vec"),
        _ => plain.to_vec(),
    }
}

/// One exchange as the relay would drive it.
struct Exchange<'a> {
    api: Api,
    req_encoding: Option<&'a str>,
    req_body: &'a [u8],
    /// Interim and final statuses, in order.
    statuses: &'a [u16],
    content_type: Option<&'a str>,
    resp_encoding: Option<&'a str>,
    resp_body: &'a [u8],
}

impl Exchange<'_> {
    fn run(&self, seed: u64) -> Vec<EventKind> {
        let mut out = Vec::new();
        let info = ExchangeInfo {
            stream: "s1".into(),
            api: self.api,
            client: correlator::Client::Codex,
            thread: Some("th1".into()),
        };
        let mut obs = HttpObserver::new(info, self.req_encoding, &mut out);
        for c in chunks(self.req_body, seed) {
            obs.request_chunk(c, &mut out);
        }
        obs.request_end(&mut out);
        for status in self.statuses {
            obs.response_head(*status, self.content_type, self.resp_encoding, &mut out);
        }
        for c in chunks(self.resp_body, seed.rotate_left(17)) {
            obs.response_chunk(c, &mut out);
        }
        obs.close(&mut out);
        obs.close(&mut out); // idempotent
        assert_valid_trace(&out);
        out
    }
}

/// `sse` and `responses`: one HTTP exchange through [`HttpObserver`].
///
/// Encoded mode (flag bit 6 clear): the fuzzer's request and response bodies are plain text; the
/// harness compresses them with the chosen Content-Encodings and feeds them in seeded chunks.
/// The events must equal those of the plain bodies fed whole, unencoded: decoding and chunking
/// change nothing. Raw mode: the bytes go in as they are under the chosen encodings (so the
/// decoders see garbage); the output must be a valid trace, and with identity encodings equal
/// to the whole feed.
pub fn http_exchange(api: Api, data: &[u8]) {
    let mut input = Input(data);
    let flags = input.byte();
    let shape = input.byte();
    let seed = input.u64();
    let req_len = input.u32() as usize;
    let req_body = input.take(req_len);
    let resp_body = input.0;

    let req_enc = ENCODINGS[usize::from(flags & 7) % ENCODINGS.len()];
    let resp_enc = ENCODINGS[usize::from((flags >> 3) & 7) % ENCODINGS.len()];
    let raw = flags & 0x40 != 0;
    let content_type = [
        Some("text/event-stream"),
        Some("text/event-stream; charset=utf-8"),
        Some("application/json"),
        Some("Text/Event-Stream"),
        Some("text/plain"),
        None,
    ][usize::from(shape & 7) % 6];
    let statuses: &[u16] =
        [&[200][..], &[100, 200], &[201], &[500], &[200, 404]][usize::from(shape >> 3) % 5];

    if raw {
        let ex = Exchange {
            api,
            req_encoding: req_enc,
            req_body,
            statuses,
            content_type,
            resp_encoding: resp_enc,
            resp_body,
        };
        let chunked = ex.run(seed);
        let whole = ex.run(0);
        if req_enc.is_none() && resp_enc.is_none() {
            assert_eq!(chunked, whole, "chunking changed the events");
        }
        return;
    }
    let known = |e: Option<&'static str>| if e == Some("x-unknown") { None } else { e };
    let (req_enc, resp_enc) = (known(req_enc), known(resp_enc));
    let req_encoded = encode(req_enc, req_body);
    let resp_encoded = encode(resp_enc, resp_body);
    let encoded = Exchange {
        api,
        req_encoding: req_enc,
        req_body: &req_encoded,
        statuses,
        content_type,
        resp_encoding: resp_enc,
        resp_body: &resp_encoded,
    }
    .run(seed);
    let plain = Exchange {
        api,
        req_encoding: None,
        req_body,
        statuses,
        content_type,
        resp_encoding: None,
        resp_body,
    }
    .run(0);
    assert_eq!(
        encoded, plain,
        "encoding {req_enc:?}/{resp_enc:?} and chunking changed the events"
    );
}

// ---------------------------------------------------------------------------------------------
// WebSocket connections (`ws_frames`).

/// `Sec-WebSocket-Extensions` values the harness negotiates.
const EXTENSIONS: [Option<&str>; 7] = [
    None,
    Some("permessage-deflate"),
    Some("permessage-deflate; client_no_context_takeover"),
    Some("permessage-deflate; server_no_context_takeover; client_max_window_bits=15"),
    Some("permessage-deflate; client_no_context_takeover; server_no_context_takeover"),
    Some("permessage-deflate; server_max_window_bits=10"),
    Some("x-webkit-deflate-frame"),
];

/// One message of a built connection.
struct WsMessage<'a> {
    to_server: bool,
    /// Opcode 1 text, 2 binary, 8 close, 9 ping, 10 pong.
    opcode: u8,
    /// Frames a data message is cut into (1..=4).
    fragments: usize,
    compress: bool,
    /// A ping between the fragments.
    ping_inside: bool,
    payload: &'a [u8],
}

/// Runs byte runs (direction, bytes) through a [`WsObserver`], each run in seeded chunks.
fn ws_run(extensions: Option<&str>, runs: &[(bool, Vec<u8>)], seed: u64) -> Vec<EventKind> {
    let mut out = Vec::new();
    let info = ExchangeInfo {
        stream: "w1".into(),
        api: Api::Responses,
        client: correlator::Client::Codex,
        thread: Some("th1".into()),
    };
    let mut obs = WsObserver::new(info, extensions, &mut out);
    for (i, (to_server, bytes)) in runs.iter().enumerate() {
        let s = if seed == 0 {
            0
        } else {
            seed.wrapping_add(i as u64) | 1
        };
        for c in chunks(bytes, s) {
            if *to_server {
                obs.client_bytes(c, &mut out);
            } else {
                obs.server_bytes(c, &mut out);
            }
        }
    }
    obs.close(&mut out);
    obs.close(&mut out);
    assert_valid_trace(&out);
    out
}

/// Joins consecutive pieces that travel the same way (chunks then straddle frame boundaries).
fn join_runs(pieces: Vec<(bool, Vec<u8>)>) -> Vec<(bool, Vec<u8>)> {
    let mut runs: Vec<(bool, Vec<u8>)> = Vec::new();
    for (dir, bytes) in pieces {
        match runs.last_mut() {
            Some((d, b)) if *d == dir => b.extend_from_slice(&bytes),
            _ => runs.push((dir, bytes)),
        }
    }
    runs
}

/// `ws_frames`: one WebSocket connection through [`WsObserver`].
///
/// Built mode (mode bit 0 clear): the fuzzer chooses messages; the harness frames them the way
/// a real peer may (client frames masked, data messages fragmented, pings between fragments,
/// compressed under permessage-deflate with or without context takeover) and feeds them in
/// seeded chunks. The events must equal those of the same messages sent as single unmasked,
/// uncompressed frames on a connection without extensions. Raw mode: the fuzzer writes the
/// bytes of each direction itself; the output must be a valid trace that chunking does not
/// change.
pub fn ws_connection(data: &[u8]) {
    let mut input = Input(data);
    let ext = EXTENSIONS[usize::from(input.byte()) % EXTENSIONS.len()];
    let mode = input.byte();
    let seed = input.u64() | 1;
    if mode & 1 == 1 {
        let mut pieces = Vec::new();
        while !input.is_empty() {
            let to_server = input.byte() & 1 == 1;
            let len = usize::from(input.u16());
            pieces.push((to_server, input.take(len).to_vec()));
        }
        let runs = join_runs(pieces);
        let chunked = ws_run(ext, &runs, seed);
        let whole = ws_run(ext, &runs, 0);
        assert_eq!(chunked, whole, "chunking changed the events");
        return;
    }

    let pmd = correlator::observe::negotiated(ext).ok().flatten();
    let mut messages = Vec::new();
    while !input.is_empty() {
        let flags = input.byte();
        let len = usize::from(input.u16() & 0x3fff);
        let payload = input.take(len);
        let opcode = [1, 1, 1, 1, 2, 8, 9, 10][usize::from(flags >> 5)];
        messages.push(WsMessage {
            to_server: flags & 1 == 1,
            opcode,
            fragments: 1 + usize::from((flags >> 1) & 3),
            compress: flags & 8 != 0,
            ping_inside: flags & 16 != 0,
            payload,
        });
    }
    // Nothing may follow a close frame in its direction; the decoder ignores what does, and so
    // does the reference below.
    let mut closed = [false, false];
    messages.retain(|m| {
        let dir = usize::from(m.to_server);
        let keep = !closed[dir];
        if m.opcode == 8 {
            closed[dir] = true;
        }
        keep
    });

    let mut deflaters = pmd.map(|p| {
        (
            Deflater::new(Compression::fast(), !p.client_no_context_takeover),
            Deflater::new(Compression::fast(), !p.server_no_context_takeover),
        )
    });
    let mut mask_rng = seed;
    let mut built = Vec::new();
    let mut plain = Vec::new();
    for m in &messages {
        let control = m.opcode >= 8;
        // Control payloads are at most 125 bytes (RFC 6455 §5.5).
        let payload = if control {
            &m.payload[..m.payload.len().min(125)]
        } else {
            m.payload
        };
        let mut mask = || {
            mask_rng = mask_rng.rotate_left(13) ^ 0x0005_DEEC_E66D;
            m.to_server.then(|| (mask_rng as u32).to_le_bytes())
        };
        plain.push((
            m.to_server,
            ws::encode(ws::header(true, false, m.opcode, None), payload),
        ));
        if control {
            built.push((
                m.to_server,
                ws::encode(ws::header(true, false, m.opcode, mask()), payload),
            ));
            continue;
        }
        let (rsv1, body) = match deflaters.as_mut() {
            Some((client, server)) if m.compress => {
                let d = if m.to_server { client } else { server };
                (true, d.message(payload))
            }
            _ => (false, payload.to_vec()),
        };
        let step = body.len().div_ceil(m.fragments).max(1);
        let parts: Vec<&[u8]> = if body.is_empty() {
            vec![&[][..]]
        } else {
            body.chunks(step).collect()
        };
        let mut bytes = Vec::new();
        for (i, part) in parts.iter().enumerate() {
            let (first, last) = (i == 0, i + 1 == parts.len());
            let opcode = if first { m.opcode } else { 0 };
            bytes.extend(ws::encode(
                ws::header(last, rsv1 && first, opcode, mask()),
                part,
            ));
            if m.ping_inside && !last {
                bytes.extend(ws::encode(ws::header(true, false, 9, mask()), b"p"));
            }
        }
        built.push((m.to_server, bytes));
    }
    let got = ws_run(ext, &join_runs(built), seed);
    let want = ws_run(None, &join_runs(plain), 0);
    if ext == Some("x-webkit-deflate-frame") {
        // An extension the observer cannot follow: lost at once, whatever comes.
        assert!(
            got.iter().any(
                |e| matches!(e, EventKind::ObservationLost { reason, .. } if reason == "frame")
            ),
            "an unknown extension was followed: {got:?}"
        );
        return;
    }
    assert_eq!(
        got, want,
        "framing, masking or compression under {ext:?} changed the events"
    );
}

// ---------------------------------------------------------------------------------------------
// Request-body scanners (`body`).

fn string_field(v: &Value, k: &str) -> Option<String> {
    v.get(k).and_then(Value::as_str).map(str::to_string)
}

/// The ids `pick` finds in a "string, null or array of objects" value (the reference for the
/// streaming visitors in `observe::body`).
fn reference_ids(v: Option<&Value>, pick: impl Fn(&Value) -> Option<String>) -> Vec<String> {
    match v {
        Some(Value::Array(items)) => items
            .iter()
            .filter(|i| i.is_object())
            .filter_map(pick)
            .collect(),
        _ => Vec::new(),
    }
}

/// `body`: both request-body scanners over the same bytes. Whenever a scanner accepts a body
/// that also parses as a `serde_json::Value`, its answer must equal the one read from the value
/// (the scanners skip what they do not need without building values; they must not skip
/// differently). Surrounding whitespace changes nothing.
pub fn body_scanners(data: &[u8]) {
    let value: Option<Value> = serde_json::from_slice(data).ok();
    let padded = [b" \n", data, b"\t\r\n "].concat();

    let messages = messages_request(data);
    assert_eq!(
        messages.is_ok(),
        messages_request(&padded).is_ok(),
        "whitespace changed the messages scan"
    );
    if let (Ok(facts), Some(v)) = (&messages, &value) {
        assert_eq!(facts.previous_response, None);
        let mut want = Vec::new();
        if let Some(Value::Array(msgs)) = v.get("messages") {
            for m in msgs {
                if m.get("role").and_then(Value::as_str) == Some("user") {
                    want = reference_ids(m.get("content"), |b| {
                        (string_field(b, "type").as_deref() == Some("tool_result"))
                            .then(|| string_field(b, "tool_use_id"))
                            .flatten()
                    });
                }
            }
        }
        assert_eq!(
            facts.outputs, want,
            "messages_request disagrees with the value"
        );
    }

    let responses = responses_request(data);
    assert_eq!(
        responses.as_ref().ok(),
        responses_request(&padded).as_ref().ok(),
        "whitespace changed the responses scan"
    );
    if let (Ok(req), Some(v)) = (&responses, &value) {
        assert_eq!(req.kind, string_field(v, "type"));
        assert_eq!(req.lane, string_field(v, "stream_id"));
        assert_eq!(
            req.facts.previous_response,
            string_field(v, "previous_response_id")
        );
        let want = reference_ids(v.get("input"), |i| {
            matches!(
                string_field(i, "type").as_deref(),
                Some("function_call_output" | "custom_tool_call_output")
            )
            .then(|| string_field(i, "call_id"))
            .flatten()
        });
        assert_eq!(
            req.facts.outputs, want,
            "responses_request disagrees with the value"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Trace and records readers (`trace_reader`).

/// A reader that hands out at most a seeded number of bytes per `read`.
struct Trickle<'a> {
    data: &'a [u8],
    rng: u64,
}

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let n = (1 + (self.rng % 37) as usize)
            .min(buf.len())
            .min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

/// The bytes through a small buffer fed by a [`Trickle`], so lines arrive in pieces.
fn trickled(data: &[u8], seed: u8) -> impl BufRead + '_ {
    BufReader::with_capacity(
        1 + usize::from(seed % 16),
        Trickle {
            data,
            rng: u64::from(seed) | 0x100,
        },
    )
}

/// `trace_reader`: the strict trace reader (v1 and v2) and the records v1 reader over arbitrary bytes.
/// Reading in pieces gives the same result as reading at once; every event and record read
/// is written back by the writer and reads back equal.
pub fn trace_reader(data: &[u8]) {
    let seed = data.first().copied().unwrap_or(0);

    let whole: Vec<_> = TraceReader::new(data, "fuzz").collect();
    let pieces: Vec<_> = TraceReader::new(trickled(data, seed), "fuzz").collect();
    assert_eq!(whole, pieces, "the trace reader depends on read sizes");
    let events: Vec<Event> = whole.into_iter().map_while(Result::ok).collect();
    let mut text = format!("{HEADER}\n");
    for ev in &events {
        text.push_str(&event_line(ev));
    }
    match correlator::trace::read_all(text.as_bytes(), "rewritten") {
        Ok(back) => assert_eq!(back, events, "events do not survive write and read"),
        Err(e) => panic!("the writer wrote a trace its reader refuses: {e}\n{text}"),
    }

    let whole: Vec<_> = correlator::records::RecordReader::new(data, "fuzz").collect();
    let pieces: Vec<_> =
        correlator::records::RecordReader::new(trickled(data, seed), "fuzz").collect();
    assert_eq!(whole, pieces, "the records reader depends on read sizes");
    let records: Vec<Record> = whole.into_iter().map_while(Result::ok).collect();
    let text: String = records.iter().map(Record::to_line).collect();
    match correlator::records::read_all(text.as_bytes(), "rewritten") {
        Ok(back) => assert_eq!(back, records, "records do not survive write and read"),
        Err(e) => panic!("the writer wrote records their reader refuses: {e}\n{text}"),
    }
}

// ---------------------------------------------------------------------------------------------
// The ingest line parser (`ingest`).

/// `ingest`: one wrapper→relay line. A line that parses is written back as one line that parses
/// to the same report; the parse does not depend on a trailing `\r` or surrounding blanks being
/// JSON whitespace.
pub fn ingest_line(data: &[u8]) {
    use correlator::ingest::Report;
    let parsed = Report::parse(data);
    if let Ok(report) = &parsed {
        let line = report.to_line();
        assert!(
            line.ends_with('\n') && !line[..line.len() - 1].contains('\n'),
            "to_line is not one line: {line:?}"
        );
        assert_eq!(
            Report::parse(&line.as_bytes()[..line.len() - 1]).as_ref(),
            Ok(report),
            "a report does not survive to_line and parse"
        );
    }
    let padded = [b" ", data, b" \r"].concat();
    assert_eq!(Report::parse(&padded), parsed, "blanks changed the parse");
}

// ---------------------------------------------------------------------------------------------
// The wrapper's JSON-RPC observer (`jsonrpc`).

/// Longest line compared against the whole-value reading: below every cap of the skeleton
/// (strings and numbers of 4096 bytes, keys of 256, skeletons of 64 KiB), where the skeleton
/// must not change the answer.
const UNCAPPED_LINE: usize = 250;

/// `jsonrpc`: lines in both directions through [`LineScanner`]s fed in seeded pieces, the way the
/// wrapper's pumps feed them, and one [`Observer`]. The observations must equal those of the
/// whole lines through [`Observer::line`]; for short lines (below every cap) they must also
/// equal those of an observer reading the full JSON instead of its skeleton (as long as every
/// line is JSON or digests to nothing usable). Every end belongs to
/// a started call, and `lose_all` ends exactly the calls still running.
pub fn jsonrpc_lines(data: &[u8]) {
    let mut input = Input(data);
    let directions = input.u64();
    let seed = input.u64() | 1;
    let text = input.0;
    let lines: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
    // The last piece has no `\n`: the wrapper never observes an unfinished line.
    let (finished, unfinished) = lines.split_at(lines.len() - 1);
    let dir_of = |i: usize| {
        if directions >> (i % 64) & 1 == 1 {
            Direction::ServerToClient
        } else {
            Direction::ClientToServer
        }
    };

    let mut scanners = [LineScanner::new(), LineScanner::new()];
    let mut pieces_obs = Observer::new();
    let mut pieces_out = Vec::new();
    let mut whole_obs = Observer::new();
    let mut whole_out = Vec::new();
    let mut full_obs = Observer::new();
    let mut full_out = Vec::new();
    let mut comparable = true;
    for (i, line) in finished.iter().enumerate() {
        let dir = dir_of(i);
        let t = i as u64 * 10;
        let scanner = &mut scanners[usize::from(dir == Direction::ServerToClient)];
        for piece in chunks(line, seed.wrapping_add(i as u64) | 1) {
            scanner.push(piece);
        }
        let json = serde_json::from_slice::<Value>(line).is_ok();
        let skeleton = scanner.finish();
        // The scanner checks structure, not every token it skips (escapes, literals and control
        // characters inside dropped subtrees): a line that is not JSON may still digest to a
        // usable skeleton. Such lines take no part in the comparison with the whole JSON.
        let usable = skeleton
            .as_ref()
            .is_some_and(|s| serde_json::from_slice::<Value>(s).is_ok());
        if json {
            assert!(
                skeleton.is_none() || usable,
                "the skeleton of a JSON line is not JSON"
            );
        }
        if let Some(skeleton) = &skeleton {
            pieces_obs.skeleton(dir, skeleton, t, &mut pieces_out);
        }
        whole_obs.line(dir, line, t, &mut whole_out);
        full_obs.skeleton(dir, line, t, &mut full_out);
        comparable &= line.len() <= UNCAPPED_LINE && (json || !usable);
    }
    for piece in chunks(unfinished[0], seed) {
        scanners[0].push(piece);
    }
    assert_eq!(
        pieces_out, whole_out,
        "feeding a line in pieces changed the observations"
    );
    if comparable {
        assert_eq!(
            whole_out, full_out,
            "the skeleton answered differently from the whole JSON"
        );
    }

    let running = pieces_obs.running();
    let end_t = finished.len() as u64 * 10;
    pieces_obs.lose_all(end_t, &mut pieces_out);
    assert_eq!(pieces_obs.running(), 0);
    let mut open = std::collections::HashMap::new();
    for o in &pieces_out {
        match o {
            Observation::Start(call) => {
                assert!(
                    open.insert(call.seq, call.clone()).is_none(),
                    "seq {} started twice",
                    call.seq
                );
            }
            Observation::End { call, end, .. } => {
                // The end is the same call as its start; a Multi Round-Trip call has counted
                // its rounds since, and its retries may have filled hints the first lacked.
                let start = open.remove(&call.seq).expect("an end without its start");
                assert_eq!(
                    (&start.tool, start.start, start.rounds),
                    (&call.tool, call.start, 1),
                    "an end that is not its start's call"
                );
                assert!(call.rounds >= 1, "a call of no rounds");
                assert!(
                    call.input_wait <= *end - call.start,
                    "waited on the client longer than the call ran"
                );
                assert!(*end >= call.start, "a call ended before it started");
            }
        }
    }
    assert!(open.is_empty(), "lose_all left {} calls open", open.len());
    let lost_at_end = pieces_out
        .iter()
        .rev()
        .take_while(|o| matches!(o, Observation::End { end, .. } if *end == end_t))
        .count();
    assert_eq!(
        lost_at_end, running,
        "lose_all did not end exactly the running calls"
    );
}

// ---------------------------------------------------------------------------------------------
// The MCP mount observer (`mcp_mount`).

/// Drives `observe::mcp_http::McpMount` through a POST with `request` as its body and
/// `response` as its answer, then a GET of the same session answering with `response` again,
/// a `notifications/cancelled` POST and a stop. `flags`: bit 0 JSON or SSE answers, bits 1-2
/// the protocol revision, bits 3-4 how the POST ended, bit 5 a 4xx status.
fn mcp_mount_run(
    flags: u8,
    request: &[&[u8]],
    response: &[&[u8]],
) -> Vec<correlator::observe::mcp_http::McpEvent> {
    use correlator::observe::mcp_http::{ExchangeEnd, HttpMethod, McpMount, RequestHead};
    let content_type = if flags & 1 == 0 {
        "text/event-stream"
    } else {
        "application/json"
    };
    let version = match flags >> 1 & 3 {
        0 => None,
        1 => Some("2025-11-25"),
        2 => Some("2026-07-28"),
        _ => Some("2024-11-05"),
    };
    let how = match flags >> 3 & 3 {
        0 => ExchangeEnd::Complete,
        1 => ExchangeEnd::UpstreamBroke,
        _ => ExchangeEnd::ClientClosed,
    };
    let status = if flags & 32 == 0 { 200 } else { 400 };
    let head = |method| RequestHead {
        method,
        session_id: Some(b"s".as_slice()),
        protocol_version: version,
        content_encoding: None,
        host: Some("h"),
    };
    let mut m = McpMount::new("a", "i", 1000.0);
    let mut out = Vec::new();
    for round in 0..2 {
        let base = f64::from(round) * 100.0;
        let x = m.open(head(HttpMethod::Post));
        for p in request {
            m.handle_request_body(x, p);
        }
        m.handle_request_end(x, base + 1.0);
        m.handle_response_head(x, status, Some(content_type), None);
        for p in response {
            m.handle_response_body(x, p, base + 2.0);
        }
        m.handle_end(x, base + 3.0, how);
        let g = m.open(head(HttpMethod::Get));
        m.handle_request_end(g, base + 4.0);
        m.handle_response_head(g, 200, Some("text/event-stream"), None);
        for p in response {
            m.handle_response_body(g, p, base + 5.0);
        }
        m.handle_end(g, base + 6.0, ExchangeEnd::Complete);
        if let Some(t) = m.poll_timeout() {
            assert!(t.is_finite(), "a deadline that is not a time");
        }
        m.handle_timeout(base + 50.0);
        out.extend(std::iter::from_fn(|| m.poll_event()));
    }
    m.handle_stop(1000.0);
    out.extend(std::iter::from_fn(|| m.poll_event()));
    assert_eq!(m.running(), 0, "a call outlived the stop");
    out
}

pub fn mcp_mount(data: &[u8]) {
    use std::collections::HashMap;
    let mut input = Input(data);
    let flags = input.byte();
    let seed = input.u64() | 1;
    let len = input.u32() as usize;
    let request = input.take(len);
    let response = input.0;

    let whole = mcp_mount_run(flags, &[request], &[response]);
    let pieces = mcp_mount_run(
        flags,
        &chunks(request, seed),
        &chunks(response, seed ^ 0x5555),
    );
    assert_eq!(whole, pieces, "chunking changed the MCP mount's events");

    // Every end has its start, once; every start ends (the stop ends the rest); times agree;
    // the events make a trace its reader takes back unchanged.
    let mut open: HashMap<String, f64> = HashMap::new();
    let (mut started, mut ended) = (0, 0);
    let mut text = format!("{HEADER}\n");
    let mut last_t = 0.0f64;
    for ev in &whole {
        let t = ev.at.max(last_t);
        last_t = t;
        match &ev.kind {
            EventKind::McpStart {
                interval,
                start,
                transport,
                ..
            } => {
                assert_eq!(*transport, correlator::McpTransport::Http);
                assert!(ev.at >= *start);
                assert!(
                    open.insert(interval.clone(), *start).is_none(),
                    "started twice"
                );
                started += 1;
            }
            EventKind::McpInterval {
                interval,
                start,
                end,
                transport,
                ..
            } => {
                assert_eq!(*transport, correlator::McpTransport::Http);
                assert!(end >= start && ev.at >= *end);
                let s = open.remove(interval).expect("an end without its start");
                assert_eq!(s, *start, "an end whose start moved");
                ended += 1;
            }
            other => panic!("not an MCP event: {other:?}"),
        }
        text.push_str(&event_line(&Event {
            t,
            kind: ev.kind.clone(),
        }));
    }
    assert!(open.is_empty(), "a started call never ended");
    assert_eq!(started, ended);
    let back = correlator::trace::read_all(text.as_bytes(), "mcp").expect("a valid trace");
    assert_eq!(back.len(), whole.len());
}
