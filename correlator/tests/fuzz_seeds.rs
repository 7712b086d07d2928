//! Replays every fuzz seed (`fuzz/corpus/<target>/`) and every fixed fuzz finding
//! (`fuzz/regressions/<target>/`) through the same harnesses the libFuzzer targets run, so the
//! invariants they check hold in every `cargo test`, without cargo-fuzz or a nightly toolchain.

use std::path::{Path, PathBuf};

// The harnesses are one file shared with the fuzz crate; see its module docs.
#[allow(dead_code)]
#[path = "../../fuzz/src/lib.rs"]
mod harness;

use correlator::observe::Api;

/// A fuzz target's name and the harness it runs.
type Target = (&'static str, fn(&[u8]));

const TARGETS: &[Target] = &[
    ("sse", |d| harness::http_exchange(Api::AnthropicMessages, d)),
    ("responses", |d| harness::http_exchange(Api::Responses, d)),
    ("ws_frames", harness::ws_connection),
    ("body", harness::body_scanners),
    ("trace_reader", harness::trace_reader),
    ("ingest", harness::ingest_line),
    ("jsonrpc", harness::jsonrpc_lines),
    ("mcp_mount", harness::mcp_mount),
];

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("reading a corpus directory").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// Runs every file of `fuzz/<kind>/<target>/` through the target's harness; returns how many.
fn replay(kind: &str) -> usize {
    let mut total = 0;
    for (target, run) in TARGETS {
        for file in files(&fuzz_dir().join(kind).join(target)) {
            let data = std::fs::read(&file).expect("reading a fuzz input");
            let outcome = std::panic::catch_unwind(|| run(&data));
            assert!(outcome.is_ok(), "{target}: {} fails", file.display());
            total += 1;
        }
    }
    total
}

#[test]
fn every_seed_passes_its_harness() {
    // Every target has seeds: an empty corpus directory would make this test vacuous.
    for (target, _) in TARGETS {
        let dir = fuzz_dir().join("corpus").join(target);
        assert!(!files(&dir).is_empty(), "no seeds in {}", dir.display());
    }
    assert!(replay("corpus") >= TARGETS.len());
}

#[test]
fn every_fixed_finding_stays_fixed() {
    replay("regressions");
}

#[test]
fn every_harness_takes_degenerate_input() {
    // libFuzzer starts from empty and tiny inputs; the input decoders read missing bytes as 0.
    for (_, run) in TARGETS {
        run(&[]);
        run(&[0]);
        run(&[0xff; 32]);
    }
}
