//! The MCP mount observer: `tools/call` intervals of a remote (streamable HTTP) MCP server,
//! read from copies of the bytes the relay forwards (docs/design.md §8).
//!
//! An *MCP mount* is a mount whose upstream is an MCP server's URL; the relay forwards it
//! byte for byte like a model mount and is then that server's wrapper. [`McpMount`] is what
//! turns the copies into the wrapper's two events, `mcp_start` at s and `mcp_interval` at e,
//! with `transport: "http"`. It is sans-IO like the rest of `correlator` (quinn-proto style):
//! `handle_*` take what the relay saw with the moment it saw it (the caller's monotonic clock,
//! in trace milliseconds), [`McpMount::poll_event`] and [`McpMount::poll_timeout`] give what
//! follows. It never reads a clock, so a test or a fuzzer drives it to any interleaving.
//!
//! # Driving it
//!
//! One [`McpMount`] per mount (the alias), shared by every exchange of that mount, because an
//! answer may come on another exchange of the same session (the GET stream) and a
//! cancellation or a `DELETE` reaches calls of earlier exchanges. Per HTTP exchange:
//! [`open`](McpMount::open) with the request head, [`handle_request_body`](McpMount::handle_request_body)
//! for each piece, [`handle_request_end`](McpMount::handle_request_end) when the relay wrote
//! the last byte of the body upstream (that moment is s), [`handle_response_head`](McpMount::handle_response_head),
//! [`handle_response_body`](McpMount::handle_response_body) for each piece with the moment
//! it was read from the upstream, and [`handle_end`](McpMount::handle_end) once, however the
//! exchange ended. [`handle_timeout`](McpMount::handle_timeout) at [`poll_timeout`](McpMount::poll_timeout),
//! and [`handle_stop`](McpMount::handle_stop) when the relay stops. The relay's tap already
//! hands its observers `Bytes` copies of the request and response pieces in order; stamping
//! each with the moment it passed is all it adds.
//!
//! # What it decides, and why (design.md §8)
//!
//! - A POST body is one message or a batch; an answer is one JSON body or an SSE stream of
//!   messages (one per dispatched event; empty or non-JSON data skipped; an event cut by the
//!   end carries nothing). Ids are equal only when type and value are ([`Id`]).
//! - s is when the last byte of the body carrying the call was written upstream (the calls of
//!   a batch share it). A body that never passes whole, or cannot be decoded, starts nothing
//!   (counted).
//! - e is when the last byte of the answering message was read: for a JSON body, the piece
//!   holding the value's last byte; for SSE, the piece holding the blank line that dispatched
//!   the event (the message is known only then). Outcome `result`, or `error` for a JSON-RPC
//!   error, a result with `isError: true` (as the wrapper reports it), or an `id: null` error,
//!   which answers every unanswered call of its POST.
//! - An answer matches its own exchange's calls first. Another exchange's calls only through
//!   a GET of the same session (the GET stream, or one resumed with `Last-Event-ID`): the two
//!   streams the 2025 revisions allow to carry a response to an earlier POST. Without a
//!   session id there is no such stream (2026-07-28 is stateless).
//! - A reply that leaves calls of its POST unanswered ends them when it ends: `error` for a 4xx
//!   or 5xx status, `lost` otherwise, except under the 2025 revisions (an `MCP-Protocol-Version`
//!   of 2025, or none: the spec's default is 2025-03-26) when the server set an event id before
//!   the stream ended: the server may resume the stream, so the call runs on until answered,
//!   cancelled, its session deleted (`DELETE`: `lost`) or `max_window` after its start
//!   (`lost`). Under 2026-07-28, a client that closes the stream of a call it waits on has
//!   cancelled it.
//! - `notifications/cancelled` from the client ends the running call it names in the same
//!   session from the same host, `cancelled`, when its body has passed. The first end is final.
//! - Multi-round calls (2026-07-28): an `input_required` answer does not end the call; a later
//!   `tools/call` from the same host carrying the same `requestState` (else naming the same
//!   call by a hint) continues it, exactly as the stdio wrapper joins rounds; its s and hints
//!   are the first round's. No continuation within `max_window`: `cancelled`, as the wrapper's
//!   `input_unanswered`.
//! - [`handle_stop`](McpMount::handle_stop) ends every running call `lost` (and every call
//!   waiting for a retry `cancelled`, unanswered, as the wrapper's pipe ending does).
//!
//! Everything else (initialize, `server/discover`, lists, notifications, server requests in a
//! stream, GETs, DELETEs, unknown answers) is only counted ([`Counts`]), keyed by HTTP method,
//! status and the MCP method name from the specification's list (anything else `other`).
//! Nothing read is ever output but tool names, hints and counts: the `Mcp-Session-Id` is kept
//! as a SHA-256 digest only, to compare; no URL, header value or body byte leaves (§7).
//!
//! Memory is bounded as for the wrapper: bodies stream through a [`LineScanner`](crate::observe::jsonrpc::LineScanner)
//! (a JSON value of any size costs its skeleton, at most 64 KiB: a batch whose skeleton is
//! larger is given up and counted), at most [`MAX_RUNNING`] calls are tracked per mount and
//! [`MAX_WAITING`] wait for a retry.

