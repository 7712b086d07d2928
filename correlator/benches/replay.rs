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
//! - `REPLAY_BENCH_SHAPE=bursts` or `multihost` (workload/multihost.rs: many hosts, one stream
//!   in ten of unknown host, losses, abandoned loops, native tools, long calls) sets the
//!   workload of the three above (default `busy`).
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
//! `windowtap replay` end to end (issue 28, 2026-12-03, a slower VM; 8e5ea29 → the replay
//! branch; docs/performance.md has the runs): it now streams, so its peak RSS is 39.4–39.8 MB
//! for 1M, 10M and 30M busy events alike (before: 139 MB for 1M, 1.2 GB for 10M), and reads
//! lines in place: 1M busy events in 0.82–0.88 s of CPU (1.14–1.22 M events per CPU-second)
//! against 1.09–1.21 s before, five interleaved runs. The correlator alone (`REPLAY_BENCH_STREAM`) ran
//! at 2.24 M events per CPU-second on the same VM. Issue 28 item 2 (59790ca → the speed28
//! branch): an event's ids borrow from its line, 7,763 → 6,923 instructions per event end to end
//! (callgrind, 100k events), 0.84 → 0.91 and 0.83 → 0.94 M events per CPU-second (medians of two
//! sets of 7, interleaved, load 4).

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use correlator::records::{Reason, Record};
use correlator::Event;
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
// The workload (shared with the streaming-replay memory test, tests/replay_memory.rs)

mod workload;
use workload::{multihost::Multihost, Workload, BUSY, QUIET};

/// Which workload a measurement runs (`REPLAY_BENCH_SHAPE`: `busy`, the default, `bursts` or
/// `multihost`).
#[derive(Clone, Copy, Debug)]
enum Shape {
    /// The busy workload, ~80 of 10k threads mid-loop (or another idle gap).
    Busy(f64),
    /// The same with bursts of parallel subagents in one loop of three.
    Bursts,
    /// Many hosts, one stream in ten unknown, losses, abandoned loops, native tools, long
    /// calls (workload/multihost.rs).
    Multihost,
}

impl Shape {
    fn from_env() -> Shape {
        match std::env::var("REPLAY_BENCH_SHAPE").as_deref() {
            Err(_) | Ok("busy") => Shape::Busy(BUSY),
            Ok("bursts") => Shape::Bursts,
            Ok("multihost") => Shape::Multihost,
            Ok(other) => panic!("REPLAY_BENCH_SHAPE is busy, bursts or multihost, not {other}"),
        }
    }

    /// The shape's endless event stream for `seed`.
    fn events(self, seed: u64) -> Box<dyn Iterator<Item = Event>> {
        match self {
            Shape::Busy(idle) => Box::new(Workload::new(seed, idle)),
            Shape::Bursts => Box::new(Workload::with_bursts(seed, BUSY)),
            Shape::Multihost => Box::new(Multihost::new(seed)),
        }
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
    /// The most broken windows and lost spans held at once.
    max_broken: usize,
    max_lost: usize,
}

/// Feeds `events` to a correlator, discarding records as they come.
fn run(events: impl Iterator<Item = Event>) -> Seen {
    let mut c = Correlator::new(Config::default());
    let mut out: Vec<Record> = Vec::with_capacity(64);
    let mut counts = [0usize; 6];
    let (mut max_pending, mut max_windows, mut max_broken, mut max_lost) = (0, 0, 0, 0);
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
            let held = c.held();
            max_broken = max_broken.max(held.broken);
            max_lost = max_lost.max(held.lost);
        }
    }
    c.finish(&mut out);
    tally(&mut out);
    Seen {
        counts,
        max_pending,
        max_windows,
        max_broken,
        max_lost,
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

/// A workload's first `n` events as trace v2 text.
fn trace_text(shape: Shape, n: usize) -> String {
    let mut text = format!("{}\n", correlator::trace::HEADER);
    for e in shape.events(1).take(n) {
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
    measure_with(n, Shape::Busy(mean_idle_ms))
}

/// [`measure`] for a workload of any shape.
fn measure_with(n: usize, shape: Shape) {
    let workload = || shape.events(7);
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
         pending, {} windows, {} broken windows and {} lost spans held; records: {attributed} attributed, {incomplete} incomplete, \
         {ambiguous} ambiguous, {unclosed} unclosed, {conflict} identity_conflict, \
         {no_window} no_window",
        peak as f64 / (1024.0 * 1024.0),
        gen_peak as f64 / (1024.0 * 1024.0),
        seen.max_pending,
        seen.max_windows,
        seen.max_broken,
        seen.max_lost,
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
        let shape = Shape::from_env();
        let events: Vec<Event> = shape.events(1).take(n).collect();
        let text = trace_text(shape, n);
        println!("{n} events: {} records", black_box(run_slice(&events)));
        println!(
            "read and replayed: {} records",
            black_box(read_and_run(text.as_bytes()))
        );
        return;
    }
    if let Some(n) = count("REPLAY_BENCH_STREAM") {
        measure_with(n, Shape::from_env());
        return;
    }
    if let Some(n) = count("REPLAY_BENCH_BURSTS") {
        measure_with(n, Shape::Bursts);
        return;
    }
    if let Some(n) = count("REPLAY_BENCH_WRITE") {
        let shape = Shape::from_env();
        let path = std::env::var("REPLAY_BENCH_WRITE_TO").unwrap_or_else(|_| "busy.jsonl".into());
        let write = || workload::write_trace(shape.events(1), n, path.as_ref());
        write().unwrap_or_else(|e| panic!("writing {path}: {e}"));
        println!("wrote {n} events of the {shape:?} shape to {path}");
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
        let multihost: Vec<Event> = Multihost::new(1).take(50_000).collect();
        let mut text = format!("{}\n", correlator::trace::HEADER);
        for e in &multihost {
            text.push_str(&correlator::trace::event_line(e));
        }
        if let Err(e) = correlator::trace::read_all(text.as_bytes(), "multihost") {
            panic!("the multi-host workload is not a valid trace: {e}");
        }
        measure(20_000, BUSY);
        measure_with(20_000, Shape::Bursts);
        measure_with(50_000, Shape::Multihost);
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
    measure_with(1_000_000, Shape::Bursts);
    if std::env::var_os("REPLAY_BENCH_SKIP_10M").is_none() {
        measure_with(10_000_000, Shape::Bursts);
    }
    println!("multi-host: many hosts, one stream in ten unknown, losses, abandoned loops");
    measure_with(1_000_000, Shape::Multihost);
}
