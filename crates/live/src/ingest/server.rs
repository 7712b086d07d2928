//! The ingest server: accepts wrappers' connections on the socket, reads their report lines
//! and hands each report to the correlator as an event on the relay clock; the note beside
//! the socket that says which relay it belongs to.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use correlator::{EventKind, Millis, Rounds};
use correlator::{Hints, Outcome};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, watch, Mutex};
use tokio::task::JoinSet;

use hostid::{Hosts, ProcId};
use sys::clock::{mono_ns, Clock};
use sys::ratelimit::Repeated;

use correlator::ingest::{Fault, Report, ServerState, MAX_LINE};

use super::trust::{connect_verified, peer_pid, ENV};
/// Most intervals one connection may have running (a wrapper tracks at most 65,536 itself).
const MAX_RUNNING: usize = 65_536;
/// On [`IngestHandle::close`], how long each connection may still take to hand over lines
/// its wrapper had already written.
const CLOSE_READ: std::time::Duration = std::time::Duration::from_millis(50);

/// Counters of one ingest listener.
#[derive(Debug, Default)]
pub struct Counters {
    pub connections: AtomicU64,
    /// Connections open now (a connection counts until its last event has been sent).
    pub open: AtomicU64,
    /// Lines turned into events.
    pub accepted: AtomicU64,
    pub bad_lines: AtomicU64,
    /// Warnings about bad lines written to the log (the rest were rate-limited away).
    pub bad_line_warnings: AtomicU64,
    /// Intervals ended `lost` because their wrapper's connection dropped.
    pub lost: AtomicU64,
    /// What the wrappers said of their servers' starts.
    pub servers: std::sync::Mutex<ServersSeen>,
}

/// What wrappers said of their servers (`server` reports), by alias as reported: which
/// started, and which never ran and why. The stop names the failures, so that a server that
/// could not start is not a silent zero (issue 40).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ServersSeen {
    /// Aliases whose server started, with how many wrappers said so.
    pub started: BTreeMap<String, u32>,
    /// Aliases whose server never ran: what the last wrapper to fail said, and how many did.
    pub failed: BTreeMap<String, (ServerState, u32)>,
}

impl ServersSeen {
    fn note(&mut self, alias: String, state: ServerState) {
        match state {
            ServerState::Started => *self.started.entry(alias).or_default() += 1,
            failure => {
                let e = self.failed.entry(alias).or_insert((failure, 0));
                e.0 = failure;
                e.1 += 1;
            }
        }
    }
}

