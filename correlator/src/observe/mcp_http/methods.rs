//! The JSON-RPC method names of the MCP specification (2024-11-05 to 2026-07-28), the only
//! method words the mount observer counts by: a method outside the list is `other`, so a
//! server or client cannot put free text into a count's key (docs/design.md §7, §8).

/// The word counted for a message with no `method`: an answer (result or error).
pub(super) const RESPONSE: &str = "response";
/// The word for anything not on the list.
pub(super) const OTHER: &str = "other";

const METHODS: &[&str] = &[
    "initialize",
    "ping",
    "server/discover",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "sampling/createMessage",
    "elicitation/create",
    "roots/list",
    "subscriptions/listen",
    "tasks/get",
    "tasks/result",
    "tasks/list",
    "tasks/cancel",
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/message",
    "notifications/resources/updated",
    "notifications/resources/list_changed",
    "notifications/tools/list_changed",
    "notifications/prompts/list_changed",
    "notifications/roots/list_changed",
    "notifications/elicitation/complete",
    "notifications/tasks/status",
];

/// The counted word for a JSON-RPC method: itself if the MCP specification names it, else
/// `other`.
pub fn method_word(method: &str) -> &'static str {
    METHODS
        .iter()
        .copied()
        .find(|m| *m == method)
        .unwrap_or(OTHER)
}
