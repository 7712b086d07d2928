//! One attribution record → one OTLP span (`execute_tool {tool}`, kind INTERNAL), with the
//! OpenTelemetry GenAI and MCP attribute names and windowtap's own `windowtap.*` attributes.
//!
//! Everything a span carries comes from the record, which only ever holds pseudonymous ids,
//! fixed words, counts, times and tool names (design.md §7): nothing is added here.

use correlator::records::{Record, WindowRef};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    any_value, AnyValue, ArrayValue, InstrumentationScope, KeyValue,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{span::SpanKind, ResourceSpans, ScopeSpans, Span};
use sha2::{Digest, Sha256};

/// Attribute names. GenAI and MCP names are the semantic-convention ones (design: protocols.md
/// §5); the `opentelemetry-semantic-conventions` constants are deprecated, so they live here.
pub mod attr {
    pub const OPERATION_NAME: &str = "gen_ai.operation.name";
    pub const TOOL_NAME: &str = "gen_ai.tool.name";
    pub const TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
    pub const RESPONSE_ID: &str = "gen_ai.response.id";
    pub const CONVERSATION_ID: &str = "gen_ai.conversation.id";
    pub const MCP_METHOD_NAME: &str = "mcp.method.name";
    pub const MCP_SERVER_NAME: &str = "mcp.server.name";
    pub const DECISION: &str = "windowtap.decision";
    pub const REASON: &str = "windowtap.reason";
    pub const EVIDENCE: &str = "windowtap.evidence";
    pub const CANDIDATES: &str = "windowtap.candidates";
    pub const INTERVAL: &str = "windowtap.interval";
    pub const DECIDED_AT_MS: &str = "windowtap.decided_at_ms";
    pub const WINDOW_STREAM: &str = "windowtap.window.stream";
    pub const WINDOW_REQUEST: &str = "windowtap.window.request";
    pub const WINDOW_OPEN_MS: &str = "windowtap.window.open_ms";
    pub const WINDOW_CLOSE_MS: &str = "windowtap.window.close_ms";
}

/// The instrumentation scope every span is reported under.
pub const SCOPE_NAME: &str = "windowtap";

/// The span's trace id: the first 16 bytes of SHA-256 over a domain label and the interval's
/// (already pseudonymous) id, so a replay of the same trace exports the same ids.
pub fn trace_id(interval: &str) -> [u8; 16] {
    let d = digest(b"windowtap.otlp.trace\0", interval);
    let mut id = [0u8; 16];
    id.copy_from_slice(&d[..16]);
    nonzero(&mut id);
    id
}

/// The span's id: the first 8 bytes of SHA-256 over another domain label and the interval id.
pub fn span_id(interval: &str) -> [u8; 8] {
    let d = digest(b"windowtap.otlp.span\0", interval);
    let mut id = [0u8; 8];
    id.copy_from_slice(&d[..8]);
    nonzero(&mut id);
    id
}

fn digest(label: &[u8], interval: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(label);
    h.update(interval.as_bytes());
    h.finalize().into()
}

/// An all-zero id is invalid in OTLP; a hash yields one with probability 2^-64 at most, but
/// a receiver would drop the span, so make it impossible.
fn nonzero(id: &mut [u8]) {
    if id.iter().all(|b| *b == 0) {
        if let Some(last) = id.last_mut() {
            *last = 1;
        }
    }
}

/// Unix nanoseconds of a trace-clock time: the run's epoch plus `ms`. Times before the
/// epoch, non-finite or past the u64 range saturate rather than wrap.
pub fn unix_nanos(epoch_unix_nanos: u64, ms: f64) -> u64 {
    if ms.is_nan() {
        return epoch_unix_nanos;
    }
    let offset = ms_to_nanos(ms.abs());
    if ms < 0.0 {
        epoch_unix_nanos.saturating_sub(offset)
    } else {
        epoch_unix_nanos.saturating_add(offset)
    }
}

/// Whole milliseconds and the fraction apart, so that a Unix time in ms (about 1.7e12)
/// keeps its sub-microsecond part instead of rounding to f64's 256 ns steps at 1e18.
fn ms_to_nanos(ms: f64) -> u64 {
    // `as` saturates at u64::MAX (and for infinity).
    let whole = (ms.trunc() as u64).saturating_mul(1_000_000);
    let frac = (ms.fract() * 1e6).round();
    whole.saturating_add(if frac.is_finite() { frac as u64 } else { 0 })
}

pub fn kv_str(key: &str, value: &str) -> KeyValue {
    kv(key, any_value::Value::StringValue(value.to_owned()))
}

fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(value) }),
        key_strindex: 0,
    }
}

