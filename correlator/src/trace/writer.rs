//! The writer: one event as one trace v2 line, fields in table order, which the reader
//! accepts as the same event.

use std::fmt::Write as _;

use crate::event::*;
use crate::json::{push_key, push_ms, push_opt_str, push_str};

/// Appends one event as a trace v2 line (without the newline), fields in table order; the
/// optional fields of v2 (`model`, `usage` and its counts, `stop_reason`) only when known.
pub fn write_event(out: &mut String, ev: &Event) {
    out.push_str("{\"type\":\"");
    out.push_str(ev.kind.type_name());
    out.push_str("\",\"t\":");
    push_ms(out, ev.t);
    let s = |out: &mut String, k: &str, v: &str| {
        out.push(',');
        push_key(out, k);
        push_str(out, v);
    };
    let o = |out: &mut String, k: &str, v: Option<&str>| {
        out.push(',');
        push_key(out, k);
        push_opt_str(out, v);
    };
    match &ev.kind {
        EventKind::StreamOpen {
            stream,
            client,
            transport,
            thread,
            host,
        } => {
            s(out, "stream", stream);
            s(out, "client", client.as_str());
            s(out, "transport", transport.as_str());
            o(out, "thread", thread.as_deref());
            o(out, "host", host.as_deref());
        }
        EventKind::Request {
            stream,
            request,
            previous_response,
            outputs,
        } => {
            s(out, "stream", stream);
            s(out, "request", request);
            o(out, "previous_response", previous_response.as_deref());
            out.push_str(",\"outputs\":[");
            for (i, c) in outputs.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_str(out, c);
            }
            out.push(']');
        }
        EventKind::ResponseStart {
            stream,
            response,
            request,
            model,
        } => {
            s(out, "stream", stream);
            s(out, "response", response);
            o(out, "request", request.as_deref());
            if let Some(model) = model {
                s(out, "model", model);
            }
        }
        EventKind::ToolCall {
            stream,
            response,
            call,
            item,
            name,
            namespace,
            kind,
        } => {
            s(out, "stream", stream);
            s(out, "response", response);
            s(out, "call", call);
            o(out, "item", item.as_deref());
            s(out, "name", name);
            o(out, "namespace", namespace.as_deref());
            s(out, "kind", kind.as_str());
        }
        EventKind::ResponseEnd {
            stream,
            response,
            status,
            usage,
            stop_reason,
        } => {
            s(out, "stream", stream);
            s(out, "response", response);
            s(out, "status", status.as_str());
            if let Some(usage) = usage {
                write_usage(out, usage);
            }
            if let Some(reason) = stop_reason {
                s(out, "stop_reason", reason.as_str());
            }
        }
        EventKind::StreamClose { stream } => s(out, "stream", stream),
        EventKind::ObservationLost { stream, reason } => {
            s(out, "stream", stream);
            s(out, "reason", reason);
        }
        EventKind::McpStart {
            interval,
            alias,
            tool,
            start,
            host,
            transport,
        } => {
            s(out, "interval", interval);
            s(out, "alias", alias);
            s(out, "tool", tool);
            out.push_str(",\"start\":");
            push_ms(out, *start);
            o(out, "host", host.as_deref());
            if let Some(word) = transport.as_field() {
                s(out, "transport", word);
            }
        }
        EventKind::McpInterval {
            interval,
            alias,
            tool,
            start,
            end,
            outcome,
            hints,
            host,
            rounds,
            transport,
        } => {
            s(out, "interval", interval);
            s(out, "alias", alias);
            s(out, "tool", tool);
            out.push_str(",\"start\":");
            push_ms(out, *start);
            out.push_str(",\"end\":");
            push_ms(out, *end);
            s(out, "outcome", outcome.as_str());
            o(out, "tool_use_id", hints.tool_use_id.as_deref());
            o(out, "item_id", hints.item_id.as_deref());
            o(out, "call_id", hints.call_id.as_deref());
            o(out, "thread", hints.thread.as_deref());
            o(out, "host", host.as_deref());
            if let Some(r) = rounds {
                out.push_str(",\"rounds\":");
                out.push_str(&r.rounds.to_string());
                out.push_str(",\"input_wait\":");
                push_ms(out, r.input_wait);
                if r.unanswered {
                    s(out, "outcome_detail", Rounds::INPUT_UNANSWERED);
                }
            }
            if let Some(word) = transport.as_field() {
                s(out, "transport", word);
            }
        }
    }
    out.push('}');
}

/// `,"usage":{…}` with the counts that are known, in trace order.
fn write_usage(out: &mut String, usage: &Usage) {
    out.push_str(",\"usage\":{");
    let mut first = true;
    for (k, v) in usage.fields() {
        if let Some(v) = v {
            if !first {
                out.push(',');
            }
            first = false;
            push_key(out, k);
            let _ = write!(out, "{v}");
        }
    }
    out.push('}');
}

/// One event as a trace v2 line, newline included.
pub fn event_line(ev: &Event) -> String {
    let mut s = String::with_capacity(160);
    write_event(&mut s, ev);
    s.push('\n');
    s
}
