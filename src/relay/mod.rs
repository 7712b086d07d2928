//! `windowtap relay`: the program Claude Code and Codex are pointed at.
//!
//! It forwards every byte to the real API and back, unchanged ([`http`], [`ws`]); observed
//! streams hand copies to observer tasks through taps ([`tap`], [`observer`]) whose events go
//! to the live correlator ([`crate::live`]). Nothing on the observation side can delay, alter
//! or break forwarding.

pub mod body;
pub mod cores;
pub mod http;
pub mod mounts;
pub mod observer;
pub mod tap;
pub mod upstream;
pub mod ws;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use correlator::pseudo::{Pseudonymizer, KEY_LEN};
use correlator::records::Summary;
use correlator::{Config, WindowOpen};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};

use crate::clock::Clock;
use crate::live::{self, LiveConfig, LiveHandle, Sinks, Timed};
use body::RelayBody;
use mounts::{Mount, Mounts};
use tap::Stall;

#[derive(clap::Args, Debug)]
#[command(after_help = "\
Examples:
  windowtap relay
  windowtap relay --records records.jsonl --capture trace.jsonl
  windowtap relay --upstream anthropic=https://gateway.example/anthropic")]
pub struct RelayArgs {
    /// Address to listen on, loopback only unless --allow-remote [default: 127.0.0.1:8787 for
    /// `relay`, an ephemeral loopback port for `run`].
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Allow a non-loopback --listen address.
    #[arg(long)]
    allow_remote: bool,
    /// Add or replace a mount: requests to /NAME/... go to URL/... (repeatable).
    #[arg(long = "upstream", value_name = "NAME=URL", value_parser = parse_mount)]
    upstreams: Vec<Mount>,
    /// A PEM file of extra root certificates to trust for upstream TLS.
    #[arg(long, value_name = "FILE")]
    upstream_ca: Option<PathBuf>,
    /// Write attribution records here instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub records: Option<PathBuf>,
    /// Write the sanitized trace v1 of this run here (replayable with `windowtap replay`).
    #[arg(long, value_name = "FILE")]
    capture: Option<PathBuf>,
    /// How long after an interval's end a still-open window is given up, in milliseconds.
    #[arg(long, default_value_t = 1000.0, value_name = "MS")]
    close_wait: f64,
    /// When a window opens for containment: at its first complete tool call or at its
    /// response's completion.
    #[arg(long, default_value = "call", value_name = "call|response", value_parser = parse_window_open)]
    window_open: WindowOpen,
    /// A window not closed this long after it opened becomes broken, in milliseconds.
    #[arg(long, default_value_t = 1_800_000.0, value_name = "MS")]
    max_window: f64,
    /// The Unix socket wrapped MCP servers report their calls on [default:
    /// $XDG_RUNTIME_DIR/windowtap/ingest.sock, else <tmp>/windowtap-<uid>/ingest.sock].
    #[arg(long, env = crate::ingest::ENV, value_name = "PATH")]
    ingest: Option<PathBuf>,
    /// A file holding the 64-hex-digit pseudonymization key (default: a random key per run).
    #[arg(long, value_name = "FILE")]
    id_key_file: Option<PathBuf>,
    /// Give up connecting to an upstream after this many milliseconds (answered with 504).
    #[arg(long, default_value_t = 10_000, value_name = "MS")]
    connect_timeout: u64,
    /// Give up waiting for an upstream's response head after this many milliseconds
    /// (answered with 504). Bodies may stream for as long as they take.
    #[arg(long, default_value_t = 300_000, value_name = "MS")]
    response_timeout: u64,
    /// On SIGINT/SIGTERM, how long requests and streams already in flight may take to end
    /// before they are cut, in milliseconds (a second signal stops at once).
    #[arg(long, default_value_t = 10_000, value_name = "MS")]
    drain: u64,
    /// Log level (overridden by RUST_LOG): error, warn, info, debug, trace.
    #[arg(long, default_value = "info", value_name = "LEVEL")]
    pub log: String,
    /// Copies queued per observed stream before it is marked observation_lost.
    #[arg(long, default_value_t = 1024, hide = true)]
    observer_queue: usize,
    /// How long an idle upstream connection is kept for reuse, in milliseconds.
    #[arg(long, default_value_t = 60_000, hide = true)]
    upstream_idle: u64,
    #[command(flatten)]
    pub otlp: crate::otlp::OtlpArgs,
    /// Test hook: observers take nothing up until their stream has ended.
    #[arg(long, hide = true)]
    test_stall_observers: bool,
}

