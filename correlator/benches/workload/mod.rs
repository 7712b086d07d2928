//! The busy workload of the replay bench: an endless, time-ordered stream of trace events from
//! many threads doing tool loops (the bench's header describes it). It lives apart from the
//! bench so that the streaming-replay memory test (tests/replay_memory.rs in the windowtap
//! crate) writes the same traces the bench measures.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use correlator::{CallKind, Client, Event, EventKind, Hints, Outcome, ResponseStatus, Transport};

pub mod multihost;

/// SplitMix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi)`, whole milliseconds plus a quarter-millisecond fraction.
    fn ms(&mut self, lo: f64, hi: f64) -> f64 {
        let span = ((hi - lo) * 4.0) as u64;
        lo + (self.next() % span.max(1)) as f64 / 4.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

pub const THREADS: usize = 10_000;
/// A tool loop lasts about 10 s; with this mean idle gap between loops about 80 of 10,000
/// threads are mid-loop at any moment (and about 40 windows open).
pub const BUSY: f64 = 1_200_000.0;
/// About 20 threads mid-loop at any moment.
pub const QUIET: f64 = 5_000_000.0;

struct Thread {
    key: Option<String>,
    codex: bool,
    /// Events of the current loop, in time order.
    queue: VecDeque<Event>,
}

/// An endless, time-ordered stream of events from [`THREADS`] threads (or as many as
/// [`Workload::with_threads`] says).
pub struct Workload {
    rng: Rng,
    threads: Vec<Thread>,
    /// (time of the thread's next event or next loop start, tie-breaker, thread).
    heap: BinaryHeap<Reverse<(u64, u64, usize)>>,
    seq: u64,
    next_id: u64,
    mean_idle_ms: f64,
    /// Emptied loop queues and scratch buffers, reused: the generator makes no large
    /// allocations in the steady state, which would otherwise make glibc consolidate the
    /// correlator's freed chunks and bill that to the replay.
    pool: Vec<VecDeque<Event>>,
    relay: Vec<Event>,
    mcp: Vec<Event>,
    /// One loop in three starts with a burst of parallel subagents (see [`Workload::burst`]).
    bursts: bool,
}

/// Where a burst of subagents is launched: the parent's stream and response, the time, the
/// parent's thread, and whether the host is Codex.
struct Launch<'a> {
    stream: &'a str,
    response: &'a str,
    t: f64,
    parent: &'a Option<String>,
    codex: bool,
}

/// Heap key for a time: `f64` bits order like the numbers for non-negative values.
fn key(t: f64) -> u64 {
    t.to_bits()
}

impl Workload {
    pub fn new(seed: u64, mean_idle_ms: f64) -> Self {
        Self::with_threads(seed, mean_idle_ms, THREADS)
    }

    /// `n` threads; the mean idle gap sets how many are mid-loop at once (a loop lasts about
    /// 10 s: `n * 10 s / (10 s + idle)`).
    pub fn with_threads(seed: u64, mean_idle_ms: f64, n: usize) -> Self {
        let mut rng = Rng(seed);
        let mut heap = BinaryHeap::with_capacity(n);
        let threads = (0..n)
            .map(|i| {
                let start = rng.ms(0.0, mean_idle_ms);
                heap.push(Reverse((key(start), i as u64, i)));
                Thread {
                    // One thread in twenty has no known key.
                    key: (rng.below(20) != 0).then(|| format!("th{i}")),
                    codex: rng.below(2) == 0,
                    queue: VecDeque::new(),
                }
            })
            .collect();
        Workload {
            rng,
            threads,
            heap,
            seq: n as u64,
            next_id: 0,
            mean_idle_ms,
            pool: Vec::new(),
            relay: Vec::with_capacity(64),
            mcp: Vec::with_capacity(32),
            bursts: false,
        }
    }

    /// The same workload with bursts of parallel subagents.
    pub fn with_bursts(seed: u64, mean_idle_ms: f64) -> Self {
        Workload {
            bursts: true,
            ..Workload::new(seed, mean_idle_ms)
        }
    }

