//! Start-up and the accept loop: binds the listener, starts the correlator task, the ingest
//! socket and the cores, and hands each accepted connection to a core.

use std::fs::File;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use correlator::Pseudonymizer;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};

use super::args::RelayConfig;
use super::limits::{self, Admission, Clients};
use super::mounts::Mounts;
use super::state::State;
use super::timers::Timers;
use super::tunnels::Tunnels;
use super::{cores, failure, tap, upstream, verbatim};
use crate::live::{self, LiveConfig, Sinks, Timed};
use sys::clock::Clock;
use sys::ratelimit::Repeated;

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
    /// Who the hosts are (`windowtap run` adopts the host it spawns).
    pub hosts: hostid::Hosts,
    /// Whether the stop follows a signal (the relay's always does; `run`'s may follow its
    /// host's exit instead), so that the drain's log line says "a second signal" only then.
    pub signalled: bool,
    pub(super) stop_accepting: oneshot::Sender<()>,
    pub(super) server: tokio::task::JoinHandle<()>,
    /// Set to `true` to have every connection finish its request in flight and close;
    /// closed once every connection task has ended.
    pub(super) draining: watch::Sender<bool>,
    pub(super) drain: Duration,
    pub(super) sync: Vec<File>,
    /// Stops the correlator task, giving its records writer this long to get the last
    /// records out.
    pub(super) stop_live: oneshot::Sender<Duration>,
    pub(super) live: tokio::task::JoinHandle<std::io::Result<live::Finished>>,
    pub(super) sources: Arc<live::Sources>,
    pub(super) tunnels: Arc<Tunnels>,
    /// Whether the run writes a capture (records not written can be replayed from it).
    pub(super) capture: bool,
    pub(super) exporter: Option<crate::otlp::Exporter>,
    /// The runtimes client connections run on; dropped last, which cuts what still runs.
    pub(super) _cores: cores::Cores,
    /// The observation threads; dropped after the cores.
    pub(super) _observers: cores::Cores,
}

/// Binds the listener, starts the correlator task and starts accepting. `clock` is the
/// relay clock MCP report times must be on.
pub async fn start(config: RelayConfig, clock: Clock, sinks: Sinks) -> anyhow::Result<Running> {
    let connector =
        crate::tls::UpstreamConnector::new(&config.upstream_roots, config.connect_timeout)?;
    // `start` runs on the main runtime: the connections' timers run there.
    let timers = Timers::new(tokio::runtime::Handle::current());
    let client = upstream::client(connector.clone(), config.upstream_idle, timers.clone());
    let upstreams = upstream::Upstreams::new(connector, config.upstream_idle);
    upstreams.spawn_sweeper();
    let listener =
        listen(config.listen).map_err(|e| sys::advice::listen_failed(config.listen, e))?;
    let addr = listener.local_addr()?;
    let (ingest, ingest_rx) = mpsc::channel::<Timed>(live::EVENT_QUEUE);
    let (stop_live, live_stopped) = oneshot::channel::<Duration>();
    let live_cfg = LiveConfig {
        correlator: config.correlator,
        pseudo: Pseudonymizer::new(&config.key),
        tick: Duration::from_millis(20),
        otlp: None,
        host_parents: config
            .join_host_trace
            .then(|| Arc::new(crate::otlp::host_trace::HostParents::default())),
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
    let observers = cores::Cores::start_observers(cores::Cores::default_observers())?;
    let hosts = if !config.resolve_hosts {
        hostid::Hosts::off()
    } else if config.one_host {
        hostid::Hosts::start_sole()
    } else {
        hostid::Hosts::start()
    };
    let state = Arc::new(State {
        mounts: config.mounts.clone(),
        client,
        upstreams,
        clock,
        tap_settings: tap::Settings::new(
            clock,
            config.observer_queue,
            live.events.clone(),
            config.stall,
            observers.spawner(),
        )
        .with_budget(config.observer_budget.clone()),
        live: Some(live),
        response_timeout: config.response_timeout,
        body_timeout: config.body_timeout,
        client_body_timeout: config.client_body_timeout,
        timers: timers.clone(),
        tunnels: tunnels.clone(),
        clients: Clients::new(
            config.header_timeout,
            config
                .max_connections
                .unwrap_or_else(limits::default_max_connections),
        ),
        budget: config.observer_budget.clone(),
        hosts: hosts.clone(),
        next_stream: AtomicU64::new(0),
    });
    let ingest_socket = match config.ingest {
        Some(path) => Some(crate::ingest::serve(path, clock, ingest.clone(), hosts.clone()).await?),
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
        hosts,
        signalled: true,
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
        _observers: observers,
    })
}

/// Connections the kernel completes and queues for the accept loop. `TcpListener::bind` asks
/// for 128: a burst of a few hundred sessions starting at once (the attack harness's 601
/// streams) overflowed it, and each overflow costs a client a one-second SYN retransmission.
const LISTEN_BACKLOG: u32 = 1024;

/// The relay's listener (`SO_REUSEADDR` as `bind` sets it, and [`LISTEN_BACKLOG`]).
fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
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
        let (io, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of descriptors and the like: back off instead of spinning.
                if let Some(left_out) = ACCEPT_FAILED_LOG.allow() {
                    tracing::warn!(error = %e, left_out, "accept failed");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let admitted = match state.clients.admit(state.tunnels.len()) {
            Admission::Admit(a) => a,
            Admission::Refuse(refusal) => {
                tokio::spawn(refuse(io, refusal));
                continue;
            }
            Admission::Drop => continue,
        };
        let _ = io.set_nodelay(true);
        // Only queued here; the process table is read on the resolver's thread.
        let host = match io.local_addr() {
            Ok(local) => state.hosts.connection(peer, local),
            Err(_) => hostid::ConnHost::known(None),
        };
        // Off this runtime's reactor: the core registers it with its own.
        let Ok(io) = io.into_std() else { continue };
        let state = state.clone();
        let drain = drain.clone();
        // The connection's task knows its host: its streams find it there (`start_tap`).
        cores.spawn(move || {
            hostid::with_connection(host, async move {
                let _admitted = admitted;
                let Ok(io) = tokio::net::TcpStream::from_std(io) else {
                    return;
                };
                // Plain HTTP/1.1 exchanges pass verbatim; the first request that does not is
                // served, with the rest of the connection, by `serve_hyper`.
                verbatim::serve(io, state, drain).await;
            })
        });
    }
}

static ACCEPT_FAILED_LOG: Repeated = Repeated::new(1, Duration::from_secs(10));

/// Answers a connection over the cap with a 503 and closes it: a clean refusal the client
/// sees at once, where a connection left in the backlog would hang it.
async fn refuse(io: tokio::net::TcpStream, refusal: limits::Admitted) {
    let service = hyper::service::service_fn(|_req| async {
        Ok::<_, std::convert::Infallible>(failure::at_capacity())
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .keep_alive(false)
        .timer(TokioTimer::new())
        .header_read_timeout(limits::REFUSAL_HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(io), service)
        .await;
    drop(refusal);
}