fn parse_mount(s: &str) -> Result<Mount, String> {
    Mount::parse_arg(s).map_err(|e| e.to_string())
}

fn parse_window_open(s: &str) -> Result<WindowOpen, String> {
    WindowOpen::parse(s).ok_or_else(|| format!("`{s}` is not `call` or `response`"))
}

pub type UpstreamClient = Client<HttpsConnector<HttpConnector>, RelayBody<Incoming>>;

/// Everything a connection handler needs.
pub struct State {
    pub mounts: Mounts,
    /// For WebSocket handshakes (their connection is handed over to the splice).
    pub client: UpstreamClient,
    /// For everything else: connections the exchange drives itself ([`upstream`]).
    pub upstreams: Arc<upstream::Upstreams>,
    pub clock: Clock,
    pub live: Option<LiveHandle>,
    pub response_timeout: Duration,
    /// Spliced WebSocket tunnels in flight (the stop drains and cuts them).
    pub tunnels: Arc<Tunnels>,
    tap_settings: tap::Settings,
    next_stream: AtomicU64,
}

/// The spliced WebSocket tunnels in flight. Once upgraded, a tunnel has left its HTTP
/// connection (whose task has ended), so the drain cannot see it there: each tunnel task is
/// registered here instead, and the stop waits for them like for HTTP streams, up to the
/// same bound, then cuts them.
#[derive(Debug)]
pub struct Tunnels {
    open: Arc<AtomicUsize>,
    cut: watch::Sender<bool>,
}

impl Default for Tunnels {
    fn default() -> Self {
        Tunnels {
            open: Arc::default(),
            cut: watch::channel(false).0,
        }
    }
}

/// Counts one tunnel as open for as long as it lives.
struct TunnelGuard(Arc<AtomicUsize>);

impl Drop for TunnelGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Tunnels {
    /// Registers a tunnel now (before its task is spawned, so a stop that starts meanwhile
    /// sees it) and returns its task: `splice` until it ends or the tunnels are cut.
    pub fn track(
        &self,
        splice: impl std::future::Future<Output = ()>,
    ) -> impl std::future::Future<Output = ()> {
        self.open.fetch_add(1, Ordering::SeqCst);
        let guard = TunnelGuard(self.open.clone());
        let mut cut = self.cut.subscribe();
        async move {
            let _guard = guard;
            tokio::select! {
                _ = splice => {}
                // Dropping the splice closes both sockets.
                _ = async {
                    if cut.wait_for(|c| *c).await.is_err() {
                        // Nobody can cut any more: the tunnel runs to its own end.
                        std::future::pending::<()>().await;
                    }
                } => {}
            }
        }
    }

    /// Tunnels still open.
    pub fn len(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// Ends every tunnel, open or still to be registered.
    fn cut(&self) {
        self.cut.send_replace(true);
    }
}

impl State {
    /// Starts observing a stream: registers it with the watermark, opens its observer and
    /// returns the data path's tap (`None` when the run has no correlator).
    pub fn start_tap(
        &self,
        open: impl FnOnce(String, &mut Vec<correlator::EventKind>) -> Box<dyn tap::StreamObserver>,
    ) -> Option<tap::Tap> {
        let live = self.live.as_ref()?;
        let guard = live.sources.register(&self.clock);
        let t_open = self.clock.now_ms();
        let mut opening = Vec::new();
        let stream = self.next_stream();
        let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            open(stream.clone(), &mut opening)
        }));
        let Ok(observer) = opened else {
            // The stream goes unobserved; its registration ends with `guard` here.
            tracing::warn!("an observer failed to open; the stream is forwarded unobserved");
            return None;
        };
        let observer = Box::new(tap::Contained::new(stream, observer));
        Some(tap::start(
            guard,
            t_open,
            observer,
            opening,
            &self.tap_settings,
        ))
    }

    /// A fresh stream id (a per-run counter; it is pseudonymized like every id).
    pub fn next_stream(&self) -> String {
        format!("s{}", self.next_stream.fetch_add(1, Ordering::Relaxed) + 1)
    }
}

