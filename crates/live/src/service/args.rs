//! The relay's options (`windowtap relay --help`) and the run configuration made from them.

use std::fs::File;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use correlator::observe::Budget;
use correlator::{Config, WindowOpen};
use correlator::{Pseudonymizer, PSEUDONYM_KEY_LEN};

use relay::{ExtraRoots, Mount, Mounts, Stall, UpstreamRoots};

use super::sinks;
use crate::Sinks;

#[derive(clap::Args, Debug)]
#[command(after_help = "\
Examples:
  windowtap relay
  windowtap relay --records records.jsonl --capture trace.jsonl
  windowtap relay --upstream anthropic=https://gateway.example/anthropic")]
pub struct RelayArgs {
    /// Address to listen on: IP:PORT, localhost:PORT or PORT, loopback only unless --allow-remote.
    ///
    /// localhost:PORT and PORT are 127.0.0.1 [default: 127.0.0.1:8787 for `relay`, an
    /// ephemeral loopback port for `run`].
    #[arg(long, value_name = "ADDR", value_parser = sys::advice::parse_listen)]
    pub listen: Option<SocketAddr>,
    /// Allow a non-loopback --listen address.
    #[arg(long)]
    allow_remote: bool,
    /// Add or replace a mount: requests to /NAME/... go to URL/... (repeatable).
    // Parsed after clap, not by a value parser: clap's error would print the value, and an
    // upstream URL may hold a password.
    #[arg(long = "upstream", value_name = "NAME=URL")]
    upstreams: Vec<String>,
    /// Extra root certificates (PEM) for upstream TLS: `FILE`, or `NAME=FILE` for one mount.
    ///
    /// `FILE` is trusted for every upstream, `NAME=FILE` for mount NAME's upstream only
    /// (repeatable). Scope a private CA to the mount that needs it: unscoped, it is trusted
    /// for the API hosts too.
    #[arg(long = "upstream-ca", value_name = "[NAME=]FILE")]
    upstream_ca: Vec<String>,
    /// Write attribution records here instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub records: Option<PathBuf>,
    /// Write the sanitized trace v2 of this run here (replayable with `windowtap replay`).
    #[arg(long, value_name = "FILE")]
    capture: Option<PathBuf>,
    /// Rotate the capture and records files: cut a piece before a line would take it past
    /// SIZE bytes (K, M, G: KiB, MiB, GiB). `--capture cap.jsonl` then writes
    /// cap.00000000.jsonl, cap.00000001.jsonl, …; `windowtap replay` of the pieces in order
    /// gives the run's records (docs/trace-v2.md, "Pieces").
    #[arg(help_heading = "Rotation", hide_short_help = true, long, value_name = "SIZE", value_parser = crate::rotate::parse_size)]
    rotate_size: Option<u64>,
    /// Rotate the capture and records files: cut a piece once it has been open this many
    /// minutes (at its next line: an idle relay writes, and cuts, nothing).
    #[arg(
        help_heading = "Rotation",
        hide_short_help = true,
        long,
        value_name = "MIN"
    )]
    rotate_age: Option<f64>,
    /// Pieces of each rotated file kept on disk, the one being written included; older ones
    /// are deleted, so a file takes at most about N × SIZE [default: 10 with --rotate-size or
    /// --rotate-age].
    #[arg(
        help_heading = "Rotation",
        hide_short_help = true,
        long,
        value_name = "N"
    )]
    rotate_keep: Option<usize>,
    /// How long after an interval's end a still-open window is given up, in milliseconds.
    #[arg(help_heading = "Decision rule", hide_short_help = true, long, default_value_t = 1000.0, value_name = "MS", value_parser = sys::advice::parse_ms)]
    close_wait: f64,
    /// When a window opens for containment: at its first complete tool call or at its
    /// response's completion.
    #[arg(help_heading = "Decision rule", hide_short_help = true, long, default_value = "call", value_name = "call|response", value_parser = parse_window_open)]
    window_open: WindowOpen,
    /// A window not closed this long after it opened becomes broken, in milliseconds.
    #[arg(help_heading = "Decision rule", hide_short_help = true, long, default_value_t = 1_800_000.0, value_name = "MS", value_parser = sys::advice::parse_ms)]
    max_window: f64,
    /// Which windows may be candidates: only eligible ones (same host, a call that could have
    /// issued the MCP call), or all, as the literal rule (for comparison).
    #[arg(help_heading = "Decision rule", hide_short_help = true, long, default_value = "eligible", value_name = "eligible|all",
        value_parser = |s: &str| correlator::Candidates::parse(s).ok_or_else(|| format!("`{s}` is not `eligible` or `all`")))]
    candidates: correlator::Candidates,
    /// Host resolution: `on` gives each stream and MCP call its host (the Claude Code or
    /// Codex process it came from, found in the kernel's socket and process tables; another
    /// user's connection is that user's, a client on another machine's address is remote);
    /// `off` leaves every host null, for clients the tables cannot show or would get wrong
    /// (in a container, on another machine, on another OS): then only each call's own ids
    /// keep sessions apart. See docs/hosts.md.
    #[arg(help_heading = "Decision rule", hide_short_help = true, long, env = "WINDOWTAP_HOSTS", default_value = "on", value_name = "on|off",
        action = clap::ArgAction::Set, value_parser = parse_on_off)]
    hosts: bool,
    /// The Unix socket wrapped MCP servers report their calls on [default:
    /// $XDG_RUNTIME_DIR/windowtap/ingest.sock, else <tmp>/windowtap-<uid>/ingest.sock].
    #[arg(long, env = crate::ingest::ENV, value_name = "PATH")]
    pub ingest: Option<PathBuf>,
    /// A file holding the 64-hex-digit pseudonymization key (default: a random key per run).
    #[arg(
        help_heading = "Decision rule",
        hide_short_help = true,
        long,
        value_name = "FILE"
    )]
    id_key_file: Option<PathBuf>,
    /// Give up connecting to an upstream after this many milliseconds (answered with 504).
    #[arg(help_heading = "Relay tuning", hide_short_help = true, long, default_value_t = 10_000, value_name = "MS", value_parser = sys::advice::parse_whole_ms)]
    connect_timeout: u64,
    /// Give up waiting for an upstream's response head after this many milliseconds
    /// (answered with 504). Bodies may stream for as long as they take.
    #[arg(help_heading = "Relay tuning", hide_short_help = true, long, default_value_t = 300_000, value_name = "MS", value_parser = sys::advice::parse_whole_ms)]
    response_timeout: u64,
    /// End an exchange whose upstream sends nothing of its response body for this many
    /// milliseconds (the client's response then ends unfinished, as when an upstream breaks).
    /// A model that thinks may be quiet for a while: keep it in minutes.
    #[arg(help_heading = "Relay tuning", hide_short_help = true, long, default_value_t = 300_000, value_name = "MS", value_parser = sys::advice::parse_whole_ms)]
    body_timeout: u64,
    /// End an exchange whose client sends nothing of the request body it announced for this
    /// many milliseconds (hosts send their requests whole).
    #[arg(help_heading = "Relay tuning", hide_short_help = true, long, default_value_t = 60_000, value_name = "MS", value_parser = sys::advice::parse_whole_ms)]
    client_body_timeout: u64,
    /// Close a WebSocket tunnel through which nothing has passed either way for this many
    /// milliseconds (it closes between one and two of them after its last byte). A server
    /// that pings keeps its tunnel open, however quiet the session; Codex reconnects when it
    /// needs the socket again.
    #[arg(help_heading = "Relay tuning", hide_short_help = true, long, default_value_t = 1_800_000, value_name = "MS", value_parser = sys::advice::parse_whole_ms)]
    tunnel_idle_timeout: u64,
    /// Close a client connection that has not sent a complete request head within this many
    /// milliseconds of connecting or of its previous response (slow and idle clients alike).
    #[arg(help_heading = "Relay tuning", hide_short_help = true, long, default_value_t = 30_000, value_name = "MS", value_parser = sys::advice::parse_whole_ms)]
    header_timeout: u64,
    /// Open client connections beyond which new clients are refused at once with a 503
    /// [default: half the open files limit less a reserve, and at most a quarter of the
    /// memory at 256 KiB a connection, whichever is smaller].
    #[arg(
        help_heading = "Relay tuning",
        hide_short_help = true,
        long,
        value_name = "N"
    )]
    max_connections: Option<usize>,
    /// On SIGINT/SIGTERM, how long requests and streams already in flight may take to end
    /// before they are cut, in milliseconds (a second signal stops at once).
    #[arg(help_heading = "Relay tuning", hide_short_help = true, long, default_value_t = 10_000, value_name = "MS", value_parser = sys::advice::parse_whole_ms)]
    drain: u64,
    /// Log level (overridden by RUST_LOG): error, warn, info, debug, trace.
    #[arg(long, default_value = "info", value_name = "LEVEL")]
    pub log: String,
    /// Memory all observers together may hold, in MiB (decoders, SSE and WebSocket message
    /// buffers, request bodies being read, and the copies queued for them); one stream may
    /// hold a quarter of it. A stream that
    /// would need more is marked observation_lost (budget) and still forwarded [default: an
    /// eighth of the machine's memory, at most 128].
    #[arg(
        help_heading = "Relay tuning",
        hide_short_help = true,
        long,
        value_name = "MIB"
    )]
    observer_budget: Option<usize>,
    /// Copies queued per observed stream before it is marked observation_lost.
    #[arg(long, default_value_t = 1024, hide = true)]
    observer_queue: usize,
    /// How long an idle upstream connection is kept for reuse, in milliseconds.
    #[arg(long, default_value_t = 60_000, hide = true)]
    upstream_idle: u64,
    #[command(flatten)]
    pub otlp: otlp::OtlpArgs,
    /// Put each model request's spans inside the host's own trace (needs OTLP export).
    ///
    /// A request carrying one
    /// valid W3C `traceparent` header gets its `chat` span (and the `execute_tool` spans
    /// under it) as a child of the host's span. The header is used for nothing else and
    /// written nowhere. Needs OTLP export. With `run`, also turns the host's own trace
    /// export on toward the same endpoint (docs/otlp.md, "Joining the host's trace").
    #[arg(long)]
    pub join_host_trace: bool,
    /// Test hook: observers take nothing up until their stream has ended.
    #[arg(long, hide = true)]
    test_stall_observers: bool,
}

fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("`{s}` is not `on` or `off`")),
    }
}

fn parse_window_open(s: &str) -> Result<WindowOpen, String> {
    WindowOpen::parse(s).ok_or_else(|| format!("`{s}` is not `call` or `response`"))
}

pub fn read_key(path: &PathBuf) -> anyhow::Result<[u8; PSEUDONYM_KEY_LEN]> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Pseudonymizer::key_from_hex(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// Where a run's pseudonymization key is kept: beside its records (or its capture, without
/// records), the file's name with `.key` added.
pub fn key_path(records: &std::path::Path) -> PathBuf {
    let mut name = records.as_os_str().to_owned();
    name.push(".key");
    PathBuf::from(name)
}

/// Writes `key` as 64 hex digits to `path`, mode 0600 (the key turns a raw id into its
/// pseudonym, so it is its owner's alone).
fn write_key(path: &std::path::Path, key: &[u8; PSEUDONYM_KEY_LEN]) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| sys::advice::create_failed("the key file", path, e))?;
    // A file that was there keeps its mode through `open`: make it the owner's now.
    f.set_permissions(std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("setting mode 0600 on {}", path.display()))?;
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    f.write_all(format!("{hex}\n").as_bytes())
        .with_context(|| format!("writing {}", path.display()))
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
    let key = match &args.id_key_file {
        Some(p) => read_key(p)?,
        None => {
            let key = rand::random::<[u8; PSEUDONYM_KEY_LEN]>();
            // Kept beside the records, readable by their owner only, so that `windowtap
            // lookup` can find the records of an id the user has (a `toolu_…`, a response id)
            // by its pseudonym: the raw id is never written, and the key alone says nothing.
            if let Some(records) = args.records.as_ref().or(args.capture.as_ref()) {
                write_key(&key_path(records), &key)?;
            }
            key
        }
    };
    let rotate = rotation(args)?;
    let (sinks, sync) = sinks::open(args.records.as_ref(), args.capture.as_ref(), rotate)?;
    let otlp = args.otlp.resolve()?;
    if args.join_host_trace && otlp.config.is_none() {
        bail!(
            "--join-host-trace puts windowtap's spans in the host's trace, which needs OTLP \
             export: give --otlp-endpoint (or set OTEL_EXPORTER_OTLP_ENDPOINT)"
        );
    }
    for w in &otlp.warnings {
        eprintln!("windowtap: warning: otlp: {w}");
    }
    if let Some(w) = otlp.config.as_ref().and_then(|c| c.clear_text_warning()) {
        eprintln!("windowtap: warning: otlp: {w}");
    }
    if !listen.ip().is_loopback() {
        eprintln!(
            "windowtap: warning: --allow-remote: listening on {listen}, reachable from other \
             machines; clients talk to the relay in plain HTTP, so their API keys and prompts \
             cross the network unencrypted, and anyone who reaches the port can use the relay"
        );
    }
    let mut upstreams = args
        .upstreams
        .iter()
        .map(|a| Mount::parse_arg(a).context("--upstream"))
        .collect::<anyhow::Result<Vec<Mount>>>()?;
    upstreams.extend(extra_mounts.iter().cloned());
    let mounts = Mounts::with_overrides(&upstreams);
    let upstream_roots = upstream_roots(&args.upstream_ca, &mounts)?;
    for w in mounts.iter().filter_map(Mount::clear_text_warning) {
        eprintln!("windowtap: warning: {w}");
    }
    let config = RelayConfig {
        relay: relay::Config {
            listen,
            mounts,
            upstream_roots,
            connect_timeout: Duration::from_millis(args.connect_timeout),
            response_timeout: Duration::from_millis(args.response_timeout),
            body_timeout: Duration::from_millis(args.body_timeout),
            client_body_timeout: Duration::from_millis(args.client_body_timeout),
            upstream_idle: Duration::from_millis(args.upstream_idle),
            header_timeout: Duration::from_millis(args.header_timeout),
            tunnel_idle: Duration::from_millis(args.tunnel_idle_timeout),
            max_connections: args.max_connections,
            observer_queue: args.observer_queue,
            observer_budget: observer_budget(args.observer_budget)?,
            stall: Stall(args.test_stall_observers),
            drain: Duration::from_millis(args.drain),
        },
        correlator: Config {
            close_wait: args.close_wait,
            window_open: args.window_open,
            max_window: args.max_window,
            candidates: args.candidates,
            ..Config::default()
        },
        key,
        ingest: Some(ingest),
        otlp: otlp.config,
        sync,
        one_host: false,
        resolve_hosts: args.hosts,
        join_host_trace: args.join_host_trace,
    };
    Ok((config, sinks))
}

