//! `windowtap relay`: the program Claude Code and Codex are pointed at: the data plane
//! (the `relay` crate) with the live pipeline behind it.
//!
//! - [`args`]: the options and the run configuration made from them; [`sinks`]: the record
//!   and capture files.
//! - [`service`]: the data plane, the correlator task, the ingest socket and OTLP export,
//!   started together; [`shutdown`]: signals and the stop.

pub mod args;
mod service;
mod shutdown;
pub mod sinks;

use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::Context;

pub(crate) use args::read_key;
pub use args::{relay_config, RelayArgs};
pub use relay::{banner, Drain};
pub use service::start;
pub(crate) use shutdown::Signals;

use sys::clock::Clock;

pub fn init_logging(level: &str) {
    sys::logging::init(level);
}

/// What every relay process sets for itself before it starts (`relay` and `run`): the open
/// files limit ([`limits`]) and the heap's hold on freed blocks ([`heap`]).
pub fn prepare_process() {
    relay::raise_open_files_limit();
    sys::heap::keep_freed_blocks();
}

pub fn main(args: RelayArgs) -> anyhow::Result<ExitCode> {
    init_logging(&args.log);
    prepare_process();
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
            // For `windowtap env`: which relay this socket belongs to.
            if let Err(e) = crate::ingest::write_note(sock.path(), running.addr) {
                tracing::warn!(error = %e, "could not write the note beside the ingest socket; `windowtap env` cannot pair it with this relay");
            }
            if sock.path() == crate::ingest::default_path() {
                eprintln!(
                    "MCP servers run under `windowtap wrap` report to {} ({}=<path> to change)",
                    sock.path().display(),
                    crate::ingest::ENV
                );
            } else {
                // Not where a wrapper looks by itself: say how to tell it, host by host.
                eprintln!(
                    "MCP servers run under `windowtap wrap` report to {p}, which is not the \
                     default place: give it to each wrapper, as `--ingest {p}` in its args or \
                     {env}={p} in its environment (`eval \"$(windowtap env claude|codex)\"` \
                     exports it; Codex passes it on to a server only if the server's table \
                     says env_vars = [\"{env}\"])",
                    p = sock.path().display(),
                    env = crate::ingest::ENV
                );
            }
        }
        signals.next().await;
        let ingest = running
            .ingest_socket
            .as_ref()
            .map(|s| s.path().to_path_buf());
        let mounts = running.mounts.clone();
        let stopped = running.stop_with(signals.next()).await?;
        eprintln!("windowtap relay stopped: {}", stopped.summary);
        if let Some(text) = crate::run::failures_summary(&mounts, &stopped.failed) {
            eprintln!("windowtap relay: warning: {text}");
        }
        if let Some(text) = stopped
            .unreported
            .describe(crate::mcp_tally::Setting::Relay {
                ingest: ingest.as_deref(),
            })
        {
            eprintln!("windowtap relay: warning: {text}");
        }
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