mod methods;
mod reader;

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde_json::Value;
use sha2::Digest;

use crate::event::{EventKind, Hints, McpTransport, Millis, Outcome, Rounds};
use crate::observe::jsonrpc::{
    fill_hints, hints_agree, hints_conflict, pick_continued, state_key, tools_call_of, Id,
    MAX_RUNNING, MAX_WAITING,
};

pub use methods::method_word;
pub use reader::Framing;
use reader::{BodyReader, Read};

/// The HTTP method of an exchange on an MCP mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HttpMethod {
    /// Client messages (and, in its answer, the server's).
    Post,
    /// A server stream of a session, new or resumed with `Last-Event-ID`.
    Get,
    /// The end of a session.
    Delete,
    /// Anything else (forwarded, counted).
    Other,
}

impl HttpMethod {
    /// The method of a request line (case-sensitive, as HTTP methods are).
    pub fn of(method: &str) -> HttpMethod {
        match method {
            "POST" => HttpMethod::Post,
            "GET" => HttpMethod::Get,
            "DELETE" => HttpMethod::Delete,
            _ => HttpMethod::Other,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            HttpMethod::Post => "POST",
            HttpMethod::Get => "GET",
            HttpMethod::Delete => "DELETE",
            HttpMethod::Other => "other",
        }
    }
}

/// What the observer needs of a request head. Values are read, never kept: the session id
/// is digested, the version reduced to a revision class.
#[derive(Debug, Clone, Copy)]
pub struct RequestHead<'a> {
    pub method: HttpMethod,
    /// The `Mcp-Session-Id` header's value, if any.
    pub session_id: Option<&'a [u8]>,
    /// The `MCP-Protocol-Version` header's value, if any.
    pub protocol_version: Option<&'a str>,
    /// The request's `Content-Encoding`.
    pub content_encoding: Option<&'a str>,
    /// The host process of the client connection (a pseudonym), as the relay resolved it.
    pub host: Option<&'a str>,
}

/// How an exchange ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExchangeEnd {
    /// The response was whole.
    Complete,
    /// The upstream side broke (or never answered).
    UpstreamBroke,
    /// The client closed its side before the response was whole.
    ClientClosed,
}

/// An exchange of this mount, as [`McpMount::open`] named it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExchangeId(u64);

/// An event for the correlator: `kind` is an `mcp_start` or `mcp_interval` with
/// `transport: "http"`; `at` is the moment of the input that produced it (≥ its `start` /
/// `end`). The caller writes it with `t` from its own clock, at or after `at`.
#[derive(Debug, Clone, PartialEq)]
pub struct McpEvent {
    pub at: Millis,
    pub kind: EventKind,
}

/// Who sent a counted message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Sender {
    Client,
    Server,
}