/// The upstream connector: rustls with the webpki roots plus `extra_roots`, HTTP/1.1.
pub fn upstream_connector(
    extra_roots: &[CertificateDer<'static>],
    connect_timeout: Duration,
) -> anyhow::Result<HttpsConnector<HttpConnector>> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for cert in extra_roots {
        roots
            .add(cert.clone())
            .context("adding a certificate from --upstream-ca")?;
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .context("setting up TLS")?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(connect_timeout));
    Ok(hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http))
}

/// The pooled upstream client over `connector` (WebSocket handshakes), idle connections
/// closed after `pool_idle`.
pub fn upstream_client(
    connector: HttpsConnector<HttpConnector>,
    pool_idle: Duration,
) -> UpstreamClient {
    Client::builder(TokioExecutor::new())
        .http1_preserve_header_case(true)
        .pool_idle_timeout(pool_idle)
        // Without a timer the pool never reaps idle connections (only on a later checkout),
        // so a burst of streams left as many upstream sockets open for good: the soak's
        // descriptors never came back down.
        .pool_timer(hyper_util::rt::TokioTimer::new())
        .build(connector)
}

fn read_roots(path: &PathBuf) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("{}: not a PEM certificate file: {e}", path.display()))?;
    if certs.is_empty() {
        bail!("{}: no certificate in this file", path.display());
    }
    Ok(certs)
}

