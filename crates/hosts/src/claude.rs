//! Routing Claude Code's stdio MCP servers through `windowtap wrap`.
//!
//! Claude Code takes MCP servers from `--mcp-config` (files or inline JSON, several values per
//! flag) and, unless `--strict-mcp-config` is given, from the user's and the project's
//! configuration. A server defined in a `--mcp-config` owns its name over an inherited one
//! (seed 004), so every stdio server is re-declared, wrapped, in a private copy passed with
//! `--mcp-config`. Remote servers (http, sse, ws) are left alone and named as not observed.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde_json::{Map, Value};

use crate::plan::{Server, WrapWith};

/// The rewritten command line and what was found.
#[derive(Debug)]
pub struct Plan {
    pub args: Vec<String>,
    pub servers: Vec<Server>,
}

/// Where Claude Code keeps configuration that can declare MCP servers.
#[derive(Debug, Clone)]
pub struct Sources {
    /// `~/.claude.json` (user scope, and per-project "local" scope under `projects`).
    pub user_config: Option<PathBuf>,
    /// `~/.claude/settings.json` (the user's settings, whose `env` may set the base URL).
    pub user_settings: Option<PathBuf>,
    /// The working directory (for `.mcp.json` and the local scope).
    pub cwd: PathBuf,
}

fn is_flag(a: &str) -> bool {
    a.starts_with('-')
}

/// Rewrites `claude` arguments so that every stdio MCP server runs under the wrapper. Wrapped
/// copies are written into `dir` (a private directory).
pub fn plan(
    args: &[String],
    sources: &Sources,
    wrap: &WrapWith,
    dir: &Path,
) -> anyhow::Result<Plan> {
    let strict = args.iter().any(|a| a == "--strict-mcp-config");
    let mut out = Vec::with_capacity(args.len() + 2);
    let mut servers = Vec::new();
    let mut n = 0usize;
    let mut i = 0usize;
    while i < args.len() {
        let a = &args[i];
        if a == "--" {
            out.extend(args[i..].iter().cloned());
            break;
        }
        let inline = a.strip_prefix("--mcp-config=");
        if a == "--mcp-config" || inline.is_some() {
            out.push("--mcp-config".to_string());
            let mut values: Vec<String> = Vec::new();
            if let Some(v) = inline {
                values.push(v.to_string());
            } else {
                // The flag takes every following value up to the next flag, as Claude Code does.
                while i + 1 < args.len()
                    && !is_flag(&args[i + 1])
                    && looks_like_config(&args[i + 1])
                {
                    i += 1;
                    values.push(args[i].clone());
                }
                if values.is_empty() {
                    // A value that names a JSON file that is not there: say that, not that
                    // one is needed. Only a `.json` name is echoed: any other word after the
                    // flag may be the prompt.
                    if let Some(v) = args
                        .get(i + 1)
                        .filter(|v| !is_flag(v) && v.ends_with(".json"))
                    {
                        bail!(
                            "claude: --mcp-config {v}: no such file (the flag takes JSON files \
                             or JSON strings)"
                        );
                    }
                    bail!("claude: --mcp-config needs a file or a JSON string");
                }
            }
            for v in values {
                let (config, origin) = load_config(&v)?;
                n += 1;
                let path = dir.join(format!("mcp-config-{n}.json"));
                let wrapped = wrap_config(&config, &origin, wrap, &mut servers)?;
                write_private(&path, &wrapped)?;
                out.push(path.display().to_string());
            }
            i += 1;
            continue;
        }
        out.push(a.clone());
        i += 1;
    }

    if !strict {
        // Servers Claude Code would inherit: wrap them under the same names, unless a
        // --mcp-config definition already owns the name.
        let explicit: Vec<String> = servers.iter().map(|s| s.alias.clone()).collect();
        let mut inherited = Map::new();
        for (_, table) in inherited_servers(sources) {
            for (name, def) in table {
                if !explicit.contains(&name) {
                    inherited.insert(name, def);
                }
            }
        }
        if !inherited.is_empty() {
            let config = Value::Object(Map::from_iter([(
                "mcpServers".to_string(),
                Value::Object(inherited),
            )]));
            n += 1;
            let path = dir.join(format!("mcp-config-{n}.json"));
            let wrapped = wrap_config(&config, "inherited configuration", wrap, &mut servers)?;
            write_private(&path, &wrapped)?;
            // At the end (before any `--`): the flag takes every following non-flag value, so
            // it must not stand in front of the prompt.
            let at = out.iter().position(|a| a == "--").unwrap_or(out.len());
            out.insert(at, path.display().to_string());
            out.insert(at, "--mcp-config".to_string());
        }
    }
    Ok(Plan { args: out, servers })
}