/// What went wrong, counted (never with a byte of what it was).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Problem {
    /// A request body that could not be decoded or read as JSON (its calls start nothing).
    RequestUndecodable,
    /// A request body that never passed whole (the exchange ended first).
    RequestNotWhole,
    /// A response body that could not be decoded or read as JSON.
    ResponseUndecodable,
    /// An SSE event whose data was empty or not JSON.
    EventSkipped,
    /// An answer (result or error) that matches no running call it may answer.
    UnmatchedAnswer,
    /// A `tools/call` reusing the id of a running call of its exchange: the older ends `lost`.
    DuplicateId,
    /// A `tools/call` past [`MAX_RUNNING`]: not reported.
    TooManyCalls,
    /// A `notifications/cancelled` naming no running call, or more than one.
    UnmatchedCancel,
}

/// What the mount observer saw, as counts only (docs/design.md §7, §8).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// Exchanges by HTTP method and response status (0: none came).
    pub exchanges: BTreeMap<(HttpMethod, u16), u64>,
    /// JSON-RPC messages by sender and method word ([`method_word`]; answers are `response`).
    pub messages: BTreeMap<(Sender, &'static str), u64>,
    pub problems: BTreeMap<Problem, u64>,
}

impl Counts {
    fn problem(&mut self, p: Problem) {
        *self.problems.entry(p).or_default() += 1;
    }
    fn message(&mut self, who: Sender, word: &'static str) {
        *self.messages.entry((who, word)).or_default() += 1;
    }
}

/// Which transport rules a session follows, from `MCP-Protocol-Version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Revision {
    /// 2025-03-26 .. 2025-11-25, or no header (the spec's default is 2025-03-26): streams
    /// may be resumed, so a call whose stream set an event id may be answered later.
    Resumable,
    /// 2026-07-28 and later: stateless; closing a call's stream cancels it.
    Stateless,
    /// Anything else (2024-11-05's HTTP+SSE, an unknown word): no resumption.
    Plain,
}

impl Revision {
    fn of(version: Option<&str>) -> Revision {
        match version.map(str::trim) {
            None => Revision::Resumable,
            Some(v) if v.starts_with("2025-") => Revision::Resumable,
            Some(v)
                if v.as_bytes().first().is_some_and(u8::is_ascii_digit) && v >= "2026-07-28" =>
            {
                Revision::Stateless
            }
            Some(_) => Revision::Plain,
        }
    }
}

/// The SHA-256 of a session id: the id itself is never kept.
type SessionKey = [u8; 32];

struct Exchange {
    method: HttpMethod,
    session: Option<SessionKey>,
    revision: Revision,
    host: Option<String>,
    request: Option<BodyReader>,
    request_passed: bool,
    response: Option<BodyReader>,
    status: u16,
    /// Calls this POST carried that its reply has not answered, by seq.
    calls: Vec<u64>,
}

/// A call that started and has not ended.
struct Running {
    call: Call,
    /// The JSON-RPC id of its latest round.
    id: Id,
    /// The exchange whose reply should answer it; `None` once that reply ended and the call
    /// runs on, waiting for a resumed stream.
    exchange: Option<ExchangeId>,
    /// When the call is given up (`lost`), for a call that runs on.
    deadline: Option<Millis>,
}

/// What the interval needs of a call.
#[derive(Debug, Clone)]
struct Call {
    seq: u64,
    tool: String,
    start: Millis,
    hints: Hints,
    session: Option<SessionKey>,
    host: Option<String>,
    rounds: u32,
    input_wait: Millis,
}

/// A call answered `input_required`, waiting for its retry.
struct Waiting {
    call: Call,
    since: Millis,
    state: Option<String>,
}

/// The observer of one MCP mount. See the module documentation.
pub struct McpMount {
    alias: String,
    interval_prefix: String,
    max_window: Millis,
    exchanges: HashMap<ExchangeId, Exchange>,
    running: BTreeMap<u64, Running>,
    waiting: Vec<Waiting>,
    events: VecDeque<McpEvent>,
    counts: Counts,
    next_exchange: u64,
    next_seq: u64,
    reads: Vec<Read>,
}

