//! `windowtap report`: attribution records (and, optionally, the trace they came from) drawn as
//! one self-contained HTML timeline.

#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

mod model;
mod render;

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use correlator::records::read_all_from;
use correlator::sanitize::{quote, Door};
use correlator::trace::TraceReader;
use correlator::Config;
use correlator::{Event, EventKind, Millis, Record};
use serde_json::Value;

pub use model::Timeline;
pub use render::{render, Section};

#[derive(clap::Args)]
#[command(after_help = "\
A lane per thread, subagents nested under the thread whose Agent/Task/spawn_agent call started \
them; each window is a bar from its first complete tool call to the request that continued it; \
each MCP interval is a mark coloured by its decision and labelled with its tool and decision; \
hover for times and evidence. Find a call by tool, alias, decision, thread or id in the find \
box or the list of calls; zoom by a range, a drag, a click on a turn's flag or a window, or the \
address: `report.html#t=12.5,20` shows 12.5 s to 20 s. \
Text stays at 11 px or more (a narrow window scrolls sideways). A --trace none of whose MCP \
intervals are the records' is refused; one that lacks some is drawn under a warning. Without --trace only the windows that intervals \
were attributed to are known, and abstentions go on an `unattributed` lane; with it every \
window is drawn and each abstention sits beside the windows open at its start, the hover \
text of a window gives its response's model, tokens and stop reason, and a dark dashed line \
marks where each turn starts (a request that continues no response with a tool call). Past \
1500 intervals the lanes become density strips. Records of several traces (`windowtap replay \
DIR` names each record's trace) are drawn one timeline per trace, each with the --trace of \
the same file name; records that hold an interval id twice without naming their traces are \
refused.

Examples:
  windowtap replay capture.jsonl -o records.jsonl
  windowtap report records.jsonl --trace capture.jsonl -o timeline.html
  windowtap replay traces/ -o all.jsonl && windowtap report all.jsonl -o all.html")]
pub struct ReportArgs {
    /// Records v1 file (as written by `windowtap replay` or a live run).
    #[arg(value_name = "RECORDS")]
    records: PathBuf,
    /// The trace the records came from: draws every window, not just attributed ones.
    /// Repeatable: records of several traces (`windowtap replay DIR`) name theirs, and each
    /// trace goes with the records that name its file name.
    #[arg(long, value_name = "TRACE")]
    trace: Vec<PathBuf>,
    /// Write the HTML here instead of stdout (`-`: stdout).
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
}

fn open(path: &Path) -> anyhow::Result<BufReader<File>> {
    let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    Ok(BufReader::with_capacity(1 << 16, f))
}

/// A trace read for drawing: its events (each admitted by the door) and its max_window.
fn read_trace(path: &Path, door: &Door) -> anyhow::Result<(Vec<Event>, Millis)> {
    let mut reader = TraceReader::new(open(path)?, path.display().to_string());
    let events = reader.by_ref().collect::<Result<Vec<_>, _>>()?;
    for (i, ev) in events.iter().enumerate() {
        door.event(ev)
            .with_context(|| format!("{}: event {}", path.display(), i + 1))?;
    }
    // The same max_window as replay: the trace header's, else the default.
    let max_window = match reader.header().and_then(|h| h.get("max_window")) {
        None | Some(Value::Null) => Config::default().max_window,
        Some(v) => match v.as_f64() {
            Some(m) if m.is_finite() && m >= 0.0 => m,
            _ => bail!(
                "{}:1: header field `max_window` must be a number >= 0",
                path.display()
            ),
        },
    };
    Ok((events, max_window))
}

/// The records of each trace apart, in order of first appearance; refused when one group
/// holds an interval id twice (records of several runs or traces mixed without names).
fn by_trace(
    records: Vec<(Record, Option<String>)>,
    file: &Path,
) -> anyhow::Result<Vec<(Option<String>, Vec<Record>)>> {
    let mut groups: Vec<(Option<String>, Vec<Record>)> = Vec::new();
    for (r, trace) in records {
        match groups.iter_mut().find(|(name, _)| *name == trace) {
            Some((_, rs)) => rs.push(r),
            None => groups.push((trace, vec![r])),
        }
    }
    for (name, rs) in &groups {
        let mut seen = HashSet::new();
        if let Some(r) = rs.iter().find(|r| !seen.insert(&*r.interval)) {
            bail!(
                "{}: interval `{}` has two records{}: these records mix several traces or runs, \
                 which one timeline cannot draw; replay the traces together (`windowtap replay \
                 DIR` names each record's trace) or report each records file on its own",
                file.display(),
                quote(&r.interval),
                name.as_deref()
                    .map(|n| format!(" naming trace `{}`", quote(n)))
                    .unwrap_or_default()
            );
        }
    }
    if groups.is_empty() {
        groups.push((None, Vec::new()));
    }
    Ok(groups)
}

