//! `windowtap check`: validates trace (v2, and v1) and records v1 files with the same strict readers that
//! replay and report use (one implementation of the rules), and says where each file is wrong.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use correlator::records::RecordReader;
use correlator::trace::TraceReader;
use serde_json::Value;

#[derive(clap::Args)]
#[command(after_help = "\
A file whose first line is a trace header ({\"type\":\"trace\",…}) is read as a trace (version 2 or 1), any \
other as records v1. A directory means every *.jsonl file directly in it. Prints \
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
}

fn kind_of(path: &Path) -> std::io::Result<Kind> {
    let mut input = BufReader::new(File::open(path)?);
    let mut line = String::new();
    loop {
        line.clear();
        // A read error (or invalid UTF-8) is left to the reader, which names the line.
        if input.read_line(&mut line).unwrap_or(0) == 0 {
            return Ok(Kind::Records);
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
    let file = File::open(path).map_err(|e| format!("{name}: cannot read: {e}"))?;
    let input = BufReader::with_capacity(1 << 16, file);
    match kind {
        Kind::Trace => {
            let mut n = 0usize;
            for ev in TraceReader::new(input, name.clone()) {
                ev.map_err(|e| e.to_string())?;
                n += 1;
            }
            Ok(format!("{name}: ok ({n} events)"))
        }
        Kind::Records => {
            let mut n = 0usize;
            for r in RecordReader::new(input, name.clone()) {
                r.map_err(|e| e.to_string())?;
                n += 1;
            }
            Ok(format!("{name}: ok ({n} records)"))
        }
    }
}

/// The files named by the inputs, directories expanded to their `*.jsonl` files in name order.
fn files(inputs: &[PathBuf]) -> Vec<Result<PathBuf, String>> {
    let mut out = Vec::new();
    for input in inputs {
        if !input.is_dir() {
            out.push(Ok(input.clone()));
            continue;
        }
        match std::fs::read_dir(input) {
            Err(e) => out.push(Err(format!(
                "{}: cannot read directory: {e}",
                input.display()
            ))),
            Ok(entries) => {
                let mut found: Vec<PathBuf> = entries
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "jsonl"))
                    .collect();
                found.sort();
                if found.is_empty() {
                    out.push(Err(format!(
                        "{}: no *.jsonl files in this directory",
                        input.display()
                    )));
                }
                out.extend(found.into_iter().map(Ok));
            }
        }
    }
    out
}

pub fn main(args: CheckArgs) -> anyhow::Result<ExitCode> {
    use std::io::Write;
    let mut out = crate::stdout::stdout();
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