/// The `--settings` value given on the command line, if any (`--settings V` or `--settings=V`).
fn settings_arg(args: &[String]) -> Option<&str> {
    let end = args.iter().position(|a| a == "--").unwrap_or(args.len());
    let args = &args[..end];
    args.iter().enumerate().find_map(|(i, a)| {
        if a == "--settings" {
            args.get(i + 1).map(String::as_str)
        } else {
            a.strip_prefix("--settings=")
        }
    })
}

/// A settings value: inline JSON or a file. `None` for a file that is not there or not JSON
/// (Claude Code goes on without it).
fn read_settings(v: &str) -> Option<Value> {
    if v.trim_start().starts_with('{') {
        return serde_json::from_str(v).ok();
    }
    serde_json::from_str(&std::fs::read_to_string(v).ok()?).ok()
}

/// The `ANTHROPIC_BASE_URL` Claude Code's settings set, with where: the `env` of its settings
/// is applied over the process environment, so a base URL there wins over the one `run` puts
/// in the host's environment, and the host would talk to its upstream directly, past the
/// relay, with nothing observed. Scopes, most binding first: `--settings`, the project's
/// `.claude/settings.local.json` and `.claude/settings.json`, then `~/.claude/settings.json`.
/// (Managed settings, above all of these, are an administrator's and not read here.)
pub fn settings_base_url(
    args: &[String],
    sources: &Sources,
) -> anyhow::Result<Option<(String, String)>> {
    let mut scopes: Vec<(String, Option<Value>)> = Vec::new();
    if let Some(v) = settings_arg(args) {
        let value = read_settings(v)
            .with_context(|| "claude: --settings is neither a JSON string nor a JSON file")?;
        scopes.push(("--settings".to_string(), Some(value)));
    }
    for rel in [".claude/settings.local.json", ".claude/settings.json"] {
        let path = sources.cwd.join(rel);
        scopes.push((rel.to_string(), read_settings(&path.display().to_string())));
    }
    if let Some(p) = &sources.user_settings {
        scopes.push((
            "~/.claude/settings.json".to_string(),
            read_settings(&p.display().to_string()),
        ));
    }
    for (origin, value) in scopes {
        let url = value
            .as_ref()
            .and_then(|v| v.get("env"))
            .and_then(|e| e.get("ANTHROPIC_BASE_URL"))
            .and_then(Value::as_str)
            .filter(|u| !u.is_empty());
        if let Some(url) = url {
            return Ok(Some((url.to_string(), origin)));
        }
    }
    Ok(None)
}

/// When the settings set the base URL (see [`settings_base_url`]), the host's arguments with
/// the relay's URL in a `--settings` that wins over them: the user's own `--settings` as a
/// private copy with `env.ANTHROPIC_BASE_URL` replaced, or a `--settings` of run's own.
/// Otherwise the arguments unchanged (the environment reaches the host).
pub fn point_settings(
    args: Vec<String>,
    sources: &Sources,
    dir: &Path,
    relay_url: &str,
) -> anyhow::Result<Vec<String>> {
    if settings_base_url(&args, sources)?.is_none() {
        return Ok(args);
    }
    let path = dir.join("settings.json");
    let mut settings = settings_arg(&args)
        .and_then(read_settings)
        .unwrap_or_else(|| Value::Object(Map::new()));
    let Some(obj) = settings.as_object_mut() else {
        bail!("claude: --settings must be a JSON object");
    };
    let env = obj
        .entry("env")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(env) = env.as_object_mut() else {
        bail!("claude: the `env` of --settings must be an object");
    };
    env.insert(
        "ANTHROPIC_BASE_URL".to_string(),
        Value::String(relay_url.to_string()),
    );
    write_private(&path, &settings)?;
    let path = path.display().to_string();
    let end = args.iter().position(|a| a == "--").unwrap_or(args.len());
    let mut out = Vec::with_capacity(args.len() + 2);
    let mut replaced = false;
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if i < end && !replaced && a == "--settings" {
            out.push(a.clone());
            out.push(path.clone());
            replaced = true;
            i += 2;
            continue;
        }
        if i < end && !replaced && a.starts_with("--settings=") {
            out.push(format!("--settings={path}"));
            replaced = true;
            i += 1;
            continue;
        }
        out.push(a.clone());
        i += 1;
    }
    if !replaced {
        let at = out.iter().position(|a| a == "--").unwrap_or(out.len());
        out.insert(at, path);
        out.insert(at, "--settings".to_string());
    }
    Ok(out)
}