/// A running listener. [`IngestHandle::close`] stops it the orderly way; dropping it stops
/// listening at once (connections cut, nothing more sent) and removes the socket file.
pub struct IngestHandle {
    path: PathBuf,
    counters: Arc<Counters>,
    /// Turned `true` by [`IngestHandle::close`].
    closing: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl IngestHandle {
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// What the wrappers have said of their servers so far.
    pub fn servers(&self) -> ServersSeen {
        self.counters
            .servers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Stops listening and ends every connection: lines already sent are still taken (for
    /// up to [`CLOSE_READ`]), then each call still running ends `lost`, now (docs/design.md §4:
    /// no call that started is ever missing). Returns once every connection has sent its
    /// last event, so the caller may stop the receiver then.
    pub async fn close(mut self) {
        let lost = self.counters.lost.load(Ordering::Relaxed);
        self.closing.send_replace(true);
        let _ = (&mut self.task).await;
        let ended = self.counters.lost.load(Ordering::Relaxed) - lost;
        if ended > 0 {
            tracing::info!(
                calls = ended,
                "ingest closed: calls still running ended lost"
            );
        }
        // Dropping `self` removes the socket file.
    }
}

impl Drop for IngestHandle {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_file(note_path(&self.path));
    }
}

/// The note beside a relay's ingest socket (`<socket>.relay`) saying which relay listens on
/// it: `windowtap env` reads it so that the URL and the socket it prints belong to one relay
/// (two relays of one user each have their own).
pub fn note_path(socket: &Path) -> PathBuf {
    let mut name = socket.as_os_str().to_owned();
    name.push(".relay");
    PathBuf::from(name)
}

/// What the note says: the relay's pid and listen address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RelayNote {
    pub pid: u32,
    pub listen: std::net::SocketAddr,
}

/// Writes the note for the relay listening on `listen` (0600: its own user's business). Its
/// removal goes with the socket's, when the [`IngestHandle`] is dropped.
pub fn write_note(socket: &Path, listen: std::net::SocketAddr) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let note = RelayNote {
        pid: std::process::id(),
        listen,
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(note_path(socket))?;
    f.write_all(
        format!(
            "{}\n",
            serde_json::to_string(&note).map_err(std::io::Error::other)?
        )
        .as_bytes(),
    )
}

/// Who listens on an ingest socket, as far as can be known.
#[derive(Debug)]
pub enum SocketOwner {
    /// A relay whose note agrees with the kernel about its pid.
    Relay(RelayNote),
    /// Nobody can be reached there (no socket, nothing listening, or not to be trusted).
    Unreachable(String),
    /// Something of this user's listens, but no note says which relay it is (a note missing,
    /// or left by another process: a `windowtap run`, or an older windowtap).
    Unknown { pid: Option<u32> },
}

/// Asks who listens on `socket`: connects (as a wrapper would, verifying it is this user's;
/// `check_dir` for a default place) and holds the note's pid against the peer's.
pub fn socket_owner(socket: &Path, check_dir: bool) -> SocketOwner {
    let stream = match connect_verified(socket, check_dir) {
        Ok(s) => s,
        Err(e) => return SocketOwner::Unreachable(e.to_string()),
    };
    let pid = peer_pid(&stream);
    drop(stream);
    let note = std::fs::read_to_string(note_path(socket))
        .ok()
        .and_then(|t| serde_json::from_str::<RelayNote>(t.trim()).ok());
    match note {
        Some(n) if Some(n.pid) == pid => SocketOwner::Relay(n),
        _ => SocketOwner::Unknown { pid },
    }
}

/// What every connection shares: the clock, the output, and a lock that makes stamping and
/// sending one step, so events leave in the order of their `t` across connections.
struct Intake {
    clock: Clock,
    tx: mpsc::Sender<(Millis, EventKind)>,
    counters: Arc<Counters>,
    order: Mutex<()>,
    hosts: Hosts,
    /// Bad lines can come as fast as a wrapper writes them: the first few are logged, then
    /// one every few seconds with the count left out (every one is still counted). One per
    /// listener, so one listener's flood never silences another's first warning.
    bad_line_log: Repeated,
}

impl Intake {
    /// Stamps the event with the relay clock now (never before `not_before`) and sends it.
    async fn emit(&self, not_before: Millis, kind: EventKind) {
        let _order = self.order.lock().await;
        let t = self.clock.now_ms().max(not_before);
        // A closed receiver means the relay is shutting down; nothing left to tell.
        let _ = self.tx.send((t, kind)).await;
    }
}

/// Listens on `path` (mode 0600) and sends `mcp_start` / `mcp_interval` events to `tx`, each
/// with its `t`. Refuses a path held by a live listener or by something that is not a socket;
/// replaces a stale socket file. Call it inside a Tokio runtime; the listener runs on it until
/// the handle is dropped.
///
/// Events leave in the order of their `t`, but `t` is read when a line arrives: a caller that
/// merges them with other events should merge by arrival, not re-sort.
///
/// Each call's host is found through `hosts` from the wrapper's pid as the kernel gives it
/// (the socket's peer credentials), never from what the wrapper says.
pub async fn serve(
    path: PathBuf,
    clock: Clock,
    tx: mpsc::Sender<(Millis, EventKind)>,
    hosts: Hosts,
) -> anyhow::Result<IngestHandle> {
    if let Ok(meta) = std::fs::symlink_metadata(&path) {
        if !meta.file_type().is_socket() {
            bail!("{} exists and is not a socket", path.display());
        }
        if UnixStream::connect(&path).await.is_ok() {
            bail!(
                "another listener is already serving {} (another windowtap relay?); to run \
                 this relay beside it, give it a socket of its own with --ingest PATH (or \
                 {ENV}=PATH) and start its wrappers with the same --ingest or {ENV}",
                path.display()
            );
        }
        std::fs::remove_file(&path)
            .with_context(|| format!("removing stale {}", path.display()))?;
    }
    let listener =
        UnixListener::bind(&path).with_context(|| format!("binding {}", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("setting mode 0600 on {}", path.display()))?;
    let counters = Arc::new(Counters::default());
    let shared = Arc::new(Intake {
        clock,
        tx,
        counters: counters.clone(),
        order: Mutex::new(()),
        hosts,
        bad_line_log: Repeated::new(10, Duration::from_secs(5)),
    });
    let (closing, mut closed) = watch::channel(false);
    let task = tokio::spawn(async move {
        // Connection tasks live in the set, so aborting this task ends them too.
        let mut conns = JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        shared.counters.connections.fetch_add(1, Ordering::Relaxed);
                        shared.counters.open.fetch_add(1, Ordering::SeqCst);
                        conns.spawn(connection(stream, shared.clone(), closed.clone()));
                    }
                    Err(e) => {
                        if let Some(left_out) = ACCEPT_FAILED_LOG.allow() {
                            tracing::warn!(error = %e, left_out, "ingest: accept failed");
                        }
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    }
                },
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
                // Closing (or the handle gone): every connection winds up, see below.
                _ = async { drop(closed.wait_for(|c| *c).await) } => break,
            }
        }
        drop(listener);
        while conns.join_next().await.is_some() {}
    });
    Ok(IngestHandle {
        path,
        counters,
        closing,
        task,
    })
}

