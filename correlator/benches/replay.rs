//! Replay throughput and memory of the correlator on a large, realistic workload.
//!
//! The workload: 10,000 threads (Claude-like HTTP and Codex-like WebSocket hosts), each doing
//! a tool loop now and then: a few responses with one to three client tool calls, the MCP
//! calls they trigger (each reported with `mcp_start` and `mcp_interval`), the continuation
//! 10–90 ms after the last call ends, and a final plain answer. Idle gaps between loops are
//! sized so that about eighty threads are mid-loop at any moment (or, in a quieter variant,
//! about twenty); a longer trace means
//! more loops per thread, not more threads at once.
//!
//! Criterion measures replay of 1M pre-generated events. Then, once each and outside
//! criterion's repetition, 1M and 10M events are generated on the fly and fed straight into
//! the correlator, with a counting global allocator tracking the peak heap in use: the
//! correlator's memory should follow what is open at once, not the length of the trace.
//!
//! What each number covers: criterion's runs and the streamed runs time `Correlator::push`
//! alone (the events are already built; the streamed rate is (generation + replay) minus a
//! generation-only run, in CPU seconds). Reading trace lines is not in them: `windowtap
//! replay` measures that, and `read_and_run` below does for callgrind.
//!
//! Tools, outside criterion (the machine is shared, so instruction counts are the repeatable
//! measure):
//! - `REPLAY_BENCH_PROFILE=200000 valgrind --tool=callgrind --toggle-collect='*run_slice*'
//!   target/release/deps/replay-…` counts the correlator alone on 200k busy events;
//!   `--toggle-collect='*read_and_run*'` counts trace reading plus the correlator.
//! - `REPLAY_BENCH_STREAM=N` runs only the streamed measurement of N busy events.
//! - `REPLAY_BENCH_WRITE=N REPLAY_BENCH_WRITE_TO=busy.jsonl` writes N busy events as a trace,
//!   for `/usr/bin/time -v windowtap replay busy.jsonl -o /dev/null`.
//!
//! Numbers (2026-11-30, the 2-core machine under other engineers' builds, load average 6–9,
//! so wall times mean little; before → after the cspeed branch):
//! - instructions per event (callgrind, 200k busy events): correlator 3,687 → 3,179; trace
//!   reading plus correlator 17,294 → 8,200; `windowtap replay` end to end 17,446 → 8,736.
//! - streamed busy 1M, M events/s of CPU, best of three interleaved runs: 1.17 → 1.73;
//!   streamed busy 10M: 0.75 → 0.95 (perf: the generator takes twice its solo time when it
//!   alternates with the correlator, and the subtraction bills that to replay; the
//!   correlator's own samples came to about 1.6 M events/s of CPU); quiet 1M: 2.2–2.4 both.
//! - criterion, same window, wall: busy 0.42 → 0.85 M events/s, quiet 0.60 → 1.07.
//! - peak heap: 28.1 MiB busy, 9.6 MiB quiet, at 1M and 10M alike.
//! - `windowtap replay` of 10M busy events (1.37 GB): 33.3 → 13.9 s user CPU, max RSS
//!   613 → 616 MB (it keeps a file's records until the file has read cleanly: 1.67M here).
//!
//! Eligibility (issue 10, 2026-12-01, same machine, load average 5–9; main at 72338ca → the
//! rule branch): every interval now checks each gathered window's host and route (~27 per
//! interval here; all hosts null and one tool, so every window stays eligible and the records
//! are the same, 166,661 of 166,666 `ambiguous`). Correlator alone, callgrind, 200k busy
//! events: 3,197 → 3,588 instructions per event (3,981 before the per-window route memo and
//! the early drop of given-up candidates). Streamed busy 1M, M events/s of CPU, three
//! interleaved runs each: before 1.73 / 1.92 / 1.90, after 1.67 / 1.88 / 1.80.
//!
//! Speed (issue 13, 2026-12-01, same machine, load average 5–7; main at 561f19f → the cspeed
//! branch; records unchanged, 5 attributed and 166,661 `ambiguous` of 1M busy events).
//! Correlator alone, callgrind, 200k busy events: 3,649 → 3,224 instructions per event;
//! trace reading plus correlator 9,251 → 8,823. Streamed busy 1M, M events/s of CPU, five
//! interleaved runs each: before 1.80 / 1.98 / 1.94 / 1.85 / 1.76, after 2.39 / 2.35 / 2.13 /
//! 1.89 / 2.15 (medians 1.85 → 2.15); streamed busy 10M, two interleaved runs: 1.24 / 1.29 →
//! 1.39 / 1.64. Peak heap 31.7 → 31.5 MiB (1M and 10M alike). The time saved is more than
//! the instructions: most of it was allocator work and cache misses (`perf` on `run_slice`),
//! which callgrind counts as a few instructions each.
//!
//! Same identity (issues 25 and 28, 2026-12-03; the build before at 8e5ea29): the busy
//! intervals' own ids now pick their window, so 166,632 of 1M busy events' intervals are
//! attributed (5 before); callgrind 3,167 → 2,755 instructions per event; streamed busy 1M, five
//! interleaved runs, medians 2.04 → 2.14 M events/s of CPU; peak heap 31.5 → 34.7 MiB (the
//! call-id index now covers closed windows too). `REPLAY_BENCH_BURSTS=N` streams the busy
//! workload with bursts of parallel subagents, `REPLAY_BENCH_PROFILE_BURSTS=N` counts it: 2,565
//! instructions per event at 100k events, 2,596 at 1M. docs/performance.md has the rest.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use correlator::records::{Reason, Record};
use correlator::{CallKind, Client, Event, EventKind, Hints, Outcome, ResponseStatus, Transport};
use correlator::{Config, Correlator};
use criterion::{Criterion, Throughput};

