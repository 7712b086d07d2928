//! The event model: one type per line of trace v1 (design.md §5).
//!
//! Times are milliseconds since the trace's epoch, as `f64` so that fractions survive a
//! round trip. Ids are opaque strings (already pseudonymized when they come from a capture).

use std::fmt;

/// Milliseconds since the trace's epoch.
pub type Millis = f64;

/// One timed event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub t: Millis,
    pub kind: EventKind,
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
pub struct Hints {
    /// Claude Code's `_meta["claudecode/toolUseId"]`.
    pub tool_use_id: Option<String>,
    /// Codex's `_meta.itemId`.
    pub item_id: Option<String>,
    /// Codex's `_meta.callId` (evidence only, never a conflict).
    pub call_id: Option<String>,
    /// Codex's `_meta.threadId`.
    pub thread: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum EventKind {
    StreamOpen {
        stream: String,
        client: Client,
        transport: Transport,
        thread: Option<String>,
    },
    Request {
        stream: String,
        request: String,
        previous_response: Option<String>,
        outputs: Vec<String>,
    },
    ResponseStart {
        stream: String,
        response: String,
        request: Option<String>,
    },
    ToolCall {
        stream: String,
        response: String,
        call: String,
        item: Option<String>,
        name: String,
        namespace: Option<String>,
        kind: CallKind,
    },
    ResponseEnd {
        stream: String,
        response: String,
        status: ResponseStatus,
    },
    StreamClose {
        stream: String,
    },
    ObservationLost {
        stream: String,
        reason: String,
    },
    McpStart {
        interval: String,
        alias: String,
        tool: String,
        start: Millis,
    },
    McpInterval {
        interval: String,
        alias: String,
        tool: String,
        start: Millis,
        end: Millis,
        outcome: Outcome,
        hints: Hints,
    },
}

impl EventKind {
    /// The `type` word of this event in trace v1.
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
            | EventKind::ObservationLost { stream, .. } => Some(stream),
            EventKind::McpStart { .. } | EventKind::McpInterval { .. } => None,
        }
    }
}

macro_rules! words {
    ($ty:ident { $($variant:ident => $word:literal),* $(,)? }) => {
        impl $ty {
            /// The word used for this value in trace v1 and records v1.
            pub fn as_str(self) -> &'static str {
                match self { $($ty::$variant => $word),* }
            }
            /// Parses the trace v1 word; `None` for anything else.
            pub fn parse(s: &str) -> Option<Self> {
                match s { $($word => Some($ty::$variant),)* _ => None }
            }
            /// Every accepted word, for error messages.
            pub const WORDS: &'static [&'static str] = &[$($word),*];
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
