//! Pointing Codex at the relay and routing its stdio MCP servers through `windowtap wrap`.
//!
//! Codex reads MCP servers from `$CODEX_HOME/config.toml` (`[mcp_servers.NAME]`) and from
//! `-c key=value` overrides, which it applies in order. windowtap merges both the same way,
//! then appends overrides of its own: `openai_base_url` to the relay, and for every stdio
//! server `mcp_servers.NAME.command` / `.args` running the original command under the wrapper.
//! A custom `model_provider` with its own `base_url`, or an `openai_base_url` the user set
//! (in `config.toml` or with `-c`), is sent through a mount of its own whose upstream is that
//! URL: the user's key goes where the user sent it, never to a default upstream instead.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use toml::{Table, Value};

use crate::plan::{Server, WrapWith};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// Decide from `$CODEX_HOME/auth.json`.
    Auto,
    ApiKey,
    ChatGpt,
}

#[derive(Debug)]
pub struct Plan {
    pub args: Vec<String>,
    pub servers: Vec<Server>,
    /// Mounts the relay must add (name, upstream URL) for custom model providers.
    pub mounts: Vec<(String, String)>,
    /// The base URL Codex was pointed at (for the summary).
    pub base_url: String,
}

/// Splits a dotted TOML key, honouring quoted segments (`mcp_servers."a.b".command`).
fn key_path(key: &str) -> anyhow::Result<Vec<String>> {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut chars = key.trim().chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' if quoted => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            '.' if !quoted => parts.push(std::mem::take(&mut cur).trim().to_string()),
            c => cur.push(c),
        }
    }
    if quoted {
        bail!("codex: -c key `{key}` has an unclosed quote");
    }
    parts.push(cur.trim().to_string());
    if parts.iter().any(String::is_empty) {
        bail!("codex: -c key `{key}` has an empty part");
    }
    Ok(parts)
}

/// A `-c` value: TOML if it parses, else the literal string (as Codex does).
fn parse_value(raw: &str) -> Value {
    match format!("v = {raw}").parse::<Table>() {
        Ok(mut t) => t
            .remove("v")
            .unwrap_or_else(|| Value::String(raw.to_string())),
        Err(_) => Value::String(raw.to_string()),
    }
}

fn set_path(root: &mut Table, path: &[String], value: Value) {
    let (last, parents) = path
        .split_last()
        .expect("key_path never returns an empty path");
    let mut t = root;
    for p in parents {
        let entry = t
            .entry(p.clone())
            .or_insert_with(|| Value::Table(Table::new()));
        if !entry.is_table() {
            *entry = Value::Table(Table::new());
        }
        t = entry.as_table_mut().expect("just made a table");
    }
    t.insert(last.clone(), value);
}

/// `-c` / `--config` overrides in order, with the index of each in `args`.
fn overrides(args: &[String]) -> anyhow::Result<Vec<(Vec<String>, Value)>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a == "--" {
            break;
        }
        let kv = if a == "-c" || a == "--config" {
            i += 1;
            Some(
                args.get(i)
                    .with_context(|| format!("codex: {a} needs key=value"))?
                    .clone(),
            )
        } else {
            a.strip_prefix("--config=").map(str::to_string)
        };
        if let Some(kv) = kv {
            let Some((k, v)) = kv.split_once('=') else {
                bail!("codex: -c `{kv}` is not key=value");
            };
            out.push((key_path(k)?, parse_value(v.trim())));
        }
        i += 1;
    }
    Ok(out)
}

/// A key segment as TOML writes it: bare when it can be, quoted otherwise.
fn toml_key(k: &str) -> String {
    if !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        k.to_string()
    } else {
        Value::String(k.to_string()).to_string()
    }
}

