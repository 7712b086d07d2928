//! Joining the host's own trace (`--join-host-trace`, docs/otlp.md "Joining the host's
//! trace"; docs/design.md §7's one exception): a model request's W3C `traceparent` header,
//! which a host puts there so that a proxy can join its trace, becomes the parent of that
//! request's `chat` span.
//!
//! The header value is parsed here into two ids and nothing else is kept: no flags, no
//! `tracestate`, no text. The ids go from the relay's data path to the correlator task
//! through [`HostParents`], keyed by the stream's raw id, and from there only into the
//! OTLP tree: never into an event, so never into a capture, a record or a log. Anything
//! that is not exactly one well-formed, sampled `traceparent` is ignored without a word.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;

use http::HeaderMap;

/// The longest `traceparent` value read, in bytes. Version `00` is exactly 55; a later version
/// may append fields (W3C Trace Context §3.2.4), but nothing a host sends needs more than
/// this, and a longer value is ignored rather than parsed.
pub(crate) const MAX_TRACEPARENT: usize = 256;

/// How many streams may wait for the correlator task to take their parent. The relay puts
/// one in before the stream's first event and the task takes it with that event, so only a
/// task far behind its queue holds many; past this, new ones are not kept (those requests'
/// spans stay in windowtap's own trace).
const MAX_WAITING: usize = 8192;

/// The host's span a request was made under: its trace and span ids.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct HostParent {
    /// The W3C trace id.
    pub trace: [u8; 16],
    /// The host's span (the parent id of `traceparent`).
    pub span: [u8; 8],
}

// The ids are the host's: kept out of any debug output, like every value the design allows
// in one place only.
impl fmt::Debug for HostParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HostParent(..)")
    }
}

impl HostParent {
    /// The parent a request's headers name: exactly one `traceparent` header, well formed
    /// and sampled. A repeated header is ambiguous and ignored, like a malformed one.
    pub fn from_headers(headers: &HeaderMap) -> Option<HostParent> {
        let mut values = headers.get_all("traceparent").iter();
        let first = values.next()?;
        if values.next().is_some() {
            return None;
        }
        HostParent::parse(first.as_bytes())
    }

    /// W3C Trace Context `traceparent`: `version-traceid-parentid-flags`, lowercase hex.
    /// Version `ff` is invalid; `00` is exactly 55 bytes; a later version may go on after a
    /// `-`. All-zero ids are invalid. A context whose sampled flag is off is not joined: the
    /// host does not record that span, so ours would hang under a parent no backend has.
    pub fn parse(v: &[u8]) -> Option<HostParent> {
        if v.len() < 55 || v.len() > MAX_TRACEPARENT {
            return None;
        }
        let version = hex_byte(&v[0..2])?;
        if version == 0xff || v[2] != b'-' || v[35] != b'-' || v[52] != b'-' {
            return None;
        }
        if version == 0 && v.len() != 55 {
            return None;
        }
        if v.len() > 55 && v[55] != b'-' {
            return None;
        }
        let mut trace = [0u8; 16];
        for (i, b) in trace.iter_mut().enumerate() {
            *b = hex_byte(&v[3 + 2 * i..5 + 2 * i])?;
        }
        let mut span = [0u8; 8];
        for (i, b) in span.iter_mut().enumerate() {
            *b = hex_byte(&v[36 + 2 * i..38 + 2 * i])?;
        }
        let flags = hex_byte(&v[53..55])?;
        if trace == [0; 16] || span == [0; 8] || flags & 1 == 0 {
            return None;
        }
        Some(HostParent { trace, span })
    }
}

/// Two lowercase hex digits (the spec allows no uppercase).
fn hex_byte(d: &[u8]) -> Option<u8> {
    let nib = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    Some(nib(d[0])? << 4 | nib(d[1])?)
}

/// Streams (an HTTP exchange: its request's header) and requests (a WebSocket's: Codex's
/// `client_metadata`) that carried a host parent, until the correlator task takes it up with
/// the stream's opening or the request's event. Keyed by raw id (a request id holds a `/`, a
/// stream id none), which never leaves the process.
#[derive(Default)]
pub struct HostParents {
    waiting: Mutex<HashMap<String, HostParent>>,
}

impl HostParents {
    /// Called on the data path when a stream opens, before its observer runs: a short lock,
    /// no allocation beyond the key.
    pub fn put(&self, stream: &str, parent: HostParent) {
        if let Ok(mut w) = self.waiting.lock() {
            if w.len() < MAX_WAITING {
                w.insert(stream.to_owned(), parent);
            }
        }
    }

    /// The parent of a stream or request, once (the correlator task, at its event).
    pub fn take(&self, stream: &str) -> Option<HostParent> {
        self.waiting.lock().ok()?.remove(stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_w3c_traceparent_gives_its_trace_and_parent_ids() {
        let p = HostParent::parse(GOOD.as_bytes()).unwrap();
        assert_eq!(
            p.trace,
            [
                0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e,
                0x47, 0x36
            ]
        );
        assert_eq!(p.span, [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]);
        // A later version may carry more after a dash.
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra";
        assert_eq!(HostParent::parse(later.as_bytes()), Some(p));
        assert_eq!(format!("{p:?}"), "HostParent(..)");
    }

    #[test]
    fn anything_else_is_ignored() {
        let long = format!(
            "01-{}-00f067aa0ba902b7-01-{}",
            "a".repeat(32),
            "x".repeat(300)
        );
        for bad in [
            "",
            "garbage",
            // Uppercase, a wrong version, a version-00 value with more after it.
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
            // All-zero ids, not sampled, wrong separators, not hex.
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            // Oversized.
            &long,
        ] {
            assert_eq!(HostParent::parse(bad.as_bytes()), None, "{bad:?}");
        }
    }

    #[test]
    fn exactly_one_header_or_none() {
        let mut h = HeaderMap::new();
        assert_eq!(HostParent::from_headers(&h), None);
        h.insert("traceparent", HeaderValue::from_static(GOOD));
        assert!(HostParent::from_headers(&h).is_some());
        h.append(
            "traceparent",
            HeaderValue::from_static("00-11111111111111111111111111111111-2222222222222222-01"),
        );
        assert_eq!(HostParent::from_headers(&h), None, "repeated: ignored");
    }

    #[test]
    fn a_parent_is_taken_once() {
        let ps = HostParents::default();
        let p = HostParent::parse(GOOD.as_bytes()).unwrap();
        ps.put("s1", p);
        assert_eq!(ps.take("s2"), None);
        assert_eq!(ps.take("s1"), Some(p));
        assert_eq!(ps.take("s1"), None);
    }
}
