//! The pieces of an OTLP span: the GenAI, MCP and `windowtap.*` attribute names, typed
//! attribute values, the attributes of a record and of a response's usage, error status,
//! trace-clock times in Unix nanoseconds. The tree of spans itself is
//! built in [`super::tree`].

use correlator::records::{Record, WindowRef};
use correlator::{Client, Usage};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, ArrayValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{status::StatusCode, Status};

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
    /// An MCP 2026-07-28 multi round-trip call: its requests, the time it waited on the
    /// client, and `input_unanswered` when its last round got no retry (trace v2's optional
    /// `rounds`, `input_wait`, `outcome_detail`).
    pub const MCP_ROUNDS: &str = "windowtap.mcp.rounds";
    pub const MCP_INPUT_WAIT_MS: &str = "windowtap.mcp.input_wait_ms";
    pub const OUTCOME_DETAIL: &str = "windowtap.outcome_detail";
    pub const HOST: &str = "windowtap.host";
    pub const STREAM: &str = "windowtap.stream";
    pub const REQUEST: &str = "windowtap.request";
    pub const TOOL_CALLS: &str = "windowtap.tool_calls";
    pub const TOOL_CALL_NAMES: &str = "windowtap.tool_call.names";
    pub const TURN_RESPONSES: &str = "windowtap.turn.responses";
    pub const TURN_KIND: &str = "windowtap.turn.kind";
    /// A subagent turn placed under its parent's turn: how many calls may have started it.
    pub const TURN_SPAWN_CANDIDATES: &str = "windowtap.turn.spawn_candidates";
    pub const LINK_ROLE: &str = "windowtap.link";
    /// Experimental: open-telemetry/semantic-conventions-genai PR #370 (not merged).
    pub const ATTRIBUTION_LINK_TYPE: &str = "gen_ai.attribution.link_type";
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

pub fn error_status(word: &str) -> Status {
    Status {
        message: word.to_owned(),
        code: StatusCode::Error as i32,
    }
}

/// Usage on a chat span. `gen_ai.usage.input_tokens` counts every input token, cached ones
/// included (the convention); Anthropic reports cache reads and writes apart from
/// `input_tokens`, so they are added for it; OpenAI's `input_tokens` already holds them.
pub fn usage_attributes(client: Client, u: &Usage, a: &mut Vec<KeyValue>) {
    let cached = match client {
        Client::Claude => u.cache_read.unwrap_or(0) + u.cache_creation.unwrap_or(0),
        _ => 0,
    };
    if let Some(i) = u.input {
        a.push(kv_int(attr::USAGE_INPUT, clamp(i.saturating_add(cached))));
    }
    if let Some(o) = u.output {
        a.push(kv_int(attr::USAGE_OUTPUT, clamp(o)));
    }
    if let Some(c) = u.cache_read {
        a.push(kv_int(attr::USAGE_CACHE_READ, clamp(c)));
    }
    if let Some(c) = u.cache_creation {
        a.push(kv_int(attr::USAGE_CACHE_CREATION, clamp(c)));
    }
}

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The attributes every `execute_tool` span of a record carries (all from the record).
pub fn tool_attributes(record: &Record) -> Vec<KeyValue> {
    let mut a = Vec::with_capacity(20);
    a.push(kv_str(attr::OPERATION_NAME, "execute_tool"));
    a.push(kv_str(attr::TOOL_NAME, &record.tool));
    // The record names no call of the window (hints are not kept in records), so the call id
    // is the MCP call's own pseudonymous id: the interval.
    a.push(kv_str(attr::TOOL_CALL_ID, &record.interval));
    a.push(kv_str(attr::MCP_METHOD_NAME, "tools/call"));
    // The alias is the name the host's MCP configuration gives the server, which is what
    // Codex's own `mcp.tools.call` spans put in `mcp.server.name`.
    a.push(kv_str(attr::MCP_SERVER_NAME, &record.alias));
    // The wrapper speaks MCP over the server's stdio.
    a.push(kv_str(attr::NETWORK_TRANSPORT, "pipe"));
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
    a
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