pub fn plan(
    args: &[String],
    codex_home: &Path,
    wrap: &WrapWith,
    relay: &str,
    auth: Auth,
) -> anyhow::Result<Plan> {
    let ignore_user_config = args.iter().any(|a| a == "--ignore-user-config");
    let mut config = Table::new();
    let config_path = codex_home.join("config.toml");
    if !ignore_user_config && config_path.is_file() {
        let text = std::fs::read_to_string(&config_path)
            .with_context(|| format!("codex: reading {}", config_path.display()))?;
        config = text
            .parse::<Table>()
            .with_context(|| format!("codex: {} is not valid TOML", config_path.display()))?;
    }
    for (path, value) in overrides(args)? {
        set_path(&mut config, &path, value);
    }

    let mut extra: Vec<String> = Vec::new();
    let mut servers = Vec::new();
    let mut mounts = Vec::new();

    // Where the model traffic goes.
    let provider = config
        .get("model_provider")
        .and_then(Value::as_str)
        .unwrap_or("openai")
        .to_string();
    let custom_base = config
        .get("model_providers")
        .and_then(|p| p.get(&provider))
        .and_then(|p| p.get("base_url"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let base_url = match (provider.as_str(), custom_base) {
        (p, Some(upstream)) if p != "openai" => {
            // A custom provider: its own mount, named after it.
            let mount: String = format!(
                "codex-{}",
                p.chars()
                    .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                    .collect::<String>()
            );
            mounts.push((mount.clone(), upstream.trim_end_matches('/').to_string()));
            let url = format!("{relay}/{mount}");
            extra.push("-c".into());
            extra.push(format!(
                "model_providers.{}.base_url={}",
                toml_key(p),
                Value::String(url.clone())
            ));
            url
        }
        _ => match config.get("openai_base_url") {
            // The user's own base URL (a gateway, a proxy, a local model server) is where their
            // key is meant to go: it becomes the upstream of a mount of its own, and Codex is
            // pointed at that mount. Overriding it with the relay's default mount would send
            // their traffic, and their key, to api.openai.com instead.
            Some(Value::String(upstream)) => {
                let mount = USER_BASE_MOUNT.to_string();
                mounts.push((mount.clone(), upstream.trim_end_matches('/').to_string()));
                let url = format!("{relay}/{mount}");
                extra.push("-c".into());
                extra.push(format!("openai_base_url={}", Value::String(url.clone())));
                url
            }
            Some(_) => bail!(
                "codex: openai_base_url (from {} or -c) must be a string URL",
                config_path.display()
            ),
            None => default_base(relay, codex_home, auth, &mut extra),
        },
    };

    if let Some(Value::Table(table)) = config.get("mcp_servers") {
        for (name, def) in table {
            let Some(def) = def.as_table() else {
                bail!("codex: mcp_servers.{name} must be a table");
            };
            let Some(command) = def.get("command").and_then(Value::as_str) else {
                servers.push(Server {
                    alias: name.clone(),
                    origin: "codex config".into(),
                    observed: false,
                    note: Some("remote (url) server, not a stdio one".into()),
                    rewrapped: false,
                });
                continue;
            };
            let args: Vec<String> = match def.get("args") {
                None => Vec::new(),
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|x| x.as_str().map(str::to_string))
                    .collect::<Option<_>>()
                    .with_context(|| format!("codex: mcp_servers.{name}.args must be strings"))?,
                Some(_) => bail!("codex: mcp_servers.{name}.args must be an array"),
            };
            let rewrapped = wrap.already_wrapped(command, &args).is_some();
            let (cmd, wargs) = wrap.command(name, command, &args);
            let key = format!("mcp_servers.{}", toml_key(name));
            extra.push("-c".into());
            extra.push(format!("{key}.command={}", Value::String(cmd)));
            extra.push("-c".into());
            extra.push(format!(
                "{key}.args={}",
                Value::Array(wargs.into_iter().map(Value::String).collect())
            ));
            servers.push(Server {
                alias: name.clone(),
                origin: "codex config".into(),
                observed: true,
                note: None,
                rewrapped,
            });
        }
    }

    // Ours go last, so they win over the same keys given earlier; before any `--`.
    let at = args.iter().position(|a| a == "--").unwrap_or(args.len());
    let mut out: Vec<String> = args[..at].to_vec();
    out.extend(extra);
    out.extend(args[at..].iter().cloned());
    Ok(Plan {
        args: out,
        servers,
        mounts,
        base_url,
    })
}

/// The mount name for a base URL the user gave Codex (`openai_base_url`).
pub const USER_BASE_MOUNT: &str = "codex-openai";

/// Codex's own endpoint through the relay: `/chatgpt` for a ChatGPT login, else `/openai/v1`.
fn default_base(relay: &str, codex_home: &Path, auth: Auth, extra: &mut Vec<String>) -> String {
    let chatgpt = match auth {
        Auth::ChatGpt => true,
        Auth::ApiKey => false,
        Auth::Auto => uses_chatgpt_login(codex_home),
    };
    let url = if chatgpt {
        format!("{relay}/chatgpt")
    } else {
        format!("{relay}/openai/v1")
    };
    extra.push("-c".into());
    extra.push(format!("openai_base_url={}", Value::String(url.clone())));
    url
}

/// Codex's home: $CODEX_HOME, else ~/.codex.
pub fn default_home() -> PathBuf {
    std::env::var_os("CODEX_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".codex")))
        .unwrap_or_else(|| PathBuf::from(".codex"))
}

/// `auth.json` says ChatGPT login: `auth_mode` "chatgpt", or tokens without an API key.
pub fn uses_chatgpt_login(codex_home: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(codex_home.join("auth.json")) else {
        return false;
    };
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
        return false;
    };
    if let Some(mode) = v.get("auth_mode").and_then(|m| m.as_str()) {
        return mode.eq_ignore_ascii_case("chatgpt");
    }
    let has_key = v.get("OPENAI_API_KEY").is_some_and(|k| k.is_string());
    let has_tokens = v.get("tokens").is_some_and(|t| t.is_object());
    has_tokens && !has_key
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    fn wrap() -> WrapWith {
        WrapWith {
            exe: "/opt/windowtap".into(),
            ingest: "/run/wt.sock".into(),
        }
    }

    const RELAY: &str = "http://127.0.0.1:9000";

    #[test]
    fn servers_from_overrides_are_wrapped_and_the_base_url_points_at_the_relay() {
        let home = tempfile::tempdir().unwrap();
        let args = s(&[
            "exec",
            "--json",
            "-c",
            r#"mcp_servers.probe.command="bb""#,
            "-c",
            r#"mcp_servers.probe.args=["/abs/probe.clj", "x y"]"#,
            "hello",
        ]);
        let p = super::plan(&args, home.path(), &wrap(), RELAY, Auth::Auto).unwrap();
        assert_eq!(&p.args[..7], &args[..]);
        assert_eq!(
            &p.args[7..],
            &s(&[
                "-c",
                r#"openai_base_url="http://127.0.0.1:9000/openai/v1""#,
                "-c",
                r#"mcp_servers.probe.command="/opt/windowtap""#,
                "-c",
                r#"mcp_servers.probe.args=["wrap", "--alias", "probe", "--ingest", "/run/wt.sock", "--", "bb", "/abs/probe.clj", "x y"]"#,
            ])[..]
        );
        assert_eq!(p.base_url, "http://127.0.0.1:9000/openai/v1");
        assert!(p.mounts.is_empty());
    }

    #[test]
    fn config_toml_servers_inline_tables_and_remote_ones() {
        let home = tempfile::tempdir().unwrap();
        std::fs::write(
            home.path().join("config.toml"),
            "[mcp_servers.files]\ncommand = \"npx\"\nargs = [\"-y\", \"fs\"]\n\n[mcp_servers.docs]\nurl = \"https://example.invalid/mcp\"\n",
        )
        .unwrap();
        let args = s(&[
            "exec",
            "-c",
            r#"mcp_servers."my.srv"={command="srv", args=["a"]}"#,
            "go",
        ]);
        let p = super::plan(&args, home.path(), &wrap(), RELAY, Auth::ApiKey).unwrap();
        let joined = p.args.join(" ");
        assert!(joined.contains(r#"mcp_servers.files.args=["wrap", "--alias", "files", "--ingest", "/run/wt.sock", "--", "npx", "-y", "fs"]"#), "{joined}");
        assert!(
            joined.contains(r#"mcp_servers."my.srv".command="/opt/windowtap""#),
            "{joined}"
        );
        assert!(joined.contains(r#""--alias", "my.srv""#), "{joined}");
        let seen: Vec<(&str, bool)> = p
            .servers
            .iter()
            .map(|s| (s.alias.as_str(), s.observed))
            .collect();
        assert!(
            seen.contains(&("docs", false))
                && seen.contains(&("files", true))
                && seen.contains(&("my.srv", true)),
            "{seen:?}"
        );

        let ignored = super::plan(
            &s(&["exec", "--ignore-user-config", "x"]),
            home.path(),
            &wrap(),
            RELAY,
            Auth::ApiKey,
        )
        .unwrap();
        assert!(ignored.servers.is_empty());
    }

    #[test]
    fn chatgpt_login_goes_to_the_chatgpt_mount() {
        let home = tempfile::tempdir().unwrap();
        std::fs::write(
            home.path().join("auth.json"),
            r#"{"auth_mode":"chatgpt","tokens":{}}"#,
        )
        .unwrap();
        let p = super::plan(&s(&["exec", "x"]), home.path(), &wrap(), RELAY, Auth::Auto).unwrap();
        assert_eq!(p.base_url, "http://127.0.0.1:9000/chatgpt");
        std::fs::write(
            home.path().join("auth.json"),
            r#"{"OPENAI_API_KEY":"k","tokens":null}"#,
        )
        .unwrap();
        let p2 = super::plan(&s(&["exec", "x"]), home.path(), &wrap(), RELAY, Auth::Auto).unwrap();
        assert_eq!(p2.base_url, "http://127.0.0.1:9000/openai/v1");
        let p3 = super::plan(
            &s(&["exec", "x"]),
            home.path(),
            &wrap(),
            RELAY,
            Auth::ChatGpt,
        )
        .unwrap();
        assert_eq!(p3.base_url, "http://127.0.0.1:9000/chatgpt");
    }

    #[test]
    fn a_custom_provider_gets_a_mount_of_its_own() {
        let home = tempfile::tempdir().unwrap();
        let args = s(&[
            "exec",
            "-c",
            "model_provider=fake",
            "-c",
            r#"model_providers.fake={name="fake", base_url="http://127.0.0.1:4000/v1", wire_api="responses"}"#,
            "--",
            "prompt",
        ]);
        let p = super::plan(&args, home.path(), &wrap(), RELAY, Auth::Auto).unwrap();
        assert_eq!(
            p.mounts,
            vec![(
                "codex-fake".to_string(),
                "http://127.0.0.1:4000/v1".to_string()
            )]
        );
        assert_eq!(p.base_url, "http://127.0.0.1:9000/codex-fake");
        let n = p.args.len();
        assert_eq!(
            &p.args[n - 2..],
            &s(&["--", "prompt"])[..],
            "ours go before `--`"
        );
        assert!(p.args.contains(
            &r#"model_providers.fake.base_url="http://127.0.0.1:9000/codex-fake""#.to_string()
        ));
    }

    #[test]
    fn the_users_openai_base_url_becomes_the_upstream_of_the_mount_codex_is_pointed_at() {
        let home = tempfile::tempdir().unwrap();
        std::fs::write(
            home.path().join("config.toml"),
            "openai_base_url = \"https://gateway.example/v1/\"\n",
        )
        .unwrap();
        for auth in [Auth::ApiKey, Auth::ChatGpt] {
            let p = super::plan(&s(&["exec", "x"]), home.path(), &wrap(), RELAY, auth).unwrap();
            assert_eq!(
                p.mounts,
                vec![(
                    "codex-openai".to_string(),
                    "https://gateway.example/v1".to_string()
                )]
            );
            assert_eq!(p.base_url, "http://127.0.0.1:9000/codex-openai");
            assert_eq!(
                p.args.last().unwrap(),
                r#"openai_base_url="http://127.0.0.1:9000/codex-openai""#
            );
        }
        // A -c override wins over config.toml, as in Codex.
        let args = s(&[
            "exec",
            "-c",
            r#"openai_base_url="http://127.0.0.1:4000""#,
            "x",
        ]);
        let p = super::plan(&args, home.path(), &wrap(), RELAY, Auth::Auto).unwrap();
        assert_eq!(
            p.mounts,
            vec![(
                "codex-openai".to_string(),
                "http://127.0.0.1:4000".to_string()
            )]
        );
        let bad = s(&["exec", "-c", "openai_base_url=3", "x"]);
        let e = super::plan(&bad, home.path(), &wrap(), RELAY, Auth::Auto).unwrap_err();
        assert!(format!("{e:#}").contains("must be a string URL"), "{e:#}");
    }

    #[test]
    fn a_server_already_under_windowtap_wrap_is_wrapped_once() {
        let home = tempfile::tempdir().unwrap();
        // examples/mcp/codex.config.toml as written.
        let example = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/mcp/codex.config.toml"),
        )
        .unwrap();
        std::fs::write(home.path().join("config.toml"), example).unwrap();
        let p = super::plan(
            &s(&["exec", "x"]),
            home.path(),
            &wrap(),
            RELAY,
            Auth::ApiKey,
        )
        .unwrap();
        assert!(p.args.contains(
            &r#"mcp_servers.everything.args=["wrap", "--alias", "everything", "--ingest", "/run/wt.sock", "--", "npx", "-y", "@modelcontextprotocol/server-everything"]"#.to_string()
        ), "{:?}", p.args);
        assert!(p.servers.iter().all(|s| s.rewrapped), "{:?}", p.servers);
    }

    #[test]
    fn bad_overrides_are_named() {
        let home = tempfile::tempdir().unwrap();
        let e = super::plan(&s(&["-c"]), home.path(), &wrap(), RELAY, Auth::Auto).unwrap_err();
        assert!(format!("{e:#}").contains("needs key=value"));
        let e = super::plan(
            &s(&["-c", "novalue"]),
            home.path(),
            &wrap(),
            RELAY,
            Auth::Auto,
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("is not key=value"));
        let e = super::plan(
            &s(&[
                "-c",
                "mcp_servers.x.args=\"a\"",
                "-c",
                "mcp_servers.x.command=\"c\"",
            ]),
            home.path(),
            &wrap(),
            RELAY,
            Auth::Auto,
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("args must be an array"));
        std::fs::write(home.path().join("config.toml"), "[[[").unwrap();
        let e = super::plan(&s(&["exec"]), home.path(), &wrap(), RELAY, Auth::Auto).unwrap_err();
        assert!(format!("{e:#}").contains("is not valid TOML"));
    }
}
