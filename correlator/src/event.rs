//! The event model: one type per line of trace v2 (docs/design.md §5).
//!
//! Times are milliseconds since the trace's epoch, as `f64` so that fractions survive a
//! round trip. Ids are opaque strings (already pseudonymized when they come from a capture).
//! A trace v1 is read into the same model with every `host` null and no model, usage or stop
//! reason.

use std::fmt;

/// Milliseconds since the trace's epoch.
pub type Millis = f64;

/// One timed event. Its ids are `S`: owned `String`s by default, or `&str` borrowed from the
/// line they were read from ([`crate::trace::TraceReader::next_event`]): replay reads millions
/// of lines, and the correlator copies only the ids it keeps.
#[derive(Debug, Clone, PartialEq)]
pub struct Event<S = String> {
    pub t: Millis,
    pub kind: EventKind<S>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Client {
    Claude,
    Codex,
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    Http,
    Websocket,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallKind {
    ToolUse,
    Function,
    Custom,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResponseStatus {
    Completed,
    Incomplete,
    Failed,
    Error,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    Result,
    Error,
    Cancelled,
    Lost,
}

/// The identity hints an MCP interval may carry (each optional).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hints<S = String> {
    /// Claude Code's `_meta["claudecode/toolUseId"]`.
    pub tool_use_id: Option<S>,
    /// Codex's `_meta.itemId`.
    pub item_id: Option<S>,
    /// Codex's `_meta.callId` (evidence only, never a conflict).
    pub call_id: Option<S>,
    /// Codex's `_meta.threadId`.
    pub thread: Option<S>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum EventKind<S = String> {
    StreamOpen {
        stream: S,
        client: Client,
        transport: Transport,
        thread: Option<S>,
        /// The host process that owns the client end of the connection (a pseudonym), or
        /// `None` when it is not known.
        host: Option<S>,
    },
    Request {
        stream: S,
        request: S,
        previous_response: Option<S>,
        outputs: Vec<S>,
    },
    ResponseStart {
        stream: S,
        response: S,
        request: Option<S>,
        /// The model name as the API reports it (trace v2, optional).
        model: Option<S>,
    },
    ToolCall {
        stream: S,
        response: S,
        call: S,
        item: Option<S>,
        name: S,
        namespace: Option<S>,
        kind: CallKind,
    },
    ResponseEnd {
        stream: S,
        response: S,
        status: ResponseStatus,
        /// Token counts as the API reported them (trace v2, optional).
        usage: Option<Usage>,
        /// The stop or finish reason, as a fixed word (trace v2, optional).
        stop_reason: Option<StopReason>,
    },
    StreamClose {
        stream: S,
    },
    ObservationLost {
        stream: S,
        reason: S,
    },
    McpStart {
        interval: S,
        alias: S,
        tool: S,
        start: Millis,
        /// The host process the call belongs to (a pseudonym), or `None` when not known.
        host: Option<S>,
        /// Who reported the call: the stdio wrapper, or the relay's MCP mount observer
        /// (trace v2's optional `transport`, absent for stdio; docs/design.md §8).
        transport: McpTransport,
    },
    McpInterval {
        interval: S,
        alias: S,
        tool: S,
        start: Millis,
        end: Millis,
        outcome: Outcome,
        hints: Hints<S>,
        /// The host process the call belongs to (a pseudonym), or `None` when not known.
        host: Option<S>,
        /// How a Multi Round-Trip call went (trace v2's optional `rounds`, `input_wait`,
        /// `outcome_detail`); `None` for a call of one request, as every call before MCP
        /// 2026-07-28.
        rounds: Option<Rounds>,
        /// Who reported the call, as on `McpStart`.
        transport: McpTransport,
    },
}

/// How an MCP call reached its server, and so who reported it (docs/design.md §8). The rule
/// does not tell them apart; the field says where an interval came from. In trace v2 the
/// optional `transport` of `mcp_start` and `mcp_interval` is `"http"` or absent (stdio), so
/// every trace written before the field existed reads, and writes back, unchanged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum McpTransport {
    /// The stdio wrapper (`windowtap wrap`) reported it: the field is absent.
    #[default]
    Stdio,
    /// The relay's observer of an MCP mount (a remote streamable-HTTP server) reported it.
    Http,
}

impl McpTransport {
    /// The one word written in trace v2 (`"http"`); stdio is written as no field at all.
    pub const HTTP: &'static str = "http";

    /// The trace v2 field's value, or `None` for stdio (no field).
    pub fn as_field(self) -> Option<&'static str> {
        match self {
            McpTransport::Stdio => None,
            McpTransport::Http => Some(Self::HTTP),
        }
    }

    /// Parses the trace v2 field's value: only `"http"` (absent is stdio; there is no second
    /// spelling of it, so a reader never has two lines meaning one thing).
    pub(crate) fn parse(s: &str) -> Option<Self> {
        (s == Self::HTTP).then_some(McpTransport::Http)
    }

    /// Every accepted word, for error messages.
    pub(crate) const WORDS: &'static [&'static str] = &[Self::HTTP];
}