/// Whether a trace is the one the records came from: every record's interval is an MCP
/// interval of the trace (the same id, started at the same time). Refused when none is (another run's trace would draw windows the
/// records were never decided against); a warning, said on stderr and on the page, when only
/// some are.
fn belongs(path: &Path, events: &[Event], records: &[Record]) -> anyhow::Result<Option<String>> {
    if records.is_empty() {
        return Ok(None);
    }
    // An interval is the trace's when the trace holds one with its id that started when it
    // did (within a millisecond: files may round times differently): ids alone are short
    // tokens in hand-made or replayed traces, and two runs can share them.
    let mut starts: HashMap<&str, Vec<Millis>> = HashMap::new();
    for e in events {
        if let EventKind::McpInterval {
            interval, start, ..
        }
        | EventKind::McpStart {
            interval, start, ..
        } = &e.kind
        {
            starts.entry(interval.as_str()).or_default().push(*start);
        }
    }
    let missing = records
        .iter()
        .filter(|r| {
            !starts
                .get(&*r.interval)
                .is_some_and(|s| s.iter().any(|t| (t - r.start).abs() < 1.0))
        })
        .count();
    if missing == records.len() {
        bail!(
            "--trace {}: this trace does not belong to these records: none of their {} \
             intervals is in it (it holds {} other MCP intervals); pass the trace the records \
             were replayed from or captured with (`--capture` of the same run)",
            path.display(),
            records.len(),
            starts.len()
        );
    }
    if missing == 0 {
        return Ok(None);
    }
    let warning = format!(
        "--trace {}: {missing} of the {} intervals of the records are not in this trace: it \
         may not be the trace they came from, and windows drawn from it may not be the ones \
         they were decided against",
        path.display(),
        records.len()
    );
    eprintln!("warning: {warning}");
    Ok(Some(warning))
}

pub fn main(args: ReportArgs) -> anyhow::Result<ExitCode> {
    let records = read_all_from(open(&args.records)?, &args.records.display().to_string())?;
    // Only what the door lets out is drawn: a records file is an input like any other.
    let door = Door::replay();
    for (i, (r, trace)) in records.iter().enumerate() {
        door.record_from(r, trace.as_deref())
            .with_context(|| format!("{}: record {}", args.records.display(), i + 1))?;
    }
    let groups = by_trace(records, &args.records)?;
    // Each --trace goes with the records that name its file (or with all of them, when they
    // name none).
    let mut traces: Vec<Option<(Vec<Event>, Millis, String)>> = vec![None; groups.len()];
    let mut warnings: Vec<Option<String>> = vec![None; groups.len()];
    for path in &args.trace {
        let at = if let [(None, _)] = groups.as_slice() {
            0
        } else {
            let base = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            groups
                .iter()
                .position(|(name, _)| name.as_deref() == Some(base.as_str()))
                .with_context(|| {
                    format!(
                        "--trace {}: no record names this trace (each record names its trace \
                         by file name)",
                        path.display()
                    )
                })?
        };
        if traces[at].is_some() {
            bail!(
                "--trace {}: these records already have a trace",
                path.display()
            );
        }
        let (events, max_window) = read_trace(path, &door)?;
        warnings[at] = belongs(path, &events, &groups[at].1)?;
        traces[at] = Some((events, max_window, path.display().to_string()));
    }
    let sections: Vec<Section> = groups
        .into_iter()
        .zip(traces)
        .zip(warnings)
        .map(|(((name, records), trace), warning)| {
            let mut sources = vec![args.records.display().to_string()];
            sources.extend(trace.as_ref().map(|t| t.2.clone()));
            Section {
                name,
                timeline: Timeline::build(
                    records,
                    trace
                        .as_ref()
                        .map(|(events, mw, _)| (events.as_slice(), *mw)),
                ),
                sources,
                warning,
            }
        })
        .collect();
    let html = render(&sections);
    // `-o -` is stdout, as without -o.
    let output = args.output.as_ref().filter(|p| p.as_os_str() != "-");
    match output {
        Some(p) => std::fs::write(p, &html).with_context(|| format!("writing {}", p.display()))?,
        None => sys::stdout::stdout()
            .write_all(html.as_bytes())
            .context("writing the report")?,
    }
    let sum = |f: fn(&Timeline) -> usize| sections.iter().map(|s| f(&s.timeline)).sum::<usize>();
    let unreported = sum(|t| t.unreported.as_ref().map_or(0, |u| u.calls));
    eprintln!(
        "{} intervals, {} windows, {} lanes{}{}{}",
        sum(|t| t.records.len()),
        sum(|t| t.windows.len()),
        sum(|t| t.lanes.len()),
        if unreported > 0 {
            let s = if unreported == 1 { "" } else { "s" };
            format!(", {unreported} MCP tool call{s} no wrapper reported (see the page)")
        } else {
            String::new()
        },
        if sections.len() > 1 {
            format!(" in {} traces", sections.len())
        } else {
            String::new()
        },
        output
            .map(|p| format!(" -> {}", p.display()))
            .unwrap_or_default()
    );
    Ok(ExitCode::SUCCESS)
}
