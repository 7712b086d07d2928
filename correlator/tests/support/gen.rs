//! A seeded generator of valid, messy trace v2 event sequences.
//!
//! Threads belong to host processes (a few per trace, some unknown); a thread's turns may
//! spawn a subagent thread of the same host (`Task` / `Agent` / `spawn_agent`, client tools that
//! are not MCP) that runs nested inside the parent's window; calls name several MCP servers and
//! tools in each host's own naming, tools that are not MCP, and Codex code mode's `exec`.
//! Beside the two hosts, programs built on an agent SDK (the OpenAI Agents SDK and the like:
//! client `other`, HTTP, no thread key, MCP tools offered under their own bare names, mostly
//! no hints, agents-as-tools nested in their caller's window, several such agents of one
//! process calling one tool at once).
//!
//! What the identity rule (docs/design.md §4 "same identity") is about is made on purpose: a
//! response launching two or three subagents at once whose calls use one tool and overlap;
//! code-mode calls whose only hints are a fresh `exec-…` call id and the thread; hints naming
//! another call, or one the relay never saw (made up, or complete only after the call
//! started); thread hints of another thread of the trace or of none; lost streams on the
//! trace's threads, on other threads and on unknown ones; and `max_window`s short enough that
//! windows opened longer than that before a later call's end are common.
//!
//! Each "agent" (a thread's relay traffic, one MCP call, a side request, some noise) writes its
//! own events in time order; the agents are then merged with ties broken at random, so
//! equal times from different agents land in any file order while each agent's own order
//! (which is what makes the trace valid) is kept.
//!
//! Times sit on a quarter-millisecond grid with many zero steps: ties and fractions are the
//! norm, and every sum the rule computes (end + close_wait, open + max_window) is exact in
//! binary, so two implementations cannot disagree by rounding.

use correlator::trace::{event_line, read_all, TraceError, HEADER};
use correlator::{
    CallKind, Client, Event, EventKind, Hints, Millis, Outcome, ResponseStatus, Transport,
};
use correlator::{Candidates, Config, WindowOpen};

/// The MCP servers and tools calls name: (alias, tool, Claude's visible name, Codex's namespace
/// and function).
const TOOLS: &[(&str, &str, &str, &str, &str)] = &[
    ("probe", "echo", "mcp__probe__echo", "mcp__probe", "echo"),
    (
        "other",
        "lookup",
        "mcp__other__lookup",
        "mcp__other",
        "lookup",
    ),
    (
        "music-studio",
        "get-guide",
        "mcp__music-studio__get-guide",
        "mcp__music_studio",
        "get_guide",
    ),
    (
        "fs",
        "read.file",
        "mcp__fs__read_file",
        "mcp__fs",
        "read_file",
    ),
];

/// SplitMix64: tiny, seedable, good enough to drive a test generator.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    pub fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())].clone()
    }
}

/// What to generate.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub seed: u64,
    /// Host threads (each Claude-like HTTP, Codex-like WebSocket or Codex-like HTTP).
    pub hosts: usize,
    /// Most turns per host.
    pub max_turns: usize,
}

/// A generated trace and the configuration to replay it with.
#[derive(Debug, Clone)]
pub struct Generated {
    pub events: Vec<Event>,
    pub config: Config,
    /// How messy the run was: 0 clean, 1 some trouble, 2 a lot.
    pub mess: u64,
}

/// A call the generator has emitted, for noise that refers back to it.
#[derive(Clone)]
struct Emitted {
    t: Millis,
    response: String,
    call: String,
    item: Option<String>,
    /// What it asks to run: an MCP tool (index into [`TOOLS`]), any tool (code mode), a
    /// subagent, or a tool that is not MCP.
    what: Asks,
}

#[derive(Clone, Copy, PartialEq)]
enum Asks {
    Mcp(usize),
    AnyMcp,
    Subagent,
    NotMcp,
}

struct Agent {
    t: Millis,
    events: Vec<Event>,
}

impl Agent {
    fn at(t: Millis) -> Self {
        Agent {
            t,
            events: Vec::new(),
        }
    }

