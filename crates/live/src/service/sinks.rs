//! Where the run's records and capture go: the files, opened at start, and second handles
//! on them so they can be fsynced once their writer has flushed its last line.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::Context;

use crate::rotate::{Limits, Pieces};
use crate::{CaptureSink, Sinks};

/// Creates `path` and, when it is a regular file, keeps a second handle on it in `sync`, so
/// that the file can be fsynced once its writer (owned by the correlator task) has flushed
/// its last line. `/dev/null`, a FIFO or a terminal has nothing to make durable (and fsync on
/// one fails with EINVAL, which would turn a clean stop into an error).
fn create_synced(what: &str, path: &PathBuf, sync: &mut Vec<File>) -> anyhow::Result<File> {
    let file = File::create(path).map_err(|e| sys::advice::create_failed(what, path, e))?;
    let regular = file.metadata().is_ok_and(|m| m.is_file());
    if regular {
        sync.push(
            file.try_clone()
                .with_context(|| format!("opening {} for fsync", path.display()))?,
        );
    }
    Ok(file)
}

/// Whether `path` is written as pieces when rotation is asked for: not when it names a
/// device or a pipe (`/dev/null`, a FIFO), which takes no disk and cannot have pieces beside
/// it.
fn rotates(path: &std::path::Path) -> bool {
    std::fs::metadata(path).map_or(true, |m| m.is_file())
}

fn open_sink(
    path: Option<&PathBuf>,
    rotate: Option<Limits>,
    sync: &mut Vec<File>,
) -> anyhow::Result<Box<dyn Write + Send>> {
    Ok(
        match (path, rotate.filter(|_| path.is_some_and(|p| rotates(p)))) {
            // Cut by the records writer as it writes, between lines; each piece fsynced as it is
            // cut, the last when the writer lets go of it.
            (Some(p), Some(limits)) => Box::new(
                Pieces::create(p, limits, true)
                    .map_err(|e| sys::advice::create_failed("the records file", p, e))?,
            ),
            (Some(p), None) => {
                Box::new(BufWriter::new(create_synced("the records file", p, sync)?))
            }
            (None, _) => Box::new(std::io::stdout()),
        },
    )
}

/// Opens the records file (stdout without one) and the capture file, if asked for, each as
/// pieces that rotate when `rotate` says how. Returns the sinks and the second handles to
/// fsync on stop.
pub(super) fn open(
    records: Option<&PathBuf>,
    capture: Option<&PathBuf>,
    rotate: Option<Limits>,
) -> anyhow::Result<(Sinks, Vec<File>)> {
    let mut sync = Vec::new();
    let capture = match (
        capture,
        rotate.filter(|_| capture.is_some_and(|p| rotates(p))),
    ) {
        (Some(p), Some(limits)) => Some(CaptureSink::Pieces(
            Pieces::create(p, limits, false)
                .map_err(|e| sys::advice::create_failed("the capture file", p, e))?,
        )),
        (Some(p), None) => Some(CaptureSink::File(Box::new(BufWriter::new(create_synced(
            "the capture file",
            p,
            &mut sync,
        )?)) as Box<dyn crate::Capture>)),
        (None, _) => None,
    };
    let sinks = Sinks {
        records: open_sink(records, rotate, &mut sync)?,
        capture,
    };
    Ok((sinks, sync))
}
