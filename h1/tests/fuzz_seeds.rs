//! The `h1` fuzz harnesses under plain `cargo test` (no nightly, no cargo-fuzz): every seed
//! (`h1/fuzz/corpus/`) and fixed finding (`h1/fuzz/regressions/`), then a short generated
//! run: heads assembled from the pieces request smuggling is made of (framing headers named in
//! `Connection`, lengths and codings together, odd spellings of both, folded lines, bare line
//! feeds, pipelined bytes after the head), tunnel runs (reads, writes, waits, ends and time in
//! both directions), request paths made of the pieces of a way out of a base path, and plain
//! random bytes, through the same invariants the libFuzzer targets
//! check.

use std::path::{Path, PathBuf};

use proptest::prelude::*;

mod heads;
use heads::{request_head, response_head};

#[allow(dead_code)]
#[path = "../fuzz/harness.rs"]
mod harness;

type Target = (&'static str, fn(&[u8]));

const TARGETS: &[Target] = &[
    ("h1_request", harness::h1_request),
    ("h1_response", harness::h1_response),
    ("h1_framing", harness::h1_framing),
    ("h1_exchange", harness::h1_exchange),
    ("h1_tunnel", harness::h1_tunnel),
    ("h1_target", harness::h1_target),
];

/// A request path for `h1_target`, made of the pieces a way out of a base path is made of.
fn target_path() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop::sample::select(vec![
        "/", "\\", ".", "..", "%2e", "%2E", "%2f", "%2F", "%5c", "%5C", ";", ";x", "a", "%", "%25",
        "%6d", "//", "?", "../", "é", "%00", "%09",
    ]);
    prop::collection::vec(piece, 0..16).prop_map(|p| p.concat().into_bytes())
}

/// A tunnel run for `h1_tunnel`: the observed flag, then (operation, argument) pairs, weighted
/// towards reads and writes that go through, with waits, ends and time between.
fn tunnel_steps() -> impl Strategy<Value = Vec<u8>> {
    let op = prop_oneof![
        4 => 0u8..30,   // a read
        5 => 30u8..70,  // a write or flush taken
        2 => 70u8..90,  // a write that waits
        2 => 90u8..100, // the driver takes the events
        1 => 100u8..110, // a clean end
        1 => 110u8..113, // a broken read, a failed write
        1 => 113u8..128, // time passes
    ];
    let step = (op, any::<bool>(), any::<u8>())
        .prop_map(|(op, down, arg)| [op | if down { 0x80 } else { 0 }, arg]);
    (any::<u8>(), prop::collection::vec(step, 0..200)).prop_map(|(first, steps)| {
        std::iter::once(first)
            .chain(steps.into_iter().flatten())
            .collect()
    })
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

#[test]
fn every_seed_and_fixed_finding_keeps_its_invariants() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    for (name, run) in TARGETS {
        let seeds = files(&fuzz.join("corpus").join(name));
        assert!(!seeds.is_empty(), "no seeds for {name}");
        for file in seeds
            .iter()
            .chain(&files(&fuzz.join("regressions").join(name)))
        {
            let data = std::fs::read(file).unwrap();
            run(&data);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn generated_request_heads_keep_their_invariants(head in request_head()) {
        harness::h1_request(&head);
    }

    #[test]
    fn generated_response_heads_keep_their_invariants(head in response_head()) {
        harness::h1_response(&head);
    }

    #[test]
    fn generated_exchanges_keep_their_invariants(
        first in any::<u8>(),
        head in response_head(),
        body in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        let mut data = vec![first];
        data.extend_from_slice(&head);
        data.extend_from_slice(&body);
        harness::h1_exchange(&data);
    }

    #[test]
    fn random_bytes_keep_every_invariant(data in prop::collection::vec(any::<u8>(), 0..512)) {
        harness::h1_request(&data);
        harness::h1_response(&data);
        harness::h1_framing(&data);
        harness::h1_exchange(&data);
        harness::h1_tunnel(&data);
        harness::h1_target(&data);
    }

    #[test]
    fn generated_tunnel_interleavings_keep_their_invariants(steps in tunnel_steps()) {
        harness::h1_tunnel(&steps);
    }

    #[test]
    fn generated_paths_never_leave_the_base_path(path in target_path()) {
        harness::h1_target(&path);
    }
}
