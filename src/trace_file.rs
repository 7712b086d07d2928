//! One reader of trace files for `check` and `replay`, so that both give one verdict on a file:
//! the strict line reader ([`TraceReader`]) plus the header's replay options, which are part
//! of the trace (a `close_wait` of `"soon"` makes the file bad for both, not only for replay).
//!
//! It also expands the command line's inputs the same way for both: a directory is every
//! `*.jsonl` file directly in it, in name order; an input that cannot be read is one bad
//! entry, not the end of the run.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail};
use correlator::trace::TraceReader;
use correlator::{Candidates, Event, WindowOpen};
use serde_json::{Map, Value};

/// The replay options a trace header may carry (docs/trace-v2.md, "Header"), each `None`
/// when the header does not say.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HeaderOptions {
    pub close_wait: Option<f64>,
    pub max_window: Option<f64>,
    pub window_open: Option<WindowOpen>,
    pub candidates: Option<Candidates>,
    /// How far the live relay's clock got when it stopped.
    pub end: Option<f64>,
    /// The wall-clock time of `t = 0`, for OTLP span times.
    pub epoch_unix_ms: Option<f64>,
    /// A piece of a rotated capture: the capture's word and the piece's number.
    pub piece: Option<(String, u64)>,
}

/// A rotated capture's piece: `capture` (a word) and `piece` (a whole number), both or
/// neither.
fn piece_option(header: &Map<String, Value>, file: &Path) -> anyhow::Result<Option<(String, u64)>> {
    let capture = match header.get("capture") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if correlator::sanitize::quote(s) == s.as_str() => Some(s.clone()),
        Some(_) => bail!(
            "{}:1: header field `capture` must be a short word",
            file.display()
        ),
    };
    let piece = match header.get("piece") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) if n.as_u64().is_some() => n.as_u64(),
        Some(_) => bail!(
            "{}:1: header field `piece` must be a whole number >= 0",
            file.display()
        ),
    };
    match (capture, piece) {
        (Some(c), Some(n)) => Ok(Some((c, n))),
        (None, None) => Ok(None),
        _ => bail!(
            "{}:1: header fields `capture` and `piece` go together",
            file.display()
        ),
    }
}

/// The piece a trace file says it is, from its first line alone (replay groups the pieces of
/// one capture before it reads them); `None` for anything else, whose reading says why.
pub fn peek_piece(path: &Path) -> Option<(String, u64)> {
    use std::io::BufRead;
    let f = File::open(path).ok()?;
    let mut lines = BufReader::new(f).lines();
    let first = loop {
        let l = lines.next()?.ok()?;
        if !l.trim().is_empty() {
            break l;
        }
    };
    match serde_json::from_str::<Value>(&first).ok()? {
        Value::Object(h) => piece_option(&h, path).ok().flatten(),
        _ => None,
    }
}

fn number_option(
    header: &Map<String, Value>,
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

fn word_option<T>(
    header: &Map<String, Value>,
    key: &str,
    parse: fn(&str) -> Option<T>,
    words: &str,
    file: &Path,
) -> anyhow::Result<Option<T>> {
    match header.get(key) {
        None | Some(Value::Null) => Ok(None),
        // The header is input: its value is shown only as `quote` lets it out.
        Some(Value::String(s)) => parse(s).map(Some).ok_or_else(|| {
            anyhow!(
                "{}:1: header field `{key}`: `{}` is not {words}",
                file.display(),
                correlator::sanitize::quote(s)
            )
        }),
        Some(_) => bail!(
            "{}:1: header field `{key}` must be a string",
            file.display()
        ),
    }
}

impl HeaderOptions {
    /// Reads and checks the options of a trace header.
    pub fn read(header: &Map<String, Value>, file: &Path) -> anyhow::Result<HeaderOptions> {
        Ok(HeaderOptions {
            close_wait: number_option(header, "close_wait", file)?,
            max_window: number_option(header, "max_window", file)?,
            window_open: word_option(
                header,
                "window_open",
                WindowOpen::parse,
                "`call` or `response`",
                file,
            )?,
            candidates: word_option(
                header,
                "candidates",
                Candidates::parse,
                "`eligible` or `all`",
                file,
            )?,
            end: number_option(header, "end", file)?,
            epoch_unix_ms: number_option(header, "epoch_unix_ms", file)?,
            piece: piece_option(header, file)?,
        })
    }
}

/// A trace file read one event at a time. Its first error ends it, like the line reader's.
pub struct TraceFile {
    path: PathBuf,
    reader: TraceReader<BufReader<File>>,
    options: Option<HeaderOptions>,
    failed: bool,
}

impl TraceFile {
    pub fn open(path: &Path) -> anyhow::Result<TraceFile> {
        let f = File::open(path).map_err(|e| anyhow!("{}: cannot read: {e}", path.display()))?;
        Ok(TraceFile {
            path: path.to_path_buf(),
            reader: TraceReader::new(
                BufReader::with_capacity(1 << 16, f),
                path.display().to_string(),
            ),
            options: None,
            failed: false,
        })
    }

    /// The header's options, once the first event (or the end) has been read.
    pub fn options(&self) -> Option<&HeaderOptions> {
        self.options.as_ref()
    }

    /// The next event (its ids borrowed from the file's line), with the header's options;
    /// `None` at the end or after an error. The header's options are checked as soon as the
    /// header has been read, before its first event is handed out.
    pub fn next_event(&mut self) -> Option<anyhow::Result<(Event<&str>, &HeaderOptions)>> {
        if self.failed {
            return None;
        }
        if self.options.is_none() {
            let read = match self.reader.read_header() {
                Ok(()) => match self.reader.header() {
                    Some(h) => HeaderOptions::read(h, &self.path),
                    None => Ok(HeaderOptions::default()),
                },
                Err(e) => Err(e.into()),
            };
            match read {
                Ok(o) => self.options = Some(o),
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            }
        }
        // Set just above once the header has read cleanly.
        let options = self.options.as_ref()?;
        match self.reader.next_event()? {
            Ok(ev) => Some(Ok((ev, options))),
            Err(e) => {
                self.failed = true;
                Some(Err(e.into()))
            }
        }
    }
}

/// The files named by the inputs, directories expanded to their `*.jsonl` files in name
/// order; an input that cannot be listed, or a directory with no such file, is an error in
/// its place, and the others are still there.
pub fn files(inputs: &[PathBuf]) -> Vec<Result<PathBuf, String>> {
    let mut out = Vec::new();
    for input in inputs {
        if !input.exists() {
            out.push(Err(format!(
                "{}: no such file or directory",
                input.display()
            )));
            continue;
        }
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
