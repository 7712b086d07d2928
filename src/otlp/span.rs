//! The pieces of an OTLP span: the GenAI, MCP and `windowtap.*` attribute names, typed
//! attribute values, trace-clock times in Unix nanoseconds, and the export request. The tree
//! of spans itself is built in [`super::tree`].

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    any_value, AnyValue, ArrayValue, InstrumentationScope, KeyValue,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

/// Attribute names. GenAI and MCP names are the semantic-convention ones (design: protocols.md
/// §5); the `opentelemetry-semantic-conventions` constants are deprecated, so they live here.
pub mod attr {
    pub const OPERATION_NAME: &str = "gen_ai.operation.name";
    pub const TOOL_NAME: &str = "gen_ai.tool.name";
    pub const TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
    pub const RESPONSE_ID: &str = "gen_ai.response.id";
    pub const CONVERSATION_ID: &str = "gen_ai.conversation.id";
    pub const PROVIDER_NAME: &str = "gen_ai.provider.name";
    pub const AGENT_NAME: &str = "gen_ai.agent.name";
    pub const REQUEST_MODEL: &str = "gen_ai.request.model";
    pub const RESPONSE_MODEL: &str = "gen_ai.response.model";
    pub const FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
    pub const USAGE_INPUT: &str = "gen_ai.usage.input_tokens";
    pub const USAGE_OUTPUT: &str = "gen_ai.usage.output_tokens";
    pub const USAGE_CACHE_READ: &str = "gen_ai.usage.cache_read.input_tokens";
    pub const USAGE_CACHE_CREATION: &str = "gen_ai.usage.cache_creation.input_tokens";
    /// Langfuse and Phoenix group traces into sessions by this one.
    pub const SESSION_ID: &str = "session.id";
    pub const ERROR_TYPE: &str = "error.type";
    pub const NETWORK_TRANSPORT: &str = "network.transport";
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
    pub const OUTCOME: &str = "windowtap.outcome";
    pub const HOST: &str = "windowtap.host";
    pub const STREAM: &str = "windowtap.stream";
    pub const REQUEST: &str = "windowtap.request";
    pub const TOOL_CALLS: &str = "windowtap.tool_calls";
    pub const TOOL_CALL_NAMES: &str = "windowtap.tool_call.names";
    pub const TURN_RESPONSES: &str = "windowtap.turn.responses";
    pub const TURN_KIND: &str = "windowtap.turn.kind";
    pub const LINK_ROLE: &str = "windowtap.link";
}

/// The instrumentation scope every span is reported under.
pub const SCOPE_NAME: &str = "windowtap";

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

pub fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(value) }),
        key_strindex: 0,
    }
}

pub fn kv_int(key: &str, value: i64) -> KeyValue {
    kv(key, any_value::Value::IntValue(value))
}

pub fn kv_ms(key: &str, value: f64) -> KeyValue {
    kv(key, any_value::Value::DoubleValue(value))
}

pub fn kv_strings<'a>(key: &str, values: impl Iterator<Item = &'a str>) -> KeyValue {
    let values = values
        .map(|v| AnyValue {
            value: Some(any_value::Value::StringValue(v.to_owned())),
        })
        .collect();
    kv(key, any_value::Value::ArrayValue(ArrayValue { values }))
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

    #[test]
    fn times_saturate_instead_of_wrapping() {
        assert_eq!(unix_nanos(10, 0.0015), 1510);
        assert_eq!(unix_nanos(u64::MAX - 1, 1.0), u64::MAX);
        assert_eq!(unix_nanos(5, -1.0), 0);
        assert_eq!(unix_nanos(7, f64::NAN), 7);
        assert_eq!(unix_nanos(0, f64::INFINITY), u64::MAX);
    }
}
