//! Anthropic Messages streaming (protocols.md §3.1): SSE events to trace events for one HTTP
//! exchange, which carries at most one message (one response).
//!
//! - `message_start` → `response_start` (the message id; the request is the exchange's).
//! - A `tool_use` block is a client-executed call; it is complete at its `content_block_stop`,
//!   which is when `tool_call` is emitted (design.md §3: the window opens there).
//!   `server_tool_use` blocks run on Anthropic's side and are not client calls.
//! - `message_stop` → `response_end{completed}`; a mid-stream `error` → `response_end{error}`.
//!   A stream that ends without either leaves the response open: the stream's close then
//!   breaks its window, which is the truth (nobody knows how it ended).
//! - `ping`, `content_block_delta` (the bulk of the stream) and unknown events are ignored,
//!   the deltas without being buffered or parsed.

use std::collections::HashMap;

use serde::Deserialize;

use super::{peek, Lost};
use crate::event::{CallKind, EventKind, ResponseStatus};

/// Bound on tool_use blocks started and not yet stopped in one message.
const MAX_OPEN_BLOCKS: usize = 4096;

/// SSE event names worth buffering: everything but the bulk deltas and keep-alives.
pub fn wants(name: &str) -> bool {
    !matches!(name, "content_block_delta" | "ping")
}

pub struct AnthropicStream {
    stream: String,
    request: Option<String>,
    /// The message being streamed, between `message_start` and its end.
    active: Option<String>,
    /// `tool_use` blocks started and not yet stopped: index → (id, name).
    open_blocks: HashMap<u64, (String, String)>,
}

#[derive(Deserialize)]
struct MessageStart {
    message: MessageId,
}
#[derive(Deserialize)]
struct MessageId {
    id: String,
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
    pub fn new(stream: String, request: Option<String>) -> AnthropicStream {
        AnthropicStream {
            stream,
            request,
            active: None,
            open_blocks: HashMap::new(),
        }
    }

    /// One SSE event. `name` is the `event:` name (or `message` when there was none: then the
    /// JSON's own `type` decides).
    pub fn on_event(
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
                });
                self.active = Some(m.message.id);
                self.open_blocks.clear();
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
            // `message_delta` carries the stop_reason; it does not change how the response
            // ended (`message_stop` is completion whatever the reason), so it is not parsed.
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
}

impl AnthropicStream {
    /// A complete non-streaming message: start, its tool_use calls, completed.
    pub(crate) fn on_whole_body(&mut self, body: &[u8], out: &mut Vec<EventKind>) -> Result<(), Lost> {
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
        });
        out.extend(calls);
        out.push(EventKind::ResponseEnd {
            stream: self.stream.clone(),
            response: m.id,
            status: ResponseStatus::Completed,
        });
        Ok(())
    }
}
