//! The observers the relay drives, one per stream (docs/design.md §2–§3): [`HttpObserver`] for one
//! HTTP exchange, [`WsObserver`] for one WebSocket connection, plus the route and client
//! classification that decides what is observed and under which thread.
//!
//! Every method takes arbitrary bytes and never fails or panics: whatever cannot be followed
//! becomes one `observation_lost`, after which only `stream_close` is emitted. Ids are raw.

use super::anthropic::{self, AnthropicStream};
use super::body::{self, MAX_BODY};
use super::budget::{clear_or_release, Account};
use super::decode::{DecodeError, Decoder};
use super::lost::Lost;
use super::peek;
use super::responses::{self, ResponsesStream};
use super::sse::{SseError, SseParser};
use super::ws_frames::{self, FrameDecoder, FrameError, Message};
use crate::event::{Client, EventKind, Transport};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    AnthropicMessages,
    Responses,
}

/// Who is on the other end of a stream, as the relay learned it from the request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExchangeInfo {
    /// The stream id (raw; the shell pseudonymizes it with the rest).
    pub stream: String,
    pub api: Api,
    pub client: Client,
    pub thread: Option<String>,
}

impl From<SseError> for Lost {
    fn from(_: SseError) -> Lost {
        Lost::OVERFLOW
    }
}
impl From<FrameError> for Lost {
    fn from(e: FrameError) -> Lost {
        Lost(e.reason())
    }
}
impl From<DecodeError> for Lost {
    fn from(e: DecodeError) -> Lost {
        Lost(e.reason())
    }
}

/// Which upstream routes are observed: `path` is the upstream path after the mount prefix was
/// removed, query string included or not. POST …/v1/messages → AnthropicMessages (not
/// count_tokens); POST …/responses (SSE) and GET …/responses with an Upgrade (`websocket=true`)
/// → Responses (not …/responses/compact, /models, etc.).
pub fn observed_route(method: &str, path: &str, websocket: bool) -> Option<Api> {
    let path = path.split(['?', '#']).next().unwrap_or("");
    let path = path.trim_end_matches('/');
    let last = path.rsplit('/').next().unwrap_or("");
    match (method, websocket) {
        ("POST", false) if path.ends_with("/v1/messages") => Some(Api::AnthropicMessages),
        ("POST", false) | ("GET", true) if last == "responses" && path.len() > last.len() => {
            Some(Api::Responses)
        }
        _ => None,
    }
}

