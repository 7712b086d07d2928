//! The ingest socket: where wrappers report MCP intervals to the relay (docs/design.md §1, §4).
//!
//! A Unix domain socket (mode 0600) carrying JSON Lines from each wrapper to the relay, one
//! report per line, never anything back. Protocol version 1 (also in `docs/ingest.md`):
//!
//! ```text
//! {"v":1,"type":"start","id":"w4242-9f1c2a7e-1","alias":"probe","tool":"echo","start_ns":81234567890,
//!  "tool_use_id":"toolu_01","item_id":null,"call_id":null,"thread":null}
//! {"v":1,"type":"end","id":"w4242-9f1c2a7e-1","alias":"probe","tool":"echo","start_ns":81234567890,
//!  "end_ns":81299999999,"outcome":"result","tool_use_id":"toolu_01","item_id":null,"call_id":null,"thread":null}
//! ```
//!
//! - `id`: the interval id, unique across wrappers (the wrapper's pid, a random word fixed at its
//!   start, and a counter), at most 128 bytes.
//! - `start_ns`, `end_ns`: readings of CLOCK_MONOTONIC (`sys::clock::mono_ns`), which the
//!   relay shares; `start_ns` is when the `tools/call` line was written to the server, `end_ns`
//!   when its answer was read back (or the cancellation passed, or the server went away).
//! - `outcome`: `result`, `error`, `cancelled` or `lost`.
//! - hints (`tool_use_id`, `item_id`, `call_id`, `thread`): strings or null, optional on `start`
//!   (the relay uses them if the wrapper vanishes before the end).
//! - Unknown extra fields are ignored, so later minor additions stay readable.
//!
//! The relay turns `start` into `mcp_start` and `end` into `mcp_interval`, with times converted
//! by [`Clock::ms_at`] and the event's `t` the relay's clock when the line arrived. When a
//! wrapper's connection drops, each of its calls that started and did not end becomes an
//! `mcp_interval` with outcome `lost`, ending then; so does each call still running when the
//! relay closes the socket at its stop (after the drain: reports are taken until then). A bad
//! line is counted and logged by its fault
//! (never its content) and the connection goes on.

use std::collections::HashMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
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

// The line protocol itself is sans-IO and lives in the correlator, where it can be fuzzed.
pub use correlator::ingest::{Fault, Report, RoundsNs, MAX_LINE};

/// The environment variable naming the socket for wrappers.
pub const ENV: &str = "WINDOWTAP_INGEST";
/// Most intervals one connection may have running (a wrapper tracks at most 65,536 itself).
const MAX_RUNNING: usize = 65_536;
/// On [`IngestHandle::close`], how long each connection may still take to hand over lines
/// its wrapper had already written.
const CLOSE_READ: std::time::Duration = std::time::Duration::from_millis(50);

/// Where the relay listens and wrappers look when not told: `$XDG_RUNTIME_DIR/windowtap/
/// ingest.sock`, else `<tmp>/windowtap-<uid>/ingest.sock`. The directory is private (0700).
pub fn default_path() -> PathBuf {
    let dir = match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("windowtap"),
        _ => {
            let uid = my_uid();
            std::env::temp_dir().join(format!("windowtap-{uid}"))
        }
    };
    dir.join("ingest.sock")
}

/// Where a wrapper that was given no path looks, in order. Hosts may not pass the user's
/// environment on to MCP servers (Codex forwards only a short list of variables unless told
/// otherwise), so besides [`default_path`] the wrapper also tries where `$XDG_RUNTIME_DIR`
/// usually points and the temp-dir fallback, whatever its own environment says.
pub fn wrapper_candidates() -> Vec<PathBuf> {
    let uid = my_uid();
    let mut paths = vec![
        default_path(),
        PathBuf::from(format!("/run/user/{uid}/windowtap/ingest.sock")),
        std::env::temp_dir()
            .join(format!("windowtap-{uid}"))
            .join("ingest.sock"),
        PathBuf::from(format!("/tmp/windowtap-{uid}/ingest.sock")),
    ];
    let mut seen = std::collections::HashSet::new();
    paths.retain(|p| seen.insert(p.clone()));
    paths
}

