//! A scripted model API on loopback, for driving the real hosts (Claude Code, Codex CLI)
//! through one MCP tool loop without a real model and without a network.
//!
//! ```text
//! cargo run --release --example scripted_upstream -- --listen 127.0.0.1:0 \
//!     --alias probe --tool echo [--hold-ms 1500] [--log FILE] [--no-ws-deflate] \
//!     [--subagent blocking|background|parallel]
//! ```
//!
//! It prints `listening on ADDR` on stdout, then serves until killed:
//! - Anthropic Messages: `POST …/v1/messages` (SSE, or JSON when `stream` is not true). The
//!   "model" calls `mcp__<alias>__<tool>` once (through Claude Code's `ToolSearch` first when
//!   the MCP tool is deferred), then answers with text once the tool result comes back. Also
//!   `HEAD /api/hello`, `POST …/v1/messages/count_tokens`, `GET …/v1/models`.
//! - OpenAI Responses: `POST …/responses` (SSE, or one JSON body when `stream` is not true) and
//!   `GET …/responses` upgraded to a WebSocket (one connection, many `response.create` frames,
//!   `permessage-deflate` when offered, as the real API does). Function mode calls the
//!   `mcp__<alias>` namespace's `<tool>` (or the function `mcp__<alias>__<tool>`, or, as an
//!   agent SDK offers an MCP tool, the function named `<tool>` itself, or OpenCode's
//!   `<alias>_<tool>`); code mode (Codex's
//!   default catalog model) calls the custom `exec` tool with JavaScript that calls the MCP tool
//!   through the `tools` object. Also `GET …/models`.
//!
//! `--subagent blocking|background` (Claude Code): the main thread calls the MCP tool as above,
//! and on its result, instead of the final text, calls `Agent` to spawn a `general-purpose`
//! subagent (`run_in_background` false or true) told to call the MCP tool; requests carrying
//! `x-claude-code-agent-id` (the subagent's) go through the MCP loop above, and the main thread
//! gets the final text once it has spawned. Two MCP calls per run: the main thread's, then the
//! subagent's (inside the main thread's `Agent` window when blocking). `--subagent parallel`
//! spawns two blocking subagents from one response instead (two `Agent` calls side by side).
//!
//! `--subagent parallel` (Codex, multi-agent tools offered: `multi_agent_v1.spawn_agent`): the
//! main thread's first request gets two `spawn_agent` calls in one response; once their outputs
//! (the agent ids) are back, `wait_agent` on the agents not yet finished, again after each
//! wait that leaves one running, and the final text once every agent has finished. Requests of
//! the subagents (`client_metadata["x-openai-subagent"]`) go through the MCP loop above, so
//! their two MCP calls run at the same time. Needs the whole input in each request (HTTP, not
//! WebSocket's `previous_response_id` deltas).
//!
//! `--hold-ms N` holds the terminal event back N ms after the tool call item is complete, so
//! the host runs the MCP call while the response is still streaming (protocols.md §6).
//!
//! `--log FILE` gets one JSON line per exchange (and per WebSocket frame): method, path
//! template, what the script chose to answer and the event types sent; for Messages also
//! whether the request came from a subagent and the names of its `x-claude-code-*` headers.
//! Before it, a `seen` line per HTTP request with the names of all its headers, and for trace
//! context (a `traceparent` header, or a `response.create` frame's
//! `client_metadata.ws_request_header_traceparent`) only its shape, e.g.
//! `00-<32 hex>-<16 hex>-01`, and for `x-codex-turn-metadata` (header or `client_metadata`
//! entry) only its JSON keys; a frame's line also names its `client_metadata` keys. That is what
//! docs/otlp.md says each host sends. Never a header value, an id, a body, a prompt or a tool
//! argument.

use std::convert::Infallible;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use flate2::{Compress, Compression, Decompress, FlushDecompress, Status};
use futures_util::stream;
use http::{header, HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

#[derive(Parser, Debug)]
#[command(about = "A scripted model API (Anthropic Messages, OpenAI Responses) on loopback")]
struct Args {
    /// Address to listen on (loopback only).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// The MCP server alias the model calls.
    #[arg(long)]
    alias: String,
    /// The MCP tool the model calls.
    #[arg(long)]
    tool: String,
    /// The tool's input object (JSON).
    #[arg(long, default_value = r#"{"text":"windowtap e2e"}"#)]
    input: String,
    /// Hold the terminal event back this many ms after the tool call item is complete.
    #[arg(long, default_value_t = 0)]
    hold_ms: u64,
    /// Append one JSON line per exchange here (structure only).
    #[arg(long)]
    log: Option<std::path::PathBuf>,
    /// Refuse permessage-deflate on WebSocket upgrades (the real API accepts it).
    #[arg(long)]
    no_ws_deflate: bool,
    /// Claude Code: after its own MCP call the main thread spawns a `general-purpose` subagent
    /// with the `Agent` tool (`run_in_background` false or true), which calls the MCP tool too.
    /// `parallel`: two at once (Claude Code `Agent`; Codex `spawn_agent`, then `wait_agent`).
    #[arg(long, value_enum)]
    subagent: Option<Subagent>,
}

/// How the scripted main thread runs its subagent (`Agent`'s `run_in_background`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Subagent {
    /// `run_in_background: false`: the main thread waits for the subagent's answer.
    Blocking,
    /// `run_in_background: true`: the main thread gets its tool_result at once.
    Background,
    /// Two blocking subagents launched by one response (two `Agent` calls side by side, as
    /// Claude Code does for independent tasks), each calling the MCP tool, their calls at once.
    Parallel,
}

/// The header Claude Code sends only on requests of agents spawned inside a session
/// (protocols.md §3.3); the main thread's requests never carry it.
const AGENT_ID_HEADER: &str = "x-claude-code-agent-id";
/// Claude Code's subagent tool (protocols.md §3.4).
const AGENT_TOOL: &str = "Agent";

/// The final answer, once the tool result is back. Fixed text so runs compare equal.
const FINAL_TEXT: &str = "The tool answered.";
/// The answer to a request that offers no way to reach the MCP tool.
const NO_TOOL_TEXT: &str = "No tool is available.";

struct Script {
    alias: String,
    tool: String,
    input: Value,
    hold: Duration,
    deflate: bool,
    log: Option<Mutex<std::fs::File>>,
    started: Instant,
    ids: AtomicU64,
    prefix: String,
    subagent: Option<Subagent>,
}

impl Script {
    /// The flat model-visible name of the MCP tool (Claude; Codex's flat form).
    fn flat_name(&self) -> String {
        format!("mcp__{}__{}", self.alias, self.tool)
    }

    fn namespace(&self) -> String {
        format!("mcp__{}", self.alias)
    }

    /// A fresh id: unique within this process, and across processes by a start-time prefix.
    fn id(&self, kind: &str) -> String {
        let n = self.ids.fetch_add(1, Ordering::Relaxed);
        format!("{kind}_{}{n:04}", self.prefix)
    }

    fn log(&self, mut line: Value) {
        let Some(file) = &self.log else { return };
        line["ms"] = json!(self.started.elapsed().as_millis() as u64);
        if let Ok(mut f) = file.lock() {
            // A log write failure must not break serving: the log is a diagnostic.
            let _ = writeln!(f, "{line}");
        }
    }
}

type Body = BoxBody<Bytes, Infallible>;

fn full(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .body(Full::new(body.into()).boxed())
        .expect("static response parts are valid")
}

fn json_response(status: StatusCode, v: &Value) -> Response<Body> {
    full(status, "application/json", v.to_string())
}

/// One step of a scripted stream: an event, or a pause.
enum Step {
    Event(Value),
    Hold(Duration),
}

/// What the script decided to answer (logged as a fixed word).
#[derive(Clone, Copy)]
enum Plan {
    Warmup,
    SpawnAgent,
    WaitAgent,
    ToolSearch,
    McpCall,
    CodeExec,
    Final,
    NoTool,
    Side,
}

impl Plan {
    fn word(self) -> &'static str {
        match self {
            Plan::Warmup => "warmup",
            Plan::SpawnAgent => "spawn_agent",
            Plan::WaitAgent => "wait_agent",
            Plan::ToolSearch => "tool_search",
            Plan::McpCall => "mcp_call",
            Plan::CodeExec => "code_exec",
            Plan::Final => "final_text",
            Plan::NoTool => "no_tool",
            Plan::Side => "side_text",
        }
    }
}

// ---------------------------------------------------------------- Anthropic Messages

