//! `windowtap replay`: the correlator over captured or hand-written traces, offline.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use correlator::records::Summary;
use correlator::sanitize::Door;
use correlator::{Candidates, Config, Correlator, Record, WindowOpen};

use crate::trace_file::{HeaderOptions, TraceFile};

#[derive(clap::Args)]
#[command(after_help = "\
Options not given on the command line are read from the trace header when it has them \
(`close_wait`, `window_open`, `max_window`, `candidates`), else the defaults apply.

Records are written as they are decided (memory follows what is open at once, not the length \
of the trace). A bad trace (the first bad line, named with its file, line and field, as \
`windowtap check` names it) stops that trace; the others are still replayed. The records \
decided before the bad line are written too, so an output is complete only when the exit \
code is 0: on any bad trace it is 1, with one error line per bad trace and a last error line \
saying the records are incomplete. With `-o FILE` the records go to `FILE.partial`, renamed \
to `FILE` only when every trace read cleanly; otherwise `FILE.partial` stays and `FILE` is \
not touched, so `FILE` is only ever a complete output (a FILE that is a pipe or a device, \
such as /dev/null, is written directly, like stdout).

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
    /// Write records here instead of stdout (`-`: stdout), by way of `FILE.partial`, renamed to
    /// `FILE` when every trace has read cleanly.
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

/// Every trace file named by the inputs, directories expanded (as `check` does).
fn trace_files(inputs: &[PathBuf]) -> Vec<Result<PathBuf, String>> {
    crate::trace_file::files(inputs)
}

