//! `windowtap env claude|codex`: the one override that points a host at a running relay, as
//! lines a shell evaluates: `eval "$(windowtap env claude)"`.

use std::io::Write;
use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;
use std::process::ExitCode;

use live::ingest;

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Host {
    Claude,
    Codex,
}

#[derive(clap::Args)]
#[command(after_help = "\
Prints shell lines (sh, bash, zsh) to evaluate: for Claude Code an `export \
ANTHROPIC_BASE_URL=…`; for Codex, which ignores OPENAI_BASE_URL, a shell function `codex` \
that passes `-c openai_base_url=…` on every run. Both also export WINDOWTAP_INGEST, the \
relay's ingest socket, for MCP servers run under `windowtap wrap`.

The URL and the socket always belong to one relay: with a socket (--ingest, WINDOWTAP_INGEST, \
or a relay at the default place) the URL is that relay's, and a --relay naming another relay \
is refused, saying which relay the socket belongs to.

Examples:
  eval \"$(windowtap env claude)\" && claude
  eval \"$(windowtap env codex --ingest /run/user/1000/wt-b.sock)\" && codex")]
pub struct EnvArgs {
    /// Which host to point at the relay.
    pub host: Host,
    /// The relay's address, as it printed it [default: the relay listening on the ingest
    /// socket, else http://127.0.0.1:8787].
    #[arg(long, value_name = "URL")]
    pub relay: Option<String>,
    /// The relay's ingest socket, for wrapped MCP servers [default: the relay's default path,
    /// when a relay listens there].
    #[arg(long, env = ingest::ENV, value_name = "PATH")]
    pub ingest: Option<PathBuf>,
    /// How Codex logs in, which picks its mount: `auto` reads $CODEX_HOME/auth.json.
    #[arg(long, default_value = "auto", value_name = "auto|api|chatgpt", value_parser = ["auto", "api", "chatgpt"])]
    pub codex_auth: String,
    /// Codex: instead of a shell function, write DIR/codex, a script that runs the codex on
    /// PATH with the relay's URL, and print the PATH line that puts DIR first: scripts,
    /// `timeout` and editors see a program on PATH, never a shell function. Remove DIR/codex
    /// (or the line) to go back.
    #[arg(long, value_name = "DIR")]
    pub shim: Option<PathBuf>,
}

/// Where `--relay` points when nothing says otherwise: `windowtap relay`'s default address.
const DEFAULT_RELAY: &str = "http://127.0.0.1:8787";