/// Chooses the answer to a Messages request from the last user turn and the offered tools.
/// `from_agent`: the request came from a subagent (it carries [`AGENT_ID_HEADER`]).
fn messages_plan(s: &Script, req: &Value, from_agent: bool) -> Plan {
    let flat = s.flat_name();
    let tools: Vec<&str> = req["tools"]
        .as_array()
        .map(|a| a.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    if tools.is_empty() {
        // Claude Code's side requests (titles, summaries) offer no tools.
        return Plan::Side;
    }
    let messages = req["messages"].as_array().cloned().unwrap_or_default();
    // The main thread of a subagent run: its own MCP call first (below), then the subagent.
    let main_of_subagent_run = s.subagent.is_some() && !from_agent;
    if main_of_subagent_run {
        // The subagent is spawned once; whatever comes back afterwards (the Agent
        // tool_result, a background agent's completion notice) gets the final text.
        let spawned = messages.iter().any(|m| {
            m["role"] == "assistant"
                && m["content"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|b| b["type"] == "tool_use" && b["name"] == AGENT_TOOL)
        });
        if spawned {
            return Plan::Final;
        }
    }
    // Names of the tool_use blocks the "model" produced, by id.
    let mut used = std::collections::HashMap::new();
    for m in &messages {
        if m["role"] == "assistant" {
            for b in m["content"].as_array().into_iter().flatten() {
                if b["type"] == "tool_use" {
                    if let (Some(id), Some(name)) = (b["id"].as_str(), b["name"].as_str()) {
                        used.insert(id.to_string(), name.to_string());
                    }
                }
            }
        }
    }
    let answered: Vec<String> = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_array())
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == "tool_result")
        .filter_map(|b| b["tool_use_id"].as_str())
        .filter_map(|id| used.get(id).cloned())
        .collect();
    if answered.contains(&flat) {
        if main_of_subagent_run && tools.contains(&AGENT_TOOL) {
            return Plan::SpawnAgent;
        }
        return Plan::Final;
    }
    if answered.iter().any(|n| n == "ToolSearch") || tools.contains(&flat.as_str()) {
        // After a ToolSearch result the tool is loaded by reference even when `tools` does
        // not list it by name.
        return Plan::McpCall;
    }
    if tools.contains(&"ToolSearch") {
        return Plan::ToolSearch;
    }
    Plan::NoTool
}

/// The `Agent` call's input: a `general-purpose` subagent told to call the MCP tool with the
/// scripted input (so the tool argument's canary travels through the subagent too).
fn agent_input(s: &Script) -> Value {
    json!({
        "description": "Call the MCP tool",
        "prompt": format!("Call the {} tool once with the input {}.", s.flat_name(), s.input),
        "subagent_type": "general-purpose",
        "run_in_background": s.subagent == Some(Subagent::Background),
    })
}

/// The Messages event sequence for one plan.
fn messages_steps(s: &Script, plan: Plan, model: &str) -> (Vec<Step>, Value) {
    let msg_id = s.id("msg");
    let mut steps = vec![Step::Event(json!({
        "type": "message_start",
        "message": {"id": msg_id, "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 10, "cache_creation_input_tokens": 1200,
                "cache_read_input_tokens": 2048, "output_tokens": 1}}
    }))];
    let (block, stop_reason) = match plan {
        Plan::ToolSearch | Plan::McpCall | Plan::SpawnAgent => {
            let (name, input) = match plan {
                Plan::ToolSearch => (
                    "ToolSearch".to_string(),
                    json!({"query": format!("select:{}", s.flat_name())}),
                ),
                Plan::SpawnAgent => (AGENT_TOOL.to_string(), agent_input(s)),
                _ => (s.flat_name(), s.input.clone()),
            };
            // Parallel subagents: one `Agent` block per subagent, in one response.
            let calls = match (plan, s.subagent) {
                (Plan::SpawnAgent, Some(Subagent::Parallel)) => 2,
                _ => 1,
            };
            let mut blocks = Vec::new();
            for index in 0..calls {
                let id = s.id("toolu");
                steps.push(Step::Event(
                    json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
                ));
                steps.push(Step::Event(
                    json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": input.to_string()}}),
                ));
                steps.push(Step::Event(
                    json!({"type": "content_block_stop", "index": index}),
                ));
                blocks.push(json!({"type": "tool_use", "id": id, "name": name, "input": input}));
            }
            steps.push(Step::Hold(s.hold));
            (Value::Array(blocks), "tool_use")
        }
        _ => {
            let text = match plan {
                Plan::NoTool => NO_TOOL_TEXT,
                _ => FINAL_TEXT,
            };
            steps.push(Step::Event(
                json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}),
            ));
            steps.push(Step::Event(
                json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": text}}),
            ));
            steps.push(Step::Event(
                json!({"type": "content_block_stop", "index": 0}),
            ));
            (json!([{"type": "text", "text": text}]), "end_turn")
        }
    };
    steps.push(Step::Event(json!({"type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": null},
        "usage": {"input_tokens": 10, "cache_creation_input_tokens": 1200,
            "cache_read_input_tokens": 2048, "output_tokens": 5}})));
    steps.push(Step::Event(json!({"type": "message_stop"})));
    let whole = json!({"id": msg_id, "type": "message", "role": "assistant", "model": model,
        "content": block, "stop_reason": stop_reason, "stop_sequence": null,
        "usage": {"input_tokens": 10, "cache_creation_input_tokens": 1200,
            "cache_read_input_tokens": 2048, "output_tokens": 5}});
    (steps, whole)
}

/// Facts about a Messages request's headers that the log may carry: whether it came from a
/// subagent, and the names (never the values) of Claude Code's own `x-claude-code-*` headers.
struct FromHeaders {
    agent: bool,
    claude_headers: Vec<String>,
}

impl FromHeaders {
    fn of(headers: &HeaderMap) -> Self {
        let mut claude_headers: Vec<String> = headers
            .keys()
            .map(|k| k.as_str().to_string())
            .filter(|k| k.starts_with("x-claude-code-"))
            .collect();
        claude_headers.sort();
        claude_headers.dedup();
        FromHeaders {
            agent: headers.contains_key(AGENT_ID_HEADER),
            claude_headers,
        }
    }
}

async fn messages(s: Arc<Script>, path: &str, from: FromHeaders, body: &[u8]) -> Response<Body> {
    let Ok(req) = serde_json::from_slice::<Value>(body) else {
        s.log(json!({"method": "POST", "path": path, "answer": "bad_json"}));
        return json_response(
            StatusCode::BAD_REQUEST,
            &json!({"type": "error", "error": {"type": "invalid_request_error",
                "message": "request body is not JSON"}}),
        );
    };
    let plan = messages_plan(&s, &req, from.agent);
    let model = req["model"]
        .as_str()
        .unwrap_or("claude-scripted")
        .to_string();
    let (steps, whole) = messages_steps(&s, plan, &model);
    let facts = json!({"agent": from.agent, "headers": from.claude_headers});
    if req["stream"] != true {
        s.log(
            json!({"method": "POST", "path": path, "answer": plan.word(), "stream": false,
            "from": facts}),
        );
        return json_response(StatusCode::OK, &whole);
    }
    stream_sse(s, "POST", path, plan, steps, Some(facts))
}

// ---------------------------------------------------------------- OpenAI Responses

/// Chooses the answer to a Responses request (HTTP body or WebSocket `response.create`).
fn responses_plan(s: &Script, req: &Value) -> Plan {
    if req["generate"] == false {
        return Plan::Warmup;
    }
    if let Some(team) = codex_team(s, req) {
        return match team {
            Team { spawned: false, .. } => Plan::SpawnAgent,
            Team { running, .. } if running.is_empty() => Plan::Final,
            _ => Plan::WaitAgent,
        };
    }
    let input = req["input"].as_array().cloned().unwrap_or_default();
    let has_output = input.iter().any(|i| {
        matches!(
            i["type"].as_str(),
            Some("function_call_output" | "custom_tool_call_output")
        )
    });
    if has_output {
        return Plan::Final;
    }
    if function_route(s, req).is_some() {
        return Plan::McpCall;
    }
    if offers_exec(req) {
        return Plan::CodeExec;
    }
    Plan::NoTool
}

/// Codex's multi-agent tools (protocols.md §3.4): the namespace and its two tools used here.
const CODEX_AGENTS_NAMESPACE: &str = "multi_agent_v1";
const CODEX_SPAWN: &str = "spawn_agent";
const CODEX_WAIT: &str = "wait_agent";
/// How many subagents the Codex main thread spawns with `--subagent parallel`.
const CODEX_TEAM: usize = 2;

/// Where the Codex main thread of a `--subagent parallel` run stands, read from its input.
#[derive(Debug, PartialEq)]
struct Team {
    /// Its `spawn_agent` calls have their outputs.
    spawned: bool,
    /// The agent ids `spawn_agent` returned whose end no `wait_agent` output has reported.
    running: Vec<String>,
}

