//! The multi-host shape (issue 38): what a replay of a week of captures from a busy team looks
//! like, as opposed to the busy workload's one tool on hosts that are all unknown.
//!
//! Sessions of many host processes (each a pseudonym; a session's process is replaced now and
//! then, so a long trace holds many), Claude-like over HTTP (a stream per request) and
//! Codex-like over WebSocket (function calls, or code mode's opaque `exec`). Each tool loop's
//! responses make one to four client tool calls, a little over half of them MCP calls (several
//! servers, several tools each, hinted as each host does, or not at all as older builds do),
//! the rest native tools whose run delays the continuation past `close_wait` (so the MCP call
//! beside one is given up: `unclosed`). What makes the mix:
//! - one stream in ten has an unknown host (a window every host's calls must consider);
//! - one stream in twenty-five loses observation part-way (its later calls are unseen, and a hint
//!   naming one names a call the relay did not see);
//! - one loop in twelve of a Claude session launches two to four parallel subagents that call
//!   one tool at once, half of them without a hint (`ambiguous`);
//! - one loop in eleven is abandoned after its calls (its window stays open until
//!   `max_window` breaks it), a response in sixty ends in an error (its window breaks);
//! - one MCP call in four hundred runs for 1 to 100 minutes; one in six has no start report.
//!
//! Deterministic for a seed, endless, time-ordered, valid trace v2 (the bench's quick run
//! checks with the strict reader). `REPLAY_BENCH_SHAPE=multihost` selects it in the bench
//! (header of benches/replay.rs); docs/performance.md has the mix it gives.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use correlator::{
    CallKind, Client, Event, EventKind, Hints, McpTransport, Outcome, ResponseStatus, Transport,
};

use super::Rng;

/// Sessions at once; with [`IDLE_MS`] about a third of them are mid-loop at any moment.
pub const SESSIONS: usize = 600;
/// Mean idle gap between a session's loops.
pub const IDLE_MS: f64 = 60_000.0;

/// MCP servers each host has, and tools each server offers.
const ALIASES: [&str; 6] = ["github", "fs", "search", "db", "browser", "jira"];
const TOOLS: [&str; 4] = ["get", "list", "query", "update"];
const NATIVE_CLAUDE: [&str; 4] = ["Bash", "Read", "Edit", "Grep"];

struct Session {
    codex: bool,
    /// Whether its model traffic passes the relay: a session that is not pointed at it still
    /// runs the wrapped MCP servers, whose reports then name calls the relay never saw.
    observed: bool,
    /// The host process (a pseudonym) and the session's thread key.
    host: String,
    thread: String,
    queue: VecDeque<Event>,
}

/// An endless, time-ordered stream of events of the multi-host shape.
pub struct Multihost {
    rng: Rng,
    sessions: Vec<Session>,
    heap: BinaryHeap<Reverse<(u64, u64, usize)>>,
    seq: u64,
    next_id: u64,
    pool: Vec<VecDeque<Event>>,
    out: Vec<Event>,
}

fn key(t: f64) -> u64 {
    t.to_bits()
}

fn ev(t: f64, kind: EventKind) -> Event {
    Event { t, kind }
}

/// What one loop (or one subagent) is about: its session's client, host and thread.
struct Who {
    codex: bool,
    host: String,
    thread: Option<String>,
}

impl Multihost {
    pub fn new(seed: u64) -> Self {
        let mut rng = Rng(seed ^ 0x6d75_6c74_6968_6f73);
        let mut heap = BinaryHeap::with_capacity(SESSIONS);
        let mut sessions = Vec::with_capacity(SESSIONS);
        let mut w = Multihost {
            rng: Rng(0),
            sessions: Vec::new(),
            heap: BinaryHeap::new(),
            seq: SESSIONS as u64,
            next_id: 0,
            pool: Vec::new(),
            out: Vec::with_capacity(256),
        };
        for i in 0..SESSIONS {
            let start = rng.ms(0.0, IDLE_MS);
            heap.push(Reverse((key(start), i as u64, i)));
            sessions.push(Session {
                codex: rng.below(5) < 2,
                observed: rng.below(12) != 0,
                host: pseudonym(&mut rng),
                thread: pseudonym(&mut rng),
                queue: VecDeque::new(),
            });
        }
        w.rng = rng;
        w.sessions = sessions;
        w.heap = heap;
        w
    }