impl McpMount {
    /// An observer for the mount named `alias` (the route's alias). Interval ids are
    /// `interval_prefix` followed by a sequence number (the relay makes the prefix unique per
    /// mount and run; the sanitizer pseudonymizes ids as any other). `max_window` (ms) bounds
    /// how long a call may run on after its reply ended, and how long one may wait for a retry.
    pub fn new(alias: &str, interval_prefix: &str, max_window: Millis) -> McpMount {
        McpMount {
            alias: alias.to_string(),
            interval_prefix: interval_prefix.to_string(),
            max_window,
            exchanges: HashMap::new(),
            running: BTreeMap::new(),
            waiting: Vec::new(),
            events: VecDeque::new(),
            counts: Counts::default(),
            next_exchange: 0,
            next_seq: 0,
            reads: Vec::new(),
        }
    }

    /// A new exchange, from its request head.
    pub fn open(&mut self, head: RequestHead<'_>) -> ExchangeId {
        let id = ExchangeId(self.next_exchange);
        self.next_exchange += 1;
        let session = head.session_id.map(|s| {
            let mut key = [0u8; 32];
            key.copy_from_slice(&sha2::Sha256::digest(s));
            key
        });
        let request = (head.method == HttpMethod::Post)
            .then(|| BodyReader::new(Framing::Json, head.content_encoding));
        self.exchanges.insert(
            id,
            Exchange {
                method: head.method,
                session,
                revision: Revision::of(head.protocol_version),
                host: head.host.map(str::to_string),
                request,
                request_passed: false,
                response: None,
                status: 0,
                calls: Vec::new(),
            },
        );
        id
    }

    /// A piece of the request body, as the client sent it (any chunking, any coding).
    pub fn handle_request_body(&mut self, x: ExchangeId, piece: &[u8]) {
        let Some(ex) = self.exchanges.get_mut(&x) else {
            return;
        };
        if let Some(r) = ex.request.as_mut() {
            // Client messages need no time of their own: they count from s.
            r.push(piece, 0.0, &mut self.reads);
        }
    }

    /// The relay wrote the last byte of the request body upstream at `s`: the body's
    /// `tools/call`s start, its cancellations and a `DELETE` take effect.
    pub fn handle_request_end(&mut self, x: ExchangeId, s: Millis) {
        let Some(ex) = self.exchanges.get_mut(&x) else {
            return;
        };
        if std::mem::replace(&mut ex.request_passed, true) {
            return;
        }
        let (method, session, host) = (ex.method, ex.session, ex.host.clone());
        if method == HttpMethod::Delete {
            if let Some(session) = session {
                self.end_session(session, s);
            }
            return;
        }
        let Some(mut reader) = ex.request.take() else {
            return;
        };
        let mut reads = std::mem::take(&mut self.reads);
        reads.clear();
        reader.finish(s, &mut reads);
        let Some(read) = reads.pop() else {
            self.counts.problem(Problem::RequestUndecodable);
            self.reads = reads;
            return;
        };
        self.reads = reads;
        let Ok(value) = serde_json::from_slice::<Value>(&read.skeleton) else {
            self.counts.problem(Problem::RequestUndecodable);
            return;
        };
        let messages = match value {
            Value::Array(batch) => batch,
            one => vec![one],
        };
        for msg in &messages {
            self.client_message(x, session, host.as_deref(), msg, s);
        }
    }

    /// The upstream's response head (`Content-Type`, `Content-Encoding` as sent).
    pub fn handle_response_head(
        &mut self,
        x: ExchangeId,
        status: u16,
        content_type: Option<&str>,
        content_encoding: Option<&str>,
    ) {
        let Some(ex) = self.exchanges.get_mut(&x) else {
            return;
        };
        ex.status = status;
        let framing = Framing::of_content_type(content_type);
        ex.response = Some(BodyReader::new(framing, content_encoding));
    }

    /// A piece of the response body, read from the upstream at `at`.
    pub fn handle_response_body(&mut self, x: ExchangeId, piece: &[u8], at: Millis) {
        let Some(r) = self
            .exchanges
            .get_mut(&x)
            .and_then(|ex| ex.response.as_mut())
        else {
            return;
        };
        let mut reads = std::mem::take(&mut self.reads);
        reads.clear();
        r.push(piece, at, &mut reads);
        for read in reads.drain(..) {
            self.server_skeleton(x, &read);
        }
        self.reads = reads;
    }