pub fn main(args: EnvArgs) -> anyhow::Result<ExitCode> {
    if let Some(url) = &args.relay {
        relay_base(url)?;
    }
    let (relay, ingest) = pair(args.relay.as_deref(), args.ingest)?;
    let relay = relay_base(&relay)?;
    let chatgpt = match args.codex_auth.as_str() {
        "api" => false,
        "chatgpt" => true,
        _ => crate::codex::uses_chatgpt_login(&crate::codex::default_home()),
    };
    let host = match args.host {
        Host::Claude => Lines::Claude,
        Host::Codex => Lines::Codex { chatgpt },
    };
    let mut text = lines(host, relay, ingest.as_ref().and_then(|p| p.to_str()));
    if let (Lines::Codex { chatgpt }, Some(dir)) = (host, &args.shim) {
        text = shim_lines(&text, &write_shim(dir, relay, chatgpt)?);
    }
    sys::stdout::stdout().write_all(text.as_bytes())?;
    // Warnings go to stderr, which `eval "$(…)"` leaves on the terminal: the lines are printed
    // all the same (a relay may be started after them), but never silently wrong.
    if let Some(why) = relay_unreachable(relay) {
        eprintln!(
            "windowtap env: warning: no relay answers at {relay} ({why}): a host pointed there \
             retries for minutes with nothing on screen. Start it first: windowtap relay"
        );
    }
    if matches!(args.host, Host::Claude) {
        if let Some(origin) = claude_settings_override() {
            eprintln!(
                "windowtap env: warning: {origin} sets ANTHROPIC_BASE_URL in its `env`, which \
                 Claude Code applies over the environment: the export above is ignored, Claude \
                 Code goes past the relay and every MCP call ends `no_window`. Remove it from \
                 {origin} (and point the relay at it: --upstream anthropic=URL), or use \
                 `windowtap run`, which adopts it as the upstream"
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes `dir/codex`: a script that runs the codex found on PATH outside `dir` with the
/// relay's URL. Returns `dir`, as the PATH line will name it.
fn write_shim(dir: &std::path::Path, relay: &str, chatgpt: bool) -> anyhow::Result<String> {
    use anyhow::Context;
    use std::os::unix::fs::PermissionsExt;
    let dir = std::path::absolute(dir).context("--shim: the directory's absolute path")?;
    let shown = dir
        .to_str()
        .filter(|d| !d.contains('\''))
        .context("--shim: the directory's path must be UTF-8 without a single quote")?
        .to_string();
    let real = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .filter(|d| std::path::absolute(d).ok().as_deref() != Some(dir.as_path()))
        .map(|d| d.join("codex"))
        .find(|p| p.is_file())
        .context("--shim: no codex on PATH (outside the shim's directory) to run")?;
    let real = real
        .to_str()
        .filter(|r| !r.contains('\''))
        .context("--shim: codex's path must be UTF-8 without a single quote")?
        .to_string();
    let mount = if chatgpt { "chatgpt" } else { "openai/v1" };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {shown}"))?;
    let path = dir.join("codex");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\n# Written by `windowtap env codex --shim`: codex through the relay at \
             {relay}. Remove this file to go back.\nexec '{real}' -c 'openai_base_url=\"{relay}/{mount}\"' \"$@\"\n"
        ),
    )
    .with_context(|| format!("writing {}", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("making {} executable", path.display()))?;
    Ok(shown)
}

/// The Codex lines with the shell function replaced by the PATH line of the shim in `dir`.
fn shim_lines(text: &str, dir: &str) -> String {
    let mut s = format!(
        "# codex on PATH is {dir}/codex, which passes the relay's URL on every run (scripts, \
         timeout and editors see it too); remove it to go back.\n"
    );
    for l in text.lines() {
        if l.starts_with("codex() {") || l.starts_with("# Codex ignores") {
            continue;
        }
        s.push_str(l);
        s.push('\n');
    }
    s.push_str(&format!("export PATH='{dir}':\"$PATH\"\n"));
    s
}

/// Why nothing answers at the relay's address, or `None` when something accepts a
/// connection there (bounded: a loopback relay answers at once).
fn relay_unreachable(relay: &str) -> Option<String> {
    use std::net::ToSocketAddrs;
    let uri = relay.parse::<http::Uri>().ok()?;
    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']');
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("https") {
            443
        } else {
            80
        });
    let addrs: Vec<std::net::SocketAddr> = match (host, port).to_socket_addrs() {
        Ok(a) => a.collect(),
        Err(_) => return Some("its host name does not resolve".into()),
    };
    let mut last = None;
    for a in addrs {
        match std::net::TcpStream::connect_timeout(&a, std::time::Duration::from_secs(2)) {
            Ok(_) => return None,
            Err(e) => last = Some(e),
        }
    }
    Some(match last {
        Some(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            "nothing listens there".to_string()
        }
        Some(e) => format!("connecting failed: {}", e.kind()),
        None => "no address".to_string(),
    })
}

/// The settings file whose `env` sets ANTHROPIC_BASE_URL for Claude Code in this directory,
/// if one does (the user's, or the project's).
fn claude_settings_override() -> Option<String> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let sources = crate::claude::Sources {
        user_config: home.as_ref().map(|h| h.join(".claude.json")),
        user_settings: home.as_ref().map(|h| h.join(".claude/settings.json")),
        cwd: std::env::current_dir().ok()?,
    };
    crate::claude::settings_base_url(&[], &sources)
        .ok()
        .flatten()
        .map(|(_, origin)| origin)
}

