//! Does a model-visible tool call name a given MCP alias and tool? (docs/design.md §4, `route`)
//!
//! The model never sees the MCP alias and tool as the wrapper reports them: each host
//! translates them into a name its model API accepts. A call *resolves* to `(alias, tool)` when
//! its visible name is one that host could have produced for that pair. `route` is evidence
//! only, so this module accepts exactly the translations it can justify from the hosts' code and
//! nothing looser: a miss costs a word of evidence, a false match would invent one.
//!
//! Claude Code: one flat name `mcp__<alias>__<tool>`, each part passed through its
//! `normalizeNameForMCP` (every UTF-16 code unit outside `[A-Za-z0-9_-]` becomes `_`; read from
//! third-party copies of `src/services/mcp/normalization.ts`). Its extra squeezing for
//! `claude.ai ` connector names is not modelled: a wrapper alias is a local config key.
//!
//! Codex: namespace `mcp__<alias>` with function `<tool>` (or the flat
//! `mcp__<alias>__<tool>`), translated by `normalize_tools_for_model_with_prefix` in
//! openai/codex `codex-rs/codex-mcp/src/tools.rs` (read at commits
//! 00a35b1bf7756fef83d5100d40804d2a9c4e6a04 and 9b05dc915849740e43fb134c6b43ff361c0bd23f) with
//! `sanitize_responses_api_tool_name` from `codex-rs/codex-mcp/src/mcp/mod.rs` (commit
//! 00b17c2659c96ab3d0ae8de723b4ce2d686850b1):
//! - sanitize: every `char` outside `[A-Za-z0-9_]` becomes one `_`; an empty result is `_`;
//! - namespace: `mcp__` + sanitized alias, unless the sanitized alias already starts with `mcp__`;
//! - a regular MCP server's tool has `callable_namespace = server_name = alias` and
//!   `callable_name = tool.name = tool`, no connector (`regular_mcp_tool_info_from_listed_tool`
//!   in `codex-rs/codex-mcp/src/rmcp_client.rs`), so the raw identities Codex hashes are
//!   `alias\0alias\0` (namespace) and `alias\0alias\0\0tool\0tool` (tool);
//! - a namespace that collides after sanitizing gets `_` + the first 12 hex digits of
//!   SHA-1(namespace identity); a tool name that collides gets `_` + 12 hex of
//!   SHA-1(tool identity);
//! - when `namespace + "__" + name` exceeds the byte cap (or the name is already taken), the
//!   name is cut to `cap - namespace - 2 - 13` chars and gets `_` + 12 hex of SHA-1(tool
//!   identity); if even that does not fit, the namespace is cut to `cap - 15` chars and the
//!   name is only the suffix.
//!
//! The cap is 128 bytes (docs/design.md §4; the boundary test
//! `test_normalize_tools_respects_responses_api_name_length_boundaries` asserts 128, and seed
//! 004 cites commit 4f39251a01). Older builds cut at 64; their cut names are not accepted (the
//! design names one translation). A further retry (`attempt` ≥ 1, hashing
//! `identity\0attempt`) happens only when two different hashed names collide in 48 bits; it is
//! not accepted.
//!
//! Any other client (a stream whose `client` is `other`): also the tool's own name, exactly,
//! with no namespace. The OpenAI Agents SDK (`MCPServerStdio`, Python and JavaScript) offers an
//! MCP tool to the model under `tool.name` as the server listed it, so `echo` of server `probe`
//! is shown as `echo`; nothing in that name says which server it came from, which is why it is a
//! route only for such clients: a Claude Code or Codex stream whose model calls a bare `echo`
//! called a tool of the host's own, not the MCP server's. Two servers of one program that both
//! list `echo` give two routes from one name; containment and identity still decide between
//! their windows (two eligible windows that both contain a call abstain, `ambiguous`).
//!
//! Since the rule asks this for every candidate window of every interval (a window is
//! *eligible* only if one of its calls resolves), [`Names`] computes the names a pair can have
//! once, and matching a call is then a few string comparisons.

use sha1::{Digest, Sha1};

use crate::event::Client;

const PREFIX: &str = "mcp__";
const DELIMITER: &str = "__";
/// `CALLABLE_NAME_HASH_LEN`: hex digits of the SHA-1 digest Codex keeps.
const HASH_LEN: usize = 12;
/// Codex's `MAX_TOOL_NAME_LENGTH` (see the module comment).
const CODEX_CAP: usize = 128;

/// Every model-visible name either host, or any other client, could give one MCP `alias`/`tool`
/// pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Names {
    /// The tool's own name: a route only on a stream of another client (see the module doc).
    bare: Box<str>,
    /// Claude Code's flat name.
    claude: String,
    /// Codex's `(namespace, function)` pairs.
    codex: Vec<(String, String)>,
    /// Codex's flat forms, `namespace__function`.
    codex_flat: Vec<String>,
}