/// Everything a relay run needs, files already opened: the data plane's settings and the
/// live pipeline's.
pub struct RelayConfig {
    pub relay: relay::Config,
    pub correlator: Config,
    /// The pseudonymization key.
    pub key: [u8; PSEUDONYM_KEY_LEN],
    /// Where to listen for wrappers' MCP reports (none: reports only through
    /// [`Running::ingest`](super::Running::ingest)).
    pub ingest: Option<PathBuf>,
    /// OTLP export of every record, when asked for.
    pub otlp: Option<otlp::ExportConfig>,
    /// Second handles on the record and capture files, fsynced on stop.
    pub sync: Vec<File>,
    /// Every client is the one host `windowtap run` launched (its pid, given to
    /// `Hosts::adopt`, is every connection's host; nothing is looked up).
    pub one_host: bool,
    /// Streams and MCP calls get hosts (`--hosts on`); without, every host is null and
    /// nothing is looked up, `one_host` included.
    pub resolve_hosts: bool,
    /// `--join-host-trace`: a request's `traceparent` parents its chat span.
    pub join_host_trace: bool,
}

impl RelayArgs {
    /// The capture file asked for, if any.
    pub fn capture(&self) -> Option<&std::path::Path> {
        self.capture.as_deref()
    }

    /// Whether the records and capture files are written as rotating pieces.
    pub fn rotating(&self) -> bool {
        self.rotate_size.is_some() || self.rotate_age.is_some()
    }
}

