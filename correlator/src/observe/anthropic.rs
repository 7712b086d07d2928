//! Anthropic Messages streaming (protocols.md §3.1): SSE events to trace events for one HTTP
//! exchange, which carries at most one message (one response).
//!
//! - `message_start` → `response_start` (the message id; the request is the exchange's).
//! - A `tool_use` block is a client-executed call; it is complete at its `content_block_stop`,
//!   which is when `tool_call` is emitted (docs/design.md §3: the window opens there).
//!   `server_tool_use` blocks run on Anthropic's side and are not client calls.
//! - `message_stop` → `response_end{completed}`; a mid-stream `error` → `response_end{error}`.
//! - The model (`message_start.message.model`) goes on `response_start`; token usage
//!   (`message_start.message.usage`, then each `message_delta.usage`, which is cumulative: a
//!   count it reports replaces the earlier one) and the stop reason (`message_delta.delta.
//!   stop_reason`, as a fixed word) go on `response_end`.
//!   A stream that ends without either leaves the response open: the stream's close then
//!   breaks its window, which is the truth (nobody knows how it ended).
//! - `ping`, `content_block_delta` (the bulk of the stream) and unknown events are ignored,
//!   the deltas without being buffered or parsed.

use std::collections::HashMap;

use serde::Deserialize;

use super::lost::Lost;
use super::peek;
use crate::event::{CallKind, EventKind, ResponseStatus, StopReason, Usage};

/// Bound on tool_use blocks started and not yet stopped in one message.
const MAX_OPEN_BLOCKS: usize = 4096;

/// SSE event names worth buffering: everything but the bulk deltas and keep-alives.
pub(super) fn wants(name: &str) -> bool {
    !matches!(name, "content_block_delta" | "ping")
}

pub(super) struct AnthropicStream {
    stream: String,
    request: Option<String>,
    /// The message being streamed, between `message_start` and its end.
    active: Option<String>,
    /// `tool_use` blocks started and not yet stopped: index → (id, name).
    open_blocks: HashMap<u64, (String, String)>,
    /// Token counts reported so far for the active message.
    usage: Option<Usage>,
    /// The stop reason the last `message_delta` gave.
    stop_reason: Option<StopReason>,
}

#[derive(Deserialize)]
struct MessageStart {
    message: MessageId,
}
#[derive(Deserialize)]
struct MessageId {
    id: String,
    #[serde(default, deserialize_with = "super::lenient::string")]
    model: Option<String>,
    #[serde(default, deserialize_with = "super::lenient::object")]
    usage: Option<ApiUsage>,
}
/// Anthropic's `usage` object (only the counts; `server_tool_use`, `service_tier`, … ignored).
#[derive(Deserialize, Default)]
struct ApiUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
}
impl ApiUsage {
    /// These counts over `earlier`: a count reported here replaces the earlier one.
    fn over(self, earlier: Option<Usage>) -> Option<Usage> {
        let e = earlier.unwrap_or_default();
        let u = Usage {
            input: self.input_tokens.or(e.input),
            output: self.output_tokens.or(e.output),
            cache_read: self.cache_read_input_tokens.or(e.cache_read),
            cache_creation: self.cache_creation_input_tokens.or(e.cache_creation),
        };
        (u != Usage::default()).then_some(u)
    }
}
#[derive(Deserialize)]
struct MessageDelta {
    #[serde(default, deserialize_with = "super::lenient::object")]
    delta: Option<StopDelta>,
    #[serde(default, deserialize_with = "super::lenient::object")]
    usage: Option<ApiUsage>,
}
#[derive(Deserialize)]
struct StopDelta {
    #[serde(default, deserialize_with = "super::lenient::string")]
    stop_reason: Option<String>,
}
#[derive(Deserialize)]
struct BlockStart {
    index: u64,
    content_block: Block,
}
#[derive(Deserialize)]
struct Block {
    #[serde(rename = "type")]
    kind: String,
    id: Option<String>,
    name: Option<String>,
}
#[derive(Deserialize)]
struct BlockStop {
    index: u64,
}

