//! `windowtap wrap`: runs a stdio MCP server and reports when each `tools/call` really ran.
//!
//! The host talks to the wrapper as if it were the server. Bytes pass through untouched in
//! both directions, written as soon as they are read (a line is never held back waiting for
//! the next one, and a giant line streams through in pieces), by plain blocking threads so
//! that nothing sits between a read and its write but the observation of the line that just
//! ended. Observation ([`correlator::observe::jsonrpc`]) sees every line whole through a small
//! skeleton; reports go to the relay's ingest socket from a thread of their own through a
//! bounded queue, so a missing or stuck relay can never slow the MCP session: reports are then
//! dropped and counted.
//!
//! Times: a line is stamped when it has been read whole, just before it is passed on. So a
//! call's start is just before its request reaches the server (whose answer therefore cannot
//! be observed first) and its end just before the answer reaches the host (so a call the host
//! makes in reply always starts after it).

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use correlator::observe::jsonrpc::{Call, Direction, LineScanner, Observation, Observer};

use live::ingest::{self, Report, RoundsNs, ServerState, SpawnError};
use rustix::process::{Pid, Signal};
use sys::clock::mono_ns;
use sys::libc_calls::SignalSet;

#[derive(clap::Args)]
pub struct WrapArgs {
    /// The server's name as the host knows it: the `<alias>` of `mcp__<alias>__<tool>`.
    #[arg(long, value_name = "NAME")]
    pub alias: String,
    /// The relay's ingest socket [default: $XDG_RUNTIME_DIR/windowtap/ingest.sock, or a
    /// private temp dir; the relay prints its path when it starts].
    #[arg(long, env = ingest::ENV, value_name = "PATH")]
    pub ingest: Option<PathBuf>,
    /// The MCP server command and its arguments, after `--`.
    #[arg(last = true, required = true, num_args = 1.., value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// Reports waiting for the socket; beyond this they are dropped (the relay is not keeping up).
const QUEUE: usize = 4096;
/// How often a missing relay is looked for again.
const RETRY: Duration = Duration::from_secs(1);
/// How long a stuck relay may block one report write before the connection is given up.
const WRITE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the wrapper waits at exit for the last reports to leave.
const FLUSH_AT_EXIT: Duration = Duration::from_secs(2);
/// Read size for each direction.
const CHUNK: usize = 64 * 1024;

pub fn main(args: WrapArgs) -> anyhow::Result<ExitCode> {
    if args.alias.is_empty() {
        anyhow::bail!("--alias must not be empty");
    }
    if !correlator::sanitize::is_tool_name(&args.alias) {
        // The relay writes such an alias as a pseudonym (docs/design.md §7), which no
        // model-visible name resolves to: say so once, without the value.
        eprintln!(
            "windowtap: warning: --alias is not a name as the model APIs allow one \
             ([A-Za-z0-9_.:-], up to 128 bytes); it is written as a pseudonym and its calls \
             cannot be matched to the host's tool calls by name"
        );
    }
    // Not given a socket (argument or environment): one an ancestor was given, else the
    // default places. A program started by `windowtap run` has run's socket in its
    // environment, but an agent SDK starts its MCP servers with a few variables of its own
    // choosing (the MCP Python and TypeScript SDKs: HOME, LOGNAME, PATH, SHELL, TERM, USER),
    // so the variable often never reaches the wrapper; the program's own environment still
    // says where run listens. The socket is held to the same checks however it was found.
    let given = args
        .ingest
        .clone()
        .or_else(|| hostid::ancestor_env(ingest::ENV).map(|(_, p)| PathBuf::from(p)))
        .filter(|p| !p.as_os_str().is_empty());
    let paths = match &given {
        Some(p) => vec![p.clone()],
        None => ingest::wrapper_candidates(),
    };
    let (program, rest) = args
        .command
        .split_first()
        .context("no server command given")?;
    // A socket given as an argument was chosen for this wrapper (`windowtap run` gives its
    // own): nothing to tell. One found in the environment or at a default place may be
    // another relay's, so where the reports go is said.
    let tell = (!ingest_in_args()).then(|| args.alias.clone());
    let check_dirs = given.is_none();
    let spawned = Command::new(program)
        .args(rest)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            // Said to the relay too, which names the server at its stop: a host shows a
            // server that failed to start nowhere the user looks.
            let reporter = Reporter::start(paths, check_dirs, tell);
            reporter.send_server(
                &args.alias,
                ServerState::SpawnFailed(SpawnError::of(e.kind())),
            );
            reporter.finish();
            return Err(e)
                .with_context(|| format!("starting the MCP server {}", program.to_string_lossy()));
        }
    };
    let pid = rustix::process::Pid::from_child(&child);
    // Now that the server runs with the signal state we were given, block the forwarded
    // signals before any thread exists, so every thread inherits the mask and only the
    // forwarding thread receives them. Then make sure they are not ignored: an ignored signal
    // is discarded before `sigwait` could see it (a shell starts background jobs with SIGINT
    // ignored). The server keeps whatever it inherited, as it would without the wrapper.
    let signals = SignalSet::of(&FORWARDED);
    signals.block_with_default_action();
    let reporter = Reporter::start(paths, check_dirs, tell);
    reporter.send_server(&args.alias, ServerState::Started);
    let reaped = Arc::new(Mutex::new(false));
    forward_signals(signals, pid, reaped.clone());

    let session = Arc::new(Session {
        alias: args.alias.clone(),
        prefix: format!("w{}-{:08x}", std::process::id(), rand::random::<u32>()),
        observer: Mutex::new(Observer::new()),
        reporter,
        answered: AtomicBool::new(false),
    });

    let server_in = child.stdin.take().context("server stdin")?;
    let mut server_out = child.stdout.take().context("server stdout")?;
    let host_in = std_file(std::io::stdin().as_fd()).context("the host's stdin")?;
    let mut host_out = std_file(std::io::stdout().as_fd()).context("the host's stdout")?;
    {
        let session = session.clone();
        std::thread::Builder::new()
            .name("wrap-up".into())
            .spawn(move || {
                let mut host_in = host_in;
                let mut server_in = server_in;
                pump(
                    &mut host_in,
                    &mut server_in,
                    Direction::ClientToServer,
                    &session,
                );
                // The host closed its side (or the server's stdin broke): close the server's.
                drop(server_in);
            })?;
    }
    pump(
        &mut server_out,
        &mut host_out,
        Direction::ServerToClient,
        &session,
    );

    // The server closed its stdout (it is exiting): calls still running end now.
    let gone = mono_ns();
    // Wait for it without reaping first, so that the signal
    // thread never signals a pid that may already belong to someone else.
    wait_exited(pid);
    let status = {
        let mut r = reaped.lock().unwrap_or_else(|e| e.into_inner());
        *r = true;
        child.wait().context("waiting for the MCP server")?
    };
    session.lose_running(gone);
    if !session.answered.load(Ordering::Relaxed) {
        // It never wrote a byte to the host: whatever the host does now, it has no tools of
        // this server. Said here and to the relay, which names it at its stop.
        let state = ServerState::ExitedAtStart {
            code: status.code(),
            signal: status.signal(),
        };
        eprintln!(
            "windowtap wrap: the MCP server `{}` never ran: {state}",
            args.alias
        );
        session.reporter.send_server(&args.alias, state);
    }
    let unreported = session.reporter.finish();
    if unreported > 0 {
        eprintln!(
            "windowtap wrap: {unreported} call(s) not reported (or only in part): the relay's ingest socket was not reachable"
        );
    }
    let code = match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 1,
    };
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}

