//! `windowtap report`: attribution records (and, optionally, the trace they came from) drawn as
//! one self-contained HTML timeline.

mod model;
mod render;

use std::fs::File;
use std::io::{BufReader, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use correlator::records::RecordReader;
use correlator::sanitize::Door;
use correlator::trace::TraceReader;
use correlator::Config;
use serde_json::Value;

pub use model::Timeline;
pub use render::render;

#[derive(clap::Args)]
#[command(after_help = "\
A lane per thread; each window is a bar from its first complete tool call to the request that \
continued it; each MCP interval is a mark coloured by its decision, abstentions labelled with \
their reason; hover for times and evidence. Without --trace only the windows that intervals \
were attributed to are known, and abstentions go on an `unattributed` lane; with it every \
window is drawn and each abstention sits beside the windows open at its start. Past 1500 \
intervals the lanes become density strips.

Examples:
  windowtap replay capture.jsonl -o records.jsonl
  windowtap report records.jsonl --trace capture.jsonl -o timeline.html")]
pub struct ReportArgs {
    /// Records v1 file (as written by `windowtap replay` or a live run).
    #[arg(value_name = "RECORDS")]
    records: PathBuf,
    /// The trace v1 the records came from: draws every window, not just attributed ones.
    #[arg(long, value_name = "TRACE")]
    trace: Option<PathBuf>,
    /// Write the HTML here instead of stdout (`-`: stdout).
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
}

fn open(path: &PathBuf) -> anyhow::Result<BufReader<File>> {
    let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    Ok(BufReader::with_capacity(1 << 16, f))
}

pub fn main(args: ReportArgs) -> anyhow::Result<ExitCode> {
    let records = RecordReader::new(open(&args.records)?, args.records.display().to_string())
        .collect::<Result<Vec<_>, _>>()?;
    // Only what the door lets out is drawn: a records file is an input like any other.
    let door = Door::replay();
    for (i, r) in records.iter().enumerate() {
        door.record(r)
            .with_context(|| format!("{}: record {}", args.records.display(), i + 1))?;
    }
    let mut sources = vec![args.records.display().to_string()];
    let trace = match &args.trace {
        None => None,
        Some(path) => {
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
            sources.push(path.display().to_string());
            Some((events, max_window))
        }
    };
    let timeline = Timeline::build(
        records,
        trace.as_ref().map(|(events, mw)| (events.as_slice(), *mw)),
    );
    let html = render(&timeline, &sources);
    // `-o -` is stdout, as without -o.
    let output = args.output.as_ref().filter(|p| p.as_os_str() != "-");
    match output {
        Some(p) => std::fs::write(p, &html).with_context(|| format!("writing {}", p.display()))?,
        None => crate::stdout::stdout()
            .write_all(html.as_bytes())
            .context("writing the report")?,
    }
    eprintln!(
        "{} intervals, {} windows, {} lanes{}",
        timeline.records.len(),
        timeline.windows.len(),
        timeline.lanes.len(),
        output
            .map(|p| format!(" -> {}", p.display()))
            .unwrap_or_default()
    );
    Ok(ExitCode::SUCCESS)
}
