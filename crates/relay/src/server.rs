//! Start-up and the accept loop: binds the listener, starts the cores, and hands each
//! accepted connection to a core.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use correlator::observe::Budget;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};

use super::limits::{self, Admission, Clients};
use super::mounts::Mounts;
use super::state::State;
use super::timers::Timers;
use super::tunnels::Tunnels;
use crate::exchange::FailedExchanges;
use crate::feed::{Observations, Sources};
use crate::tap::{self, Stall};
use crate::tls::{UpstreamConnector, UpstreamRoots};
use crate::{answers, cores, upstream, verbatim};
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

/// The data plane's settings: where it listens, where each mount goes, and every bound it
/// keeps (timeouts, connections, observer memory).
pub struct Config {
    pub listen: SocketAddr,
    pub mounts: Mounts,
    /// The extra roots for upstream TLS, for all upstreams and per mount.
    pub upstream_roots: UpstreamRoots,
    pub connect_timeout: Duration,
    pub response_timeout: Duration,
    /// How long an upstream may send nothing of a response body.
    pub body_timeout: Duration,
    /// How long a client may send nothing of a request body it announced.
    pub client_body_timeout: Duration,
    /// How long an idle upstream connection is kept for reuse.
    pub upstream_idle: Duration,
    /// How long a client connection may take to send a request head.
    pub header_timeout: Duration,
    /// How long a WebSocket tunnel may pass nothing either way before it is closed.
    pub tunnel_idle: Duration,
    /// The client connection cap (`None`: from the open files limit).
    pub max_connections: Option<usize>,
    pub observer_queue: usize,
    pub observer_budget: Budget,
    pub stall: Stall,
    /// On stop, how long in-flight requests and streams may take to end.
    pub drain: Duration,
}

/// A running data plane.
pub struct Relay {
    /// The bound listen address.
    pub addr: SocketAddr,
    pub mounts: Mounts,
    pub(crate) stop_accepting: oneshot::Sender<()>,
    pub(crate) server: tokio::task::JoinHandle<()>,
    /// Set to `true` to have every connection finish its request in flight and close;
    /// closed once every connection task has ended.
    pub(crate) draining: watch::Sender<bool>,
    pub(crate) drain: Duration,
    /// The observed streams still registered (none without observations).
    pub(crate) sources: Option<Arc<Sources>>,
    pub(crate) tunnels: Arc<Tunnels>,
    pub(crate) failed: Arc<FailedExchanges>,
    /// The runtimes client connections run on; dropped last, which cuts what still runs.
    pub(crate) cores: cores::Cores,
    /// The observation threads; dropped after the cores.
    pub(crate) observers: cores::Cores,
}

/// A relay whose upstream TLS is set up and whose listener is bound, not yet accepting:
/// what can fail on the user's options (a CA file, a port in use) has failed by now, before
/// whoever starts the relay starts anything else.
pub struct Bound {
    config: Config,
    connector: UpstreamConnector,
    listener: TcpListener,
}

/// Sets up upstream TLS and binds the listener (inside the runtime the relay will run on).
pub fn bind(config: Config) -> anyhow::Result<Bound> {
    let connector = UpstreamConnector::new(&config.upstream_roots, config.connect_timeout)?;
    let listener =
        listen(config.listen).map_err(|e| sys::advice::listen_failed(config.listen, e))?;
    Ok(Bound {
        config,
        connector,
        listener,
    })
}

impl Bound {
    /// The bound listen address.
    pub fn addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Starts accepting. Observed streams stamp their events with `clock` and hand them to
    /// `observations` (without, every stream is forwarded unobserved); each accepted
    /// connection's host is asked of `hosts`.
    pub async fn start(
        self,
        clock: Clock,
        observations: Option<Observations>,
        hosts: hostid::Hosts,
    ) -> anyhow::Result<Relay> {
        start(self, clock, observations, hosts).await
    }
}

async fn start(
    bound: Bound,
    clock: Clock,
    observations: Option<Observations>,
    hosts: hostid::Hosts,
) -> anyhow::Result<Relay> {
    let Bound {
        config,
        connector,
        listener,
    } = bound;
    // `start` runs on the main runtime: the connections' timers run there.
    let timers = Timers::new(tokio::runtime::Handle::current());
    let client = upstream::client(connector.clone(), config.upstream_idle, timers.clone());
    let upstreams = upstream::Upstreams::new(connector, config.upstream_idle);
    upstreams.spawn_sweeper();
    let addr = listener.local_addr()?;
    let tunnels = Arc::new(Tunnels::default());
    let failed = Arc::new(FailedExchanges::default());
    let observers = cores::Cores::start_observers(cores::Cores::default_observers())?;
    let sources = observations.as_ref().map(|o| o.sources.clone());
    // Without observations nothing is ever sent: a channel nobody reads costs nothing.
    let events = match &observations {
        Some(o) => o.events.clone(),
        None => mpsc::channel(1).0,
    };
    let state = Arc::new(State {
        mounts: config.mounts.clone(),
        client,
        upstreams,
        clock,
        tap_settings: tap::Settings::new(
            clock,
            config.observer_queue,
            events,
            config.stall,
            observers.spawner(),
        )
        .with_budget(config.observer_budget.clone()),
        observations,
        response_timeout: config.response_timeout,
        body_timeout: config.body_timeout,
        client_body_timeout: config.client_body_timeout,
        tunnel_idle: config.tunnel_idle,
        timers: timers.clone(),
        tunnels: tunnels.clone(),
        failed: failed.clone(),
        clients: Clients::new(
            config.header_timeout,
            config
                .max_connections
                .unwrap_or_else(limits::default_max_connections),
        ),
        budget: config.observer_budget.clone(),
        hosts,
        next_stream: AtomicU64::new(0),
    });
    let (stop_accepting, stopped) = oneshot::channel::<()>();
    let (draining, drain_rx) = watch::channel(false);
    let cores = cores::Cores::start(cores::Cores::default_count())?;
    let server = tokio::spawn(accept_loop(
        listener,
        state,
        async move {
            let _ = stopped.await;
        },
        drain_rx,
        cores.spawner(),
    ));
    Ok(Relay {
        addr,
        mounts: config.mounts,
        stop_accepting,
        server,
        draining,
        drain: config.drain,
        sources,
        tunnels,
        failed,
        cores,
        observers,
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
pub(crate) async fn accept_loop(
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
                verbatim::serve_connection(io, state, drain).await;
            })
        });
    }
}

static ACCEPT_FAILED_LOG: Repeated = Repeated::new(1, Duration::from_secs(10));

/// Answers a connection over the cap with a 503 and closes it: a clean refusal the client
/// sees at once, where a connection left in the backlog would hang it.
async fn refuse(io: tokio::net::TcpStream, refusal: limits::Admitted) {
    let service = hyper::service::service_fn(|_req| async {
        Ok::<_, std::convert::Infallible>(answers::at_capacity())
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .keep_alive(false)
        .timer(TokioTimer::new())
        .header_read_timeout(limits::REFUSAL_HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(io), service)
        .await;
    drop(refusal);
}
