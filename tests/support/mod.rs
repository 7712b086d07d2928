//! Shared test support: the relay as the built binary and what a test does with its files.
//! The rest (the scripted upstream, the HTTP client, frames, fake SSE streams) is the test
//! kit's (crates/testkit), re-exported here so a test names it as before.
//!
//! Everything listens on 127.0.0.1 with ephemeral ports; every wait is bounded.
#![allow(dead_code, unused_imports)]

pub mod ws;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::body::Incoming;

pub use testkit::proc::Signal;
pub use testkit::sse::{claude_turn, event as sse_event};
pub use testkit::*;

// ---------------------------------------------------------------------------------------
// The relay binary
// ---------------------------------------------------------------------------------------

pub struct Relay {
    child: Option<Child>,
    pub addr: SocketAddr,
    pub stderr: Arc<Mutex<Vec<String>>>,
    /// This relay's own ingest socket (relays of concurrent tests must not share one).
    pub ingest: PathBuf,
    _dir: tempfile::TempDir,
}

impl Relay {
    /// Starts `windowtap relay --listen 127.0.0.1:0 ARGS...` and waits for its banner.
    pub fn start(args: &[String]) -> Relay {
        Relay::start_with_stdout(args, Stdio::null())
    }

    /// [`Relay::start`] with the relay's stdout (where records go without `--records`) set to
    /// `stdout`; a pipe stays open, unread, for as long as the `Relay` lives.
    pub fn start_with_stdout(args: &[String], stdout: Stdio) -> Relay {
        Relay::start_full(args, stdout, None)
    }

    /// A relay on its default ingest socket, as a user starts one: `windowtap relay` with no
    /// `--ingest`, `XDG_RUNTIME_DIR` unset and `TMPDIR` set to `tmpdir`, so its socket is
    /// `<tmpdir>/windowtap-<uid>/ingest.sock` (what `ingest` says), where a wrapper given no
    /// path finds it.
    #[allow(dead_code)] // not every test binary has two relays side by side
    pub fn start_at_default(args: &[String], tmpdir: &Path) -> Relay {
        Relay::start_full(args, Stdio::null(), Some(tmpdir))
    }