/// A `--mcp-config` value is a JSON string or a path; anything else ends the value list.
fn looks_like_config(v: &str) -> bool {
    v.trim_start().starts_with('{') || Path::new(v).is_file()
}

fn load_config(v: &str) -> anyhow::Result<(Value, String)> {
    if v.trim_start().starts_with('{') {
        let value = serde_json::from_str(v)
            .context("claude: --mcp-config JSON string is not valid JSON")?;
        return Ok((value, "--mcp-config JSON".to_string()));
    }
    let text =
        std::fs::read_to_string(v).with_context(|| format!("claude: reading --mcp-config {v}"))?;
    let value =
        serde_json::from_str(&text).with_context(|| format!("claude: {v} is not valid JSON"))?;
    Ok((value, v.to_string()))
}

/// The same configuration with every stdio server's command replaced by the wrapper.
fn wrap_config(
    config: &Value,
    origin: &str,
    wrap: &WrapWith,
    servers: &mut Vec<Server>,
) -> anyhow::Result<Value> {
    let mut config = config.clone();
    let Some(table) = config.get_mut("mcpServers") else {
        return Ok(config);
    };
    let Some(table) = table.as_object_mut() else {
        bail!("claude: {origin}: `mcpServers` must be an object");
    };
    for (name, def) in table.iter_mut() {
        let Some(def) = def.as_object_mut() else {
            bail!("claude: {origin}: server `{name}` must be an object");
        };
        let kind = def.get("type").and_then(Value::as_str).unwrap_or("stdio");
        let command = def
            .get("command")
            .and_then(Value::as_str)
            .map(str::to_string);
        match (kind, command) {
            ("stdio", Some(command)) => {
                let args: Vec<String> = match def.get("args") {
                    None | Some(Value::Null) => Vec::new(),
                    Some(Value::Array(a)) => a
                        .iter()
                        .map(|x| x.as_str().map(str::to_string))
                        .collect::<Option<_>>()
                        .with_context(|| {
                            format!("claude: {origin}: server `{name}`: `args` must be strings")
                        })?,
                    Some(_) => bail!("claude: {origin}: server `{name}`: `args` must be an array"),
                };
                let rewrapped = wrap.already_wrapped(&command, &args).is_some();
                let (cmd, wargs) = wrap.command(name, &command, &args);
                def.insert("command".into(), Value::String(cmd));
                def.insert(
                    "args".into(),
                    Value::Array(wargs.into_iter().map(Value::String).collect()),
                );
                servers.push(Server {
                    alias: name.clone(),
                    origin: origin.to_string(),
                    observed: true,
                    note: None,
                    rewrapped,
                });
            }
            (kind, _) => servers.push(Server {
                alias: name.clone(),
                origin: origin.to_string(),
                observed: false,
                note: Some(format!("{kind} server, not a stdio one")),
                rewrapped: false,
            }),
        }
    }
    Ok(config)
}

