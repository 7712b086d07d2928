//! A finished span of windowtap's tree as the OpenTelemetry SDK's [`SpanData`], the form the
//! SDK's batch processor and `opentelemetry-otlp`'s exporter take.
//!
//! The tree ([`super::tree`]) builds spans after the fact, with ids derived from a source key
//! and times from records: neither the SDK's tracer (which starts spans now, with ids from an
//! `IdGenerator` that sees no span) nor its span builders fit. `SpanData` is the SDK's
//! exported form, with every id and time given; the exporter encodes it back into the very
//! same OTLP message, so ids, parents, times, attributes, links and status are unchanged.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{
    Event, Link, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{Array, InstrumentationScope, KeyValue, StringValue, Value};
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue as ProtoKeyValue};
use opentelemetry_proto::tonic::trace::v1::{span, status::StatusCode, Span};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

/// OTLP span flags: whether the parent's remoteness is known, and whether it is remote.
const HAS_IS_REMOTE: u32 = 0x100;
const IS_REMOTE: u32 = 0x200;

/// The scope every windowtap span is reported under.
pub fn scope() -> InstrumentationScope {
    InstrumentationScope::builder(super::span::SCOPE_NAME)
        .with_version(env!("CARGO_PKG_VERSION"))
        .build()
}

pub fn span_data(s: Span, scope: &InstrumentationScope) -> SpanData {
    let mut events = SpanEvents::default();
    events.events = s
        .events
        .into_iter()
        .map(|e| {
            Event::new(
                e.name,
                time(e.time_unix_nano),
                attributes(e.attributes),
                e.dropped_attributes_count,
            )
        })
        .collect();
    events.dropped_count = s.dropped_events_count;
    let mut links = SpanLinks::default();
    links.links = s
        .links
        .into_iter()
        .map(|l| {
            let context = context(&l.trace_id, &l.span_id, l.flags, &l.trace_state);
            Link::new(
                context,
                attributes(l.attributes),
                l.dropped_attributes_count,
            )
        })
        .collect();
    links.dropped_count = s.dropped_links_count;
    SpanData {
        span_context: context(&s.trace_id, &s.span_id, s.flags, &s.trace_state),
        parent_span_id: span_id(&s.parent_span_id),
        parent_span_is_remote: s.flags & (HAS_IS_REMOTE | IS_REMOTE) == HAS_IS_REMOTE | IS_REMOTE,
        span_kind: kind(s.kind),
        name: s.name.into(),
        start_time: time(s.start_time_unix_nano),
        end_time: time(s.end_time_unix_nano),
        attributes: attributes(s.attributes),
        dropped_attributes_count: s.dropped_attributes_count,
        events,
        links,
        status: match s.status {
            Some(st) if st.code == StatusCode::Error as i32 => Status::error(st.message),
            Some(st) if st.code == StatusCode::Ok as i32 => Status::Ok,
            _ => Status::Unset,
        },
        instrumentation_scope: scope.clone(),
    }
}

fn context(trace: &[u8], span: &[u8], flags: u32, state: &str) -> SpanContext {
    let trace = <[u8; 16]>::try_from(trace).map_or(TraceId::INVALID, TraceId::from_bytes);
    let state = state.parse().unwrap_or(TraceState::NONE);
    // The low byte of OTLP's flags is the W3C trace flags.
    SpanContext::new(
        trace,
        span_id(span),
        TraceFlags::new(flags as u8),
        false,
        state,
    )
}

/// An empty or malformed id is the invalid one, which the exporter writes as no id.
fn span_id(b: &[u8]) -> SpanId {
    <[u8; 8]>::try_from(b).map_or(SpanId::INVALID, SpanId::from_bytes)
}

fn time(unix_nanos: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(unix_nanos)
}

fn kind(k: i32) -> SpanKind {
    match span::SpanKind::try_from(k) {
        Ok(span::SpanKind::Server) => SpanKind::Server,
        Ok(span::SpanKind::Client) => SpanKind::Client,
        Ok(span::SpanKind::Producer) => SpanKind::Producer,
        Ok(span::SpanKind::Consumer) => SpanKind::Consumer,
        _ => SpanKind::Internal,
    }
}

fn attributes(kvs: Vec<ProtoKeyValue>) -> Vec<KeyValue> {
    kvs.into_iter()
        .filter_map(|kv| Some(KeyValue::new(kv.key, value(kv.value?.value?)?)))
        .collect()
}