fn parse<'a, T: Deserialize<'a>>(data: &'a [u8]) -> Result<T, Lost> {
    serde_json::from_slice(data).map_err(|_| Lost::JSON)
}

impl AnthropicStream {
    /// `request`: the id of the request this exchange carried.
    pub(super) fn new(stream: String, request: Option<String>) -> AnthropicStream {
        AnthropicStream {
            stream,
            request,
            active: None,
            open_blocks: HashMap::new(),
            usage: None,
            stop_reason: None,
        }
    }

    /// One SSE event. `name` is the `event:` name (or `message` when there was none: then the
    /// JSON's own `type` decides).
    pub(super) fn on_event(
        &mut self,
        name: &str,
        data: &[u8],
        out: &mut Vec<EventKind>,
    ) -> Result<(), Lost> {
        let owned;
        let kind = if name == super::sse::DEFAULT_EVENT {
            match peek::leading_type(data) {
                Some(t) => t,
                None => {
                    owned = peek::object_type(data).map_err(|_| Lost::JSON)?;
                    owned.as_str()
                }
            }
        } else {
            name
        };
        match kind {
            "message_start" => {
                let m: MessageStart = parse(data)?;
                if self.active.is_some() {
                    // Two messages at once in one exchange: which one a block belongs to is
                    // no longer certain.
                    return Err(Lost::AMBIGUOUS);
                }
                out.push(EventKind::ResponseStart {
                    stream: self.stream.clone(),
                    response: m.message.id.clone(),
                    request: self.request.clone(),
                    model: m.message.model,
                });
                self.active = Some(m.message.id);
                self.open_blocks.clear();
                self.usage = m.message.usage.and_then(|u| u.over(None));
                self.stop_reason = None;
            }
            "content_block_start" => {
                let b: BlockStart = parse(data)?;
                if b.content_block.kind != "tool_use" {
                    return Ok(()); // text, thinking, server_tool_use, *_tool_result, …
                }
                if self.active.is_none() {
                    return Err(Lost::PROTOCOL);
                }
                let (Some(id), Some(name)) = (b.content_block.id, b.content_block.name) else {
                    return Err(Lost::JSON);
                };
                if self.open_blocks.len() >= MAX_OPEN_BLOCKS {
                    return Err(Lost::OVERFLOW);
                }
                self.open_blocks.insert(b.index, (id, name));
            }
            "content_block_stop" => {
                let b: BlockStop = parse(data)?;
                if let (Some((call, name)), Some(response)) =
                    (self.open_blocks.remove(&b.index), &self.active)
                {
                    out.push(EventKind::ToolCall {
                        stream: self.stream.clone(),
                        response: response.clone(),
                        call,
                        item: None,
                        name,
                        namespace: None,
                        kind: CallKind::ToolUse,
                    });
                }
            }
            // The stop reason and the usage so far; it does not change how the response ended
            // (`message_stop` is completion whatever the reason).
            "message_delta" => {
                // Optional facts: a delta that does not read is not worth the stream.
                let (Some(_), Ok(d)) = (&self.active, parse::<MessageDelta>(data)) else {
                    return Ok(());
                };
                if let Some(reason) = d.delta.and_then(|d| d.stop_reason) {
                    self.stop_reason = Some(StopReason::from_api(&reason));
                }
                if let Some(u) = d.usage {
                    self.usage = u.over(self.usage);
                }
            }
            "message_stop" => self.end(ResponseStatus::Completed, out),
            "error" => self.end(ResponseStatus::Error, out),
            _ => {}
        }
        Ok(())
    }

    fn end(&mut self, status: ResponseStatus, out: &mut Vec<EventKind>) {
        if let Some(response) = self.active.take() {
            self.open_blocks.clear();
            out.push(EventKind::ResponseEnd {
                stream: self.stream.clone(),
                response,
                status,
                usage: self.usage.take(),
                stop_reason: self.stop_reason.take(),
            });
        }
    }
}