static ACCEPT_FAILED_LOG: Repeated = Repeated::new(1, Duration::from_secs(10));

/// A call that started on this connection and has not ended.
struct Running {
    alias: String,
    tool: String,
    start_ns: u64,
    hints: Hints,
    /// Its host's raw id, found when it started.
    host: Option<String>,
}

/// The wrapper at the other end of one connection, as far as its host goes.
struct Wrapper {
    hosts: Hosts,
    /// Its ancestors, being read (from the connection's start, off this task).
    reading: Option<tokio::task::JoinHandle<Vec<ProcId>>>,
    ancestors: Vec<ProcId>,
}

impl Wrapper {
    fn new(stream: &UnixStream, hosts: &Hosts) -> Wrapper {
        // SO_PEERCRED: the kernel's word for who connected.
        let pid = stream
            .peer_cred()
            .ok()
            .and_then(|c| c.pid())
            .and_then(|p| u32::try_from(p).ok())
            .filter(|&p| p > 0);
        let reading = pid.map(|pid| {
            let hosts = hosts.clone();
            tokio::spawn(async move { hosts.ancestors(pid).await })
        });
        Wrapper {
            hosts: hosts.clone(),
            reading,
            ancestors: Vec::new(),
        }
    }

    /// The raw id of the host a call of this wrapper belongs to now (docs/design.md §3 "Host").
    async fn host(&mut self) -> Option<String> {
        if let Some(reading) = self.reading.take() {
            self.ancestors = reading.await.unwrap_or_default();
        }
        let host = self.hosts.call_host(&self.ancestors).await;
        host.map(|h| h.raw())
    }
}