pub(crate) fn read_key(path: &PathBuf) -> anyhow::Result<[u8; KEY_LEN]> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Pseudonymizer::key_from_hex(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// Creates `path` and keeps a second handle on it in `sync`, so that the file can be
/// fsynced once its writer (owned by the correlator task) has flushed its last line.
fn create_synced(path: &PathBuf, sync: &mut Vec<File>) -> anyhow::Result<File> {
    let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    sync.push(
        file.try_clone()
            .with_context(|| format!("opening {} for fsync", path.display()))?,
    );
    Ok(file)
}

fn open_sink(
    path: Option<&PathBuf>,
    sync: &mut Vec<File>,
) -> anyhow::Result<Box<dyn Write + Send>> {
    Ok(match path {
        Some(p) => Box::new(BufWriter::new(create_synced(p, sync)?)),
        None => Box::new(std::io::stdout()),
    })
}

/// The start-up message: where the relay listens and the exact overrides for each host.
pub fn banner(addr: SocketAddr, mounts: &Mounts) -> String {
    let base = format!("http://{addr}");
    let mut s = format!("windowtap relay listening on {base}\n");
    for m in mounts.iter() {
        s.push_str(&format!("  {m}\n"));
    }
    s.push_str(&format!(
        "Claude Code:           ANTHROPIC_BASE_URL={base}/anthropic claude\n\
         Codex (API key):       codex -c 'openai_base_url=\"{base}/openai/v1\"'\n\
         Codex (ChatGPT login): codex -c 'openai_base_url=\"{base}/chatgpt\"'\n"
    ));
    s
}

/// The relay's configuration and opened sinks from its options. `run` shares this, with its
/// own listen address, ingest socket and extra mounts (which win over `--upstream`).
pub fn relay_config(
    args: &RelayArgs,
    listen: SocketAddr,
    ingest: PathBuf,
    extra_mounts: &[Mount],
) -> anyhow::Result<(RelayConfig, Sinks)> {
    if !listen.ip().is_loopback() && !args.allow_remote {
        bail!(
            "--listen {listen} is not a loopback address; the relay carries credentials, so it \
             listens on loopback only unless --allow-remote is given"
        );
    }
    for (name, v) in [
        ("--close-wait", args.close_wait),
        ("--max-window", args.max_window),
    ] {
        if !v.is_finite() || v < 0.0 {
            bail!("{name} takes a number of milliseconds >= 0, got {v}");
        }
    }
    let extra_roots = match &args.upstream_ca {
        Some(p) => read_roots(p)?,
        None => Vec::new(),
    };
    let key = match &args.id_key_file {
        Some(p) => read_key(p)?,
        None => rand::random::<[u8; KEY_LEN]>(),
    };
    let mut sync = Vec::new();
    let sinks =
        Sinks {
            records: open_sink(args.records.as_ref(), &mut sync)?,
            capture: match &args.capture {
                Some(p) => Some(Box::new(BufWriter::new(create_synced(p, &mut sync)?))
                    as Box<dyn live::Capture>),
                None => None,
            },
        };
    let otlp = args.otlp.resolve()?;
    for w in &otlp.warnings {
        eprintln!("windowtap: warning: otlp: {w}");
    }
    let mut upstreams = args.upstreams.clone();
    upstreams.extend(extra_mounts.iter().cloned());
    let config = RelayConfig {
        listen,
        mounts: Mounts::with_overrides(&upstreams),
        extra_roots,
        connect_timeout: Duration::from_millis(args.connect_timeout),
        response_timeout: Duration::from_millis(args.response_timeout),
        upstream_idle: Duration::from_millis(args.upstream_idle),
        correlator: Config {
            close_wait: args.close_wait,
            window_open: args.window_open,
            max_window: args.max_window,
            ..Config::default()
        },
        key,
        ingest: Some(ingest),
        observer_queue: args.observer_queue,
        stall: Stall(args.test_stall_observers),
        otlp: otlp.config,
        drain: Duration::from_millis(args.drain),
        sync,
    };
    Ok((config, sinks))
}

pub fn main(args: RelayArgs) -> anyhow::Result<ExitCode> {
    init_logging(&args.log);
    raise_open_files_limit();
    let listen = args
        .listen
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 8787)));
    let ingest = crate::ingest::listen_path(args.ingest.clone())?;
    let (config, sinks) = relay_config(&args, listen, ingest, &[])?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let code = runtime.block_on(async move {
        let mut signals = Signals::install()?;
        let running = start(config, Clock::start(), sinks).await?;
        eprint!("{}", banner(running.addr, &running.mounts));
        if let Some(sock) = &running.ingest_socket {
            eprintln!(
                "MCP servers run under `windowtap wrap` report to {} ({}=<path> to change)",
                sock.path().display(),
                crate::ingest::ENV
            );
        }
        signals.next().await;
        let stopped = running.stop_with(signals.next()).await?;
        eprintln!("windowtap relay stopped: {}", stopped.summary);
        anyhow::Ok(match stopped.how {
            Drain::Drained | Drain::Cut => ExitCode::SUCCESS,
            Drain::AtOnce(signo) => ExitCode::from((128 + signo).clamp(0, 255) as u8),
        })
    })?;
    // Records and capture are flushed and fsynced: streams still open (cut at the bound or
    // by a second signal) must not hold the exit up.
    runtime.shutdown_background();
    Ok(code)
}

/// Everything a relay run needs, files already opened.
pub struct RelayConfig {
    pub listen: SocketAddr,
    pub mounts: Mounts,
    pub extra_roots: Vec<CertificateDer<'static>>,
    pub connect_timeout: Duration,
    pub response_timeout: Duration,
    /// How long an idle upstream connection is kept for reuse.
    pub upstream_idle: Duration,
    pub correlator: Config,
    /// The pseudonymization key.
    pub key: [u8; KEY_LEN],
    /// Where to listen for wrappers' MCP reports (none: reports only through
    /// [`Running::ingest`]).
    pub ingest: Option<PathBuf>,
    pub observer_queue: usize,
    pub stall: Stall,
    /// OTLP export of every record, when asked for.
    pub otlp: Option<crate::otlp::ExportConfig>,
    /// On stop, how long in-flight requests and streams may take to end.
    pub drain: Duration,
    /// Second handles on the record and capture files, fsynced on stop.
    pub sync: Vec<File>,
}