/// The rotation `--rotate-size`, `--rotate-age` and `--rotate-keep` ask for (none without a
/// size or an age: `--rotate-keep` alone would never cut).
fn rotation(args: &RelayArgs) -> anyhow::Result<Option<crate::rotate::Limits>> {
    let max_age = match args.rotate_age {
        Some(m) if m.is_finite() && m > 0.0 && m * 60.0 < 1e12 => {
            Some(Duration::from_secs_f64(m * 60.0))
        }
        Some(m) => bail!("--rotate-age takes a number of minutes > 0, got {m}"),
        None => None,
    };
    if args.rotate_size.is_none() && max_age.is_none() {
        if args.rotate_keep.is_some() {
            bail!("--rotate-keep needs --rotate-size or --rotate-age (when to cut a piece)");
        }
        return Ok(None);
    }
    let keep = args.rotate_keep.unwrap_or(10);
    if keep == 0 {
        bail!("--rotate-keep takes a number of pieces >= 1 (the one being written)");
    }
    Ok(Some(crate::rotate::Limits {
        max_bytes: args.rotate_size,
        max_age,
        keep,
    }))
}

const MIB: usize = 1 << 20;

/// The observer budget: `--observer-budget` MiB, else an eighth of physical memory capped at
/// 128 MiB (and at least 16). One stream may hold a quarter of it.
fn observer_budget(mib: Option<usize>) -> anyhow::Result<Budget> {
    let bytes = match mib {
        Some(0) => bail!("--observer-budget takes a number of MiB > 0"),
        Some(m) => m.saturating_mul(MIB),
        None => (relay::physical_memory() / 8).clamp(16 * MIB, 128 * MIB),
    };
    Ok(Budget::new(bytes, bytes / 4))
}

/// `--upstream-ca` values: `NAME=FILE` scopes FILE to mount NAME's upstream (its authority,
/// as the connector sees it); anything else is a FILE for every upstream. A value is scoped
/// only when what stands before its first `=` names a mount, so a path with `=` in it still
/// reads as a path.
fn upstream_roots(values: &[String], mounts: &Mounts) -> anyhow::Result<UpstreamRoots> {
    let mut roots = UpstreamRoots::default();
    let mut all = Vec::new();
    for value in values {
        let scoped = value
            .split_once('=')
            .and_then(|(name, file)| mounts.iter().find(|m| m.name == name).map(|m| (m, file)));
        match scoped {
            Some((mount, file)) => {
                let extra = ExtraRoots::read(std::path::Path::new(file))
                    .with_context(|| format!("--upstream-ca {}=…", mount.name))?;
                roots
                    .scoped
                    .push((mount.authority.as_str().to_string(), extra));
            }
            None => {
                all.push(ExtraRoots::read(std::path::Path::new(value)).context("--upstream-ca")?)
            }
        }
    }
    roots.all = ExtraRoots::merge(all);
    Ok(roots)
}
