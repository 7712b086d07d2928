//! Request-body scanners: what a request says about the chain it continues (docs/design.md §3).
//!
//! Bodies re-send the whole conversation and run to megabytes, so nothing here builds a
//! `serde_json::Value`: the serde visitors keep only the few ids they look for and skip the rest
//! (prompts, tool arguments and results included) with `IgnoredAny`, which scans without
//! allocating.
//!
//! - Anthropic Messages: the `tool_use_id`s of the `tool_result` blocks in the **last** `user`
//!   message (the results of the response being continued; earlier ones belong to history).
//! - Responses (HTTP body or WebSocket `response.create` / `response.append` frame):
//!   `previous_response_id`, and the `call_id`s of `function_call_output` /
//!   `custom_tool_call_output` items in `input`; and Codex's trace context on a WebSocket,
//!   `client_metadata.ws_request_header_traceparent` (a short string, kept only for
//!   `--join-host-trace`; the relay parses it and it is never written).

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde::Deserialize;
use thiserror::Error;

/// Bound on one request body (or one WebSocket message) after decoding.
pub(super) const MAX_BODY: usize = 64 << 20;

/// The longest trace context kept from a request (a W3C `traceparent` is 55 bytes; longer
/// ones are not read further).
pub(super) const MAX_TRACE_CONTEXT: usize = 256;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum BodyError {
    /// The body is not JSON of the expected shape (the message says where; it never quotes it).
    #[error("request body is not the expected JSON: {0}")]
    Json(String),
}

fn json_err(e: serde_json::Error) -> BodyError {
    // serde_json's messages name a position and an expectation, never the input's text.
    BodyError::Json(format!(
        "{:?} at line {} column {}",
        e.classify(),
        e.line(),
        e.column()
    ))
}

/// What a request says about its predecessor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestFacts {
    pub previous_response: Option<String>,
    /// Call ids whose tool output the request carries.
    pub outputs: Vec<String>,
}

/// A Responses request (POST body or WebSocket client frame).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResponsesRequest {
    /// The frame's `type` (`response.create`, `response.append`, …); `None` in a POST body.
    pub kind: Option<String>,
    /// The WebSocket lane (`stream_id`), if any.
    pub lane: Option<String>,
    pub facts: RequestFacts,
    /// Codex's W3C trace context for this request on a WebSocket
    /// (`client_metadata.ws_request_header_traceparent`), unparsed, when it is a string of at
    /// most [`MAX_TRACE_CONTEXT`] bytes.
    pub trace_context: Option<String>,
}

/// Scans an Anthropic `/v1/messages` request body.
pub fn messages_request(body: &[u8]) -> Result<RequestFacts, BodyError> {
    #[derive(Deserialize)]
    struct Body {
        #[serde(default)]
        messages: LastUserResults,
    }
    let Object(b): Object<Body> = serde_json::from_slice(body).map_err(json_err)?;
    Ok(RequestFacts {
        previous_response: None,
        outputs: b.messages.0,
    })
}

/// Scans a Responses request: a POST `/responses` body or a WebSocket client frame.
pub fn responses_request(body: &[u8]) -> Result<ResponsesRequest, BodyError> {
    #[derive(Deserialize)]
    struct Body {
        #[serde(rename = "type")]
        kind: Option<String>,
        previous_response_id: Option<String>,
        stream_id: Option<String>,
        #[serde(default)]
        input: CallOutputs,
        #[serde(default)]
        client_metadata: TraceContext,
    }
    let Object(b): Object<Body> = serde_json::from_slice(body).map_err(json_err)?;
    Ok(ResponsesRequest {
        kind: b.kind,
        lane: b.stream_id,
        facts: RequestFacts {
            previous_response: b.previous_response_id,
            outputs: b.input.0,
        },
        trace_context: b.client_metadata.0,
    })
}

