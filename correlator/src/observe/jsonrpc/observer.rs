//! The observer: pairs `tools/call` requests with their ends by JSON-RPC id, from skeletons
//! (or whole lines), and reports a Multi Round-Trip call as the one call it is to the host.

use std::collections::HashMap;

use serde_json::Value;

use crate::event::{Hints, Outcome};

use super::scanner::LineScanner;
use super::state_digest::StateDigest;

/// Which way a line travelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Host (MCP client) to server: requests such as `tools/call`, cancellations.
    ClientToServer,
    /// Server to host: responses, server notifications and requests.
    ServerToClient,
}

/// A `tools/call` as seen when it started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// A number unique within this observer, in order of start.
    pub seq: u64,
    /// `params.name`.
    pub tool: String,
    /// The time passed with the request line.
    pub start: u64,
    /// Identity hints from `params._meta`.
    pub hints: Hints,
    /// How many requests the call took: 1, or more for a Multi Round-Trip call (each
    /// `input_required` answer and its retry add one).
    pub rounds: u32,
    /// How long the call waited on the client between an `input_required` answer and its
    /// retry, summed over the rounds (in the units of the times passed in).
    pub input_wait: u64,
    /// Set when the call ended waiting on the client: its last round was answered
    /// `input_required` and no retry came (see [`Observer`] for the bound).
    pub unanswered: bool,
}

/// What the observer saw on one line (or at [`Observer::lose_all`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observation {
    /// A `tools/call` request went to the server.
    Start(Call),
    /// It ended: answered, failed, cancelled or lost, or (a Multi Round-Trip call whose last
    /// round got no retry) cancelled with [`Call::unanswered`] set.
    End {
        call: Call,
        end: u64,
        outcome: Outcome,
    },
}

/// Most `tools/call` requests tracked at once; beyond it new calls are not reported.
pub(crate) const MAX_RUNNING: usize = 65_536;
/// Most calls kept waiting for a Multi Round-Trip retry. Past it the oldest ends as
/// unanswered: a client that leaves this many input requests open has moved on from the
/// oldest, and the memory stays bounded.
pub(crate) const MAX_WAITING: usize = 1024;

/// A JSON-RPC id as a map key: strings and integers are distinct ids (`"1"` is not `1`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Id {
    Str(String),
    Int(i128),
}

impl Id {
    pub(crate) fn of(v: &Value) -> Option<Id> {
        match v {
            Value::String(s) => Some(Id::Str(s.clone())),
            Value::Number(n) => n
                .as_i64()
                .map(i128::from)
                .or_else(|| n.as_u64().map(i128::from))
                .map(Id::Int),
            _ => None,
        }
    }
}

/// A call whose last round was answered `input_required`, waiting for the client's retry.
#[derive(Debug)]
struct Waiting {
    call: Call,
    /// When the `input_required` answer went to the client.
    since: u64,
    /// Digest of the answer's `requestState`, if it had one.
    state: Option<String>,
}