impl Names {
    pub(crate) fn new(alias: &str, tool: &str) -> Names {
        let codex = codex_names(alias, tool);
        let codex_flat = codex
            .iter()
            .map(|(ns, f)| format!("{ns}{DELIMITER}{f}"))
            .collect();
        Names {
            bare: tool.into(),
            claude: claude_flat_name(alias, tool),
            codex,
            codex_flat,
        }
    }

    /// Does the model-visible call `name` (in `namespace`, if any), made on a stream of
    /// `client`, name this pair?
    pub(crate) fn matches(&self, client: Client, name: &str, namespace: Option<&str>) -> bool {
        match namespace {
            None => {
                name == self.claude
                    || self.codex_flat.iter().any(|f| f == name)
                    || (client == Client::Other && name == &*self.bare)
            }
            Some(ns) => self.codex.iter().any(|(n, f)| n == ns && f == name),
        }
    }
}

/// Does the model-visible call `name` (in `namespace`, if any), made on a stream of `client`,
/// name the MCP `alias`'s `tool`, under that client's translation (Claude Code's or Codex's
/// for either host; for any other client, also the tool's own name)?
pub fn resolves(
    client: Client,
    name: &str,
    namespace: Option<&str>,
    alias: &str,
    tool: &str,
) -> bool {
    Names::new(alias, tool).matches(client, name, namespace)
}

/// Claude Code's flat name for an MCP tool: `mcp__<alias>__<tool>`, both normalized.
pub(crate) fn claude_flat_name(alias: &str, tool: &str) -> String {
    format!(
        "{PREFIX}{}{DELIMITER}{}",
        claude_normalize(alias),
        claude_normalize(tool)
    )
}

/// `normalizeNameForMCP`: a JavaScript regex replace without the `u` flag works per UTF-16
/// code unit, so a character outside the BMP becomes two underscores.
fn claude_normalize(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
            out.push(c);
        } else {
            for _ in 0..c.len_utf16() {
                out.push('_');
            }
        }
    }
    out
}

/// `sanitize_responses_api_tool_name`: one `_` per `char` outside `[A-Za-z0-9_]`.
pub(crate) fn codex_sanitize(s: &str) -> String {
    let out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() {
        "_".to_string()
    } else {
        out
    }
}

/// The namespace Codex shows the model for an MCP server, before any collision suffix.
pub(crate) fn codex_namespace(alias: &str) -> String {
    let sanitized = codex_sanitize(alias);
    if sanitized.starts_with(PREFIX) {
        sanitized
    } else {
        format!("{PREFIX}{sanitized}")
    }
}

/// `_` + the first 12 hex digits of SHA-1(`input`).
fn hash_suffix(input: &str) -> String {
    let digest = Sha1::digest(input.as_bytes());
    let hex = hex::encode(digest);
    format!("_{}", &hex[..HASH_LEN])
}

