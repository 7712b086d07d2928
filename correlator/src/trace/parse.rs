//! The strict reading of one event line: from the line's JSON object to an [`Event`],
//! checking fields and types and naming what was wrong. The order rules across lines are the
//! validator's; the fast path only takes lines this reading would accept the same way.

use serde_json::{Map, Value};

use crate::event::*;
use crate::lines::{fault, kind_of, order, Fault, Fields, Problem, Token};

use super::header::Version;

/// `usage` of a `response_end`: absent or null is none; else an object whose four counts are
/// each absent, null or a non-negative integer (other keys are ignored, as at the top level).
fn usage(f: &Fields<'_>) -> Result<Option<Usage>, Fault> {
    let obj = match f.obj.get("usage") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(obj)) => obj,
        Some(other) => return Err(f.wrong("usage", "an object or null", other)),
    };
    let count = |k: &'static str| -> Result<Option<u64>, Fault> {
        match obj.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => n.as_u64().map(Some).ok_or_else(|| {
                fault(
                    "usage",
                    Problem::NotACountIn {
                        key: k,
                        got: Token::of(&n.to_string()),
                    },
                )
            }),
            Some(other) => Err(fault(
                "usage",
                Problem::NotACountIn {
                    key: k,
                    got: Token::of(kind_of(other)),
                },
            )),
        }
    };
    Ok(Some(Usage {
        input: count("input")?,
        output: count("output")?,
        cache_read: count("cache_read")?,
        cache_creation: count("cache_creation")?,
    }))
}

/// `transport` of `mcp_start` and `mcp_interval` (trace v2): absent is stdio, else only
/// `"http"` (no `null`, no `"stdio"`: one spelling per meaning). Not a field of v1, where every
/// call came from the stdio wrapper: there the key is ignored like any unknown one.
fn mcp_transport(f: &Fields<'_>, v2: bool) -> Result<McpTransport, Fault> {
    match f.obj.get("transport") {
        None => Ok(McpTransport::Stdio),
        Some(_) if !v2 => Ok(McpTransport::Stdio),
        Some(_) => f.word("transport", McpTransport::parse, McpTransport::WORDS),
    }
}

fn outcome_of(f: &Fields<'_>) -> Result<Outcome, Fault> {
    f.word("outcome", Outcome::parse, Outcome::WORDS)
}

/// The optional Multi Round-Trip fields of an `mcp_interval`: `rounds` (an integer, at least
/// 1), `input_wait` (milliseconds, at most the interval's length) and `outcome_detail` (only
/// `input_unanswered`, only with outcome `cancelled`). All absent is a call of one request.
fn rounds(f: &Fields<'_>, outcome: Outcome, length: Millis) -> Result<Option<Rounds>, Fault> {
    let (r, w, d) = (
        f.obj.get("rounds"),
        f.obj.get("input_wait"),
        f.obj.get("outcome_detail"),
    );
    if r.is_none() && w.is_none() && d.is_none() {
        return Ok(None);
    }
    let rounds = match r {
        None => 1,
        Some(v) => match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
            Some(n) if n >= 1 => n,
            _ => return Err(f.wrong("rounds", "an integer of at least 1", v)),
        },
    };
    let input_wait = match w {
        None => 0.0,
        Some(v) => match v.as_f64() {
            Some(ms) if ms.is_finite() && ms >= 0.0 && ms <= length => ms,
            _ => return Err(f.wrong("input_wait", "milliseconds, at most end - start", v)),
        },
    };
    let unanswered = match d {
        None => false,
        Some(v)
            if v.as_str() == Some(Rounds::INPUT_UNANSWERED) && outcome == Outcome::Cancelled =>
        {
            true
        }
        Some(v) => {
            return Err(f.wrong(
                "outcome_detail",
                "\"input_unanswered\", with outcome \"cancelled\"",
                v,
            ))
        }
    };
    Ok(Some(Rounds {
        rounds,
        input_wait,
        unanswered,
    }))
}