/// A running relay.
pub struct Running {
    /// The bound listen address.
    pub addr: SocketAddr,
    pub mounts: Mounts,
    /// Where MCP reports go (`McpStart` / `McpInterval`, times on the relay clock): the
    /// ingest socket sends here.
    #[allow(dead_code)] // for `windowtap run` and in-process callers
    pub ingest: mpsc::Sender<Timed>,
    /// The ingest socket's listener, when one was asked for; dropping it removes the socket.
    pub ingest_socket: Option<crate::ingest::IngestHandle>,
    stop_accepting: oneshot::Sender<()>,
    server: tokio::task::JoinHandle<()>,
    /// Set to `true` to have every connection finish its request in flight and close;
    /// closed once every connection task has ended.
    draining: watch::Sender<bool>,
    drain: Duration,
    sync: Vec<File>,
    /// Stops the correlator task, giving its records writer this long to get the last
    /// records out.
    stop_live: oneshot::Sender<Duration>,
    live: tokio::task::JoinHandle<std::io::Result<live::Finished>>,
    sources: Arc<live::Sources>,
    tunnels: Arc<Tunnels>,
    /// Whether the run writes a capture (records not written can be replayed from it).
    capture: bool,
    exporter: Option<crate::otlp::Exporter>,
    /// The runtimes client connections run on; dropped last, which cuts what still runs.
    _cores: cores::Cores,
}

/// How a stop went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drain {
    /// Everything in flight ended within the bound.
    Drained,
    /// Something was still in flight at the bound; it was cut.
    Cut,
    /// Stopped at once on this signal, without waiting for what was in flight.
    AtOnce(i32),
}

/// What [`Running::stop_with`] returns.
#[derive(Debug)]
pub struct Stopped {
    pub summary: Summary,
    pub how: Drain,
}