    fn start_full(args: &[String], stdout: Stdio, default_under: Option<&Path>) -> Relay {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_windowtap"));
        cmd.arg("relay").args(["--listen", "127.0.0.1:0"]);
        let ingest = match default_under {
            None => {
                let ingest = dir.path().join("ingest.sock");
                cmd.arg("--ingest").arg(&ingest);
                ingest
            }
            Some(tmp) => {
                cmd.env("TMPDIR", tmp)
                    .env_remove("XDG_RUNTIME_DIR")
                    .env_remove("WINDOWTAP_INGEST");
                let uid = testkit::proc::uid();
                tmp.join(format!("windowtap-{uid}")).join("ingest.sock")
            }
        };
        let mut child = cmd
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting windowtap relay");
        let stderr = child.stderr.take().expect("piped stderr");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let keep = lines.clone();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            let mut addr = None;
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.split("listening on http://").nth(1) {
                    addr = Some(rest.trim().to_string());
                }
                let banner_done = line.contains("ChatGPT login");
                keep.lock().unwrap().push(line);
                // The banner's last line: the whole banner is in `keep` now.
                if banner_done {
                    if let (Some(tx), Some(a)) = (tx.take(), addr.take()) {
                        let _ = tx.send(a);
                    }
                }
            }
        });
        let addr = match rx.recv_timeout(WAIT) {
            Ok(a) => a.parse().expect("banner address"),
            Err(_) => {
                let _ = child.kill();
                panic!("relay did not start: {:?}", lines.lock().unwrap());
            }
        };
        Relay {
            child: Some(child),
            addr,
            stderr: lines,
            ingest,
            _dir: dir,
        }
    }

    /// SIGTERM, then wait (bounded) for a clean exit.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        testkit::proc::terminate(child.id());
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                // Let the stderr reader catch the last lines.
                std::thread::sleep(Duration::from_millis(50));
                return status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("relay did not stop on SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends `sig` to the relay without waiting for anything.
    pub fn signal(&self, sig: Signal) {
        let pid = self.pid();
        assert!(pid != 0, "the relay is not running");
        testkit::proc::signal(pid, sig);
    }

    /// Waits (bounded by [`WAIT`]) for the relay to exit on its own; panics if it does not.
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                // Let the stderr reader catch the last lines.
                std::thread::sleep(Duration::from_millis(50));
                return status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("relay did not exit within {WAIT:?}: {}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits (bounded by [`WAIT`]) until a stderr line contains `needle`.
    pub fn wait_log(&self, needle: &str) {
        let deadline = std::time::Instant::now() + WAIT;
        while !self
            .stderr
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains(needle))
        {
            if std::time::Instant::now() > deadline {
                panic!("the relay never logged `{needle}`: {}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    pub fn log(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Sends a Claude request through the relay and returns the response body once its head is in.
pub async fn open_stream(relay: &Relay, body: serde_json::Value) -> Incoming {
    let req = request("POST", relay.addr, "/anthropic/v1/messages")
        .header("content-type", "application/json")
        .header("x-claude-code-session-id", "sess-1")
        .body(full(body.to_string()))
        .unwrap();
    let res = tokio::time::timeout(WAIT, send(relay.addr, req))
        .await
        .expect("response head within the wait bound")
        .unwrap();
    assert_eq!(res.status(), 200);
    res.into_body()
}

/// The capture's events of type `ty` (it may still be written to: an unreadable or partial
/// line is skipped).
pub fn capture_of_type(capture: &Path, ty: &str) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(capture).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["type"] == ty)
        .collect()
}

/// A relay for `up`'s mount `name` writing records and capture into `dir`, with `extra`
/// options; returns it with the records' and the capture's paths.
pub fn relay_with_files(
    up: &Upstream,
    name: &str,
    dir: &Path,
    extra: &[&str],
) -> (Relay, PathBuf, PathBuf) {
    let records = dir.join("records.jsonl");
    let capture = dir.join("capture.jsonl");
    let mut args = vec![
        "--upstream".to_string(),
        up.mount(name, ""),
        "--records".into(),
        records.display().to_string(),
        "--capture".into(),
        capture.display().to_string(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    (Relay::start(&args), records, capture)
}

/// A relay for `up`'s `anthropic` mount writing records and capture into `dir`
/// (`--close-wait 200`), draining for at most `drain_ms` when stopped.
pub fn anthropic_relay_with_files(
    up: &Upstream,
    dir: &Path,
    drain_ms: u64,
) -> (Relay, PathBuf, PathBuf) {
    let drain = drain_ms.to_string();
    relay_with_files(
        up,
        "anthropic",
        dir,
        &["--close-wait", "200", "--drain", &drain],
    )
}

/// `windowtap check` accepts the capture, and `windowtap replay` of it prints these records.
pub fn checked_replay(capture: &Path) -> String {
    let checked = std::process::Command::new(env!("CARGO_BIN_EXE_windowtap"))
        .arg("check")
        .arg(capture)
        .output()
        .unwrap();
    assert!(
        checked.status.success(),
        "check rejected the capture: {}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_windowtap"))
        .arg("replay")
        .arg(capture)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "replay rejected the capture: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Reads the records of a finished run's capture.
pub fn capture_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("capture lines are JSON"))
        .collect()
}

/// `windowtap check` accepts the file, and it ends on a complete line.
pub fn assert_checks_clean(path: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_windowtap"))
        .arg("check")
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "check rejected {}: {}{}",
        path.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read(path).unwrap();
    assert!(
        text.is_empty() || text.ends_with(b"\n"),
        "{} ends with a torn line",
        path.display()
    );
}

/// A live run's records file without its run header (docs/records-v1.md), which must be its
/// first line: what `windowtap replay` of the run's capture prints, byte for byte.
#[allow(dead_code)] // not every test binary compares live records with a replay
pub fn live_records(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    if text.is_empty() {
        return text;
    }
    match text.split_once('\n') {
        Some((first, rest))
            if first.starts_with(r#"{"type":"run","version":1,"epoch_unix_ms":"#) =>
        {
            rest.to_string()
        }
        _ => panic!("the live records start with no run header:\n{text}"),
    }
}