/// MCP server tables Claude Code would load besides `--mcp-config`: user scope and local
/// scope from `~/.claude.json`, project scope from `.mcp.json`. Later sources win, as in
/// Claude Code (local over project over user).
fn inherited_servers(sources: &Sources) -> Vec<(String, Map<String, Value>)> {
    let mut found = Vec::new();
    let read = |p: &Path| -> Option<Value> {
        serde_json::from_str(&std::fs::read_to_string(p).ok()?).ok()
    };
    let user = sources.user_config.as_deref().and_then(read);
    if let Some(Value::Object(t)) = user.as_ref().and_then(|u| u.get("mcpServers")) {
        found.push(("~/.claude.json".to_string(), t.clone()));
    }
    if let Some(Value::Object(t)) = read(&sources.cwd.join(".mcp.json"))
        .as_ref()
        .and_then(|p| p.get("mcpServers"))
    {
        found.push((".mcp.json".to_string(), t.clone()));
    }
    let cwd = sources.cwd.display().to_string();
    if let Some(Value::Object(t)) = user
        .as_ref()
        .and_then(|u| u.get("projects"))
        .and_then(|p| p.get(&cwd))
        .and_then(|p| p.get("mcpServers"))
    {
        found.push(("~/.claude.json (this project)".to_string(), t.clone()));
    }
    // Merge so that a later scope replaces an earlier definition of the same name.
    let mut merged: Vec<(String, Map<String, Value>)> = Vec::new();
    for (origin, table) in found {
        for (name, def) in table {
            for (_, m) in merged.iter_mut() {
                m.remove(&name);
            }
            match merged.iter_mut().find(|(o, _)| *o == origin) {
                Some((_, m)) => {
                    m.insert(name, def);
                }
                None => merged.push((origin.clone(), Map::from_iter([(name, def)]))),
            }
        }
    }
    merged
}

