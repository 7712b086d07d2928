//! Model-visible tool names to MCP alias and tool, per host (design.md §4, `route` evidence).

/// Codex's character rule: anything outside `[A-Za-z0-9_]` becomes `_`.
fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Does a tool call's visible name (and namespace) name this MCP alias and tool?
pub fn resolves(name: &str, namespace: Option<&str>, alias: &str, tool: &str) -> bool {
    if name == format!("mcp__{alias}__{tool}") {
        return true;
    }
    let (a, t) = (sanitize(alias), sanitize(tool));
    match namespace {
        Some(ns) => ns == format!("mcp__{a}") && (name == t || name == tool),
        None => name == format!("mcp__{a}__{t}"),
    }
}