/// The rounds of an MCP 2026-07-28 Multi Round-Trip call, reported as the one call it is for
/// the host: counts, a duration and a fixed word, all allowed anywhere (docs/design.md §7).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rounds {
    /// Requests the call took (its first and each retry).
    pub rounds: u32,
    /// Time spent waiting on the client, from each `input_required` answer to its retry (or
    /// to the end, for an unanswered last round).
    pub input_wait: Millis,
    /// The call ended waiting on the client: its last round was answered `input_required` and
    /// no retry came. Its `outcome` is then `cancelled` and `outcome_detail` says
    /// `input_unanswered`.
    pub unanswered: bool,
}

impl Rounds {
    /// The one `outcome_detail` word there is.
    pub const INPUT_UNANSWERED: &'static str = "input_unanswered";
}

/// Token counts of one response (`response_end.usage`, trace v2): each `None` when the API did
/// not report it. Counts only: they may be written anywhere (docs/design.md §7).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Usage {
    /// Input tokens not read from or written to a prompt cache (Anthropic `input_tokens`;
    /// Responses / Chat `input_tokens` / `prompt_tokens`, as reported).
    pub input: Option<u64>,
    /// Output tokens (`output_tokens` / `completion_tokens`).
    pub output: Option<u64>,
    /// Input tokens read from a prompt cache (`cache_read_input_tokens` /
    /// `input_tokens_details.cached_tokens`).
    pub cache_read: Option<u64>,
    /// Input tokens written to a prompt cache (`cache_creation_input_tokens`).
    pub cache_creation: Option<u64>,
}

impl Usage {
    /// The fields in trace order with their keys.
    pub(crate) fn fields(&self) -> [(&'static str, Option<u64>); 4] {
        [
            ("input", self.input),
            ("output", self.output),
            ("cache_read", self.cache_read),
            ("cache_creation", self.cache_creation),
        ]
    }
}

impl<S: AsRef<str>> Event<S> {
    /// The same event with ids of its own (for a reader's caller that keeps events).
    pub fn into_owned(self) -> Event {
        Event {
            t: self.t,
            kind: self.kind.map_strings(|_, s| s.as_ref().to_owned()),
        }
    }
}

/// What a string of an event stands for, and so what a door makes of it (docs/design.md §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Text {
    /// An id: a stream, request, response, call, item, interval, thread or host.
    Id,
    /// A tool name or namespace, an MCP alias or tool.
    ToolName,
    /// A model name.
    ModelName,
    /// A fixed word (`observation_lost.reason`).
    Word,
}

impl<S> EventKind<S> {
    /// The same event with every string mapped by `f`, which is told what the string stands
    /// for; kinds, statuses, counts and times are kept.
    pub fn map_strings<T>(self, mut f: impl FnMut(Text, S) -> T) -> EventKind<T> {
        match self {
            EventKind::StreamOpen {
                stream,
                client,
                transport,
                thread,
                host,
            } => EventKind::StreamOpen {
                stream: f(Text::Id, stream),
                client,
                transport,
                thread: thread.map(|s| f(Text::Id, s)),
                host: host.map(|s| f(Text::Id, s)),
            },
            EventKind::Request {
                stream,
                request,
                previous_response,
                outputs,
            } => EventKind::Request {
                stream: f(Text::Id, stream),
                request: f(Text::Id, request),
                previous_response: previous_response.map(|s| f(Text::Id, s)),
                outputs: outputs.into_iter().map(|s| f(Text::Id, s)).collect(),
            },
            EventKind::ResponseStart {
                stream,
                response,
                request,
                model,
            } => EventKind::ResponseStart {
                stream: f(Text::Id, stream),
                response: f(Text::Id, response),
                request: request.map(|s| f(Text::Id, s)),
                model: model.map(|m| f(Text::ModelName, m)),
            },
            EventKind::ToolCall {
                stream,
                response,
                call,
                item,
                name,
                namespace,
                kind,
            } => EventKind::ToolCall {
                stream: f(Text::Id, stream),
                response: f(Text::Id, response),
                call: f(Text::Id, call),
                item: item.map(|s| f(Text::Id, s)),
                name: f(Text::ToolName, name),
                namespace: namespace.map(|n| f(Text::ToolName, n)),
                kind,
            },
            EventKind::ResponseEnd {
                stream,
                response,
                status,
                usage,
                stop_reason,
            } => EventKind::ResponseEnd {
                stream: f(Text::Id, stream),
                response: f(Text::Id, response),
                status,
                usage,
                stop_reason,
            },
            EventKind::StreamClose { stream } => EventKind::StreamClose {
                stream: f(Text::Id, stream),
            },
            EventKind::ObservationLost { stream, reason } => EventKind::ObservationLost {
                stream: f(Text::Id, stream),
                reason: f(Text::Word, reason),
            },
            EventKind::McpStart {
                interval,
                alias,
                tool,
                start,
                host,
                transport,
            } => EventKind::McpStart {
                interval: f(Text::Id, interval),
                alias: f(Text::ToolName, alias),
                tool: f(Text::ToolName, tool),
                start,
                host: host.map(|s| f(Text::Id, s)),
                transport,
            },
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
            } => EventKind::McpInterval {
                interval: f(Text::Id, interval),
                alias: f(Text::ToolName, alias),
                tool: f(Text::ToolName, tool),
                start,
                end,
                outcome,
                hints: Hints {
                    tool_use_id: hints.tool_use_id.map(|s| f(Text::Id, s)),
                    item_id: hints.item_id.map(|s| f(Text::Id, s)),
                    call_id: hints.call_id.map(|s| f(Text::Id, s)),
                    thread: hints.thread.map(|s| f(Text::Id, s)),
                },
                host: host.map(|s| f(Text::Id, s)),
                rounds,
                transport,
            },
        }
    }
}