    fn id(&mut self, prefix: &str) -> String {
        self.next_id += 1;
        format!("{prefix}{}", self.next_id)
    }

    /// A stream's host: one stream in ten has an unknown one.
    fn stream_host(&mut self, host: &str) -> Option<String> {
        (self.rng.below(10) != 0).then(|| host.to_string())
    }

    /// An MCP call's alias and tool: a few are used most.
    fn tool(&mut self) -> (&'static str, &'static str) {
        let a = (self.rng.below(6) * self.rng.below(6) / 5) as usize;
        let t = (self.rng.below(4) * self.rng.below(4) / 3) as usize;
        (ALIASES[a], TOOLS[t])
    }

    /// How long an MCP call runs: mostly under 3 s, one in four hundred 1 to 100 minutes.
    fn mcp_duration(&mut self) -> f64 {
        if self.rng.below(400) == 0 {
            self.rng.ms(60_000.0, 6_000_000.0)
        } else {
            self.rng.ms(20.0, 3000.0)
        }
    }

    /// The two reports of one MCP call (the start report in five of six).
    fn mcp_call(
        &mut self,
        s: f64,
        e: f64,
        alias: &str,
        tool: &str,
        hints: Hints,
        host: Option<String>,
    ) {
        let interval = self.id("i");
        if self.rng.below(6) != 0 {
            self.out.push(ev(
                s + 0.25,
                EventKind::McpStart {
                    interval: interval.clone(),
                    alias: alias.into(),
                    tool: tool.into(),
                    start: s,
                    host: host.clone(),
                    transport: McpTransport::Stdio,
                },
            ));
        }
        self.out.push(ev(
            e + 0.5,
            EventKind::McpInterval {
                rounds: None,
                interval,
                alias: alias.into(),
                tool: tool.into(),
                start: s,
                end: e,
                outcome: Outcome::Result,
                hints,
                host,
                transport: McpTransport::Stdio,
            },
        ));
    }

    /// One turn's response with its calls, on `stream` (already open, observed until
    /// `lost_at`, if given). Returns the calls' ids, when the last call ends (or the response,
    /// if later), when the response ends, and its id.
    fn turn(
        &mut self,
        who: &Who,
        stream: &str,
        mut t: f64,
        last: bool,
        lost_at: Option<f64>,
    ) -> (Vec<String>, f64, f64, String) {
        let seen = |t: f64| lost_at.is_none_or(|l| t < l);
        let response = self.id("r");
        t += self.rng.ms(300.0, 900.0);
        if seen(t) {
            self.out.push(ev(
                t,
                EventKind::ResponseStart {
                    stream: stream.into(),
                    response: response.clone(),
                    request: None,
                    model: None,
                },
            ));
        }
        let calls = if last { 0 } else { 1 + self.rng.below(4) };
        let mut ids = Vec::new();
        let mut done = t;
        // One wrapper in fifty cannot tell its host (a container, another user's tool).
        let mcp_host = (self.rng.below(50) != 0).then(|| who.host.clone());
        for _ in 0..calls {
            t += self.rng.ms(200.0, 1500.0);
            let call = self.id(if who.codex { "call_" } else { "toolu_" });
            let mcp = self.rng.below(100) < 57;
            let code_mode = who.codex && self.rng.below(7) == 0;
            let (alias, tool) = self.tool();
            let item = who
                .codex
                .then(|| self.id(if code_mode { "ctc_" } else { "fc_" }));
            let (name, namespace, kind) = match (mcp, who.codex, code_mode) {
                (_, true, true) => (
                    "exec".to_string(),
                    Some("functions".into()),
                    CallKind::Custom,
                ),
                (true, true, false) => (
                    tool.to_string(),
                    Some(format!("mcp__{alias}")),
                    CallKind::Function,
                ),
                (false, true, false) => ("shell".to_string(), None, CallKind::Function),
                (true, false, _) => (format!("mcp__{alias}__{tool}"), None, CallKind::ToolUse),
                (false, false, _) => {
                    let n = NATIVE_CLAUDE[self.rng.below(4) as usize];
                    (n.to_string(), None, CallKind::ToolUse)
                }
            };
            if seen(t) {
                self.out.push(ev(
                    t,
                    EventKind::ToolCall {
                        stream: stream.into(),
                        response: response.clone(),
                        call: call.clone(),
                        item: item.clone(),
                        name,
                        namespace,
                        kind,
                    },
                ));
            }
            let s = t + self.rng.ms(1.0, 6.0);
            if mcp {
                let e = s + self.mcp_duration();
                let hints = if who.codex {
                    Hints {
                        tool_use_id: None,
                        item_id: if code_mode { None } else { item },
                        call_id: Some(if code_mode {
                            self.id("exec-")
                        } else {
                            call.clone()
                        }),
                        thread: who.thread.clone(),
                    }
                } else if self.rng.below(3) != 0 {
                    Hints {
                        tool_use_id: Some(call.clone()),
                        ..Hints::default()
                    }
                } else {
                    Hints::default()
                };
                self.mcp_call(s, e, alias, tool, hints, mcp_host.clone());
                done = done.max(e);
            } else {
                // A native tool: its run delays the continuation (sometimes by minutes).
                let e = if self.rng.below(20) == 0 {
                    s + self.rng.ms(30_000.0, 180_000.0)
                } else {
                    s + self.rng.ms(1000.0, 20_000.0)
                };
                done = done.max(e);
            }
            ids.push(call);
        }
        t += self.rng.ms(20.0, 400.0);
        // One response in sixty ends in an error: its window breaks.
        let completed = self.rng.below(60) != 0;
        if seen(t) {
            self.out.push(ev(
                t,
                EventKind::ResponseEnd {
                    stream: stream.into(),
                    response: response.clone(),
                    status: if completed {
                        ResponseStatus::Completed
                    } else {
                        ResponseStatus::Error
                    },
                    usage: None,
                    stop_reason: None,
                },
            ));
        }
        (ids, done.max(t), t, response)
    }