/// `client_metadata`: only its `ws_request_header_traceparent`, when a short string. Any other
/// shape (not an object, the key missing or not a string, too long) reads as absent, never as
/// an error: trace context is optional, the request's chain facts are not. Other keys are
/// skipped without being read into memory.
#[derive(Default)]
struct TraceContext(Option<String>);

impl<'de> Deserialize<'de> for TraceContext {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TraceContext;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("anything")
            }
            fn visit_map<A: de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<TraceContext, A::Error> {
                let mut found = None;
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    if key == "ws_request_header_traceparent" {
                        found = map.next_value::<ShortString>()?.0;
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(TraceContext(found))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<TraceContext, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(TraceContext(None))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<TraceContext, E> {
                Ok(TraceContext(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<TraceContext, E> {
                Ok(TraceContext(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<TraceContext, E> {
                Ok(TraceContext(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<TraceContext, E> {
                Ok(TraceContext(None))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<TraceContext, E> {
                Ok(TraceContext(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<TraceContext, E> {
                Ok(TraceContext(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// A string of at most [`MAX_TRACE_CONTEXT`] bytes, else absent (whatever the value is).
struct ShortString(Option<String>);

impl<'de> Deserialize<'de> for ShortString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ShortString;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("anything")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ShortString, E> {
                Ok(ShortString(
                    (v.len() <= MAX_TRACE_CONTEXT).then(|| v.to_owned()),
                ))
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<ShortString, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(ShortString(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ShortString, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(ShortString(None))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<ShortString, E> {
                Ok(ShortString(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<ShortString, E> {
                Ok(ShortString(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<ShortString, E> {
                Ok(ShortString(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<ShortString, E> {
                Ok(ShortString(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<ShortString, E> {
                Ok(ShortString(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// `T` read from a JSON object only. Derived structs also accept an array of their fields in
/// declaration order, so `[["user", [...]]]` would read as a body whose user message carries
/// tool results; no API accepts that, and a request the API refuses continues nothing.
struct Object<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = T;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData)).map(Object)
    }
}

/// `messages`: the tool_result ids of the last message whose role is `user`.
#[derive(Default)]
struct LastUserResults(Vec<String>);

impl<'de> Deserialize<'de> for LastUserResults {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = LastUserResults;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array of messages")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                #[derive(Deserialize)]
                struct Message {
                    #[serde(default)]
                    role: String,
                    #[serde(default)]
                    content: ToolResultIds,
                }
                let mut last = Vec::new();
                while let Some(Object(m)) = seq.next_element::<Object<Message>>()? {
                    if m.role == "user" {
                        last = m.content.0;
                    }
                }
                Ok(LastUserResults(last))
            }
        }
        d.deserialize_seq(V)
    }
}

/// A message's `content`: a string (no blocks) or blocks, of which `tool_result`s count.
#[derive(Default)]
struct ToolResultIds(Vec<String>);

impl<'de> Deserialize<'de> for ToolResultIds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Block {
            #[serde(rename = "type", default)]
            kind: String,
            tool_use_id: Option<String>,
        }
        d.deserialize_any(Ids::<Block>::new(|b: Block| {
            (b.kind == "tool_result").then_some(b.tool_use_id).flatten()
        }))
        .map(ToolResultIds)
    }
}

/// `input`: a string (a single user message) or items, of which tool outputs count.
#[derive(Default)]
struct CallOutputs(Vec<String>);

impl<'de> Deserialize<'de> for CallOutputs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Item {
            #[serde(rename = "type", default)]
            kind: String,
            call_id: Option<String>,
        }
        d.deserialize_any(Ids::<Item>::new(|i: Item| {
            matches!(
                i.kind.as_str(),
                "function_call_output" | "custom_tool_call_output"
            )
            .then_some(i.call_id)
            .flatten()
        }))
        .map(CallOutputs)
    }
}

/// A visitor for "a string, null, or an array of `T`", keeping the ids `pick` finds.
struct Ids<T> {
    pick: fn(T) -> Option<String>,
}

impl<T> Ids<T> {
    fn new(pick: fn(T) -> Option<String>) -> Self {
        Ids { pick }
    }
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for Ids<T> {
    type Value = Vec<String>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string or an array of objects")
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Vec::new())
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Vec::new())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut ids = Vec::new();
        while let Some(el) = seq.next_element::<Element<T>>()? {
            if let Element::Object(t) = el {
                ids.extend((self.pick)(t));
            }
        }
        Ok(ids)
    }
}

/// An array element: an object is read as `T`; anything else (a bare string in `input`, say)
/// is skipped.
enum Element<T> {
    Object(T),
    Other,
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Element<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Element<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array element")
            }
            fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(Element::Object)
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
                Ok(Element::Other)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(Element::Other)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(Element::Other)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(Element::Other)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(Element::Other)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Element::Other)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Element::Other)
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn messages_bodies() {
        let cases: &[(&str, &str, Vec<String>)] = &[
            (
                "first turn",
                r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
                vec![],
            ),
            (
                "continuation after parallel tool_use",
                r#"{"messages":[
                    {"role":"user","content":"go"},
                    {"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"mcp__a__t","input":{}},
                                                   {"type":"tool_use","id":"toolu_2","name":"mcp__a__t","input":{}}]},
                    {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"SECRET"},
                                              {"type":"tool_result","tool_use_id":"toolu_2","content":[{"type":"text","text":"x"}],"is_error":true},
                                              {"type":"text","text":"and then"}]}]}"#,
                ids(&["toolu_1", "toolu_2"]),
            ),
            (
                "only the last user message counts",
                r#"{"messages":[
                    {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_old","content":"r"}]},
                    {"role":"assistant","content":"ok"},
                    {"content":"summarize please","role":"user"}]}"#,
                vec![],
            ),
            (
                "role after content, assistant prefill last",
                r#"{"messages":[
                    {"content":[{"tool_use_id":"toolu_9","type":"tool_result"}],"role":"user"},
                    {"role":"assistant","content":[{"type":"text","text":"prefill"}]}]}"#,
                ids(&["toolu_9"]),
            ),
            ("no messages key", r#"{"model":"m"}"#, vec![]),
        ];
        for (name, body, want) in cases {
            let got = messages_request(body.as_bytes()).unwrap();
            assert_eq!(&got.outputs, want, "{name}");
            assert_eq!(got.previous_response, None, "{name}");
        }
    }

    #[test]
    fn responses_bodies() {
        let cases: &[(&str, &str, ResponsesRequest)] = &[
            (
                "codex http: full history re-sent",
                r#"{"model":"gpt-5","input":[
                    {"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]},
                    {"type":"reasoning","encrypted_content":"zzz"},
                    {"type":"function_call","call_id":"call_1","name":"t","namespace":"mcp__a","arguments":"{}"},
                    {"type":"function_call_output","call_id":"call_1","output":"SECRET"},
                    {"type":"custom_tool_call","call_id":"call_2","name":"exec","input":"code"},
                    {"type":"custom_tool_call_output","call_id":"call_2","output":[{"type":"input_text","text":"x"}]}],
                  "stream":true,"store":false}"#,
                ResponsesRequest {
                    kind: None,
                    lane: None,
                    facts: RequestFacts {
                        previous_response: None,
                        outputs: ids(&["call_1", "call_2"]),
                    },
                    trace_context: None,
                },
            ),
            (
                "ws continuation",
                r#"{"type":"response.create","previous_response_id":"resp_1","input":[{"type":"function_call_output","call_id":"call_1","output":"r"}]}"#,
                ResponsesRequest {
                    kind: Some("response.create".into()),
                    lane: None,
                    facts: RequestFacts {
                        previous_response: Some("resp_1".into()),
                        outputs: ids(&["call_1"]),
                    },
                    trace_context: None,
                },
            ),
            (
                "prewarm on a lane, string input",
                r#"{"type":"response.create","generate":false,"input":"hello","stream_id":"lane-a","previous_response_id":null}"#,
                ResponsesRequest {
                    kind: Some("response.create".into()),
                    lane: Some("lane-a".into()),
                    facts: RequestFacts::default(),
                    trace_context: None,
                },
            ),
            (
                "codex ws with its trace context in client_metadata",
                r#"{"type":"response.create","input":[],"client_metadata":{"thread_id":"th","x-codex-turn-metadata":"{\"a\":1}","ws_request_header_traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","ws_request_header_tracestate":"k=v"}}"#,
                ResponsesRequest {
                    kind: Some("response.create".into()),
                    lane: None,
                    facts: RequestFacts::default(),
                    trace_context: Some(
                        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
                    ),
                },
            ),
        ];
        for (name, body, want) in cases {
            assert_eq!(&responses_request(body.as_bytes()).unwrap(), want, "{name}");
        }
    }

    #[test]
    fn a_trace_context_of_another_shape_is_absent_and_the_request_still_reads() {
        let long = format!(r#""{}""#, "a".repeat(MAX_TRACE_CONTEXT + 1));
        for meta in [
            "null",
            "7",
            r#""a string""#,
            "[1,2]",
            r#"{"ws_request_header_traceparent":5}"#,
            r#"{"ws_request_header_traceparent":{"x":[1]}}"#,
            r#"{"ws_request_header_traceparent":null}"#,
            &format!(r#"{{"ws_request_header_traceparent":{long}}}"#),
            r#"{"other":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}"#,
        ] {
            let body = format!(
                r#"{{"type":"response.create","previous_response_id":"r","client_metadata":{meta},"input":[]}}"#
            );
            let got = responses_request(body.as_bytes()).unwrap_or_else(|e| panic!("{meta}: {e}"));
            assert_eq!(got.trace_context, None, "{meta}");
            assert_eq!(got.facts.previous_response.as_deref(), Some("r"), "{meta}");
        }
    }

    #[test]
    fn wrong_shapes_are_json_errors_that_do_not_quote_the_body() {
        for body in [
            &b"not json SECRET"[..],
            br#"{"messages":{"role":"user"}}"#,
            br#"{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":5}]}]}"#,
            br#"{"messages":[{"role":"user","content":"SECRET"#,
        ] {
            let err = messages_request(body).unwrap_err();
            assert!(!err.to_string().contains("SECRET"), "{err}");
        }
        assert!(responses_request(
            br#"{"input":[{"type":"function_call_output","call_id":["x"]}]}"#
        )
        .is_err());
    }

    #[test]
    fn arrays_are_not_read_as_objects() {
        // Caught by the body fuzz harness (fuzz/regressions/body/): derived structs take an array of
        // their fields in order, so these were read as carrying tool outputs.
        for body in [
            &br#"[[{"role":"user","content":[{"type":"tool_result","tool_use_id":"x"}]}]]"#[..],
            br#"{"messages":[["user",[{"type":"tool_result","tool_use_id":"x"}]]]}"#,
        ] {
            assert!(messages_request(body).is_err());
        }
        assert!(responses_request(
            br#"["response.create",null,null,[{"type":"function_call_output","call_id":"c"}]]"#
        )
        .is_err());
        // Arrays inside content and input stay skippable elements, as before.
        let got = messages_request(
            br#"{"messages":[{"role":"user","content":[["tool_result","x"],{"type":"tool_result","tool_use_id":"y"}]}]}"#,
        )
        .unwrap();
        assert_eq!(got.outputs, ids(&["y"]));
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..256)) {
            let _ = messages_request(&data);
            let _ = responses_request(&data);
        }

        #[test]
        fn random_json_never_panics(s in r#"[\[\]{}",:a-z0-9 ]{0,80}"#) {
            let _ = messages_request(s.as_bytes());
            let _ = responses_request(s.as_bytes());
        }
    }
}