/// Client kind and thread key from request headers (names lower-case; values read only for
/// thread ids). Claude: `x-claude-code-session-id`, plus `x-claude-code-agent-id` when present
/// (thread = `"<session>/<agent>"`); Codex: `thread-id`, else `conversation_id` / `conversation-id`
/// (older builds) — Codex is recognised by `originator`, `thread-id`, `session-id`/`session_id`
/// or a `codex` user-agent; otherwise `Client::Other` with thread None.
pub fn classify(api: Api, headers: &[(&str, &[u8])]) -> (Client, Option<String>) {
    let get = |name: &str| headers.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
    let text = |name: &str| {
        get(name)
            .and_then(|v| std::str::from_utf8(v).ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
    };
    let session = get("x-claude-code-session-id");
    let agent = get("x-claude-code-agent-id");
    // The API decides which host to test first; the other's markers still count (a host
    // behind a translating gateway may speak either API).
    let claude_first = api == Api::AnthropicMessages;
    let claude = || {
        (session.is_some() || agent.is_some()).then(|| {
            let thread =
                text("x-claude-code-session-id").map(|s| match text("x-claude-code-agent-id") {
                    Some(a) => format!("{s}/{a}"),
                    None => s.to_string(),
                });
            (Client::Claude, thread)
        })
    };
    let codex = || {
        let ua_codex = get("user-agent")
            .is_some_and(|ua| ua.windows(5).any(|w| w.eq_ignore_ascii_case(b"codex")));
        let marked = [
            "originator",
            "thread-id",
            "session-id",
            "session_id",
            "conversation_id",
            "conversation-id",
        ]
        .iter()
        .any(|n| get(n).is_some());
        (marked || ua_codex).then(|| {
            let thread = text("thread-id")
                .or_else(|| text("conversation_id"))
                .or_else(|| text("conversation-id"))
                .map(str::to_string);
            (Client::Codex, thread)
        })
    };
    let found = if claude_first {
        claude().or_else(codex)
    } else {
        codex().or_else(claude)
    };
    found.unwrap_or((Client::Other, None))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Live,
    Lost,
    Closed,
}

impl Phase {
    /// Live → Lost, emitting `observation_lost` once; false if it was not live.
    fn lose(&mut self, stream: &str, lost: Lost, out: &mut Vec<EventKind>) -> bool {
        if *self != Phase::Live {
            return false;
        }
        *self = Phase::Lost;
        out.push(EventKind::ObservationLost {
            stream: stream.to_string(),
            reason: lost.0.to_string(),
        });
        true
    }

    /// → Closed, emitting `stream_close` once; false if it was closed already.
    fn close(&mut self, stream: &str, out: &mut Vec<EventKind>) -> bool {
        if *self == Phase::Closed {
            return false;
        }
        *self = Phase::Closed;
        out.push(EventKind::StreamClose {
            stream: stream.to_string(),
        });
        true
    }
}

enum Proto {
    Anthropic(AnthropicStream),
    Responses(ResponsesStream),
}

impl Proto {
    fn on_sse(&mut self, name: &str, data: &[u8], out: &mut Vec<EventKind>) -> Result<(), Lost> {
        match self {
            Proto::Anthropic(a) => a.on_event(name, data, out),
            Proto::Responses(r) => r.on_event(Some(name), data, out),
        }
    }
    fn on_whole(&mut self, body: &[u8], out: &mut Vec<EventKind>) -> Result<(), Lost> {
        match self {
            Proto::Anthropic(a) => a.on_whole_body(body, out),
            Proto::Responses(r) => r.on_whole_body(body, out),
        }
    }
}

enum RespBody {
    /// `text/event-stream`: parsed as it streams.
    Sse(SseParser),
    /// A non-streaming JSON response: read whole when the body ends.
    Json(Vec<u8>),
}

/// One HTTP exchange = one stream (one request, one response).
pub struct HttpObserver {
    stream: String,
    api: Api,
    phase: Phase,
    request: String,
    req_decoder: Option<Decoder>,
    req_body: Vec<u8>,
    proto: Proto,
    /// The response body being observed: `None` before the head, for error statuses and for
    /// content types that carry no model stream.
    resp: Option<(Decoder, RespBody)>,
    head_seen: bool,
    scratch: Vec<u8>,
    /// This stream's part of the observer budget.
    account: Account,
}

/// Compressed input is decoded this much at a time, each piece's output parsed before the
/// next is decoded: what a step holds is bounded by its output, never by how far a small
/// input would inflate.
const DECODE_STEP: usize = 4 * 1024;

/// The bound for a buffer of a stream that holds `held` bytes in all, `len` of them in this
/// buffer: what its allowance leaves room for. `Lost::OVERFLOW` from a buffer bounded below
/// [`MAX_BODY`] is the budget's doing.
fn room(allowance: usize, held: usize, len: usize) -> usize {
    MAX_BODY.min(allowance.saturating_sub(held).saturating_add(len))
}

/// `lost` as the budget's loss when the bound that failed was the budget's.
fn blame(lost: Lost, bound: usize) -> Lost {
    if lost == Lost::OVERFLOW && bound < MAX_BODY {
        Lost::BUDGET
    } else {
        lost
    }
}

impl HttpObserver {
    /// Emits `stream_open` (transport http). `request_content_encoding`: the request's Content-Encoding.
    pub fn new(
        info: ExchangeInfo,
        request_content_encoding: Option<&str>,
        out: &mut Vec<EventKind>,
    ) -> Self {
        out.push(EventKind::StreamOpen {
            stream: info.stream.clone(),
            client: info.client,
            transport: Transport::Http,
            thread: info.thread,
            host: None,
        });
        let request = format!("{}/q1", info.stream);
        let proto = match info.api {
            Api::AnthropicMessages => Proto::Anthropic(AnthropicStream::new(
                info.stream.clone(),
                Some(request.clone()),
            )),
            Api::Responses => {
                let mut r = ResponsesStream::new(info.stream.clone());
                // Cannot fail: the queue is empty.
                let _ = r.request_sent(None, request.clone());
                Proto::Responses(r)
            }
        };
        let mut obs = HttpObserver {
            stream: info.stream,
            api: info.api,
            phase: Phase::Live,
            request,
            req_decoder: None,
            req_body: Vec::new(),
            proto,
            resp: None,
            head_seen: false,
            scratch: Vec::new(),
            account: Account::default(),
        };
        match Decoder::new(request_content_encoding) {
            Ok(d) => obs.req_decoder = Some(d),
            Err(e) => obs.lose(e.into(), out),
        }
        obs
    }

    pub fn request_chunk(&mut self, bytes: &[u8], out: &mut Vec<EventKind>) {
        if self.phase != Phase::Live {
            return;
        }
        let bound = room(self.account.allowance(), self.held(), self.req_body.len());
        let Some(d) = self.req_decoder.as_mut() else {
            return; // the request already ended
        };
        if let Err(e) = d.push(bytes, &mut self.req_body, bound) {
            self.lose(blame(e.into(), bound), out);
        }
        self.settle(out);
    }

    /// The whole request was received: emits `request` (id `"<stream>/q1"`).
    pub fn request_end(&mut self, out: &mut Vec<EventKind>) {
        if self.phase != Phase::Live {
            return;
        }
        let Some(mut d) = self.req_decoder.take() else {
            return;
        };
        let bound = room(
            self.account.allowance(),
            self.held() + d.held(),
            self.req_body.len(),
        );
        let mut body = std::mem::take(&mut self.req_body);
        let finished = d.finish(&mut body, bound);
        drop(d);
        self.req_body = body;
        self.settle(out);
        if let Err(e) = finished {
            return self.lose(blame(e.into(), bound), out);
        }
        if self.phase != Phase::Live {
            return;
        }
        let body = std::mem::take(&mut self.req_body);
        let facts = match self.api {
            Api::AnthropicMessages => body::messages_request(&body),
            Api::Responses => body::responses_request(&body).map(|r| r.facts),
        };
        drop(body);
        self.settle(out);
        match facts {
            Ok(f) => out.push(EventKind::Request {
                stream: self.stream.clone(),
                request: self.request.clone(),
                previous_response: f.previous_response,
                outputs: f.outputs,
            }),
            Err(_) => self.lose(Lost::JSON, out),
        }
    }

    pub fn response_head(
        &mut self,
        status: u16,
        content_type: Option<&str>,
        content_encoding: Option<&str>,
        out: &mut Vec<EventKind>,
    ) {
        // An interim 1xx head is followed by the real one.
        if self.phase != Phase::Live
            || (100..200).contains(&status)
            || std::mem::replace(&mut self.head_seen, true)
        {
            return;
        }
        if !(200..300).contains(&status) {
            return; // an API error: no model response to observe
        }
        let media = content_type
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        let body = match media.as_str() {
            "text/event-stream" => RespBody::Sse(SseParser::new(
                match self.api {
                    Api::AnthropicMessages => anthropic::wants,
                    Api::Responses => responses::wants,
                },
                MAX_BODY,
            )),
            "application/json" => RespBody::Json(Vec::new()),
            _ => return,
        };
        match Decoder::new(content_encoding) {
            Ok(d) => self.resp = Some((d, body)),
            Err(e) => self.lose(e.into(), out),
        }
        self.settle(out);
    }

    pub fn response_chunk(&mut self, bytes: &[u8], out: &mut Vec<EventKind>) {
        if self.phase != Phase::Live {
            return;
        }
        if let Err(lost) = self.response_bytes(bytes, false, out) {
            self.lose(lost, out);
        }
        self.settle(out);
    }

    fn response_bytes(
        &mut self,
        bytes: &[u8],
        end: bool,
        out: &mut Vec<EventKind>,
    ) -> Result<(), Lost> {
        let allowance = self.account.allowance();
        let held = self.held();
        let Some((decoder, body)) = self.resp.as_mut() else {
            return Ok(());
        };
        match body {
            RespBody::Sse(parser) => {
                let proto = &mut self.proto;
                // The parser's line and data buffers may take what the others leave.
                let bound = room(allowance, held, parser.held());
                parser.set_max(bound);
                let mut on_event = |name: &str, data: &[u8]| proto.on_sse(name, data, &mut *out);
                if decoder.is_identity() {
                    // Nothing to decode: the copy is parsed as it is.
                    return parser
                        .feed(bytes, &mut on_event)
                        .map_err(|l| blame(l, bound));
                }
                let scratch = &mut self.scratch;
                let mut step = |input: &[u8], last: bool| -> Result<(), Lost> {
                    scratch.clear();
                    let r = if last {
                        decoder.finish(scratch, bound)
                    } else {
                        decoder.push(input, scratch, bound)
                    };
                    let fed = parser.feed(scratch, &mut on_event);
                    clear_or_release(scratch);
                    r.map_err(|e| blame(e.into(), bound))?;
                    fed.map_err(|l| blame(l, bound))
                };
                for piece in bytes.chunks(DECODE_STEP) {
                    step(piece, false)?;
                }
                if end {
                    step(&[], true)?;
                }
                Ok(())
            }
            RespBody::Json(buf) => {
                let bound = room(allowance, held, buf.len());
                if end {
                    decoder
                        .finish(buf, bound)
                        .map_err(|e| blame(e.into(), bound))?;
                    let buf = std::mem::take(buf);
                    self.proto.on_whole(&buf, out)
                } else {
                    decoder
                        .push(bytes, buf, bound)
                        .map_err(|e| blame(e.into(), bound))
                }
            }
        }
    }

    /// The response body ended (cleanly or not): emits `stream_close`. An SSE event left
    /// without its closing blank line is dropped (WHATWG), so a cut stream claims no end.
    /// Idempotent.
    pub fn close(&mut self, out: &mut Vec<EventKind>) {
        if self.phase == Phase::Closed {
            return;
        }
        if self.phase == Phase::Live {
            if let Err(lost) = self.response_bytes(&[], true, out) {
                self.lose(lost, out);
            }
        }
        self.phase.close(&self.stream, out);
        self.release();
    }

    /// The shell could not deliver every byte (copy channel overflow etc.): emits
    /// `observation_lost{reason}` once; afterwards only `close` emits anything.
    pub fn lost(&mut self, reason: &'static str, out: &mut Vec<EventKind>) {
        self.lose(Lost(reason), out);
    }

    fn lose(&mut self, lost: Lost, out: &mut Vec<EventKind>) {
        if self.phase.lose(&self.stream, lost, out) {
            self.release();
        }
    }

    fn release(&mut self) {
        self.req_decoder = None;
        self.req_body = Vec::new();
        self.resp = None;
        self.scratch = Vec::new();
        self.account.settle(0);
    }

    /// Takes this stream's part of the observer budget (before any bytes are fed).
    pub fn set_budget(&mut self, account: Account) {
        self.account = account;
        self.account.settle(self.held());
    }

    /// The heap this observer's buffers and decoders hold.
    fn held(&self) -> usize {
        self.req_decoder.as_ref().map_or(0, Decoder::held)
            + self.req_body.capacity()
            + self.scratch.capacity()
            + self.resp.as_ref().map_or(0, |(d, b)| {
                d.held()
                    + match b {
                        RespBody::Sse(p) => p.held(),
                        RespBody::Json(buf) => buf.capacity(),
                    }
            })
    }

    /// Records what the stream holds after a step; past its allowance, observation of the
    /// stream ends (`budget`) and its buffers go.
    fn settle(&mut self, out: &mut Vec<EventKind>) {
        let held = self.held();
        self.account.settle(held);
        if self.account.is_limited() && held > self.account.allowance() {
            self.lose(Lost::BUDGET, out);
        }
    }
}

/// One WebSocket connection = one stream (transport websocket), Responses API only.
pub struct WsObserver {
    stream: String,
    phase: Phase,
    client: FrameDecoder,
    server: FrameDecoder,
    proto: ResponsesStream,
    requests: u64,
    /// This connection's part of the observer budget.
    account: Account,
    /// Each request's trace context (request id, the raw value), kept only when asked for
    /// ([`WsObserver::keep_trace_contexts`]) until taken.
    trace_contexts: Option<Vec<(String, String)>>,
}

impl WsObserver {
    /// `extensions`: the `Sec-WebSocket-Extensions` value of the upstream's 101 (negotiated).
    pub fn new(info: ExchangeInfo, extensions: Option<&str>, out: &mut Vec<EventKind>) -> Self {
        out.push(EventKind::StreamOpen {
            stream: info.stream.clone(),
            client: info.client,
            transport: Transport::Websocket,
            thread: info.thread,
            host: None,
        });
        let pmd = ws_frames::negotiated(extensions);
        let mut obs = WsObserver {
            stream: info.stream.clone(),
            phase: Phase::Live,
            client: FrameDecoder::client(pmd.as_ref().ok().copied().flatten(), MAX_BODY),
            server: FrameDecoder::server(pmd.as_ref().ok().copied().flatten(), MAX_BODY),
            proto: ResponsesStream::new(info.stream),
            requests: 0,
            account: Account::default(),
            trace_contexts: None,
        };
        if let Err(e) = pmd {
            obs.lose(e.into(), out);
        } else if info.api != Api::Responses {
            // Only the Responses API runs over a WebSocket; anything else cannot be read.
            obs.lose(Lost::PROTOCOL, out);
        }
        obs
    }

    /// Keeps each request's trace context (Codex's `client_metadata`, see
    /// `body::responses_request`) for [`WsObserver::take_trace_contexts`]: for
    /// `--join-host-trace` only, so nothing is kept otherwise.
    pub fn keep_trace_contexts(&mut self) {
        self.trace_contexts.get_or_insert_with(Vec::new);
    }

    /// The trace contexts of the requests seen since the last call: (request id, raw value).
    /// Each is taken before the events of the same bytes are handed on.
    pub fn take_trace_contexts(&mut self) -> Vec<(String, String)> {
        self.trace_contexts
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Client→server raw bytes after the 101.
    pub fn client_bytes(&mut self, bytes: &[u8], out: &mut Vec<EventKind>) {
        if self.phase != Phase::Live {
            return;
        }
        let bound = room(self.account.allowance(), self.held(), self.client.held());
        self.client.set_max(bound);
        let (stream, proto, requests) = (&self.stream, &mut self.proto, &mut self.requests);
        let contexts = &mut self.trace_contexts;
        let r = self.client.feed(bytes, |m: Message<'_>| match m {
            Message::Text(text) => client_message(stream, proto, requests, contexts, text, out),
            _ => Ok(()),
        });
        if let Err(lost) = r {
            self.lose(blame(lost, bound), out);
        }
        self.settle(out);
    }

    /// Server→client raw bytes after the 101.
    pub fn server_bytes(&mut self, bytes: &[u8], out: &mut Vec<EventKind>) {
        if self.phase != Phase::Live {
            return;
        }
        let bound = room(self.account.allowance(), self.held(), self.server.held());
        self.server.set_max(bound);
        let proto = &mut self.proto;
        let r = self.server.feed(bytes, |m: Message<'_>| match m {
            Message::Text(text) => proto.on_event(None, text, out),
            _ => Ok(()),
        });
        if let Err(lost) = r {
            self.lose(blame(lost, bound), out);
        }
        self.settle(out);
    }

    /// The connection ended (either side, cleanly or not): emits `stream_close`. Idempotent.
    pub fn close(&mut self, out: &mut Vec<EventKind>) {
        self.phase.close(&self.stream, out);
    }

    /// Emits `observation_lost{reason}` once; afterwards only `close` emits anything.
    pub fn lost(&mut self, reason: &'static str, out: &mut Vec<EventKind>) {
        self.lose(Lost(reason), out);
    }

    fn lose(&mut self, lost: Lost, out: &mut Vec<EventKind>) {
        if self.phase.lose(&self.stream, lost, out) {
            // Only `close` follows: the decoders and their buffers go.
            self.client = FrameDecoder::new(None, 0);
            self.server = FrameDecoder::new(None, 0);
            self.account.settle(0);
        }
    }

    /// Takes this connection's part of the observer budget (before any bytes are fed).
    pub fn set_budget(&mut self, account: Account) {
        self.account = account;
        self.account.settle(self.held());
    }

    fn held(&self) -> usize {
        self.client.held() + self.server.held()
    }

    fn settle(&mut self, out: &mut Vec<EventKind>) {
        if self.phase != Phase::Live {
            return;
        }
        let held = self.held();
        self.account.settle(held);
        if self.account.is_limited() && held > self.account.allowance() {
            self.lose(Lost::BUDGET, out);
        }
    }
}

