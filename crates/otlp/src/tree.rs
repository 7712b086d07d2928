//! The run as a trace tree: a sans-IO builder that consumes the same events and records as
//! the correlator and emits finished OTLP spans (docs/otlp.md "The trace tree").
//!
//! ```text
//! invoke_agent {agent}               one agent turn of a thread (root, or under a Task call)
//! ├── chat {model}                   one model response: request time to response end
//! │   ├── execute_tool {tool}        an MCP call attributed to this response's window
//! │   └── execute_tool Agent         a call that starts a subagent (Claude Code Agent/Task,
//! │       │                          Codex spawn_agent), open until its result
//! │       └── invoke_agent {agent}   the subagent's turn, when one such call is its only
//! │                                  candidate; with several (parallel subagents) it sits
//! │                                  under the parent's turn, linked to each candidate call
//! └── execute_tool {tool}            an abstained call whose candidates share this trace
//! ```
//!
//! An **agent turn** is the chain of responses that starts with a request continuing no
//! response of an unfinished turn (a user prompt, a side request, a warm-up) and goes on
//! through every request that continues a response of the turn that made client tool calls;
//! it ends when one of its responses completes without a client tool call. A turn whose chain
//! breaks (a failed response, a lost stream) stays open until the run ends or it has been
//! idle for the retention horizon.
//!
//! Nothing here decides attribution: records come from the correlator as they are. The tree
//! only places them. Every span is emitted once, when it is finished (ids are derived, so a
//! child may leave before its parent). Only events and records the sanitizing door let out
//! are used, and nothing is added that they do not hold (docs/design.md §7).

use std::collections::HashMap;

use correlator::records::Record;
use correlator::sanitize::{Cleared, Door};
use correlator::{
    CallKind, Client, Event, EventKind, Millis, Outcome, ResponseStatus, Rounds, StopReason, Usage,
};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::span::{Link, SpanKind};
use opentelemetry_proto::tonic::trace::v1::{Span, Status};
use sha2::{Digest, Sha256};

use super::span::{
    attr, error_status, kv_int, kv_ms, kv_str, kv_strings, tool_attributes, unix_nanos,
    usage_attributes,
};
use relay::HostParent;

pub type TraceId = [u8; 16];
pub type SpanId = [u8; 8];

/// What makes this source's ids its own: derived from a trace file's name and content (a
/// replay of the same file gives the same ids; two files never share one) or from a live
/// run's random key.
#[derive(Clone)]
pub struct SourceKey([u8; 32]);

impl SourceKey {
    /// For a trace file: SHA-256 over its file name and the SHA-256 of its bytes.
    pub fn for_file(file_name: &str, content_sha256: [u8; 32]) -> Self {
        let mut h = Sha256::new();
        h.update(b"windowtap.otlp.file\0");
        h.update(file_name.as_bytes());
        h.update([0]);
        h.update(content_sha256);
        SourceKey(h.finalize().into())
    }

    /// For a live run: a fresh random key per run.
    pub fn for_run(random: [u8; 32]) -> Self {
        let mut h = Sha256::new();
        h.update(b"windowtap.otlp.run\0");
        h.update(random);
        SourceKey(h.finalize().into())
    }

    fn digest(&self, label: &str, id: &str) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(self.0);
        h.update(label.as_bytes());
        h.update([0]);
        h.update(id.as_bytes());
        h.finalize().into()
    }

    pub fn trace_id(&self, label: &str, id: &str) -> TraceId {
        let mut out = [0u8; 16];
        out.copy_from_slice(&self.digest(label, id)[..16]);
        nonzero(&mut out);
        out
    }

    pub fn span_id(&self, label: &str, id: &str) -> SpanId {
        let mut out = [0u8; 8];
        out.copy_from_slice(&self.digest(label, id)[..8]);
        nonzero(&mut out);
        out
    }
}

/// An all-zero id is invalid in OTLP (a receiver drops the span): make it impossible.
fn nonzero(id: &mut [u8]) {
    if id.iter().all(|b| *b == 0) {
        if let Some(last) = id.last_mut() {
            *last = 1;
        }
    }
}

/// A call that starts a subagent: Claude Code's `Agent` (older builds: `Task`), Codex's
/// `spawn_agent` (namespace `multi_agent_v1`).
fn is_subagent_call(client: Client, name: &str, kind: CallKind) -> bool {
    match client {
        Client::Claude => kind == CallKind::ToolUse && matches!(name, "Agent" | "Task"),
        Client::Codex => kind == CallKind::Function && name == "spawn_agent",
        Client::Other => false,
    }
}

/// `gen_ai.provider.name` for a host: the API it talks to.
fn provider(client: Client) -> &'static str {
    match client {
        Client::Claude => "anthropic",
        Client::Codex => "openai",
        Client::Other => "_OTHER",
    }
}

/// `gen_ai.agent.name` for a host.
fn agent_name(client: Client) -> Option<&'static str> {
    match client {
        Client::Claude => Some("Claude Code"),
        Client::Codex => Some("Codex"),
        Client::Other => None,
    }
}

struct StreamInfo {
    client: Client,
    thread: Option<String>,
    host: Option<String>,
    /// The host's span its request was made under (`--join-host-trace`).
    host_parent: Option<HostParent>,
    /// Responses started on this stream and not ended.
    open: Vec<String>,
}

