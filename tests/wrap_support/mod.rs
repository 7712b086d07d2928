//! Shared by the wrapper tests: the `windowtap ingest` harness standing in for the relay, and
//! a scripted MCP client driving `windowtap wrap` over its stdin and stdout.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use correlator::{Event, EventKind, Hints, Outcome};

pub const BIN: &str = env!("CARGO_BIN_EXE_windowtap");
/// Upper bound for any single wait: generous, only hit when something is broken.
pub const PATIENCE: Duration = Duration::from_secs(60);

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/mcp")
        .join(name)
}

pub fn have(cmd: &str) -> bool {
    Command::new(cmd)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

pub use testkit::proc::{signal, Signal};

/// The pseudonymization key every test harness is given (in a key file), so tests can
/// compute the pseudonym a raw id is printed as.
pub const ID_KEY: [u8; correlator::PSEUDONYM_KEY_LEN] = [0x5a; correlator::PSEUDONYM_KEY_LEN];

/// The pseudonym `windowtap ingest` prints for the raw id `raw` (it never prints raw ids).
pub fn pseudo(raw: &str) -> String {
    correlator::Pseudonymizer::new(&ID_KEY).id(raw)
}

/// `windowtap ingest` on a socket: what a relay would receive.
pub struct Ingest {
    pub path: PathBuf,
    child: Child,
    /// Kept open: the harness reports its counters on stderr when it stops.
    stderr: BufReader<std::process::ChildStderr>,
    lines: Receiver<String>,
    out: Option<JoinHandle<()>>,
    seen: Vec<String>,
    _key_dir: tempfile::TempDir,
}

impl Ingest {
    pub fn start(path: &Path) -> Ingest {
        Ingest::spawn(Some(path), &[])
    }

    /// The harness on its default path, under the given environment.
    pub fn start_default(env: &[(&str, &Path)]) -> Ingest {
        Ingest::spawn(None, env)
    }

    fn spawn(path: Option<&Path>, env: &[(&str, &Path)]) -> Ingest {
        let key_dir = tempfile::tempdir().expect("a temp dir for the key file");
        let key_file = key_dir.path().join("id.key");
        std::fs::write(&key_file, hex::encode(ID_KEY)).expect("writing the key file");
        let mut cmd = Command::new(BIN);
        cmd.arg("ingest").arg("--id-key-file").arg(&key_file);
        if let Some(p) = path {
            cmd.arg("--ingest").arg(p);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start windowtap ingest");
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        err.read_line(&mut line).expect("ingest banner");
        assert!(line.contains("listening on"), "ingest said: {line}");
        let path = PathBuf::from(line.trim_end().rsplit("listening on ").next().unwrap());
        let (tx, lines) = mpsc::channel();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let out = std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Ingest {
            path: path.to_path_buf(),
            child,
            stderr: err,
            lines,
            out: Some(out),
            seen: Vec::new(),
            _key_dir: key_dir,
        }
    }

    /// Waits until `n` intervals (`mcp_interval` lines) have been printed.
    pub fn wait_intervals(&mut self, n: usize) {
        let deadline = Instant::now() + PATIENCE;
        while self
            .seen
            .iter()
            .filter(|l| l.contains("\"type\":\"mcp_interval\""))
            .count()
            < n
        {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(_) => panic!("ingest printed fewer than {n} intervals: {:?}", self.seen),
            }
        }
    }

    /// Waits for `n` intervals, stops the listener and returns every event it printed, read
    /// back as trace v2.
    pub fn stop_after(self, n: usize) -> Vec<Event> {
        self.stop_after_text(n).0
    }

    /// [`stop_after`](Self::stop_after), with the text the listener printed too (to search
    /// it for canaries).
    pub fn stop_after_text(mut self, n: usize) -> (Vec<Event>, String) {
        self.wait_intervals(n);
        signal(self.child.id(), Signal::TERM);
        self.out.take().unwrap().join().unwrap();
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
        let mut counters = String::new();
        let _ = self.stderr.read_to_string(&mut counters);
        let status = self.child.wait().unwrap();
        assert!(status.success(), "ingest exited with {status}: {counters}");
        let text: String = self.seen.iter().map(|l| format!("{l}\n")).collect();
        let events = correlator::trace::read_all(text.as_bytes(), "ingest")
            .expect("ingest output is a valid trace");
        (events, format!("{text}{counters}"))
    }
}

/// An MCP interval as reported, for assertions.
#[derive(Debug, Clone, PartialEq)]
pub struct Interval {
    pub interval: String,
    pub alias: String,
    pub tool: String,
    pub start: f64,
    pub end: f64,
    pub outcome: Outcome,
    pub hints: Hints,
    pub t: f64,
}

/// The intervals among `events`, checking their times are in order.
pub fn intervals(events: &[Event]) -> Vec<Interval> {
    let mut out = Vec::new();
    for e in events {
        if let EventKind::McpInterval {
            interval,
            alias,
            tool,
            start,
            end,
            outcome,
            hints,
            ..
        } = &e.kind
        {
            assert!(start <= end && *end <= e.t, "times in order for {interval}");
            out.push(Interval {
                interval: interval.clone(),
                alias: alias.clone(),
                tool: tool.clone(),
                start: *start,
                end: *end,
                outcome: *outcome,
                hints: hints.clone(),
                t: e.t,
            });
        }
    }
    out
}

/// Checks that every interval's `mcp_start` came before it, with the same start; returns the
/// events.
pub fn started(events: Vec<Event>) -> Vec<Event> {
    for (n, e) in events.iter().enumerate() {
        if let EventKind::McpInterval {
            interval, start, ..
        } = &e.kind
        {
            let ok = events[..n].iter().any(|s| {
                matches!(&s.kind, EventKind::McpStart { interval: i, start: st, .. } if i == interval && st == start)
            });
            assert!(ok, "{interval} has its mcp_start before it: {events:?}");
        }
    }
    events
}

/// A running `windowtap wrap` with a scripted client on its pipes.
pub struct Wrapped {
    pub child: Child,
    stdin: Option<ChildStdin>,
    /// Every byte the client sent.
    pub sent: Vec<u8>,
    /// Every byte the client received, in order.
    pub received: Arc<Mutex<Vec<u8>>>,
    lines: Receiver<Vec<u8>>,
    reader: Option<JoinHandle<()>>,
    pub stderr: Arc<Mutex<Vec<u8>>>,
    err_reader: Option<JoinHandle<()>>,
}

impl Wrapped {
    /// `windowtap wrap --alias ALIAS [--ingest PATH] -- server...`.
    pub fn start(alias: &str, ingest: Option<&Path>, server: &[&str]) -> Wrapped {
        Wrapped::start_env(alias, ingest, server, &[])
    }

    /// The same, with extra environment variables.
    pub fn start_env(
        alias: &str,
        ingest: Option<&Path>,
        server: &[&str],
        env: &[(&str, &Path)],
    ) -> Wrapped {
        let mut cmd = Command::new(BIN);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.args(["wrap", "--alias", alias]);
        if let Some(p) = ingest {
            cmd.arg("--ingest").arg(p);
        }
        cmd.arg("--").args(server);
        cmd.env_remove("WINDOWTAP_INGEST");
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start windowtap wrap");
        let received = Arc::new(Mutex::new(Vec::new()));
        let (tx, lines) = mpsc::channel();
        let mut out = child.stdout.take().unwrap();
        let rec = received.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 16];
            let mut line = Vec::new();
            loop {
                let n = match out.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                rec.lock().unwrap().extend_from_slice(&buf[..n]);
                for &b in &buf[..n] {
                    if b == b'\n' {
                        let _ = tx.send(std::mem::take(&mut line));
                    } else {
                        line.push(b);
                    }
                }
            }
        });
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let mut err = child.stderr.take().unwrap();
        let se = stderr.clone();
        let err_reader = std::thread::spawn(move || {
            let mut buf = vec![0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    return;
                }
                se.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        let stdin = child.stdin.take();
        Wrapped {
            child,
            stdin,
            sent: Vec::new(),
            received,
            lines,
            reader: Some(reader),
            stderr,
            err_reader: Some(err_reader),
        }
    }

    /// Sends bytes as they are (a line must bring its own `\n`).
    pub fn send(&mut self, bytes: &[u8]) {
        self.sent.extend_from_slice(bytes);
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).unwrap();
        stdin.flush().unwrap();
    }

    pub fn send_json(&mut self, v: &serde_json::Value) {
        let mut line = serde_json::to_vec(v).unwrap();
        line.push(b'\n');
        self.send(&line);
    }

    /// Waits for a received line that parses as JSON and satisfies `pred`.
    pub fn wait_for(
        &mut self,
        what: &str,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no {what} in time"));
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&line) {
                if pred(&v) {
                    return v;
                }
            }
        }
    }

    /// Waits for the response to request `id`.
    pub fn response(&mut self, id: serde_json::Value) -> serde_json::Value {
        self.wait_for(&format!("response to {id}"), |v| {
            v.get("id") == Some(&id) && v.get("method").is_none()
        })
    }

    /// Waits for the next received line, whatever it is.
    pub fn next_line(&mut self) -> Vec<u8> {
        self.lines.recv_timeout(PATIENCE).expect("a line in time")
    }

    /// Waits until the wrapper's stderr contains `text`.
    pub fn wait_stderr(&self, text: &str) {
        let deadline = Instant::now() + PATIENCE;
        while !String::from_utf8_lossy(&self.stderr.lock().unwrap()).contains(text) {
            assert!(Instant::now() < deadline, "stderr never said {text:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn close_stdin(&mut self) {
        self.stdin.take();
    }

    /// Closes stdin, waits for the wrapper to exit; returns its status, what the client
    /// received and everything the wrapper wrote to stderr.
    pub fn wait(mut self) -> (ExitStatus, Vec<u8>, String) {
        self.close_stdin();
        self.wait_open()
    }

    /// Waits for the wrapper to exit with stdin still open (it must end by itself).
    pub fn wait_open(mut self) -> (ExitStatus, Vec<u8>, String) {
        let deadline = Instant::now() + PATIENCE;
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "wrapper did not exit: {}",
                proc_state(self.child.id())
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        self.reader.take().unwrap().join().unwrap();
        self.err_reader.take().unwrap().join().unwrap();
        let received = std::mem::take(&mut *self.received.lock().unwrap());
        let stderr = String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned();
        (status, received, stderr)
    }
}

impl Drop for Ingest {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Drop for Wrapped {
    fn drop(&mut self) {
        // A failed test must not leave a server behind.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub fn init_request(id: serde_json::Value) -> serde_json::Value {
    serde_json::json!({"jsonrpc":"2.0","id":id,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"wrap-test","version":"0"}}})
}

pub fn call(
    id: serde_json::Value,
    tool: &str,
    args: serde_json::Value,
    meta: serde_json::Value,
) -> serde_json::Value {
    serde_json::json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":args,"_meta":meta}})
}

/// What a stuck process and its children are doing, for a failure message.
pub fn proc_state(pid: u32) -> String {
    let mut out = String::new();
    let read = |p: String| std::fs::read_to_string(p).unwrap_or_default();
    let mut pids = vec![pid.to_string()];
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let tid = t.file_name().to_string_lossy().into_owned();
        pids.extend(
            read(format!("/proc/{pid}/task/{tid}/children"))
                .split_whitespace()
                .map(String::from),
        );
    }
    for p in pids {
        out.push_str(&format!(
            "\n== {p} {}",
            read(format!("/proc/{p}/cmdline")).replace('\0', " ")
        ));
        let status = read(format!("/proc/{p}/status"));
        for l in status
            .lines()
            .filter(|l| l.starts_with("State") || l.starts_with("Sig") || l.starts_with("ShdPnd"))
        {
            out.push_str(&format!("\n  {l}"));
        }
        for t in std::fs::read_dir(format!("/proc/{p}/task"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let tid = t.file_name().to_string_lossy().into_owned();
            out.push_str(&format!(
                "\n  task {tid} {} wchan={} syscall={}",
                read(format!("/proc/{p}/task/{tid}/comm")).trim(),
                read(format!("/proc/{p}/task/{tid}/wchan")),
                read(format!("/proc/{p}/task/{tid}/syscall"))
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
            ));
        }
    }
    out
}
