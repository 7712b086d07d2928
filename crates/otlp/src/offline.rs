//! The trace tree of a replayed trace file: its events read again, its records placed between
//! them at their decision times, as the correlator produced them.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use correlator::sanitize::{Cleared, Door};
use correlator::trace::TraceReader;
use correlator::{Event, Millis};
use opentelemetry_proto::tonic::trace::v1::Span;
use sha2::{Digest, Sha256};

use super::tree::{SourceKey, Tree};

/// The source key of a trace file: its file name and the SHA-256 of its bytes. The same file
/// replayed twice gets the same ids; two files (even two copies under other names) never do.
pub fn file_key(file: &Path) -> std::io::Result<SourceKey> {
    let mut h = Sha256::new();
    std::io::copy(&mut File::open(file)?, &mut h)?;
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(SourceKey::for_file(&name, h.finalize().into()))
}

/// Every span of one replayed trace, handed to `emit` as soon as it is finished.
///
/// `records` are the file's records in decision order (already through the door). A record
/// decided at `T` follows every event stamped at or before `T`, as in the correlator.
pub fn trace_spans(
    file: &Path,
    records: &[Cleared<'_>],
    epoch_unix_nanos: u64,
    emit: impl FnMut(Span),
) -> std::io::Result<()> {
    let key = file_key(file)?;
    let tree = Tree::new(key, epoch_unix_nanos, Door::replay(), Millis::INFINITY);
    let reader = TraceReader::new(
        BufReader::with_capacity(1 << 16, File::open(file)?),
        file.display().to_string(),
    );
    // The file replayed cleanly a moment ago; a read error here ends the events early.
    let events = reader.map_while(Result::ok);
    interleave(tree, events, records, emit);
    Ok(())
}

/// Feeds `events` and `records` to `tree` in the correlator's order, then finishes it at the
/// last event or decision.
pub fn interleave(
    mut tree: Tree,
    events: impl Iterator<Item = Event>,
    records: &[Cleared<'_>],
    mut emit: impl FnMut(Span),
) {
    let mut events = events.peekable();
    let mut out = Vec::new();
    let mut last = 0.0_f64;
    for c in records {
        let decided = c.record().decided_at;
        while let Some(ev) = events.next_if(|ev| ev.t <= decided) {
            last = last.max(ev.t);
            tree.event(&ev, &mut out);
        }
        tree.record(c, &mut out);
        out.drain(..).for_each(&mut emit);
    }
    for ev in events {
        last = last.max(ev.t);
        tree.event(&ev, &mut out);
    }
    let end = records
        .iter()
        .map(|c| c.record().decided_at)
        .fold(last, f64::max);
    tree.finish(end, &mut out);
    out.into_iter().for_each(emit);
}
