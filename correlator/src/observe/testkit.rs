//! Test support: drives observers with scripted byte streams, whole or in seeded random chunks,
//! and checks that what they emit is a valid trace v2.

use super::exchange::{Api, ExchangeInfo, HttpObserver, WsObserver};
use crate::event::{CallKind, Client, Event, EventKind, ResponseStatus, Transport};
use crate::trace::{event_line, read_all, HEADER};

/// Asserts that `events` (stamped 0, 1, 2, …) read back as a valid trace v2 and carry no
/// planted secret.
pub(crate) fn validate(events: &[EventKind]) {
    let mut s = format!("{HEADER}\n");
    for (i, kind) in events.iter().enumerate() {
        s.push_str(&event_line(&Event {
            t: i as f64,
            kind: kind.clone(),
        }));
        s.push('\n');
    }
    if let Err(e) = read_all(s.as_bytes(), "observer output") {
        panic!("not a valid trace: {e}\n{s}");
    }
    // Scenarios plant `SECRET` in prompts, arguments, results, outputs and header values:
    // none of it may reach an event.
    assert!(
        !s.contains("SECRET"),
        "a planted secret reached the events:\n{s}"
    );
}

/// A small deterministic generator (xorshift), so split tests need no extra crate.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub(crate) fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as usize
    }
}

/// `bytes` cut into chunks: whole with `None`, else random sizes (often tiny, sometimes large).
pub(crate) fn chunks(bytes: &[u8], seed: Option<u64>) -> Vec<&[u8]> {
    let Some(seed) = seed else {
        return vec![bytes];
    };
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let n = match rng.below(4) {
            0 => 1,
            1 => 1 + rng.below(8),
            2 => 1 + rng.below(64),
            _ => 1 + rng.below(2048),
        }
        .min(rest.len());
        out.push(&rest[..n]);
        rest = &rest[n..];
    }
    out
}

/// An SSE body from `(event name, data)` pairs, each ended by a blank line.
pub(crate) fn sse(events: &[(&str, &str)]) -> String {
    events
        .iter()
        .map(|(n, d)| format!("event: {n}\ndata: {d}\n\n"))
        .collect()
}

/// One scripted HTTP exchange.
pub(crate) struct HttpRun<'a> {
    pub api: Api,
    pub client: Client,
    pub thread: Option<&'a str>,
    pub req_encoding: Option<&'a str>,
    pub req_body: Vec<u8>,
    pub status: u16,
    pub content_type: &'a str,
    pub resp_encoding: Option<&'a str>,
    pub resp_body: Vec<u8>,
}

impl<'a> HttpRun<'a> {
    pub(crate) fn new(api: Api, req_body: &str, resp_body: &str) -> HttpRun<'a> {
        HttpRun {
            api,
            client: match api {
                Api::AnthropicMessages => Client::Claude,
                Api::Responses => Client::Codex,
            },
            thread: Some("th1"),
            req_encoding: None,
            req_body: req_body.as_bytes().to_vec(),
            status: 200,
            content_type: "text/event-stream; charset=utf-8",
            resp_encoding: None,
            resp_body: resp_body.as_bytes().to_vec(),
        }
    }

    /// Runs the exchange through an [`HttpObserver`] and validates what it emitted.
    pub(crate) fn run(&self, seed: Option<u64>) -> Vec<EventKind> {
        let mut out = Vec::new();
        let info = ExchangeInfo {
            stream: "s1".into(),
            api: self.api,
            client: self.client,
            thread: self.thread.map(str::to_string),
        };
        let mut obs = HttpObserver::new(info, self.req_encoding, &mut out);
        for c in chunks(&self.req_body, seed) {
            obs.request_chunk(c, &mut out);
        }
        obs.request_end(&mut out);
        obs.response_head(
            self.status,
            Some(self.content_type),
            self.resp_encoding,
            &mut out,
        );
        for c in chunks(&self.resp_body, seed.map(|s| s ^ 0xabcdef)) {
            obs.response_chunk(c, &mut out);
        }
        obs.close(&mut out);
        obs.close(&mut out); // idempotent
        validate(&out);
        out
    }
}

/// Which way a WebSocket message travels.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Dir {
    ToServer,
    ToClient,
}

/// Runs a scripted WebSocket connection through a [`WsObserver`]. Consecutive pieces in the
/// same direction are joined before chunking, so chunks also straddle frame boundaries.
pub(crate) fn run_ws(
    extensions: Option<&str>,
    script: &[(Dir, Vec<u8>)],
    seed: Option<u64>,
) -> Vec<EventKind> {
    let mut out = Vec::new();
    let info = ExchangeInfo {
        stream: "w1".into(),
        api: Api::Responses,
        client: Client::Codex,
        thread: Some("th1".into()),
    };
    let mut obs = WsObserver::new(info, extensions, &mut out);
    let mut runs: Vec<(Dir, Vec<u8>)> = Vec::new();
    for (dir, bytes) in script {
        match runs.last_mut() {
            Some((d, b)) if d == dir => b.extend_from_slice(bytes),
            _ => runs.push((*dir, bytes.clone())),
        }
    }
    for (i, (dir, bytes)) in runs.iter().enumerate() {
        for c in chunks(bytes, seed.map(|s| s.wrapping_add(i as u64))) {
            match dir {
                Dir::ToServer => obs.client_bytes(c, &mut out),
                Dir::ToClient => obs.server_bytes(c, &mut out),
            }
        }
    }
    obs.close(&mut out);
    obs.close(&mut out);
    validate(&out);
    out
}

// Expected-event constructors, so scenarios read like the traces they expect.

pub(crate) fn open(
    stream: &str,
    client: Client,
    transport: Transport,
    thread: Option<&str>,
) -> EventKind {
    EventKind::StreamOpen {
        stream: stream.into(),
        client,
        transport,
        thread: thread.map(Into::into),
        host: None,
    }
}

pub(crate) fn req(stream: &str, request: &str, prev: Option<&str>, outputs: &[&str]) -> EventKind {
    EventKind::Request {
        stream: stream.into(),
        request: request.into(),
        previous_response: prev.map(Into::into),
        outputs: outputs.iter().map(|s| s.to_string()).collect(),
    }
}

pub(crate) fn start(stream: &str, response: &str, request: Option<&str>) -> EventKind {
    EventKind::ResponseStart {
        stream: stream.into(),
        response: response.into(),
        request: request.map(Into::into),
        model: None,
    }
}

pub(crate) fn call(
    stream: &str,
    response: &str,
    call: &str,
    item: Option<&str>,
    name: &str,
    namespace: Option<&str>,
    kind: CallKind,
) -> EventKind {
    EventKind::ToolCall {
        stream: stream.into(),
        response: response.into(),
        call: call.into(),
        item: item.map(Into::into),
        name: name.into(),
        namespace: namespace.map(Into::into),
        kind,
    }
}

pub(crate) fn end(stream: &str, response: &str, status: ResponseStatus) -> EventKind {
    EventKind::ResponseEnd {
        stream: stream.into(),
        response: response.into(),
        status,
        usage: None,
        stop_reason: None,
    }
}

pub(crate) fn close(stream: &str) -> EventKind {
    EventKind::StreamClose {
        stream: stream.into(),
    }
}

pub(crate) fn lost(stream: &str, reason: &str) -> EventKind {
    EventKind::ObservationLost {
        stream: stream.into(),
        reason: reason.into(),
    }
}