/// A non-streaming Messages response body (`application/json`): the whole message at once.
#[derive(Deserialize)]
pub(crate) struct WholeMessage {
    id: String,
    #[serde(default)]
    content: Vec<Block>,
    #[serde(default, deserialize_with = "super::lenient::string")]
    model: Option<String>,
    #[serde(default, deserialize_with = "super::lenient::object")]
    usage: Option<ApiUsage>,
    #[serde(default, deserialize_with = "super::lenient::string")]
    stop_reason: Option<String>,
}

impl AnthropicStream {
    /// A complete non-streaming message: start, its tool_use calls, completed.
    pub(crate) fn on_whole_body(
        &mut self,
        body: &[u8],
        out: &mut Vec<EventKind>,
    ) -> Result<(), Lost> {
        let m: WholeMessage = parse(body)?;
        if self.active.is_some() {
            return Err(Lost::AMBIGUOUS);
        }
        let mut calls = Vec::new();
        for b in m.content {
            if b.kind == "tool_use" {
                let (Some(call), Some(name)) = (b.id, b.name) else {
                    return Err(Lost::JSON);
                };
                calls.push(EventKind::ToolCall {
                    stream: self.stream.clone(),
                    response: m.id.clone(),
                    call,
                    item: None,
                    name,
                    namespace: None,
                    kind: CallKind::ToolUse,
                });
            }
        }
        out.push(EventKind::ResponseStart {
            stream: self.stream.clone(),
            response: m.id.clone(),
            request: self.request.clone(),
            model: m.model,
        });
        out.extend(calls);
        out.push(EventKind::ResponseEnd {
            stream: self.stream.clone(),
            response: m.id,
            status: ResponseStatus::Completed,
            usage: m.usage.and_then(|u| u.over(None)),
            stop_reason: m.stop_reason.as_deref().map(StopReason::from_api),
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::exchange::Api;
    use super::super::testkit::*;
    use crate::event::{
        CallKind::ToolUse, Client, EventKind, ResponseStatus, ResponseStatus::*, StopReason,
        Transport::Http, Usage,
    };

    /// The response start every `message_start` fixture gives: the model it names.
    fn started(response: &str) -> EventKind {
        EventKind::ResponseStart {
            stream: "s1".into(),
            response: response.into(),
            request: Some("s1/q1".into()),
            model: Some("claude-x".into()),
        }
    }

    /// The end of a fixture message: `message_start`'s usage, the output count of the
    /// `message_delta` if one came (else `message_start`'s 1), and its stop reason.
    fn ended(
        response: &str,
        status: ResponseStatus,
        delta_output: Option<u64>,
        stop_reason: Option<StopReason>,
    ) -> EventKind {
        EventKind::ResponseEnd {
            stream: "s1".into(),
            response: response.into(),
            status,
            usage: Some(Usage {
                input: Some(10),
                output: Some(delta_output.unwrap_or(1)),
                cache_read: Some(0),
                cache_creation: Some(1200),
            }),
            stop_reason,
        }
    }

    const FIRST_TURN: &str = r#"{"model":"claude-x","stream":true,"messages":[{"role":"user","content":"use the probe SECRET_PROMPT"}]}"#;
    const CONTINUATION: &str = r#"{"model":"claude-x","stream":true,"messages":[
        {"role":"user","content":"use the probe"},
        {"role":"assistant","content":[{"type":"text","text":"ok"},
            {"type":"tool_use","id":"toolu_A","name":"mcp__probe__echo","input":{"text":"hi"}},
            {"type":"tool_use","id":"toolu_B","name":"mcp__probe__echo","input":{"text":"ho"}}]},
        {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_A","content":"SECRET_RESULT"},
            {"type":"tool_result","tool_use_id":"toolu_B","content":[{"type":"text","text":"ho"}]}]}]}"#;