/// The value kinds the tree writes (strings, numbers, booleans, arrays of one kind); a map or
/// bytes, which the tree never writes and `Value` cannot hold, is left out.
fn value(v: any_value::Value) -> Option<Value> {
    use any_value::Value as V;
    Some(match v {
        V::StringValue(s) => Value::String(s.into()),
        V::BoolValue(b) => Value::Bool(b),
        V::IntValue(i) => Value::I64(i),
        V::DoubleValue(d) => Value::F64(d),
        V::ArrayValue(a) => {
            let items: Vec<V> = a.values.into_iter().filter_map(|v| v.value).collect();
            Value::Array(match items.first() {
                None | Some(V::StringValue(_)) => Array::String(collect(items, |v| match v {
                    V::StringValue(s) => Some(StringValue::from(s)),
                    _ => None,
                })?),
                Some(V::BoolValue(_)) => Array::Bool(collect(items, |v| match v {
                    V::BoolValue(b) => Some(b),
                    _ => None,
                })?),
                Some(V::IntValue(_)) => Array::I64(collect(items, |v| match v {
                    V::IntValue(i) => Some(i),
                    _ => None,
                })?),
                Some(V::DoubleValue(_)) => Array::F64(collect(items, |v| match v {
                    V::DoubleValue(d) => Some(d),
                    _ => None,
                })?),
                Some(_) => return None,
            })
        }
        V::KvlistValue(_) | V::BytesValue(_) | V::StringValueStrindex(_) => return None,
    })
}

/// Every item of one kind, or `None` for a mixed array (`Value` arrays are homogeneous).
fn collect<T>(
    items: Vec<any_value::Value>,
    f: impl Fn(any_value::Value) -> Option<T>,
) -> Option<Vec<T>> {
    items.into_iter().map(f).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::trace::v1::{span::Link as ProtoLink, Status as ProtoStatus};
    use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
    use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;

    use crate::span::{error_status, kv, kv_int, kv_ms, kv_str, kv_strings};

    /// What the tree writes survives the SDK's form and the exporter's encoding unchanged:
    /// the ids (replay's determinism), parent, times, kind, attributes, links and status.
    #[test]
    fn a_tree_span_encodes_back_to_itself() {
        let span = Span {
            trace_id: (1..=16).collect(),
            span_id: (1..=8).collect(),
            parent_span_id: (11..=18).collect(),
            flags: 1,
            name: "execute_tool echo".into(),
            kind: span::SpanKind::Client as i32,
            start_time_unix_nano: 1_767_225_600_123_456_789,
            end_time_unix_nano: 1_767_225_601_000_000_001,
            attributes: vec![
                kv_str("gen_ai.tool.name", "echo"),
                kv_int("windowtap.candidates", 2),
                kv_ms("windowtap.decided_at_ms", 12.5),
                kv("b", any_value::Value::BoolValue(true)),
                kv_strings("windowtap.evidence", ["call_id", "timing"].into_iter()),
                kv_strings("empty", std::iter::empty()),
            ],
            links: vec![ProtoLink {
                trace_id: vec![7; 16],
                span_id: vec![8; 8],
                attributes: vec![kv_str("windowtap.link", "candidate")],
                flags: 1,
                ..Default::default()
            }],
            status: Some(error_status("lost")),
            ..Default::default()
        };
        let data = span_data(span.clone(), &scope());
        let rs =
            group_spans_by_resource_and_scope(vec![data], &ResourceAttributesWithSchema::default());
        let req = ExportTraceServiceRequest { resource_spans: rs };
        let scope_spans = &req.resource_spans[0].scope_spans[0];
        assert_eq!(scope_spans.scope.as_ref().unwrap().name, "windowtap");
        let got = &scope_spans.spans[0];
        assert_eq!(got.trace_id, span.trace_id);
        assert_eq!(got.span_id, span.span_id);
        assert_eq!(got.parent_span_id, span.parent_span_id);
        assert_eq!(got.name, span.name);
        assert_eq!(got.kind, span.kind);
        assert_eq!(got.start_time_unix_nano, span.start_time_unix_nano);
        assert_eq!(got.end_time_unix_nano, span.end_time_unix_nano);
        assert_eq!(got.attributes, span.attributes);
        assert_eq!(got.links.len(), 1);
        assert_eq!(got.links[0].trace_id, vec![7; 16]);
        assert_eq!(got.links[0].span_id, vec![8; 8]);
        assert_eq!(got.links[0].attributes, span.links[0].attributes);
        assert_eq!(
            got.status,
            Some(ProtoStatus {
                message: "lost".into(),
                code: StatusCode::Error as i32
            })
        );
        // Sampled, the parent's remoteness known (not remote).
        assert_eq!(got.flags, 0x101);
    }

    #[test]
    fn a_root_span_has_no_parent_id() {
        let data = span_data(
            Span {
                trace_id: vec![1; 16],
                span_id: vec![2; 8],
                ..Default::default()
            },
            &scope(),
        );
        assert_eq!(data.parent_span_id, SpanId::INVALID);
    }
}