/// What each record says it came from when several traces are replayed at once (records v1
/// `trace`): the file's name, without its directory; a name given twice gets `#2`, `#3`, …
/// One trace alone names none, so its records are byte for byte those of a live run. The
/// pieces of one rotated capture, given in order, are one trace: named after the first.
fn trace_names(files: &[&PathBuf], continues: &[bool]) -> Vec<Option<String>> {
    let traces = continues.iter().filter(|c| !**c).count();
    if traces < 2 {
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
        .zip(continues)
        .scan(None, |first: &mut Option<String>, (name, continues)| {
            if !continues {
                *first = name;
            }
            Some(first.clone())
        })
        .collect()
}

/// How the files given stand to each other as pieces of rotated captures
/// (docs/trace-v2.md, "Pieces").
#[derive(Debug, Clone, PartialEq)]
enum Link {
    /// A trace of its own, or the first piece given of a capture.
    Starts,
    /// The next piece of the capture the file before it is a piece of: replayed by the same
    /// correlator, as the live run decided.
    Continues,
    /// A piece of a capture given out of order or with one missing before it (or after a
    /// piece that was refused): what it needs to be decided as live is not there, so it is
    /// refused, never guessed around.
    Refused(String),
}

/// Links each file to the one before it, from the `capture` and `piece` of their headers.
fn links(files: &[Option<(String, u64)>]) -> Vec<Link> {
    let mut out = Vec::with_capacity(files.len());
    // The capture being replayed, its last piece, and whether it is still whole.
    let mut chain: Option<(&str, u64, bool)> = None;
    for f in files {
        let link = match (f, &mut chain) {
            (Some((c, n)), Some((cc, last, whole))) if c == cc => {
                if *whole && *n == *last + 1 {
                    *last = *n;
                    Link::Continues
                } else {
                    let why = if *whole {
                        format!(
                            "piece {n} of capture {} does not follow piece {last}: give a capture's pieces in order, none missing",
                            correlator::sanitize::quote(c)
                        )
                    } else {
                        format!(
                            "piece {n} of capture {} follows a piece that was refused",
                            correlator::sanitize::quote(c)
                        )
                    };
                    *whole = false;
                    Link::Refused(why)
                }
            }
            (Some((c, n)), _) => {
                chain = Some((c.as_str(), *n, true));
                Link::Starts
            }
            (None, _) => {
                chain = None;
                Link::Starts
            }
        };
        out.push(link);
    }
    out
}

/// The options for one trace: the command line first, then the trace header, then defaults.
fn config_for(args: &ReplayArgs, header: Option<&HeaderOptions>) -> Config {
    let mut c = Config::default();
    let h = header.cloned().unwrap_or_default();
    if let Some(v) = args.close_wait.or(h.close_wait) {
        c.close_wait = v;
    }
    if let Some(v) = args.max_window.or(h.max_window) {
        c.max_window = v;
    }
    if let Some(v) = args.window_open.or(h.window_open) {
        c.window_open = v;
    }
    if let Some(v) = args.candidates.or(h.candidates) {
        c.candidates = v;
    }
    c
}

/// Where records go: stdout (or a pipe or device named by `-o`), or `FILE.partial` renamed to
/// `FILE` once every trace has read cleanly. Either way records leave as they are decided;
/// what tells a complete output from one cut short by a bad trace is the exit code and the
/// error lines, and for a file also its name (`FILE` is only ever a complete output).
enum Sink {
    Stdout(BufWriter<sys::stdout::Stdout>),
    Direct(BufWriter<File>),
    File {
        partial: PathBuf,
        dest: PathBuf,
        w: BufWriter<File>,
    },
}

impl Sink {
    fn open(output: Option<&PathBuf>) -> anyhow::Result<Sink> {
        Ok(match output.filter(|p| p.as_os_str() != "-") {
            None => Sink::Stdout(BufWriter::with_capacity(1 << 16, sys::stdout::stdout())),
            // A pipe or a device (`-o /dev/null`) cannot be renamed onto: it is written
            // directly, as stdout is, and the exit code tells.
            Some(dest) if std::fs::metadata(dest).is_ok_and(|m| !m.file_type().is_file()) => {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(dest)
                    .with_context(|| format!("opening {}", dest.display()))?;
                Sink::Direct(BufWriter::with_capacity(1 << 16, f))
            }
            Some(dest) => {
                let mut partial = dest.clone().into_os_string();
                partial.push(".partial");
                let partial = PathBuf::from(partial);
                let f = File::create(&partial)
                    .with_context(|| format!("creating {}", partial.display()))?;
                Sink::File {
                    partial,
                    dest: dest.clone(),
                    w: BufWriter::with_capacity(1 << 16, f),
                }
            }
        })
    }

    fn writer(&mut self) -> &mut dyn Write {
        match self {
            Sink::Stdout(w) => w,
            Sink::Direct(w) => w,
            Sink::File { w, .. } => w,
        }
    }

    /// Flushes, and for a file gives it its name: `FILE` when `complete`, else it stays
    /// `FILE.partial`, whose path is returned.
    fn close(self, complete: bool) -> anyhow::Result<Option<PathBuf>> {
        match self {
            Sink::Stdout(mut w) => {
                w.flush().context("writing records")?;
                Ok(None)
            }
            Sink::Direct(mut w) => {
                w.flush().context("writing records")?;
                Ok(None)
            }
            Sink::File { partial, dest, w } => {
                let f = w
                    .into_inner()
                    .map_err(|e| e.into_error())
                    .with_context(|| format!("writing {}", partial.display()))?;
                f.sync_all()
                    .with_context(|| format!("writing {}", partial.display()))?;
                drop(f);
                if !complete {
                    return Ok(Some(partial));
                }
                std::fs::rename(&partial, &dest).with_context(|| {
                    format!("renaming {} to {}", partial.display(), dest.display())
                })?;
                Ok(None)
            }
        }
    }
}

/// What stopped a trace: the trace itself (reported, the run goes on with the next) or the
/// output (the run stops).
enum Stop {
    Trace(anyhow::Error),
    Output(anyhow::Error),
}

/// Replays one trace, handing each record to `emit` as soon as it is decided, so memory
/// follows what is open at once, not the trace's length. On a bad line the trace stops there:
/// the records decided before it stand (a live run would have written them at that point)
/// and nothing after it is guessed. Returns the header's options (for OTLP). `last`: no trace
/// follows, so the correlator's memory is left to the process's end.
///
/// `carried`: the correlator of the capture piece before this one, which this piece
/// continues; `goes_on`: the next file continues this one, so nothing is finished here and
/// the correlator is handed back for it (the pieces of a capture replay as one trace).
fn replay_file(
    file: &Path,
    args: &ReplayArgs,
    (carried, goes_on): (Option<Correlator>, bool),
    last: bool,
    emit: &mut dyn FnMut(&Record) -> anyhow::Result<()>,
) -> Result<(HeaderOptions, Option<Correlator>), Stop> {
    let mut trace = TraceFile::open(file).map_err(Stop::Trace)?;
    let mut out = Vec::new();
    let mut correlator: Option<Correlator> = carried;
    let mut drain = |out: &mut Vec<Record>| -> Result<(), Stop> {
        for r in out.drain(..) {
            emit(&r).map_err(Stop::Output)?;
        }
        Ok(())
    };
    while let Some(next) = trace.next_event() {
        let (ev, options) = next.map_err(Stop::Trace)?;
        let c = match &mut correlator {
            Some(c) => c,
            None => correlator.insert(Correlator::new(config_for(args, Some(options)))),
        };
        c.push(&ev, &mut out);
        if !out.is_empty() {
            drain(&mut out)?;
        }
    }
    let options = trace.options().cloned().unwrap_or_default();
    if goes_on {
        return Ok((options, correlator));
    }
    if let Some(c) = &mut correlator {
        // A live capture says how far the relay's clock got: decisions it took while idle,
        // after the last event, happen at the same times here.
        if let Some(end) = options.end {
            c.advance(end, &mut out);
        }
        c.finish(&mut out);
        drain(&mut out)?;
    }
    if last {
        // The process ends next: handing the correlator's state back one allocation at a time
        // (thousands of threads' chains) was 3 % of a replay's CPU.
        std::mem::forget(correlator);
    }
    Ok((options, None))
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
    let inputs = trace_files(&args.inputs);
    if inputs.iter().all(Result::is_err) {
        // Nothing to replay at all: the reasons, and no summary of zero intervals, which read
        // as if a trace had been replayed and held no MCP call.
        for e in inputs.iter().filter_map(|i| i.as_ref().err()) {
            eprintln!("windowtap: error: {e}");
        }
        bail!("no trace to replay: nothing was read and no record written");
    }
    let resolved = args.otlp.resolve()?;
    for w in &resolved.warnings {
        eprintln!("windowtap: warning: otlp: {w}");
    }
    let exporter = resolved
        .config
        .map(otlp::BlockingExporter::start)
        .transpose()?;
    let mut sink = Sink::open(args.output.as_ref())?;
    let mut summary = Summary::default();
    let door = Door::replay();
    let listed: Vec<&PathBuf> = inputs.iter().filter_map(|f| f.as_ref().ok()).collect();
    let pieces: Vec<_> = listed
        .iter()
        .map(|f| crate::trace_file::peek_piece(f))
        .collect();
    let links = links(&pieces);
    let continues: Vec<bool> = links.iter().map(|l| *l == Link::Continues).collect();
    if exporter.is_some() && continues.iter().any(|c| *c) {
        // The export reads each trace again beside its records, one file at a time; a window
        // in one piece and its call in the next would come out unparented.
        bail!(
            "OTLP export of a rotated capture's pieces replayed as one is not supported: \
             replay them without --otlp-endpoint (or export each piece on its own)"
        );
    }
    let names = trace_names(&listed, &continues);
    let mut links = links
        .into_iter()
        .zip(continues.into_iter().skip(1).chain([false]));
    let mut pieces = pieces.into_iter();
    // The correlator a capture's next piece continues.
    let mut carried: Option<Correlator> = None;
    // A piece of the capture being replayed was bad: the pieces after it cannot be decided
    // as live.
    let mut broken = false;
    let mut bad = 0usize;
    let mut names = names.into_iter();
    // A reused line buffer: one allocation for the run, not one per record.
    let mut line = String::with_capacity(512);
    for (k, input) in inputs.iter().enumerate() {
        let last = k + 1 == inputs.len();
        let file = match input {
            Ok(f) => f,
            Err(e) => {
                bad += 1;
                eprintln!("windowtap: error: {e}");
                continue;
            }
        };
        let name = names.next().flatten();
        let (link, goes_on) = links.next().expect("one link per listed file");
        let piece = pieces.next().flatten();
        let from = match link {
            Link::Refused(why) => {
                bad += 1;
                carried = None;
                eprintln!("windowtap: error: {}: {why}", file.display());
                continue;
            }
            Link::Continues if broken => {
                bad += 1;
                eprintln!(
                    "windowtap: error: {}: follows a piece of its capture that was bad",
                    file.display()
                );
                continue;
            }
            Link::Continues => carried.take(),
            Link::Starts => {
                broken = false;
                if let Some((_, n)) = piece.filter(|(_, n)| *n > 0) {
                    eprintln!(
                        "windowtap: warning: {}: replay starts at piece {n} of a capture: a call whose window opened in an earlier piece may be decided otherwise than it was live (the run's records have how it was)",
                        file.display()
                    );
                }
                // A capture whose next piece was not given ends here.
                None
            }
        };
        // OTLP needs a trace's records beside its events (read again once it is done), so
        // only an export holds them (the README says so); plain replay keeps none.
        let mut kept: Vec<Record> = Vec::new();
        let w = sink.writer();
        let mut emit = |r: &Record| -> anyhow::Result<()> {
            summary.add(r);
            line.clear();
            door.write_record(r, name.as_deref(), &mut line)
                .with_context(|| format!("{}: a record", file.display()))?;
            w.write_all(line.as_bytes()).context("writing records")?;
            if exporter.is_some() {
                kept.push(r.clone());
            }
            Ok(())
        };
        let options = match replay_file(file, &args, (from, goes_on), last, &mut emit) {
            Ok((o, c)) => {
                carried = c;
                o
            }
            Err(Stop::Output(e)) => return Err(e),
            Err(Stop::Trace(e)) => {
                bad += 1;
                broken = true;
                eprintln!("windowtap: error: {e:#}");
                continue;
            }
        };
        // Records first: export may wait for queue room (bounded), the records never do.
        if let Some(e) = &exporter {
            let cleared = kept
                .iter()
                .map(|r| door.record_from(r, name.as_deref()))
                .collect::<Result<Vec<_>, _>>()
                .with_context(|| format!("{}: a record", file.display()))?;
            let epoch = otlp::replay_epoch(options.epoch_unix_ms, &kept, otlp::now_unix_nanos());
            otlp::offline::trace_spans(file, &cleared, epoch, |s| {
                e.span(s);
            })
            .with_context(|| format!("{}: reading it again for OTLP", file.display()))?;
        }
    }
    let left = sink.close(bad == 0)?;
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
    if bad == 0 {
        return Ok(ExitCode::SUCCESS);
    }
    // Said last, so that it is the line a reader sees: the records written include those of
    // the good traces and, of each bad one, those decided before its bad line.
    let whole = if bad == 1 {
        "1 trace is bad (above)".to_string()
    } else {
        format!("{bad} traces are bad (above)")
    };
    match left {
        Some(partial) => eprintln!(
            "windowtap: error: {whole}: the records are incomplete and were left in {} ({} was not written)",
            partial.display(),
            args.output
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        ),
        None => eprintln!(
            "windowtap: error: {whole}: the records written are incomplete (a bad trace's records stop at its bad line)"
        ),
    }
    Ok(ExitCode::FAILURE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(c: &str, n: u64) -> Option<(String, u64)> {
        Some((c.to_string(), n))
    }

    fn kinds(links: &[Link]) -> Vec<&'static str> {
        links
            .iter()
            .map(|l| match l {
                Link::Starts => "starts",
                Link::Continues => "continues",
                Link::Refused(_) => "refused",
            })
            .collect()
    }

    #[test]
    fn a_captures_pieces_in_order_are_one_trace_and_a_gap_or_a_step_back_is_refused() {
        let files = [
            None,
            piece("a", 3),
            piece("a", 4),
            piece("b", 0),
            piece("a", 5),
            piece("a", 6),
            piece("a", 8),
            piece("a", 9),
            piece("c", 1),
            piece("c", 0),
        ];
        assert_eq!(
            kinds(&links(&files)),
            [
                "starts",
                "starts",
                "continues",
                "starts",
                // Another capture came between: this one starts again (a warning says from
                // which piece).
                "starts",
                "continues",
                "refused",
                "refused",
                "starts",
                "refused",
            ]
        );
        let names = trace_names(
            &[&"x/a.1".into(), &"x/a.2".into(), &"y/t.jsonl".into()],
            &[false, true, false],
        );
        assert_eq!(
            names,
            [
                Some("a.1".into()),
                Some("a.1".into()),
                Some("t.jsonl".into())
            ]
        );
        assert_eq!(
            trace_names(&[&"a.1".into(), &"a.2".into()], &[false, true]),
            [None, None],
            "one capture's pieces alone are one trace, named by none of its records"
        );
    }
}
