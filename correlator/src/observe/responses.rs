//! OpenAI Responses streaming events (protocols.md §1–§2) to trace events: one state machine
//! for the HTTP SSE stream of one exchange and for the server frames of a WebSocket, where the
//! same JSON arrives without SSE framing, optionally tagged with a `stream_id` lane.
//!
//! - `response.created` (or `.queued` / `.in_progress` for a response not yet seen) →
//!   `response_start`, answering the oldest unanswered request of its lane (over HTTP: the
//!   exchange's request; over a WebSocket: the `response.create` it answers — one at a time per
//!   lane, FIFO when pipelined).
//! - `response.output_item.done` of a `function_call` or `custom_tool_call` item → `tool_call`
//!   on the sole active response of the event's lane (or of the connection when the event has no
//!   `stream_id`); if that response is not unique, observation is lost (`ambiguous_response`).
//!   Other item types are not client-executed tool calls and are ignored: `message` and
//!   `reasoning` are model output; `web_search_call`, `file_search_call`, `code_interpreter_call`,
//!   `image_generation_call`, `mcp_call` / `mcp_list_tools` run on the server; `tool_search_call`
//!   is the host's tool discovery, not an MCP tool call.
//! - `response.completed` / `.incomplete` / `.failed` → `response_end` with that status.
//! - `error` (flat SSE shape or the WebSocket `{type, error, status?}` shape) → `response_end
//!   {error}` for the active response; with none active it fails the oldest pending request.
//! - Deltas, `codex.rate_limits`, `response.metadata` and unknown types are ignored, decided
//!   from the SSE `event:` name or the frame's leading `"type"` without parsing their JSON.

use std::collections::{HashMap, VecDeque};

use serde::Deserialize;

use super::{peek, Lost};
use crate::event::{CallKind, EventKind, ResponseStatus};

/// Bound on requests awaiting a response, and on responses active at once, per connection.
const MAX_PENDING: usize = 1024;

/// The event types this state machine reads; everything else is dropped unparsed.
pub fn wants(kind: &str) -> bool {
    matches!(
        kind,
        "response.created"
            | "response.queued"
            | "response.in_progress"
            | "response.output_item.done"
            | "response.completed"
            | "response.incomplete"
            | "response.failed"
            | "error"
            // no `event:` line: the JSON's `type` decides
            | super::sse::DEFAULT_EVENT
    )
}

type Lane = Option<String>;

pub struct ResponsesStream {
    stream: String,
    /// Requests sent and not yet answered by a `response.created`, per lane.
    pending: HashMap<Lane, VecDeque<String>>,
    /// Responses started and not yet ended, with their lane, in start order.
    active: Vec<(Lane, String)>,
}

#[derive(Deserialize)]
struct WithResponse {
    response: ResponseId,
    stream_id: Option<String>,
}
#[derive(Deserialize)]
struct ResponseId {
    id: String,
}
#[derive(Deserialize)]
struct ItemDone {
    item: Item,
    stream_id: Option<String>,
}
#[derive(Deserialize)]
pub(crate) struct Item {
    #[serde(rename = "type")]
    kind: String,
    id: Option<String>,
    call_id: Option<String>,
    name: Option<String>,
    namespace: Option<String>,
}
#[derive(Deserialize)]
struct Laned {
    stream_id: Option<String>,
}

fn parse<'a, T: Deserialize<'a>>(data: &'a [u8]) -> Result<T, Lost> {
    serde_json::from_slice(data).map_err(|_| Lost::JSON)
}

impl ResponsesStream {
    pub fn new(stream: String) -> ResponsesStream {
        ResponsesStream {
            stream,
            pending: HashMap::new(),
            active: Vec::new(),
        }
    }

    /// A request went out on `lane` (`stream_id`, or `None`); the next response started on that
    /// lane answers it.
    pub fn request_sent(&mut self, lane: Option<String>, request: String) -> Result<(), Lost> {
        let q = self.pending.entry(lane).or_default();
        if q.len() >= MAX_PENDING {
            return Err(Lost::OVERFLOW);
        }
        q.push_back(request);
        Ok(())
    }

