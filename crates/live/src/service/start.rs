//! The relay as a service: the data plane (`relay`) with the live pipeline behind it (the
//! correlator task, the ingest socket, OTLP export), started and stopped together.

use std::fs::File;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use correlator::Pseudonymizer;
use relay::Timed;
use sys::clock::Clock;
use tokio::sync::{mpsc, oneshot};

use super::args::RelayConfig;
use crate::{LiveConfig, Sinks};

/// A running relay.
pub struct Running {
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
    /// The data plane: its listen address and mounts.
    pub relay: relay::Relay,
    pub(super) sync: Vec<File>,
    /// Stops the correlator task, giving its records writer this long to get the last
    /// records out.
    pub(super) stop_live: oneshot::Sender<Duration>,
    pub(super) live: tokio::task::JoinHandle<std::io::Result<crate::Finished>>,
    /// Whether the run writes a capture (records not written can be replayed from it).
    pub(super) capture: bool,
    pub(super) exporter: Option<otlp::Exporter>,
}

/// Binds the data plane's listener, starts the OTLP exporter, the correlator task and the
/// ingest socket, then the data plane feeding them (in the order the one-crate relay did).
/// `clock` is the relay clock MCP report times must be on.
pub async fn start(config: RelayConfig, clock: Clock, sinks: Sinks) -> anyhow::Result<Running> {
    // What can fail on the user's options fails first, before any file is written.
    let bound = relay::bind(config.relay)?;
    let (ingest, ingest_rx) = mpsc::channel::<Timed>(relay::EVENT_QUEUE);
    let (stop_live, live_stopped) = oneshot::channel::<Duration>();
    let exporter = match config.otlp {
        Some(c) => Some(otlp::Exporter::start(c).context("starting the OTLP exporter")?),
        None => None,
    };
    let live_cfg = LiveConfig {
        correlator: config.correlator,
        pseudo: Pseudonymizer::new(&config.key),
        tick: Duration::from_millis(20),
        otlp: exporter
            .as_ref()
            .map(|e| (e.handle(), otlp::clock_epoch_unix_nanos(clock.now_ms()))),
        host_parents: config
            .join_host_trace
            .then(|| Arc::new(relay::HostParents::default())),
    };
    let capture = sinks.capture.is_some();
    let (observations, live_task) =
        crate::spawn(live_cfg, clock, sinks, Some(ingest_rx), live_stopped)
            .context("writing the capture header")?;
    let hosts = if !config.resolve_hosts {
        hostid::Hosts::off()
    } else if config.one_host {
        hostid::Hosts::start_sole()
    } else {
        hostid::Hosts::start()
    };
    // Wrappers may report from the moment the relay accepts: the socket is there first.
    let ingest_socket = match config.ingest {
        Some(path) => Some(crate::ingest::serve(path, clock, ingest.clone(), hosts.clone()).await?),
        None => None,
    };
    let relay = bound
        .start(clock, Some(observations), hosts.clone())
        .await?;
    Ok(Running {
        ingest,
        ingest_socket,
        hosts,
        signalled: true,
        relay,
        sync: config.sync,
        stop_live,
        live: live_task,
        capture,
        exporter,
    })
}