impl<S: AsRef<str>> EventKind<S> {
    /// The `type` word of this event in trace v2.
    pub fn type_name(&self) -> &'static str {
        match self {
            EventKind::StreamOpen { .. } => "stream_open",
            EventKind::Request { .. } => "request",
            EventKind::ResponseStart { .. } => "response_start",
            EventKind::ToolCall { .. } => "tool_call",
            EventKind::ResponseEnd { .. } => "response_end",
            EventKind::StreamClose { .. } => "stream_close",
            EventKind::ObservationLost { .. } => "observation_lost",
            EventKind::McpStart { .. } => "mcp_start",
            EventKind::McpInterval { .. } => "mcp_interval",
        }
    }

    /// The stream this event belongs to, if it is a relay event.
    pub fn stream(&self) -> Option<&str> {
        match self {
            EventKind::StreamOpen { stream, .. }
            | EventKind::Request { stream, .. }
            | EventKind::ResponseStart { stream, .. }
            | EventKind::ToolCall { stream, .. }
            | EventKind::ResponseEnd { stream, .. }
            | EventKind::StreamClose { stream }
            | EventKind::ObservationLost { stream, .. } => Some(stream.as_ref()),
            EventKind::McpStart { .. } | EventKind::McpInterval { .. } => None,
        }
    }
}

macro_rules! words {
    ($ty:ident { $($variant:ident => $word:literal),* $(,)? }) => {
        impl $ty {
            /// The word used for this value in trace v2 and records v1.
            pub fn as_str(self) -> &'static str {
                match self { $($ty::$variant => $word),* }
            }
            /// Parses the trace v2 word; `None` for anything else.
            pub(crate) fn parse(s: &str) -> Option<Self> {
                match s { $($word => Some($ty::$variant),)* _ => None }
            }
            /// Every accepted word, for error messages.
            pub(crate) const WORDS: &'static [&'static str] = &[$($word),*];
        }
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

words!(Client { Claude => "claude", Codex => "codex", Other => "other" });
words!(Transport { Http => "http", Websocket => "websocket" });
words!(CallKind { ToolUse => "tool_use", Function => "function", Custom => "custom" });
words!(ResponseStatus {
    Completed => "completed",
    Incomplete => "incomplete",
    Failed => "failed",
    Error => "error",
});
words!(Outcome { Result => "result", Error => "error", Cancelled => "cancelled", Lost => "lost" });

/// Why a response stopped (`response_end.stop_reason`, trace v2): Anthropic's `stop_reason`,
/// the Responses API's `incomplete_details.reason`, Chat Completions' `finish_reason`. A fixed
/// list: anything else the API says is [`StopReason::Other`] (docs/design.md §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StopReason {
    EndTurn,
    ToolUse,
    MaxTokens,
    StopSequence,
    PauseTurn,
    Refusal,
    ModelContextWindowExceeded,
    MaxOutputTokens,
    Stop,
    Length,
    ContentFilter,
    ToolCalls,
    FunctionCall,
    Other,
}

words!(StopReason {
    EndTurn => "end_turn",
    ToolUse => "tool_use",
    MaxTokens => "max_tokens",
    StopSequence => "stop_sequence",
    PauseTurn => "pause_turn",
    Refusal => "refusal",
    ModelContextWindowExceeded => "model_context_window_exceeded",
    MaxOutputTokens => "max_output_tokens",
    Stop => "stop",
    Length => "length",
    ContentFilter => "content_filter",
    ToolCalls => "tool_calls",
    FunctionCall => "function_call",
    Other => "other",
});

impl StopReason {
    /// What an API said, as one of the fixed words: anything not on the list is `other`, so
    /// no text of the API's ever gets through.
    pub(crate) fn from_api(s: &str) -> StopReason {
        StopReason::parse(s).unwrap_or(StopReason::Other)
    }
}
