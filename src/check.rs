//! `windowtap check`: validates trace (v2, and v1) and records v1 files with the same strict readers that
//! replay and report use (one implementation of the rules), and says where each file is wrong.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use correlator::records::RecordReader;
use serde_json::Value;

use crate::trace_file::{files, TraceFile};

#[derive(clap::Args)]
#[command(after_help = "\
A file whose first line is a trace header ({\"type\":\"trace\",…}) is read as a trace (version 2 or 1), any \
other as records v1, with the readers `replay` and `report` use: a trace that `check` passes replays, \
header options included. An empty file is a records file with no records (what a relay writes when \
no MCP call ran), never a trace: `check` passes it saying so, and `replay` refuses it. A directory means every *.jsonl file directly in it. Prints \
`FILE: ok (N events)` or `FILE: ok (N records)` for each valid file, and \
`FILE:LINE: field `x`: message` for the first error of each invalid one; exits 1 if any file \
is invalid.

Examples:
  windowtap check traces/ traces/expected/
  windowtap check capture.jsonl records.jsonl")]
pub struct CheckArgs {
    /// Trace (v2 or v1) or records v1 files, or directories of them.
    #[arg(required = true, value_name = "FILE|DIR")]
    inputs: Vec<PathBuf>,
}

/// What a file holds, judged by its first non-empty line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Trace,
    Records,
    /// Nothing but blank lines.
    Empty,
}

fn kind_of(path: &Path) -> std::io::Result<Kind> {
    let mut input = BufReader::new(File::open(path)?);
    let mut line = String::new();
    loop {
        line.clear();
        // A read error (or invalid UTF-8) is left to the reader, which names the line.
        // An empty file is a records file with no records: a relay or run during which no MCP
        // call ran writes exactly that. It is not a trace (a trace begins with its header
        // line), and `check` says so in its verdict, as `replay` refuses it.
        match input.read_line(&mut line) {
            Ok(0) => return Ok(Kind::Empty),
            Ok(_) => {}
            Err(_) => return Ok(Kind::Trace),
        }
        if !line.trim().is_empty() {
            break;
        }
    }
    let is_trace = serde_json::from_str::<Value>(line.trim_end())
        .ok()
        .and_then(|v| v.get("type").and_then(Value::as_str).map(|t| t == "trace"))
        .unwrap_or(false);
    Ok(if is_trace { Kind::Trace } else { Kind::Records })
}

/// Checks one file: `Ok` with its summary line, or `Err` with its first error.
fn check_file(path: &Path) -> Result<String, String> {
    let name = path.display().to_string();
    let kind = kind_of(path).map_err(|e| format!("{name}: cannot read: {e}"))?;
    match kind {
        Kind::Trace => {
            // The reader `replay` uses, header options included: one verdict for both.
            let mut trace = TraceFile::open(path).map_err(|e| e.to_string())?;
            let mut n = 0usize;
            while let Some(ev) = trace.next_event() {
                ev.map_err(|e| e.to_string())?;
                n += 1;
            }
            Ok(format!("{name}: ok ({n} events)"))
        }
        Kind::Empty => Ok(format!(
            "{name}: ok (0 records; an empty file, so not a trace: replay refuses it)"
        )),
        Kind::Records => {
            let file = File::open(path).map_err(|e| format!("{name}: cannot read: {e}"))?;
            let input = BufReader::with_capacity(1 << 16, file);
            let mut n = 0usize;
            for r in RecordReader::new(input, name.clone()) {
                r.map_err(|e| e.to_string())?;
                n += 1;
            }
            Ok(format!("{name}: ok ({n} records)"))
        }
    }
}

pub fn main(args: CheckArgs) -> anyhow::Result<ExitCode> {
    use std::io::Write;
    let mut out = sys::stdout::stdout();
    let mut all_ok = true;
    for file in files(&args.inputs) {
        match file.and_then(|f| check_file(&f)) {
            Ok(line) => writeln!(out, "{line}")?,
            Err(e) => {
                all_ok = false;
                eprintln!("{e}");
            }
        }
    }
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