/// Whether `--ingest` was given on the command line (rather than through the environment).
fn ingest_in_args() -> bool {
    std::env::args_os()
        .skip(1)
        .take_while(|a| a != "--")
        .any(|a| a == "--ingest" || a.to_string_lossy().starts_with("--ingest="))
}

/// A standard descriptor as an unbuffered file of its own: a duplicate, so that dropping it
/// leaves the standard one open.
fn std_file(fd: BorrowedFd<'_>) -> io::Result<File> {
    Ok(File::from(fd.try_clone_to_owned()?))
}

/// One wrapped MCP session.
struct Session {
    alias: String,
    /// Makes interval ids unique across wrappers: pid and a random word.
    prefix: String,
    observer: Mutex<Observer>,
    reporter: Reporter,
    /// The server has written something to the host (so it did not exit at its start).
    answered: AtomicBool,
}

impl Session {
    /// Observes a line and queues what it showed. Queueing happens under the observer's lock
    /// (it never blocks), so a call's start is always queued before its end, even when the
    /// answer is read on the other thread before this one got further.
    fn observe(&self, dir: Direction, skeleton: &[u8], t: u64) {
        let mut out = Vec::new();
        let mut obs = self.observer.lock().unwrap_or_else(|e| e.into_inner());
        obs.skeleton(dir, skeleton, t, &mut out);
        self.report(out);
    }