    /// A burst (issue 25): the thread's response at `t` launches two or three subagents at
    /// once (Claude Code `Agent` calls, Codex `spawn_agent`), each a thread of its own whose
    /// response calls the same MCP tool, the calls (1–3 s each) overlapping; each subagent
    /// continues 10–90 ms after its call ends and answers. The Claude subagents' calls carry
    /// their `tool_use_id`; the Codex ones run the tool from code mode (`exec`) and carry only
    /// a fresh `exec-…` call id and their thread. Returns the launching calls' ids and when the
    /// last subagent is done.
    fn burst(
        &mut self,
        relay: &mut Vec<Event>,
        mcp: &mut Vec<Event>,
        from: Launch<'_>,
    ) -> (Vec<String>, f64) {
        let Launch {
            stream,
            response,
            mut t,
            parent,
            codex,
        } = from;
        let n = 2 + self.rng.below(2) as usize;
        let mut launched = Vec::with_capacity(n);
        let mut done = t;
        for k in 0..n {
            t += self.rng.ms(0.0, 0.5);
            let call = self.id(if codex { "call_" } else { "toolu_" });
            relay.push(ev(
                t,
                EventKind::ToolCall {
                    stream: stream.into(),
                    response: response.into(),
                    call: call.clone(),
                    item: codex.then(|| self.id("fc_")),
                    name: if codex { "spawn_agent" } else { "Agent" }.into(),
                    namespace: None,
                    kind: if codex {
                        CallKind::Function
                    } else {
                        CallKind::ToolUse
                    },
                },
            ));
            launched.push(call);
            // The subagent: its own thread (unknown when the parent's is), its own streams.
            let thread = parent.as_ref().map(|p| format!("{p}+agent{k}"));
            let mut u = t + self.rng.ms(5.0, 40.0);
            let s1 = self.id("sa");
            let client = if codex { Client::Codex } else { Client::Claude };
            let transport = if codex {
                Transport::Websocket
            } else {
                Transport::Http
            };
            relay.push(ev(u, open(&s1, client, transport, &thread)));
            let q1 = self.id("q");
            relay.push(ev(
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
            relay.push(ev(
                u,
                EventKind::ResponseStart {
                    stream: s1.clone(),
                    response: r1.clone(),
                    request: Some(q1),
                    model: None,
                },
            ));
            u += self.rng.ms(100.0, 400.0);
            let sub_call = self.id(if codex { "call_" } else { "toolu_" });
            relay.push(ev(
                u,
                EventKind::ToolCall {
                    stream: s1.clone(),
                    response: r1.clone(),
                    call: sub_call.clone(),
                    item: codex.then(|| self.id("ctc_")),
                    name: if codex { "exec" } else { "mcp__probe__echo" }.into(),
                    namespace: codex.then(|| "functions".into()),
                    kind: if codex {
                        CallKind::Custom
                    } else {
                        CallKind::ToolUse
                    },
                },
            ));
            let s = u + self.rng.ms(1.0, 6.0);
            let e = s + self.rng.ms(1000.0, 3000.0);
            let interval = self.id("i");
            mcp.push(ev(
                s + 0.25,
                EventKind::McpStart {
                    interval: interval.clone(),
                    alias: "probe".into(),
                    tool: "echo".into(),
                    start: s,
                    host: None,
                    transport: correlator::McpTransport::Stdio,
                },
            ));
            let hints = if codex {
                Hints {
                    call_id: Some(self.id("exec-")),
                    thread: thread.clone(),
                    ..Hints::default()
                }
            } else {
                Hints {
                    tool_use_id: Some(sub_call.clone()),
                    ..Hints::default()
                }
            };
            mcp.push(ev(
                e + 0.5,
                EventKind::McpInterval {
                    rounds: None,
                    interval,
                    alias: "probe".into(),
                    tool: "echo".into(),
                    start: s,
                    end: e,
                    outcome: Outcome::Result,
                    hints,
                    host: None,
                    transport: correlator::McpTransport::Stdio,
                },
            ));
            u += self.rng.ms(20.0, 200.0);
            relay.push(ev(
                u,
                EventKind::ResponseEnd {
                    stream: s1.clone(),
                    response: r1.clone(),
                    status: ResponseStatus::Completed,
                    usage: None,
                    stop_reason: None,
                },
            ));
            // The continuation (on a new stream over HTTP, on the same WebSocket otherwise),
            // then the subagent's answer.
            let s2 = if codex { s1.clone() } else { self.id("sa") };
            if !codex {
                relay.push(ev(u + 1.0, EventKind::StreamClose { stream: s1 }));
            }
            u = u.max(e) + self.rng.ms(10.0, 90.0);
            if !codex {
                relay.push(ev(u, open(&s2, client, transport, &thread)));
            }
            let q2 = self.id("q");
            relay.push(ev(
                u,
                EventKind::Request {
                    stream: s2.clone(),
                    request: q2.clone(),
                    previous_response: codex.then(|| r1.clone()),
                    outputs: vec![sub_call],
                },
            ));
            let r2 = self.id("r");
            u += self.rng.ms(300.0, 900.0);
            relay.push(ev(
                u,
                EventKind::ResponseStart {
                    stream: s2.clone(),
                    response: r2.clone(),
                    request: Some(q2),
                    model: None,
                },
            ));
            u += self.rng.ms(20.0, 400.0);
            relay.push(ev(
                u,
                EventKind::ResponseEnd {
                    stream: s2.clone(),
                    response: r2,
                    status: ResponseStatus::Completed,
                    usage: None,
                    stop_reason: None,
                },
            ));
            u += 1.0;
            relay.push(ev(u, EventKind::StreamClose { stream: s2 }));
            done = done.max(u);
        }
        (launched, done)
    }

    fn id(&mut self, prefix: &str) -> String {
        self.next_id += 1;
        format!("{prefix}{}", self.next_id)
    }

    /// Generates one whole tool loop of thread `i` starting at `t0`.
    fn tool_loop(&mut self, i: usize, t0: f64) -> VecDeque<Event> {
        let thread = self.threads[i].key.clone();
        let codex = self.threads[i].codex;
        let mut relay = std::mem::take(&mut self.relay);
        let mut mcp = std::mem::take(&mut self.mcp);
        let mut t = t0;
        let ws = self.id("ws");
        if codex {
            relay.push(ev(
                t,
                open(&ws, Client::Codex, Transport::Websocket, &thread),
            ));
        }
        let turns = 2 + self.rng.below(4);
        let mut previous: Option<String> = None;
        let mut outputs: Vec<String> = Vec::new();
        for turn in 0..turns {
            let stream = if codex { ws.clone() } else { self.id("s") };
            if !codex {
                relay.push(ev(
                    t,
                    open(&stream, Client::Claude, Transport::Http, &thread),
                ));
            }
            let request = self.id("q");
            t += self.rng.ms(0.5, 3.0);
            relay.push(ev(
                t,
                EventKind::Request {
                    stream: stream.clone(),
                    request: request.clone(),
                    previous_response: if codex { previous.clone() } else { None },
                    outputs: std::mem::take(&mut outputs),
                },
            ));
            let response = self.id("r");
            t += self.rng.ms(300.0, 900.0);
            relay.push(ev(
                t,
                EventKind::ResponseStart {
                    stream: stream.clone(),
                    response: response.clone(),
                    request: Some(request),
                    model: None,
                },
            ));
            let last_turn = turn + 1 == turns;
            let burst = self.bursts && turn == 0 && !last_turn && self.rng.below(3) == 0;
            let calls = if last_turn || burst {
                0
            } else {
                1 + self.rng.below(3)
            };
            let mut all_done = 0.0f64;
            if burst {
                t += self.rng.ms(200.0, 1500.0);
                let from = Launch {
                    stream: &stream,
                    response: &response,
                    t,
                    parent: &thread,
                    codex,
                };
                let (launched, done) = self.burst(&mut relay, &mut mcp, from);
                all_done = done;
                outputs.extend(launched);
            }
            for _ in 0..calls {
                t += self.rng.ms(200.0, 1500.0);
                let call = self.id(if codex { "call_" } else { "toolu_" });
                let item = codex.then(|| self.id("ctc_"));
                relay.push(ev(
                    t,
                    EventKind::ToolCall {
                        stream: stream.clone(),
                        response: response.clone(),
                        call: call.clone(),
                        item: item.clone(),
                        name: if codex {
                            "exec".into()
                        } else {
                            "mcp__probe__echo".into()
                        },
                        namespace: codex.then(|| "functions".into()),
                        kind: if codex {
                            CallKind::Custom
                        } else {
                            CallKind::ToolUse
                        },
                    },
                ));
                // The host runs the call as soon as its item is complete.
                let s = t + self.rng.ms(1.0, 6.0);
                let e = s + self.rng.ms(20.0, 2000.0);
                let interval = self.id("i");
                mcp.push(ev(
                    s + 0.25,
                    EventKind::McpStart {
                        interval: interval.clone(),
                        alias: "probe".into(),
                        tool: "echo".into(),
                        start: s,
                        host: None,
                        transport: correlator::McpTransport::Stdio,
                    },
                ));
                let hints = if codex {
                    Hints {
                        tool_use_id: None,
                        item_id: item,
                        call_id: Some(call.clone()),
                        thread: thread.clone(),
                    }
                } else {
                    Hints {
                        tool_use_id: Some(call.clone()),
                        ..Hints::default()
                    }
                };
                mcp.push(ev(
                    e + 0.5,
                    EventKind::McpInterval {
                        rounds: None,
                        interval,
                        alias: "probe".into(),
                        tool: "echo".into(),
                        start: s,
                        end: e,
                        outcome: Outcome::Result,
                        hints,
                        host: None,
                        transport: correlator::McpTransport::Stdio,
                    },
                ));
                all_done = all_done.max(e);
                outputs.push(call);
            }
            t += self.rng.ms(20.0, 400.0);
            relay.push(ev(
                t,
                EventKind::ResponseEnd {
                    stream: stream.clone(),
                    response: response.clone(),
                    status: ResponseStatus::Completed,
                    usage: None,
                    stop_reason: None,
                },
            ));
            if !codex {
                relay.push(ev(t + 1.0, EventKind::StreamClose { stream }));
            }
            // The continuation follows 10–90 ms after the last call ended.
            t = t.max(all_done) + self.rng.ms(10.0, 90.0);
            previous = Some(response);
        }
        if codex {
            relay.push(ev(t, EventKind::StreamClose { stream: ws }));
        }
        relay.append(&mut mcp);
        // Stable: each stream's and each call's own events keep their order.
        relay.sort_by(|a, b| a.t.total_cmp(&b.t));
        let mut queue = self.pool.pop().unwrap_or_default();
        queue.extend(relay.drain(..));
        self.relay = relay;
        self.mcp = mcp;
        queue
    }
}

fn ev(t: f64, kind: EventKind) -> Event {
    Event { t, kind }
}

fn open(stream: &str, client: Client, transport: Transport, thread: &Option<String>) -> EventKind {
    EventKind::StreamOpen {
        stream: stream.into(),
        client,
        transport,
        thread: thread.clone(),
        host: None,
    }
}

impl Iterator for Workload {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        let Reverse((k, _, i)) = self.heap.pop()?;
        let t = f64::from_bits(k);
        if self.threads[i].queue.is_empty() {
            // Idle until now: start a loop.
            self.threads[i].queue = self.tool_loop(i, t);
        }
        let thread = &mut self.threads[i];
        let event = thread.queue.pop_front()?;
        let next_key = match thread.queue.front() {
            Some(e) => key(e.t),
            None => {
                // Idle threads hold no buffer (the peak heap should show the correlator, not
                // 10,000 emptied loop queues): it goes back to the pool.
                self.pool.push(std::mem::take(&mut thread.queue));
                key(event.t + self.rng.ms(0.0, 2.0 * self.mean_idle_ms))
            }
        };
        self.seq += 1;
        self.heap.push(Reverse((next_key, self.seq, i)));
        Some(event)
    }
}

/// Writes the first `n` events of `w` (a workload of any shape) as a trace v2 file (header
/// line first).
pub fn write_trace(
    w: impl Iterator<Item = Event>,
    n: usize,
    path: &std::path::Path,
) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(f, "{}", correlator::trace::HEADER)?;
    let mut line = String::with_capacity(256);
    for e in w.take(n) {
        line.clear();
        correlator::trace::write_event(&mut line, &e);
        line.push('\n');
        f.write_all(line.as_bytes())?;
    }
    f.flush()
}