/// Creates the default path's directory (0700) if needed and checks nobody else can use it.
pub fn prepare_private_dir(dir: &Path) -> anyhow::Result<()> {
    match std::fs::create_dir(dir) {
        Ok(()) => {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .with_context(|| format!("setting mode 0700 on {}", dir.display()))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("creating {}", dir.display())),
    }
    if let Err(why) = private_dir(dir) {
        bail!(
            "refusing to put the ingest socket in {}: {why}. Another user may have created it \
             first to receive the wrappers' reports. Choose another place with --ingest PATH \
             (or {ENV}=PATH, for the wrappers too) in a directory only you can use, or remove \
             it if it is yours",
            dir.display()
        );
    }
    Ok(())
}

/// Why an ingest socket is not trusted: someone other than this user could be listening on
/// it. Says which check failed, never anything read from the socket.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Untrusted {
    #[error("it is not a directory")]
    NotDir,
    #[error("it is owned by uid {owner}, not by this user")]
    DirOwner { owner: u32 },
    #[error("other users may use it (mode {mode:04o}; it must be 0700)")]
    DirMode { mode: u32 },
    #[error("it is not a socket")]
    NotSocket,
    #[error("the socket is owned by uid {owner}, not by this user")]
    SocketOwner { owner: u32 },
    #[error("the process listening on it runs as uid {peer}, not as this user")]
    PeerUid { peer: u32 },
}

fn my_uid() -> u32 {
    rustix::process::getuid().as_raw()
}

/// Checks that `dir` is a directory of this user's that nobody else may use (0700).
fn private_dir(dir: &Path) -> Result<(), Untrusted> {
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return Err(Untrusted::NotDir);
    };
    if !meta.is_dir() {
        return Err(Untrusted::NotDir);
    }
    if meta.uid() != my_uid() {
        return Err(Untrusted::DirOwner { owner: meta.uid() });
    }
    if meta.mode() & 0o077 != 0 {
        return Err(Untrusted::DirMode {
            mode: meta.mode() & 0o7777,
        });
    }
    Ok(())
}

/// Why a wrapper could not use an ingest socket.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Untrusted(Untrusted),
}

/// Connects a wrapper to the ingest socket at `path` once it is sure only this user can be
/// listening there: the socket is owned by this user and, once connected, the listening
/// process runs as this user (`SO_PEERCRED`, which no file trick can fake). `check_dir` also
/// holds the socket's directory to what the relay makes for its default path (this user's,
/// 0700): for the places a wrapper looks on its own, where another user may have been first.
pub fn connect_verified(
    path: &Path,
    check_dir: bool,
) -> Result<std::os::unix::net::UnixStream, ConnectError> {
    let untrusted = ConnectError::Untrusted;
    let meta = std::fs::symlink_metadata(path)?;
    if check_dir {
        if let Some(dir) = path.parent() {
            private_dir(dir).map_err(untrusted)?;
        }
    }
    if !meta.file_type().is_socket() {
        return Err(untrusted(Untrusted::NotSocket));
    }
    if meta.uid() != my_uid() {
        return Err(untrusted(Untrusted::SocketOwner { owner: meta.uid() }));
    }
    let stream = std::os::unix::net::UnixStream::connect(path)?;
    let peer = peer_uid(&stream)?;
    if peer != my_uid() {
        return Err(untrusted(Untrusted::PeerUid { peer }));
    }
    Ok(stream)
}

/// The uid of the process at the other end of a connected Unix socket.
fn peer_uid(s: &std::os::unix::net::UnixStream) -> std::io::Result<u32> {
    peer_cred(s).map(|c| c.uid.as_raw())
}

/// The pid of the process at the other end of a connected Unix socket (the relay, for a
/// wrapper), as the kernel says.
pub fn peer_pid(s: &std::os::unix::net::UnixStream) -> Option<u32> {
    peer_cred(s)
        .ok()
        .map(|c| c.pid.as_raw_nonzero().get() as u32)
}

/// The peer credentials (`SO_PEERCRED`) of a connected Unix socket.
fn peer_cred(s: &std::os::unix::net::UnixStream) -> std::io::Result<rustix::net::UCred> {
    Ok(rustix::net::sockopt::socket_peercred(s)?)
}

