//! `windowtap run`: one command that starts the relay and the ingest socket, points a host
//! at them, and routes every stdio MCP server through the wrapper.
//!
//! Claude Code and Codex are pointed at the relay through their own configuration, and their
//! MCP servers are rewritten to run under the wrapper. Any other program (an agent built on
//! the OpenAI Agents SDK, the Claude Agent SDK, …) declares its servers in its own code, which
//! run does not touch: it gets the SDKs' base-URL variables (`OPENAI_BASE_URL`,
//! `ANTHROPIC_BASE_URL`) and the socket (`WINDOWTAP_INGEST`), and the servers it starts under
//! `windowtap wrap` find the socket in its environment even when the SDK starts them with an
//! environment of its own (see `wrap`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use std::io::IsTerminal;

use anyhow::Context;

use live::service::{
    failures_summary, prepare_process, relay_config, servers_summary, start, RelayArgs, Signals,
};
use relay::Drain;
use relay::Mount;
use sys::clock::Clock;

use crate::plan::{Host, WrapWith};
use crate::{claude, codex, telemetry};

#[derive(clap::Args)]
#[command(after_help = "\
Examples:
  windowtap run -- claude -p \"list the files\" --mcp-config mcp.json
  windowtap run --records r.jsonl --capture t.jsonl -- codex exec \"list the files\"")]
#[command(after_long_help = "\
The relay listens on an ephemeral loopback port (unless --listen is given). MCP reports come in
on a socket private to this run, which every wrapped server is given (--ingest and
WINDOWTAP_INGEST are not used). Records go to --records (default: a new file under
$XDG_STATE_HOME/windowtap, else ~/.local/state/windowtap), the relay's log to a file beside
them (--log-file), so that the host keeps its terminal: run prints nothing while the host runs,
and a summary naming both files once it has exited.