/// The relay URL and the ingest socket to print, which belong to one relay: the socket's
/// relay says which URL that is (the note it keeps beside its socket, held against the pid
/// the kernel gives for the socket's listener). Without a socket only the URL is printed, and
/// a comment says to export the socket the relay printed.
fn pair(relay: Option<&str>, given: Option<PathBuf>) -> anyhow::Result<(String, Option<PathBuf>)> {
    let explicit = given.is_some();
    let socket = given.or_else(|| {
        let p = ingest::default_path();
        std::fs::symlink_metadata(&p)
            .ok()
            .filter(|m| m.file_type().is_socket())
            .map(|_| p)
    });
    let Some(socket) = socket else {
        return Ok((relay.unwrap_or(DEFAULT_RELAY).to_string(), None));
    };
    let shown = socket.display();
    match ingest::socket_owner(&socket, !explicit) {
        ingest::SocketOwner::Relay(note) => {
            let own = format!("http://{}", note.listen);
            match relay {
                Some(url) if !same_listener(url, note.listen) => anyhow::bail!(
                    "the ingest socket {shown} belongs to the relay on {own} (pid {}), not to \
                     {url}: printing both would send the host to one relay and its MCP reports \
                     to another. Give the socket of the relay on {url} (--ingest PATH or {}; it \
                     printed it when it started), or leave out --relay to use the relay on {own}",
                    note.pid,
                    ingest::ENV
                ),
                _ => Ok((relay.map(str::to_string).unwrap_or(own), Some(socket))),
            }
        }
        // A default socket nobody answers on is a stale one: as if there were none.
        ingest::SocketOwner::Unreachable(_) if !explicit => {
            Ok((relay.unwrap_or(DEFAULT_RELAY).to_string(), None))
        }
        ingest::SocketOwner::Unreachable(why) => anyhow::bail!(
            "no relay can be reached on the ingest socket {shown} ({why}): start the relay with \
             --ingest {shown} first, or give the socket the running relay printed"
        ),
        ingest::SocketOwner::Unknown { pid } => anyhow::bail!(
            "cannot tell which relay listens on the ingest socket {shown}{}: it keeps no note \
             of its address beside the socket ({}), as `windowtap relay` does (a `windowtap \
             run` keeps its socket to itself). Give the socket of a `windowtap relay`",
            pid.map(|p| format!(" (pid {p})")).unwrap_or_default(),
            ingest::note_path(&socket).display()
        ),
    }
}

/// Whether `url` names the relay listening on `listen`: the same port, and the same address
/// (`localhost` for a loopback one).
fn same_listener(url: &str, listen: std::net::SocketAddr) -> bool {
    let Ok(uri) = url.parse::<http::Uri>() else {
        return false;
    };
    let Some(port) = uri.port_u16() else {
        return false;
    };
    let host = uri
        .host()
        .unwrap_or("")
        .trim_start_matches('[')
        .trim_end_matches(']');
    let host_ok = match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ip == listen.ip(),
        Err(_) => host.eq_ignore_ascii_case("localhost") && listen.ip().is_loopback(),
    };
    port == listen.port() && host_ok
}

/// The relay URL without a trailing slash, refused if it could not sit inside the quotes of a
/// shell line unchanged.
fn relay_base(url: &str) -> anyhow::Result<&str> {
    let ok_scheme = url.starts_with("http://") || url.starts_with("https://");
    let ok_chars = url
        .bytes()
        .all(|b| b.is_ascii_graphic() && !b"'\"\\`$".contains(&b));
    if !ok_scheme || !ok_chars {
        anyhow::bail!(
            "--relay must be an http:// or https:// URL without quotes, spaces, `$` or backslashes"
        );
    }
    Ok(url.trim_end_matches('/'))
}