    /// A whole tool loop of `who` from `t0`; returns when it ends.
    fn tool_loop(&mut self, who: &Who, t0: f64) -> f64 {
        let mut t = t0;
        let turns = 2 + self.rng.below(4);
        let abandon = self.rng.below(11) == 0;
        let client = if who.codex {
            Client::Codex
        } else {
            Client::Claude
        };
        let transport = if who.codex {
            Transport::Websocket
        } else {
            Transport::Http
        };
        // Codex: one WebSocket for the loop, observed until its loss, if any.
        let mut ws: Option<(String, Option<f64>)> = None;
        if who.codex {
            let s = self.id("ws");
            let host = self.stream_host(&who.host);
            self.out
                .push(ev(t, open(&s, client, transport, &who.thread, host)));
            let lost = (self.rng.below(25) == 0).then(|| t + self.rng.ms(1000.0, 30_000.0));
            ws = Some((s, lost));
        }
        let mut previous: Option<String> = None;
        let mut outputs: Vec<String> = Vec::new();
        for turn in 0..turns {
            let last = turn + 1 == turns;
            let (stream, lost_at) = match &ws {
                Some((s, lost)) => (s.clone(), *lost),
                None => {
                    let s = self.id("s");
                    let host = self.stream_host(&who.host);
                    self.out
                        .push(ev(t, open(&s, client, transport, &who.thread, host)));
                    let lost = (self.rng.below(25) == 0).then(|| t + self.rng.ms(1.0, 2000.0));
                    (s, lost)
                }
            };
            t += self.rng.ms(0.5, 3.0);
            if lost_at.is_none_or(|l| t < l) {
                let request = self.id("q");
                self.out.push(ev(
                    t,
                    EventKind::Request {
                        stream: stream.clone(),
                        request,
                        previous_response: if who.codex { previous.clone() } else { None },
                        outputs: std::mem::take(&mut outputs),
                    },
                ));
            }
            let burst = !who.codex && turn == 0 && !last && self.rng.below(12) == 0;
            let (ids, done, end, response) = if burst {
                self.burst(who, &stream, t, lost_at)
            } else {
                self.turn(who, &stream, t, last, lost_at)
            };
            t = end;
            if ws.is_none() {
                // An HTTP stream closes after its response; a loss before then is reported.
                if let Some(l) = lost_at.filter(|l| *l < t + 1.0) {
                    self.out.push(ev(l, lost(&stream)));
                }
                self.out
                    .push(ev(t + 1.0, EventKind::StreamClose { stream }));
            }
            t = t.max(done) + self.rng.ms(10.0, 90.0);
            previous = Some(response);
            outputs = ids;
            // An abandoned loop stops after a turn with calls: their window never closes.
            if abandon && !outputs.is_empty() {
                break;
            }
        }
        if let Some((s, lost_at)) = ws {
            if let Some(l) = lost_at.filter(|l| *l < t) {
                self.out.push(ev(l, lost(&s)));
            }
            self.out.push(ev(t, EventKind::StreamClose { stream: s }));
        }
        t
    }