    /// Moves the clock forward by `dt` and emits `kind` then.
    fn emit(&mut self, dt: Millis, kind: EventKind) {
        self.t += dt;
        self.events.push(Event { t: self.t, kind });
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Host {
    ClaudeHttp,
    CodexWs,
    CodexHttp,
    /// A program on an agent SDK: client `other`, no thread, bare tool names.
    Sdk,
}

struct Gen {
    rng: Rng,
    next_id: u64,
    agents: Vec<Agent>,
    calls: Vec<Emitted>,
    threads: Vec<String>,
    /// 0: a clean run; 1: some trouble; 2: a lot.
    mess: u64,
    /// Every MCP call's (start, end), for noise aimed at their edges.
    spans: Vec<(Millis, Millis)>,
    /// Hosts start within this many half-milliseconds of each other.
    spread: usize,
    /// The host processes of this trace.
    host_ids: Vec<String>,
}

impl Gen {
    /// Something going wrong, `percent` per cent of the time at mess level 1, twice that at
    /// level 2, never at level 0.
    fn trouble(&mut self, percent: u64) -> bool {
        self.rng.chance(percent * self.mess)
    }

    fn id(&mut self, prefix: &str) -> String {
        self.next_id += 1;
        format!("{prefix}{}", self.next_id)
    }

    /// A small time step: often zero, on a quarter-millisecond grid.
    fn step(&mut self) -> Millis {
        self.rng
            .pick(&[0.0, 0.0, 0.25, 0.5, 1.0, 1.0, 1.0, 2.0, 2.0, 3.0])
    }

    fn steps(&mut self, n: usize) -> Millis {
        (0..n).map(|_| self.step()).sum()
    }

    fn status(&mut self) -> ResponseStatus {
        if !self.trouble(6) {
            ResponseStatus::Completed
        } else {
            self.rng.pick(&[
                ResponseStatus::Incomplete,
                ResponseStatus::Failed,
                ResponseStatus::Error,
            ])
        }
    }

    fn some_other_call(&mut self) -> Option<Emitted> {
        if self.calls.is_empty() {
            None
        } else {
            let i = self.rng.below(self.calls.len());
            Some(self.calls[i].clone())
        }
    }

    /// A hint: usually right, sometimes another call's, sometimes made up, sometimes absent.
    fn hint(
        &mut self,
        right: Option<String>,
        other: impl Fn(&Emitted) -> Option<String>,
    ) -> Option<String> {
        let roll = self.rng.below(100);
        if roll < 70 {
            right
        } else if roll < 80 {
            self.some_other_call().and_then(|e| other(&e))
        } else if roll < 86 {
            Some(self.id("bogus"))
        } else {
            None
        }
    }

    /// A Codex `thread` hint: mostly the call's own thread; sometimes another thread of the
    /// trace (a sibling's, a stranger's), one no stream has, or none.
    fn thread_hint(&mut self, own: &Option<String>) -> Option<String> {
        match self.rng.below(20) {
            0..=11 => own.clone(),
            12..=13 if !self.threads.is_empty() => Some(self.rng.pick(&self.threads)),
            14 => Some(self.rng.pick(&["thA".to_string(), "thB".to_string()])),
            _ => None,
        }
    }

    /// The MCP side of one executed call: an optional `mcp_start`, then (almost always) the
    /// `mcp_interval` report.
    /// A subagent of a burst (`focus`: the tool its siblings call too) runs calls long enough
    /// that its siblings' overlap them.
    fn mcp_call(
        &mut self,
        host: Host,
        call: &Emitted,
        thread: &Option<String>,
        start: Millis,
        host_id: &Option<String>,
        focus: Option<usize>,
    ) -> Millis {
        let s = start;
        let e = s + self.steps(3) + if focus.is_some() { 4.0 } else { 0.0 };
        self.spans.push((s, e));
        let report = if self.rng.chance(15) {
            e + 5.0 + self.rng.below(60) as f64 * 0.5
        } else {
            e + self.steps(1)
        };
        let interval = self.id("i");
        // Mostly the tool the call named (a burst's code-mode calls its siblings' tool);
        // code mode, orphans and a few others any tool.
        let which = match (call.what, focus) {
            (Asks::Mcp(i), _) if self.rng.chance(88) => i,
            (Asks::AnyMcp, Some(i)) if self.rng.chance(80) => i,
            _ => self.rng.below(TOOLS.len()),
        };
        let (alias, tool) = (TOOLS[which].0.to_string(), TOOLS[which].1.to_string());
        // The call's host: its thread's, sometimes unknown, rarely another one.
        let host_id = match self.rng.below(100) {
            0..=79 => host_id.clone(),
            80..=93 => None,
            _ => Some(self.rng.pick(&self.host_ids)),
        };
        let mut agent = Agent::at(s);
        if self.rng.chance(50) {
            let dt = self.steps(1).min(report - s);
            agent.emit(
                dt,
                EventKind::McpStart {
                    interval: interval.clone(),
                    alias: alias.clone(),
                    tool: tool.clone(),
                    start: s,
                    host: host_id.clone(),
                    transport: correlator::McpTransport::Stdio,
                },
            );
            if self.trouble(2) {
                // The report never comes: the call runs to the end of the trace.
                self.agents.push(agent);
                return e;
            }
        }
        let hints = match host {
            // The SDKs send no `_meta`; a program may add the model's call id itself
            // (docs/hosts.md), rarely a wrong one.
            Host::Sdk => Hints {
                call_id: match self.rng.below(10) {
                    0..=2 => Some(call.call.clone()),
                    3 => Some(self.id("bogus")),
                    _ => None,
                },
                ..Hints::default()
            },
            Host::ClaudeHttp => Hints {
                tool_use_id: self.hint(Some(call.call.clone()), |o| Some(o.call.clone())),
                ..Hints::default()
            },
            // Code mode: a call made from the `exec` program carries only a fresh `exec-…`
            // call id (one the model never saw) and the thread.
            Host::CodexWs | Host::CodexHttp if call.what == Asks::AnyMcp && self.rng.chance(45) => {
                let thread = self.thread_hint(thread);
                Hints {
                    call_id: Some(self.id("exec-")),
                    thread,
                    ..Hints::default()
                }
            }
            Host::CodexWs | Host::CodexHttp => {
                let item_id = self.hint(call.item.clone(), |o| o.item.clone());
                let call_id = match self.rng.below(10) {
                    0..=4 => Some(call.call.clone()),
                    5..=7 => Some(self.id("exec-")),
                    _ => None,
                };
                let thread = self.thread_hint(thread);
                Hints {
                    tool_use_id: None,
                    item_id,
                    call_id,
                    thread,
                }
            }
        };
        let outcome = self.rng.pick(&[
            Outcome::Result,
            Outcome::Result,
            Outcome::Result,
            Outcome::Error,
            Outcome::Cancelled,
            Outcome::Lost,
        ]);
        agent.t = agent.t.max(report);
        agent.events.push(Event {
            t: agent.t,
            kind: EventKind::McpInterval {
                rounds: None,
                interval,
                alias,
                tool,
                start: s,
                end: e,
                outcome,
                hints,
                host: host_id,
                transport: correlator::McpTransport::Stdio,
            },
        });
        self.agents.push(agent);
        e
    }

    fn open_stream(
        &mut self,
        a: &mut Agent,
        dt: Millis,
        host: Host,
        thread: &Option<String>,
        host_id: &Option<String>,
    ) -> String {
        let stream = self.id("s");
        let (client, transport) = match host {
            Host::ClaudeHttp => (Client::Claude, Transport::Http),
            Host::CodexWs => (Client::Codex, Transport::Websocket),
            Host::CodexHttp => (Client::Codex, Transport::Http),
            Host::Sdk => (Client::Other, Transport::Http),
        };
        a.emit(
            dt,
            EventKind::StreamOpen {
                stream: stream.clone(),
                client,
                transport,
                thread: thread.clone(),
                host: host_id.clone(),
            },
        );
        stream
    }

    /// A side request on the same thread (Claude Code's title or summary requests): it shares
    /// the thread but continues nothing.
    fn side_request(
        &mut self,
        at: Millis,
        host: Host,
        thread: &Option<String>,
        host_id: &Option<String>,
    ) {
        let mut a = Agent::at(at);
        let stream = self.open_stream(&mut a, 0.0, host, thread, host_id);
        let request = self.id("q");
        let response = self.id("r");
        let dt = self.step();
        a.emit(
            dt,
            EventKind::Request {
                stream: stream.clone(),
                request: request.clone(),
                previous_response: None,
                outputs: Vec::new(),
            },
        );
        let dt = self.step();
        a.emit(
            dt,
            EventKind::ResponseStart {
                stream: stream.clone(),
                response: response.clone(),
                request: Some(request),
                model: None,
            },
        );
        let dt = self.steps(2);
        a.emit(
            dt,
            EventKind::ResponseEnd {
                stream: stream.clone(),
                response,
                status: ResponseStatus::Completed,
                usage: None,
                stop_reason: None,
            },
        );
        let dt = self.step();
        a.emit(dt, EventKind::StreamClose { stream });
        self.agents.push(a);
    }

    /// A call an SDK program's model makes: a Responses `function_call` or an Anthropic
    /// `tool_use`, named `name`, never in a namespace.
    fn sdk_call(
        &mut self,
        name: String,
    ) -> (String, Option<String>, String, Option<String>, CallKind) {
        if self.rng.chance(70) {
            (
                self.id("call_"),
                Some(self.id("fc_")),
                name,
                None,
                CallKind::Function,
            )
        } else {
            (self.id("toolu_"), None, name, None, CallKind::ToolUse)
        }
    }

    /// One host thread doing a few turns of a tool loop.
    fn host(&mut self, max_turns: usize) {
        let host = self
            .rng
            .pick(&[Host::ClaudeHttp, Host::CodexWs, Host::CodexHttp, Host::Sdk]);
        let thread = if host == Host::Sdk || self.rng.chance(20) {
            None
        } else {
            let th = self.id("th");
            self.threads.push(th.clone());
            Some(th)
        };
        let host_id = if self.rng.chance(20) {
            None
        } else {
            Some(self.rng.pick(&self.host_ids))
        };
        let at = self.rng.below(self.spread) as f64 * 0.5;
        self.thread(host, thread, host_id, at, max_turns, 0, None);
    }

    /// A thread's turns from `at`; returns when its last event was. A subagent (`depth` > 0)
    /// shares its parent's host process. A subagent launched in a burst with its siblings has
    /// a `focus`: the one MCP tool all of them call, in their first turn at least.
    #[allow(clippy::too_many_arguments)]
    fn thread(
        &mut self,
        host: Host,
        thread: Option<String>,
        host_id: Option<String>,
        at: Millis,
        max_turns: usize,
        depth: usize,
        focus: Option<usize>,
    ) -> Millis {
        let mut a = Agent::at(at);
        let mut ws: Option<String> = None;
        let mut prev_response: Option<String> = None;
        let mut prev_calls: Vec<String> = Vec::new();
        let turns = 1 + self.rng.below(max_turns);
        for turn in 0..turns {
            let stream = match (&ws, host) {
                (Some(s), Host::CodexWs) => s.clone(),
                _ => {
                    let dt = self.step();
                    let s = self.open_stream(&mut a, dt, host, &thread, &host_id);
                    if host == Host::CodexWs {
                        ws = Some(s.clone());
                    }
                    s
                }
            };
            if self.rng.chance(12) {
                let at = a.t + self.steps(2);
                self.side_request(at, host, &thread, &host_id);
            }
            // The continuation: by previous_response over a WebSocket (with the outputs in
            // the input too, sometimes), by the tool outputs over HTTP.
            let mut outputs = match host {
                Host::CodexWs if self.rng.chance(70) => Vec::new(),
                _ => prev_calls.clone(),
            };
            if !outputs.is_empty() && self.rng.chance(15) {
                outputs.truncate(1);
            }
            let previous = match host {
                Host::CodexWs => prev_response.clone(),
                Host::CodexHttp | Host::Sdk if self.rng.chance(20) => prev_response.clone(),
                _ => None,
            };
            let request = self.id("q");
            let dt = self.step();
            a.emit(
                dt,
                EventKind::Request {
                    stream: stream.clone(),
                    request: request.clone(),
                    previous_response: previous,
                    outputs,
                },
            );
            let response = self.id("r");
            let answers = if self.rng.chance(85) {
                Some(request)
            } else {
                None
            };
            let dt = self.step();
            a.emit(
                dt,
                EventKind::ResponseStart {
                    stream: stream.clone(),
                    response: response.clone(),
                    request: answers,
                    model: None,
                },
            );
            // A tool loop ends with a plain answer; a last response with calls leaves a window
            // that nothing ever closes.
            // A burst: one response launching two or three subagents at once (Claude Code's
            // parallel `Agent` calls, Codex's `spawn_agent` twice), which all call one tool.
            let burst = depth == 0 && turn + 1 < turns && self.rng.chance(15);
            let n_calls = if burst {
                2 + self.rng.below(2)
            } else if focus.is_some() && turn == 0 {
                1 + self.rng.below(2)
            } else if turn + 1 == turns && !self.trouble(8) {
                0
            } else {
                self.rng.pick(&[0, 1, 1, 1, 1, 2, 2, 2, 3])
            };
            let burst_tool = if self.rng.chance(70) {
                0
            } else {
                self.rng.below(TOOLS.len())
            };
            let mut calls = Vec::new();
            for _ in 0..n_calls {
                let dt = if burst {
                    self.rng.pick(&[0.0, 0.0, 0.25])
                } else {
                    self.steps(2)
                };
                let roll = self.rng.below(100);
                let what = if burst {
                    Asks::Subagent
                } else if let Some(tool) = focus.filter(|_| turn == 0 || roll < 60) {
                    // Code mode runs the tool from a program as often as not.
                    if matches!(host, Host::CodexWs | Host::CodexHttp) && self.rng.chance(40) {
                        Asks::AnyMcp
                    } else {
                        Asks::Mcp(tool)
                    }
                } else if roll < 10 && depth < 2 {
                    Asks::Subagent
                } else if roll < 18 {
                    Asks::NotMcp
                } else if matches!(host, Host::CodexWs | Host::CodexHttp) && roll < 55 {
                    Asks::AnyMcp
                } else {
                    // Mostly the first tool, so that windows compete for the same one.
                    Asks::Mcp(if self.rng.chance(60) {
                        0
                    } else {
                        self.rng.below(TOOLS.len())
                    })
                };
                let (call, item, name, namespace, kind) = match (host, what) {
                    // An SDK offers an MCP tool under its own name (some wrappers use the
                    // flat `mcp__…` form), over the Responses API or Anthropic's.
                    (Host::Sdk, Asks::Mcp(i)) => {
                        let name = if self.rng.chance(85) {
                            TOOLS[i].1.to_string()
                        } else {
                            TOOLS[i].2.to_string()
                        };
                        self.sdk_call(name)
                    }
                    // An agent offered as a tool (`Agent.as_tool`), run in the same process.
                    (Host::Sdk, Asks::Subagent) => {
                        let name = self
                            .rng
                            .pick(&["research_agent".to_string(), "Agent".into()]);
                        self.sdk_call(name)
                    }
                    (Host::Sdk, _) => {
                        let name = self.rng.pick(&["get_weather".to_string(), "shell".into()]);
                        self.sdk_call(name)
                    }
                    (Host::ClaudeHttp, Asks::Mcp(i)) => (
                        self.id("toolu_"),
                        None,
                        TOOLS[i].2.to_string(),
                        None,
                        CallKind::ToolUse,
                    ),
                    (Host::ClaudeHttp, Asks::Subagent) => (
                        self.id("toolu_"),
                        None,
                        self.rng.pick(&["Task".to_string(), "Agent".to_string()]),
                        None,
                        CallKind::ToolUse,
                    ),
                    (Host::ClaudeHttp, _) => (
                        self.id("toolu_"),
                        None,
                        self.rng.pick(&["Bash".to_string(), "Read".to_string()]),
                        None,
                        CallKind::ToolUse,
                    ),
                    (_, Asks::AnyMcp) => (
                        self.id("call_"),
                        Some(self.id("ctc_")),
                        "exec".to_string(),
                        Some("functions".to_string()),
                        CallKind::Custom,
                    ),
                    (_, Asks::Mcp(i)) if self.rng.chance(15) => (
                        // The flat form older builds show.
                        self.id("call_"),
                        Some(self.id("fc_")),
                        format!("{}__{}", TOOLS[i].3, TOOLS[i].4),
                        None,
                        CallKind::Function,
                    ),
                    (_, Asks::Mcp(i)) => (
                        self.id("call_"),
                        Some(self.id("fc_")),
                        TOOLS[i].4.to_string(),
                        Some(TOOLS[i].3.to_string()),
                        CallKind::Function,
                    ),
                    (_, Asks::Subagent) => (
                        self.id("call_"),
                        Some(self.id("fc_")),
                        "spawn_agent".to_string(),
                        None,
                        CallKind::Function,
                    ),
                    (_, Asks::NotMcp) => (
                        self.id("call_"),
                        Some(self.id("fc_")),
                        "shell".to_string(),
                        None,
                        CallKind::Function,
                    ),
                };
                a.emit(
                    dt,
                    EventKind::ToolCall {
                        stream: stream.clone(),
                        response: response.clone(),
                        call: call.clone(),
                        item: item.clone(),
                        name,
                        namespace,
                        kind,
                    },
                );
                let emitted = Emitted {
                    t: a.t,
                    response: response.clone(),
                    call,
                    item,
                    what,
                };
                calls.push(emitted);
            }
            // The host runs each call as soon as its item is complete, in parallel: MCP calls
            // through the wrapper, a subagent as a thread of its own (nested inside this
            // window until it is done), other tools without any MCP call.
            let mut all_done = a.t;
            // Siblings of a burst start together (each a step or two after its call item).
            let burst_focus = burst.then_some(burst_tool);
            for c in &calls {
                match c.what {
                    Asks::NotMcp => {}
                    Asks::Subagent => {
                        let child = match (&thread, host) {
                            // An SDK's agents send no thread key.
                            (_, Host::Sdk) => None,
                            (Some(th), Host::ClaudeHttp) => {
                                Some(format!("{th}+{}", self.id("agent")))
                            }
                            (_, _) if self.rng.chance(85) => Some(self.id("th")),
                            _ => None,
                        };
                        if let Some(th) = &child {
                            self.threads.push(th.clone());
                        }
                        let start = c.t + self.steps(2);
                        let turns = 1 + self.rng.below(max_turns.min(3));
                        let done = self.thread(
                            host,
                            child,
                            host_id.clone(),
                            start,
                            turns,
                            depth + 1,
                            burst_focus,
                        );
                        all_done = all_done.max(done);
                    }
                    Asks::Mcp(_) | Asks::AnyMcp => {
                        if self.rng.chance(92) {
                            let start = if self.trouble(3) {
                                (c.t - 1.0).max(0.0)
                            } else {
                                c.t + self.steps(1)
                            };
                            let e = self.mcp_call(host, c, &thread, start, &host_id, focus);
                            all_done = all_done.max(e);
                        }
                    }
                }
            }
            self.calls.extend(calls.iter().cloned());
            // How the response ends.
            let trailing = self.steps(2);
            if self.trouble(3) {
                a.emit(
                    trailing,
                    EventKind::ObservationLost {
                        stream: stream.clone(),
                        reason: "decode".into(),
                    },
                );
                let dt = self.steps(2);
                a.emit(dt, EventKind::StreamClose { stream });
                ws = None;
                if self.rng.chance(25) {
                    break;
                }
                prev_response = Some(response);
                prev_calls = calls.iter().map(|c| c.call.clone()).collect();
                continue;
            }
            if self.trouble(3) {
                // The stream ends before the response does: the window is broken.
                a.emit(trailing, EventKind::StreamClose { stream });
                ws = None;
                if self.rng.chance(25) {
                    break;
                }
                prev_response = None;
                prev_calls.clear();
                continue;
            }
            let status = self.status();
            a.emit(
                trailing,
                EventKind::ResponseEnd {
                    stream: stream.clone(),
                    response: response.clone(),
                    status,
                    usage: None,
                    stop_reason: None,
                },
            );
            all_done = all_done.max(a.t);
            if host != Host::CodexWs || self.rng.chance(10) {
                // HTTP always; a WebSocket sometimes drops and reconnects.
                let dt = self.step();
                a.emit(dt, EventKind::StreamClose { stream });
                ws = None;
            }
            if status != ResponseStatus::Completed {
                prev_response = None;
                prev_calls.clear();
                if self.rng.chance(25) {
                    break;
                }
                continue;
            }
            // The continuation follows once every call has ended, mostly; sometimes too
            // early, sometimes much later (a slow host).
            let next = if self.trouble(4) {
                a.t
            } else if self.rng.chance(10) {
                all_done + 10.0 + self.rng.below(40) as f64
            } else {
                all_done + self.steps(1)
            };
            a.t = a.t.max(next);
            prev_response = Some(response);
            prev_calls = calls.iter().map(|c| c.call.clone()).collect();
        }
        if let Some(stream) = ws {
            let dt = self.steps(2);
            a.emit(dt, EventKind::StreamClose { stream });
        }
        let end = a.t;
        self.agents.push(a);
        end
    }

    /// A request on another thread (or none) naming an emitted call or response: with a
    /// known, different thread it closes nothing; with no thread, ids alone decide.
    fn cross_thread_continuation(&mut self) {
        let Some(target) = self.some_other_call() else {
            return;
        };
        let thread = if self.rng.chance(50) {
            None
        } else {
            Some(self.id("th-stranger"))
        };
        let mut a = Agent::at(target.t + self.steps(3));
        let host_id = self.some_host();
        let stream = self.open_stream(&mut a, 0.0, Host::CodexHttp, &thread, &host_id);
        let (previous_response, outputs) = if self.rng.chance(50) {
            (Some(target.response), Vec::new())
        } else {
            (None, vec![target.call])
        };
        let request = self.id("q");
        let dt = self.step();
        a.emit(
            dt,
            EventKind::Request {
                stream: stream.clone(),
                request,
                previous_response,
                outputs,
            },
        );
        let dt = self.step();
        a.emit(dt, EventKind::StreamClose { stream });
        self.agents.push(a);
    }

    /// A stream that loses observation somewhere in the trace; often one whose open span
    /// just touches an MCP call (closing exactly at its start, or opening exactly at its end),
    /// since closed intervals make those edges count.
    fn lossy_stream(&mut self, span: Millis) {
        let (open_at, close_at) = match (self.rng.below(3), self.spans.is_empty()) {
            (1, false) => {
                let (s, _) = self.rng.pick(&self.spans);
                ((s - 1.0 - self.steps(2)).max(0.0), Some(s))
            }
            (2, false) => {
                let (_, e) = self.rng.pick(&self.spans);
                (e, None)
            }
            _ => (self.rng.below((span as usize).max(1)) as f64, None),
        };
        let mut a = Agent::at(open_at);
        let host_id = self.some_host();
        // Its thread: unknown, one of the trace's (it may hide that thread's windows), or
        // another one (it cannot hide a window of a call whose thread hint differs).
        let thread = match self.rng.below(3) {
            0 => None,
            1 if !self.threads.is_empty() => Some(self.rng.pick(&self.threads)),
            _ => Some(self.id("th-lossy")),
        };
        let stream = self.open_stream(&mut a, 0.0, Host::CodexHttp, &thread, &host_id);
        let dt = match close_at {
            Some(c) => (c - open_at) / 2.0,
            None => self.steps(3),
        };
        a.emit(
            dt,
            EventKind::ObservationLost {
                stream: stream.clone(),
                reason: "overflow".into(),
            },
        );
        let dt = match close_at {
            Some(c) => c - a.t,
            None => self.steps(3),
        };
        a.emit(dt, EventKind::StreamClose { stream });
        self.agents.push(a);
    }

    /// An MCP call no model asked for (another host, a manual call).
    fn orphan_call(&mut self, span: Millis) {
        let start = self.rng.below((span as usize).max(1)) as f64 * 0.5;
        let fake = Emitted {
            t: start,
            response: String::new(),
            call: self.id("orphan"),
            item: None,
            what: Asks::AnyMcp,
        };
        let host = self.rng.pick(&[Host::ClaudeHttp, Host::CodexWs, Host::Sdk]);
        let host_id = self.some_host();
        self.mcp_call(host, &fake, &None, start, &host_id, None);
    }

    /// One of the trace's hosts, or an unknown one.
    fn some_host(&mut self) -> Option<String> {
        if self.rng.chance(30) {
            None
        } else {
            Some(self.rng.pick(&self.host_ids))
        }
    }

    /// Interleaves the agents: always the earliest head next, ties broken at random.
    fn merge(mut self) -> Vec<Event> {
        let mut heads: Vec<std::vec::IntoIter<Event>> = Vec::new();
        let mut peeked: Vec<Option<Event>> = Vec::new();
        for a in std::mem::take(&mut self.agents) {
            let mut it = a.events.into_iter();
            peeked.push(it.next());
            heads.push(it);
        }
        let mut out = Vec::new();
        loop {
            let min = peeked.iter().flatten().map(|e| e.t).min_by(f64::total_cmp);
            let Some(min) = min else { break };
            let ready: Vec<usize> = peeked
                .iter()
                .enumerate()
                .filter(|(_, e)| e.as_ref().is_some_and(|e| e.t == min))
                .map(|(i, _)| i)
                .collect();
            let i = ready[self.rng.below(ready.len())];
            let ev = peeked[i].take().expect("ready head");
            peeked[i] = heads[i].next();
            out.push(ev);
        }
        out
    }
}

/// Generates one valid trace and a configuration for it.
pub fn generate(shape: Shape) -> Generated {
    let mut g = Gen {
        rng: Rng::new(shape.seed),
        next_id: 0,
        agents: Vec::new(),
        calls: Vec::new(),
        threads: Vec::new(),
        mess: 0,
        spread: 1,
        spans: Vec::new(),
        host_ids: Vec::new(),
    };
    // One to three host processes: hosts that never meet, or all in one process.
    let n_hosts = 1 + g.rng.below(3);
    g.host_ids = (0..n_hosts).map(|i| format!("h{}", i + 1)).collect();
    // Some traces crowd every host into the same moments, most spread them out.
    g.spread = if g.rng.chance(30) {
        40
    } else {
        1 + 80 * shape.hosts
    };
    g.mess = g.rng.below(3) as u64;
    let config = Config {
        close_wait: g
            .rng
            .pick(&[0.0, 0.5, 1.0, 3.0, 5.0, 5.0, 10.0, 10.0, 20.0]),
        window_open: if g.rng.chance(30) {
            WindowOpen::Response
        } else {
            WindowOpen::Call
        },
        // Short ones break windows; the longer ones leave windows that opened more than
        // `max_window` before a later call's end without breaking most of them.
        max_window: if g.trouble(15) || g.rng.chance(20) {
            g.rng.pick(&[2.0, 5.0, 12.5, 30.0, 60.0, 120.0, 250.0])
        } else {
            1.0e6
        },
        candidates: if g.rng.chance(50) {
            Candidates::Eligible
        } else {
            Candidates::All
        },
        // Generated traces span well under `retain` (hours), so nothing is ever dropped for
        // age and the reference need not model it.
        ..Config::default()
    };
    for _ in 0..shape.hosts {
        g.host(shape.max_turns.max(1));
    }
    let span = g
        .agents
        .iter()
        .filter_map(|a| a.events.last())
        .map(|e| e.t)
        .fold(0.0, f64::max);
    if g.rng.chance(40) {
        for _ in 0..1 + g.rng.below(2) {
            g.cross_thread_continuation();
        }
    }
    if g.trouble(12) || g.rng.chance(10) {
        for _ in 0..1 + g.rng.below(2) {
            g.lossy_stream(span);
        }
    }
    for _ in 0..g.rng.below(3) {
        g.orphan_call(span);
    }
    let mess = g.mess;
    let events = g.merge();
    Generated {
        events,
        config,
        mess,
    }
}

/// The events as a trace v2 file.
pub fn trace_text(events: &[Event]) -> String {
    let mut text = format!("{HEADER}\n");
    for ev in events {
        text.push_str(&event_line(ev));
    }
    text
}

/// Writes the events as trace v2 and reads them back with the strict reader: `Ok` only for
/// a valid trace, and then the events must come back unchanged.
pub fn round_trip(events: &[Event]) -> Result<Vec<Event>, TraceError> {
    read_all(trace_text(events).as_bytes(), "generated.jsonl")
}