/// The path to listen on: `explicit` as given, else [`default_path`] with its private
/// directory created and checked. For the relay's `--ingest` option.
pub fn listen_path(explicit: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(p) = explicit {
        return Ok(p);
    }
    let p = default_path();
    if let Some(dir) = p.parent() {
        prepare_private_dir(dir)?;
    }
    Ok(p)
}

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
struct Shared {
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

impl Shared {
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
    let shared = Arc::new(Shared {
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

async fn connection(stream: UnixStream, shared: Arc<Shared>, mut closed: watch::Receiver<bool>) {
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
        };
        shared.emit(end, kind).await;
    }
    shared.counters.open.fetch_sub(1, Ordering::SeqCst);
}

fn bad_line(shared: &Shared, fault: &Fault) {
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
    shared: &Shared,
) -> Result<(), Fault> {
    let report = Report::parse(line)?;
    let now_ns = mono_ns();
    // Both ends read the same monotonic clock, so a reading from the future is a broken
    // wrapper; stamping it would push `t` ahead and every later event would go backwards.
    let latest = match &report {
        Report::Start { start_ns, .. } => *start_ns,
        Report::End { end_ns, .. } => *end_ns,
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
            };
            shared.emit(end, kind).await;
        }
    }
    Ok(())
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

/// `windowtap ingest`: listen and print what arrives as trace v1, for testing wrappers without
/// a relay.
#[derive(clap::Args)]
pub struct IngestArgs {
    /// Socket path [default: $XDG_RUNTIME_DIR/windowtap/ingest.sock or a private temp dir].
    #[arg(long, value_name = "PATH")]
    pub ingest: Option<PathBuf>,
    /// A file holding the 64-hex-digit pseudonymization key (default: a random key per run).
    /// Ids are printed as pseudonyms like everywhere else (docs/design.md §7), never raw.
    #[arg(long, value_name = "FILE")]
    pub id_key_file: Option<PathBuf>,
}

pub fn main(args: IngestArgs) -> anyhow::Result<std::process::ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(harness(args))
}

