//! `h1`'s request-path harness; see `h1_target` in h1/fuzz/harness.rs.
#![no_main]

use libfuzzer_sys::fuzz_target;

// One harness file shared with `h1/tests/fuzz_seeds.rs`, which replays the corpus under
// plain `cargo test`.
#[allow(dead_code)]
#[path = "../harness.rs"]
mod harness;

fuzz_target!(|data: &[u8]| harness::h1_target(data));