    fn report(&self, out: Vec<Observation>) {
        for o in out {
            self.reporter.send(self.to_report(o));
        }
    }

    fn lose_running(&self, t: u64) {
        let mut out = Vec::new();
        let mut obs = self.observer.lock().unwrap_or_else(|e| e.into_inner());
        obs.lose_all(t, &mut out);
        self.report(out);
    }

    fn to_report(&self, o: Observation) -> Report {
        let id = |c: &Call| format!("{}-{}", self.prefix, c.seq + 1);
        match o {
            Observation::Start(call) => Report::Start {
                id: id(&call),
                alias: self.alias.clone(),
                tool: call.tool,
                start_ns: call.start,
                hints: call.hints,
            },
            Observation::End { call, end, outcome } => Report::End {
                id: id(&call),
                alias: self.alias.clone(),
                tool: call.tool,
                start_ns: call.start,
                end_ns: end,
                outcome,
                hints: call.hints,
                // Only a call of more than one request, or one that ended waiting on the
                // client, says anything about rounds.
                rounds: (call.rounds > 1 || call.unanswered).then_some(RoundsNs {
                    rounds: call.rounds,
                    input_wait_ns: call.input_wait.min(end - call.start),
                    unanswered: call.unanswered,
                }),
            },
        }
    }
}

/// Copies `src` to `dst` until `src` ends, observing each complete line. If `dst` breaks, the
/// rest of `src` is drained unobserved (so the writer on the other side never blocks) and the
/// calls still running end as lost when the session ends.
fn pump(src: &mut dyn Read, dst: &mut dyn Write, dir: Direction, session: &Session) {
    let mut buf = vec![0u8; CHUNK];
    let mut scanner = LineScanner::new();
    let mut dst_ok = true;
    loop {
        let n = match src.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        if dir == Direction::ServerToClient {
            session.answered.store(true, Ordering::Relaxed);
        }
        let mut rest = &buf[..n];
        while !rest.is_empty() && dst_ok {
            let Some(i) = rest.iter().position(|&b| b == b'\n') else {
                // Part of a line: forward it now, observe it when its line ends.
                scanner.push(rest);
                dst_ok = write(dst, rest);
                break;
            };
            let (line, tail) = rest.split_at(i + 1);
            rest = tail;
            scanner.push(&line[..i]);
            let skeleton = scanner.finish();
            // Each line is observed, and stamped, as soon as it is whole and before it is passed
            // on: a request is registered before the server can answer it, and an answer is
            // stamped before the host can react to it, so one call's end always precedes the
            // start of a call the host sent in reply. A call whose request then fails to arrive
            // stays running and ends lost with the session.
            if let Some(sk) = &skeleton {
                session.observe(dir, sk, mono_ns());
            }
            dst_ok = write(dst, line);
        }
    }
}

fn write(dst: &mut dyn Write, bytes: &[u8]) -> bool {
    dst.write_all(bytes).and_then(|()| dst.flush()).is_ok()
}

/// Sends reports to the ingest socket from its own thread.
struct Reporter {
    /// A report's line with its call's id, or the end marker.
    tx: SyncSender<Option<(String, String)>>,
    counts: Arc<Counts>,
    done: Mutex<mpsc::Receiver<()>>,
}