/// Which lines to print.
#[derive(Clone, Copy)]
enum Lines {
    Claude,
    /// Codex, logged in with ChatGPT (the `/chatgpt` mount) or not (`/openai/v1`).
    Codex {
        chatgpt: bool,
    },
}

/// Shell lines: every one is a comment, an `export` or a function definition.
fn lines(host: Lines, relay: &str, ingest: Option<&str>) -> String {
    let mut s = String::new();
    match host {
        Lines::Claude => {
            s.push_str(&format!("export ANTHROPIC_BASE_URL={relay}/anthropic\n"));
        }
        Lines::Codex { chatgpt } => {
            let (mount, login, other, other_flag) = if chatgpt {
                ("chatgpt", "ChatGPT login", "openai/v1", "api")
            } else {
                ("openai/v1", "API key login", "chatgpt", "chatgpt")
            };
            s.push_str(&format!(
                "# Codex ignores OPENAI_BASE_URL: this shell function passes the relay's URL to every \
                 codex run ({login}; for the other login, /{other}: --codex-auth {other_flag}).\n"
            ));
            s.push_str(&format!(
                "codex() {{ command codex -c 'openai_base_url=\"{relay}/{mount}\"' \"$@\"; }}\n"
            ));
            s.push_str(
                "# Scripts, `timeout` and editors do not see a shell function: `windowtap env \
                 codex --shim DIR` puts a codex of the same effect on PATH instead.\n",
            );
        }
    }
    match ingest {
        // Single quotes keep the path as it is; a path containing one is left as a hint.
        Some(p) if !p.contains('\'') => {
            s.push_str(&format!("export {}='{p}'\n", ingest::ENV));
        }
        _ => s.push_str(&format!(
            "# For wrapped MCP servers: export {}=<the ingest socket the relay printed>\n",
            ingest::ENV
        )),
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_gets_its_base_url_under_the_anthropic_mount() {
        let out = lines(
            Lines::Claude,
            relay_base("http://127.0.0.1:9000/").unwrap(),
            Some("/run/x/ingest.sock"),
        );
        assert_eq!(
            out,
            "export ANTHROPIC_BASE_URL=http://127.0.0.1:9000/anthropic\nexport WINDOWTAP_INGEST='/run/x/ingest.sock'\n"
        );
    }

    #[test]
    fn codex_gets_a_shell_function_for_its_login() {
        let relay = relay_base("http://127.0.0.1:8787").unwrap();
        let out = lines(Lines::Codex { chatgpt: false }, relay, None);
        assert!(
            out.contains("codex() { command codex -c 'openai_base_url=\"http://127.0.0.1:8787/openai/v1\"' \"$@\"; }\n"),
            "{out}"
        );
        let out = lines(Lines::Codex { chatgpt: true }, relay, None);
        assert!(
            out.contains("codex() { command codex -c 'openai_base_url=\"http://127.0.0.1:8787/chatgpt\"' \"$@\"; }\n"),
            "{out}"
        );
        assert!(
            out.contains("# For wrapped MCP servers: export WINDOWTAP_INGEST="),
            "{out}"
        );
    }

    #[test]
    fn a_url_names_a_listener_by_address_and_port() {
        let l: std::net::SocketAddr = "127.0.0.1:18102".parse().unwrap();
        assert!(same_listener("http://127.0.0.1:18102", l));
        assert!(same_listener("http://localhost:18102/", l));
        assert!(!same_listener("http://127.0.0.1:8787", l));
        assert!(!same_listener("http://127.0.0.2:18102", l));
        assert!(!same_listener("http://127.0.0.1", l));
    }

    #[test]
    fn a_url_that_would_break_the_quoting_is_refused() {
        for bad in [
            "127.0.0.1:8787",
            "http://x'y",
            "http://x y",
            "http://$(id)",
            "ftp://x",
        ] {
            assert!(relay_base(bad).is_err(), "{bad}");
        }
    }
}