    /// The exchange ended at `at`, `how`. Ends its reply (design.md §8) and forgets it.
    pub fn handle_end(&mut self, x: ExchangeId, at: Millis, how: ExchangeEnd) {
        let Some(mut response) = self.exchanges.get_mut(&x).map(|ex| ex.response.take()) else {
            return;
        };
        if let Some(r) = response.as_mut() {
            let mut reads = std::mem::take(&mut self.reads);
            reads.clear();
            r.finish(at, &mut reads);
            for read in reads.drain(..) {
                self.server_skeleton(x, &read);
            }
            self.reads = reads;
        }
        let Some(ex) = self.exchanges.remove(&x) else {
            return;
        };
        *self
            .counts
            .exchanges
            .entry((ex.method, ex.status))
            .or_default() += 1;
        if ex.request.is_some() && !ex.request_passed {
            self.counts.problem(Problem::RequestNotWhole);
        }
        if let Some(r) = &response {
            if r.faults.undecodable {
                self.counts.problem(Problem::ResponseUndecodable);
            }
            for _ in 0..r.faults.skipped_events {
                self.counts.problem(Problem::EventSkipped);
            }
        }
        let event_id = response.as_ref().is_some_and(BodyReader::event_id_seen);
        for seq in ex.calls {
            let Some(run) = self.running.get_mut(&seq) else {
                continue;
            };
            if run.exchange != Some(x) {
                continue;
            }
            let outcome = if (400..600).contains(&ex.status) {
                Outcome::Error
            } else if ex.revision == Revision::Stateless && how == ExchangeEnd::ClientClosed {
                Outcome::Cancelled
            } else if ex.revision == Revision::Resumable && event_id {
                // The server may resume this stream: the call runs on.
                run.exchange = None;
                run.deadline = Some(run.call.start + self.max_window);
                continue;
            } else {
                Outcome::Lost
            };
            self.end(seq, at, at, outcome);
        }
    }

    /// The next moment [`handle_timeout`](Self::handle_timeout) has something to do.
    pub fn poll_timeout(&self) -> Option<Millis> {
        let running = self.running.values().filter_map(|r| r.deadline);
        let waiting = self.waiting.iter().map(|w| w.since + self.max_window);
        running.chain(waiting).min_by(f64::total_cmp)
    }

    /// Gives up, at `now`, every call whose `max_window` has passed: a call running on after
    /// its reply ended is `lost`, a call waiting for a retry `cancelled` (unanswered). Each
    /// ends at its deadline.
    pub fn handle_timeout(&mut self, now: Millis) {
        let due: Vec<(u64, Millis)> = self
            .running
            .iter()
            .filter_map(|(&seq, r)| r.deadline.filter(|d| *d <= now).map(|d| (seq, d)))
            .collect();
        let mut ends: Vec<(Call, Millis, Outcome, bool)> = Vec::new();
        for (seq, deadline) in due {
            if let Some(run) = self.running.remove(&seq) {
                ends.push((run.call, deadline, Outcome::Lost, false));
            }
        }
        let max_window = self.max_window;
        let mut i = 0;
        while i < self.waiting.len() {
            let deadline = self.waiting[i].since + max_window;
            if deadline <= now {
                let w = self.waiting.remove(i);
                ends.push((unanswered(w, deadline), deadline, Outcome::Cancelled, true));
            } else {
                i += 1;
            }
        }
        ends.sort_by_key(|e| e.0.seq);
        for (call, end, outcome, unanswered) in ends {
            self.emit_end(call, end, now, outcome, unanswered);
        }
    }

    /// The relay stops at `now`: every running call ends `lost`, every call waiting for a
    /// retry `cancelled` (unanswered), oldest first. Open exchanges are forgotten.
    pub fn handle_stop(&mut self, now: Millis) {
        let mut ends: Vec<(Call, Outcome, bool)> = std::mem::take(&mut self.running)
            .into_values()
            .map(|r| (r.call, Outcome::Lost, false))
            .collect();
        for w in std::mem::take(&mut self.waiting) {
            ends.push((unanswered(w, now), Outcome::Cancelled, true));
        }
        ends.sort_by_key(|e| e.0.seq);
        for (call, outcome, unanswered) in ends {
            let end = now.max(call.start);
            self.emit_end(call, end, end, outcome, unanswered);
        }
        for (_, ex) in self.exchanges.drain() {
            *self
                .counts
                .exchanges
                .entry((ex.method, ex.status))
                .or_default() += 1;
        }
    }

