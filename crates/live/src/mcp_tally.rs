//! Model tool calls that route to an MCP tool and never got a wrapper's report.
//!
//! The relay sees every tool call a model makes; the wrapper sees every MCP call a server
//! runs. A call the model made to `mcp__<alias>__<tool>` that no wrapper ever reported leaves
//! no record at all, and nothing else would say so: the records only count what was reported.
//! The usual reason is a wrapper that reported to another relay's ingest socket (Codex passes
//! no environment to MCP servers, so `WINDOWTAP_INGEST` does not reach a wrapper it starts
//! unless its configuration says so), or a server that is not wrapped at all. So the live
//! correlator task keeps this tally beside the correlator and the stop says how many such
//! calls went unreported, with the likely causes.
//!
//! A call counts as reported when a report's hint names it (`tool_use_id` its call id,
//! `item_id` its item id, `call_id` its call id: what the hosts put in `_meta`). A report that
//! names no call seen here (a host that sends no hints, Codex's code mode, whose `exec` may call
//! any tool) may be for any of them, so each such report takes one off the count: the number
//! said is never more than the calls that can be shown to be missing.
//!
//! Only what is written anyway goes in: pseudonymized ids (to match them) and model-visible
//! tool names (to say which tools), never anything else.

use std::collections::{BTreeMap, HashMap};

use correlator::{CallKind, EventKind};

/// Calls remembered one by one, past which only their number is kept: a relay whose servers
/// are never wrapped holds at most this many (two pseudonyms and a name each, about 2 MB).
const MAX_TRACKED: usize = 10_000;

/// The tally: MCP-routed model calls waiting for a report.
#[derive(Debug, Default)]
pub struct McpTally {
    /// Waiting calls by their key, with their ids and visible name.
    waiting: HashMap<u64, Waiting>,
    /// Call id or item id → the waiting call's key.
    by_id: HashMap<String, u64>,
    next: u64,
    /// Calls past [`MAX_TRACKED`]: never matched, counted as waiting.
    untracked: usize,
    /// Reports whose hints named no waiting call.
    unnamed_reports: usize,
}

#[derive(Debug)]
struct Waiting {
    ids: Vec<String>,
    name: String,
    /// The stream that carried the call (a pseudonym), for a report to say which session.
    stream: String,
}

/// What the tally says at the stop.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Unreported {
    /// Model tool calls to MCP tools that no wrapper report can account for.
    pub calls: usize,
    /// Their visible names (`mcp__alias__tool`), with how many of each (of those tracked).
    pub names: BTreeMap<String, usize>,
    /// The streams that carried them, with how many each (of those tracked): the report
    /// places them on their sessions' lanes.
    pub streams: BTreeMap<String, usize>,
}

/// The visible name of a model call that routes to an MCP tool, or `None` for any other call.
/// Claude: `mcp__<alias>__<tool>`; Codex: namespace `mcp__<alias>` with function `<tool>`, or
/// the flat form. An opaque program call (`custom`, Codex's `exec`) names no tool.
fn mcp_route(name: &str, namespace: Option<&str>, kind: CallKind) -> Option<String> {
    if kind == CallKind::Custom {
        return None;
    }
    match namespace {
        Some(ns) if ns.starts_with("mcp__") => Some(format!("{ns}__{name}")),
        _ if name.starts_with("mcp__") => Some(name.to_string()),
        _ => None,
    }
}

impl McpTally {
    /// Takes one event (ids already pseudonymized, as every written event).
    pub fn event(&mut self, kind: &EventKind) {
        match kind {
            EventKind::ToolCall {
                stream,
                call,
                item,
                name,
                namespace,
                kind,
                ..
            } => {
                let Some(route) = mcp_route(name, namespace.as_deref(), *kind) else {
                    return;
                };
                if self.waiting.len() >= MAX_TRACKED {
                    self.untracked += 1;
                    return;
                }
                let key = self.next;
                self.next += 1;
                let mut ids = vec![call.clone()];
                ids.extend(item.iter().cloned());
                for id in &ids {
                    self.by_id.insert(id.clone(), key);
                }
                self.waiting.insert(
                    key,
                    Waiting {
                        ids,
                        name: route,
                        stream: stream.clone(),
                    },
                );
            }
            EventKind::McpInterval { hints, .. } => {
                let named = [&hints.tool_use_id, &hints.item_id, &hints.call_id]
                    .into_iter()
                    .flatten()
                    .find_map(|id| self.by_id.get(id).copied());
                match named {
                    Some(key) => {
                        if let Some(w) = self.waiting.remove(&key) {
                            for id in w.ids {
                                self.by_id.remove(&id);
                            }
                        }
                    }
                    None => self.unnamed_reports += 1,
                }
            }
            _ => {}
        }
    }