    fn message_start(id: &str) -> (&'static str, String) {
        (
            "message_start",
            format!(
                r#"{{"type":"message_start","message":{{"id":"{id}","type":"message","role":"assistant","model":"claude-x","content":[],"stop_reason":null,"usage":{{"input_tokens":10,"cache_creation_input_tokens":1200,"cache_read_input_tokens":0,"output_tokens":1}}}}}}"#
            ),
        )
    }
    fn text_block(i: u32) -> Vec<(&'static str, String)> {
        vec![
            (
                "content_block_start",
                format!(
                    r#"{{"type":"content_block_start","index":{i},"content_block":{{"type":"text","text":""}}}}"#
                ),
            ),
            (
                "content_block_delta",
                format!(
                    r#"{{"type":"content_block_delta","index":{i},"delta":{{"type":"text_delta","text":"SECRET_OUTPUT"}}}}"#
                ),
            ),
            (
                "content_block_stop",
                format!(r#"{{"type":"content_block_stop","index":{i}}}"#),
            ),
        ]
    }
    fn tool_start(i: u32, kind: &str, id: &str) -> (&'static str, String) {
        (
            "content_block_start",
            format!(
                r#"{{"type":"content_block_start","index":{i},"content_block":{{"type":"{kind}","id":"{id}","name":"mcp__probe__echo","input":{{}}}}}}"#
            ),
        )
    }
    fn tool_args(i: u32) -> Vec<(&'static str, String)> {
        vec![
            (
                "content_block_delta",
                format!(
                    r#"{{"type":"content_block_delta","index":{i},"delta":{{"type":"input_json_delta","partial_json":"{{\"text\":"}}}}"#
                ),
            ),
            ("ping", r#"{"type":"ping"}"#.to_string()),
            (
                "content_block_delta",
                format!(
                    r#"{{"type":"content_block_delta","index":{i},"delta":{{"type":"input_json_delta","partial_json":"\"SECRET_ARG\"}}"}}}}"#
                ),
            ),
        ]
    }
    fn stop(i: u32) -> (&'static str, String) {
        (
            "content_block_stop",
            format!(r#"{{"type":"content_block_stop","index":{i}}}"#),
        )
    }
    fn message_end(reason: &str) -> Vec<(&'static str, String)> {
        vec![
            (
                "message_delta",
                format!(
                    r#"{{"type":"message_delta","delta":{{"stop_reason":"{reason}","stop_sequence":null}},"usage":{{"output_tokens":30}}}}"#
                ),
            ),
            ("message_stop", r#"{"type":"message_stop"}"#.to_string()),
        ]
    }
    fn body(events: Vec<(&'static str, String)>) -> String {
        let pairs: Vec<(&str, &str)> = events.iter().map(|(n, d)| (*n, d.as_str())).collect();
        sse(&pairs)
    }

    fn one_tool_loop() -> String {
        let mut ev = vec![
            message_start("msg_1"),
            ("ping", r#"{"type": "ping"}"#.into()),
        ];
        ev.extend(text_block(0));
        ev.push(tool_start(1, "tool_use", "toolu_A"));
        ev.extend(tool_args(1));
        ev.push(stop(1));
        ev.extend(message_end("tool_use"));
        body(ev)
    }

    fn head(outputs: &[&str]) -> Vec<crate::event::EventKind> {
        vec![
            open("s1", Client::Claude, Http, Some("th1")),
            req("s1", "s1/q1", None, outputs),
        ]
    }

    fn with_head(
        outputs: &[&str],
        rest: Vec<crate::event::EventKind>,
    ) -> Vec<crate::event::EventKind> {
        let mut v = head(outputs);
        v.extend(rest);
        v
    }

    /// Every scenario must give the same events fed whole and fed in random chunks.
    fn check(run: &HttpRun, want: &[crate::event::EventKind]) {
        assert_eq!(run.run(None), want, "fed whole");
        for seed in 0..25 {
            assert_eq!(run.run(Some(seed)), want, "seed {seed}");
        }
    }

    #[test]
    fn a_tool_loop_opens_a_call_at_its_block_stop() {
        let run = HttpRun::new(Api::AnthropicMessages, FIRST_TURN, &one_tool_loop());
        let want = with_head(
            &[],
            vec![
                started("msg_1"),
                call(
                    "s1",
                    "msg_1",
                    "toolu_A",
                    None,
                    "mcp__probe__echo",
                    None,
                    ToolUse,
                ),
                ended("msg_1", Completed, Some(30), Some(StopReason::ToolUse)),
                close("s1"),
            ],
        );
        check(&run, &want);
    }

    #[test]
    fn parallel_tool_use_and_the_continuation_that_answers_both() {
        let mut ev = vec![message_start("msg_2")];
        ev.push(tool_start(0, "tool_use", "toolu_A"));
        ev.extend(tool_args(0));
        ev.push(stop(0));
        ev.push(tool_start(1, "tool_use", "toolu_B"));
        ev.extend(tool_args(1));
        ev.push(stop(1));
        ev.extend(text_block(2));
        ev.extend(message_end("tool_use"));
        let run = HttpRun::new(Api::AnthropicMessages, CONTINUATION, &body(ev));
        let want = with_head(
            &["toolu_A", "toolu_B"],
            vec![
                started("msg_2"),
                call(
                    "s1",
                    "msg_2",
                    "toolu_A",
                    None,
                    "mcp__probe__echo",
                    None,
                    ToolUse,
                ),
                call(
                    "s1",
                    "msg_2",
                    "toolu_B",
                    None,
                    "mcp__probe__echo",
                    None,
                    ToolUse,
                ),
                ended("msg_2", Completed, Some(30), Some(StopReason::ToolUse)),
                close("s1"),
            ],
        );
        check(&run, &want);
    }

    #[test]
    fn a_mid_stream_error_ends_the_response_and_drops_the_unfinished_block() {
        let mut ev = vec![
            message_start("msg_3"),
            tool_start(0, "tool_use", "toolu_A"),
            stop(0),
        ];
        ev.push(tool_start(1, "tool_use", "toolu_B"));
        ev.extend(tool_args(1));
        ev.push((
            "error",
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#.into(),
        ));
        let run = HttpRun::new(Api::AnthropicMessages, FIRST_TURN, &body(ev));
        let want = with_head(
            &[],
            vec![
                started("msg_3"),
                call(
                    "s1",
                    "msg_3",
                    "toolu_A",
                    None,
                    "mcp__probe__echo",
                    None,
                    ToolUse,
                ),
                ended("msg_3", Error, None, None),
                close("s1"),
            ],
        );
        check(&run, &want);
    }

    #[test]
    fn a_truncated_stream_claims_no_end() {
        let full = one_tool_loop();
        // Cut inside the message_stop event: its data line arrives, its blank line never does.
        let cut = full.rfind("\n\n").unwrap();
        let run = HttpRun::new(Api::AnthropicMessages, FIRST_TURN, &full[..cut]);
        let want = with_head(
            &[],
            vec![
                started("msg_1"),
                call(
                    "s1",
                    "msg_1",
                    "toolu_A",
                    None,
                    "mcp__probe__echo",
                    None,
                    ToolUse,
                ),
                close("s1"),
            ],
        );
        check(&run, &want);
        // Cut before the tool_use block stopped: no call either.
        let cut = full
            .find("content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1")
            .unwrap();
        let run = HttpRun::new(Api::AnthropicMessages, FIRST_TURN, &full[..cut]);
        check(&run, &with_head(&[], vec![started("msg_1"), close("s1")]));
    }

    #[test]
    fn server_tools_are_not_client_calls() {
        let mut ev = vec![
            message_start("msg_4"),
            tool_start(0, "server_tool_use", "srvtoolu_1"),
            stop(0),
        ];
        ev.extend(text_block(1));
        ev.extend(message_end("end_turn"));
        let run = HttpRun::new(Api::AnthropicMessages, FIRST_TURN, &body(ev));
        check(
            &run,
            &with_head(
                &[],
                vec![
                    started("msg_4"),
                    ended("msg_4", Completed, Some(30), Some(StopReason::EndTurn)),
                    close("s1"),
                ],
            ),
        );
    }

    #[test]
    fn events_without_event_lines_are_read_by_their_json_type() {
        let data_only: String = one_tool_loop()
            .lines()
            .filter(|l| !l.starts_with("event:"))
            .map(|l| format!("{l}\r\n"))
            .collect();
        let run = HttpRun::new(Api::AnthropicMessages, FIRST_TURN, &data_only);
        check(
            &run,
            &with_head(
                &[],
                vec![
                    started("msg_1"),
                    call(
                        "s1",
                        "msg_1",
                        "toolu_A",
                        None,
                        "mcp__probe__echo",
                        None,
                        ToolUse,
                    ),
                    ended("msg_1", Completed, Some(30), Some(StopReason::ToolUse)),
                    close("s1"),
                ],
            ),
        );
    }

    #[test]
    fn compressed_request_and_response_bodies() {
        for (req_enc, resp_enc) in [
            ("zstd", "gzip"),
            ("gzip", "br"),
            ("br", "zstd"),
            ("deflate", "deflate"),
        ] {
            let mut run = HttpRun::new(Api::AnthropicMessages, "", "");
            run.req_body = super::super::decode::tests::encode(req_enc, CONTINUATION.as_bytes());
            run.req_encoding = Some(req_enc);
            run.resp_body =
                super::super::decode::tests::encode(resp_enc, one_tool_loop().as_bytes());
            run.resp_encoding = Some(resp_enc);
            check(
                &run,
                &with_head(
                    &["toolu_A", "toolu_B"],
                    vec![
                        started("msg_1"),
                        call(
                            "s1",
                            "msg_1",
                            "toolu_A",
                            None,
                            "mcp__probe__echo",
                            None,
                            ToolUse,
                        ),
                        ended("msg_1", Completed, Some(30), Some(StopReason::ToolUse)),
                        close("s1"),
                    ],
                ),
            );
        }
    }

    #[test]
    fn error_statuses_and_other_media_types_carry_no_response() {
        let mut run = HttpRun::new(
            Api::AnthropicMessages,
            FIRST_TURN,
            r#"{"type":"error","error":{"type":"overloaded_error"}}"#,
        );
        run.status = 529;
        run.content_type = "application/json";
        check(&run, &with_head(&[], vec![close("s1")]));
        let mut run = HttpRun::new(Api::AnthropicMessages, FIRST_TURN, "<html>");
        run.content_type = "text/html";
        check(&run, &with_head(&[], vec![close("s1")]));
    }

    #[test]
    fn usage_is_cumulative_and_stop_reasons_are_fixed_words() {
        // A later message_delta reports every count again (the API's cumulative usage): the
        // last one wins. A stop reason the list does not have is `other`, never the text.
        let mut ev = vec![message_start("msg_u")];
        ev.extend(text_block(0));
        ev.push((
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":null},"usage":{"output_tokens":12}}"#
                .into(),
        ));
        ev.push((
            "message_delta",
            concat!(
                r#"{"type":"message_delta","delta":{"stop_reason":"SECRET_REASON","stop_sequence":null},"#,
                r#""usage":{"input_tokens":11,"cache_creation_input_tokens":0,"cache_read_input_tokens":1210,"output_tokens":44}}"#
            )
                .into(),
        ));
        ev.push(("message_stop", r#"{"type":"message_stop"}"#.into()));
        let run = HttpRun::new(Api::AnthropicMessages, FIRST_TURN, &body(ev));
        let want = with_head(
            &[],
            vec![
                started("msg_u"),
                EventKind::ResponseEnd {
                    stream: "s1".into(),
                    response: "msg_u".into(),
                    status: Completed,
                    usage: Some(Usage {
                        input: Some(11),
                        output: Some(44),
                        cache_read: Some(1210),
                        cache_creation: Some(0),
                    }),
                    stop_reason: Some(StopReason::Other),
                },
                close("s1"),
            ],
        );
        check(&run, &want);
    }

    #[test]
    fn odd_usage_or_model_shapes_are_left_out_without_losing_the_stream() {
        let ev = vec![
            (
                "message_start",
                r#"{"type":"message_start","message":{"id":"msg_o","model":{"name":"x"},"usage":"lots"}}"#
                    .into(),
            ),
            (
                "message_delta",
                r#"{"type":"message_delta","delta":"stop","usage":{"output_tokens":-3}}"#.into(),
            ),
            ("message_delta", r#"{"type":"message_delta""#.into()),
            ("message_stop", r#"{"type":"message_stop"}"#.into()),
        ];
        let run = HttpRun::new(Api::AnthropicMessages, FIRST_TURN, &body(ev));
        let want = with_head(
            &[],
            vec![
                start("s1", "msg_o", Some("s1/q1")),
                end("s1", "msg_o", Completed),
                close("s1"),
            ],
        );
        check(&run, &want);
    }

    #[test]
    fn a_non_streaming_json_message_is_read_whole() {
        let resp = r#"{"id":"msg_5","type":"message","role":"assistant","content":[
            {"type":"text","text":"SECRET_OUTPUT"},
            {"type":"tool_use","id":"toolu_C","name":"mcp__probe__echo","input":{"text":"SECRET_ARG"}}],
            "model":"claude-x","stop_reason":"tool_use","usage":{"input_tokens":10,
            "cache_creation_input_tokens":1200,"cache_read_input_tokens":0,"output_tokens":30}}"#;
        let mut run = HttpRun::new(Api::AnthropicMessages, FIRST_TURN, resp);
        run.content_type = "application/json";
        check(
            &run,
            &with_head(
                &[],
                vec![
                    started("msg_5"),
                    call(
                        "s1",
                        "msg_5",
                        "toolu_C",
                        None,
                        "mcp__probe__echo",
                        None,
                        ToolUse,
                    ),
                    ended("msg_5", Completed, Some(30), Some(StopReason::ToolUse)),
                    close("s1"),
                ],
            ),
        );
    }

    #[test]
    fn unreadable_json_in_a_needed_event_loses_observation() {
        let mut ev = vec![message_start("msg_6")];
        ev.push((
            "content_block_start",
            r#"{"type":"content_block_start","index":"zero"}"#.into(),
        ));
        ev.extend(message_end("end_turn"));
        let run = HttpRun::new(Api::AnthropicMessages, FIRST_TURN, &body(ev));
        check(
            &run,
            &with_head(&[], vec![started("msg_6"), lost("s1", "json"), close("s1")]),
        );
        // A request body that is not JSON loses the stream before anything else is said.
        let run = HttpRun::new(Api::AnthropicMessages, "SECRET not json", &one_tool_loop());
        check(
            &run,
            &[
                open("s1", Client::Claude, Http, Some("th1")),
                lost("s1", "json"),
                close("s1"),
            ],
        );
    }

    #[test]
    fn out_of_order_streams_lose_observation() {
        // A tool_use block with no message around it cannot be attributed.
        let ev = vec![tool_start(0, "tool_use", "toolu_A"), stop(0)];
        let run = HttpRun::new(Api::AnthropicMessages, FIRST_TURN, &body(ev));
        check(
            &run,
            &with_head(&[], vec![lost("s1", "protocol"), close("s1")]),
        );
        // A second message_start while the first is still streaming.
        let ev = vec![message_start("msg_7"), message_start("msg_8")];
        let run = HttpRun::new(Api::AnthropicMessages, FIRST_TURN, &body(ev));
        check(
            &run,
            &with_head(
                &[],
                vec![
                    started("msg_7"),
                    lost("s1", "ambiguous_response"),
                    close("s1"),
                ],
            ),
        );
        // A tool_use block without its id.
        let ev = vec![
            message_start("msg_9"),
            ("content_block_start", r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","name":"n"}}"#.into()),
        ];
        let run = HttpRun::new(Api::AnthropicMessages, FIRST_TURN, &body(ev));
        check(
            &run,
            &with_head(&[], vec![started("msg_9"), lost("s1", "json"), close("s1")]),
        );
    }
}
