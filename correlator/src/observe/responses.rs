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
//! - `response.completed` / `.incomplete` / `.failed` → `response_end` with that status, the
//!   token usage of its `response.usage` (`input_tokens`, `output_tokens`,
//!   `input_tokens_details.cached_tokens`) and, for `.incomplete`, the stop reason
//!   `incomplete_details.reason` as a fixed word (a completed response reports none). The model
//!   (`response.model` of the event that starts it) goes on `response_start`.
//! - `error` (flat SSE shape or the WebSocket `{type, error, status?}` shape) → `response_end
//!   {error}` for the active response; with none active it fails the oldest pending request.
//! - Deltas, `codex.rate_limits`, `response.metadata` and unknown types are ignored, decided
//!   from the SSE `event:` name or the frame's leading `"type"` without parsing their JSON.

use std::collections::{HashMap, VecDeque};

use serde::Deserialize;

use super::lost::Lost;
use super::peek;
use crate::event::{CallKind, EventKind, ResponseStatus, StopReason, Usage};

/// Bound on requests awaiting a response, and on responses active at once, per connection.
const MAX_PENDING: usize = 1024;

/// The event types this state machine reads; everything else is dropped unparsed.
pub(super) fn wants(kind: &str) -> bool {
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

pub(super) struct ResponsesStream {
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
    #[serde(default, deserialize_with = "super::lenient::string")]
    model: Option<String>,
    #[serde(default, deserialize_with = "super::lenient::object")]
    usage: Option<ApiUsage>,
    #[serde(default, deserialize_with = "super::lenient::object")]
    incomplete_details: Option<IncompleteDetails>,
}
/// The Responses `usage` object (counts only).
#[derive(Deserialize)]
struct ApiUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default, deserialize_with = "super::lenient::object")]
    input_tokens_details: Option<InputDetails>,
}
#[derive(Deserialize)]
struct InputDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}
#[derive(Deserialize)]
struct IncompleteDetails {
    #[serde(default, deserialize_with = "super::lenient::string")]
    reason: Option<String>,
}
impl ResponseId {
    fn usage(&self) -> Option<Usage> {
        let u = self.usage.as_ref()?;
        let usage = Usage {
            input: u.input_tokens,
            output: u.output_tokens,
            cache_read: u
                .input_tokens_details
                .as_ref()
                .and_then(|d| d.cached_tokens),
            cache_creation: None,
        };
        (usage != Usage::default()).then_some(usage)
    }

    fn stop_reason(&self) -> Option<StopReason> {
        let reason = self.incomplete_details.as_ref()?.reason.as_deref()?;
        Some(StopReason::from_api(reason))
    }
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
    pub(super) fn new(stream: String) -> ResponsesStream {
        ResponsesStream {
            stream,
            pending: HashMap::new(),
            active: Vec::new(),
        }
    }

    /// A request went out on `lane` (`stream_id`, or `None`); the next response started on that
    /// lane answers it.
    pub(super) fn request_sent(
        &mut self,
        lane: Option<String>,
        request: String,
    ) -> Result<(), Lost> {
        let q = self.pending.entry(lane).or_default();
        if q.len() >= MAX_PENDING {
            return Err(Lost::OVERFLOW);
        }
        q.push_back(request);
        Ok(())
    }