fn write_private(path: &Path, value: &Value) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(serde_json::to_string_pretty(value)?.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wrap() -> WrapWith {
        WrapWith {
            exe: "/opt/windowtap".into(),
            ingest: "/run/wt.sock".into(),
        }
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    fn no_sources(dir: &Path) -> Sources {
        Sources {
            user_config: None,
            user_settings: None,
            cwd: dir.to_path_buf(),
        }
    }

    #[test]
    fn a_config_file_becomes_a_wrapped_private_copy() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("probe.json");
        std::fs::write(
            &cfg,
            r#"{"mcpServers":{"probe":{"command":"bb","args":["/x/probe.clj"],"env":{"K":"V"}},
                "remote":{"type":"http","url":"https://example.invalid/mcp"}}}"#,
        )
        .unwrap();
        let out = tempfile::tempdir().unwrap();
        let args = s(&[
            "-p",
            "--strict-mcp-config",
            "--mcp-config",
            cfg.to_str().unwrap(),
            "--allowedTools",
            "mcp__probe__echo",
            "hi",
        ]);
        let p = super::plan(&args, &no_sources(dir.path()), &wrap(), out.path()).unwrap();
        let copy = out.path().join("mcp-config-1.json");
        assert_eq!(
            p.args,
            s(&[
                "-p",
                "--strict-mcp-config",
                "--mcp-config",
                copy.to_str().unwrap(),
                "--allowedTools",
                "mcp__probe__echo",
                "hi"
            ])
        );
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&copy).unwrap()).unwrap();
        assert_eq!(v["mcpServers"]["probe"]["command"], "/opt/windowtap");
        assert_eq!(
            v["mcpServers"]["probe"]["args"],
            serde_json::json!([
                "wrap",
                "--alias",
                "probe",
                "--ingest",
                "/run/wt.sock",
                "--",
                "bb",
                "/x/probe.clj"
            ])
        );
        assert_eq!(
            v["mcpServers"]["probe"]["env"]["K"], "V",
            "everything else is kept"
        );
        assert_eq!(
            v["mcpServers"]["remote"]["url"],
            "https://example.invalid/mcp"
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&copy).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let observed: Vec<(&str, bool)> = p
            .servers
            .iter()
            .map(|s| (s.alias.as_str(), s.observed))
            .collect();
        assert_eq!(observed, [("probe", true), ("remote", false)]);
    }

    #[test]
    fn inline_json_and_several_values_per_flag() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("b.json");
        std::fs::write(&f, r#"{"mcpServers":{"b":{"command":"b"}}}"#).unwrap();
        let out = tempfile::tempdir().unwrap();
        let args = s(&[
            "--strict-mcp-config",
            "--mcp-config",
            r#"{"mcpServers":{"a":{"command":"a"}}}"#,
            f.to_str().unwrap(),
            "-p",
            "go",
        ]);
        let p = super::plan(&args, &no_sources(dir.path()), &wrap(), out.path()).unwrap();
        assert_eq!(p.args.len(), 6);
        assert_eq!(p.args[1], "--mcp-config");
        assert!(
            p.args[2].ends_with("mcp-config-1.json") && p.args[3].ends_with("mcp-config-2.json")
        );
        assert_eq!(&p.args[4..], &s(&["-p", "go"])[..]);
        let aliases: Vec<&str> = p.servers.iter().map(|s| s.alias.as_str()).collect();
        assert_eq!(aliases, ["a", "b"]);
    }

    #[test]
    fn inherited_servers_are_wrapped_under_their_names_unless_strict() {
        let home = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let user = home.path().join(".claude.json");
        std::fs::write(
            &user,
            format!(
                r#"{{"mcpServers":{{"u":{{"command":"u"}},"shared":{{"command":"old"}}}},
                    "projects":{{"{}":{{"mcpServers":{{"local":{{"command":"l"}}}}}}}}}}"#,
                project.path().display()
            ),
        )
        .unwrap();
        std::fs::write(
            project.path().join(".mcp.json"),
            r#"{"mcpServers":{"shared":{"command":"new"}}}"#,
        )
        .unwrap();
        let sources = Sources {
            user_config: Some(user),
            user_settings: None,
            cwd: project.path().to_path_buf(),
        };
        let out = tempfile::tempdir().unwrap();
        let p = super::plan(&s(&["-p", "hi"]), &sources, &wrap(), out.path()).unwrap();
        assert_eq!(&p.args[..2], &s(&["-p", "hi"])[..]);
        assert_eq!(p.args[2], "--mcp-config");
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&p.args[3]).unwrap()).unwrap();
        let names: Vec<&String> = v["mcpServers"].as_object().unwrap().keys().collect();
        assert_eq!(names.len(), 3, "{v}");
        assert_eq!(
            v["mcpServers"]["shared"]["args"][6], "new",
            "the project scope wins over the user scope"
        );

        let out = tempfile::tempdir().unwrap();
        let p = super::plan(
            &s(&["--strict-mcp-config", "-p", "hi"]),
            &sources,
            &wrap(),
            out.path(),
        )
        .unwrap();
        assert_eq!(p.args, s(&["--strict-mcp-config", "-p", "hi"]));
        assert!(p.servers.is_empty());
    }

    #[test]
    fn a_server_already_under_windowtap_wrap_is_wrapped_once() {
        let dir = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        // examples/mcp/claude.mcp.json as written, and one with the wrapper's own path.
        let config = r#"{"mcpServers":{
            "everything":{"command":"windowtap","args":["wrap","--alias","everything","--","npx","-y","@modelcontextprotocol/server-everything"]},
            "other":{"command":"/opt/windowtap","args":["wrap","--alias","x","--ingest","/elsewhere.sock","--","srv","a"]},
            "plain":{"command":"srv"}}}"#;
        let p = super::plan(
            &s(&["--strict-mcp-config", "--mcp-config", config]),
            &no_sources(dir.path()),
            &wrap(),
            out.path(),
        )
        .unwrap();
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&p.args[2]).unwrap()).unwrap();
        assert_eq!(v["mcpServers"]["everything"]["command"], "/opt/windowtap");
        assert_eq!(
            v["mcpServers"]["everything"]["args"],
            serde_json::json!([
                "wrap",
                "--alias",
                "everything",
                "--ingest",
                "/run/wt.sock",
                "--",
                "npx",
                "-y",
                "@modelcontextprotocol/server-everything"
            ])
        );
        assert_eq!(
            v["mcpServers"]["other"]["args"],
            serde_json::json!([
                "wrap",
                "--alias",
                "other",
                "--ingest",
                "/run/wt.sock",
                "--",
                "srv",
                "a"
            ]),
            "the host's name for the server is the alias, and run's socket the one reported to"
        );
        let rewrapped: Vec<(&str, bool)> = p
            .servers
            .iter()
            .map(|s| (s.alias.as_str(), s.rewrapped))
            .collect();
        assert_eq!(
            rewrapped,
            [("everything", true), ("other", true), ("plain", false)]
        );
    }

    #[test]
    fn a_base_url_in_the_settings_is_the_upstream_and_a_settings_flag_points_at_the_relay() {
        let home = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let user = home.path().join("settings.json");
        std::fs::write(
            &user,
            r#"{"env":{"ANTHROPIC_BASE_URL":"https://user.example"},"model":"x"}"#,
        )
        .unwrap();
        let sources = Sources {
            user_config: None,
            user_settings: Some(user),
            cwd: project.path().to_path_buf(),
        };
        let args = s(&["-p", "hi"]);
        assert_eq!(
            settings_base_url(&args, &sources).unwrap(),
            Some((
                "https://user.example".to_string(),
                "~/.claude/settings.json".to_string()
            ))
        );
        // The project's local settings win over the user's.
        std::fs::create_dir(project.path().join(".claude")).unwrap();
        std::fs::write(
            project.path().join(".claude/settings.local.json"),
            r#"{"env":{"ANTHROPIC_BASE_URL":"https://local.example"}}"#,
        )
        .unwrap();
        assert_eq!(
            settings_base_url(&args, &sources).unwrap().unwrap().0,
            "https://local.example"
        );
        let pointed =
            point_settings(args.clone(), &sources, out.path(), "http://relay/anthropic").unwrap();
        let copy = out.path().join("settings.json").display().to_string();
        assert_eq!(pointed, s(&["-p", "hi", "--settings", &copy]));
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&copy).unwrap()).unwrap();
        assert_eq!(v["env"]["ANTHROPIC_BASE_URL"], "http://relay/anthropic");

        // The user's own --settings: the most binding scope, replaced by a copy pointing at
        // the relay that keeps the rest.
        let out = tempfile::tempdir().unwrap();
        let given = s(&[
            "--settings",
            r#"{"env":{"ANTHROPIC_BASE_URL":"https://flag.example","K":"V"}}"#,
            "-p",
            "hi",
        ]);
        assert_eq!(
            settings_base_url(&given, &sources).unwrap().unwrap().0,
            "https://flag.example"
        );
        let pointed =
            point_settings(given, &sources, out.path(), "http://relay/anthropic").unwrap();
        let copy = out.path().join("settings.json").display().to_string();
        assert_eq!(pointed, s(&["--settings", &copy, "-p", "hi"]));
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&copy).unwrap()).unwrap();
        assert_eq!(v["env"]["ANTHROPIC_BASE_URL"], "http://relay/anthropic");
        assert_eq!(v["env"]["K"], "V");

        // Nothing in the settings: the arguments stay as they are.
        let out = tempfile::tempdir().unwrap();
        let args = s(&["-p", "hi"]);
        assert_eq!(
            point_settings(
                args.clone(),
                &no_sources(out.path()),
                out.path(),
                "http://r"
            )
            .unwrap(),
            args
        );
    }

    #[test]
    fn bad_configs_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, "{nope").unwrap();
        let err = super::plan(
            &s(&["--mcp-config", bad.to_str().unwrap()]),
            &no_sources(dir.path()),
            &wrap(),
            out.path(),
        )
        .unwrap_err();
        assert!(
            format!("{err:#}").contains("bad.json is not valid JSON"),
            "{err:#}"
        );
        let err = super::plan(
            &s(&[
                "--mcp-config",
                r#"{"mcpServers":{"x":{"command":"c","args":"a b"}}}"#,
            ]),
            &no_sources(dir.path()),
            &wrap(),
            out.path(),
        )
        .unwrap_err();
        assert!(
            format!("{err:#}").contains("`args` must be an array"),
            "{err:#}"
        );
        let err = super::plan(
            &s(&["--mcp-config", "-p"]),
            &no_sources(dir.path()),
            &wrap(),
            out.path(),
        )
        .unwrap_err();
        assert!(format!("{err:#}").contains("needs a file or a JSON string"));
        // A file that is not there is named as missing (issue 40).
        let err = super::plan(
            &s(&["--mcp-config", "nope.json", "-p", "hi"]),
            &no_sources(dir.path()),
            &wrap(),
            out.path(),
        )
        .unwrap_err();
        assert_eq!(
            format!("{err:#}"),
            "claude: --mcp-config nope.json: no such file (the flag takes JSON files or JSON \
             strings)"
        );
    }
}