    /// The next event, in the order they happened.
    pub fn poll_event(&mut self) -> Option<McpEvent> {
        self.events.pop_front()
    }

    /// Calls started and not ended (waiting for a retry included).
    pub fn running(&self) -> usize {
        self.running.len() + self.waiting.len()
    }

    /// What was seen, as counts.
    pub fn counts(&self) -> &Counts {
        &self.counts
    }

    fn client_message(
        &mut self,
        x: ExchangeId,
        session: Option<SessionKey>,
        host: Option<&str>,
        msg: &Value,
        s: Millis,
    ) {
        let Some(obj) = msg.as_object() else {
            self.counts.message(Sender::Client, methods::OTHER);
            return;
        };
        let method = obj.get("method").and_then(Value::as_str);
        self.counts.message(
            Sender::Client,
            method.map_or(methods::RESPONSE, method_word),
        );
        match method {
            Some("tools/call") => self.tools_call(x, session, host, obj, s),
            Some("notifications/cancelled") => {
                let named = obj
                    .get("params")
                    .and_then(|p| p.get("requestId"))
                    .and_then(Id::of);
                let hits: Vec<u64> = match &named {
                    Some(id) => self
                        .running
                        .iter()
                        .filter(|(_, r)| {
                            r.id == *id
                                && r.call.session == session
                                && r.call.host.as_deref() == host
                        })
                        .map(|(&seq, _)| seq)
                        .collect(),
                    None => Vec::new(),
                };
                match hits.as_slice() {
                    [one] => self.end(*one, s, s, Outcome::Cancelled),
                    _ => self.counts.problem(Problem::UnmatchedCancel),
                }
            }
            _ => {}
        }
    }