async fn harness(args: IngestArgs) -> anyhow::Result<std::process::ExitCode> {
    use correlator::sanitize::{Door, Scrub};
    use std::io::Write;
    use tokio::signal::unix::{signal, SignalKind};

    let key = match &args.id_key_file {
        Some(p) => crate::relay::read_key(p)?,
        None => rand::random::<[u8; correlator::PSEUDONYM_KEY_LEN]>(),
    };
    let scrub = Scrub::new(correlator::Pseudonymizer::new(&key));
    let door = Door::live();
    let path = listen_path(args.ingest)?;
    // Handlers first: whoever reads "listening" may signal at once.
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let clock = Clock::start();
    let (tx, mut rx) = mpsc::channel(1024);
    let handle = serve(path, clock, tx, hostid::Hosts::start()).await?;
    let mut out = sys::stdout::stdout();
    out.write_all(door.meta(correlator::trace::HEADER)?.as_bytes())?;
    out.flush()?;
    eprintln!("windowtap ingest: listening on {}", handle.path().display());
    let mut print = |t, kind| -> anyhow::Result<()> {
        let kind = scrub.event(kind);
        let line = door.event(&correlator::Event { t, kind })?;
        out.write_all(line.as_bytes())?;
        Ok(out.flush()?)
    };
    loop {
        tokio::select! {
            biased;
            Some((t, kind)) = rx.recv() => print(t, kind)?,
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    // Let connections that are still open finish what they were saying (bounded).
    let c = handle.counters();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
    while c.open.load(Ordering::SeqCst) > 0 && tokio::time::Instant::now() < deadline {
        let wait = std::time::Duration::from_millis(20);
        if let Ok(Some((t, kind))) = tokio::time::timeout(wait, rx.recv()).await {
            print(t, kind)?;
        }
    }
    while let Ok((t, kind)) = rx.try_recv() {
        print(t, kind)?;
    }
    eprintln!(
        "windowtap ingest: {} connections, {} reports accepted, {} bad lines, {} lost",
        c.connections.load(Ordering::Relaxed),
        c.accepted.load(Ordering::Relaxed),
        c.bad_lines.load(Ordering::Relaxed),
        c.lost.load(Ordering::Relaxed),
    );
    Ok(std::process::ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::AsyncWriteExt;

    fn hints(tool_use_id: Option<&str>) -> Hints {
        Hints {
            tool_use_id: tool_use_id.map(Into::into),
            ..Hints::default()
        }
    }

    /// A start report of tool `t` on alias `a`, with a `tool_use_id` hint.
    fn start_report(id: &str, start_ns: u64, tool_use_id: &str) -> Report {
        Report::Start {
            id: id.into(),
            alias: "a".into(),
            tool: "t".into(),
            start_ns,
            hints: hints(Some(tool_use_id)),
        }
    }

    #[test]
    fn a_wrapper_without_a_path_looks_where_a_relay_may_listen() {
        let paths = wrapper_candidates();
        assert_eq!(paths[0], default_path());
        let uid = rustix::process::getuid().as_raw();
        assert!(paths.contains(&PathBuf::from(format!(
            "/run/user/{uid}/windowtap/ingest.sock"
        ))));
        assert!(paths.contains(&PathBuf::from(format!("/tmp/windowtap-{uid}/ingest.sock"))));
        let unique: std::collections::HashSet<_> = paths.iter().collect();
        assert_eq!(unique.len(), paths.len());
    }

    /// A listener on a fresh socket, its events, and its directory (kept alive).
    async fn listener() -> (
        IngestHandle,
        mpsc::Receiver<(Millis, EventKind)>,
        tempfile::TempDir,
        Clock,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let clock = Clock::start();
        let (tx, rx) = mpsc::channel(64);
        let handle = serve(dir.path().join("ingest.sock"), clock, tx, Hosts::start())
            .await
            .unwrap();
        (handle, rx, dir, clock)
    }

    async fn next(rx: &mut mpsc::Receiver<(Millis, EventKind)>) -> (Millis, EventKind) {
        tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("an event in time")
            .expect("open")
    }

    #[tokio::test]
    async fn starts_and_ends_become_events_stamped_on_arrival() {
        let (handle, mut rx, _dir, clock) = listener().await;
        let mode = std::fs::metadata(handle.path()).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let mut conn = UnixStream::connect(handle.path()).await.unwrap();
        let s = mono_ns();
        let e = s + 1_000;
        let start = Report::Start {
            id: "i1".into(),
            alias: "a".into(),
            tool: "t".into(),
            start_ns: s,
            hints: hints(None),
        };
        let end = Report::End {
            rounds: None,
            id: "i1".into(),
            alias: "a".into(),
            tool: "t".into(),
            start_ns: s,
            end_ns: e,
            outcome: Outcome::Error,
            hints: hints(Some("toolu_9")),
        };
        // Wait until the end's reading is in the past, so it is not refused as from the future.
        while mono_ns() <= e {
            tokio::task::yield_now().await;
        }
        conn.write_all(format!("{}{}", start.to_line(), end.to_line()).as_bytes())
            .await
            .unwrap();
        let (t1, k1) = next(&mut rx).await;
        assert_eq!(
            k1,
            EventKind::McpStart {
                interval: "i1".into(),
                alias: "a".into(),
                tool: "t".into(),
                start: clock.ms_at(s),
                host: None,
            }
        );
        assert!(t1 >= clock.ms_at(s));
        let (t2, k2) = next(&mut rx).await;
        assert_eq!(
            k2,
            EventKind::McpInterval {
                rounds: None,
                interval: "i1".into(),
                alias: "a".into(),
                tool: "t".into(),
                start: clock.ms_at(s),
                end: clock.ms_at(e),
                outcome: Outcome::Error,
                hints: hints(Some("toolu_9")),
                host: None,
            }
        );
        assert!(t2 >= t1 && t2 >= clock.ms_at(e));
        assert_eq!(handle.counters().accepted.load(Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn a_dropped_wrapper_loses_its_running_calls_and_bad_lines_are_skipped() {
        let (handle, mut rx, _dir, clock) = listener().await;
        let mut conn = UnixStream::connect(handle.path()).await.unwrap();
        let s = mono_ns();
        let start = |id: &str| start_report(id, s, "toolu_2");
        let long = "x".repeat(MAX_LINE + 10);
        let future = Report::Start {
            id: "f".into(),
            alias: "a".into(),
            tool: "t".into(),
            start_ns: u64::MAX / 2,
            hints: hints(None),
        };
        let text = format!(
            "{}garbage\n{long}\n{}{}{}",
            start("i2").to_line(),
            start("i2").to_line(),
            future.to_line(),
            start("i3").to_line()
        );
        conn.write_all(text.as_bytes()).await.unwrap();
        let mut seen = Vec::new();
        for _ in 0..2 {
            seen.push(next(&mut rx).await.1);
        }
        assert!(matches!(&seen[1], EventKind::McpStart { interval, .. } if interval == "i3"));
        drop(conn);
        let mut lost = Vec::new();
        for _ in 0..2 {
            let (t, k) = next(&mut rx).await;
            match k {
                EventKind::McpInterval {
                    interval,
                    outcome,
                    hints: h,
                    start,
                    end,
                    ..
                } => {
                    assert_eq!(outcome, Outcome::Lost);
                    assert_eq!(h, hints(Some("toolu_2")));
                    assert_eq!(start, clock.ms_at(s));
                    assert!(end >= start && t >= end);
                    lost.push(interval);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        lost.sort();
        assert_eq!(lost, vec!["i2".to_string(), "i3".to_string()]);
        let c = handle.counters();
        assert_eq!(
            c.bad_lines.load(Ordering::Relaxed),
            4,
            "garbage, too long, duplicate, future"
        );
        assert_eq!(c.lost.load(Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn a_flood_of_bad_lines_makes_a_handful_of_warnings() {
        // Counted where the listener decides to write a warning, not through a tracing
        // subscriber: a thread-local subscriber in a test binary whose other tests reach the
        // same callsite without one misses events now and then (tracing's interest cache).
        let (handle, mut rx, _dir, _clock) = listener().await;
        let mut conn = UnixStream::connect(handle.path()).await.unwrap();
        let started = std::time::Instant::now();
        conn.write_all("not a report\n".repeat(100_000).as_bytes())
            .await
            .unwrap();
        let start = Report::Start {
            id: "after".into(),
            alias: "a".into(),
            tool: "t".into(),
            start_ns: mono_ns(),
            hints: hints(None),
        };
        conn.write_all(start.to_line().as_bytes()).await.unwrap();
        // Lines are taken in order: once this one is in, every bad line has been seen.
        assert!(matches!(next(&mut rx).await.1, EventKind::McpStart { .. }));
        assert!(handle.counters().bad_lines.load(Ordering::Relaxed) >= 100_000);
        let periods = started.elapsed().as_secs() / 5 + 1;
        let written = handle.counters().bad_line_warnings.load(Ordering::Relaxed);
        assert!(
            written <= 10 + periods,
            "{written} warnings for 100,000 bad lines"
        );
        assert!(written >= 1, "the first bad lines are still reported");
    }

    /// Root can hand files to another user; other users cannot, so these tests need root.
    fn root() -> bool {
        if my_uid() == 0 {
            return true;
        }
        eprintln!("SKIPPED: needs root to make files owned by another user");
        false
    }

    const NOBODY: u32 = 65534;

    fn chown(path: &Path, uid: u32) {
        std::os::unix::fs::chown(path, Some(uid), Some(uid)).unwrap();
    }

    fn chmod(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn untrusted(r: Result<std::os::unix::net::UnixStream, ConnectError>) -> Untrusted {
        match r {
            Err(ConnectError::Untrusted(u)) => u,
            Err(ConnectError::Io(e)) => panic!("an I/O error, not a refusal: {e}"),
            Ok(_) => panic!("connected to a socket it must refuse"),
        }
    }

    #[test]
    fn a_wrapper_connects_to_its_own_users_socket_in_a_private_directory() {
        let dir = tempfile::tempdir().unwrap();
        chmod(dir.path(), 0o700);
        let path = dir.path().join("ingest.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        assert!(connect_verified(&path, true).is_ok());
    }

    #[test]
    fn a_wrapper_refuses_a_default_directory_others_may_use_or_own() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ingest.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        chmod(dir.path(), 0o755);
        assert_eq!(
            untrusted(connect_verified(&path, true)),
            Untrusted::DirMode { mode: 0o755 }
        );
        // A path the user gave is not held to the default directory's rules.
        assert!(connect_verified(&path, false).is_ok());
        if !root() {
            return;
        }
        chmod(dir.path(), 0o700);
        chown(dir.path(), NOBODY);
        assert_eq!(
            untrusted(connect_verified(&path, true)),
            Untrusted::DirOwner { owner: NOBODY }
        );
        // The relay explains the squat and how to choose another place.
        let e = prepare_private_dir(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("owned by uid 65534") && e.contains("--ingest PATH"),
            "{e}"
        );
        assert!(e.contains(ENV), "{e}");
    }

    #[test]
    fn a_wrapper_refuses_a_socket_of_another_user() {
        if !root() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ingest.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        chown(&path, NOBODY);
        assert_eq!(
            untrusted(connect_verified(&path, false)),
            Untrusted::SocketOwner { owner: NOBODY }
        );
    }

    #[test]
    fn a_wrapper_refuses_a_listener_running_as_another_user() {
        use std::os::unix::process::CommandExt;
        if !root()
            || std::process::Command::new("python3")
                .arg("-V")
                .output()
                .is_err()
        {
            eprintln!("SKIPPED: needs root and python3");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        chmod(dir.path(), 0o777);
        let path = dir.path().join("ingest.sock");
        // Another user's listener; the socket file is then handed to us, so only the peer's
        // credentials can tell.
        let mut squatter = std::process::Command::new("python3")
            .args([
                "-c",
                "import socket,sys,time\ns=socket.socket(socket.AF_UNIX)\ns.bind(sys.argv[1])\ns.listen()\nprint('listening', flush=True)\ntime.sleep(30)",
            ])
            .arg(&path)
            .uid(NOBODY)
            .gid(NOBODY)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Only once it listens: the socket file exists from bind() on, and a connect between
        // bind() and listen() is refused (an I/O error, not the refusal under test).
        let mut ready = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(squatter.stdout.take().unwrap()),
            &mut ready,
        )
        .unwrap();
        assert_eq!(ready.trim(), "listening", "the listener never bound");
        chown(&path, my_uid());
        let got = connect_verified(&path, false);
        let _ = squatter.kill();
        let _ = squatter.wait();
        assert_eq!(untrusted(got), Untrusted::PeerUid { peer: NOBODY });
    }

    #[tokio::test]
    async fn closing_takes_lines_already_sent_then_ends_running_calls_lost() {
        let (handle, mut rx, _dir, clock) = listener().await;
        let path = handle.path().to_path_buf();
        let mut conn = UnixStream::connect(&path).await.unwrap();
        let s = mono_ns();
        let start = |id: &str| start_report(id, s, "toolu_3");
        conn.write_all(start("i1").to_line().as_bytes())
            .await
            .unwrap();
        assert!(matches!(next(&mut rx).await.1, EventKind::McpStart { .. }));
        // Written before the close and not yet read: still taken.
        let end = Report::End {
            rounds: None,
            id: "i1".into(),
            alias: "a".into(),
            tool: "t".into(),
            start_ns: s,
            end_ns: s + 1,
            outcome: Outcome::Result,
            hints: hints(Some("toolu_3")),
        };
        conn.write_all(format!("{}{}", end.to_line(), start("i2").to_line()).as_bytes())
            .await
            .unwrap();
        let before = clock.now_ms();
        handle.close().await;
        let mut got = Vec::new();
        while let Ok((t, k)) = rx.try_recv() {
            got.push((t, k));
        }
        let outcomes: Vec<(String, Outcome)> = got
            .iter()
            .filter_map(|(_, k)| match k {
                EventKind::McpInterval {
                    interval, outcome, ..
                } => Some((interval.clone(), *outcome)),
                _ => None,
            })
            .collect();
        assert_eq!(
            outcomes,
            vec![
                ("i1".to_string(), Outcome::Result),
                ("i2".to_string(), Outcome::Lost)
            ],
            "{got:?}"
        );
        assert!(got.last().unwrap().0 >= before, "lost at the close");
        assert!(!path.exists(), "the socket file is gone");
        // The wrapper's side sees the connection closed.
        let mut buf = [0u8; 1];
        let n = tokio::io::AsyncReadExt::read(&mut conn, &mut buf).await;
        assert!(matches!(n, Ok(0) | Err(_)));
    }

    #[tokio::test]
    async fn a_live_listener_is_not_displaced_and_a_stale_socket_is() {
        let (handle, _rx, dir, clock) = listener().await;
        let (tx, _rx2) = mpsc::channel(1);
        let err = serve(
            handle.path().to_path_buf(),
            clock,
            tx.clone(),
            Hosts::start(),
        )
        .await
        .err()
        .expect("refused");
        assert!(err.to_string().contains("already serving"), "{err}");
        // It says what to do about it.
        assert!(err.to_string().contains("--ingest PATH"), "{err}");
        assert!(err.to_string().contains("WINDOWTAP_INGEST=PATH"), "{err}");
        // A socket file nobody listens on any more.
        let stale = std::os::unix::net::UnixListener::bind(dir.path().join("stale.sock")).unwrap();
        drop(stale);
        let again = serve(
            dir.path().join("stale.sock"),
            clock,
            tx.clone(),
            Hosts::start(),
        )
        .await
        .unwrap();
        assert!(again.path().exists());
        drop(again);
        assert!(
            !dir.path().join("stale.sock").exists(),
            "dropping the handle removes the socket"
        );
        let file = dir.path().join("plain");
        std::fs::write(&file, b"").unwrap();
        assert!(serve(file, clock, tx, Hosts::start()).await.is_err());
        drop(handle);
    }
}
