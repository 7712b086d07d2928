//! `windowtap replay`: the correlator over captured or hand-written traces, offline.

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use correlator::records::Summary;
use correlator::sanitize::Door;
use correlator::trace::TraceReader;
use correlator::{Candidates, Config, Correlator, WindowOpen};
use serde_json::Value;

use crate::otlp;

#[derive(clap::Args)]
#[command(after_help = "\
Options not given on the command line are read from the trace header when it has them \
(`close_wait`, `window_open`, `max_window`, `candidates`), else the defaults apply.

Examples:
  windowtap replay traces/
  windowtap replay capture.jsonl --close-wait 50 -o records.jsonl
  windowtap replay traces/ --otlp-endpoint http://127.0.0.1:6006")]
pub struct ReplayArgs {
    /// Trace files (v2, or v1), or directories: every `*.jsonl` directly in a directory, each replayed
    /// on its own, in name order.
    #[arg(required = true, value_name = "TRACE|DIR")]
    inputs: Vec<PathBuf>,
    /// How long after an interval's end (and its window's response end) a still-open window
    /// is given up, in milliseconds [default: 1000].
    #[arg(long, value_name = "MS")]
    close_wait: Option<f64>,
    /// When a window opens for containment: at its response's first complete tool call, or
    /// at the response's completion [default: call].
    #[arg(long, value_name = "call|response", value_parser = parse_window_open)]
    window_open: Option<WindowOpen>,
    /// A window not closed this long after it opened becomes broken, in milliseconds
    /// [default: 1800000].
    #[arg(long, value_name = "MS")]
    max_window: Option<f64>,
    /// Which windows may be candidates: only eligible ones (same host, a call that could have
    /// issued the MCP call), or all, as the literal rule [default: eligible].
    #[arg(long, value_name = "eligible|all", value_parser = parse_candidates)]
    candidates: Option<Candidates>,
    /// Write records here instead of stdout (`-`: stdout).
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
    #[command(flatten)]
    otlp: otlp::OtlpArgs,
}

fn parse_window_open(s: &str) -> Result<WindowOpen, String> {
    WindowOpen::parse(s).ok_or_else(|| format!("`{s}` is not `call` or `response`"))
}

fn parse_candidates(s: &str) -> Result<Candidates, String> {
    Candidates::parse(s).ok_or_else(|| format!("`{s}` is not `eligible` or `all`"))
}

/// Every trace file named by the inputs, directories expanded.
fn trace_files(inputs: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for input in inputs {
        let meta = std::fs::metadata(input).with_context(|| format!("{}", input.display()))?;
        if meta.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(input)
                .with_context(|| format!("reading directory {}", input.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "jsonl"))
                .collect();
            found.sort();
            if found.is_empty() {
                bail!(
                    "{}: no *.jsonl trace files in this directory",
                    input.display()
                );
            }
            files.extend(found);
        } else {
            files.push(input.clone());
        }
    }
    Ok(files)
}

/// What each record says it came from when several traces are replayed at once (records v1
/// `trace`): the file's name, without its directory; a name given twice gets `#2`, `#3`, …
/// One trace alone names none, so its records are byte for byte those of a live run.
fn trace_names(files: &[PathBuf]) -> Vec<Option<String>> {
    if files.len() < 2 {
        return vec![None; files.len()];
    }
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    files
        .iter()
        .map(|f| {
            let base = f
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| f.display().to_string());
            let n = seen.entry(base.clone()).or_default();
            *n += 1;
            Some(if *n == 1 { base } else { format!("{base}#{n}") })
        })
        .collect()
}

fn number_option(
    header: &serde_json::Map<String, Value>,
    key: &str,
    file: &Path,
) -> anyhow::Result<Option<f64>> {
    match header.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_f64() {
            Some(v) if v.is_finite() && v >= 0.0 => Ok(Some(v)),
            _ => bail!(
                "{}:1: header field `{key}` must be a number >= 0",
                file.display()
            ),
        },
        Some(_) => bail!(
            "{}:1: header field `{key}` must be a number",
            file.display()
        ),
    }
}

