//! The capture: the sanitized trace v2 of what the correlator was fed, one file or rotating
//! pieces, with a header whose `end` is filled in when the run stops.

use std::io::{Seek, Write};

use correlator::sanitize::{Door, Line};
use correlator::{Config, Millis};

/// A capture file: written in order, and seekable so that its header's `end` can be filled
/// in when the run stops.
pub trait Capture: Write + Seek + Send {}
impl<T: Write + Seek + Send> Capture for T {}

/// Where the capture goes.
pub enum CaptureSink {
    /// One file, written from start to stop.
    File(Box<dyn Capture>),
    /// Pieces that rotate (`--rotate-size`, `--rotate-age`): each starts with a header of
    /// its own, naming the capture and its number and carrying what was open at its cut.
    Pieces(crate::rotate::Pieces),
}

impl CaptureSink {
    pub(crate) fn file(&mut self) -> &mut dyn Capture {
        match self {
            CaptureSink::File(f) => f,
            CaptureSink::Pieces(p) => p,
        }
    }
}

/// Where records and the capture go.
pub struct Sinks {
    /// Records v1, one line per record, flushed as soon as the output takes them. Written by
    /// a thread of its own ([`records_out`]), so an output nobody reads never stalls the
    /// correlator.
    pub records: Box<dyn Write + Send>,
    /// The sanitized trace v2, in the order events were fed to the correlator.
    pub capture: Option<CaptureSink>,
}

/// Room kept in the capture header for the `end` time (JSON allows the padding spaces).
pub(crate) const END_ROOM: usize = 32;

/// The capture's first line: trace v2 with the options this run used, so that
/// `windowtap replay FILE` decides with the same ones, and `"end"`: the time the correlator's
/// clock had reached when the run stopped (null until then). A decision taken live while
/// idle, after the last event, happened at a time no event of the trace shows; a replay that
/// advances to `end` before finishing takes it at the same time.
///
/// A piece of a rotated capture also names its capture (`capture`, the same random word in
/// every piece of one run) and its number (`piece`, from 0): docs/trace-v2.md, "Pieces".
pub fn capture_header(
    c: &Config,
    epoch_unix_ms: Option<u64>,
    piece: Option<(&str, u64)>,
) -> String {
    let mut s = String::from(r#"{"type":"trace","version":2,"#);
    // The wall-clock time of t = 0, so a replay exports spans at the times the run had.
    if let Some(ms) = epoch_unix_ms {
        s.push_str(&format!(r#""epoch_unix_ms":{ms},"#));
    }
    s.push_str(r#""close_wait":"#);
    correlator::json::push_ms(&mut s, c.close_wait);
    s.push_str(r#","window_open":""#);
    s.push_str(c.window_open.as_str());
    s.push_str(r#"","max_window":"#);
    correlator::json::push_ms(&mut s, c.max_window);
    s.push_str(r#","candidates":""#);
    s.push_str(c.candidates.as_str());
    s.push('"');
    if let Some((capture, n)) = piece {
        s.push_str(r#","capture":""#);
        s.push_str(capture);
        s.push_str(r#"","piece":"#);
        s.push_str(&n.to_string());
    }
    s.push_str(r#","end":"#);
    s.push_str(end_value(None).as_str());
    s.push('}');
    s
}

/// `end`'s value padded to its fixed room.
pub(crate) fn end_value(end: Option<Millis>) -> Line {
    Door::live().padded_number(end, END_ROOM)
}

/// Where `end`'s value starts in the header.
pub(crate) fn end_offset(header: &str) -> u64 {
    (header
        .rfind(r#""end":"#)
        .expect("the header has an end field")
        + r#""end":"#.len()) as u64
}