impl Running {
    /// Stops accepting, lets what is in flight end (up to the drain bound) while the ingest
    /// socket still takes MCP reports, then ends every MCP call still running `lost`,
    /// finishes the correlator (every pending interval decided), flushes and fsyncs the records and the
    /// capture, and returns the run's summary and how the drain went. When `at_once`
    /// completes (a second signal, yielding its number) the wait for in-flight streams ends
    /// there and then. The correlator is still finished and both files end on a complete
    /// line: every line is written whole by the correlator task (records by its writer
    /// thread), which is asked to stop rather than torn down mid-write.
    pub async fn stop_with(
        self,
        at_once: impl std::future::Future<Output = i32>,
    ) -> anyhow::Result<Stopped> {
        tokio::pin!(at_once);
        // The ingest socket stays open through the drain: calls that end meanwhile are
        // reported (design.md §4), it is closed below.
        let _ = self.stop_accepting.send(());
        // The listener is closed once the accept loop has returned: new connections are
        // refused from here on.
        let _ = self.server.await;
        // Idle keep-alive connections close now; ones with a request in flight after it.
        let _ = self.draining.send(true);
        let connections = self.draining.receiver_count();
        let streams = self.sources.len();
        let tunnels = self.tunnels.len();
        tracing::info!(
            connections,
            streams,
            tunnels,
            drain_ms = self.drain.as_millis() as u64,
            "draining: no new connections; a second signal stops at once"
        );
        let draining = &self.draining;
        let sources = &self.sources;
        let open_tunnels = &self.tunnels;
        let ended = async {
            draining.closed().await;
            // Observed streams deregister once their observer has sent its last events,
            // which may be a little after their connection ended; tunnels live on after
            // their connection's task.
            while sources.len() > 0 || open_tunnels.len() > 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        let how = tokio::select! {
            r = tokio::time::timeout(self.drain, ended) => match r {
                Ok(()) => Drain::Drained,
                Err(_) => Drain::Cut,
            },
            signo = &mut at_once => Drain::AtOnce(signo),
        };
        match how {
            Drain::Drained => {}
            Drain::Cut => tracing::warn!(
                connections = self.draining.receiver_count(),
                streams = self.sources.len(),
                tunnels = self.tunnels.len(),
                "still in flight after --drain: cut, and their remaining events not correlated"
            ),
            Drain::AtOnce(_) => tracing::warn!(
                connections = self.draining.receiver_count(),
                streams = self.sources.len(),
                tunnels = self.tunnels.len(),
                "second signal: stopping at once, in-flight streams cut"
            ),
        }
        // HTTP streams still open end with the runtime; tunnels are ended here, so that an
        // in-process caller (`run`) does not keep them either.
        self.tunnels.cut();
        // No new reports from here on: calls still running end `lost` now, and those events
        // reach the correlator before it finishes.
        if let Some(ingest) = self.ingest_socket {
            ingest.close().await;
        }
        // The records writer gets the drain bound to get the last records out: all of that
        // only when its output is not being read (a file or a live reader takes them at once).
        let _ = self.stop_live.send(self.drain);
        let finished = self
            .live
            .await
            .context("the correlator task failed")?
            .context("writing the capture")?;
        // The correlator task has flushed its last line and the records writer is done (or
        // blocked on an output nobody reads, which holds no file to sync).
        for f in &self.sync {
            f.sync_all().context("fsyncing records or capture")?;
        }
        let summary = finished.summary;
        let tail = finished.records;
        if tail.lost() > 0 {
            eprintln!(
                "windowtap: {} of {} records were not written ({} dropped while the output was \
                 not read, {} still waiting when the run stopped); {}",
                tail.lost(),
                summary.total(),
                tail.dropped,
                tail.unwritten,
                if self.capture {
                    "every event is in the capture: `windowtap replay` of it gives every record"
                } else {
                    "without --capture they are lost"
                }
            );
        }
        if let Some(e) = tail.error {
            return Err(anyhow::Error::new(e).context("writing records"));
        }
        // Every record has been handed to the exporter: flush it (bounded) and say how it went.
        // Not after a second signal, which asked for an exit at once.
        if let Some(exporter) = self.exporter {
            if matches!(how, Drain::AtOnce(_)) {
                eprintln!("windowtap: otlp: not flushed (stopped at once)");
            } else {
                let endpoint = exporter.endpoint().clone();
                let report = exporter.shutdown().await;
                eprintln!("{}", crate::otlp::report_line(&endpoint, &report));
            }
        }
        Ok(Stopped { summary, how })
    }
}

/// Binds the listener, starts the correlator task and starts accepting. `clock` is the
/// relay clock MCP report times must be on.
pub async fn start(config: RelayConfig, clock: Clock, sinks: Sinks) -> anyhow::Result<Running> {
    let connector = upstream_connector(&config.extra_roots, config.connect_timeout)?;
    let client = upstream_client(connector.clone(), config.upstream_idle);
    let upstreams = upstream::Upstreams::new(connector, config.upstream_idle);
    upstreams.spawn_sweeper();
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("listening on {}", config.listen))?;
    let addr = listener.local_addr()?;
    let (ingest, ingest_rx) = mpsc::channel::<Timed>(live::EVENT_QUEUE);
    let (stop_live, live_stopped) = oneshot::channel::<Duration>();
    let live_cfg = LiveConfig {
        correlator: config.correlator,
        pseudo: Pseudonymizer::new(&config.key),
        tick: Duration::from_millis(20),
        otlp: None,
    };
    let exporter = match config.otlp {
        Some(c) => Some(crate::otlp::Exporter::start(c).context("starting the OTLP exporter")?),
        None => None,
    };
    let live_cfg = LiveConfig {
        otlp: exporter.as_ref().map(|e| {
            (
                e.handle(),
                crate::otlp::clock_epoch_unix_nanos(clock.now_ms()),
            )
        }),
        ..live_cfg
    };
    let capture = sinks.capture.is_some();
    let (live, live_task) = live::spawn(live_cfg, clock, sinks, Some(ingest_rx), live_stopped)
        .context("writing the capture header")?;
    let sources = live.sources.clone();
    let tunnels = Arc::new(Tunnels::default());
    let state = Arc::new(State {
        mounts: config.mounts.clone(),
        client,
        upstreams,
        clock,
        tap_settings: tap::Settings {
            clock,
            queue: config.observer_queue,
            events: live.events.clone(),
            stall: config.stall,
        },
        live: Some(live),
        response_timeout: config.response_timeout,
        tunnels: tunnels.clone(),
        next_stream: AtomicU64::new(0),
    });
    let ingest_socket = match config.ingest {
        Some(path) => Some(crate::ingest::serve(path, clock, ingest.clone()).await?),
        None => None,
    };
    let (stop_accepting, stopped) = oneshot::channel::<()>();
    let (draining, drain_rx) = watch::channel(false);
    let cores = cores::Cores::start(cores::Cores::default_count())?;
    let server = tokio::spawn(serve(
        listener,
        state,
        async move {
            let _ = stopped.await;
        },
        drain_rx,
        cores.spawner(),
    ));
    Ok(Running {
        addr,
        mounts: config.mounts,
        ingest,
        ingest_socket,
        stop_accepting,
        server,
        draining,
        drain: config.drain,
        sync: config.sync,
        stop_live,
        live: live_task,
        sources,
        tunnels,
        capture,
        exporter,
        _cores: cores,
    })
}