    /// One event: `name` is the SSE `event:` name, or `None` for a WebSocket frame (the JSON's
    /// leading `type` decides, with a full parse only when that is unclear).
    pub fn on_event(
        &mut self,
        name: Option<&str>,
        data: &[u8],
        out: &mut Vec<EventKind>,
    ) -> Result<(), Lost> {
        let owned;
        let kind = match name {
            Some(n) if n != super::sse::DEFAULT_EVENT => n,
            _ => match peek::leading_type(data) {
                Some(t) => t,
                None => {
                    owned = peek::object_type(data).map_err(|_| Lost::JSON)?;
                    owned.as_str()
                }
            },
        };
        match kind {
            "response.created" | "response.queued" | "response.in_progress" => {
                let e: WithResponse = parse(data)?;
                if self.active.iter().any(|(_, r)| *r == e.response.id) {
                    return Ok(()); // `.in_progress` after `.created`
                }
                if self.active.len() >= MAX_PENDING {
                    return Err(Lost::OVERFLOW);
                }
                let request = self
                    .pending
                    .get_mut(&e.stream_id)
                    .and_then(VecDeque::pop_front);
                out.push(EventKind::ResponseStart {
                    stream: self.stream.clone(),
                    response: e.response.id.clone(),
                    request,
                });
                self.active.push((e.stream_id, e.response.id));
            }
            "response.output_item.done" => {
                let e: ItemDone = parse(data)?;
                let Some(call_kind) = client_call_kind(&e.item.kind) else {
                    return Ok(());
                };
                let response = self.sole_active(&e.stream_id)?.to_string();
                out.push(self.tool_call(response, e.item, call_kind)?);
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                let status = match kind {
                    "response.completed" => ResponseStatus::Completed,
                    "response.incomplete" => ResponseStatus::Incomplete,
                    _ => ResponseStatus::Failed,
                };
                let e: WithResponse = parse(data)?;
                // An end for a response never started claims nothing: it is ignored.
                if let Some(i) = self.active.iter().position(|(_, r)| *r == e.response.id) {
                    let (_, response) = self.active.remove(i);
                    out.push(EventKind::ResponseEnd {
                        stream: self.stream.clone(),
                        response,
                        status,
                    });
                }
            }
            "error" => {
                let e: Laned = parse(data)?;
                let on_lane = self.on_lane(&e.stream_id);
                match on_lane.len() {
                    0 => {
                        // A request refused before any response began (e.g.
                        // `previous_response_not_found`): it will never be answered.
                        if let Some(q) = self.pending.get_mut(&e.stream_id) {
                            q.pop_front();
                        }
                    }
                    1 => {
                        let i = on_lane[0];
                        let (_, response) = self.active.remove(i);
                        out.push(EventKind::ResponseEnd {
                            stream: self.stream.clone(),
                            response,
                            status: ResponseStatus::Error,
                        });
                    }
                    _ => return Err(Lost::AMBIGUOUS),
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Indices of the active responses an event on `lane` may belong to: that lane's, or every
    /// active response when the event names no lane.
    fn on_lane(&self, lane: &Lane) -> Vec<usize> {
        self.active
            .iter()
            .enumerate()
            .filter(|(_, (l, _))| lane.is_none() || l == lane)
            .map(|(i, _)| i)
            .collect()
    }

    fn sole_active(&self, lane: &Lane) -> Result<&str, Lost> {
        match self.on_lane(lane).as_slice() {
            [i] => Ok(&self.active[*i].1),
            _ => Err(Lost::AMBIGUOUS),
        }
    }

    fn tool_call(&self, response: String, item: Item, kind: CallKind) -> Result<EventKind, Lost> {
        let (Some(call), Some(name)) = (item.call_id, item.name) else {
            return Err(Lost::JSON);
        };
        Ok(EventKind::ToolCall {
            stream: self.stream.clone(),
            response,
            call,
            item: item.id,
            name,
            namespace: item.namespace,
            kind,
        })
    }

    /// A complete non-streaming Responses body (`application/json`): the whole response at once.
    pub(crate) fn on_whole_body(&mut self, body: &[u8], out: &mut Vec<EventKind>) -> Result<(), Lost> {
        #[derive(Deserialize)]
        struct Whole {
            id: String,
            status: Option<String>,
            #[serde(default)]
            output: Vec<Item>,
        }
        let w: Whole = parse(body)?;
        if !self.active.is_empty() {
            return Err(Lost::AMBIGUOUS);
        }
        let status = match w.status.as_deref() {
            Some("completed") => ResponseStatus::Completed,
            Some("incomplete") => ResponseStatus::Incomplete,
            Some("failed") => ResponseStatus::Failed,
            // queued / in_progress (background mode) or absent: not known to have ended.
            _ => return Err(Lost::PROTOCOL),
        };
        let request = self.pending.get_mut(&None).and_then(VecDeque::pop_front);
        let mut calls = Vec::new();
        for item in w.output {
            if let Some(kind) = client_call_kind(&item.kind) {
                calls.push(self.tool_call(w.id.clone(), item, kind)?);
            }
        }
        out.push(EventKind::ResponseStart {
            stream: self.stream.clone(),
            response: w.id.clone(),
            request,
        });
        out.extend(calls);
        out.push(EventKind::ResponseEnd {
            stream: self.stream.clone(),
            response: w.id,
            status,
        });
        Ok(())
    }
}

/// Output item types the host executes itself (see the module comment for the others).
fn client_call_kind(item_type: &str) -> Option<CallKind> {
    match item_type {
        "function_call" => Some(CallKind::Function),
        "custom_tool_call" => Some(CallKind::Custom),
        _ => None,
    }
}