struct RequestInfo {
    t: Millis,
    /// The response of an unfinished turn this request continues, if any.
    continues: Option<String>,
    /// The response that answers it, once started.
    answered_by: Option<String>,
    /// The host's span it was made under (a WebSocket request's own trace context).
    host_parent: Option<HostParent>,
}

struct CallSeen {
    id: String,
    t: Millis,
    name: String,
    namespace: Option<String>,
    kind: CallKind,
}

struct Response {
    stream: String,
    turn: String,
    thread: Option<String>,
    host: Option<String>,
    client: Client,
    request: Option<String>,
    /// When its request was had whole (or the response started, when the request is unknown).
    start: Millis,
    calls: Vec<CallSeen>,
    /// The first request that continued it: its window closed then.
    continued_at: Option<Millis>,
    end: Option<Millis>,
    model: Option<String>,
    usage: Usage,
    stop_reason: Option<StopReason>,
    span: SpanId,
    /// The trace its chat span (and every span under it) is in: its turn's, or the host's.
    trace: TraceId,
    /// Its chat span's parent: its turn's span, or the host's span its request named.
    parent: SpanId,
    /// Under the host's span rather than its turn's.
    joined: bool,
}

struct Turn {
    trace: TraceId,
    span: SpanId,
    parent: Option<SpanId>,
    thread: Option<String>,
    host: Option<String>,
    client: Client,
    start: Millis,
    /// The latest end among its responses and calls so far.
    end: Millis,
    responses: Vec<String>,
    requests: Vec<String>,
    /// Ended and emitted.
    done: bool,
    /// How its last response ended, when not completed.
    error: Option<&'static str>,
    subagent: bool,
    /// A subagent turn whose start has several candidate calls: one link to each.
    links: Vec<Link>,
}

/// A call that starts a subagent: its span runs from its call item until a request carries
/// its result. It stays a candidate for a subagent's first turn until one is placed under it
/// (Codex's `spawn_agent` answers at once, before its subagent's first request).
struct SubagentCall {
    name: String,
    client: Client,
    response: String,
    /// The turn of the response that made it.
    turn: String,
    thread: Option<String>,
    host: Option<String>,
    trace: TraceId,
    span: SpanId,
    parent: SpanId,
    start: Millis,
    /// When a request carried its result (its span went out then).
    ended: Option<Millis>,
    /// A subagent's turn was placed under it (or its set of candidates is used up).
    claimed: bool,
}

/// Where a subagent thread's turns go: under a span (the one call that started it, or its
/// parent's turn), with a link to each candidate call when there were several.
#[derive(Clone)]
struct Placement {
    under: Option<(TraceId, SpanId)>,
    links: Vec<Link>,
}

/// What an `mcp_interval` told that its record does not: the outcome and the thread hint.
struct Reported {
    outcome: Outcome,
    thread: Option<String>,
    host: Option<String>,
    rounds: Option<Rounds>,
}

/// The builder. Feed it every event and record in the order the correlator saw them.
pub struct Tree {
    key: SourceKey,
    epoch: u64,
    door: Door,
    /// How long a finished turn is kept for records that name it (live runs).
    horizon: Millis,
    last_prune: Millis,
    now: Millis,
    streams: HashMap<String, StreamInfo>,
    requests: HashMap<String, RequestInfo>,
    responses: HashMap<String, Response>,
    /// Call id → the response that made it.
    calls: HashMap<String, String>,
    turns: HashMap<String, Turn>,
    subagent_calls: HashMap<String, SubagentCall>,
    /// Threads by id, from their first turn: where their turns go (`None`: not a subagent's)
    /// and when one last started (forgotten after the horizon).
    placed: HashMap<String, (Millis, Option<Placement>)>,
    /// Candidate sets (sorted call ids) and how many threads were placed under them without
    /// knowing which call is theirs: once as many as the calls, the set is used up.
    shared: HashMap<Vec<String>, usize>,
    reported: HashMap<String, Reported>,
    /// Host parents of streams not yet opened here (they come ahead of the stream's events).
    joins: HashMap<String, HostParent>,
    /// Host parents of requests not yet seen here (likewise, ahead of their request event).
    request_joins: HashMap<String, HostParent>,
    /// Attributed calls' spans waiting for the response to the request that closed their
    /// window (the continuation that consumed the result), to link to it: by request.
    awaiting_continuation: HashMap<String, Vec<Span>>,
}

impl Tree {
    /// `epoch_unix_nanos`: the wall-clock time of the trace clock's 0. `door` is the one the
    /// caller writes through; `horizon` bounds how long finished turns are remembered.
    pub fn new(key: SourceKey, epoch_unix_nanos: u64, door: Door, horizon: Millis) -> Self {
        Tree {
            key,
            epoch: epoch_unix_nanos,
            door,
            horizon,
            last_prune: 0.0,
            now: 0.0,
            streams: HashMap::new(),
            requests: HashMap::new(),
            responses: HashMap::new(),
            calls: HashMap::new(),
            turns: HashMap::new(),
            subagent_calls: HashMap::new(),
            placed: HashMap::new(),
            shared: HashMap::new(),
            reported: HashMap::new(),
            joins: HashMap::new(),
            request_joins: HashMap::new(),
            awaiting_continuation: HashMap::new(),
        }
    }