    /// A turn whose response launches two to four subagents (`Agent` calls) at once; each is
    /// a thread of its own on the same host, calling one MCP tool at the same time as its
    /// siblings, with its `tool_use_id` in half of the bursts.
    fn burst(
        &mut self,
        who: &Who,
        stream: &str,
        mut t: f64,
        lost_at: Option<f64>,
    ) -> (Vec<String>, f64, f64, String) {
        let seen = |at: f64| lost_at.is_none_or(|l| at < l);
        let response = self.id("r");
        t += self.rng.ms(300.0, 900.0);
        if seen(t) {
            self.out.push(ev(
                t,
                EventKind::ResponseStart {
                    stream: stream.into(),
                    response: response.clone(),
                    request: None,
                    model: None,
                },
            ));
        }
        let n = 2 + self.rng.below(3);
        let hinted = self.rng.below(3) != 0;
        let (alias, tool) = self.tool();
        let mut ids = Vec::new();
        let mut done = t;
        for k in 0..n {
            t += self.rng.ms(0.0, 0.5);
            let call = self.id("toolu_");
            if seen(t) {
                self.out.push(ev(
                    t,
                    EventKind::ToolCall {
                        stream: stream.into(),
                        response: response.clone(),
                        call: call.clone(),
                        item: None,
                        name: "Agent".into(),
                        namespace: None,
                        kind: CallKind::ToolUse,
                    },
                ));
            }
            ids.push(call);
            let thread = who.thread.as_ref().map(|p| format!("{p}+agent{k}"));
            let mut u = t + self.rng.ms(5.0, 40.0);
            let s1 = self.id("sa");
            let host = self.stream_host(&who.host);
            self.out.push(ev(
                u,
                open(&s1, Client::Claude, Transport::Http, &thread, host),
            ));
            let q1 = self.id("q");
            self.out.push(ev(
                u,
                EventKind::Request {
                    stream: s1.clone(),
                    request: q1.clone(),
                    previous_response: None,
                    outputs: Vec::new(),
                },
            ));
            let r1 = self.id("r");
            u += self.rng.ms(300.0, 900.0);
            self.out.push(ev(
                u,
                EventKind::ResponseStart {
                    stream: s1.clone(),
                    response: r1.clone(),
                    request: Some(q1),
                    model: None,
                },
            ));
            u += self.rng.ms(100.0, 400.0);
            let sub_call = self.id("toolu_");
            self.out.push(ev(
                u,
                EventKind::ToolCall {
                    stream: s1.clone(),
                    response: r1.clone(),
                    call: sub_call.clone(),
                    item: None,
                    name: format!("mcp__{alias}__{tool}"),
                    namespace: None,
                    kind: CallKind::ToolUse,
                },
            ));
            let s = u + self.rng.ms(1.0, 6.0);
            let e = s + self.rng.ms(1000.0, 3000.0);
            let hints = if hinted {
                Hints {
                    tool_use_id: Some(sub_call.clone()),
                    ..Hints::default()
                }
            } else {
                Hints::default()
            };
            self.mcp_call(s, e, alias, tool, hints, Some(who.host.clone()));
            u += self.rng.ms(20.0, 200.0);
            self.out.push(ev(
                u,
                EventKind::ResponseEnd {
                    stream: s1.clone(),
                    response: r1.clone(),
                    status: ResponseStatus::Completed,
                    usage: None,
                    stop_reason: None,
                },
            ));
            self.out
                .push(ev(u + 1.0, EventKind::StreamClose { stream: s1 }));
            u = u.max(e) + self.rng.ms(10.0, 90.0);
            let s2 = self.id("sa");
            let host = self.stream_host(&who.host);
            self.out.push(ev(
                u,
                open(&s2, Client::Claude, Transport::Http, &thread, host),
            ));
            let q2 = self.id("q");
            self.out.push(ev(
                u,
                EventKind::Request {
                    stream: s2.clone(),
                    request: q2,
                    previous_response: None,
                    outputs: vec![sub_call],
                },
            ));
            let r2 = self.id("r");
            u += self.rng.ms(300.0, 900.0);
            self.out.push(ev(
                u,
                EventKind::ResponseStart {
                    stream: s2.clone(),
                    response: r2.clone(),
                    request: None,
                    model: None,
                },
            ));
            u += self.rng.ms(20.0, 400.0);
            self.out.push(ev(
                u,
                EventKind::ResponseEnd {
                    stream: s2.clone(),
                    response: r2,
                    status: ResponseStatus::Completed,
                    usage: None,
                    stop_reason: None,
                },
            ));
            self.out
                .push(ev(u + 1.0, EventKind::StreamClose { stream: s2 }));
            done = done.max(u + 1.0);
        }
        t += self.rng.ms(20.0, 400.0);
        if seen(t) {
            self.out.push(ev(
                t,
                EventKind::ResponseEnd {
                    stream: stream.into(),
                    response: response.clone(),
                    status: ResponseStatus::Completed,
                    usage: None,
                    stop_reason: None,
                },
            ));
        }
        (ids, done.max(t), t, response)
    }

