//! `windowtap replay` streams: its peak memory follows what is open at once in the trace, not
//! the trace's length. Two traces of the replay bench's busy workload, one ten times as long
//! as the other, are replayed in subprocesses, and the longer one's peak resident set must be
//! within 1.2× of the shorter one's. Memory, not time: the machine may be shared.
//!
//! The workload has 50 threads rather than the bench's 10,000: the correlator's state grows
//! with each thread's history until it reaches a steady size (measured on this workload in a
//! debug build: with 200 threads the peak still grows up to about 200,000 events, with 50 it is
//! flat from about 40,000), and the shorter trace must already be past that, so that what
//! could still grow with the length is only what the command holds on to. (The build before
//! streaming, which kept every record of a trace until its end, fails this test: 13.7 MB for
//! the shorter trace, 75 MB for the longer one, in a release build.)

use std::path::Path;
use std::process::{Command, Stdio};

#[allow(dead_code)]
#[path = "../correlator/benches/workload/mod.rs"]
mod workload;

/// The shorter trace's length, in events; the longer one has ten times as many.
const EVENTS: usize = 50_000;
const THREADS: usize = 50;
/// With a tool loop of about 10 s, about 7 of the 50 threads are mid-loop at once.
const IDLE_MS: f64 = 60_000.0;

/// Replays `trace` in a child process; returns its peak resident set in KiB and its stderr.
fn replay_peak_kib(trace: &Path, out: &Path) -> (u64, String) {
    let errors = out.with_extension("stderr");
    let mut child = Command::new(env!("CARGO_BIN_EXE_windowtap"))
        .arg("replay")
        .arg(trace)
        .arg("-o")
        .arg(out)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&errors).unwrap())
        .spawn()
        .expect("run windowtap");
    // This child's own peak (its VmHWM), not that of other tests' children (the process-wide
    // RUSAGE_CHILDREN would mix them in).
    let (status, peak) = testkit::proc::wait_with_peak_kib(&mut child);
    let stderr = std::fs::read_to_string(&errors).unwrap();
    assert!(
        status.success(),
        "replay of {} failed: {stderr}",
        trace.display()
    );
    (peak, stderr)
}

#[test]
fn ten_times_the_events_peak_within_a_fifth_more_memory() {
    let dir = tempfile::tempdir().unwrap();
    let mut peaks = Vec::new();
    for n in [EVENTS, 10 * EVENTS] {
        let trace = dir.path().join(format!("busy-{n}.jsonl"));
        let w = workload::Workload::with_threads(1, IDLE_MS, THREADS);
        workload::write_trace(w, n, &trace).unwrap();
        let out = dir.path().join(format!("busy-{n}.records"));
        let (peak, stderr) = replay_peak_kib(&trace, &out);
        // It did the work: thousands of decisions, every one written.
        let written = std::fs::read_to_string(&out).unwrap().lines().count();
        assert!(written > n / 20, "{n} events: {written} records; {stderr}");
        assert!(
            stderr.starts_with(&format!("{written} intervals:")),
            "{stderr}"
        );
        eprintln!("{n} events: {written} records, peak RSS {peak} KiB");
        peaks.push(peak);
        std::fs::remove_file(&trace).unwrap();
    }
    let (short, long) = (peaks[0] as f64, peaks[1] as f64);
    assert!(
        long <= 1.2 * short,
        "peak RSS {long} KiB for {} events against {short} KiB for {EVENTS}: replay holds on to \
         something that grows with the trace",
        10 * EVENTS
    );
}