    /// The calls no report accounts for.
    pub fn unreported(&self) -> Unreported {
        let calls = (self.waiting.len() + self.untracked).saturating_sub(self.unnamed_reports);
        let (mut names, mut streams) = (BTreeMap::new(), BTreeMap::new());
        if calls > 0 {
            for w in self.waiting.values() {
                *names.entry(w.name.clone()).or_default() += 1;
                *streams.entry(w.stream.clone()).or_default() += 1;
            }
        }
        Unreported {
            calls,
            names,
            streams,
        }
    }
}

/// Where the relay that lost the reports runs, for the likely causes.
pub enum Setting<'a> {
    /// `windowtap relay` on its own, with this ingest socket; `wrapped`: whether any wrapper
    /// said its server started there (then the servers are wrapped, and a call the host did
    /// not run is likelier than one no wrapper could see).
    Relay {
        ingest: Option<&'a std::path::Path>,
        wrapped: bool,
    },
    /// `windowtap run`, which wrapped every server it found.
    Run,
    /// `windowtap report` of a capture, which does not say whether a relay on its own or
    /// `run` wrote it: the causes of both.
    Capture,
}

/// The likely causes, one phrase each, shared by every setting that can have them.
mod cause {
    /// A relay on its own: the server was never wrapped.
    pub(super) const UNWRAPPED: &str =
        "its MCP server does not run under `windowtap wrap` (a remote, \
        HTTP one never can)";
    /// `run`: a remote server, which run cannot wrap.
    pub(super) const REMOTE: &str =
        "its MCP server is a remote (HTTP) one, which no wrapper observes \
        (run names those it found)";
    /// `run`: a server declared where run does not look.
    pub(super) const UNSEEN_BY_RUN: &str = "it was declared where run does not look (run reads \
        --mcp-config, ~/.claude.json and .mcp.json for Claude Code; $CODEX_HOME/config.toml \
        and -c for Codex), so it ran unwrapped";
    pub(super) const NOT_RUN: &str =
        "the host did not run the call (denied, interrupted, timed out)";

    /// The wrapper reported elsewhere; `sock` is the relay's own socket when known.
    pub(super) fn other_socket(sock: Option<&std::path::Path>) -> String {
        let (which, sock) = match sock {
            Some(p) => (p.display().to_string(), p.display().to_string()),
            None => ("the one it printed at start".into(), "SOCKET".into()),
        };
        format!(
            "its wrapper reported to another relay's ingest socket (this relay's is {which}: \
             give it to the wrapper as `--ingest {sock}` in the server's args, or set {env} for \
             it; Codex passes no environment to MCP servers unless the server's table says \
             `env_vars = [\"{env}\"]` or has it in `env`)",
            env = crate::ingest::ENV
        )
    }
}