    /// One event: `name` is the SSE `event:` name, or `None` for a WebSocket frame (the JSON's
    /// leading `type` decides, with a full parse only when that is unclear).
    pub(super) fn on_event(
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
                    model: e.response.model,
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
                        usage: e.response.usage(),
                        stop_reason: e.response.stop_reason(),
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
                            usage: None,
                            stop_reason: None,
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
    pub(crate) fn on_whole_body(
        &mut self,
        body: &[u8],
        out: &mut Vec<EventKind>,
    ) -> Result<(), Lost> {
        #[derive(Deserialize)]
        struct Whole {
            #[serde(flatten)]
            head: ResponseId,
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
        let id = w.head.id.clone();
        let mut calls = Vec::new();
        for item in w.output {
            if let Some(kind) = client_call_kind(&item.kind) {
                calls.push(self.tool_call(id.clone(), item, kind)?);
            }
        }
        out.push(EventKind::ResponseStart {
            stream: self.stream.clone(),
            response: id.clone(),
            request,
            model: w.head.model.clone(),
        });
        out.extend(calls);
        out.push(EventKind::ResponseEnd {
            stream: self.stream.clone(),
            response: id,
            status,
            usage: w.head.usage(),
            stop_reason: w.head.stop_reason(),
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

#[cfg(test)]
mod tests {
    use super::super::exchange::{Api, ExchangeInfo, WsObserver};
    use super::super::testkit::*;
    use super::super::ws_frames::tests::{frame, Deflater};
    use crate::event::{
        CallKind::*, Client, EventKind, ResponseStatus::*, StopReason, Transport::*, Usage,
    };

    fn created(kind: &str, id: &str, lane: Option<&str>) -> String {
        let lane = lane
            .map(|l| format!(r#","stream_id":"{l}""#))
            .unwrap_or_default();
        format!(
            r#"{{"type":"response.{kind}","sequence_number":0,"response":{{"id":"{id}","object":"response","status":"in_progress","output":[],"instructions":"SECRET_SYSTEM"}}{lane}}}"#
        )
    }
    fn function_item(id: &str, call: &str, name: &str, ns: Option<&str>) -> String {
        let ns = ns
            .map(|n| format!(r#","namespace":"{n}""#))
            .unwrap_or_default();
        format!(
            r#"{{"type":"function_call","id":"{id}","call_id":"{call}","name":"{name}"{ns},"arguments":"{{\"text\":\"SECRET_ARG\"}}","status":"completed"}}"#
        )
    }
    fn custom_item(id: &str, call: &str, name: &str, ns: Option<&str>) -> String {
        let ns = ns
            .map(|n| format!(r#","namespace":"{n}""#))
            .unwrap_or_default();
        format!(
            r#"{{"type":"custom_tool_call","id":"{id}","call_id":"{call}","name":"{name}"{ns},"input":"await tools.mcp__probe__echo({{text:'SECRET_ARG'}})"}}"#
        )
    }
    fn item_events(item: &str, id: &str, lane: Option<&str>) -> Vec<(String, String)> {
        let lane = lane
            .map(|l| format!(r#","stream_id":"{l}""#))
            .unwrap_or_default();
        vec![
            (
                "response.output_item.added".into(),
                format!(
                    r#"{{"type":"response.output_item.added","output_index":0,"item":{item}{lane}}}"#
                ),
            ),
            (
                "response.function_call_arguments.delta".into(),
                format!(
                    r#"{{"type":"response.function_call_arguments.delta","item_id":"{id}","output_index":0,"delta":"{{\"te"{lane}}}"#
                ),
            ),
            (
                "response.custom_tool_call_input.delta".into(),
                format!(
                    r#"{{"type":"response.custom_tool_call_input.delta","item_id":"{id}","output_index":0,"delta":"SECRET"{lane}}}"#
                ),
            ),
            (
                "response.output_item.done".into(),
                format!(
                    r#"{{"type":"response.output_item.done","output_index":0,"item":{item}{lane}}}"#
                ),
            ),
        ]
    }
    fn other_items() -> Vec<(String, String)> {
        vec![
            ("response.output_item.done".into(), r#"{"type":"response.output_item.done","output_index":0,"item":{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"SECRET"}}"#.into()),
            ("response.output_text.delta".into(), r#"{"type":"response.output_text.delta","item_id":"msg_1","output_index":1,"content_index":0,"delta":"SECRET_OUTPUT"}"#.into()),
            ("response.output_item.done".into(), r#"{"type":"response.output_item.done","output_index":1,"item":{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"SECRET_OUTPUT"}]}}"#.into()),
            ("response.output_item.done".into(), r#"{"type":"response.output_item.done","output_index":2,"item":{"type":"web_search_call","id":"ws_1","status":"completed"}}"#.into()),
            ("response.output_item.done".into(), r#"{"type":"response.output_item.done","output_index":3,"item":{"type":"tool_search_call","id":"ts_1","call_id":"call_ts","execution":"client"}}"#.into()),
            ("codex.rate_limits".into(), r#"{"type":"codex.rate_limits","primary":{"used_percent":1.0}}"#.into()),
            ("response.metadata".into(), r#"{"type":"response.metadata","headers":{"x-codex-turn-state":"SECRET"}}"#.into()),
        ]
    }
    fn finished(kind: &str, id: &str, lane: Option<&str>) -> String {
        let lane = lane
            .map(|l| format!(r#","stream_id":"{l}""#))
            .unwrap_or_default();
        format!(
            r#"{{"type":"response.{kind}","sequence_number":9,"response":{{"id":"{id}","status":"{kind}","output":[{{"type":"message","content":[{{"type":"output_text","text":"SECRET_OUTPUT"}}]}}],"usage":{{"total_tokens":5}}}}{lane}}}"#
        )
    }
    fn sse_of(events: &[(String, String)]) -> String {
        let pairs: Vec<(&str, &str)> = events
            .iter()
            .map(|(n, d)| (n.as_str(), d.as_str()))
            .collect();
        sse(&pairs)
    }
    fn check_http(run: &HttpRun, want: &[EventKind]) {
        assert_eq!(run.run(None), want, "fed whole");
        for seed in 0..25 {
            assert_eq!(run.run(Some(seed)), want, "seed {seed}");
        }
    }

    const HTTP_FIRST: &str = r#"{"model":"gpt-5","instructions":"SECRET_SYSTEM","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"SECRET_PROMPT"}]}],"tools":[],"stream":true,"store":false}"#;
    const HTTP_CONTINUATION: &str = r#"{"model":"gpt-5","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"SECRET_PROMPT"}]},
        {"type":"function_call","id":"fc_1","call_id":"call_1","name":"echo","namespace":"mcp__probe","arguments":"{}"},
        {"type":"function_call_output","call_id":"call_1","output":"SECRET_RESULT"}],"stream":true,"store":false}"#;

    fn http_head(outputs: &[&str]) -> Vec<EventKind> {
        vec![
            open("s1", Client::Codex, Http, Some("th1")),
            req("s1", "s1/q1", None, outputs),
        ]
    }

    #[test]
    fn sse_function_call_in_an_mcp_namespace() {
        let mut ev = vec![
            (
                "response.created".to_string(),
                created("created", "resp_1", None),
            ),
            (
                "response.in_progress".to_string(),
                created("in_progress", "resp_1", None),
            ),
        ];
        ev.extend(item_events(
            &function_item("fc_1", "call_1", "echo", Some("mcp__probe")),
            "fc_1",
            None,
        ));
        ev.extend(other_items());
        ev.push((
            "response.completed".into(),
            finished("completed", "resp_1", None),
        ));
        let run = HttpRun::new(Api::Responses, HTTP_FIRST, &sse_of(&ev));
        let mut want = http_head(&[]);
        want.extend([
            start("s1", "resp_1", Some("s1/q1")),
            call(
                "s1",
                "resp_1",
                "call_1",
                Some("fc_1"),
                "echo",
                Some("mcp__probe"),
                Function,
            ),
            end("s1", "resp_1", Completed),
            close("s1"),
        ]);
        check_http(&run, &want);
    }

    /// `response.created` and a terminal event as the API sends them, with model and usage.
    fn with_facts(kind: &str, id: &str, extra: &str) -> String {
        format!(
            r#"{{"type":"response.{kind}","sequence_number":0,"response":{{"id":"{id}","object":"response","status":"{kind}","model":"gpt-5.1-codex","output":[],"instructions":"SECRET_SYSTEM"{extra}}}}}"#
        )
    }

    #[test]
    fn model_usage_and_the_incomplete_reason_are_read() {
        const USAGE: &str = r#","usage":{"input_tokens":8123,"input_tokens_details":{"cached_tokens":6912},"output_tokens":96,"output_tokens_details":{"reasoning_tokens":64},"total_tokens":8219}"#;
        let completed = vec![
            (
                "response.created".to_string(),
                with_facts("created", "resp_m", "")
                    .replace(r#""status":"created""#, r#""status":"in_progress""#),
            ),
            (
                "response.completed".to_string(),
                with_facts("completed", "resp_m", USAGE),
            ),
        ];
        let run = HttpRun::new(Api::Responses, HTTP_FIRST, &sse_of(&completed));
        let mut want = http_head(&[]);
        want.extend([
            EventKind::ResponseStart {
                stream: "s1".into(),
                response: "resp_m".into(),
                request: Some("s1/q1".into()),
                model: Some("gpt-5.1-codex".into()),
            },
            EventKind::ResponseEnd {
                stream: "s1".into(),
                response: "resp_m".into(),
                status: Completed,
                usage: Some(Usage {
                    input: Some(8123),
                    output: Some(96),
                    cache_read: Some(6912),
                    cache_creation: None,
                }),
                // A completed response reports no reason.
                stop_reason: None,
            },
            close("s1"),
        ]);
        check_http(&run, &want);

        let incomplete = vec![
            (
                "response.created".to_string(),
                with_facts("created", "resp_i", ""),
            ),
            (
                "response.incomplete".to_string(),
                with_facts(
                    "incomplete",
                    "resp_i",
                    r#","incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":5,"output_tokens":"SECRET"}"#,
                ),
            ),
        ];
        let run = HttpRun::new(Api::Responses, HTTP_FIRST, &sse_of(&incomplete));
        let mut want = http_head(&[]);
        want.extend([
            EventKind::ResponseStart {
                stream: "s1".into(),
                response: "resp_i".into(),
                request: Some("s1/q1".into()),
                model: Some("gpt-5.1-codex".into()),
            },
            EventKind::ResponseEnd {
                stream: "s1".into(),
                response: "resp_i".into(),
                status: Incomplete,
                // A usage that does not read is left out, not a lost stream.
                usage: None,
                stop_reason: Some(StopReason::MaxOutputTokens),
            },
            close("s1"),
        ]);
        check_http(&run, &want);

        // Non-streaming: the same facts from the whole body.
        let body = format!(
            r#"{{"id":"resp_w","object":"response","status":"incomplete","model":"gpt-5","incomplete_details":{{"reason":"content_filter"}},"output":[]{USAGE}}}"#
        );
        let mut run = HttpRun::new(Api::Responses, HTTP_FIRST, &body);
        run.content_type = "application/json";
        let got = run.run(None);
        assert!(
            got.contains(&EventKind::ResponseStart {
                stream: "s1".into(),
                response: "resp_w".into(),
                request: Some("s1/q1".into()),
                model: Some("gpt-5".into()),
            }),
            "{got:?}"
        );
        assert!(
            got.iter().any(|e| matches!(
                e,
                EventKind::ResponseEnd {
                    usage: Some(Usage {
                        input: Some(8123),
                        cache_read: Some(6912),
                        ..
                    }),
                    stop_reason: Some(StopReason::ContentFilter),
                    ..
                }
            )),
            "{got:?}"
        );
    }

    #[test]
    fn sse_custom_tool_call_exec_in_code_mode_and_the_http_continuation() {
        let mut ev = vec![(
            "response.created".to_string(),
            created("created", "resp_2", None),
        )];
        ev.extend(item_events(
            &custom_item("ctc_1", "call_x", "exec", Some("functions")),
            "ctc_1",
            None,
        ));
        ev.extend(item_events(
            &custom_item("ctc_2", "call_y", "exec", None),
            "ctc_2",
            None,
        ));
        ev.push((
            "response.incomplete".into(),
            finished("incomplete", "resp_2", None),
        ));
        let mut run = HttpRun::new(Api::Responses, "", &sse_of(&ev));
        run.req_body = super::super::decode::tests::encode("zstd", HTTP_CONTINUATION.as_bytes());
        run.req_encoding = Some("zstd");
        run.resp_body = super::super::decode::tests::encode("br", &run.resp_body);
        run.resp_encoding = Some("br");
        let mut want = http_head(&["call_1"]);
        want.extend([
            start("s1", "resp_2", Some("s1/q1")),
            call(
                "s1",
                "resp_2",
                "call_x",
                Some("ctc_1"),
                "exec",
                Some("functions"),
                Custom,
            ),
            call(
                "s1",
                "resp_2",
                "call_y",
                Some("ctc_2"),
                "exec",
                None,
                Custom,
            ),
            end("s1", "resp_2", Incomplete),
            close("s1"),
        ]);
        check_http(&run, &want);
    }

    #[test]
    fn sse_terminal_statuses() {
        let cases: Vec<(&str, (String, String), Option<crate::event::ResponseStatus>)> = vec![
            ("failed", ("response.failed".into(), finished("failed", "resp_3", None)), Some(Failed)),
            ("flat error", ("error".into(), r#"{"type":"error","code":"server_error","message":"boom","param":null,"sequence_number":3}"#.into()), Some(Error)),
            ("end of another response", ("response.completed".into(), finished("completed", "resp_other", None)), None),
        ];
        for (name, last, status) in cases {
            let ev = vec![
                (
                    "response.created".to_string(),
                    created("created", "resp_3", None),
                ),
                last,
            ];
            let run = HttpRun::new(Api::Responses, HTTP_FIRST, &sse_of(&ev));
            let mut want = http_head(&[]);
            want.push(start("s1", "resp_3", Some("s1/q1")));
            want.extend(status.map(|s| end("s1", "resp_3", s)));
            want.push(close("s1"));
            assert_eq!(run.run(None), want, "{name}");
        }
    }

    #[test]
    fn sse_calls_outside_a_response_lose_observation() {
        let ev = item_events(&function_item("fc_1", "call_1", "echo", None), "fc_1", None);
        let run = HttpRun::new(Api::Responses, HTTP_FIRST, &sse_of(&ev));
        let mut want = http_head(&[]);
        want.extend([lost("s1", "ambiguous_response"), close("s1")]);
        check_http(&run, &want);
    }

    #[test]
    fn a_non_streaming_json_response_is_read_whole() {
        let body = format!(
            r#"{{"id":"resp_9","object":"response","status":"completed","output":[{},{}]}}"#,
            function_item("fc_9", "call_9", "echo", Some("mcp__probe")),
            r#"{"type":"message","content":[]}"#
        );
        let mut run = HttpRun::new(Api::Responses, HTTP_FIRST, &body);
        run.content_type = "application/json";
        let mut want = http_head(&[]);
        want.extend([
            start("s1", "resp_9", Some("s1/q1")),
            call(
                "s1",
                "resp_9",
                "call_9",
                Some("fc_9"),
                "echo",
                Some("mcp__probe"),
                Function,
            ),
            end("s1", "resp_9", Completed),
            close("s1"),
        ]);
        check_http(&run, &want);
    }

    // --- WebSocket (Codex) ---------------------------------------------------------------

    /// Frames messages the way each side of a Codex connection does: the client masks, both
    /// compress when permessage-deflate was negotiated (with or without context takeover).
    struct Wire {
        client: Option<Deflater>,
        server: Option<Deflater>,
        script: Vec<(Dir, Vec<u8>)>,
        n: u8,
    }

    impl Wire {
        fn new(deflate: Option<(bool, bool)>) -> Wire {
            Wire {
                client: deflate.map(|(c, _)| Deflater::new(c)),
                server: deflate.map(|(_, s)| Deflater::new(s)),
                script: Vec::new(),
                n: 0,
            }
        }
        fn client(&mut self, msg: &str) {
            self.n = self.n.wrapping_add(37);
            let mask = Some([self.n, 0x5a, self.n ^ 0xff, 0x11]);
            let bytes = match self.client.as_mut() {
                Some(d) => {
                    // Split compressed client messages in two fragments with a ping between.
                    let z = d.compress(msg.as_bytes());
                    let (a, b) = z.split_at(z.len() / 2);
                    [
                        frame(false, true, 1, a, mask),
                        frame(true, false, 9, b"", mask),
                        frame(true, false, 0, b, mask),
                    ]
                    .concat()
                }
                None => frame(true, false, 1, msg.as_bytes(), mask),
            };
            self.script.push((Dir::ToServer, bytes));
        }
        fn server(&mut self, msg: &str) {
            let bytes = match self.server.as_mut() {
                Some(d) => frame(true, true, 1, &d.compress(msg.as_bytes()), None),
                None => frame(true, false, 1, msg.as_bytes(), None),
            };
            self.script.push((Dir::ToClient, bytes));
        }
        fn server_events(&mut self, events: &[(String, String)]) {
            for (_, data) in events {
                self.server(data);
            }
        }
    }

    const PREWARM: &str = r#"{"type":"response.create","model":"gpt-5","instructions":"SECRET_SYSTEM","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"SECRET_PROMPT"}]}],"tools":[],"generate":false,"store":false,"client_metadata":{"thread_id":"th1"}}"#;
    const TURN: &str = r#"{"type":"response.create","model":"gpt-5","previous_response_id":"resp_pre","input":[],"store":false}"#;
    const CONT: &str = r#"{"type":"response.create","model":"gpt-5","previous_response_id":"resp_turn","input":[{"type":"function_call_output","call_id":"call_1","output":"SECRET_RESULT"}]}"#;

    fn codex_run(deflate: Option<(bool, bool)>) -> Vec<(Dir, Vec<u8>)> {
        let mut w = Wire::new(deflate);
        w.client(PREWARM);
        w.server(&created("created", "resp_pre", None));
        w.server(&finished("completed", "resp_pre", None));
        w.client(TURN);
        w.server(&created("created", "resp_turn", None));
        w.server(&created("in_progress", "resp_turn", None));
        w.server_events(&item_events(
            &function_item("fc_1", "call_1", "echo", Some("mcp__probe")),
            "fc_1",
            None,
        ));
        w.server_events(&other_items());
        w.server(&finished("completed", "resp_turn", None));
        w.client(r#"{"type":"response.processed","response_id":"resp_turn"}"#);
        w.client(CONT);
        w.server(&created("created", "resp_cont", None));
        w.server_events(&other_items());
        w.server(&finished("completed", "resp_cont", None));
        // Codex exits without a close frame.
        w.script
    }

    fn codex_want() -> Vec<EventKind> {
        vec![
            open("w1", Client::Codex, Websocket, Some("th1")),
            req("w1", "w1/q1", None, &[]),
            start("w1", "resp_pre", Some("w1/q1")),
            end("w1", "resp_pre", Completed),
            req("w1", "w1/q2", Some("resp_pre"), &[]),
            start("w1", "resp_turn", Some("w1/q2")),
            call(
                "w1",
                "resp_turn",
                "call_1",
                Some("fc_1"),
                "echo",
                Some("mcp__probe"),
                Function,
            ),
            end("w1", "resp_turn", Completed),
            req("w1", "w1/q3", Some("resp_turn"), &["call_1"]),
            start("w1", "resp_cont", Some("w1/q3")),
            end("w1", "resp_cont", Completed),
            close("w1"),
        ]
    }

    #[test]
    fn codex_websocket_run_prewarm_turn_continuation() {
        type Case<'a> = (&'a str, Option<&'a str>, Option<(bool, bool)>);
        let cases: &[Case] = &[
            ("no extension", None, None),
            (
                "deflate, context takeover",
                Some("permessage-deflate; client_max_window_bits=15"),
                Some((true, true)),
            ),
            (
                "deflate, no context takeover",
                Some("permessage-deflate; server_no_context_takeover; client_no_context_takeover"),
                Some((false, false)),
            ),
            (
                "deflate, server resets only",
                Some("permessage-deflate; server_no_context_takeover"),
                Some((true, false)),
            ),
        ];
        for (name, ext, deflate) in cases {
            let script = codex_run(*deflate);
            assert_eq!(run_ws(*ext, &script, None), codex_want(), "{name}, whole");
            for seed in 0..20 {
                assert_eq!(
                    run_ws(*ext, &script, Some(seed)),
                    codex_want(),
                    "{name}, seed {seed}"
                );
            }
        }
    }

    #[test]
    fn trace_contexts_are_kept_per_request_only_when_asked_for() {
        const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let with_tp = TURN.replace(
            r#""store":false}"#,
            &format!(
                r#""store":false,"client_metadata":{{"ws_request_header_traceparent":"{TP}"}}}}"#
            ),
        );
        let mut w = Wire::new(None);
        w.client(PREWARM);
        w.client(&with_tp);
        let info = || ExchangeInfo {
            stream: "w1".into(),
            api: Api::Responses,
            client: Client::Codex,
            thread: None,
        };
        let feed = |obs: &mut WsObserver, out: &mut Vec<EventKind>| {
            for (_, bytes) in &w.script {
                obs.client_bytes(bytes, out);
            }
        };
        let mut out = Vec::new();
        let mut kept = WsObserver::new(info(), None, &mut out);
        kept.keep_trace_contexts();
        feed(&mut kept, &mut out);
        // The second request's, by the id its request event carries.
        assert_eq!(
            kept.take_trace_contexts(),
            [("w1/q2".to_string(), TP.to_string())]
        );
        assert!(out.contains(&req("w1", "w1/q2", Some("resp_pre"), &[])));
        assert!(kept.take_trace_contexts().is_empty(), "taken once");
        let mut out2 = Vec::new();
        let mut plain = WsObserver::new(info(), None, &mut out2);
        feed(&mut plain, &mut out2);
        assert!(
            plain.take_trace_contexts().is_empty(),
            "not kept unless asked"
        );
        assert_eq!(out, out2, "the events are the same either way");
    }

    #[test]
    fn websocket_lanes_attach_items_by_stream_id() {
        let mut w = Wire::new(None);
        w.client(r#"{"type":"response.create","stream_id":"a","input":"x"}"#);
        w.client(r#"{"type":"response.create","stream_id":"b","input":"y"}"#);
        w.server(&created("created", "resp_a", Some("a")));
        w.server(&created("created", "resp_b", Some("b")));
        w.server_events(&item_events(
            &function_item("fc_b", "call_b", "echo", None),
            "fc_b",
            Some("b"),
        ));
        w.server(&finished("completed", "resp_b", Some("b")));
        w.server(r#"{"type":"error","status":500,"error":{"type":"server_error","message":"x"},"stream_id":"a"}"#);
        let want = vec![
            open("w1", Client::Codex, Websocket, Some("th1")),
            req("w1", "w1/q1", None, &[]),
            req("w1", "w1/q2", None, &[]),
            start("w1", "resp_a", Some("w1/q1")),
            start("w1", "resp_b", Some("w1/q2")),
            call(
                "w1",
                "resp_b",
                "call_b",
                Some("fc_b"),
                "echo",
                None,
                Function,
            ),
            end("w1", "resp_b", Completed),
            end("w1", "resp_a", Error),
            close("w1"),
        ];
        assert_eq!(run_ws(None, &w.script, None), want);
        for seed in 0..10 {
            assert_eq!(run_ws(None, &w.script, Some(seed)), want, "seed {seed}");
        }
    }

    #[test]
    fn an_item_without_a_lane_while_two_responses_run_is_ambiguous() {
        let mut w = Wire::new(None);
        w.client(r#"{"type":"response.create","stream_id":"a","input":"x"}"#);
        w.client(r#"{"type":"response.create","stream_id":"b","input":"y"}"#);
        w.server(&created("created", "resp_a", Some("a")));
        w.server(&created("created", "resp_b", Some("b")));
        w.server_events(&item_events(
            &function_item("fc_1", "call_1", "echo", None),
            "fc_1",
            None,
        ));
        w.server(&finished("completed", "resp_b", Some("b")));
        let got = run_ws(None, &w.script, None);
        assert_eq!(
            &got[got.len() - 2..],
            &[lost("w1", "ambiguous_response"), close("w1")]
        );
    }

    #[test]
    fn websocket_errors_end_the_active_response_or_fail_the_pending_request() {
        let mut w = Wire::new(None);
        // Refused before any response began: the next response answers the next request.
        w.client(r#"{"type":"response.create","previous_response_id":"resp_gone","input":[]}"#);
        w.server(r#"{"type":"error","status":400,"error":{"type":"invalid_request_error","code":"previous_response_not_found","message":"SECRET"}}"#);
        w.client(r#"{"type":"response.create","input":"full context"}"#);
        w.server(&created("created", "resp_1", None));
        w.server(r#"{"type":"error","status":429,"error":{"type":"rate_limit_error","code":"websocket_connection_limit_reached","message":"x"}}"#);
        let want = vec![
            open("w1", Client::Codex, Websocket, Some("th1")),
            req("w1", "w1/q1", Some("resp_gone"), &[]),
            req("w1", "w1/q2", None, &[]),
            start("w1", "resp_1", Some("w1/q2")),
            end("w1", "resp_1", Error),
            close("w1"),
        ];
        assert_eq!(run_ws(None, &w.script, None), want);
    }

    #[test]
    fn response_append_delivers_outputs_without_taking_a_response() {
        let mut w = Wire::new(None);
        w.client(r#"{"type":"response.create","input":"go"}"#);
        w.server(&created("created", "resp_1", None));
        w.server_events(&item_events(
            &function_item("fc_1", "call_1", "echo", None),
            "fc_1",
            None,
        ));
        w.server(&finished("completed", "resp_1", None));
        w.client(r#"{"type":"response.append","input":[{"type":"function_call_output","call_id":"call_1","output":"r"}]}"#);
        w.client(r#"{"type":"response.create","input":[]}"#);
        w.server(&created("created", "resp_2", None));
        let want = vec![
            open("w1", Client::Codex, Websocket, Some("th1")),
            req("w1", "w1/q1", None, &[]),
            start("w1", "resp_1", Some("w1/q1")),
            call(
                "w1",
                "resp_1",
                "call_1",
                Some("fc_1"),
                "echo",
                None,
                Function,
            ),
            end("w1", "resp_1", Completed),
            req("w1", "w1/q2", None, &["call_1"]),
            req("w1", "w1/q3", None, &[]),
            start("w1", "resp_2", Some("w1/q3")),
            close("w1"),
        ];
        assert_eq!(run_ws(None, &w.script, None), want);
    }

    #[test]
    fn websocket_failures_lose_the_stream() {
        // Binary garbage that inflates to nothing sensible.
        let bad_inflate = vec![(
            Dir::ToClient,
            frame(true, true, 1, b"\xff\xfe\xfd not deflate", None),
        )];
        let got = run_ws(Some("permessage-deflate"), &bad_inflate, None);
        assert_eq!(&got[1..], &[lost("w1", "decode"), close("w1")]);
        // A reserved opcode.
        let bad_frame = vec![(
            Dir::ToServer,
            frame(true, false, 5, b"", Some([1, 2, 3, 4])),
        )];
        assert_eq!(
            &run_ws(None, &bad_frame, None)[1..],
            &[lost("w1", "frame"), close("w1")]
        );
        // An extension that cannot be followed loses the stream at once.
        assert_eq!(
            &run_ws(Some("x-custom-ext"), &codex_run(None), None)[1..],
            &[lost("w1", "frame"), close("w1")]
        );
        // A client frame that is not JSON.
        let not_json = vec![(
            Dir::ToServer,
            frame(true, false, 1, b"SECRET hello", Some([1, 2, 3, 4])),
        )];
        assert_eq!(
            &run_ws(None, &not_json, None)[1..],
            &[lost("w1", "json"), close("w1")]
        );
    }
}