    /// The responses of `stream` (an HTTP exchange: one request) were asked for under the
    /// host's span `parent`: their chat spans go under it, in the host's trace, and the
    /// spans under them follow. Call before the stream's `stream_open` is fed.
    pub fn join(&mut self, stream: &str, parent: HostParent) {
        self.joins.insert(stream.to_owned(), parent);
    }

    /// The response to `request` (a WebSocket's, which carries its own trace context) was
    /// asked for under the host's span `parent`; it wins over its stream's. Call before the
    /// request's event is fed.
    pub fn join_request(&mut self, request: &str, parent: HostParent) {
        self.request_joins.insert(request.to_owned(), parent);
    }

    /// Responses, turns and calls held (for retention checks).
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.responses.len()
            + self.turns.len()
            + self.requests.len()
            + self.reported.len()
            + self.joins.len()
            + self.request_joins.len()
            + self.awaiting_continuation.len()
    }

    /// One event, as fed to the correlator. An event the door refuses is ignored.
    pub fn event(&mut self, ev: &Event, out: &mut Vec<Span>) {
        if self.door.event(ev).is_err() {
            return;
        }
        self.now = self.now.max(ev.t);
        let t = ev.t;
        match &ev.kind {
            EventKind::StreamOpen {
                stream,
                client,
                thread,
                host,
                ..
            } => {
                self.streams.insert(
                    stream.clone(),
                    StreamInfo {
                        client: *client,
                        thread: thread.clone(),
                        host: host.clone(),
                        host_parent: self.joins.remove(stream.as_str()),
                        open: Vec::new(),
                    },
                );
            }
            EventKind::Request {
                stream,
                request,
                previous_response,
                outputs,
            } => self.request(
                t,
                stream,
                request,
                previous_response.as_deref(),
                outputs,
                out,
            ),
            EventKind::ResponseStart {
                stream,
                response,
                request,
                model,
            } => self.response_start(
                t,
                stream,
                response,
                request.as_deref(),
                model.as_deref(),
                out,
            ),
            EventKind::ToolCall {
                response,
                call,
                name,
                namespace,
                kind,
                ..
            } => self.tool_call(t, response, call, name, namespace.as_deref(), *kind),
            EventKind::ResponseEnd {
                response,
                status,
                usage,
                stop_reason,
                ..
            } => {
                if let Some(resp) = self.responses.get_mut(response) {
                    resp.usage = usage.unwrap_or_default();
                    resp.stop_reason = *stop_reason;
                }
                let error = match status {
                    ResponseStatus::Completed => None,
                    other => Some(other.as_str()),
                };
                self.end_response(t, response, error, out);
            }
            EventKind::StreamClose { stream } => {
                self.end_stream(t, stream, "stream_closed", out);
                self.streams.remove(stream);
            }
            EventKind::ObservationLost { stream, .. } => {
                self.end_stream(t, stream, "observation_lost", out)
            }
            EventKind::McpStart { .. } => {}
            EventKind::McpInterval {
                interval,
                outcome,
                hints,
                host,
                rounds,
                ..
            } => {
                self.reported.insert(
                    interval.clone(),
                    Reported {
                        outcome: *outcome,
                        thread: hints.thread.clone(),
                        host: host.clone(),
                        rounds: *rounds,
                    },
                );
            }
        }
        if t - self.last_prune >= 60_000.0 {
            self.prune(t, out);
        }
    }

    fn request(
        &mut self,
        t: Millis,
        stream: &str,
        request: &str,
        previous_response: Option<&str>,
        outputs: &[String],
        out: &mut Vec<Span>,
    ) {
        let thread = self.streams.get(stream).and_then(|s| s.thread.clone());
        // Results of calls that start subagents: the call span is done (a blocking subagent
        // is done too; Codex's spawn_agent answers at once, and the call stays a candidate for
        // its subagent's first turn until one is placed under it).
        for call in outputs {
            let Some(sc) = self.subagent_calls.get(call) else {
                continue;
            };
            if sc.ended.is_some() {
                continue;
            }
            out.push(self.subagent_span(call, sc, t, None));
            if let Some(turn) = self.turns.get_mut(&sc.turn) {
                turn.end = turn.end.max(t);
            }
            if sc.claimed {
                self.subagent_calls.remove(call);
            } else if let Some(sc) = self.subagent_calls.get_mut(call) {
                sc.ended = Some(t);
            }
        }
        // The continued responses (docs/design.md §3), the latest first; only one of an
        // unfinished turn that made client tool calls keeps the turn going.
        let same_thread = |r: &Response| match (&thread, &r.thread) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        let mut continued: Vec<&str> = previous_response
            .into_iter()
            .chain(
                outputs
                    .iter()
                    .filter_map(|c| self.calls.get(c).map(String::as_str)),
            )
            .filter(|r| self.responses.get(*r).is_some_and(same_thread))
            .collect();
        continued.sort_by(|a, b| {
            let start = |r: &str| self.responses.get(r).map_or(0.0, |r| r.start);
            start(b).total_cmp(&start(a)).then_with(|| a.cmp(b))
        });
        continued.dedup();
        let continued: Vec<String> = continued.into_iter().map(str::to_owned).collect();
        for r in &continued {
            if let Some(resp) = self.responses.get_mut(r) {
                resp.continued_at.get_or_insert(t);
            }
        }
        let continues = continued.into_iter().find(|r| {
            self.responses.get(r).is_some_and(|resp| {
                !resp.calls.is_empty() && self.turns.get(&resp.turn).is_some_and(|tn| !tn.done)
            })
        });
        self.requests.insert(
            request.to_owned(),
            RequestInfo {
                t,
                continues,
                answered_by: None,
                host_parent: self.request_joins.remove(request),
            },
        );
    }

    fn response_start(
        &mut self,
        t: Millis,
        stream: &str,
        response: &str,
        request: Option<&str>,
        model: Option<&str>,
        out: &mut Vec<Span>,
    ) {
        let (client, thread, host, host_parent) = self
            .streams
            .get(stream)
            .map(|s| (s.client, s.thread.clone(), s.host.clone(), s.host_parent))
            .unwrap_or((Client::Other, None, None, None));
        let req = request.and_then(|q| self.requests.get(q));
        let start = req.map_or(t, |q| q.t);
        let host_parent = req.and_then(|q| q.host_parent).or(host_parent);
        let joined = req
            .and_then(|q| q.continues.as_ref())
            .and_then(|r| self.responses.get(r))
            .map(|r| r.turn.clone())
            .filter(|k| self.turns.get(k).is_some_and(|tn| !tn.done));
        let turn_key = match joined {
            Some(k) => k,
            None => {
                let key = match request {
                    Some(q) => format!("q:{q}"),
                    None => format!("r:{response}"),
                };
                let turn = self.new_turn(&key, client, thread.clone(), host.as_deref(), start);
                self.turns.insert(key.clone(), turn);
                key
            }
        };
        let (trace, parent) = match (host_parent, self.turns.get_mut(&turn_key)) {
            (_, None) => return,
            (hp, Some(turn)) => {
                turn.responses.push(response.to_owned());
                if let Some(q) = request {
                    turn.requests.push(q.to_owned());
                }
                hp.map_or((turn.trace, turn.span), |p| (p.trace, p.span))
            }
        };
        if let Some(s) = self.streams.get_mut(stream) {
            s.open.push(response.to_owned());
        }
        let span = self.key.span_id("chat", response);
        self.responses.insert(
            response.to_owned(),
            Response {
                stream: stream.to_owned(),
                turn: turn_key,
                thread,
                host,
                client,
                request: request.map(str::to_owned),
                start,
                calls: Vec::new(),
                continued_at: None,
                end: None,
                model: model.map(str::to_owned),
                usage: Usage::default(),
                stop_reason: None,
                span,
                trace,
                parent,
                joined: host_parent.is_some(),
            },
        );
        if let Some(q) = request {
            if let Some(info) = self.requests.get_mut(q) {
                info.answered_by = Some(response.to_owned());
            }
            // Calls whose results this request carried: their continuation is known now.
            for mut tool in self.awaiting_continuation.remove(q).unwrap_or_default() {
                tool.links
                    .push(causal_link(trace, span, Causal::Continuation));
                out.push(tool);
            }
        }
    }

    /// A new turn: a subagent thread's goes where [`Self::place_subagent`] says, any other
    /// is the root of a trace of its own.
    fn new_turn(
        &mut self,
        key: &str,
        client: Client,
        thread: Option<String>,
        host: Option<&str>,
        start: Millis,
    ) -> Turn {
        let placement = thread
            .as_deref()
            .and_then(|th| self.place_subagent(th, client, host, start));
        let subagent = placement.is_some();
        let (under, links) = placement.map_or((None, Vec::new()), |p| (p.under, p.links));
        let (trace, parent) = match under {
            Some((trace, span)) => (trace, Some(span)),
            None => (self.key.trace_id("turn", key), None),
        };
        Turn {
            trace,
            span: self.key.span_id("turn", key),
            parent,
            thread,
            host: host.map(str::to_owned),
            client,
            start,
            end: start,
            responses: Vec::new(),
            requests: Vec::new(),
            done: false,
            error: None,
            subagent,
            links,
        }
    }

    /// Where the turns of thread `th` go, decided at its first turn. Its candidates: the
    /// calls that start subagents, made on another thread of the same host and client before
    /// this turn started, not yet claimed. One: under it, and it is claimed. Several
    /// (parallel subagents; the trace does not say which call started which thread): under
    /// the turn that made them when that is one turn, else a root, with a link to each; the
    /// set is used up once as many threads were placed on it as it has calls. None: not a
    /// subagent's thread.
    fn place_subagent(
        &mut self,
        th: &str,
        client: Client,
        host: Option<&str>,
        start: Millis,
    ) -> Option<Placement> {
        if let Some((last, placement)) = self.placed.get_mut(th) {
            *last = start;
            return placement.clone();
        }
        let mut candidates: Vec<&String> = self
            .subagent_calls
            .iter()
            .filter(|(_, sc)| {
                !sc.claimed
                    && sc.client == client
                    && sc.start <= start
                    && sc.thread.as_deref() != Some(th)
                    && same_host(sc.host.as_deref(), host)
            })
            .map(|(id, _)| id)
            .collect();
        candidates.sort();
        let candidates: Vec<String> = candidates.into_iter().cloned().collect();
        let placement = match candidates.as_slice() {
            [] => None,
            [one] => {
                let under = self.subagent_calls.get(one).map(|sc| (sc.trace, sc.span));
                self.claim(one);
                Some(Placement {
                    under,
                    links: Vec::new(),
                })
            }
            several => {
                let links = several
                    .iter()
                    .filter_map(|c| self.subagent_calls.get(c))
                    .map(|sc| link(sc.trace, sc.span, "spawn_candidate"))
                    .collect();
                let turn = &self.subagent_calls[&several[0]].turn;
                let one_turn = several.iter().all(|c| {
                    self.subagent_calls
                        .get(c)
                        .is_some_and(|sc| sc.turn == *turn)
                });
                let under = self
                    .turns
                    .get(turn)
                    .filter(|_| one_turn)
                    .map(|t| (t.trace, t.span));
                let placed = self.shared.entry(candidates.clone()).or_insert(0);
                *placed += 1;
                if *placed >= candidates.len() {
                    self.shared.remove(&candidates);
                    for c in &candidates {
                        self.claim(c);
                    }
                }
                Some(Placement { under, links })
            }
        };
        self.placed
            .insert(th.to_owned(), (start, placement.clone()));
        placement
    }

    /// A call a subagent was placed under: no longer a candidate; forgotten once its span is
    /// out (else when its result comes).
    fn claim(&mut self, call: &str) {
        let Some(sc) = self.subagent_calls.get_mut(call) else {
            return;
        };
        sc.claimed = true;
        if sc.ended.is_some() {
            self.subagent_calls.remove(call);
        }
    }

    fn tool_call(
        &mut self,
        t: Millis,
        response: &str,
        call: &str,
        name: &str,
        namespace: Option<&str>,
        kind: CallKind,
    ) {
        let Some(resp) = self.responses.get_mut(response) else {
            return;
        };
        resp.calls.push(CallSeen {
            id: call.to_owned(),
            t,
            name: name.to_owned(),
            namespace: namespace.map(str::to_owned),
            kind,
        });
        self.calls.insert(call.to_owned(), response.to_owned());
        if is_subagent_call(resp.client, name, kind) && self.turns.contains_key(&resp.turn) {
            self.subagent_calls.insert(
                call.to_owned(),
                SubagentCall {
                    name: name.to_owned(),
                    client: resp.client,
                    response: response.to_owned(),
                    turn: resp.turn.clone(),
                    thread: resp.thread.clone(),
                    host: resp.host.clone(),
                    trace: resp.trace,
                    span: self.key.span_id("call", call),
                    parent: resp.span,
                    start: t,
                    ended: None,
                    claimed: false,
                },
            );
        }
    }

    fn end_stream(&mut self, t: Millis, stream: &str, why: &'static str, out: &mut Vec<Span>) {
        let open = self
            .streams
            .get_mut(stream)
            .map(|s| std::mem::take(&mut s.open))
            .unwrap_or_default();
        for r in open {
            self.end_response(t, &r, Some(why), out);
        }
    }

    /// A response ended (`error`: how, when not completed): its chat span, and the turn's
    /// root when this ends the turn.
    fn end_response(
        &mut self,
        t: Millis,
        response: &str,
        error: Option<&'static str>,
        out: &mut Vec<Span>,
    ) {
        let Some(resp) = self.responses.get_mut(response) else {
            return;
        };
        if resp.end.is_some() {
            return;
        }
        resp.end = Some(t);
        if let Some(s) = self.streams.get_mut(&resp.stream) {
            s.open.retain(|r| r != response);
        }
        let resp = &self.responses[response];
        let Some(turn) = self.turns.get(&resp.turn) else {
            return;
        };
        out.push(self.chat_span(response, resp, turn, t, error));
        let ends_turn = error.is_none() && resp.calls.is_empty();
        let turn_key = resp.turn.clone();
        if let Some(turn) = self.turns.get_mut(&turn_key) {
            turn.end = turn.end.max(t);
            turn.error = error;
        }
        if ends_turn {
            self.end_turn(&turn_key, out);
        }
    }

    fn end_turn(&mut self, key: &str, out: &mut Vec<Span>) {
        let Some(turn) = self.turns.get_mut(key) else {
            return;
        };
        if turn.done {
            return;
        }
        turn.done = true;
        let turn = &self.turns[key];
        out.push(self.turn_span(turn));
    }

    /// One record: its `execute_tool` span, placed in the tree.
    pub fn record(&mut self, cleared: &Cleared<'_>, out: &mut Vec<Span>) {
        let r = cleared.record();
        let reported = self.reported.remove(&*r.interval);
        let mut a = tool_attributes(r);
        let mut links = Vec::new();
        let place = match &r.window {
            Some(w) => self.responses.get(&*w.response).and_then(|resp| {
                let turn = self.turns.get(&resp.turn)?;
                // Also its parent; the link says why, for backends that read links.
                links.push(causal_link(resp.trace, resp.span, Causal::Generation));
                Some((resp.trace, Some(resp.span), turn.thread.clone()))
            }),
            None => {
                let host = reported.as_ref().and_then(|rp| rp.host.as_deref());
                let candidates = self.candidates(r, host);
                for resp in &candidates {
                    links.push(link(resp.trace, resp.span, "candidate"));
                }
                self.abstained_place(r, &candidates, reported.as_ref())
            }
        };
        let (trace, parent, thread) =
            place.unwrap_or_else(|| (self.key.trace_id("call", &r.interval), None, None));
        if let Some(th) = thread.or_else(|| reported.as_ref().and_then(|rp| rp.thread.clone())) {
            a.push(kv_str(attr::SESSION_ID, &th));
            if r.window.is_none() {
                a.push(kv_str(attr::CONVERSATION_ID, &th));
            }
        }
        let mut status = None;
        if let Some(rp) = &reported {
            if let Some(h) = &rp.host {
                a.push(kv_str(attr::HOST, h));
            }
            a.push(kv_str(attr::OUTCOME, rp.outcome.as_str()));
            if let Some(r) = &rp.rounds {
                a.push(kv_int(attr::MCP_ROUNDS, i64::from(r.rounds)));
                a.push(kv_ms(attr::MCP_INPUT_WAIT_MS, r.input_wait));
                if r.unanswered {
                    a.push(kv_str(attr::OUTCOME_DETAIL, Rounds::INPUT_UNANSWERED));
                }
            }
            if rp.outcome != Outcome::Result {
                a.push(kv_str(attr::ERROR_TYPE, rp.outcome.as_str()));
                status = Some(error_status(rp.outcome.as_str()));
            }
        }
        let span = Span {
            trace_id: trace.to_vec(),
            span_id: self.key.span_id("tool", &r.interval).to_vec(),
            trace_state: String::new(),
            parent_span_id: parent.map(|p| p.to_vec()).unwrap_or_default(),
            flags: 1,
            name: format!("execute_tool {}", r.tool),
            kind: SpanKind::Internal as i32,
            start_time_unix_nano: unix_nanos(self.epoch, r.start),
            end_time_unix_nano: unix_nanos(self.epoch, r.end),
            attributes: a,
            dropped_attributes_count: 0,
            events: Vec::new(),
            dropped_events_count: 0,
            links,
            dropped_links_count: 0,
            status,
        };
        self.place_continuation(r, span, out);
    }

    /// An attributed call's span links to the response that answered the request which
    /// closed its window (and so carried its result): now, if that response has started;
    /// else the span waits for it (until the run ends, or the request is forgotten).
    fn place_continuation(&mut self, r: &Record, mut span: Span, out: &mut Vec<Span>) {
        let Some(q) = r.window.as_ref().and_then(|w| w.request.as_deref()) else {
            out.push(span);
            return;
        };
        match self.requests.get(q) {
            Some(info) => match info
                .answered_by
                .as_ref()
                .and_then(|a| self.responses.get(a))
            {
                Some(cont) => {
                    span.links
                        .push(causal_link(cont.trace, cont.span, Causal::Continuation));
                    out.push(span);
                }
                None => self
                    .awaiting_continuation
                    .entry(q.to_owned())
                    .or_default()
                    .push(span),
            },
            None => out.push(span),
        }
    }

    /// Spans still waiting for a continuation go out without that link.
    fn flush_awaiting(&mut self, keep: impl Fn(&str) -> bool, out: &mut Vec<Span>) {
        let mut gone: Vec<String> = self
            .awaiting_continuation
            .keys()
            .filter(|q| !keep(q))
            .cloned()
            .collect();
        gone.sort();
        for q in gone {
            out.extend(self.awaiting_continuation.remove(&q).unwrap_or_default());
        }
    }

    /// The responses that could have issued an abstained call: a client tool call complete
    /// at or before its start that names its tool (or an opaque program call), in a window
    /// not closed before it started. The exporter's own view, for links only.
    fn candidates(&self, r: &Record, host: Option<&str>) -> Vec<&Response> {
        let mut c: Vec<&Response> = self
            .responses
            .values()
            .filter(|resp| {
                resp.continued_at.is_none_or(|c| c >= r.start)
                    && same_host(resp.host.as_deref(), host)
                    && resp.calls.iter().any(|call| {
                        call.t <= r.start
                            && (call.kind == CallKind::Custom
                                || correlator::resolves(
                                    resp.client,
                                    &call.name,
                                    call.namespace.as_deref(),
                                    &r.alias,
                                    &r.tool,
                                ))
                    })
            })
            .collect();
        c.sort_by(|a, b| a.start.total_cmp(&b.start));
        c
    }

    /// Where an abstained call goes: under the root turn of the one trace all its candidates
    /// share; else under the turn of its thread hint that was running when it started; else
    /// (`None`) a root of its own.
    fn abstained_place(
        &self,
        r: &Record,
        candidates: &[&Response],
        reported: Option<&Reported>,
    ) -> Option<(TraceId, Option<SpanId>, Option<String>)> {
        let first = candidates.first()?;
        let turn = self.turns.get(&first.turn)?;
        let shared = candidates.iter().all(|c| {
            self.turns
                .get(&c.turn)
                .is_some_and(|t| t.trace == turn.trace)
        });
        if shared {
            // The outermost turn of that trace: the one without a parent.
            let root = self
                .turns
                .values()
                .find(|t| t.trace == turn.trace && t.parent.is_none())
                .unwrap_or(turn);
            return Some((root.trace, Some(root.span), root.thread.clone()));
        }
        let hint = reported?.thread.as_ref()?;
        let turn = self.turns.values().find(|t| {
            t.thread.as_ref() == Some(hint) && t.start <= r.start && (!t.done || t.end >= r.start)
        })?;
        Some((turn.trace, Some(turn.span), turn.thread.clone()))
    }

    /// The end of the input: every open response, call and turn ends now.
    pub fn finish(&mut self, now: Millis, out: &mut Vec<Span>) {
        let now = now.max(self.now);
        self.flush_awaiting(|_| false, out);
        let mut open: Vec<String> = self
            .responses
            .iter()
            .filter(|(_, r)| r.end.is_none())
            .map(|(k, _)| k.clone())
            .collect();
        open.sort();
        for r in open {
            self.end_response(now, &r, Some("unfinished"), out);
        }
        let mut calls: Vec<(String, SubagentCall)> = self
            .subagent_calls
            .drain()
            .filter(|(_, sc)| sc.ended.is_none())
            .collect();
        calls.sort_by(|a, b| a.0.cmp(&b.0));
        for (id, sc) in calls {
            out.push(self.subagent_span(&id, &sc, now, Some("unfinished")));
        }
        self.shared.clear();
        let mut turns: Vec<String> = self
            .turns
            .iter()
            .filter(|(_, t)| !t.done)
            .map(|(k, _)| k.clone())
            .collect();
        turns.sort();
        for k in turns {
            self.end_turn(&k, out);
        }
    }

    /// Live runs: forget turns finished more than `horizon` ago; end responses, Agent/Task
    /// calls and turns open that long.
    fn prune(&mut self, now: Millis, out: &mut Vec<Span>) {
        self.last_prune = now;
        let cutoff = now - self.horizon;
        let mut stale: Vec<String> = self
            .responses
            .iter()
            .filter(|(_, r)| r.end.is_none() && r.start < cutoff)
            .map(|(k, _)| k.clone())
            .collect();
        stale.sort();
        for r in stale {
            self.end_response(now, &r, Some("unfinished"), out);
        }
        let mut calls: Vec<String> = self
            .subagent_calls
            .iter()
            .filter(|(_, sc)| sc.start < cutoff)
            .map(|(k, _)| k.clone())
            .collect();
        calls.sort();
        for id in calls {
            if let Some(sc) = self.subagent_calls.remove(&id) {
                if sc.ended.is_none() {
                    out.push(self.subagent_span(&id, &sc, now, Some("unfinished")));
                }
            }
        }
        let calls = &self.subagent_calls;
        self.shared
            .retain(|set, _| set.iter().all(|c| calls.contains_key(c)));
        self.placed.retain(|_, (last, _)| *last >= cutoff);
        let mut idle: Vec<String> = self
            .turns
            .iter()
            .filter(|(_, t)| t.end < cutoff)
            .map(|(k, _)| k.clone())
            .collect();
        idle.sort();
        for k in idle {
            self.end_turn(&k, out);
            let Some(turn) = self.turns.remove(&k) else {
                continue;
            };
            for r in &turn.responses {
                if let Some(resp) = self.responses.remove(r) {
                    for c in &resp.calls {
                        self.calls.remove(&c.id);
                    }
                }
            }
            for q in &turn.requests {
                self.requests.remove(q);
            }
        }
        // Requests that never got a response.
        self.requests.retain(|_, q| q.t >= cutoff);
        let requests = std::mem::take(&mut self.requests);
        self.flush_awaiting(|q| requests.contains_key(q), out);
        self.requests = requests;
    }

    fn chat_span(
        &self,
        id: &str,
        resp: &Response,
        turn: &Turn,
        end: Millis,
        error: Option<&'static str>,
    ) -> Span {
        let mut a = vec![
            kv_str(attr::OPERATION_NAME, "chat"),
            kv_str(attr::PROVIDER_NAME, provider(resp.client)),
            kv_str(attr::RESPONSE_ID, id),
        ];
        if let Some(m) = &resp.model {
            // Only the response's model is observed; the request names the same one.
            a.push(kv_str(attr::REQUEST_MODEL, m));
            a.push(kv_str(attr::RESPONSE_MODEL, m));
        }
        usage_attributes(resp.client, &resp.usage, &mut a);
        if let Some(s) = &resp.stop_reason {
            a.push(kv_strings(
                attr::FINISH_REASONS,
                std::iter::once(s.as_str()),
            ));
        }
        if let Some(th) = &resp.thread {
            a.push(kv_str(attr::CONVERSATION_ID, th));
            a.push(kv_str(attr::SESSION_ID, th));
        }
        a.push(kv_str(attr::STREAM, &resp.stream));
        if let Some(q) = &resp.request {
            a.push(kv_str(attr::REQUEST, q));
        }
        a.push(kv_int(attr::TOOL_CALLS, resp.calls.len() as i64));
        if !resp.calls.is_empty() {
            a.push(kv_strings(
                attr::TOOL_CALL_NAMES,
                resp.calls.iter().map(|c| c.name.as_str()),
            ));
            a.push(kv_ms(attr::WINDOW_OPEN_MS, resp.calls[0].t));
        }
        if let Some(c) = resp.continued_at {
            a.push(kv_ms(attr::WINDOW_CLOSE_MS, c));
        }
        let status = error.map(|e| {
            a.push(kv_str(attr::ERROR_TYPE, e));
            error_status(e)
        });
        let name = match &resp.model {
            Some(m) => format!("chat {m}"),
            None => "chat".to_owned(),
        };
        let mut span = self.span(
            resp.trace,
            resp.span,
            Some(resp.parent),
            name,
            SpanKind::Client,
            (resp.start, end),
            a,
            status,
        );
        if resp.joined {
            // In the host's trace, under the host's span: its turn (in windowtap's own
            // trace) is one link away.
            span.links.push(link(turn.trace, turn.span, "turn"));
        }
        span
    }

    fn turn_span(&self, turn: &Turn) -> Span {
        let mut a = vec![
            kv_str(attr::OPERATION_NAME, "invoke_agent"),
            kv_str(attr::PROVIDER_NAME, provider(turn.client)),
        ];
        let agent = agent_name(turn.client);
        if let Some(n) = agent {
            a.push(kv_str(attr::AGENT_NAME, n));
        }
        if let Some(th) = &turn.thread {
            a.push(kv_str(attr::CONVERSATION_ID, th));
            a.push(kv_str(attr::SESSION_ID, th));
        }
        if let Some(h) = &turn.host {
            a.push(kv_str(attr::HOST, h));
        }
        a.push(kv_int(attr::TURN_RESPONSES, turn.responses.len() as i64));
        if turn.subagent {
            a.push(kv_str(attr::TURN_KIND, "subagent"));
        }
        if !turn.links.is_empty() {
            a.push(kv_int(attr::TURN_SPAWN_CANDIDATES, turn.links.len() as i64));
        }
        let status = turn.error.map(|e| {
            a.push(kv_str(attr::ERROR_TYPE, e));
            error_status(e)
        });
        let name = match agent {
            Some(n) => format!("invoke_agent {n}"),
            None => "invoke_agent".to_owned(),
        };
        let mut span = self.span(
            turn.trace,
            turn.span,
            turn.parent,
            name,
            SpanKind::Internal,
            (turn.start, turn.end),
            a,
            status,
        );
        span.links = turn.links.clone();
        span
    }

    fn subagent_span(
        &self,
        call: &str,
        sc: &SubagentCall,
        end: Millis,
        error: Option<&'static str>,
    ) -> Span {
        let mut a = vec![
            kv_str(attr::OPERATION_NAME, "execute_tool"),
            kv_str(attr::TOOL_NAME, &sc.name),
            kv_str(attr::TOOL_CALL_ID, call),
            kv_str(attr::RESPONSE_ID, &sc.response),
        ];
        if let Some(th) = &sc.thread {
            a.push(kv_str(attr::SESSION_ID, th));
        }
        let status = error.map(|e| {
            a.push(kv_str(attr::ERROR_TYPE, e));
            error_status(e)
        });
        self.span(
            sc.trace,
            sc.span,
            Some(sc.parent),
            format!("execute_tool {}", sc.name),
            SpanKind::Internal,
            (sc.start, end),
            a,
            status,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn span(
        &self,
        trace: TraceId,
        span: SpanId,
        parent: Option<SpanId>,
        name: String,
        kind: SpanKind,
        (start, end): (Millis, Millis),
        attributes: Vec<KeyValue>,
        status: Option<Status>,
    ) -> Span {
        Span {
            trace_id: trace.to_vec(),
            span_id: span.to_vec(),
            trace_state: String::new(),
            parent_span_id: parent.map(|p| p.to_vec()).unwrap_or_default(),
            // W3C trace flags: sampled.
            flags: 1,
            name,
            kind: kind as i32,
            start_time_unix_nano: unix_nanos(self.epoch, start),
            end_time_unix_nano: unix_nanos(self.epoch, end.max(start)),
            attributes,
            dropped_attributes_count: 0,
            events: Vec::new(),
            dropped_events_count: 0,
            links: Vec::new(),
            dropped_links_count: 0,
            status,
        }
    }
}

/// Hosts agree unless both are known and differ (docs/design.md §4: a null host rules nothing out).
fn same_host(a: Option<&str>, b: Option<&str>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    }
}

