//! `windowtap run`: one command that starts the relay and the ingest socket, points a host
//! at them, and routes every stdio MCP server through the wrapper.

pub mod claude;
pub mod codex;

use std::path::PathBuf;

/// An MCP server the host would start, and whether windowtap observes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Server {
    pub alias: String,
    /// Where it was declared (a file, a flag, a scope).
    pub origin: String,
    pub observed: bool,
    /// Why it is not observed.
    pub note: Option<String>,
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
    /// The command and arguments that run `command args…` under `windowtap wrap`.
    pub fn command(&self, alias: &str, command: &str, args: &[String]) -> (String, Vec<String>) {
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
}
