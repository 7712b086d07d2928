//! `windowtap relay`: the program Claude Code and Codex are pointed at, started once and
//! shared by every session of its user. The relay itself is the `live` crate's service (the
//! data plane with the live pipeline behind it); this is its command: the banner, where MCP
//! reports go, the signals and the stop's summary.

use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::Context;
use live::ingest;
use live::service::{
    failures_summary, prepare_process, relay_config, servers_summary, start, RelayArgs, Signals,
};
use relay::{banner, Drain};
use sys::clock::Clock;

pub fn main(args: RelayArgs) -> anyhow::Result<ExitCode> {
    sys::logging::init(&args.log);
    prepare_process();
    let listen = args
        .listen
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 8787)));
    let ingest = ingest::listen_path(args.ingest.clone())?;
    let (config, sinks) = relay_config(&args, listen, ingest, &[])?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let code = runtime.block_on(async move {
        let mut signals = Signals::install()?;
        let running = start(config, Clock::start(), sinks).await?;
        eprint!("{}", banner(running.relay.addr, &running.relay.mounts));
        if let Some(sock) = &running.ingest_socket {
            // For `windowtap env`: which relay this socket belongs to.
            if let Err(e) = ingest::write_note(sock.path(), running.relay.addr) {
                tracing::warn!(error = %e, "could not write the note beside the ingest socket; `windowtap env` cannot pair it with this relay");
            }
            if sock.path() == ingest::default_path() {
                eprintln!(
                    "MCP servers run under `windowtap wrap` report to {} ({}=<path> to change)",
                    sock.path().display(),
                    ingest::ENV
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
                    env = ingest::ENV
                );
            }
        }
        signals.next().await;
        let ingest = running
            .ingest_socket
            .as_ref()
            .map(|s| s.path().to_path_buf());
        let mounts = running.relay.mounts.clone();
        let stopped = running.stop_with(signals.next()).await?;
        eprintln!("windowtap relay stopped: {}", stopped.summary);
        if let Some(text) = failures_summary(&mounts, &stopped.failed) {
            eprintln!("windowtap relay: warning: {text}");
        }
        for text in servers_summary(&stopped.servers, &[]) {
            eprintln!("windowtap relay: warning: {text}");
        }
        if let Some(text) = stopped
            .unreported
            .describe(live::mcp_tally::Setting::Relay {
                ingest: ingest.as_deref(),
                wrapped: !stopped.servers.started.is_empty(),
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