/// Pairs `tools/call` requests with their ends. One per MCP session (per wrapped server).
///
/// # Multi Round-Trip Requests (MCP 2026-07-28)
///
/// A server may answer `tools/call` with `result.resultType: "input_required"` (input
/// requests and/or an opaque `requestState`); the client gathers the input and sends the call
/// again, under a new JSON-RPC id, with `params.inputResponses` and the `requestState` echoed
/// back. For the host it is one call, so it is reported as one: it starts with the first
/// request, ends with the last answer, and counts its rounds and the time spent waiting on
/// the client. The `input_required` answer ends nothing; the call waits.
///
/// Matching a retry to its call. A `tools/call` is a retry only if it carries `requestState`
/// or `inputResponses` (the fields exist for nothing else); any other `tools/call` is a new
/// call, however alike. Among the waiting calls with the same tool name and no conflicting
/// identity hint (`_meta` toolUseId / itemId / callId: a host keeps them across the rounds of
/// one tool use, and two different ones are two different calls):
/// - with `requestState`, the call whose answer carried the same state. The state is the
///   server's own binding of the retry to its request (the spec asks servers to put the
///   originating request in it), so an equal state is the strongest evidence there is. It is
///   compared as a SHA-256 digest of its value (escapes decoded, so a client's JSON writer
///   may re-escape it), computed while the line streams by; the value itself is never kept
///   or written, and may be of any length. A state that matches nothing is a new call, and a
///   waiting call of the same tool use then ends unanswered: visible, never a wrong join;
/// - without `requestState` (the answer had none), the one such call, preferring one whose
///   identity hint is equal. Tool name alone cannot tell two waiting calls of the same tool
///   apart, so if more than one remains the retry is not joined to either (reported as a new
///   call) rather than guessed.
///
/// Hints of the retry fill the ones the first round lacked.
///
/// A call waiting for a retry ends `cancelled` with [`Call::unanswered`] set: when the pipe
/// ends ([`lose_all`](Self::lose_all)); when a `tools/call` for the same tool use (same tool
/// name, an equal identity hint) arrives and is not its retry, since the host went on without
/// it; or when more than [`MAX_WAITING`] calls wait (the oldest). There is no time bound: a
/// person answering an elicitation may take hours, and the wrapper has no clock of its own to
/// judge that by.
#[derive(Debug, Default)]
pub struct Observer {
    running: HashMap<Id, Call>,
    waiting: Vec<Waiting>,
    next_seq: u64,
}

impl Observer {
    pub fn new() -> Self {
        Self::default()
    }

    /// How many calls have started and not ended (waiting ones included).
    pub fn running(&self) -> usize {
        self.running.len() + self.waiting.len()
    }

    /// Observes one complete line (without its `\n`) that travelled `dir` at time `t`.
    pub fn line(&mut self, dir: Direction, line: &[u8], t: u64, out: &mut Vec<Observation>) {
        let mut scanner = LineScanner::new();
        scanner.push(line);
        if let Some(skeleton) = scanner.finish() {
            self.skeleton(dir, &skeleton, t, out);
        }
    }

    /// Observes a line already digested by a [`LineScanner`].
    pub fn skeleton(
        &mut self,
        dir: Direction,
        skeleton: &[u8],
        t: u64,
        out: &mut Vec<Observation>,
    ) {
        let Ok(value) = serde_json::from_slice::<Value>(skeleton) else {
            return;
        };
        match value {
            Value::Array(batch) => {
                for msg in &batch {
                    self.message(dir, msg, t, out);
                }
            }
            msg => self.message(dir, &msg, t, out),
        }
    }

    /// Ends every running call as `lost` (the server exited or a pipe broke), and every call
    /// waiting for a retry as unanswered, oldest first.
    pub fn lose_all(&mut self, t: u64, out: &mut Vec<Observation>) {
        let mut ends: Vec<(Call, Outcome)> = self
            .running
            .drain()
            .map(|(_, c)| (c, Outcome::Lost))
            .collect();
        for w in self.waiting.drain(..) {
            ends.push((unanswered(w, t), Outcome::Cancelled));
        }
        ends.sort_by_key(|(c, _)| c.seq);
        for (call, outcome) in ends {
            let end = t.max(call.start);
            out.push(Observation::End { call, end, outcome });
        }
    }