/// `stop_reason` of a `response_end`: absent or null is none, else one of the fixed words.
fn stop_reason(f: &Fields<'_>) -> Result<Option<StopReason>, Fault> {
    match f.obj.get("stop_reason") {
        None | Some(Value::Null) => Ok(None),
        Some(_) => f
            .word("stop_reason", StopReason::parse, StopReason::WORDS)
            .map(Some),
    }
}

/// Parses one event line's JSON into an [`Event`], checking fields and types only.
pub(super) fn parse_event<'a>(
    obj: &'a Map<String, Value>,
    version: Version,
) -> Result<Event<&'a str>, Fault> {
    let f = Fields::new(obj);
    let v2 = version == Version::V2;
    // Required in v2 (a string or null); not a field of v1, where every host is null.
    let host = |f: &Fields<'a>| if v2 { f.opt_string("host") } else { Ok(None) };
    let ty = f.string("type")?;
    if ty == "trace" {
        return Err(fault("type", Problem::Rule("a second trace header")));
    }
    let t = f.time("t")?;
    let kind = match ty {
        "stream_open" => EventKind::StreamOpen {
            stream: f.string("stream")?,
            client: f.word("client", Client::parse, Client::WORDS)?,
            transport: f.word("transport", Transport::parse, Transport::WORDS)?,
            thread: f.opt_string("thread")?,
            host: host(&f)?,
        },
        "request" => EventKind::Request {
            stream: f.string("stream")?,
            request: f.string("request")?,
            previous_response: f.opt_string("previous_response")?,
            outputs: f.string_array("outputs")?,
        },
        "response_start" => EventKind::ResponseStart {
            stream: f.string("stream")?,
            response: f.string("response")?,
            request: f.opt_string("request")?,
            model: if v2 { f.hint("model")? } else { None },
        },
        "tool_call" => EventKind::ToolCall {
            stream: f.string("stream")?,
            response: f.string("response")?,
            call: f.string("call")?,
            item: f.opt_string("item")?,
            name: f.string("name")?,
            namespace: f.opt_string("namespace")?,
            kind: f.word("kind", CallKind::parse, CallKind::WORDS)?,
        },
        "response_end" => EventKind::ResponseEnd {
            stream: f.string("stream")?,
            response: f.string("response")?,
            status: f.word("status", ResponseStatus::parse, ResponseStatus::WORDS)?,
            usage: if v2 { usage(&f)? } else { None },
            stop_reason: if v2 { stop_reason(&f)? } else { None },
        },
        "stream_close" => EventKind::StreamClose {
            stream: f.string("stream")?,
        },
        "observation_lost" => EventKind::ObservationLost {
            stream: f.string("stream")?,
            reason: f.string("reason")?,
        },
        "mcp_start" => {
            let start = f.time("start")?;
            if start > t {
                return Err(order("start", start, "is after the report time t=", t, ""));
            }
            EventKind::McpStart {
                interval: f.string("interval")?,
                alias: f.string("alias")?,
                tool: f.string("tool")?,
                start,
                host: host(&f)?,
                transport: mcp_transport(&f, v2)?,
            }
        }
        "mcp_interval" => {
            let start = f.time("start")?;
            let end = f.time("end")?;
            if end < start {
                return Err(order("end", end, "is before start ", start, ""));
            }
            if end > t {
                return Err(order("end", end, "is after the report time t=", t, ""));
            }
            EventKind::McpInterval {
                interval: f.string("interval")?,
                alias: f.string("alias")?,
                tool: f.string("tool")?,
                start,
                end,
                outcome: f.word("outcome", Outcome::parse, Outcome::WORDS)?,
                hints: Hints {
                    tool_use_id: f.hint("tool_use_id")?,
                    item_id: f.hint("item_id")?,
                    call_id: f.hint("call_id")?,
                    thread: f.hint("thread")?,
                },
                host: host(&f)?,
                // Keys of v2 only: in a v1 line they are not fields, like `host`.
                rounds: if v2 {
                    rounds(&f, outcome_of(&f)?, end - start)?
                } else {
                    None
                },
                transport: mcp_transport(&f, v2)?,
            }
        }
        other => {
            return Err(fault(
                "type",
                Problem::UnknownType {
                    what: "event",
                    got: Token::of(other),
                    hint: "",
                },
            ))
        }
    };
    Ok(Event { t, kind })
}