    fn tools_call(
        &mut self,
        x: ExchangeId,
        session: Option<SessionKey>,
        host: Option<&str>,
        obj: &serde_json::Map<String, Value>,
        s: Millis,
    ) {
        let Some((id, tool, hints)) = tools_call_of(obj) else {
            return;
        };
        let params = obj.get("params");
        // Ids are unique among a client's running requests; one reused within an exchange
        // leaves no way to tell the two answers apart, so the older call's end is unknowable.
        let dup = self
            .exchanges
            .get(&x)
            .into_iter()
            .flat_map(|ex| ex.calls.iter())
            .copied()
            .find(|seq| {
                self.running
                    .get(seq)
                    .is_some_and(|r| r.id == id && r.exchange == Some(x))
            });
        if let Some(old) = dup {
            self.counts.problem(Problem::DuplicateId);
            self.end(old, s, s, Outcome::Lost);
        }
        let state = params
            .and_then(|p| p.get("requestState"))
            .and_then(Value::as_str)
            .map(state_key);
        let retry = state.is_some() || params.is_some_and(|p| p.get("inputResponses").is_some());
        if retry {
            if let Some(w) = self.take_waiting(host, tool, state.as_deref(), &hints) {
                let mut call = w.call;
                call.rounds = call.rounds.saturating_add(1);
                call.input_wait += (s - w.since).max(0.0);
                fill_hints(&mut call.hints, hints);
                let seq = call.seq;
                self.track(x, seq, call, id);
                return;
            }
        }
        self.supersede(host, tool, &hints, s);
        if self.running() >= MAX_RUNNING {
            self.counts.problem(Problem::TooManyCalls);
            return;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let call = Call {
            seq,
            tool: tool.to_string(),
            start: s,
            hints,
            session,
            host: host.map(str::to_string),
            rounds: 1,
            input_wait: 0.0,
        };
        self.events.push_back(McpEvent {
            at: s,
            kind: EventKind::McpStart {
                interval: self.interval_id(seq),
                alias: self.alias.clone(),
                tool: call.tool.clone(),
                start: s,
                host: call.host.clone(),
                transport: McpTransport::Http,
            },
        });
        self.track(x, seq, call, id);
    }

    fn track(&mut self, x: ExchangeId, seq: u64, call: Call, id: Id) {
        if let Some(ex) = self.exchanges.get_mut(&x) {
            ex.calls.push(seq);
        }
        self.running.insert(
            seq,
            Running {
                call,
                id,
                exchange: Some(x),
                deadline: None,
            },
        );
    }

    /// The waiting call a retry continues: same host, same tool, then as the wrapper's
    /// observer joins rounds (equal `requestState`, else the one call its hints agree with).
    fn take_waiting(
        &mut self,
        host: Option<&str>,
        tool: &str,
        state: Option<&str>,
        hints: &Hints,
    ) -> Option<Waiting> {
        let candidates: Vec<usize> = self
            .waiting
            .iter()
            .enumerate()
            .filter(|(_, w)| {
                w.call.host.as_deref() == host
                    && w.call.tool == tool
                    && w.state.as_deref() == state
                    && !hints_conflict(&w.call.hints, hints)
            })
            .map(|(i, _)| i)
            .collect();
        let pick = pick_continued(&candidates, state.is_some(), |i| {
            hints_agree(&self.waiting[i].call.hints, hints)
        });
        pick.map(|i| self.waiting.remove(i))
    }

    /// A new (non-retry) call for the same tool use shows the host went on without the
    /// waiting calls it agrees with: they end unanswered.
    fn supersede(&mut self, host: Option<&str>, tool: &str, hints: &Hints, s: Millis) {
        let mut i = 0;
        while i < self.waiting.len() {
            let w = &self.waiting[i];
            if w.call.host.as_deref() == host
                && w.call.tool == tool
                && hints_agree(&w.call.hints, hints)
            {
                let w = self.waiting.remove(i);
                let call = unanswered(w, s);
                let end = s.max(call.start);
                self.emit_end(call, end, s, Outcome::Cancelled, true);
            } else {
                i += 1;
            }
        }
    }

    fn server_skeleton(&mut self, x: ExchangeId, read: &Read) {
        let Ok(value) = serde_json::from_slice::<Value>(&read.skeleton) else {
            return;
        };
        match value {
            Value::Array(batch) => {
                for msg in &batch {
                    self.server_message(x, msg, read.at);
                }
            }
            msg => self.server_message(x, &msg, read.at),
        }
    }

    fn server_message(&mut self, x: ExchangeId, msg: &Value, e: Millis) {
        let Some(obj) = msg.as_object() else {
            self.counts.message(Sender::Server, methods::OTHER);
            return;
        };
        if let Some(method) = obj.get("method") {
            // A server request or notification: counted, never an answer.
            let word = method.as_str().map_or(methods::OTHER, method_word);
            self.counts.message(Sender::Server, word);
            return;
        }
        self.counts.message(Sender::Server, methods::RESPONSE);
        let outcome = if obj.contains_key("error") {
            Outcome::Error
        } else if let Some(result) = obj.get("result") {
            if result.get("resultType").and_then(Value::as_str) == Some("input_required") {
                if let Some(seq) = obj
                    .get("id")
                    .and_then(Id::of)
                    .and_then(|id| self.find(x, &id))
                {
                    self.wait(seq, result, e);
                } else {
                    self.counts.problem(Problem::UnmatchedAnswer);
                }
                return;
            }
            if result.get("isError").and_then(Value::as_bool) == Some(true) {
                Outcome::Error
            } else {
                Outcome::Result
            }
        } else {
            self.counts.problem(Problem::UnmatchedAnswer);
            return;
        };
        match obj.get("id") {
            Some(Value::Null) if outcome == Outcome::Error => {
                // An error the server could not tie to a request: it answers every call of
                // its POST still unanswered.
                let own: Vec<u64> = self
                    .exchanges
                    .get(&x)
                    .map(|ex| ex.calls.clone())
                    .unwrap_or_default();
                let mut any = false;
                for seq in own {
                    if self
                        .running
                        .get(&seq)
                        .is_some_and(|r| r.exchange == Some(x))
                    {
                        self.end(seq, e, e, Outcome::Error);
                        any = true;
                    }
                }
                if !any {
                    self.counts.problem(Problem::UnmatchedAnswer);
                }
            }
            id => match id.and_then(Id::of).and_then(|id| self.find(x, &id)) {
                Some(seq) => self.end(seq, e, e, outcome),
                None => self.counts.problem(Problem::UnmatchedAnswer),
            },
        }
    }

    /// The running call an answer with `id` on exchange `x` answers: one of `x`'s own calls,
    /// else, on a GET of a session, the one call of that session with that id.
    fn find(&self, x: ExchangeId, id: &Id) -> Option<u64> {
        let ex = self.exchanges.get(&x)?;
        let own = ex.calls.iter().copied().find(|seq| {
            self.running
                .get(seq)
                .is_some_and(|r| r.exchange == Some(x) && r.id == *id)
        });
        if own.is_some() {
            return own;
        }
        let session = ex.session.filter(|_| ex.method == HttpMethod::Get)?;
        let mut hits = self
            .running
            .iter()
            .filter(|(_, r)| r.call.session == Some(session) && r.id == *id)
            .map(|(&seq, _)| seq);
        match (hits.next(), hits.next()) {
            (Some(one), None) => Some(one),
            _ => None,
        }
    }

    /// An `input_required` answer: the call waits for its retry.
    fn wait(&mut self, seq: u64, result: &Value, e: Millis) {
        let Some(run) = self.running.remove(&seq) else {
            return;
        };
        if self.waiting.len() >= MAX_WAITING {
            let oldest = self.waiting.remove(0);
            let call = unanswered(oldest, e);
            let end = e.max(call.start);
            self.emit_end(call, end, e, Outcome::Cancelled, true);
        }
        let state = result
            .get("requestState")
            .and_then(Value::as_str)
            .map(state_key);
        self.waiting.push(Waiting {
            call: run.call,
            since: e,
            state,
        });
    }

    /// Ends every call of a deleted session, `lost`, at `s`.
    fn end_session(&mut self, session: SessionKey, s: Millis) {
        let seqs: Vec<u64> = self
            .running
            .iter()
            .filter(|(_, r)| r.call.session == Some(session))
            .map(|(&seq, _)| seq)
            .collect();
        let mut ends: Vec<(Call, bool)> = seqs
            .into_iter()
            .filter_map(|seq| self.running.remove(&seq))
            .map(|r| (r.call, false))
            .collect();
        let mut i = 0;
        while i < self.waiting.len() {
            if self.waiting[i].call.session == Some(session) {
                let w = self.waiting.remove(i);
                ends.push((unanswered(w, s), true));
            } else {
                i += 1;
            }
        }
        ends.sort_by_key(|e| e.0.seq);
        for (call, unanswered) in ends {
            let end = s.max(call.start);
            self.emit_end(call, end, s, Outcome::Lost, unanswered);
        }
    }

    fn end(&mut self, seq: u64, end: Millis, at: Millis, outcome: Outcome) {
        if let Some(run) = self.running.remove(&seq) {
            let end = end.max(run.call.start);
            self.emit_end(run.call, end, at.max(end), outcome, false);
        }
    }

    fn emit_end(
        &mut self,
        call: Call,
        end: Millis,
        at: Millis,
        outcome: Outcome,
        unanswered: bool,
    ) {
        let rounds = (call.rounds > 1 || unanswered).then(|| Rounds {
            rounds: call.rounds,
            input_wait: call.input_wait.min(end - call.start),
            unanswered,
        });
        self.events.push_back(McpEvent {
            at: at.max(end),
            kind: EventKind::McpInterval {
                interval: self.interval_id(call.seq),
                alias: self.alias.clone(),
                tool: call.tool,
                start: call.start,
                end,
                outcome,
                hints: call.hints,
                host: call.host,
                rounds,
                transport: McpTransport::Http,
            },
        });
    }

    fn interval_id(&self, seq: u64) -> String {
        format!("{}{}", self.interval_prefix, seq + 1)
    }
}

/// The call, ended while waiting on the client at `t`.
fn unanswered(w: Waiting, t: Millis) -> Call {
    let mut call = w.call;
    call.input_wait += (t - w.since).max(0.0);
    call
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