async fn connection(stream: UnixStream, shared: Arc<Intake>, mut closed: watch::Receiver<bool>) {
    let mut wrapper = Wrapper::new(&stream, &shared.hosts);
    let mut lines = LineReader::new(stream);
    let mut running: HashMap<String, Running> = HashMap::new();
    // Until the listener closes, lines are taken as they come; once it closes, only for
    // `CLOSE_READ` more (what the wrapper had already written), then the connection ends.
    let mut close_by = None;
    loop {
        let read = match close_by {
            None => tokio::select! {
                biased;
                r = lines.next() => r,
                _ = async { drop(closed.wait_for(|c| *c).await) } => {
                    close_by = Some(tokio::time::Instant::now() + CLOSE_READ);
                    continue;
                }
            },
            Some(at) => match tokio::time::timeout_at(at, lines.next()).await {
                Ok(r) => r,
                Err(_) => break,
            },
        };
        match read {
            Ok(None) => break,
            Ok(Some(Ok(line))) => match accept(line, &mut running, &mut wrapper, &shared).await {
                Ok(()) => {
                    shared.counters.accepted.fetch_add(1, Ordering::Relaxed);
                }
                Err(fault) => bad_line(&shared, &fault),
            },
            Ok(Some(Err(fault))) => bad_line(&shared, &fault),
            Err(e) => {
                tracing::debug!(error = %e, "ingest: connection read failed");
                break;
            }
        }
    }
    // The wrapper went away, or the relay is stopping: whatever it had running ends here,
    // lost.
    let now_ns = mono_ns();
    let mut left: Vec<(String, Running)> = running.into_iter().collect();
    left.sort_by_key(|(_, r)| r.start_ns);
    for (id, r) in left {
        let start = shared.clock.ms_at(r.start_ns);
        let end = shared.clock.ms_at(now_ns).max(start);
        shared.counters.lost.fetch_add(1, Ordering::Relaxed);
        let kind = EventKind::McpInterval {
            rounds: None,
            interval: id,
            alias: r.alias,
            tool: r.tool,
            start,
            end,
            outcome: Outcome::Lost,
            hints: r.hints,
            host: r.host,
            transport: correlator::McpTransport::Stdio,
        };
        shared.emit(end, kind).await;
    }
    shared.counters.open.fetch_sub(1, Ordering::SeqCst);
}

fn bad_line(shared: &Intake, fault: &Fault) {
    shared.counters.bad_lines.fetch_add(1, Ordering::Relaxed);
    if let Some(left_out) = shared.bad_line_log.allow() {
        shared
            .counters
            .bad_line_warnings
            .fetch_add(1, Ordering::Relaxed);
        tracing::warn!(fault = %fault, left_out, "ingest: bad line skipped");
    }
}

