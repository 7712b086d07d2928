//! A closed standard output (`windowtap check traces/ | head -1`) ends every command quietly,
//! like any Unix tool: exit 141 (128 + SIGPIPE) or 0, nothing on stderr, no panic.
//!
//! The reader of the pipe is gone before the command starts, so its first write fails: no
//! race with a reader that might have taken everything first.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A pipe whose read end is already closed: its write end, for a child's stdout.
fn widowed_pipe() -> OwnedFd {
    let (read, write) = testkit::proc::pipe();
    drop(read);
    write
}

/// Runs windowtap with stdout on a pipe nobody reads.
fn into_closed_pipe(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_windowtap"))
        .args(args)
        .current_dir(dir)
        .env_remove("WINDOWTAP_INGEST")
        .stdin(Stdio::null())
        .stdout(Stdio::from(widowed_pipe()))
        .stderr(Stdio::piped())
        .output()
        .expect("run windowtap")
}

fn assert_quiet(args: &[&str], dir: &Path) {
    let out = into_closed_pipe(args, dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        matches!(out.status.code(), Some(0) | Some(141)),
        "windowtap {args:?}: {:?}, stderr: {stderr}",
        out.status
    );
    assert!(
        stderr.is_empty(),
        "windowtap {args:?} said something: {stderr}"
    );
}

#[test]
fn every_command_that_writes_stdout_ends_quietly_when_it_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let traces = repo().join("traces");
    let trace = traces.join("codex_seed_single_call.jsonl");
    let records = traces.join("expected/codex_seed_single_call.records.jsonl");
    let (traces, trace, records) = (
        traces.to_str().unwrap(),
        trace.to_str().unwrap(),
        records.to_str().unwrap(),
    );
    assert_quiet(&["check", traces], dir.path());
    assert_quiet(&["replay", traces], dir.path());
    assert_quiet(&["replay", trace, "-o", "-"], dir.path());
    assert_quiet(&["report", records], dir.path());
    assert_quiet(
        &["report", records, "--trace", trace, "-o", "-"],
        dir.path(),
    );
    assert_quiet(&["env", "claude"], dir.path());
    assert_quiet(&["env", "codex"], dir.path());
    assert_quiet(&["--help"], dir.path());
    assert_quiet(&["run", "--help"], dir.path());
}

/// A file named `-` is not created: `-o -` is stdout.
#[test]
fn dash_means_stdout_for_replay_and_report() {
    let dir = tempfile::tempdir().unwrap();
    let trace = repo().join("traces/codex_seed_single_call.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_windowtap"))
        .args(["replay", trace.to_str().unwrap(), "-o", "-"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"type\":\"attribution\""));
    assert!(!dir.path().join("-").exists());
}