// ---------------------------------------------------------------------------------------------
// Counting allocator

struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(by: usize) {
    let now = CURRENT.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call is forwarded unchanged to the system allocator; the counters only
// observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                CURRENT.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Starts a peak measurement from what is allocated now; returns that baseline.
fn reset_peak() -> usize {
    let now = CURRENT.load(Ordering::Relaxed);
    PEAK.store(now, Ordering::Relaxed);
    now
}

// ---------------------------------------------------------------------------------------------
// The workload

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

const THREADS: usize = 10_000;
/// A tool loop lasts about 10 s; with this mean idle gap between loops about 80 of 10,000
/// threads are mid-loop at any moment (and about 40 windows open).
const BUSY: f64 = 1_200_000.0;
/// About 20 threads mid-loop at any moment.
const QUIET: f64 = 5_000_000.0;

struct Thread {
    key: Option<String>,
    codex: bool,
    /// Events of the current loop, in time order.
    queue: VecDeque<Event>,
}

/// An endless, time-ordered stream of events from [`THREADS`] threads.
struct Workload {
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
    fn new(seed: u64, mean_idle_ms: f64) -> Self {
        let mut rng = Rng(seed);
        let mut heap = BinaryHeap::with_capacity(THREADS);
        let threads = (0..THREADS)
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
            seq: THREADS as u64,
            next_id: 0,
            mean_idle_ms,
            pool: Vec::new(),
            relay: Vec::with_capacity(64),
            mcp: Vec::with_capacity(32),
            bursts: false,
        }
    }

    /// The same workload with bursts of parallel subagents.
    fn with_bursts(seed: u64, mean_idle_ms: f64) -> Self {
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
                    interval,
                    alias: "probe".into(),
                    tool: "echo".into(),
                    start: s,
                    end: e,
                    outcome: Outcome::Result,
                    hints,
                    host: None,
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
                        interval,
                        alias: "probe".into(),
                        tool: "echo".into(),
                        start: s,
                        end: e,
                        outcome: Outcome::Result,
                        hints,
                        host: None,
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

// ---------------------------------------------------------------------------------------------
// Runs

/// CPU time this thread has run, in seconds (Linux `schedstat`), so that rates stay
/// meaningful on a machine shared with other work; `None` where unavailable.
fn cpu_secs() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = s.split_whitespace().next()?.parse().ok()?;
    Some(ns as f64 / 1e9)
}

/// What one run saw.
struct Seen {
    /// Records: attributed, then abstentions per reason.
    counts: [usize; 6],
    max_pending: usize,
    max_windows: usize,
}

/// Feeds `events` to a correlator, discarding records as they come.
fn run(events: impl Iterator<Item = Event>) -> Seen {
    let mut c = Correlator::new(Config::default());
    let mut out: Vec<Record> = Vec::with_capacity(64);
    let mut counts = [0usize; 6];
    let (mut max_pending, mut max_windows) = (0, 0);
    let mut tally = |out: &mut Vec<Record>| {
        for r in out.drain(..) {
            let i = match r.reason {
                None => 0,
                Some(reason) => 1 + Reason::ALL.iter().position(|x| *x == reason).unwrap_or(0),
            };
            counts[i] += 1;
        }
    };
    for (k, e) in events.enumerate() {
        c.push(&e, &mut out);
        tally(&mut out);
        if k % 4096 == 0 {
            max_pending = max_pending.max(c.pending());
            max_windows = max_windows.max(c.windows_held());
        }
    }
    c.finish(&mut out);
    tally(&mut out);
    Seen {
        counts,
        max_pending,
        max_windows,
    }
}

/// The same as [`run`] over a borrowed slice (no cloning in the timed loop). Never inlined,
/// so that `valgrind --tool=callgrind --toggle-collect='*run_slice*'` counts it alone.
#[inline(never)]
fn run_slice(events: &[Event]) -> usize {
    let mut c = Correlator::new(Config::default());
    let mut out: Vec<Record> = Vec::with_capacity(64);
    let mut n = 0;
    for e in events {
        c.push(e, &mut out);
        n += out.len();
        out.clear();
    }
    c.finish(&mut out);
    n + out.len()
}

/// Reads trace v2 text and replays it, as `windowtap replay` does (less file I/O and record
/// writing). Never inlined, for callgrind's `--toggle-collect='*read_and_run*'`.
#[inline(never)]
fn read_and_run(text: &[u8]) -> usize {
    let mut c = Correlator::new(Config::default());
    let mut out: Vec<Record> = Vec::with_capacity(64);
    let mut n = 0;
    for e in correlator::trace::TraceReader::new(text, "workload") {
        let e = e.expect("the workload is a valid trace");
        c.push(&e, &mut out);
        n += out.len();
        out.clear();
    }
    c.finish(&mut out);
    n + out.len()
}

/// The busy workload's first `n` events as trace v2 text.
fn trace_text(n: usize) -> String {
    let mut text = format!("{}\n", correlator::trace::HEADER);
    for e in Workload::new(1, BUSY).take(n) {
        correlator::trace::write_event(&mut text, &e);
        text.push('\n');
    }
    text
}

fn bench_replay(c: &mut Criterion) {
    const N: usize = 1_000_000;
    let mut g = c.benchmark_group("replay");
    g.throughput(Throughput::Elements(N as u64));
    g.sample_size(10);
    for (name, idle) in [
        ("1M events, 10k threads, ~80 mid-loop", BUSY),
        ("1M events, 10k threads, ~20 mid-loop", QUIET),
    ] {
        let events: Vec<Event> = Workload::new(1, idle).take(N).collect();
        g.bench_function(name, |b| {
            b.iter(|| black_box(run_slice(black_box(&events))))
        });
    }
    g.finish();
}

/// One streamed run of `n` events: generation alone, then generation plus correlator, with
/// the peak heap above the baseline. Rates are per second of this thread's CPU time (wall
/// time in brackets: the machine may be shared).
fn measure(n: usize, mean_idle_ms: f64) {
    measure_with(n, mean_idle_ms, false)
}

/// [`measure`], with bursts of parallel subagents in one loop of three when `bursts`.
fn measure_with(n: usize, mean_idle_ms: f64, bursts: bool) {
    let workload = || {
        if bursts {
            Workload::with_bursts(7, mean_idle_ms)
        } else {
            Workload::new(7, mean_idle_ms)
        }
    };
    let base = reset_peak();
    let (w0, c0) = (Instant::now(), cpu_secs());
    let generated = workload()
        .take(n)
        .fold(0usize, |k, e| k + black_box(&e).t as usize % 2);
    black_box(generated);
    let gen_peak = PEAK.load(Ordering::Relaxed) - base;
    let gen_wall = w0.elapsed().as_secs_f64();
    let gen_cpu = cpu_secs().zip(c0).map(|(b, a)| b - a);

    let base = reset_peak();
    let (w0, c0) = (Instant::now(), cpu_secs());
    let seen = run(workload().take(n));
    let total_wall = w0.elapsed().as_secs_f64();
    let total_cpu = cpu_secs().zip(c0).map(|(b, a)| b - a);
    let peak = PEAK.load(Ordering::Relaxed) - base;

    let rate = |secs: f64| n as f64 / secs.max(f64::EPSILON) / 1e6;
    let replay_wall = total_wall - gen_wall;
    match total_cpu.zip(gen_cpu) {
        Some((total, gen)) => println!(
            "streamed {n} events: replay {:.2} M events/s of CPU ({:.2} M/s wall); \
             generation {gen:.2} s CPU, generation + replay {total:.2} s CPU ({total_wall:.2} s wall)",
            rate(total - gen),
            rate(replay_wall),
        ),
        None => println!(
            "streamed {n} events: replay {:.2} M events/s wall; generation {gen_wall:.2} s, \
             generation + replay {total_wall:.2} s",
            rate(replay_wall),
        ),
    }
    let [attributed, incomplete, ambiguous, unclosed, conflict, no_window] = seen.counts;
    println!(
        "  peak heap above baseline {:.1} MiB (correlator and generator; generator alone {:.1} MiB); \
         at most {} intervals \
         pending and {} windows held; records: {attributed} attributed, {incomplete} incomplete, \
         {ambiguous} ambiguous, {unclosed} unclosed, {conflict} identity_conflict, \
         {no_window} no_window",
        peak as f64 / (1024.0 * 1024.0),
        gen_peak as f64 / (1024.0 * 1024.0),
        seen.max_pending,
        seen.max_windows,
    );
}

fn main() {
    // Tools for measuring outside criterion (see the header doc).
    let count = |var: &str| -> Option<usize> {
        let v = std::env::var(var).ok()?;
        Some(
            v.parse()
                .unwrap_or_else(|_| panic!("{var} takes a number of events, got {v}")),
        )
    };
    if let Some(n) = count("REPLAY_BENCH_PROFILE_BURSTS") {
        let events: Vec<Event> = Workload::with_bursts(1, BUSY).take(n).collect();
        println!(
            "{n} events with bursts: {} records",
            black_box(run_slice(&events))
        );
        return;
    }
    if let Some(n) = count("REPLAY_BENCH_PROFILE") {
        let events: Vec<Event> = Workload::new(1, BUSY).take(n).collect();
        let text = trace_text(n);
        println!("{n} events: {} records", black_box(run_slice(&events)));
        println!(
            "read and replayed: {} records",
            black_box(read_and_run(text.as_bytes()))
        );
        return;
    }
    if let Some(n) = count("REPLAY_BENCH_STREAM") {
        measure(n, BUSY);
        return;
    }
    if let Some(n) = count("REPLAY_BENCH_BURSTS") {
        measure_with(n, BUSY, true);
        return;
    }
    if let Some(n) = count("REPLAY_BENCH_WRITE") {
        let path = std::env::var("REPLAY_BENCH_WRITE_TO").unwrap_or_else(|_| "busy.jsonl".into());
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            let mut f = std::io::BufWriter::new(std::fs::File::create(&path)?);
            writeln!(f, "{}", correlator::trace::HEADER)?;
            let mut line = String::with_capacity(256);
            for e in Workload::new(1, BUSY).take(n) {
                line.clear();
                correlator::trace::write_event(&mut line, &e);
                line.push('\n');
                f.write_all(line.as_bytes())?;
            }
            f.flush()
        };
        write().unwrap_or_else(|e| panic!("writing {path}: {e}"));
        println!("wrote {n} busy events to {path}");
        return;
    }
    // `cargo bench` passes `--bench`; without it (`cargo test --benches`, or `--test`) only
    // check, quickly, that the workload is valid and the measurement works.
    let quick =
        !std::env::args().any(|a| a == "--bench") || std::env::args().any(|a| a == "--test");
    if quick {
        let events: Vec<Event> = Workload::new(1, BUSY).take(20_000).collect();
        let mut text = format!("{}\n", correlator::trace::HEADER);
        for e in &events {
            text.push_str(&correlator::trace::event_line(e));
        }
        if let Err(e) = correlator::trace::read_all(text.as_bytes(), "workload") {
            panic!("the workload is not a valid trace: {e}");
        }
        assert!(run_slice(&events) > 0, "the workload reports intervals");
        let bursts: Vec<Event> = Workload::with_bursts(1, BUSY).take(20_000).collect();
        let mut text = format!("{}\n", correlator::trace::HEADER);
        for e in &bursts {
            text.push_str(&correlator::trace::event_line(e));
        }
        if let Err(e) = correlator::trace::read_all(text.as_bytes(), "bursts") {
            panic!("the workload with bursts is not a valid trace: {e}");
        }
        measure(20_000, BUSY);
        measure_with(20_000, BUSY, true);
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    bench_replay(&mut c);
    c.final_summary();
    println!("busy: ~80 of 10k threads mid-loop");
    measure(1_000_000, BUSY);
    if std::env::var_os("REPLAY_BENCH_SKIP_10M").is_none() {
        measure(10_000_000, BUSY);
    }
    println!("quiet: ~20 of 10k threads mid-loop");
    measure(1_000_000, QUIET);
    println!("busy with bursts of parallel subagents (one loop in three)");
    measure_with(1_000_000, BUSY, true);
    if std::env::var_os("REPLAY_BENCH_SKIP_10M").is_none() {
        measure_with(10_000_000, BUSY, true);
    }
}