impl Unreported {
    /// One paragraph for a person: how many calls, to which tools, and the likely causes.
    /// `None` when every call was reported.
    pub fn describe(&self, setting: Setting<'_>) -> Option<String> {
        if self.calls == 0 {
            return None;
        }
        let n = self.calls;
        let s = if n == 1 { "" } else { "s" };
        const SHOWN: usize = 5;
        let mut tools: Vec<String> = self
            .names
            .iter()
            .take(SHOWN)
            .map(|(name, k)| format!("{name} \u{d7}{k}"))
            .collect();
        if self.names.len() > SHOWN {
            tools.push(format!("{} more", self.names.len() - SHOWN));
        }
        let tools = if tools.is_empty() {
            String::new()
        } else {
            format!(" ({})", tools.join(", "))
        };
        // Likeliest first. Under run every server it found reports to run's own socket, so a
        // call the host did not run (a denied permission, an interrupted turn) comes first; a
        // relay on its own to which no wrapper ever said its server started most likely
        // serves servers that are not wrapped at all.
        let causes: Vec<String> = match setting {
            Setting::Relay {
                ingest,
                wrapped: false,
            } => vec![
                cause::UNWRAPPED.into(),
                cause::other_socket(ingest),
                cause::NOT_RUN.into(),
            ],
            Setting::Relay {
                ingest,
                wrapped: true,
            } => vec![
                cause::NOT_RUN.into(),
                cause::UNWRAPPED.into(),
                cause::other_socket(ingest),
            ],
            Setting::Run => vec![
                cause::NOT_RUN.into(),
                cause::UNSEEN_BY_RUN.into(),
                cause::REMOTE.into(),
            ],
            Setting::Capture => vec![
                cause::UNWRAPPED.into(),
                cause::other_socket(None),
                format!("under `windowtap run`, {}", cause::UNSEEN_BY_RUN),
                cause::NOT_RUN.into(),
            ],
        };
        // One cause a line, each a sentence of its own: one 90-word line was not read.
        let causes: String = causes.iter().map(|c| format!("\n  - {c}")).collect();
        Some(format!(
            "{n} model tool call{s} to MCP tools{tools} got no report from a wrapper, so no \
             record says where it ran. Likely causes, likeliest first:{causes}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use correlator::{Hints, Outcome};

    fn call(
        call: &str,
        item: Option<&str>,
        name: &str,
        ns: Option<&str>,
        kind: CallKind,
    ) -> EventKind {
        EventKind::ToolCall {
            stream: "s".into(),
            response: "r".into(),
            call: call.into(),
            item: item.map(str::to_string),
            name: name.into(),
            namespace: ns.map(str::to_string),
            kind,
        }
    }

    fn report(tool_use_id: Option<&str>, item_id: Option<&str>) -> EventKind {
        EventKind::McpInterval {
            rounds: None,
            interval: "i".into(),
            alias: "gate".into(),
            tool: "wait".into(),
            start: 0.0,
            end: 1.0,
            outcome: Outcome::Result,
            hints: Hints {
                tool_use_id: tool_use_id.map(str::to_string),
                item_id: item_id.map(str::to_string),
                call_id: None,
                thread: None,
            },
            host: None,
            transport: correlator::McpTransport::Stdio,
        }
    }

    #[test]
    fn mcp_calls_without_a_report_are_counted_by_tool() {
        let mut t = McpTally::default();
        t.event(&call(
            "c1",
            None,
            "mcp__gate__wait",
            None,
            CallKind::ToolUse,
        ));
        t.event(&call(
            "c2",
            Some("fc2"),
            "wait",
            Some("mcp__gate"),
            CallKind::Function,
        ));
        t.event(&call("c3", None, "Bash", None, CallKind::ToolUse));
        t.event(&call("c4", Some("x"), "exec", None, CallKind::Custom));
        assert_eq!(t.unreported().calls, 2);
        // Codex names its call by item id, Claude by tool_use id.
        t.event(&report(None, Some("fc2")));
        let u = t.unreported();
        assert_eq!(u.calls, 1);
        assert_eq!(
            u.names.into_iter().collect::<Vec<_>>(),
            [("mcp__gate__wait".to_string(), 1)]
        );
        t.event(&report(Some("c1"), None));
        assert_eq!(t.unreported(), Unreported::default());
    }

    #[test]
    fn a_report_that_names_no_call_takes_one_off_the_count() {
        let mut t = McpTally::default();
        t.event(&call("c1", None, "mcp__a__t", None, CallKind::ToolUse));
        t.event(&call("c2", None, "mcp__a__t", None, CallKind::ToolUse));
        t.event(&report(None, None));
        assert_eq!(t.unreported().calls, 1);
        t.event(&report(Some("elsewhere"), None));
        assert_eq!(t.unreported().calls, 0);
    }

    #[test]
    fn the_description_names_the_socket_and_the_causes() {
        let u = Unreported {
            calls: 1,
            names: BTreeMap::from([("mcp__gate__wait".to_string(), 1)]),
            streams: BTreeMap::new(),
        };
        let text = u
            .describe(Setting::Relay {
                ingest: Some(std::path::Path::new("/run/b.sock")),
                wrapped: false,
            })
            .unwrap();
        assert!(
            text.starts_with(
                "1 model tool call to MCP tools (mcp__gate__wait \u{d7}1) got no report"
            ),
            "{text}"
        );
        assert!(text.contains("--ingest /run/b.sock"), "{text}");
        assert!(text.contains("env_vars = [\"WINDOWTAP_INGEST\"]"), "{text}");
        assert!(Unreported::default().describe(Setting::Run).is_none());
        // Likeliest first, one cause a line: under run, a call the host did not run.
        let run = u.describe(Setting::Run).unwrap();
        let lines: Vec<&str> = run.lines().collect();
        assert_eq!(lines.len(), 4, "{run}");
        assert!(
            lines[0].ends_with("Likely causes, likeliest first:")
                && lines[1].starts_with("  - the host did not run the call"),
            "{run}"
        );
    }
}