async fn accept(
    line: &[u8],
    running: &mut HashMap<String, Running>,
    wrapper: &mut Wrapper,
    shared: &Intake,
) -> Result<(), Fault> {
    let report = Report::parse(line)?;
    let now_ns = mono_ns();
    // Both ends read the same monotonic clock, so a reading from the future is a broken
    // wrapper; stamping it would push `t` ahead and every later event would go backwards.
    let latest = match &report {
        Report::Start { start_ns, .. } => *start_ns,
        Report::End { end_ns, .. } => *end_ns,
        Report::Server { .. } => 0,
    };
    if latest > now_ns {
        return Err(Fault::Future);
    }
    let ms = |ns| shared.clock.ms_at(ns);
    match report {
        Report::Start {
            id,
            alias,
            tool,
            start_ns,
            hints,
        } => {
            if running.contains_key(&id) {
                return Err(Fault::DuplicateStart);
            }
            if running.len() >= MAX_RUNNING {
                return Err(Fault::TooManyRunning);
            }
            let host = wrapper.host().await;
            running.insert(
                id.clone(),
                Running {
                    alias: alias.clone(),
                    tool: tool.clone(),
                    start_ns,
                    hints,
                    host: host.clone(),
                },
            );
            let start = ms(start_ns);
            shared
                .emit(
                    start,
                    EventKind::McpStart {
                        interval: id,
                        alias,
                        tool,
                        start,
                        host,
                        transport: correlator::McpTransport::Stdio,
                    },
                )
                .await;
        }
        Report::End {
            id,
            alias,
            tool,
            start_ns,
            end_ns,
            outcome,
            hints,
            rounds,
        } => {
            // The host its start had; if that was not known, the host now (a nearer
            // ancestor may have made its first connection meanwhile).
            let host = match running.remove(&id).and_then(|r| r.host) {
                Some(h) => Some(h),
                None => wrapper.host().await,
            };
            let (start, end) = (ms(start_ns), ms(end_ns));
            // A duration on the wrapper's clock: only its length carries over, capped by the
            // interval's own (the two conversions may round apart).
            let rounds = rounds.map(|r| Rounds {
                rounds: r.rounds,
                input_wait: (r.input_wait_ns as f64 / 1e6).min(end - start),
                unanswered: r.unanswered,
            });
            let kind = EventKind::McpInterval {
                interval: id,
                alias,
                tool,
                start,
                end,
                outcome,
                hints,
                host,
                rounds,
                transport: correlator::McpTransport::Stdio,
            };
            shared.emit(end, kind).await;
        }
        Report::Server { alias, state } => {
            if state != ServerState::Started {
                // Said when it happens too, for the shared relay whose stop may be days away.
                tracing::warn!(
                    server = shown_alias(&alias),
                    error = %state,
                    "ingest: an MCP server under `windowtap wrap` never ran"
                );
            }
            shared
                .counters
                .servers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .note(alias, state);
        }
    }
    Ok(())
}

/// An alias as it may be written (docs/design.md §7): a name as the APIs allow one, else a
/// word that says it is not shown.
pub fn shown_alias(alias: &str) -> &str {
    if correlator::sanitize::is_tool_name(alias) {
        alias
    } else {
        "(a name not shown: not [A-Za-z0-9_.:-])"
    }
}

/// Reads a connection line by line. Cancel-safe: a read cut short (the stop's `select!`)
/// loses nothing, the next call goes on where it left off.
struct LineReader {
    reader: BufReader<UnixStream>,
    line: Vec<u8>,
    /// The line being read has passed [`MAX_LINE`]; its bytes are skipped to its end.
    too_long: bool,
    /// The last line returned, still in `line`: cleared on the next call.
    returned: bool,
}

impl LineReader {
    fn new(stream: UnixStream) -> Self {
        LineReader {
            reader: BufReader::new(stream),
            line: Vec::new(),
            too_long: false,
            returned: false,
        }
    }

    /// The next line (without `\n`): `None` at a clean end of the connection, a fault for an
    /// over-long or cut-off line. Never holds more than [`MAX_LINE`] bytes.
    async fn next(&mut self) -> std::io::Result<Option<Result<&[u8], Fault>>> {
        if self.returned {
            self.line.clear();
            self.too_long = false;
            self.returned = false;
        }
        loop {
            // The only await; everything after it runs to the next return or loop turn.
            let buf = self.reader.fill_buf().await?;
            if buf.is_empty() {
                self.returned = true;
                return Ok(if self.line.is_empty() && !self.too_long {
                    None
                } else {
                    Some(Err(Fault::Truncated))
                });
            }
            let (take, done) = match memchr_nl(buf) {
                Some(i) => (i, true),
                None => (buf.len(), false),
            };
            if !self.too_long && self.line.len() + take <= MAX_LINE {
                self.line.extend_from_slice(&buf[..take]);
            } else {
                self.too_long = true;
                self.line.clear();
            }
            self.reader.consume(take + usize::from(done));
            if done {
                self.returned = true;
                return Ok(Some(if self.too_long {
                    Err(Fault::TooLong)
                } else {
                    Ok(&self.line)
                }));
            }
        }
    }
}

fn memchr_nl(buf: &[u8]) -> Option<usize> {
    buf.iter().position(|&b| b == b'\n')
}