/// The causal links of an `execute_tool` span (experimental, docs/otlp.md "Causal links").
#[derive(Clone, Copy)]
enum Causal {
    /// To the chat span of the response that asked for the call.
    Generation,
    /// To the chat span of the response to the request that carried the call's result.
    Continuation,
}

fn causal_link(trace: TraceId, span: SpanId, kind: Causal) -> Link {
    let mut l = match kind {
        Causal::Generation => link(trace, span, "generation"),
        Causal::Continuation => link(trace, span, "continuation"),
    };
    if let Causal::Generation = kind {
        // open-telemetry/semantic-conventions-genai PR #370 (open): the tool call was caused
        // by that generation. Its vocabulary has no word for the other direction.
        l.attributes
            .push(kv_str(attr::ATTRIBUTION_LINK_TYPE, "CAUSED_BY_GENERATION"));
    }
    l
}

fn link(trace: TraceId, span: SpanId, role: &str) -> Link {
    Link {
        trace_id: trace.to_vec(),
        span_id: span.to_vec(),
        trace_state: String::new(),
        attributes: vec![kv_str(attr::LINK_ROLE, role)],
        dropped_attributes_count: 0,
        flags: 1,
    }
}

#[cfg(test)]
#[path = "tree_tests.rs"]
mod tests;