    /// Finds the waiting call a retry continues (see the type's doc), removing it.
    fn take_waiting(&mut self, tool: &str, state: Option<&str>, hints: &Hints) -> Option<Waiting> {
        let candidates: Vec<usize> = self
            .waiting
            .iter()
            .enumerate()
            .filter(|(_, w)| {
                w.call.tool == tool
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

    /// Ends, as unanswered, the waiting calls a new (non-retry) request for the same tool use
    /// shows the host has gone on from.
    fn supersede(&mut self, tool: &str, hints: &Hints, t: u64, out: &mut Vec<Observation>) {
        let mut i = 0;
        while i < self.waiting.len() {
            let w = &self.waiting[i];
            if w.call.tool == tool && hints_agree(&w.call.hints, hints) {
                let w = self.waiting.remove(i);
                let call = unanswered(w, t);
                let end = t.max(call.start);
                out.push(Observation::End {
                    call,
                    end,
                    outcome: Outcome::Cancelled,
                });
            } else {
                i += 1;
            }
        }
    }

    fn message(&mut self, dir: Direction, msg: &Value, t: u64, out: &mut Vec<Observation>) {
        let Some(obj) = msg.as_object() else {
            return;
        };
        let method = obj.get("method").and_then(Value::as_str);
        match (dir, method) {
            (Direction::ClientToServer, Some("tools/call")) => {
                let Some((id, tool, hints)) = tools_call_of(obj) else {
                    return;
                };
                let params = obj.get("params");
                // Ids must be unique among running requests; a reused one leaves no way to
                // tell the two answers apart, so the older call's end is unknowable.
                if let Some(old) = self.running.remove(&id) {
                    let end = t.max(old.start);
                    out.push(Observation::End {
                        call: old,
                        end,
                        outcome: Outcome::Lost,
                    });
                }
                let state = params
                    .and_then(|p| p.get("requestState"))
                    .and_then(Value::as_str)
                    .map(state_key);
                let retry =
                    state.is_some() || params.is_some_and(|p| p.get("inputResponses").is_some());
                if retry {
                    if let Some(w) = self.take_waiting(tool, state.as_deref(), &hints) {
                        let mut call = w.call;
                        call.rounds = call.rounds.saturating_add(1);
                        call.input_wait = call.input_wait.saturating_add(t.saturating_sub(w.since));
                        fill_hints(&mut call.hints, hints);
                        // No start: the call started with its first round.
                        self.running.insert(id, call);
                        return;
                    }
                }
                // A request for the same tool use that continues none of its waiting calls
                // shows the host went on without them.
                self.supersede(tool, &hints, t, out);
                // Waiting calls count: to the relay they are running (started, not ended),
                // and it takes no more than this many from one wrapper.
                if self.running() >= MAX_RUNNING {
                    return;
                }
                let call = Call {
                    seq: self.next_seq,
                    tool: tool.to_string(),
                    start: t,
                    hints,
                    rounds: 1,
                    input_wait: 0,
                    unanswered: false,
                };
                self.next_seq += 1;
                self.running.insert(id, call.clone());
                out.push(Observation::Start(call));
            }
            (Direction::ClientToServer, Some("notifications/cancelled")) => {
                let request = obj.get("params").and_then(|p| p.get("requestId"));
                if let Some(id) = request.and_then(Id::of) {
                    self.end(&id, t, Outcome::Cancelled, out);
                }
            }
            (Direction::ServerToClient, None) => {
                let Some(id) = obj.get("id").and_then(Id::of) else {
                    return;
                };
                let outcome = if obj.contains_key("error") {
                    Outcome::Error
                } else if let Some(result) = obj.get("result") {
                    if result.get("resultType").and_then(Value::as_str) == Some("input_required") {
                        self.wait(&id, result, t, out);
                        return;
                    }
                    if result.get("isError").and_then(Value::as_bool) == Some(true) {
                        Outcome::Error
                    } else {
                        Outcome::Result
                    }
                } else {
                    return;
                };
                self.end(&id, t, outcome, out);
            }
            // Other requests and notifications, the client's answers to server requests, and
            // server notifications (a server's `notifications/cancelled` names its own
            // requests) say nothing about `tools/call`.
            _ => {}
        }
    }

    /// An `input_required` answer: the call waits for the client's retry.
    fn wait(&mut self, id: &Id, result: &Value, t: u64, out: &mut Vec<Observation>) {
        let Some(call) = self.running.remove(id) else {
            return;
        };
        if self.waiting.len() >= MAX_WAITING {
            let oldest = self.waiting.remove(0);
            let call = unanswered(oldest, t);
            let end = t.max(call.start);
            out.push(Observation::End {
                call,
                end,
                outcome: Outcome::Cancelled,
            });
        }
        let state = result
            .get("requestState")
            .and_then(Value::as_str)
            .map(state_key);
        self.waiting.push(Waiting {
            call,
            since: t,
            state,
        });
    }

    fn end(&mut self, id: &Id, t: u64, outcome: Outcome, out: &mut Vec<Observation>) {
        if let Some(call) = self.running.remove(id) {
            let end = t.max(call.start);
            out.push(Observation::End { call, end, outcome });
        }
    }
}

/// The key a `requestState` is compared by. The scanner already put a digest in the skeleton;
/// a line observed whole ([`Observer::line`] on a full parse, as in tests) holds the raw value,
/// which is digested here so that nothing but digests is ever kept.
pub(crate) fn state_key(s: &str) -> String {
    let mut d = StateDigest::new();
    d.write(s.as_bytes());
    d.finish()
}

/// The call, ended while waiting on the client.
fn unanswered(w: Waiting, t: u64) -> Call {
    let mut call = w.call;
    call.input_wait = call.input_wait.saturating_add(t.saturating_sub(w.since));
    call.unanswered = true;
    call
}

/// The identity hints that name one tool use (a thread hint is shared by many calls).
fn identities(h: &Hints) -> [&Option<String>; 3] {
    [&h.tool_use_id, &h.item_id, &h.call_id]
}

/// Two hint sets naming different tool uses.
pub(crate) fn hints_conflict(a: &Hints, b: &Hints) -> bool {
    identities(a)
        .iter()
        .zip(identities(b))
        .any(|(x, y)| matches!((x, y), (Some(x), Some(y)) if x != y))
}

/// Two hint sets naming the same tool use: one identity in common and none different.
pub(crate) fn hints_agree(a: &Hints, b: &Hints) -> bool {
    !hints_conflict(a, b)
        && identities(a)
            .iter()
            .zip(identities(b))
            .any(|(x, y)| matches!((x, y), (Some(x), Some(y)) if x == y))
}

/// A `tools/call` request's id, tool name and identity hints (from `params._meta`, read the
/// one way), if it has an id and a tool name. Shared by the wrapper's observer and the MCP
/// mount's.
pub(crate) fn tools_call_of(obj: &serde_json::Map<String, Value>) -> Option<(Id, &str, Hints)> {
    let id = obj.get("id").and_then(Id::of)?;
    let params = obj.get("params");
    let tool = params.and_then(|p| p.get("name")).and_then(Value::as_str)?;
    let hints = params
        .and_then(|p| p.get("_meta"))
        .map(hints_of)
        .unwrap_or_default();
    Some((id, tool, hints))
}

/// Which waiting call a retry of a multi-round call continues, among the `candidates` (indexes
/// of waiting calls of the same tool and state whose hints do not conflict): the one there
/// is; with a `requestState`, the first (the state names it); else the one whose hints agree
/// (`agrees`), if exactly one does. Shared by the wrapper's observer and the MCP mount's.
pub(crate) fn pick_continued(
    candidates: &[usize],
    has_state: bool,
    agrees: impl Fn(usize) -> bool,
) -> Option<usize> {
    match candidates {
        [] => None,
        [one] => Some(*one),
        [first, ..] if has_state => Some(*first),
        many => {
            let mut same = many.iter().copied().filter(|&i| agrees(i));
            match (same.next(), same.next()) {
                (Some(one), None) => Some(one),
                _ => None,
            }
        }
    }
}

pub(crate) fn fill_hints(h: &mut Hints, from: Hints) {
    h.tool_use_id = h.tool_use_id.take().or(from.tool_use_id);
    h.item_id = h.item_id.take().or(from.item_id);
    h.call_id = h.call_id.take().or(from.call_id);
    h.thread = h.thread.take().or(from.thread);
}

pub(crate) fn hints_of(meta: &Value) -> Hints {
    let s = |k: &str| meta.get(k).and_then(Value::as_str).map(str::to_string);
    Hints {
        tool_use_id: s("claudecode/toolUseId"),
        item_id: s("itemId"),
        call_id: s("callId"),
        thread: s("threadId"),
    }
}