Any other program (an agent on the OpenAI Agents SDK, the Claude Agent SDK, …) is run with
OPENAI_BASE_URL and ANTHROPIC_BASE_URL pointing at the relay (a base URL already set becomes
that mount's upstream) and WINDOWTAP_INGEST; the MCP servers it starts as `windowtap wrap
--alias NAME -- SERVER…` report to this run, whatever environment its SDK gives them.

Examples:
  windowtap run -- claude -p \"list the files\" --mcp-config mcp.json
  windowtap run --records r.jsonl --capture t.jsonl -- codex exec \"list the files\"
  windowtap run -- python3 my_agent.py")]
// The relay's options, as run uses them: where records go by default, and no shared socket.
#[command(mut_arg("records", |a| a.help(
    "Write attribution records here [default: a new file under $XDG_STATE_HOME/windowtap, \
     named in the summary]"
)))]
#[command(mut_arg("ingest", |a| a.hide(true)))]
pub struct RunArgs {
    #[command(flatten)]
    relay: RelayArgs,
    /// Write the relay's log here; `-` for stderr (it then shares the host's terminal)
    /// [default: beside the records, with the extension .log].
    #[arg(long, value_name = "FILE|-")]
    log_file: Option<PathBuf>,
    /// How Codex logs in, which picks its mount: `auto` reads $CODEX_HOME/auth.json.
    #[arg(long, default_value = "auto", value_name = "auto|api|chatgpt", value_parser = ["auto", "api", "chatgpt"])]
    codex_auth: String,
    /// The host and its arguments: `claude …`, `codex …`, or any program (`python3 agent.py`).
    #[arg(last = true, required = true, value_name = "HOST ARGS")]
    host: Vec<String>,
}

fn default_records_path() -> anyhow::Result<PathBuf> {
    let base = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(std::env::temp_dir)
        .join("windowtap");
    std::fs::create_dir_all(&base).with_context(|| format!("creating {}", base.display()))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    Ok(free_name(&base, &utc_stamp(now)))
}

/// `records-STAMP.jsonl` in `dir`, or `records-STAMP-2.jsonl` and on when a run in the same
/// second took that name (or its log's), so that no run writes over another's.
fn free_name(dir: &Path, stamp: &str) -> PathBuf {
    let taken = |p: &Path| p.exists() || log_path_beside(p).exists();
    let first = dir.join(format!("records-{stamp}.jsonl"));
    if !taken(&first) {
        return first;
    }
    (2..)
        .map(|n| dir.join(format!("records-{stamp}-{n}.jsonl")))
        .find(|p| !taken(p))
        .expect("some name is free")
}

/// A UTC time as a person reads it and a file name can hold (no `:`), sorting as it reads:
/// `2026-12-03T10-15-30Z`.
fn utc_stamp(unix_secs: u64) -> String {
    let (year, month, day, h, m, s) = sys::clock::utc_civil(unix_secs);
    format!("{year:04}-{month:02}-{day:02}T{h:02}-{m:02}-{s:02}Z")
}

/// The log beside the records: the same name with the extension `.log`.
fn log_path_beside(records: &Path) -> PathBuf {
    let log = records.with_extension("log");
    if log == records {
        let mut name = records.as_os_str().to_owned();
        name.push(".log");
        PathBuf::from(name)
    } else {
        log
    }
}

/// Opens the log file (0600: the log holds no secret, but it is nobody else's business).
fn open_log(path: &Path) -> anyhow::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| sys::advice::create_failed("the log file", path, e))
}

/// `windowtap run`. A run refused before its host ran (a missing `--mcp-config` file, a port in
/// use) leaves no empty records or log file of its own naming behind in the state directory:
/// each refused try used to add an empty pair there.
pub fn main(mut args: RunArgs) -> anyhow::Result<ExitCode> {
    let chosen = match args.relay.records {
        Some(_) => None,
        None if !args.host.is_empty() => {
            let p = default_records_path()?;
            args.relay.records = Some(p.clone());
            Some(p)
        }
        None => None,
    };
    let log_beside = args.log_file.is_none();
    let result = run_host(args);
    if let (Err(_), Some(records)) = (&result, &chosen) {
        if holds_no_record(records) {
            let _ = std::fs::remove_file(records);
            // The key beside them is of no use without them.
            let _ = std::fs::remove_file(live::service::key_path(records));
        }
        let log = log_path_beside(records);
        if log_beside && std::fs::metadata(&log).is_ok_and(|m| m.len() == 0) {
            let _ = std::fs::remove_file(log);
        }
    }
    result
}

/// Says, while the host runs, that its upstream keeps failing: the host retries for minutes
/// with nothing on screen, and the summary said so only once it had given up (issue 40,
/// item 5). Checked every second; said when failures first show and again, with the new
/// count, at most every [`UpstreamWatch::EVERY`]. A host on a terminal keeps it: there the
/// line goes to the relay's log (`--log-file`), never over the host's screen; otherwise it is
/// a line on stderr.
struct UpstreamWatch {
    terminal: bool,
    said: u64,
    last: Option<std::time::Instant>,
}

impl UpstreamWatch {
    const EVERY: std::time::Duration = std::time::Duration::from_secs(10);

    fn new(terminal: bool) -> UpstreamWatch {
        UpstreamWatch {
            terminal,
            said: 0,
            last: None,
        }
    }

    fn check(&mut self, relay: &relay::Relay) {
        let upstream: Vec<(String, &'static str, u64)> = relay
            .failed_so_far()
            .into_iter()
            .filter(|f| f.1 != "broken")
            .collect();
        let n: u64 = upstream.iter().map(|f| f.2).sum();
        if n <= self.said || self.last.is_some_and(|t| t.elapsed() < Self::EVERY) {
            return;
        }
        self.said = n;
        self.last = Some(std::time::Instant::now());
        let Some(text) = failures_summary(&relay.mounts, &upstream) else {
            return;
        };
        if self.terminal {
            tracing::warn!(
                failure = %text,
                "the host's upstream is failing while it runs"
            );
        } else {
            eprintln!("windowtap run: warning: while the host runs: {text}");
        }
    }
}

/// Whether a records file holds no record: empty, or only the run header.
fn holds_no_record(path: &Path) -> bool {
    match std::fs::read_to_string(path) {
        Ok(text) => text.lines().all(|l| l.starts_with(r#"{"type":"run","#)),
        Err(_) => false,
    }
}

fn run_host(mut args: RunArgs) -> anyhow::Result<ExitCode> {
    let program = args
        .host
        .first()
        .context("name the host to run: `-- claude …`, `-- codex …` or `-- PROGRAM …`")?
        .clone();
    let host = Host::of(&program);
    let host_args: Vec<String> = args.host[1..].to_vec();
    let dir = tempfile::Builder::new()
        .prefix("windowtap-run-")
        .tempdir()
        .context("creating a private directory")?;
    let ingest = dir.path().join("ingest.sock");
    let wrap = WrapWith {
        exe: std::env::current_exe().context("finding the windowtap executable")?,
        ingest: ingest.clone(),
    };
    let records_path = args.relay.records.clone();
    let capture_path = args.relay.capture().map(Path::to_path_buf);
    let rotating = args.relay.rotating();

    // Upstreams the host was already pointed at become the relay's upstreams.
    let mut mounts: Vec<Mount> = Vec::new();
    let claude_sources = claude::Sources {
        user_config: std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".claude.json")),
        user_settings: std::env::var_os("HOME")
            .map(|h| PathBuf::from(h).join(".claude/settings.json")),
        cwd: std::env::current_dir().context("reading the working directory")?,
    };
    if host == Host::Claude {
        // Claude Code's settings `env` wins over its environment: a base URL set there is the
        // one the user chose (and run points the host at the relay with a --settings of its
        // own, `claude::point_settings`); else the environment's.
        let chosen = match claude::settings_base_url(&host_args, &claude_sources)? {
            Some((url, origin)) => Some((url, format!("ANTHROPIC_BASE_URL in {origin}"))),
            None => std::env::var("ANTHROPIC_BASE_URL")
                .ok()
                .map(|u| (u, "ANTHROPIC_BASE_URL".to_string())),
        };
        if let Some((url, origin)) = chosen {
            mounts
                .push(Mount::new("anthropic", &url).map_err(|e| anyhow::anyhow!("{origin}: {e}"))?);
        }
    }
    let codex_home = codex::default_home();
    let auth = match args.codex_auth.as_str() {
        "api" => codex::Auth::ApiKey,
        "chatgpt" => codex::Auth::ChatGpt,
        _ => codex::Auth::Auto,
    };
    // A program's SDKs: a base URL the user already set is where their key is meant to go, so
    // it becomes the upstream of the mount the program is pointed at (as for the hosts).
    let program_bases = (host == Host::Program).then(program_bases);
    for b in program_bases.iter().flatten() {
        if let Some(upstream) = &b.upstream {
            mounts.push(
                Mount::new(b.mount, upstream).map_err(|e| anyhow::anyhow!("{}: {e}", b.var))?,
            );
        }
    }
    if host == Host::Codex {
        // The mounts do not depend on the relay's address: plan once to learn them.
        let probe = codex::plan(&host_args, &codex_home, &wrap, "http://relay", auth)?;
        for (name, url) in probe.mounts {
            mounts
                .push(Mount::new(&name, &url).map_err(|e| anyhow::anyhow!("codex base URL: {e}"))?);
        }
    }

    let listen = args
        .relay
        .listen
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
    let (mut config, sinks) = relay_config(&args.relay, listen, ingest.clone(), &mounts)?;
    config.one_host = true;
    // `--join-host-trace`: the host exports its own trace where windowtap exports.
    let host_traces = config
        .otlp
        .as_ref()
        .filter(|_| config.join_host_trace)
        .map(|c| c.endpoint.to_string());
    // The host's terminal is the host's: the log goes to a file unless asked otherwise.
    let log_path = match args.log_file.take() {
        Some(p) if p.as_os_str() == "-" => None,
        Some(p) => Some(p),
        None => records_path.as_deref().map(log_path_beside),
    };
    match &log_path {
        Some(p) => sys::logging::init_to(&args.relay.log, Some(open_log(p)?)),
        None => sys::logging::init_to(&args.relay.log, None),
    }
    prepare_process();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        // Installed before anything starts, so that no signal is ever fatal.
        let mut signals = Signals::install()?;
        let running = start(config, Clock::start(), sinks).await?;
        let base = format!("http://{}", running.relay.addr);
        let (argv, env, servers, target) = match host {
            Host::Claude => {
                let plan = claude::plan(&host_args, &claude_sources, &wrap, dir.path())?;
                let url = format!("{base}/anthropic");
                let args = claude::point_settings(plan.args, &claude_sources, dir.path(), &url)?;
                (
                    args,
                    vec![("ANTHROPIC_BASE_URL".to_string(), url.clone())],
                    plan.servers,
                    url,
                )
            }
            Host::Codex => {
                let plan = codex::plan(&host_args, &codex_home, &wrap, &base, auth)?;
                (plan.args, Vec::new(), plan.servers, plan.base_url)
            }
            Host::Program => {
                let env: Vec<(String, String)> = program_bases
                    .iter()
                    .flatten()
                    .map(|b| (b.var.to_string(), b.url(&base)))
                    .collect();
                let target = env
                    .iter()
                    .map(|(_, url)| url.as_str())
                    .collect::<Vec<_>>()
                    .join(" and ");
                (host_args.clone(), env, Vec::new(), target)
            }
        };
        let (argv, env) = match &host_traces {
            Some(url) => telemetry::with_host_export(host, url, argv, env),
            None => (argv, env),
        };
        tracing::info!(port = running.relay.addr.port(), "relay listening; starting the host");
        let mut cmd = tokio::process::Command::new(&program);
        cmd.args(&argv).envs(env).env(live::ingest::ENV, &ingest);
        let mut child = cmd.spawn().with_context(|| format!("starting {program}"))?;
        // run knows its host: every connection to its private relay is taken as the host's
        // (`RelayConfig::one_host`), and its wrappers find it among their ancestors.
        if let Some(pid) = child.id() {
            running.hosts.adopt(pid).await;
        }
        // Ctrl-C reaches the host through the terminal's process group, and while the host
        // runs it is the host's business (Codex interrupts a turn with it). SIGTERM is passed
        // on, and makes run a stopping one: from then on, and once the host has exited (the
        // relay draining), another signal stops at once, like the relay's second signal.
        let mut stopping = false;
        let mut signalled = false;
        let mut upstream_watch = UpstreamWatch::new(std::io::stderr().is_terminal());
        let mut watch_tick = tokio::time::interval(std::time::Duration::from_secs(1));
        let waited = loop {
            tokio::select! {
                s = child.wait() => break Ok(s.context("waiting for the host")?),
                _ = watch_tick.tick() => upstream_watch.check(&running.relay),
                signo = signals.next() => {
                    signalled = true;
                    if signo == rustix::process::Signal::TERM.as_raw() {
                        if let Some(pid) = child.id().and_then(|p| rustix::process::Pid::from_raw(p as i32)) {
                            // The child we started, not yet reaped: its pid is still its own.
                            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
                        }
                    }
                    if stopping {
                        break Err(signo);
                    }
                    if signo == rustix::process::Signal::TERM.as_raw() {
                        stopping = true;
                        tracing::warn!("SIGTERM passed on to the host; another signal stops at once");
                    }
                }
            }
        };
        let mounts_now = running.relay.mounts.clone();
        let mut running = running;
        running.signalled = signalled || waited.is_err();
        let stopped = match waited {
            Ok(_) => running.stop_with(signals.next()).await?,
            Err(signo) => {
                eprintln!(
                    "windowtap run: second signal: stopping at once, without waiting for {program}"
                );
                running.stop_with(std::future::ready(signo)).await?
            }
        };
        // The host has exited: from here on the terminal is run's again.
        let summary = stopped.summary;
        // Where the host's mount goes, as the failures summary names it (scheme and host:
        // a base URL's path or userinfo may hold a credential).
        let upstream = mounts_now
            .iter()
            .find(|m| {
                target
                    .strip_prefix(&format!("{base}/{}", m.name))
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
            })
            .map(|m| {
                let auth = m.authority.as_str();
                let host = auth.rsplit('@').next().unwrap_or(auth);
                format!(", upstream {}://{host}", m.scheme)
            })
            .unwrap_or_default();
        eprintln!("windowtap run: {program} went through {target} (relay on {base}{upstream})");
        eprintln!("windowtap run: {summary}");
        if let Some(text) = failures_summary(&mounts_now, &stopped.failed) {
            eprintln!("windowtap run: warning: {text}");
        }
        let wrapped: Vec<String> = servers
            .iter()
            .filter(|s| s.observed)
            .map(|s| s.alias.clone())
            .collect();
        for text in servers_summary(&stopped.servers, &wrapped) {
            eprintln!("windowtap run: warning: {text}");
        }
        if let Some(text) = stopped.unreported.describe(live::mcp_tally::Setting::Run) {
            eprintln!("windowtap run: warning: {text}");
        }
        if let Some(p) = &records_path {
            // Rotated, the records are in numbered pieces beside the path given, not in it.
            let shown = if rotating {
                live::rotate::pieces_pattern(p)
            } else {
                p.clone()
            };
            eprintln!("windowtap run: records in {}", shown.display());
        }
        if let Some(p) = &capture_path {
            let shown = if rotating {
                live::rotate::pieces_pattern(p)
            } else {
                p.clone()
            };
            eprintln!("windowtap run: capture in {}", shown.display());
        }
        if let Some(p) = &log_path {
            eprintln!("windowtap run: log in {}", p.display());
        }
        for s in servers.iter().filter(|s| s.rewrapped) {
            eprintln!(
                "windowtap run: MCP server `{}` ({}) was declared under `windowtap wrap` already: \
                 run wrapped it once, reporting to its own socket",
                s.alias, s.origin
            );
        }
        for s in servers.iter().filter(|s| !s.observed) {
            eprintln!(
                "windowtap run: MCP server `{}` ({}) is not observed: {}",
                s.alias,
                s.origin,
                s.note.as_deref().unwrap_or("not a stdio server")
            );
        }
        if host != Host::Program && servers.iter().all(|s| !s.observed) {
            eprintln!("windowtap run: no stdio MCP server was found to wrap");
        }
        use std::os::unix::process::ExitStatusExt;
        // Stopped at once: 128 + that signal, as the relay does; else the host's exit code.
        let code = match (waited, stopped.how) {
            (Err(signo), _) | (Ok(_), Drain::AtOnce(signo)) => 128 + signo,
            (Ok(status), _) => status
                .code()
                .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
        };
        drop(dir);
        anyhow::Ok(ExitCode::from(code.clamp(0, 255) as u8))
    })
}

/// One SDK base-URL variable of a program run by `run`: the mount it goes through, and the
/// upstream of that mount when the user had set the variable.
struct ProgramBase {
    var: &'static str,
    mount: &'static str,
    /// The path under the mount that the SDK's base URL ends in (the OpenAI SDKs' base URL
    /// includes `/v1`; the Anthropic SDKs add `/v1/messages` themselves).
    default_path: &'static str,
    upstream: Option<String>,
}

impl ProgramBase {
    /// The variable's value for the program: the relay's mount.
    fn url(&self, relay: &str) -> String {
        match self.upstream {
            Some(_) => format!("{relay}/{}", self.mount),
            None => format!("{relay}/{}{}", self.mount, self.default_path),
        }
    }
}

/// The mount for an `OPENAI_BASE_URL` the user set: a mount of its own (as Codex's
/// `/codex-openai`), so that `/openai` and `--upstream openai=…` keep meaning what they say.
const PROGRAM_OPENAI_MOUNT: &str = "program-openai";

/// `OPENAI_BASE_URL` and `ANTHROPIC_BASE_URL` as the program will get them (an empty value
/// counts as unset, as the SDKs read it).
fn program_bases() -> Vec<ProgramBase> {
    let set = |var: &str| std::env::var(var).ok().filter(|v| !v.trim().is_empty());
    let openai = set("OPENAI_BASE_URL");
    vec![
        ProgramBase {
            var: "OPENAI_BASE_URL",
            mount: if openai.is_some() {
                PROGRAM_OPENAI_MOUNT
            } else {
                "openai"
            },
            default_path: "/v1",
            upstream: openai,
        },
        ProgramBase {
            var: "ANTHROPIC_BASE_URL",
            // The anthropic mount takes the user's URL, as it does for Claude Code.
            mount: "anthropic",
            default_path: "",
            upstream: set("ANTHROPIC_BASE_URL"),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_named_by_a_readable_utc_time() {
        assert_eq!(utc_stamp(0), "1970-01-01T00-00-00Z");
        assert_eq!(utc_stamp(951_782_400), "2000-02-29T00-00-00Z");
        assert_eq!(utc_stamp(1_796_294_130), "2026-12-03T10-35-30Z");
        let dir = tempfile::tempdir().unwrap();
        let first = free_name(dir.path(), "2026-12-03T10-35-30Z");
        assert_eq!(first, dir.path().join("records-2026-12-03T10-35-30Z.jsonl"));
        std::fs::write(&first, "").unwrap();
        assert_eq!(
            free_name(dir.path(), "2026-12-03T10-35-30Z"),
            dir.path().join("records-2026-12-03T10-35-30Z-2.jsonl"),
            "a run in the same second gets a name of its own"
        );
    }
}
