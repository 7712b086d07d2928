//! What `windowtap run` plans for its host: which host it is, the MCP servers it would start,
//! and how each is run under the wrapper.

use std::path::{Path, PathBuf};

/// An MCP server the host would start, and whether windowtap observes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Server {
    pub alias: String,
    /// Where it was declared (a file, a flag, a scope).
    pub origin: String,
    pub observed: bool,
    /// Why it is not observed.
    pub note: Option<String>,
    /// It was declared under `windowtap wrap` already (a configuration written for the relay
    /// on its own): run wraps it once, with its own socket.
    pub rewrapped: bool,
}

/// How to run a server under the wrapper.
#[derive(Debug, Clone)]
pub struct WrapWith {
    /// The windowtap executable.
    pub exe: PathBuf,
    /// The relay's ingest socket.
    pub ingest: PathBuf,
}

impl WrapWith {
    /// The command and arguments that run `command args…` under `windowtap wrap`. A server
    /// already declared as `windowtap wrap … -- SERVER…` is wrapped once: the inner server
    /// gets run's wrapper, not a second one (two wrappers, both reporting to run's socket
    /// through the `WINDOWTAP_INGEST` run gives the host, would count every call twice).
    pub fn command(&self, alias: &str, command: &str, args: &[String]) -> (String, Vec<String>) {
        if let Some((inner, inner_args)) = self.already_wrapped(command, args) {
            return self.command(alias, inner, inner_args);
        }
        let mut wargs = vec![
            "wrap".to_string(),
            "--alias".to_string(),
            alias.to_string(),
            "--ingest".to_string(),
            self.ingest.display().to_string(),
            "--".to_string(),
            command.to_string(),
        ];
        wargs.extend(args.iter().cloned());
        (self.exe.display().to_string(), wargs)
    }

    /// The server inside `command args…` when that is `windowtap wrap [options] -- SERVER…`:
    /// `windowtap` by name (as the ready configs in examples/mcp/ say it) or this very
    /// executable by path.
    pub fn already_wrapped<'a>(
        &self,
        command: &str,
        args: &'a [String],
    ) -> Option<(&'a str, &'a [String])> {
        let path = Path::new(command);
        let ours = path.file_name().is_some_and(|n| n == "windowtap")
            || (path.is_absolute()
                && std::fs::canonicalize(path).ok() == std::fs::canonicalize(&self.exe).ok());
        if !ours || args.first().map(String::as_str) != Some("wrap") {
            return None;
        }
        let at = args.iter().position(|a| a == "--")?;
        let (inner, rest) = args[at + 1..].split_first()?;
        Some((inner.as_str(), rest))
    }
}

/// Which host `windowtap run` launches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Host {
    Claude,
    Codex,
    /// Any other program (an agent built on an SDK, `python my_agent.py`, `node agent.js`):
    /// its SDKs are pointed at the relay by their base-URL variables, and the MCP servers it
    /// starts under `windowtap wrap` find run's socket in its environment. Its MCP
    /// configuration is its own code, which run neither reads nor rewrites.
    Program,
}

impl Host {
    pub(crate) fn of(program: &str) -> Host {
        let name = Path::new(program)
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("");
        if name.starts_with("claude") {
            Host::Claude
        } else if name.starts_with("codex") {
            Host::Codex
        } else {
            Host::Program
        }
    }
}
