//! windowtap: a transparent relay for AI coding hosts that attributes each MCP tool call to
//! the model response window it ran in, and abstains, with a reason, when it cannot be sure.

#![forbid(unsafe_code)]

mod check;
mod ingest_cmd;
mod lookup_cmd;
mod relay_cmd;
mod replay_cmd;
mod trace_file;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "windowtap", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay trace v2 files offline and write attribution records.
    Replay(replay_cmd::ReplayArgs),
    /// Run the transparent relay that Claude Code and Codex are pointed at.
    Relay(live::service::RelayArgs),
    /// Start the relay, point Claude Code or Codex at it, and wrap every stdio MCP server.
    Run(hosts::run::RunArgs),
    /// Wrap a stdio MCP server and report when each tools/call really ran.
    Wrap(hosts::wrap::WrapArgs),
    /// Draw attribution records (and optionally their trace) as an HTML timeline.
    Report(report::ReportArgs),
    /// Validate trace v2 and records v1 files, naming the line and field of each error.
    Check(check::CheckArgs),
    /// Print the override that points Claude Code or Codex at a running relay.
    Env(hosts::env::EnvArgs),
    /// Find the records of an id you have (a `toolu_…`, a response or thread id) in a run's
    /// records, by its pseudonym under the run's key.
    Lookup(lookup_cmd::LookupArgs),
    /// Listen on an ingest socket and print the MCP intervals that wrappers report, as trace v2
    /// (for trying a wrapper without the relay).
    #[command(hide = true)]
    Ingest(ingest_cmd::IngestArgs),
}

/// For `windowtap run claude …` (the `--` left out), which clap can only call an unexpected
/// argument: the host's name (never its arguments, which may hold a prompt), to say where it
/// goes.
fn host_before_dashes(e: &clap::Error) -> Option<&'static str> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    if std::env::args().nth(1).as_deref() != Some("run") {
        return None;
    }
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let name = std::path::Path::new(arg).file_name()?.to_str()?;
    if name.starts_with("claude") {
        Some("claude")
    } else if name.starts_with("codex") {
        Some("codex")
    } else {
        None
    }
}

/// For `windowtap wrap npx server` (the `--` left out), which clap calls an unexpected
/// argument: say where the server's command goes (never echoing it).
fn server_before_dashes(e: &clap::Error) -> bool {
    e.kind() == clap::error::ErrorKind::UnknownArgument
        && std::env::args().nth(1).as_deref() == Some("wrap")
        && !std::env::args().any(|a| a == "--")
}

fn main() -> std::process::ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            if let Some(host) = host_before_dashes(&e) {
                eprintln!(
                    "windowtap: error: the host goes after `--`, with its arguments, so that they \
                     are its own and not run's: windowtap run [OPTIONS] -- {host} …"
                );
                return std::process::ExitCode::from(2);
            }
            if server_before_dashes(&e) {
                eprintln!(
                    "windowtap: error: the MCP server's command goes after `--`, with its \
                     arguments: windowtap wrap --alias NAME [OPTIONS] -- SERVER [ARGS…]"
                );
                return std::process::ExitCode::from(2);
            }
            e.exit()
        }
    };
    let result = match cli.command {
        Command::Replay(args) => replay_cmd::main(args),
        Command::Relay(args) => relay_cmd::main(args),
        Command::Run(args) => hosts::run::main(args),
        Command::Wrap(args) => hosts::wrap::main(args),
        Command::Report(args) => report::main(args),
        Command::Check(args) => check::main(args),
        Command::Env(args) => hosts::env::main(args),
        Command::Lookup(args) => lookup_cmd::main(args),
        Command::Ingest(args) => ingest_cmd::main(args),
    };
    match result {
        Ok(code) => code,
        // `| head -1` and the like: the reader has what it wanted.
        Err(e) if sys::stdout::is_closed(&e) => {
            std::process::ExitCode::from(sys::stdout::CLOSED_EXIT)
        }
        Err(e) => {
            eprintln!("windowtap: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