/// The options for one trace: the command line first, then the trace header, then defaults.
fn config_for(
    args: &ReplayArgs,
    header: Option<&serde_json::Map<String, Value>>,
    file: &Path,
) -> anyhow::Result<Config> {
    let mut c = Config::default();
    if let Some(h) = header {
        if let Some(v) = number_option(h, "close_wait", file)? {
            c.close_wait = v;
        }
        if let Some(v) = number_option(h, "max_window", file)? {
            c.max_window = v;
        }
        match h.get("window_open") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => {
                // The header is input: its value is shown only as `quote` lets it out.
                c.window_open = WindowOpen::parse(s).ok_or_else(|| {
                    anyhow::anyhow!(
                        "{}:1: header field `window_open`: `{}` is not `call` or `response`",
                        file.display(),
                        correlator::sanitize::quote(s)
                    )
                })?
            }
            Some(_) => bail!(
                "{}:1: header field `window_open` must be a string",
                file.display()
            ),
        }
        match h.get("candidates") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => {
                c.candidates = parse_candidates(s).map_err(|e| {
                    anyhow::anyhow!("{}:1: header field `candidates`: {e}", file.display())
                })?
            }
            Some(_) => bail!(
                "{}:1: header field `candidates` must be a string",
                file.display()
            ),
        }
    }
    if let Some(v) = args.close_wait {
        c.close_wait = v;
    }
    if let Some(v) = args.max_window {
        c.max_window = v;
    }
    if let Some(v) = args.window_open {
        c.window_open = v;
    }
    if let Some(v) = args.candidates {
        c.candidates = v;
    }
    Ok(c)
}

/// One replayed trace: its records, and the wall-clock time of its clock's 0 if the header
/// says (`epoch_unix_ms`), for OTLP span times.
pub struct Replayed {
    pub records: Vec<correlator::Record>,
    pub epoch_unix_ms: Option<f64>,
}

/// Replays one trace; the records are returned only when the whole trace read cleanly.
pub fn replay_file(file: &Path, args: &ReplayArgs) -> anyhow::Result<Replayed> {
    let f = File::open(file).with_context(|| format!("opening {}", file.display()))?;
    let mut reader = TraceReader::new(
        BufReader::with_capacity(1 << 16, f),
        file.display().to_string(),
    );
    let mut out = Vec::new();
    let mut correlator: Option<Correlator> = None;
    while let Some(ev) = reader.next() {
        let ev = ev?;
        let c = match &mut correlator {
            Some(c) => c,
            None => correlator.insert(Correlator::new(config_for(args, reader.header(), file)?)),
        };
        c.push(&ev, &mut out);
    }
    if let Some(c) = &mut correlator {
        // A live capture says how far the relay's clock got: decisions it took while idle,
        // after the last event, happen at the same times here.
        if let Some(end) = reader
            .header()
            .and_then(|h| h.get("end"))
            .and_then(Value::as_f64)
        {
            c.advance(end, &mut out);
        }
        c.finish(&mut out);
    } else {
        // A header with no events: still check its options.
        config_for(args, reader.header(), file)?;
    }
    let epoch_unix_ms = match reader.header() {
        Some(h) => number_option(h, "epoch_unix_ms", file)?,
        None => None,
    };
    Ok(Replayed {
        records: out,
        epoch_unix_ms,
    })
}

pub fn main(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    if let Some(v) = args
        .close_wait
        .into_iter()
        .chain(args.max_window)
        .find(|v| !v.is_finite() || *v < 0.0)
    {
        bail!("--close-wait and --max-window take a number of milliseconds >= 0, got {v}");
    }
    let files = trace_files(&args.inputs)?;
    let resolved = args.otlp.resolve()?;
    for w in &resolved.warnings {
        eprintln!("windowtap: warning: otlp: {w}");
    }
    let exporter = resolved
        .config
        .map(otlp::BlockingExporter::start)
        .transpose()?;
    let mut sink: Box<dyn Write> = match args.output.as_ref().filter(|p| p.as_os_str() != "-") {
        Some(p) => Box::new(BufWriter::new(
            File::create(p).with_context(|| format!("creating {}", p.display()))?,
        )),
        None => Box::new(BufWriter::new(crate::stdout::stdout())),
    };
    let mut summary = Summary::default();
    let door = Door::replay();
    let names = trace_names(&files);
    for (file, name) in files.iter().zip(&names) {
        let replayed = replay_file(file, &args)?;
        let records = &replayed.records;
        let mut cleared = Vec::with_capacity(records.len());
        for r in records {
            summary.add(r);
            let c = door
                .record_from(r, name.as_deref())
                .with_context(|| format!("{}: a record", file.display()))?;
            sink.write_all(c.line().as_bytes())
                .context("writing records")?;
            cleared.push(c);
        }
        // Records first: export may wait for queue room (bounded), the records never do.
        if let Some(e) = &exporter {
            let epoch = otlp::replay_epoch(replayed.epoch_unix_ms, records, otlp::now_unix_nanos());
            otlp::offline::trace_spans(file, &cleared, epoch, |s| {
                e.span(s);
            })
            .with_context(|| format!("{}: reading it again for OTLP", file.display()))?;
        }
    }
    sink.flush().context("writing records")?;
    drop(sink);
    eprintln!("{summary}");
    if let Some(e) = exporter {
        // Export is best effort: a collector that is down costs spans, not the exit code.
        let (endpoint, report) = e.finish();
        let line = otlp::report_line(&endpoint, &report);
        if report.lost() > 0 {
            eprintln!("windowtap: warning: {line}");
        } else {
            eprintln!("{line}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