impl Reporter {
    fn start(paths: Vec<PathBuf>, check_dirs: bool, tell: Option<String>) -> Reporter {
        let (tx, rx) = mpsc::sync_channel::<Option<(String, String)>>(QUEUE);
        let (done_tx, done) = mpsc::channel();
        let counts = Arc::new(Counts::default());
        let c = counts.clone();
        let spawned = std::thread::Builder::new()
            .name("wrap-report".into())
            .spawn(move || {
                let mut link = Link {
                    paths,
                    check_dirs,
                    conn: None,
                    last_try: None,
                    warned: false,
                    tell,
                    told: None,
                };
                // Connected (or warned) at the start, not at the first call: which relay the
                // reports go to is said before anything depends on it.
                link.connect();
                while let Ok(Some((call, line))) = rx.recv() {
                    if link.send(line.as_bytes()) {
                        c.sent(&call);
                    }
                }
                let _ = done_tx.send(());
            });
        if spawned.is_err() {
            eprintln!("windowtap wrap: warning: cannot start the reporting thread; no intervals will be reported");
        }
        Reporter {
            tx,
            counts,
            done: Mutex::new(done),
        }
    }

    /// Queues a report; never blocks.
    fn send(&self, report: Report) {
        let call = match &report {
            Report::Start { id, .. } | Report::End { id, .. } => id.clone(),
            Report::Server { alias, state } => return self.send_server(alias, *state),
        };
        // Counted before it is queued, so that its sending can never come first.
        self.counts.queued(&call);
        // A report that finds the queue full is dropped, and its call stays unsent.
        let _ = self.tx.try_send(Some((call, report.to_line())));
    }

    /// Queues what became of the server; never blocks. Not a call: not counted among the
    /// unreported ones.
    fn send_server(&self, alias: &str, state: ServerState) {
        let line = Report::Server {
            alias: alias.to_string(),
            state,
        }
        .to_line();
        let _ = self.tx.try_send(Some((String::new(), line)));
    }

    /// Lets the queued reports leave (bounded wait) and returns how many calls have a report
    /// that never did: dropped, or still waiting at the deadline.
    fn finish(&self) -> usize {
        let deadline = Instant::now() + FLUSH_AT_EXIT;
        // Queue the end marker behind the reports, waiting for room until the deadline.
        let queued = loop {
            match self.tx.try_send(None) {
                Ok(()) => break true,
                Err(TrySendError::Full(_)) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(_) => break false,
            }
        };
        if queued {
            let done = self.done.lock().unwrap_or_else(|e| e.into_inner());
            let _ = done.recv_timeout(deadline.saturating_duration_since(Instant::now()));
        }
        self.counts.unsent_calls()
    }
}

/// Per call (by its interval id), how many of its reports have not reached the socket: the
/// user is told about calls, not about the two reports (start, end) each call makes.
#[derive(Default)]
struct Counts {
    unsent: Mutex<std::collections::HashMap<String, u32>>,
}

impl Counts {
    fn queued(&self, call: &str) {
        let mut unsent = self.unsent.lock().unwrap_or_else(|e| e.into_inner());
        *unsent.entry(call.to_string()).or_default() += 1;
    }

    fn sent(&self, call: &str) {
        let mut unsent = self.unsent.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = unsent.get_mut(call) {
            *n -= 1;
            if *n == 0 {
                unsent.remove(call);
            }
        }
    }