/// Each relayed stream holds two sockets; the usual soft limit of 1024 descriptors would cap
/// the relay near 500 streams, so the soft limit is raised to the hard one.
pub fn raise_open_files_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                tracing::debug!("could not raise the open files limit");
            }
        }
    }
}

pub fn init_logging(level: &str) {
    crate::logging::init(level);
}

/// SIGINT and SIGTERM. The handlers are installed when this is made (before the banner is
/// printed), so a signal sent as soon as the banner appears is never fatal; kept for the
/// whole stop, so that a second signal is seen too.
pub(crate) struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl Signals {
    pub(crate) fn install() -> anyhow::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            int: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
            term: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
        })
    }

    /// The next SIGINT or SIGTERM, as its number.
    pub(crate) async fn next(&mut self) -> i32 {
        tokio::select! {
            _ = self.int.recv() => libc::SIGINT,
            _ = self.term.recv() => libc::SIGTERM,
        }
    }
}

/// Accepts connections until `shutdown` completes (the listener is closed on return). Each
/// connection task holds a clone of `drain`: once it turns `true` the connection finishes
/// the request in flight and closes, and the sender sees every clone dropped. Connections
/// run on `cores`.
pub async fn serve(
    listener: TcpListener,
    state: Arc<State>,
    shutdown: impl std::future::Future<Output = ()>,
    drain: watch::Receiver<bool>,
    cores: cores::Spawner,
) {
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            a = listener.accept() => a,
        };
        let (io, _) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = io.set_nodelay(true);
        // Off this runtime's reactor: the core registers it with its own.
        let Ok(io) = io.into_std() else { continue };
        let state = state.clone();
        let mut drain = drain.clone();
        cores.spawn(move || async move {
            let Ok(io) = tokio::net::TcpStream::from_std(io) else {
                return;
            };
            let service = hyper::service::service_fn(move |req| http::handle(state.clone(), req));
            let conn = hyper::server::conn::http1::Builder::new()
                .preserve_header_case(true)
                // The response head is the upstream's: no Date it did not send.
                .auto_date_header(false)
                .serve_connection(TokioIo::new(io), service)
                .with_upgrades();
            tokio::pin!(conn);
            let ended = tokio::select! {
                r = conn.as_mut() => r,
                // Also when the sender is gone: nobody is left to wait for this connection.
                _ = async { drop(drain.wait_for(|d| *d).await) } => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            drop(drain);
            if let Err(e) = ended {
                tracing::debug!(error_kind = %error_kind(&e), "client connection ended with an error");
            }
        });
    }
}

/// A fixed word for a connection error (its text could echo request bytes).
fn error_kind(e: &hyper::Error) -> &'static str {
    if e.is_parse() {
        "parse"
    } else if e.is_incomplete_message() {
        "incomplete"
    } else if e.is_timeout() {
        "timeout"
    } else if e.is_canceled() {
        "canceled"
    } else {
        "io"
    }
}