fn kv_int(key: &str, value: i64) -> KeyValue {
    kv(key, any_value::Value::IntValue(value))
}

fn kv_ms(key: &str, value: f64) -> KeyValue {
    kv(key, any_value::Value::DoubleValue(value))
}

fn kv_strings<'a>(key: &str, values: impl Iterator<Item = &'a str>) -> KeyValue {
    let values = values
        .map(|v| AnyValue {
            value: Some(any_value::Value::StringValue(v.to_owned())),
        })
        .collect();
    kv(key, any_value::Value::ArrayValue(ArrayValue { values }))
}

/// The span for one record. `epoch_unix_nanos` is the wall-clock time of the trace clock's 0.
pub fn span(record: &Record, epoch_unix_nanos: u64) -> Span {
    let mut a = Vec::with_capacity(17);
    a.push(kv_str(attr::OPERATION_NAME, "execute_tool"));
    a.push(kv_str(attr::TOOL_NAME, &record.tool));
    // The record names no call of the window (hints are not kept in records), so the call id
    // is the MCP call's own pseudonymous id: the interval.
    a.push(kv_str(attr::TOOL_CALL_ID, &record.interval));
    a.push(kv_str(attr::MCP_METHOD_NAME, "tools/call"));
    // The alias is the name the host's MCP configuration gives the server, which is what
    // Codex's own `mcp.tools.call` spans put in `mcp.server.name`.
    a.push(kv_str(attr::MCP_SERVER_NAME, &record.alias));
    a.push(kv_str(attr::DECISION, record.decision()));
    if let Some(reason) = record.reason {
        a.push(kv_str(attr::REASON, reason.as_str()));
    }
    a.push(kv_strings(
        attr::EVIDENCE,
        record.evidence.iter().map(|e| e.as_str()),
    ));
    a.push(kv_int(
        attr::CANDIDATES,
        i64::try_from(record.candidates).unwrap_or(i64::MAX),
    ));
    a.push(kv_str(attr::INTERVAL, &record.interval));
    a.push(kv_ms(attr::DECIDED_AT_MS, record.decided_at));
    if let Some(w) = &record.window {
        window_attributes(w, &mut a);
    }
    Span {
        trace_id: trace_id(&record.interval).to_vec(),
        span_id: span_id(&record.interval).to_vec(),
        trace_state: String::new(),
        parent_span_id: Vec::new(),
        // W3C trace flags: sampled.
        flags: 1,
        name: format!("execute_tool {}", record.tool),
        kind: SpanKind::Internal as i32,
        start_time_unix_nano: unix_nanos(epoch_unix_nanos, record.start),
        end_time_unix_nano: unix_nanos(epoch_unix_nanos, record.end),
        attributes: a,
        dropped_attributes_count: 0,
        events: Vec::new(),
        dropped_events_count: 0,
        links: Vec::new(),
        dropped_links_count: 0,
        // An abstention is an answer, not an error: the status stays unset.
        status: None,
    }
}

fn window_attributes(w: &WindowRef, a: &mut Vec<KeyValue>) {
    a.push(kv_str(attr::RESPONSE_ID, &w.response));
    if let Some(thread) = &w.thread {
        a.push(kv_str(attr::CONVERSATION_ID, thread));
    }
    a.push(kv_str(attr::WINDOW_STREAM, &w.stream));
    if let Some(request) = &w.request {
        a.push(kv_str(attr::WINDOW_REQUEST, request));
    }
    a.push(kv_ms(attr::WINDOW_OPEN_MS, w.open));
    if let Some(close) = w.close {
        a.push(kv_ms(attr::WINDOW_CLOSE_MS, close));
    }
}