/// `Some` for a request of the Codex main thread in `--subagent parallel` mode: one that
/// offers `spawn_agent` and is not a subagent's (Codex marks those with
/// `client_metadata["x-openai-subagent"]`, as it does the `x-openai-subagent` header).
fn codex_team(s: &Script, req: &Value) -> Option<Team> {
    let offers_spawn = req["tools"].as_array().into_iter().flatten().any(|t| {
        t["type"] == "namespace"
            && t["name"] == CODEX_AGENTS_NAMESPACE
            && t["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|f| f["name"] == CODEX_SPAWN)
    });
    // A WebSocket continuation (`previous_response_id`) carries only the new items: without
    // the spawn calls this could not tell a spawn's output apart, and would spawn again.
    if s.subagent != Some(Subagent::Parallel)
        || !offers_spawn
        || req["client_metadata"]["x-openai-subagent"].is_string()
        || req["previous_response_id"].is_string()
    {
        return None;
    }
    let input = req["input"].as_array().cloned().unwrap_or_default();
    let calls_named = |name: &str| -> Vec<String> {
        input
            .iter()
            .filter(|i| i["type"] == "function_call" && i["name"] == name)
            .filter_map(|i| i["call_id"].as_str().map(str::to_owned))
            .collect()
    };
    let (spawns, waits) = (calls_named(CODEX_SPAWN), calls_named(CODEX_WAIT));
    // A tool output's JSON (Codex sends these outputs as strings).
    let outputs_of = |calls: &[String]| -> Vec<Value> {
        input
            .iter()
            .filter(|i| i["type"] == "function_call_output")
            .filter(|i| {
                i["call_id"]
                    .as_str()
                    .is_some_and(|c| calls.iter().any(|x| x == c))
            })
            .filter_map(|i| serde_json::from_str(i["output"].as_str()?).ok())
            .collect()
    };
    let agents: Vec<String> = outputs_of(&spawns)
        .iter()
        .filter_map(|o| o["agent_id"].as_str().map(str::to_owned))
        .collect();
    // `wait_agent` answers `{"status": {AGENT_ID: {"completed": …}}, …}` for the agents that
    // finished (the first one, when several are waited on).
    let finished: Vec<String> = outputs_of(&waits)
        .iter()
        .filter_map(|o| {
            o["status"]
                .as_object()
                .map(|m| m.keys().cloned().collect::<Vec<_>>())
        })
        .flatten()
        .collect();
    Some(Team {
        spawned: !agents.is_empty(),
        running: agents
            .into_iter()
            .filter(|a| !finished.contains(a))
            .collect(),
    })
}

/// What the Codex main thread tells each subagent: call the MCP tool with the scripted input.
fn codex_spawn_arguments(s: &Script) -> Value {
    json!({"message": format!("Call the {} tool once with the input {}.", s.flat_name(), s.input)})
}

/// `(namespace, name)` of the MCP tool when the request offers it as a function: in Codex's
/// namespace, under the flat name, under the tool's own name (an agent SDK: the OpenAI Agents
/// SDK offers an MCP tool so), or as `<alias>_<tool>` (OpenCode's name for it).
fn function_route(s: &Script, req: &Value) -> Option<(Option<String>, String)> {
    let ns = s.namespace();
    let flat = s.flat_name();
    let opencode = format!("{}_{}", s.alias, s.tool);
    for name in [s.tool.as_str(), opencode.as_str()] {
        let offered = req["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|t| t["type"] == "function" && t["name"] == name);
        if offered {
            return Some((None, name.to_string()));
        }
    }
    for t in req["tools"].as_array().into_iter().flatten() {
        if t["type"] == "namespace" && t["name"] == ns.as_str() {
            let has = t["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|f| f["name"] == s.tool.as_str());
            if has {
                return Some((Some(ns.clone()), s.tool.clone()));
            }
        }
        if t["type"] == "function" && t["name"] == flat.as_str() {
            return Some((None, flat.clone()));
        }
    }
    None
}

/// Whether the request offers Codex's custom `exec` tool (code mode): in `tools`, or in an
/// `additional_tools` input item, either directly or inside a namespace.
fn offers_exec(req: &Value) -> bool {
    fn has_exec(tools: &Value) -> bool {
        tools.as_array().into_iter().flatten().any(|t| {
            (t["type"] == "custom" && t["name"] == "exec")
                || (t["type"] == "namespace" && has_exec(&t["tools"]))
        })
    }
    has_exec(&req["tools"])
        || req["input"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|i| has_exec(&i["tools"]))
}

/// The JavaScript the "model" sends to Codex's `exec` tool: call the MCP tool through the
/// `tools` object (names normalized as `mcp__<alias>__<tool>`) and print what came back.
fn exec_program(s: &Script) -> String {
    format!(
        "const r = await tools.{}({});\ntext(JSON.stringify(r));\n",
        s.flat_name(),
        s.input
    )
}

fn response_object(id: &str, model: &str, status: &str, output: Vec<Value>) -> Value {
    let mut r = json!({"id": id, "object": "response", "created_at": 1_700_000_000u64,
        "status": status, "model": model, "output": output});
    if status == "completed" {
        r["usage"] = json!({"input_tokens": 10, "input_tokens_details": {"cached_tokens": 4},
            "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 15});
    }
    r
}

/// The Responses event sequence for one plan (`sequence_number` is added when sent).
fn responses_steps(s: &Script, plan: Plan, req: &Value) -> Vec<Step> {
    let model = req["model"].as_str().unwrap_or("gpt-scripted");
    let resp_id = s.id("resp");
    let mut steps = vec![Step::Event(json!({"type": "response.created",
        "response": response_object(&resp_id, model, "in_progress", vec![])}))];
    if let Plan::Warmup = plan {
        steps.push(Step::Event(json!({"type": "response.completed",
            "response": response_object(&resp_id, model, "completed", vec![])})));
        return steps;
    }
    steps.push(Step::Event(json!({"type": "response.in_progress",
        "response": response_object(&resp_id, model, "in_progress", vec![])})));
    let items = match plan {
        Plan::McpCall => {
            let (namespace, name) =
                function_route(s, req).unwrap_or((Some(s.namespace()), s.tool.clone()));
            vec![function_call_item(
                s,
                0,
                namespace,
                name,
                s.input.to_string(),
                &mut steps,
            )]
        }
        Plan::CodeExec => vec![custom_call_item(s, &mut steps)],
        // Codex's parallel subagents: the spawns side by side in one response.
        Plan::SpawnAgent => (0..CODEX_TEAM)
            .map(|i| {
                let args = codex_spawn_arguments(s).to_string();
                let ns = Some(CODEX_AGENTS_NAMESPACE.to_owned());
                function_call_item(s, i, ns, CODEX_SPAWN.to_owned(), args, &mut steps)
            })
            .collect(),
        Plan::WaitAgent => {
            let running = codex_team(s, req).map(|t| t.running).unwrap_or_default();
            let args = json!({"targets": running, "timeout_ms": 120_000}).to_string();
            let ns = Some(CODEX_AGENTS_NAMESPACE.to_owned());
            vec![function_call_item(
                s,
                0,
                ns,
                CODEX_WAIT.to_owned(),
                args,
                &mut steps,
            )]
        }
        _ => {
            let text = match plan {
                Plan::NoTool => NO_TOOL_TEXT,
                _ => FINAL_TEXT,
            };
            vec![message_item(s, text, &mut steps)]
        }
    };
    if matches!(plan, Plan::McpCall | Plan::CodeExec) {
        steps.push(Step::Hold(s.hold));
    }
    steps.push(Step::Event(json!({"type": "response.completed",
        "response": response_object(&resp_id, model, "completed", items)})));
    steps
}

/// One function call item at `output_index` `index`, streamed as the real API does.
fn function_call_item(
    s: &Script,
    index: usize,
    namespace: Option<String>,
    name: String,
    args: String,
    steps: &mut Vec<Step>,
) -> Value {
    let item_id = s.id("fc");
    let call_id = s.id("call");
    let mut item = json!({"type": "function_call", "id": item_id, "call_id": call_id,
        "name": name, "arguments": "", "status": "in_progress"});
    if let Some(ns) = namespace {
        item["namespace"] = json!(ns);
    }
    steps.push(Step::Event(
        json!({"type": "response.output_item.added", "output_index": index, "item": item.clone()}),
    ));
    steps.push(Step::Event(
        json!({"type": "response.function_call_arguments.delta",
        "item_id": item_id, "output_index": index, "delta": args}),
    ));
    steps.push(Step::Event(
        json!({"type": "response.function_call_arguments.done",
        "item_id": item_id, "output_index": index, "name": name, "arguments": args}),
    ));
    item["arguments"] = json!(args);
    item["status"] = json!("completed");
    steps.push(Step::Event(
        json!({"type": "response.output_item.done", "output_index": index, "item": item.clone()}),
    ));
    item
}

fn custom_call_item(s: &Script, steps: &mut Vec<Step>) -> Value {
    let item_id = s.id("ctc");
    let call_id = s.id("call");
    let program = exec_program(s);
    let mut item = json!({"type": "custom_tool_call", "id": item_id, "call_id": call_id,
        "name": "exec", "input": "", "status": "in_progress"});
    steps.push(Step::Event(
        json!({"type": "response.output_item.added", "output_index": 0, "item": item.clone()}),
    ));
    steps.push(Step::Event(
        json!({"type": "response.custom_tool_call_input.delta",
        "item_id": item_id, "output_index": 0, "delta": program}),
    ));
    steps.push(Step::Event(
        json!({"type": "response.custom_tool_call_input.done",
        "item_id": item_id, "output_index": 0, "input": program}),
    ));
    item["input"] = json!(program);
    item["status"] = json!("completed");
    steps.push(Step::Event(
        json!({"type": "response.output_item.done", "output_index": 0, "item": item.clone()}),
    ));
    item
}

fn message_item(s: &Script, text: &str, steps: &mut Vec<Step>) -> Value {
    let item_id = s.id("msg");
    let mut item = json!({"type": "message", "id": item_id, "role": "assistant",
        "status": "in_progress", "content": []});
    steps.push(Step::Event(
        json!({"type": "response.output_item.added", "output_index": 0, "item": item.clone()}),
    ));
    let part = json!({"type": "output_text", "text": "", "annotations": []});
    steps.push(Step::Event(
        json!({"type": "response.content_part.added", "item_id": item_id,
        "output_index": 0, "content_index": 0, "part": part}),
    ));
    steps.push(Step::Event(
        json!({"type": "response.output_text.delta", "item_id": item_id,
        "output_index": 0, "content_index": 0, "delta": text}),
    ));
    steps.push(Step::Event(
        json!({"type": "response.output_text.done", "item_id": item_id,
        "output_index": 0, "content_index": 0, "text": text}),
    ));
    let part = json!({"type": "output_text", "text": text, "annotations": []});
    steps.push(Step::Event(
        json!({"type": "response.content_part.done", "item_id": item_id,
        "output_index": 0, "content_index": 0, "part": part.clone()}),
    ));
    item["status"] = json!("completed");
    item["content"] = json!([part]);
    steps.push(Step::Event(
        json!({"type": "response.output_item.done", "output_index": 0, "item": item.clone()}),
    ));
    item
}

/// Numbers Responses events in order, as the real API does.
fn number(steps: &mut [Step]) {
    let mut n = 0u64;
    for step in steps {
        if let Step::Event(e) = step {
            if e["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("response."))
            {
                e["sequence_number"] = json!(n);
                n += 1;
            }
        }
    }
}

async fn responses_http(s: Arc<Script>, path: &str, body: &[u8]) -> Response<Body> {
    let Ok(req) = serde_json::from_slice::<Value>(body) else {
        s.log(json!({"method": "POST", "path": path, "answer": "bad_json"}));
        return json_response(
            StatusCode::BAD_REQUEST,
            &json!({"error": {"type": "invalid_request_error", "message": "request body is not JSON"}}),
        );
    };
    let plan = responses_plan(&s, &req);
    let mut steps = responses_steps(&s, plan, &req);
    if req["stream"] != true {
        // A non-streaming create (the OpenAI Agents SDK's `Runner.run`): the whole response as
        // one JSON body, the `response.completed` event's response, after the same hold.
        let hold: Duration = steps
            .iter()
            .map(|st| match st {
                Step::Hold(d) => *d,
                Step::Event(_) => Duration::ZERO,
            })
            .sum();
        let whole = steps
            .iter()
            .rev()
            .find_map(|st| match st {
                Step::Event(ev) if ev["type"] == "response.completed" => {
                    Some(ev["response"].clone())
                }
                _ => None,
            })
            .unwrap_or(Value::Null);
        s.log(json!({"method": "POST", "path": path, "answer": plan.word(), "stream": false}));
        tokio::time::sleep(hold).await;
        return json_response(StatusCode::OK, &whole);
    }
    number(&mut steps);
    stream_sse(s, "POST", path, plan, steps, None)
}

/// Streams the steps as SSE, flushing each event as it is produced.
fn stream_sse(
    s: Arc<Script>,
    method: &str,
    path: &str,
    plan: Plan,
    steps: Vec<Step>,
    from: Option<Value>,
) -> Response<Body> {
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    let mut line = json!({"method": method, "path": path, "answer": plan.word()});
    if let Some(from) = from {
        line["from"] = from;
    }
    tokio::spawn(async move {
        let mut types = Vec::new();
        let mut held = 0u64;
        for step in steps {
            match step {
                Step::Hold(d) => {
                    held = d.as_millis() as u64;
                    tokio::time::sleep(d).await;
                }
                Step::Event(e) => {
                    types.push(e["type"].clone());
                    if tx
                        .send(Bytes::from(testkit::sse::record(&e)))
                        .await
                        .is_err()
                    {
                        // The client went away; the rest of the script has nobody to go to.
                        break;
                    }
                }
            }
        }
        line["events"] = json!(types);
        line["held_ms"] = json!(held);
        s.log(line);
    });
    let body = StreamBody::new(stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    }));
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(BodyExt::boxed(body))
        .expect("static response parts are valid")
}

// ---------------------------------------------------------------- WebSocket

/// Why a WebSocket connection ended early.
#[derive(Debug, thiserror::Error)]
enum WsError {
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
    #[error("protocol: {0}")]
    Protocol(&'static str),
    #[error("permessage-deflate: {0}")]
    Deflate(String),
}

/// A minimal server side of RFC 6455 with permessage-deflate (RFC 7692, context takeover
/// both ways), enough for Codex. tungstenite 0.30 has no permessage-deflate, and Codex
/// offers it, as the real API accepts it: serving it lets the relay's observer meet real
/// compressed frames.
struct WsConn<S> {
    io: S,
    inflate: Option<Decompress>,
    deflate: Option<Compress>,
}

/// A whole message (fragments joined, inflated).
enum WsMessage {
    Text(Vec<u8>),
    Binary,
    Close,
}

const MAX_MESSAGE: usize = 64 << 20;

impl<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin> WsConn<S> {
    async fn read_frame(&mut self) -> Result<Option<(bool, bool, u8, Vec<u8>)>, WsError> {
        let mut head = [0u8; 2];
        match self.io.read_exact(&mut head).await {
            Ok(_) => {}
            // Codex exits without a close frame.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e.into()),
        }
        let fin = head[0] & 0x80 != 0;
        let rsv1 = head[0] & 0x40 != 0;
        let opcode = head[0] & 0x0f;
        let masked = head[1] & 0x80 != 0;
        let mut len = u64::from(head[1] & 0x7f);
        if len == 126 {
            len = u64::from(self.io.read_u16().await?);
        } else if len == 127 {
            len = self.io.read_u64().await?;
        }
        if !masked {
            return Err(WsError::Protocol("client frame is not masked"));
        }
        if len > MAX_MESSAGE as u64 {
            return Err(WsError::Protocol("frame too large"));
        }
        let mut mask = [0u8; 4];
        self.io.read_exact(&mut mask).await?;
        let mut payload = vec![0u8; len as usize];
        self.io.read_exact(&mut payload).await?;
        for (i, b) in payload.iter_mut().enumerate() {
            *b ^= mask[i % 4];
        }
        Ok(Some((fin, rsv1, opcode, payload)))
    }

    async fn read_message(&mut self) -> Result<Option<WsMessage>, WsError> {
        let mut data = Vec::new();
        let mut first: Option<(u8, bool)> = None;
        loop {
            let Some((fin, rsv1, opcode, payload)) = self.read_frame().await? else {
                return Ok(None);
            };
            match opcode {
                0x8 => {
                    self.write_frame(0x8, &payload, false).await?;
                    return Ok(Some(WsMessage::Close));
                }
                0x9 => {
                    self.write_frame(0xA, &payload, false).await?;
                    continue;
                }
                0xA => continue,
                0x0 if first.is_none() => {
                    return Err(WsError::Protocol("continuation without a message"))
                }
                0x0 => {}
                0x1 | 0x2 if first.is_some() => {
                    return Err(WsError::Protocol("new message inside a fragmented one"))
                }
                0x1 | 0x2 => first = Some((opcode, rsv1)),
                _ => return Err(WsError::Protocol("unknown opcode")),
            }
            data.extend_from_slice(&payload);
            if data.len() > MAX_MESSAGE {
                return Err(WsError::Protocol("message too large"));
            }
            if fin {
                break;
            }
        }
        let (opcode, compressed) = first.expect("a data frame was read");
        if compressed {
            let Some(inflate) = self.inflate.as_mut() else {
                return Err(WsError::Protocol(
                    "compressed frame without permessage-deflate",
                ));
            };
            data.extend_from_slice(&[0, 0, 0xff, 0xff]);
            data = inflate_all(inflate, &data)?;
        }
        Ok(Some(if opcode == 0x1 {
            WsMessage::Text(data)
        } else {
            WsMessage::Binary
        }))
    }

    async fn write_frame(&mut self, opcode: u8, payload: &[u8], rsv1: bool) -> Result<(), WsError> {
        let out = testkit::ws::frame(opcode, payload, rsv1, None);
        self.io.write_all(&out).await?;
        self.io.flush().await?;
        Ok(())
    }

    async fn send_text(&mut self, text: &str) -> Result<(), WsError> {
        match self.deflate.as_mut() {
            Some(deflate) => {
                let mut data = deflate_all(deflate, text.as_bytes())?;
                // RFC 7692 §7.2.1: drop the sync flush's empty stored block trailer.
                if data.ends_with(&[0, 0, 0xff, 0xff]) {
                    data.truncate(data.len() - 4);
                }
                self.write_frame(0x1, &data, true).await
            }
            None => self.write_frame(0x1, text.as_bytes(), false).await,
        }
    }
}

fn inflate_all(d: &mut Decompress, input: &[u8]) -> Result<Vec<u8>, WsError> {
    let mut out = Vec::with_capacity(input.len() * 4 + 64);
    let mut pos = 0usize;
    loop {
        if out.capacity() - out.len() < 1024 {
            out.reserve(out.capacity().max(4096));
        }
        let (before_in, before_out) = (d.total_in(), out.len());
        let status = d
            .decompress_vec(&input[pos..], &mut out, FlushDecompress::Sync)
            .map_err(|e| WsError::Deflate(e.to_string()))?;
        pos += (d.total_in() - before_in) as usize;
        if d.total_in() == before_in && out.len() == before_out && pos < input.len() {
            // Room to write and input left, yet nothing moved: never spin on it.
            return Err(WsError::Deflate("inflate made no progress".into()));
        }
        if out.len() > MAX_MESSAGE {
            return Err(WsError::Protocol("inflated message too large"));
        }
        let room = out.capacity() > out.len();
        match status {
            Status::StreamEnd => return Ok(out),
            _ if pos >= input.len() && room => return Ok(out),
            Status::BufError if pos >= input.len() => return Ok(out),
            _ => {}
        }
    }
}

/// The kit's sync-flush deflate (its `00 00 ff ff` tail kept), its failure a [`WsError`].
fn deflate_all(c: &mut Compress, input: &[u8]) -> Result<Vec<u8>, WsError> {
    testkit::ws::deflate_sync(c, input).map_err(WsError::Deflate)
}

fn is_upgrade(headers: &HeaderMap) -> bool {
    headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

fn upgrade(s: Arc<Script>, req: Request<Incoming>, path: String) -> Response<Body> {
    let Some(key) = req.headers().get(header::SEC_WEBSOCKET_KEY).cloned() else {
        s.log(json!({"method": "GET", "path": path, "answer": "bad_upgrade"}));
        return full(
            StatusCode::BAD_REQUEST,
            "text/plain",
            "missing Sec-WebSocket-Key",
        );
    };
    let offered = req
        .headers()
        .get_all(header::SEC_WEBSOCKET_EXTENSIONS)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| {
            v.split(',')
                .any(|e| e.trim().starts_with("permessage-deflate"))
        });
    let deflate = offered && s.deflate;
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    let mut resp = Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::UPGRADE, "websocket")
        .header(header::CONNECTION, "Upgrade")
        .header(header::SEC_WEBSOCKET_ACCEPT, accept);
    if deflate {
        resp = resp.header(header::SEC_WEBSOCKET_EXTENSIONS, "permessage-deflate");
    }
    s.log(json!({"method": "GET", "path": path, "answer": "websocket", "deflate": deflate}));
    tokio::spawn(async move {
        let upgraded = match hyper::upgrade::on(req).await {
            Ok(u) => u,
            Err(e) => {
                s.log(json!({"ws": path, "error": format!("upgrade failed: {e}")}));
                return;
            }
        };
        let conn = WsConn {
            io: TokioIo::new(upgraded),
            inflate: deflate.then(|| Decompress::new(false)),
            deflate: deflate.then(|| Compress::new(Compression::fast(), false)),
        };
        let end = serve_ws(&s, conn, &path).await;
        s.log(json!({"ws": path, "end": end}));
    });
    resp.body(Full::new(Bytes::new()).boxed())
        .expect("static response parts are valid")
}

/// What a request says about trace context, without a value: the W3C `traceparent` shape
/// with its version and flags spelled out and its ids reduced to their length, or `other`
/// with the length.
fn traceparent_shape(v: &[u8]) -> String {
    let hex = |b: &[u8]| b.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'));
    let parts: Vec<&[u8]> = v.split(|c| *c == b'-').collect();
    match parts.as_slice() {
        [ver, trace, span, flags, rest @ ..]
            if ver.len() == 2
                && trace.len() == 32
                && span.len() == 16
                && flags.len() == 2
                && hex(ver)
                && hex(trace)
                && hex(span)
                && hex(flags) =>
        {
            format!(
                "{}-<32 hex>-<16 hex>-{}{}",
                String::from_utf8_lossy(ver),
                String::from_utf8_lossy(flags),
                if rest.is_empty() { "" } else { "-<more>" }
            )
        }
        _ => format!("other ({} bytes)", v.len()),
    }
}

/// The keys of `x-codex-turn-metadata` (a JSON object in a string), never its values.
fn turn_metadata_keys(v: &[u8]) -> Value {
    match serde_json::from_slice::<Value>(v) {
        Ok(Value::Object(m)) => json!(m.keys().collect::<Vec<_>>()),
        _ => json!("not a JSON object"),
    }
}

/// The `seen` log line of an HTTP request: header names, the trace context's shape (one
/// entry per `traceparent` header) and the turn metadata's keys.
fn seen_line(method: &Method, path: &str, headers: &HeaderMap) -> Value {
    let mut names: Vec<&str> = headers.keys().map(|k| k.as_str()).collect();
    names.sort_unstable();
    let traceparent: Vec<String> = headers
        .get_all("traceparent")
        .iter()
        .map(|v| traceparent_shape(v.as_bytes()))
        .collect();
    let mut line = json!({"seen": method.as_str(), "path": path, "headers": names,
        "traceparent": traceparent});
    if let Some(v) = headers.get("x-codex-turn-metadata") {
        line["turn_metadata_keys"] = turn_metadata_keys(v.as_bytes());
    }
    line
}

/// The same for a `response.create` frame's `client_metadata`: its keys, the shape of the
/// trace context Codex puts there, and the turn metadata's keys.
fn client_metadata_facts(req: &Value) -> Value {
    let Some(meta) = req["client_metadata"].as_object() else {
        return json!(null);
    };
    let mut facts = json!({"keys": meta.keys().collect::<Vec<_>>()});
    if let Some(tp) = meta
        .get("ws_request_header_traceparent")
        .and_then(Value::as_str)
    {
        facts["traceparent"] = json!(traceparent_shape(tp.as_bytes()));
    }
    if let Some(tm) = meta.get("x-codex-turn-metadata").and_then(Value::as_str) {
        facts["turn_metadata_keys"] = turn_metadata_keys(tm.as_bytes());
    }
    facts
}

/// Serves `response.create` frames one at a time until the client goes away. Returns a fixed
/// word for how the connection ended.
async fn serve_ws<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    s: &Script,
    mut conn: WsConn<S>,
    path: &str,
) -> String {
    loop {
        let msg = match conn.read_message().await {
            Ok(Some(m)) => m,
            Ok(None) => return "eof".into(),
            Err(e) => return format!("error: {e}"),
        };
        let text = match msg {
            WsMessage::Close => return "close".into(),
            WsMessage::Binary => {
                s.log(json!({"ws": path, "frame": "binary", "answer": "ignored"}));
                continue;
            }
            WsMessage::Text(t) => t,
        };
        let Ok(req) = serde_json::from_slice::<Value>(&text) else {
            s.log(json!({"ws": path, "frame": "bad_json"}));
            continue;
        };
        let frame = req["type"].as_str().unwrap_or("untyped").to_string();
        if frame != "response.create" {
            // e.g. `response.processed` acknowledgements: nothing to answer.
            s.log(json!({"ws": path, "frame": frame, "answer": "ignored"}));
            continue;
        }
        let plan = responses_plan(s, &req);
        let mut steps = responses_steps(s, plan, &req);
        number(&mut steps);
        let mut types = Vec::new();
        let mut held = 0u64;
        for step in steps {
            match step {
                Step::Hold(d) => {
                    held = d.as_millis() as u64;
                    tokio::time::sleep(d).await;
                }
                Step::Event(e) => {
                    types.push(e["type"].clone());
                    if let Err(err) = conn.send_text(&e.to_string()).await {
                        return format!("error: {err}");
                    }
                }
            }
        }
        s.log(json!({"ws": path, "frame": frame, "answer": plan.word(),
            "continues": req["previous_response_id"].is_string(), "events": types,
            "held_ms": held, "client_metadata": client_metadata_facts(&req)}));
    }
}

// ---------------------------------------------------------------- routing

/// The path without its query, reduced to a template (ids never appear in these paths).
fn route(s: Arc<Script>, req: Request<Incoming>) -> RouteFuture {
    Box::pin(async move {
        let method = req.method().clone();
        let path = req.uri().path().to_string();
        s.log(seen_line(&method, &path, req.headers()));
        if method == Method::GET && path.ends_with("/responses") && is_upgrade(req.headers()) {
            return Ok(upgrade(s, req, path));
        }
        let from = FromHeaders::of(req.headers());
        let content_encoding = req
            .headers()
            .get(header::CONTENT_ENCODING)
            .and_then(|v| v.to_str().ok())
            .map(str::to_ascii_lowercase);
        let body = match req.into_body().collect().await {
            Ok(b) => b.to_bytes(),
            Err(_) => {
                s.log(json!({"method": method.as_str(), "path": path, "answer": "body_error"}));
                return Ok(full(
                    StatusCode::BAD_REQUEST,
                    "text/plain",
                    "body read failed",
                ));
            }
        };
        if content_encoding.as_deref().is_some_and(|e| e != "identity") {
            s.log(json!({"method": method.as_str(), "path": path,
                "answer": "unsupported_content_encoding"}));
            return Ok(full(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "text/plain",
                "compressed request bodies are not supported by the scripted upstream",
            ));
        }
        let resp = match (&method, path.as_str()) {
            (&Method::HEAD, "/api/hello") => {
                s.log(json!({"method": "HEAD", "path": path, "answer": "hello"}));
                full(StatusCode::OK, "text/plain", "")
            }
            (&Method::POST, p) if p.ends_with("/v1/messages/count_tokens") => {
                s.log(json!({"method": "POST", "path": path, "answer": "count_tokens"}));
                json_response(StatusCode::OK, &json!({"input_tokens": 10}))
            }
            (&Method::POST, p) if p.ends_with("/v1/messages") => {
                messages(s.clone(), &path, from, &body).await
            }
            (&Method::POST, p) if p.ends_with("/responses") => {
                responses_http(s.clone(), &path, &body).await
            }
            (&Method::GET, p) if p.ends_with("/models") => {
                s.log(json!({"method": "GET", "path": path, "answer": "models"}));
                // Anthropic's list shape and Codex's `models` key, both empty: each host
                // falls back to its bundled catalog.
                json_response(
                    StatusCode::OK,
                    &json!({"data": [], "has_more": false, "first_id": null, "last_id": null,
                        "object": "list", "models": []}),
                )
            }
            _ => {
                s.log(json!({"method": method.as_str(), "path": path, "answer": "not_found"}));
                full(StatusCode::NOT_FOUND, "text/plain", "not scripted")
            }
        };
        Ok(resp)
    })
}

type RouteFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Response<Body>, Infallible>> + Send>>;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("scripted_upstream: error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    if !args.listen.ip().is_loopback() {
        return Err(format!(
            "--listen {} is not a loopback address; the scripted upstream serves loopback only",
            args.listen
        ));
    }
    let input: Value =
        serde_json::from_str(&args.input).map_err(|e| format!("--input is not JSON: {e}"))?;
    if !input.is_object() {
        return Err("--input must be a JSON object".into());
    }
    let log = match &args.log {
        Some(p) => Some(Mutex::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| format!("--log {}: {e}", p.display()))?,
        )),
        None => None,
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let script = Arc::new(Script {
        alias: args.alias,
        tool: args.tool,
        input,
        hold: Duration::from_millis(args.hold_ms),
        deflate: !args.no_ws_deflate,
        log,
        started: Instant::now(),
        ids: AtomicU64::new(1),
        prefix: format!("{:012x}", (nanos as u64) & 0xffff_ffff_ffff),
        subagent: args.subagent,
    });
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("bind {}: {e}", args.listen))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("local address: {e}"))?;
    println!("listening on {addr}");
    // The caller reads the address from a pipe; make sure it gets there now.
    let _ = std::io::stdout().flush();
    loop {
        let (tcp, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("scripted_upstream: accept: {e}");
                continue;
            }
        };
        let s = script.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| route(s.clone(), req));
            // A connection error (a client that went away) ends only that connection.
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tcp), svc)
                .with_upgrades()
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_keeps_the_shape_of_trace_context_not_its_ids() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(traceparent_shape(tp.as_bytes()), "00-<32 hex>-<16 hex>-01");
        assert_eq!(
            traceparent_shape(format!("01-{}-x", &tp[3..]).as_bytes()),
            "01-<32 hex>-<16 hex>-01-<more>"
        );
        assert_eq!(traceparent_shape(b"secret"), "other (6 bytes)");
        let mut h = HeaderMap::new();
        h.insert("traceparent", tp.parse().unwrap());
        h.insert(
            "x-codex-turn-metadata",
            r#"{"turn_id":"secret-turn"}"#.parse().unwrap(),
        );
        let line = seen_line(&Method::POST, "/v1/responses", &h).to_string();
        assert!(
            !line.contains("4bf92f") && !line.contains("secret"),
            "{line}"
        );
        assert!(line.contains("turn_id") && line.contains("x-codex-turn-metadata"));
        let frame = json!({"client_metadata": {"ws_request_header_traceparent": tp,
            "x-codex-turn-metadata": r#"{"turn_id":"secret-turn"}"#}});
        let facts = client_metadata_facts(&frame).to_string();
        assert!(
            !facts.contains("4bf92f") && !facts.contains("secret"),
            "{facts}"
        );
        assert!(facts.contains("00-<32 hex>-<16 hex>-01"), "{facts}");
    }

    fn script(hold_ms: u64) -> Script {
        Script {
            alias: "probe".into(),
            tool: "echo".into(),
            input: json!({"text": "hi"}),
            hold: Duration::from_millis(hold_ms),
            deflate: true,
            log: None,
            started: Instant::now(),
            ids: AtomicU64::new(1),
            prefix: "test".into(),
            subagent: None,
        }
    }

    fn events(steps: &[Step]) -> Vec<Value> {
        steps
            .iter()
            .filter_map(|s| match s {
                Step::Event(e) => Some(e.clone()),
                Step::Hold(_) => None,
            })
            .collect()
    }

    #[test]
    fn claude_with_the_mcp_tool_listed_calls_it_directly() {
        // `Agent` offered too: without --subagent the script never spawns one.
        let s = script(0);
        let req = json!({"tools": [{"name": "Bash"}, {"name": "Agent"}, {"name": "mcp__probe__echo"}],
            "messages": [{"role": "user", "content": "go"}]});
        assert_eq!(messages_plan(&s, &req, false).word(), "mcp_call");
    }

    #[test]
    fn claude_with_deferred_mcp_tools_goes_through_tool_search_first() {
        let s = script(0);
        let first = json!({"tools": [{"name": "ToolSearch"}],
            "messages": [{"role": "user", "content": "go"}]});
        assert_eq!(messages_plan(&s, &first, false).word(), "tool_search");
        let (steps, _) = messages_steps(&s, Plan::ToolSearch, "m");
        let ev = events(&steps);
        assert_eq!(ev[1]["content_block"]["name"], "ToolSearch");
        assert_eq!(
            ev[2]["delta"]["partial_json"],
            r#"{"query":"select:mcp__probe__echo"}"#
        );
        let id = ev[1]["content_block"]["id"].clone();
        let second = json!({"tools": [{"name": "ToolSearch"}], "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "ToolSearch"}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id}]}]});
        assert_eq!(messages_plan(&s, &second, false).word(), "mcp_call");
    }

    #[test]
    fn claude_gets_the_final_text_once_the_mcp_result_is_back() {
        let s = script(0);
        let req = json!({"tools": [{"name": "mcp__probe__echo"}], "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "mcp__probe__echo"}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]}]});
        assert_eq!(messages_plan(&s, &req, false).word(), "final_text");
        let (steps, whole) = messages_steps(&s, Plan::Final, "m");
        let ev = events(&steps);
        assert_eq!(ev[2]["delta"]["text"], FINAL_TEXT);
        assert_eq!(ev.last().unwrap()["type"], "message_stop");
        assert_eq!(whole["stop_reason"], "end_turn");
    }

    #[test]
    fn claude_side_requests_without_tools_get_text() {
        let s = script(0);
        let req = json!({"messages": [{"role": "user", "content": "title?"}]});
        assert_eq!(messages_plan(&s, &req, false).word(), "side_text");
    }

    fn subagent_script(mode: Subagent) -> Script {
        Script {
            subagent: Some(mode),
            ..script(0)
        }
    }

    #[test]
    fn subagent_mode_main_thread_calls_the_tool_then_spawns_a_general_purpose_agent() {
        for (mode, background) in [(Subagent::Blocking, false), (Subagent::Background, true)] {
            let s = subagent_script(mode);
            let first = json!({"tools": [{"name": "Agent"}, {"name": "ToolSearch"}],
                "messages": [{"role": "user", "content": "go"}]});
            assert_eq!(messages_plan(&s, &first, false).word(), "tool_search");
            let after_mcp = json!({"tools": [{"name": "Agent"}, {"name": "ToolSearch"}],
                "messages": [{"role": "user", "content": "go"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "mcp__probe__echo"}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]}]});
            assert_eq!(messages_plan(&s, &after_mcp, false).word(), "spawn_agent");
            let (steps, whole) = messages_steps(&s, Plan::SpawnAgent, "m");
            let ev = events(&steps);
            assert_eq!(ev[1]["content_block"]["name"], "Agent");
            let input: Value =
                serde_json::from_str(ev[2]["delta"]["partial_json"].as_str().unwrap()).unwrap();
            assert_eq!(input["subagent_type"], "general-purpose");
            assert_eq!(input["run_in_background"], background);
            assert!(input["prompt"]
                .as_str()
                .unwrap()
                .contains("mcp__probe__echo"));
            assert!(input["description"].is_string());
            assert_eq!(whole["stop_reason"], "tool_use");
        }
    }

    #[test]
    fn parallel_mode_spawns_two_blocking_agents_from_one_response() {
        let s = subagent_script(Subagent::Parallel);
        let (steps, whole) = messages_steps(&s, Plan::SpawnAgent, "m");
        let ev = events(&steps);
        let starts: Vec<&Value> = ev
            .iter()
            .filter(|e| e["type"] == "content_block_start")
            .collect();
        assert_eq!(starts.len(), 2);
        assert!(starts.iter().all(|e| e["content_block"]["name"] == "Agent"));
        assert_ne!(
            starts[0]["content_block"]["id"],
            starts[1]["content_block"]["id"]
        );
        assert_eq!(whole["content"].as_array().unwrap().len(), 2);
        let input: Value =
            serde_json::from_str(ev[2]["delta"]["partial_json"].as_str().unwrap()).unwrap();
        assert_eq!(input["run_in_background"], false);
        // The one MCP call of each subagent is a single block, as before.
        let (steps, _) = messages_steps(&s, Plan::McpCall, "m");
        let calls = events(&steps)
            .iter()
            .filter(|e| e["type"] == "content_block_start")
            .count();
        assert_eq!(calls, 1);
    }

    #[test]
    fn subagent_mode_subagent_requests_go_to_the_mcp_tool_and_end() {
        let s = subagent_script(Subagent::Blocking);
        // The subagent is offered Agent too; the header, not the tool list, tells them apart.
        let req = json!({"tools": [{"name": "Agent"}, {"name": "ToolSearch"}],
            "messages": [{"role": "user", "content": "Call the tool"}]});
        assert_eq!(messages_plan(&s, &req, true).word(), "tool_search");
        let req = json!({"tools": [{"name": "Agent"}, {"name": "mcp__probe__echo"}],
            "messages": [{"role": "user", "content": "Call the tool"}]});
        assert_eq!(messages_plan(&s, &req, true).word(), "mcp_call");
        let done = json!({"tools": [{"name": "Agent"}, {"name": "mcp__probe__echo"}],
            "messages": [{"role": "user", "content": "Call the tool"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_2", "name": "mcp__probe__echo"}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2"}]}]});
        assert_eq!(messages_plan(&s, &done, true).word(), "final_text");
    }

    #[test]
    fn subagent_mode_main_thread_ends_once_it_has_spawned() {
        let s = subagent_script(Subagent::Background);
        let spawned = json!({"role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "Agent"}]});
        // The Agent tool_result, and a later turn without one (a background agent's
        // completion notice): both get the final text, never a second spawn.
        for last in [
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]}),
            json!({"role": "user", "content": [{"type": "text", "text": "agent finished"}]}),
        ] {
            let req = json!({"tools": [{"name": "Agent"}],
                "messages": [{"role": "user", "content": "go"}, spawned.clone(), last]});
            assert_eq!(messages_plan(&s, &req, false).word(), "final_text");
        }
    }

    #[test]
    fn header_facts_carry_names_never_values() {
        let mut h = HeaderMap::new();
        h.insert(
            "x-claude-code-session-id",
            "secret-session".parse().unwrap(),
        );
        h.insert("x-claude-code-agent-id", "secret-agent".parse().unwrap());
        h.insert("x-api-key", "secret-key".parse().unwrap());
        let f = FromHeaders::of(&h);
        assert!(f.agent);
        assert_eq!(
            f.claude_headers,
            ["x-claude-code-agent-id", "x-claude-code-session-id"]
        );
        let logged = json!({"agent": f.agent, "headers": f.claude_headers}).to_string();
        assert!(!logged.contains("secret"));
        assert!(!FromHeaders::of(&HeaderMap::new()).agent);
    }

    #[test]
    fn the_hold_sits_between_the_complete_tool_call_and_the_terminal_events() {
        let s = script(1500);
        let (steps, _) = messages_steps(&s, Plan::McpCall, "m");
        let hold = steps
            .iter()
            .position(|s| matches!(s, Step::Hold(d) if d.as_millis() == 1500))
            .expect("a hold step");
        let Step::Event(before) = &steps[hold - 1] else {
            panic!("an event before the hold")
        };
        assert_eq!(before["type"], "content_block_stop");
        let Step::Event(after) = &steps[hold + 1] else {
            panic!("an event after the hold")
        };
        assert_eq!(after["delta"]["stop_reason"], "tool_use");

        let req = json!({"tools": [{"type": "namespace", "name": "mcp__probe",
            "tools": [{"type": "function", "name": "echo"}]}], "input": []});
        let steps = responses_steps(&s, Plan::McpCall, &req);
        let hold = steps
            .iter()
            .position(|s| matches!(s, Step::Hold(_)))
            .expect("a hold step");
        let Step::Event(before) = &steps[hold - 1] else {
            panic!("an event before the hold")
        };
        assert_eq!(before["type"], "response.output_item.done");
    }

    #[test]
    fn responses_function_mode_calls_the_namespaced_tool() {
        let s = script(0);
        let req = json!({"model": "gpt-5", "tools": [{"type": "namespace", "name": "mcp__probe",
            "tools": [{"type": "function", "name": "echo"}]}], "input": [{"type": "message"}]});
        assert_eq!(responses_plan(&s, &req).word(), "mcp_call");
        let mut steps = responses_steps(&s, Plan::McpCall, &req);
        number(&mut steps);
        let ev = events(&steps);
        let done = ev
            .iter()
            .find(|e| e["type"] == "response.output_item.done")
            .unwrap();
        assert_eq!(done["item"]["type"], "function_call");
        assert_eq!(done["item"]["namespace"], "mcp__probe");
        assert_eq!(done["item"]["name"], "echo");
        assert_eq!(done["item"]["arguments"], r#"{"text":"hi"}"#);
        let seq: Vec<u64> = ev
            .iter()
            .map(|e| e["sequence_number"].as_u64().unwrap())
            .collect();
        assert_eq!(seq, (0..ev.len() as u64).collect::<Vec<_>>());
    }

    /// An agent SDK offers the MCP tool under its own name: the call names it so, with no
    /// namespace (the OpenAI Agents SDK runs the function it offered by that name).
    #[test]
    fn responses_calls_a_function_offered_under_the_tools_own_name_by_that_name() {
        let s = script(0);
        let req = json!({"model": "gpt-5", "stream": true,
            "tools": [{"type": "function", "name": "echo", "parameters": {"type": "object"}}],
            "input": [{"role": "user", "content": "hi"}]});
        assert_eq!(responses_plan(&s, &req).word(), "mcp_call");
        let steps = responses_steps(&s, Plan::McpCall, &req);
        let ev = events(&steps);
        let done = ev
            .iter()
            .find(|e| e["type"] == "response.output_item.done")
            .unwrap();
        assert_eq!(done["item"]["name"], "echo");
        assert!(done["item"].get("namespace").is_none(), "{done}");
    }

    #[test]
    fn responses_code_mode_calls_exec_with_javascript_naming_the_tool() {
        let s = script(0);
        let req = json!({"input": [{"type": "additional_tools", "tools": [{"type": "namespace",
            "name": "functions", "tools": [{"type": "custom", "name": "exec"}]}]},
            {"type": "message"}]});
        assert_eq!(responses_plan(&s, &req).word(), "code_exec");
        let ev = events(&responses_steps(&s, Plan::CodeExec, &req));
        let done = ev
            .iter()
            .find(|e| e["type"] == "response.output_item.done")
            .unwrap();
        assert_eq!(done["item"]["type"], "custom_tool_call");
        assert_eq!(done["item"]["name"], "exec");
        let program = done["item"]["input"].as_str().unwrap();
        assert!(program.contains(r#"await tools.mcp__probe__echo({"text":"hi"})"#));
    }

    #[test]
    fn codex_parallel_mode_spawns_two_agents_then_waits_until_both_finished() {
        let s = subagent_script(Subagent::Parallel);
        let tools = json!([{"type": "namespace", "name": "multi_agent_v1",
            "tools": [{"type": "function", "name": "spawn_agent"},
                      {"type": "function", "name": "wait_agent"}]},
            {"type": "namespace", "name": "mcp__probe",
             "tools": [{"type": "function", "name": "echo"}]}]);
        let spawn = |c: &str| json!({"type": "function_call", "name": "spawn_agent", "call_id": c});
        let wait = |c: &str| json!({"type": "function_call", "name": "wait_agent", "call_id": c});
        let out = |c: &str, o: Value| {
            json!({"type": "function_call_output", "call_id": c,
            "output": o.to_string()})
        };
        let mut input = vec![json!({"type": "message"})];
        let req = |input: &Vec<Value>| json!({"tools": tools, "input": input});

        // First: two spawn_agent calls side by side in one response.
        assert_eq!(responses_plan(&s, &req(&input)).word(), "spawn_agent");
        let ev = events(&responses_steps(&s, Plan::SpawnAgent, &req(&input)));
        let done: Vec<&Value> = ev
            .iter()
            .filter(|e| e["type"] == "response.output_item.done")
            .collect();
        assert_eq!(done.len(), 2);
        for (i, d) in done.iter().enumerate() {
            assert_eq!(d["output_index"], i);
            assert_eq!(d["item"]["namespace"], "multi_agent_v1");
            assert_eq!(d["item"]["name"], "spawn_agent");
            let args: Value =
                serde_json::from_str(d["item"]["arguments"].as_str().unwrap()).unwrap();
            assert!(args["message"]
                .as_str()
                .unwrap()
                .contains("mcp__probe__echo"));
        }
        assert_eq!(
            ev.last().unwrap()["response"]["output"]
                .as_array()
                .unwrap()
                .len(),
            2
        );

        // The agent ids back: wait on both.
        input.extend([
            spawn("c1"),
            spawn("c2"),
            out("c1", json!({"agent_id": "a1"})),
            out("c2", json!({"agent_id": "a2"})),
        ]);
        assert_eq!(responses_plan(&s, &req(&input)).word(), "wait_agent");
        let ev = events(&responses_steps(&s, Plan::WaitAgent, &req(&input)));
        let d = ev
            .iter()
            .find(|e| e["type"] == "response.output_item.done")
            .unwrap();
        assert_eq!(d["item"]["name"], "wait_agent");
        let args: Value = serde_json::from_str(d["item"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(args["targets"], json!(["a1", "a2"]));

        // The first finished: wait on the other; both finished: the final text.
        input.extend([
            wait("w1"),
            out("w1", json!({"status": {"a1": {"completed": "x"}}})),
        ]);
        assert_eq!(
            codex_team(&s, &req(&input)).unwrap().running,
            vec!["a2".to_string()]
        );
        assert_eq!(responses_plan(&s, &req(&input)).word(), "wait_agent");
        input.extend([
            wait("w2"),
            out("w2", json!({"status": {"a2": {"completed": "y"}}})),
        ]);
        assert_eq!(responses_plan(&s, &req(&input)).word(), "final_text");

        // A subagent's request (marked in client_metadata) goes through the MCP loop, and
        // without --subagent parallel the main thread does too.
        let sub = json!({"tools": tools, "input": [{"type": "message"}],
            "client_metadata": {"x-openai-subagent": "collab_spawn"}});
        assert_eq!(responses_plan(&s, &sub).word(), "mcp_call");
        assert_eq!(
            responses_plan(&script(0), &req(&vec![json!({"type": "message"})])).word(),
            "mcp_call"
        );
        // A WebSocket delta (only the outputs, no spawn calls) never spawns again.
        let delta = json!({"tools": tools, "previous_response_id": "resp_1",
            "input": [out("c1", json!({"agent_id": "a1"}))]});
        assert_eq!(responses_plan(&s, &delta).word(), "final_text");
    }

    #[test]
    fn responses_warmup_and_continuations() {
        let s = script(0);
        let warm = json!({"generate": false, "input": []});
        assert_eq!(responses_plan(&s, &warm).word(), "warmup");
        let ev = events(&responses_steps(&s, Plan::Warmup, &warm));
        assert_eq!(ev.len(), 2);
        assert_eq!(ev[1]["response"]["output"], json!([]));
        for ty in ["function_call_output", "custom_tool_call_output"] {
            let cont =
                json!({"previous_response_id": "resp_1", "input": [{"type": ty, "call_id": "c"}]});
            assert_eq!(responses_plan(&s, &cont).word(), "final_text");
        }
        let none = json!({"tools": [], "input": [{"type": "message"}]});
        assert_eq!(responses_plan(&s, &none).word(), "no_tool");
    }

    #[test]
    fn deflate_round_trips_with_context_takeover() {
        let mut c = Compress::new(Compression::fast(), false);
        let mut d = Decompress::new(false);
        // The second message repeats the first: with context takeover it compresses to a
        // back-reference, and only an inflater that kept its window can read it.
        let msgs = [
            r#"{"type":"response.create","input":[]}"#.repeat(20),
            r#"{"type":"response.create","input":[]}"#.repeat(20),
        ];
        let mut sizes = Vec::new();
        for m in &msgs {
            let mut data = deflate_all(&mut c, m.as_bytes()).unwrap();
            assert!(data.ends_with(&[0, 0, 0xff, 0xff]));
            data.truncate(data.len() - 4);
            sizes.push(data.len());
            data.extend_from_slice(&[0, 0, 0xff, 0xff]);
            assert_eq!(inflate_all(&mut d, &data).unwrap(), m.as_bytes());
        }
        assert!(sizes[1] < sizes[0]);
    }

    #[test]
    fn deflate_round_trips_a_message_larger_than_any_buffer() {
        // Not very compressible (a counter's digits), so both sides must grow their buffers.
        let big: String = (0..60_000u32).map(|i| format!("{i},")).collect();
        let mut c = Compress::new(Compression::fast(), false);
        let mut d = Decompress::new(false);
        let data = deflate_all(&mut c, big.as_bytes()).unwrap();
        assert_eq!(inflate_all(&mut d, &data).unwrap(), big.as_bytes());
    }

    #[test]
    fn inflate_of_garbage_is_an_error_not_a_panic() {
        let mut d = Decompress::new(false);
        let r = inflate_all(&mut d, &[0xff, 0xff, 0xff, 0xff, 0, 0, 0xff, 0xff]);
        assert!(matches!(r, Err(WsError::Deflate(_))));
    }

    /// A client frame: masked, optionally compressed (RSV1).
    fn client_frame(opcode: u8, payload: &[u8], rsv1: bool) -> Vec<u8> {
        testkit::ws::frame(opcode, payload, rsv1, Some([1, 2, 3, 4]))
    }

    /// Reads one server frame: (rsv1, opcode, payload).
    async fn server_frame(io: &mut tokio::io::DuplexStream) -> (bool, u8, Vec<u8>) {
        let mut head = [0u8; 2];
        io.read_exact(&mut head).await.unwrap();
        let mut len = u64::from(head[1] & 0x7f);
        if len == 126 {
            len = u64::from(io.read_u16().await.unwrap());
        } else if len == 127 {
            len = io.read_u64().await.unwrap();
        }
        assert_eq!(head[1] & 0x80, 0, "server frames are not masked");
        let mut payload = vec![0u8; len as usize];
        io.read_exact(&mut payload).await.unwrap();
        (head[0] & 0x40 != 0, head[0] & 0x0f, payload)
    }

    #[tokio::test]
    async fn a_compressed_websocket_turn_gets_compressed_events_back() {
        let s = script(0);
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let conn = WsConn {
            io: server,
            inflate: Some(Decompress::new(false)),
            deflate: Some(Compress::new(Compression::fast(), false)),
        };
        let serve = tokio::spawn(async move { serve_ws(&s, conn, "/v1/responses").await });

        let mut cdef = Compress::new(Compression::fast(), false);
        let mut cinf = Decompress::new(false);
        let frame = json!({"type": "response.create", "generate": false, "input": []});
        let mut data = deflate_all(&mut cdef, frame.to_string().as_bytes()).unwrap();
        data.truncate(data.len() - 4);
        // A ping first: answered with a pong, and the turn still goes through.
        client
            .write_all(&client_frame(0x9, b"p", false))
            .await
            .unwrap();
        client
            .write_all(&client_frame(0x1, &data, true))
            .await
            .unwrap();
        let (rsv1, op, payload) = server_frame(&mut client).await;
        assert_eq!((rsv1, op, payload.as_slice()), (false, 0xA, &b"p"[..]));
        let mut types = Vec::new();
        for _ in 0..2 {
            let (rsv1, op, mut payload) = server_frame(&mut client).await;
            assert!(rsv1, "events are compressed");
            assert_eq!(op, 0x1);
            payload.extend_from_slice(&[0, 0, 0xff, 0xff]);
            let text = inflate_all(&mut cinf, &payload).unwrap();
            let ev: Value = serde_json::from_slice(&text).unwrap();
            types.push(ev["type"].as_str().unwrap().to_string());
        }
        assert_eq!(types, ["response.created", "response.completed"]);
        // Like Codex, go away without a close frame.
        drop(client);
        assert_eq!(serve.await.unwrap(), "eof");
    }

    #[tokio::test]
    async fn an_unmasked_client_frame_ends_the_connection_with_a_reason() {
        let s = script(0);
        let (mut client, server) = tokio::io::duplex(1024);
        let conn = WsConn {
            io: server,
            inflate: None,
            deflate: None,
        };
        let unmasked = testkit::ws::frame(0x1, b"hi", false, None);
        client.write_all(&unmasked).await.unwrap();
        let end = serve_ws(&s, conn, "/v1/responses").await;
        assert_eq!(end, "error: protocol: client frame is not masked");
    }
}