    fn unsent_calls(&self) -> usize {
        self.unsent.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// The connection to the relay, made and remade lazily.
struct Link {
    /// Where to look, in order: the one path given, or the default candidates.
    paths: Vec<PathBuf>,
    /// Whether the paths are the default candidates, whose directories must be private.
    check_dirs: bool,
    conn: Option<UnixStream>,
    last_try: Option<Instant>,
    warned: bool,
    /// The server's alias, when where its reports go is to be said.
    tell: Option<String>,
    /// The socket and relay pid last said, so that a reconnection to the same relay is quiet.
    told: Option<(PathBuf, Option<u32>)>,
}

impl Link {
    /// Sends one line; false if it had to be dropped.
    fn send(&mut self, line: &[u8]) -> bool {
        if self.conn.is_none() && self.last_try.is_none_or(|t| t.elapsed() >= RETRY) {
            self.connect();
        }
        let Some(conn) = &mut self.conn else {
            return false;
        };
        match conn.write_all(line) {
            Ok(()) => true,
            Err(e) => {
                self.conn = None;
                self.last_try = Some(Instant::now());
                self.warn(&e);
                false
            }
        }
    }

    /// Tries each path once; says which relay it reached, or warns once why none.
    fn connect(&mut self) {
        self.last_try = Some(Instant::now());
        let mut failure = None;
        let mut refused = None;
        let mut reached = None;
        for path in &self.paths {
            match ingest::connect_verified(path, self.check_dirs) {
                Ok(s) => {
                    let _ = s.set_write_timeout(Some(WRITE_TIMEOUT));
                    reached = Some((path.clone(), ingest::peer_pid(&s)));
                    self.conn = Some(s);
                    break;
                }
                Err(ingest::ConnectError::Untrusted(why)) => {
                    refused = refused.or(Some((path.clone(), why)));
                }
                Err(ingest::ConnectError::Io(e)) => failure = failure.or(Some(e)),
            }
        }
        if let Some((path, pid)) = reached {
            self.tell(&path, pid);
        } else if let Some((path, why)) = refused {
            self.refuse(&path, &why);
        } else if let Some(e) = failure {
            self.warn(&e);
        }
    }

    /// Says which relay the reports go to: two relays of one user each have a socket, and a
    /// wrapper that found the wrong one would otherwise lose every call without a word.
    fn tell(&mut self, path: &std::path::Path, pid: Option<u32>) {
        let Some(alias) = &self.tell else { return };
        let now = (path.to_path_buf(), pid);
        if self.told.as_ref() == Some(&now) {
            return;
        }
        let relay = match pid {
            Some(pid) => format!("the relay with pid {pid}"),
            None => "the relay".to_string(),
        };
        eprintln!(
            "windowtap wrap: `{}` reports its calls to {relay} through its ingest socket {} (--ingest or {} to choose another)",
            alias,
            path.display(),
            ingest::ENV
        );
        self.told = Some(now);
    }

    /// Says once that a socket was refused: reports must not go where another user may read
    /// them.
    fn refuse(&mut self, path: &std::path::Path, why: &ingest::Untrusted) {
        if !self.warned {
            self.warned = true;
            eprintln!(
                "windowtap wrap: warning: refusing the ingest socket at {}: {why}; another user may be listening there, so no interval reports are sent to it. Start the relay with --ingest PATH in a directory only you can use and give the wrapper the same path (--ingest or {})",
                path.display(),
                ingest::ENV
            );
        }
    }

    fn warn(&mut self, e: &io::Error) {
        if !self.warned {
            self.warned = true;
            let paths: Vec<String> = self.paths.iter().map(|p| p.display().to_string()).collect();
            eprintln!(
                "windowtap wrap: warning: relay ingest socket unavailable at {} ({e}); the MCP session goes on, interval reports are dropped until it is back (set --ingest or {})",
                paths.join(" or "),
                ingest::ENV
            );
        }
    }
}

/// SIGINT and SIGTERM: what the host may send the server through us.
const FORWARDED: [i32; 2] = [Signal::INT.as_raw(), Signal::TERM.as_raw()];

/// Starts a thread that passes each signal of `signals` (blocked in every thread) on to
/// `pid` while it has not been reaped.
fn forward_signals(signals: SignalSet, pid: Pid, reaped: Arc<Mutex<bool>>) {
    let spawned = std::thread::Builder::new()
        .name("wrap-signals".into())
        .spawn(move || loop {
            let Some(sig) = signals.wait().and_then(Signal::from_named_raw) else {
                continue;
            };
            let r = reaped.lock().unwrap_or_else(|e| e.into_inner());
            if !*r {
                // pid is our unreaped child, so it cannot have been reused.
                let _ = rustix::process::kill_process(pid, sig);
            }
        });
    if spawned.is_err() {
        eprintln!("windowtap wrap: warning: cannot start the signal thread; SIGINT/SIGTERM will not reach the server");
    }
}

/// Waits until `pid` has exited, leaving it unreaped.
fn wait_exited(pid: Pid) {
    use rustix::process::{waitid, WaitId, WaitIdOptions};
    while let Err(rustix::io::Errno::INTR) = waitid(
        WaitId::Pid(pid),
        WaitIdOptions::EXITED | WaitIdOptions::NOWAIT,
    ) {}
}