fn truncate_chars(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

/// `fit_callable_parts_with_hash` for one cap.
fn fit_with_hash(namespace: &str, name: &str, suffix: &str, cap: usize) -> (String, String) {
    let max_name = cap.saturating_sub(namespace.len() + DELIMITER.len());
    if max_name >= suffix.len() {
        let keep = max_name - suffix.len();
        return (
            namespace.to_string(),
            format!("{}{suffix}", truncate_chars(name, keep)),
        );
    }
    let max_namespace = cap.saturating_sub(suffix.len() + DELIMITER.len());
    (truncate_chars(namespace, max_namespace), suffix.to_string())
}

/// Every `(namespace, name)` pair Codex could show the model for `alias`/`tool` (attempt 0).
fn codex_names(alias: &str, tool: &str) -> Vec<(String, String)> {
    let namespace_identity = format!("{alias}\0{alias}\0");
    let tool_identity = format!("{namespace_identity}\0{tool}\0{tool}");
    let tool_suffix = hash_suffix(&tool_identity);

    let plain_ns = codex_namespace(alias);
    // `append_namespace_hash_suffix`: a namespace ending in `__` keeps that ending after the
    // suffix.
    let ns_suffix = hash_suffix(&namespace_identity);
    let hashed_ns = match plain_ns.strip_suffix(DELIMITER) {
        Some(stem) => format!("{stem}{ns_suffix}{DELIMITER}"),
        None => format!("{plain_ns}{ns_suffix}"),
    };
    let plain_name = codex_sanitize(tool);
    let hashed_name = format!("{plain_name}{tool_suffix}");

    let mut out = Vec::new();
    for ns in [&plain_ns, &hashed_ns] {
        for name in [&plain_name, &hashed_name] {
            // `unique_callable_parts`: shown as is when it fits the cap (and is not taken);
            // otherwise cut and hashed.
            if ns.len() + DELIMITER.len() + name.len() <= CODEX_CAP {
                out.push((ns.clone(), name.clone()));
            }
            out.push(fit_with_hash(ns, name, &tool_suffix, CODEX_CAP));
        }
    }
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha12(s: &str) -> String {
        hex::encode(Sha1::digest(s.as_bytes()))[..12].to_string()
    }

    /// The hosts' translations alone: Claude Code and Codex streams resolve the same names.
    fn resolves(name: &str, namespace: Option<&str>, alias: &str, tool: &str) -> bool {
        let claude = super::resolves(Client::Claude, name, namespace, alias, tool);
        let codex = super::resolves(Client::Codex, name, namespace, alias, tool);
        assert_eq!(claude, codex, "{name:?} in {namespace:?}");
        claude
    }

    /// Another client (the OpenAI Agents SDK) shows the tool's own name: a route there, exactly
    /// and without a namespace, and nowhere else; the hosts' names stay routes for it too.
    #[test]
    fn another_client_routes_by_the_tools_own_name() {
        let other = |name: &str, ns: Option<&str>, alias: &str, tool: &str| {
            super::resolves(Client::Other, name, ns, alias, tool)
        };
        assert!(other("echo", None, "probe", "echo"));
        assert!(other("read.file", None, "fs", "read.file"));
        assert!(other("get-guide", None, "music-studio", "get-guide"));
        // Exactly the tool's name: not sanitized, not another tool's, not in a namespace.
        assert!(!other("read_file", None, "fs", "read.file"));
        assert!(!other("echo2", None, "probe", "echo"));
        assert!(!other("Echo", None, "probe", "echo"));
        assert!(!other("probe", None, "probe", "echo"));
        assert!(!other("echo", Some("probe"), "probe", "echo"));
        // The hosts' translations still hold for another client.
        assert!(other("mcp__probe__echo", None, "probe", "echo"));
        assert!(other("echo", Some("mcp__probe"), "probe", "echo"));
        // A host's stream never routes a bare name: its model called one of the host's tools.
        for client in [Client::Claude, Client::Codex] {
            assert!(!super::resolves(client, "echo", None, "probe", "echo"));
        }
    }

    #[test]
    fn sanitizers_follow_each_host() {
        let cases: &[(&str, &str, &str)] = &[
            // input, Codex, Claude
            ("probe", "probe", "probe"),
            ("shape_probe", "shape_probe", "shape_probe"),
            ("music-studio", "music_studio", "music-studio"),
            ("server.one", "server_one", "server_one"),
            ("npm:@scope/pkg", "npm__scope_pkg", "npm__scope_pkg"),
            ("ünï", "_n_", "_n_"),
            ("a😀b", "a_b", "a__b"),
            ("", "_", ""),
        ];
        for (input, codex, claude) in cases {
            assert_eq!(codex_sanitize(input), *codex, "codex {input:?}");
            assert_eq!(claude_normalize(input), *claude, "claude {input:?}");
        }
    }

    #[test]
    fn codex_namespace_is_prefixed_once() {
        assert_eq!(codex_namespace("probe"), "mcp__probe");
        assert_eq!(codex_namespace("mcp__probe"), "mcp__probe");
        assert_eq!(codex_namespace("mcp--probe"), "mcp__probe");
        assert_eq!(codex_namespace("basic-server"), "mcp__basic_server");
    }

    /// Names the hosts show the model, and whether each names `alias`/`tool`.
    #[test]
    fn visible_names_resolve_exactly() {
        let ns_hash = sha12("basic-server\0basic-server\0");
        let tool_hash = sha12("basic-server\0basic-server\0\0lookup\0lookup");
        let probe_hash = sha12("probe\0probe\0\0echo\0echo");
        let s = |x: &str| x.to_string();
        let cases: Vec<(String, Option<String>, &str, &str, bool)> = vec![
            // Claude: flat, normalized, `-` kept.
            (s("mcp__probe__echo"), None, "probe", "echo", true),
            (
                s("mcp__shape_probe__lookup"),
                None,
                "shape_probe",
                "lookup",
                true,
            ),
            (
                s("mcp__music-studio__get-guide"),
                None,
                "music-studio",
                "get-guide",
                true,
            ),
            (s("mcp__server_one__echo"), None, "server.one", "echo", true),
            (s("mcp__probe__echo"), None, "probe", "echo2", false),
            (s("mcp__probe__echo"), None, "probe2", "echo", false),
            (s("mcp__probe__echoo"), None, "probe", "echo", false),
            (s("probe__echo"), None, "probe", "echo", false),
            // Codex function mode: namespace + function, sanitized.
            (s("echo"), Some("mcp__probe".into()), "probe", "echo", true),
            (
                s("get_guide"),
                Some("mcp__music_studio".into()),
                "music-studio",
                "get-guide",
                true,
            ),
            (
                s("echo"),
                Some("mcp__probe".into()),
                "probe",
                "other",
                false,
            ),
            (s("echo"), Some("mcp__other".into()), "probe", "echo", false),
            (s("echo"), Some("probe".into()), "probe", "echo", false),
            // Codex flat form (older builds and hooks): namespace + `__` + name.
            (
                s("mcp__music_studio__get_guide"),
                None,
                "music-studio",
                "get-guide",
                true,
            ),
            // Code mode: `functions.exec` never names an MCP tool.
            (s("exec"), Some("functions".into()), "probe", "echo", false),
            (s("exec"), None, "probe", "echo", false),
            // Collisions: the suffix must be the digest of what Codex hashes.
            (
                s("lookup"),
                Some(format!("mcp__basic_server_{ns_hash}")),
                "basic-server",
                "lookup",
                true,
            ),
            (
                s("lookup"),
                Some("mcp__basic_server_000000000000".into()),
                "basic-server",
                "lookup",
                false,
            ),
            (
                format!("lookup_{tool_hash}"),
                Some("mcp__basic_server".into()),
                "basic-server",
                "lookup",
                true,
            ),
            (
                format!("echo_{probe_hash}"),
                Some("mcp__probe".into()),
                "probe",
                "echo",
                true,
            ),
            (
                format!("echo_{tool_hash}"),
                Some("mcp__probe".into()),
                "probe",
                "echo",
                false,
            ),
        ];
        for (name, ns, alias, tool, want) in cases {
            assert_eq!(
                resolves(&name, ns.as_deref(), alias, tool),
                want,
                "{name:?} in {ns:?} for {alias}/{tool}"
            );
        }
    }

    /// A name too long for the 128-byte cap is cut and hashed; a cut at the older 64-byte cap
    /// is not a name the translation gives.
    #[test]
    fn long_names_are_truncated_then_hashed() {
        let tool = "a".repeat(200);
        let h = sha12(&format!("srv\0srv\0\0{tool}\0{tool}"));
        let ns = "mcp__srv";
        for (cap, want) in [(128usize, true), (64, false)] {
            let keep = cap - ns.len() - 2 - 13;
            let name = format!("{}_{h}", "a".repeat(keep));
            assert_eq!(ns.len() + 2 + name.len(), cap);
            assert_eq!(resolves(&name, Some(ns), "srv", &tool), want, "cap {cap}");
            let flat = format!("{ns}__{name}");
            assert_eq!(resolves(&flat, None, "srv", &tool), want, "flat cap {cap}");
        }
        // Cut at a length no cap produces: rejected.
        let name = format!("{}_{h}", "a".repeat(10));
        assert!(!resolves(&name, Some(ns), "srv", &tool));
        // Untruncated, too long for the cap: Codex never shows it.
        assert!(!resolves(&tool, Some(ns), "srv", &tool));
        // Exactly at the cap it is shown as is.
        let fits = "b".repeat(128 - ns.len() - 2);
        assert!(resolves(&fits, Some(ns), "srv", &fits));
        assert!(!resolves(
            &format!("{fits}b"),
            Some(ns),
            "srv",
            &format!("{fits}b")
        ));
    }

    /// A namespace that ends in `__` keeps the ending after its collision suffix.
    #[test]
    fn a_namespace_ending_in_the_delimiter_keeps_it_after_the_suffix() {
        let h = sha12("probe__\0probe__\0");
        assert!(resolves(
            "echo",
            Some(&format!("mcp__probe_{h}__")),
            "probe__",
            "echo"
        ));
        assert!(!resolves(
            "echo",
            Some(&format!("mcp__probe__{h}")),
            "probe__",
            "echo"
        ));
    }

    /// When the namespace leaves no room for even the suffix, the namespace is cut instead.
    #[test]
    fn a_huge_namespace_is_cut_and_the_name_is_only_the_suffix() {
        let alias = "s".repeat(150);
        let h = sha12(&format!("{alias}\0{alias}\0\0t\0t"));
        let ns = format!("mcp__{alias}");
        let cut = &ns[..64 - 13 - 2];
        assert!(!resolves(&format!("_{h}"), Some(cut), &alias, "t"));
        let cut128 = &ns[..128 - 13 - 2];
        assert!(resolves(&format!("_{h}"), Some(cut128), &alias, "t"));
        assert!(!resolves(&format!("_{h}"), Some(&ns[..40]), &alias, "t"));
    }
}