/// A client text frame: `response.create` is a request (answered FIFO on its lane);
/// `response.append` (older Codex) delivers input items, tool outputs included, without asking
/// for a response of its own, so it is a request that no response answers; anything else
/// (`response.processed`, `response.cancel`, …) says nothing about chains and is ignored.
fn client_message(
    stream: &str,
    proto: &mut ResponsesStream,
    requests: &mut u64,
    contexts: &mut Option<Vec<(String, String)>>,
    text: &[u8],
    out: &mut Vec<EventKind>,
) -> Result<(), Lost> {
    let kind = peek::object_type(text).map_err(|_| Lost::JSON)?;
    if kind != "response.create" && kind != "response.append" {
        return Ok(());
    }
    let req = body::responses_request(text).map_err(|_| Lost::JSON)?;
    *requests += 1;
    let id = format!("{stream}/q{requests}");
    if let (Some(keep), Some(tc)) = (contexts.as_mut(), req.trace_context) {
        keep.push((id.clone(), tc));
    }
    out.push(EventKind::Request {
        stream: stream.to_string(),
        request: id.clone(),
        previous_response: req.facts.previous_response,
        outputs: req.facts.outputs,
    });
    if kind == "response.create" {
        proto.request_sent(req.lane, id)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;
    use crate::event::Client::*;
    use proptest::prelude::*;

    #[test]
    fn observed_routes() {
        let cases: &[(&str, &str, bool, Option<Api>)] = &[
            ("POST", "/v1/messages", false, Some(Api::AnthropicMessages)),
            (
                "POST",
                "/v1/messages?beta=true",
                false,
                Some(Api::AnthropicMessages),
            ),
            ("POST", "/v1/messages/count_tokens?beta=true", false, None),
            ("POST", "/v1/messages/batches", false, None),
            ("GET", "/v1/messages", false, None),
            ("HEAD", "/api/hello", false, None),
            ("GET", "/v1/models?limit=1000", false, None),
            ("POST", "/v1/responses", false, Some(Api::Responses)),
            ("POST", "/responses", false, Some(Api::Responses)),
            (
                "POST",
                "/backend-api/codex/responses/",
                false,
                Some(Api::Responses),
            ),
            ("GET", "/v1/responses", true, Some(Api::Responses)),
            ("GET", "/responses?x=1", true, Some(Api::Responses)),
            ("GET", "/v1/responses", false, None),
            ("POST", "/v1/responses", true, None),
            ("POST", "/responses/compact", false, None),
            ("GET", "/v1/responses/resp_123", false, None),
            ("POST", "/v1/threads/t/messages", false, None),
            ("POST", "/models", false, None),
            ("POST", "responses", false, None),
        ];
        for (method, path, ws, want) in cases {
            assert_eq!(
                observed_route(method, path, *ws),
                *want,
                "{method} {path} ws={ws}"
            );
        }
    }

    #[test]
    fn clients_and_thread_keys() {
        type H<'a> = &'a [(&'a str, &'a [u8])];
        type Case<'a> = (&'a str, Api, H<'a>, (Client, Option<&'a str>));
        let cases: &[Case] = &[
            (
                "claude main agent",
                Api::AnthropicMessages,
                &[
                    ("x-claude-code-session-id", b"sess-1"),
                    ("x-api-key", b"SECRET"),
                ],
                (Claude, Some("sess-1")),
            ),
            (
                "claude subagent",
                Api::AnthropicMessages,
                &[
                    ("x-claude-code-session-id", b"sess-1"),
                    ("x-claude-code-agent-id", b"agent-7"),
                ],
                (Claude, Some("sess-1/agent-7")),
            ),
            (
                "claude agent id without session",
                Api::AnthropicMessages,
                &[("x-claude-code-agent-id", b"agent-7")],
                (Claude, None),
            ),
            (
                "codex thread-id",
                Api::Responses,
                &[
                    ("originator", b"codex_cli_rs"),
                    ("session-id", b"root"),
                    ("thread-id", b"th-9"),
                ],
                (Codex, Some("th-9")),
            ),
            (
                "codex older builds",
                Api::Responses,
                &[("session_id", b"root"), ("conversation_id", b"conv-1")],
                (Codex, Some("conv-1")),
            ),
            (
                "codex hyphenated conversation id",
                Api::Responses,
                &[("conversation-id", b"conv-2")],
                (Codex, Some("conv-2")),
            ),
            (
                "codex session only: the session is not a thread",
                Api::Responses,
                &[("session-id", b"root")],
                (Codex, None),
            ),
            (
                "codex by user agent",
                Api::Responses,
                &[("user-agent", b"codex_cli_rs/0.171.0 (Linux; x86_64)")],
                (Codex, None),
            ),
            (
                "unknown client",
                Api::Responses,
                &[
                    ("user-agent", b"openai-python/2.0"),
                    ("authorization", b"Bearer SECRET"),
                ],
                (Other, None),
            ),
            (
                "empty thread value",
                Api::Responses,
                &[("thread-id", b"  ")],
                (Codex, None),
            ),
            (
                "non-utf8 thread value",
                Api::Responses,
                &[("thread-id", b"\xff\xfe")],
                (Codex, None),
            ),
            (
                "claude headers on the responses api",
                Api::Responses,
                &[("x-claude-code-session-id", b"sess-2")],
                (Claude, Some("sess-2")),
            ),
        ];
        for (name, api, headers, (client, thread)) in cases {
            assert_eq!(
                classify(*api, headers),
                (*client, thread.map(str::to_string)),
                "{name}"
            );
        }
    }

    #[test]
    fn observers_can_move_between_threads() {
        // The relay runs each observer in its own task.
        fn send<T: Send + 'static>() {}
        send::<HttpObserver>();
        send::<WsObserver>();
    }

    fn info(api: Api) -> ExchangeInfo {
        ExchangeInfo {
            stream: "s1".into(),
            api,
            client: Codex,
            thread: None,
        }
    }

    #[test]
    fn lost_is_said_once_and_then_only_close_follows() {
        let mut out = Vec::new();
        let mut obs = HttpObserver::new(info(Api::Responses), None, &mut out);
        obs.request_chunk(br#"{"input":"x"}"#, &mut out);
        obs.lost("overflow", &mut out);
        obs.lost("decode", &mut out);
        obs.request_end(&mut out);
        obs.response_head(200, Some("text/event-stream"), None, &mut out);
        obs.response_chunk(
            b"event: response.created\ndata: {\"response\":{\"id\":\"r\"}}\n\n",
            &mut out,
        );
        obs.close(&mut out);
        obs.close(&mut out);
        obs.lost("decode", &mut out);
        assert_eq!(
            out,
            vec![
                open("s1", Codex, Transport::Http, None),
                lost("s1", "overflow"),
                close("s1"),
            ]
        );
        validate(&out);

        let mut out = Vec::new();
        let mut ws = WsObserver::new(info(Api::Responses), None, &mut out);
        ws.lost("overflow", &mut out);
        ws.client_bytes(&[0x81, 0x02, b'{', b'}'], &mut out);
        ws.close(&mut out);
        ws.close(&mut out);
        assert_eq!(
            out,
            vec![
                open("s1", Codex, Transport::Websocket, None),
                lost("s1", "overflow"),
                close("s1")
            ]
        );
    }

    #[test]
    fn an_unknown_request_encoding_is_lost_at_once() {
        let mut out = Vec::new();
        let mut obs = HttpObserver::new(info(Api::Responses), Some("snappy"), &mut out);
        obs.close(&mut out);
        assert_eq!(
            out,
            vec![
                open("s1", Codex, Transport::Http, None),
                lost("s1", "decode"),
                close("s1")
            ]
        );
    }

    #[test]
    fn an_unknown_response_encoding_is_lost_but_error_bodies_are_not_decoded() {
        let mut out = Vec::new();
        let mut obs = HttpObserver::new(info(Api::Responses), None, &mut out);
        obs.response_head(200, Some("text/event-stream"), Some("compress"), &mut out);
        assert_eq!(out.last(), Some(&lost("s1", "decode")));

        let mut out = Vec::new();
        let mut obs = HttpObserver::new(info(Api::Responses), None, &mut out);
        obs.response_head(100, None, None, &mut out);
        obs.response_head(500, Some("application/json"), Some("compress"), &mut out);
        // Only the first final head counts.
        obs.response_head(200, Some("text/event-stream"), Some("compress"), &mut out);
        obs.response_chunk(b"\x00\x01", &mut out);
        obs.close(&mut out);
        assert_eq!(
            out,
            vec![open("s1", Codex, Transport::Http, None), close("s1")]
        );
    }

    #[test]
    fn a_request_body_bomb_overflows() {
        // 65 MiB of zeros compresses to a few KiB; the decoded body would exceed MAX_BODY.
        let bomb = zstd::stream::encode_all(&vec![0u8; MAX_BODY + (1 << 20)][..], 3).unwrap();
        let mut out = Vec::new();
        let mut obs = HttpObserver::new(info(Api::Responses), Some("zstd"), &mut out);
        for c in bomb.chunks(4096) {
            obs.request_chunk(c, &mut out);
        }
        obs.request_end(&mut out);
        obs.close(&mut out);
        assert_eq!(
            out,
            vec![
                open("s1", Codex, Transport::Http, None),
                lost("s1", "overflow"),
                close("s1")
            ]
        );
    }

    /// One unterminated SSE event of `len` bytes of data, gzip-compressed.
    fn gzip_event_bomb(len: usize) -> Vec<u8> {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(b"event: response.output_text.done\ndata: ")
            .unwrap();
        let zeros = vec![b'0'; 1 << 20];
        for _ in 0..len >> 20 {
            e.write_all(&zeros).unwrap();
        }
        e.finish().unwrap()
    }

    #[test]
    fn a_stream_past_its_share_is_lost_to_the_budget_and_gives_it_back() {
        use crate::observe::budget::Budget;
        let budget = Budget::new(8 << 20, 2 << 20);
        let bomb = gzip_event_bomb(63 << 20);
        let mut out = Vec::new();
        let mut obs = HttpObserver::new(info(Api::Responses), None, &mut out);
        obs.set_budget(budget.account());
        obs.request_chunk(br#"{"input":"x"}"#, &mut out);
        obs.request_end(&mut out);
        obs.response_head(200, Some("text/event-stream"), Some("gzip"), &mut out);
        let mut peak = 0;
        for c in bomb.chunks(16 * 1024) {
            obs.response_chunk(c, &mut out);
            peak = peak.max(budget.held());
        }
        assert!(peak <= 2 << 20, "held {peak} past the share");
        assert_eq!(budget.held(), 0, "a lost stream holds nothing");
        obs.close(&mut out);
        assert_eq!(out[2], lost("s1", "budget"), "{out:?}");
        assert_eq!(out.last(), Some(&close("s1")));
    }

    #[test]
    fn a_request_body_bomb_is_lost_to_the_budget_without_decoding_it_whole() {
        use crate::observe::budget::Budget;
        let budget = Budget::new(4 << 20, 1 << 20);
        let bomb = zstd::stream::encode_all(&vec![0u8; 63 << 20][..], 19).unwrap();
        let mut out = Vec::new();
        let mut obs = HttpObserver::new(info(Api::Responses), Some("zstd"), &mut out);
        obs.set_budget(budget.account());
        // Unfinished: the request never ends.
        for c in bomb.chunks(1024) {
            obs.request_chunk(c, &mut out);
        }
        assert_eq!(budget.held(), 0);
        assert_eq!(out[1], lost("s1", "budget"), "{out:?}");
    }

    #[test]
    fn a_normal_stream_fits_a_small_budget_and_keeps_little_after_each_event() {
        use crate::observe::budget::{Budget, KEEP};
        let budget = Budget::new(4 << 20, 1 << 20);
        let mut out = Vec::new();
        let mut obs = HttpObserver::new(info(Api::Responses), None, &mut out);
        obs.set_budget(budget.account());
        obs.request_chunk(br#"{"input":"x"}"#, &mut out);
        obs.request_end(&mut out);
        obs.response_head(200, Some("text/event-stream"), None, &mut out);
        // A 600 KiB event (a large tool argument), then a small one.
        let big = format!(
            "event: response.created\ndata: {{\"type\":\"response.created\",\"response\":{{\"id\":\"resp_1\",\"pad\":\"{}\"}}}}\n\n",
            "x".repeat(600 << 10)
        );
        obs.response_chunk(big.as_bytes(), &mut out);
        assert!(
            budget.held() <= 4 * KEEP,
            "buffers past KEEP are released after the event: {}",
            budget.held()
        );
        assert!(
            !out.iter()
                .any(|e| matches!(e, EventKind::ObservationLost { .. })),
            "{out:?}"
        );
    }

    #[test]
    fn websocket_for_the_messages_api_is_not_followed() {
        let mut out = Vec::new();
        let mut ws = WsObserver::new(info(Api::AnthropicMessages), None, &mut out);
        ws.close(&mut out);
        assert_eq!(
            out,
            vec![
                open("s1", Codex, Transport::Websocket, None),
                lost("s1", "protocol"),
                close("s1")
            ]
        );
    }

    fn api() -> impl Strategy<Value = Api> {
        prop_oneof![Just(Api::AnthropicMessages), Just(Api::Responses)]
    }
    fn encoding() -> impl Strategy<Value = Option<&'static str>> {
        prop::sample::select(vec![
            None,
            Some("gzip"),
            Some("deflate"),
            Some("br"),
            Some("zstd"),
            Some("bogus"),
        ])
    }

    /// Random bytes with, now and then, a plausible SSE or JSON fragment mixed in.
    fn noise() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            prop::collection::vec(any::<u8>(), 0..64),
            prop::sample::select(vec![
                &b"event: message_start\ndata: {\"message\":{\"id\":\"m\"}}\n\n"[..],
                b"event: content_block_start\ndata: {\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"n\"}}\n\n",
                b"data: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
                b"event: response.created\ndata: {\"response\":{\"id\":\"r\"}}\n\n",
                b"data: {\"type\":\"response.output_item.done\",\"item\":{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"n\"}}\n\n",
                b"event: response.completed\ndata: {\"response\":{\"id\":\"r\"}}\n\n",
                b"event: error\ndata: {}\n\n",
                b"event: message_stop\ndata: {}\n\n",
            ]).prop_map(|s| s.to_vec()),
        ];
        prop::collection::vec(piece, 0..8).prop_map(|v| v.concat())
    }

    /// A WebSocket text message: a plausible client or server event, or noise.
    fn ws_message() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            prop::collection::vec(any::<u8>(), 0..48),
            prop::sample::select(vec![
                &br#"{"type":"response.create","input":[{"type":"function_call_output","call_id":"c"}]}"#[..],
                br#"{"type":"response.create","stream_id":"a","previous_response_id":"r"}"#,
                br#"{"type":"response.append","input":"x"}"#,
                br#"{"type":"response.created","response":{"id":"r"}}"#,
                br#"{"type":"response.created","response":{"id":"r2"},"stream_id":"a"}"#,
                br#"{"type":"response.output_item.done","item":{"type":"function_call","id":"i","call_id":"c","name":"n"}}"#,
                br#"{"type":"response.output_item.done","item":{"type":"custom_tool_call","call_id":"c","name":"n"},"stream_id":"a"}"#,
                br#"{"type":"response.completed","response":{"id":"r"}}"#,
                br#"{"type":"response.failed","response":{"id":"r2"},"stream_id":"a"}"#,
                br#"{"type":"error","error":{},"stream_id":"a"}"#,
                br#"{"type":"error","status":400}"#,
                br#"{"sequence_number":1,"type":"response.output_text.delta"}"#,
            ]).prop_map(|s| s.to_vec()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn http_garbage_never_panics_and_stays_a_valid_trace(
            api in api(), req_enc in encoding(), resp_enc in encoding(),
            req_body in noise(), resp_body in noise(), status in prop::sample::select(vec![200u16, 201, 400, 529]),
            ct in prop::sample::select(vec!["text/event-stream", "application/json", "text/plain"]),
            seed in any::<u64>(),
        ) {
            let mut out = Vec::new();
            let mut obs = HttpObserver::new(info(api), req_enc, &mut out);
            for c in chunks(&req_body, Some(seed)) { obs.request_chunk(c, &mut out); }
            obs.request_end(&mut out);
            obs.response_head(status, Some(ct), resp_enc, &mut out);
            for c in chunks(&resp_body, Some(seed ^ 1)) { obs.response_chunk(c, &mut out); }
            obs.close(&mut out);
            validate(&out);
            prop_assert_eq!(out.iter().filter(|e| matches!(e, EventKind::StreamClose { .. })).count(), 1);
        }

        #[test]
        fn websocket_garbage_never_panics_and_stays_a_valid_trace(
            ext in prop::sample::select(vec![None, Some("permessage-deflate"), Some("permessage-deflate; server_no_context_takeover"), Some("other")]),
            script in prop::collection::vec((any::<bool>(), prop::collection::vec(any::<u8>(), 0..200)), 0..6),
        ) {
            let script: Vec<(Dir, Vec<u8>)> = script
                .into_iter()
                .map(|(to_server, b)| (if to_server { Dir::ToServer } else { Dir::ToClient }, b))
                .collect();
            // run_ws validates the trace itself.
            let out = run_ws(ext, &script, Some(7));
            prop_assert_eq!(out.iter().filter(|e| matches!(e, EventKind::StreamClose { .. })).count(), 1);
        }

        #[test]
        fn websocket_frames_with_random_json_never_panic(
            msgs in prop::collection::vec((any::<bool>(), ws_message()), 0..12),
        ) {
            let script: Vec<(Dir, Vec<u8>)> = msgs
                .into_iter()
                .map(|(to_server, text)| {
                    if to_server {
                        (Dir::ToServer, super::super::ws_frames::tests::frame(true, false, 1, &text, Some([3, 1, 4, 1])))
                    } else {
                        (Dir::ToClient, super::super::ws_frames::tests::frame(true, false, 1, &text, None))
                    }
                })
                .collect();
            run_ws(None, &script, None);
        }
    }
}