/// One export request: every span under one resource and the windowtap scope.
pub fn request(resource: &[KeyValue], spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: resource.to_vec(),
                dropped_attributes_count: 0,
                entity_refs: Vec::new(),
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: SCOPE_NAME.to_owned(),
                    version: env!("CARGO_PKG_VERSION").to_owned(),
                    attributes: Vec::new(),
                    dropped_attributes_count: 0,
                }),
                spans,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use correlator::records::{Evidence, Reason};

    fn attributed() -> Record {
        Record {
            interval: "i1".into(),
            alias: "probe".into(),
            tool: "echo".into(),
            start: 7187.0,
            end: 7264.0,
            reason: None,
            evidence: vec![Evidence::Containment, Evidence::ItemId, Evidence::Thread],
            candidates: 1,
            window: Some(WindowRef {
                thread: Some("th1".into()),
                stream: "s1".into(),
                response: "r1".into(),
                request: Some("q2".into()),
                open: 6905.0,
                close: Some(7278.0),
            }),
            decided_at: 7280.0,
        }
    }

    fn value<'a>(span: &'a Span, key: &str) -> Option<&'a any_value::Value> {
        span.attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.as_ref())
            .and_then(|v| v.value.as_ref())
    }

    fn string<'a>(span: &'a Span, key: &str) -> Option<&'a str> {
        match value(span, key) {
            Some(any_value::Value::StringValue(s)) => Some(s),
            _ => None,
        }
    }

    #[test]
    fn an_attributed_record_is_an_execute_tool_span_naming_its_window() {
        let s = span(&attributed(), 1_000_000_000_000);
        assert_eq!(s.name, "execute_tool echo");
        assert_eq!(s.kind, SpanKind::Internal as i32);
        assert_eq!(s.start_time_unix_nano, 1_000_000_000_000 + 7_187_000_000);
        assert_eq!(s.end_time_unix_nano, 1_000_000_000_000 + 7_264_000_000);
        assert_eq!(string(&s, "gen_ai.operation.name"), Some("execute_tool"));
        assert_eq!(string(&s, "gen_ai.tool.name"), Some("echo"));
        assert_eq!(string(&s, "gen_ai.tool.call.id"), Some("i1"));
        assert_eq!(string(&s, "gen_ai.response.id"), Some("r1"));
        assert_eq!(string(&s, "gen_ai.conversation.id"), Some("th1"));
        assert_eq!(string(&s, "mcp.method.name"), Some("tools/call"));
        assert_eq!(string(&s, "mcp.server.name"), Some("probe"));
        assert_eq!(string(&s, "windowtap.decision"), Some("attributed"));
        assert_eq!(string(&s, "windowtap.reason"), None);
        assert_eq!(string(&s, "windowtap.interval"), Some("i1"));
        assert_eq!(string(&s, "windowtap.window.request"), Some("q2"));
        assert_eq!(
            value(&s, "windowtap.candidates"),
            Some(&any_value::Value::IntValue(1))
        );
        assert_eq!(
            value(&s, "windowtap.window.close_ms"),
            Some(&any_value::Value::DoubleValue(7278.0))
        );
        let Some(any_value::Value::ArrayValue(ev)) = value(&s, "windowtap.evidence") else {
            panic!("evidence is not an array");
        };
        let ev: Vec<_> = ev
            .values
            .iter()
            .filter_map(|v| match &v.value {
                Some(any_value::Value::StringValue(s)) => Some(s.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(ev, ["containment", "item_id", "thread"]);
    }

    #[test]
    fn an_abstention_carries_its_reason_and_no_window() {
        let mut r = attributed();
        r.reason = Some(Reason::Ambiguous);
        r.evidence.clear();
        r.candidates = 2;
        r.window = None;
        let s = span(&r, 0);
        assert_eq!(string(&s, "windowtap.decision"), Some("abstained"));
        assert_eq!(string(&s, "windowtap.reason"), Some("ambiguous"));
        assert_eq!(string(&s, "gen_ai.response.id"), None);
        assert_eq!(string(&s, "gen_ai.conversation.id"), None);
        assert_eq!(string(&s, "windowtap.window.stream"), None);
        assert_eq!(s.status, None);
    }

    #[test]
    fn an_unknown_thread_gives_no_conversation_id() {
        let mut r = attributed();
        if let Some(w) = &mut r.window {
            w.thread = None;
        }
        assert_eq!(string(&span(&r, 0), "gen_ai.conversation.id"), None);
    }

    #[test]
    fn ids_depend_only_on_the_interval() {
        let a = span(&attributed(), 5);
        let mut other = attributed();
        other.tool = "other".into();
        let b = span(&other, 99);
        assert_eq!((a.trace_id.len(), a.span_id.len()), (16, 8));
        assert_eq!((&a.trace_id, &a.span_id), (&b.trace_id, &b.span_id));
        other.interval = "i2".into();
        let c = span(&other, 5);
        assert_ne!(a.trace_id, c.trace_id);
        assert_ne!(a.span_id, c.span_id);
        assert_ne!(
            a.trace_id[..8],
            a.span_id[..],
            "trace and span ids are separate hashes"
        );
    }

    #[test]
    fn times_saturate_instead_of_wrapping() {
        assert_eq!(unix_nanos(10, 0.0015), 1510);
        assert_eq!(unix_nanos(u64::MAX - 1, 1.0), u64::MAX);
        assert_eq!(unix_nanos(5, -1.0), 0);
        assert_eq!(unix_nanos(7, f64::NAN), 7);
        assert_eq!(unix_nanos(0, f64::INFINITY), u64::MAX);
    }
}