    /// Session `i`'s next loop, from `t0`, as a time-ordered queue.
    fn next_loop(&mut self, i: usize, t0: f64) -> VecDeque<Event> {
        // Now and then the session's host process is a new one.
        if self.rng.below(20) == 0 {
            self.sessions[i].host = pseudonym(&mut self.rng);
            self.sessions[i].thread = pseudonym(&mut self.rng);
        }
        let s = &self.sessions[i];
        let who = Who {
            codex: s.codex,
            host: s.host.clone(),
            // One Claude session in twenty sends no session id.
            thread: (s.codex || self.rng.below(20) != 0).then(|| s.thread.clone()),
        };
        let observed = s.observed;
        self.tool_loop(&who, t0);
        let mut out = std::mem::take(&mut self.out);
        if !observed {
            out.retain(|e| {
                matches!(
                    e.kind,
                    EventKind::McpStart { .. } | EventKind::McpInterval { .. }
                )
            });
        }
        // Stable: each stream's and each call's own events keep their order.
        out.sort_by(|a, b| a.t.total_cmp(&b.t));
        let mut queue = self.pool.pop().unwrap_or_default();
        queue.extend(out.drain(..));
        self.out = out;
        queue
    }
}

fn lost(stream: &str) -> EventKind {
    EventKind::ObservationLost {
        stream: stream.into(),
        reason: "overflow".into(),
    }
}

/// A pseudonym as a capture writes them: 16 hex digits.
fn pseudonym(rng: &mut Rng) -> String {
    format!("{:016x}", rng.next())
}

fn open(
    stream: &str,
    client: Client,
    transport: Transport,
    thread: &Option<String>,
    host: Option<String>,
) -> EventKind {
    EventKind::StreamOpen {
        stream: stream.into(),
        client,
        transport,
        thread: thread.clone(),
        host,
    }
}

impl Iterator for Multihost {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        loop {
            let Reverse((k, _, i)) = self.heap.pop()?;
            let t = f64::from_bits(k);
            self.seq += 1;
            if self.sessions[i].queue.is_empty() {
                // Idle until now: a new loop, whose first event may come later (an unobserved
                // session's first MCP report), or never (one that made no MCP call).
                let q = self.next_loop(i, t);
                let next = match q.front() {
                    Some(e) => e.t,
                    None => t + self.rng.ms(1000.0, 2.0 * IDLE_MS),
                };
                self.sessions[i].queue = q;
                self.heap.push(Reverse((key(next), self.seq, i)));
                continue;
            }
            let session = &mut self.sessions[i];
            let event = session.queue.pop_front()?;
            let next_key = match session.queue.front() {
                Some(e) => key(e.t),
                None => {
                    self.pool.push(std::mem::take(&mut session.queue));
                    key(event.t + self.rng.ms(0.0, 2.0 * IDLE_MS))
                }
            };
            self.heap.push(Reverse((next_key, self.seq, i)));
            return Some(event);
        }
    }
}
