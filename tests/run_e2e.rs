//! `windowtap run` end to end, without the real hosts: scripted `claude` and `codex`
//! (python3, tests/fixtures/hosts/) are launched by the built binary against a scripted
//! upstream, start their MCP servers from the configuration `run` rewrote (so through
//! `windowtap wrap`), and go through whole tool loops. The records must attribute each MCP
//! call to its window with the evidence docs/design.md §4 names, the host's exit code must be
//! `run`'s, and the capture must replay to the live records.
//!
//! Everything is on loopback; every wait is bounded (support::WAIT, the hosts' own 20 s).

#[path = "support/otlp.rs"]
mod otlp_support;
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Instant;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use support::*;
use tokio_tungstenite::tungstenite::Message;

/// Planted in the prompt: it must reach no record, capture or log line.
const CANARY: &str = "CANARY-PROMPT-7c2a";

fn python() -> bool {
    let ok = Command::new("python3")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("SKIPPED: python3 is not installed; the scripted hosts need it");
    }
    ok
}

/// The fake codex parses `-c` values with `tomllib` (python 3.11 and later).
fn python_with_tomllib() -> bool {
    if !python() {
        return false;
    }
    let ok = Command::new("python3")
        .args(["-c", "import tomllib"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("SKIPPED: python3 has no tomllib (3.11+); the scripted codex needs it");
    }
    ok
}

fn host(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/hosts")
        .join(name)
        .display()
        .to_string()
}

fn gate_server() -> String {
    host("gate_server.py")
}

/// A finished `windowtap run`.
struct Run {
    status: ExitStatus,
    stderr: String,
    records_path: PathBuf,
    records_text: String,
    /// The attribution records (a `run` header record, if any, left out).
    records: Vec<Value>,
    capture: PathBuf,
    /// The relay's log, which run writes beside the records.
    log: String,
}

/// Runs `windowtap run --records … --capture … RUN_ARGS -- HOST_ARGS` in `dir` (its HOME,
/// state and Codex home too, so nothing of the user's configuration leaks in), bounded.
fn windowtap_run(
    dir: &Path,
    run_args: &[String],
    host_args: &[String],
    env: &[(&str, String)],
) -> Run {
    windowtap_run_with(dir, run_args, host_args, env, |_| {})
}

/// `windowtap_run` that calls `during(pid of run)` once run has started, before waiting.
fn windowtap_run_with(
    dir: &Path,
    run_args: &[String],
    host_args: &[String],
    env: &[(&str, String)],
    during: impl FnOnce(u32),
) -> Run {
    let records_path = dir.join("records.jsonl");
    let capture = dir.join("capture.jsonl");
    let codex_home = dir.join("codex-home");
    std::fs::create_dir_all(&codex_home).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_windowtap"));
    cmd.arg("run")
        .arg("--records")
        .arg(&records_path)
        .arg("--capture")
        .arg(&capture)
        .args(run_args)
        .arg("--")
        .args(host_args)
        .current_dir(dir)
        .env("HOME", dir)
        .env("XDG_STATE_HOME", dir)
        .env("CODEX_HOME", &codex_home)
        .env_remove("ANTHROPIC_BASE_URL")
        .env_remove("WINDOWTAP_INGEST")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("starting windowtap run");
    let stderr = child.stderr.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let err_reader =
        std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let out_reader =
        std::thread::spawn(move || std::io::read_to_string(stdout).unwrap_or_default());
    during(child.id());
    let Some(status) = wait_bounded(&mut child) else {
        panic!(
            "windowtap run did not finish in time; stderr:\n{}",
            err_reader.join().unwrap()
        );
    };
    let stderr = err_reader.join().unwrap();
    let stdout = out_reader.join().unwrap();
    // The run header (the first line) left out: the text is what replay of the capture prints.
    let records_text = if records_path.exists() {
        live_records(&records_path)
    } else {
        String::new()
    };
    let log = std::fs::read_to_string(records_path.with_extension("log")).unwrap_or_default();
    let records = records_text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("records lines are JSON"))
        .filter(|r| r["type"] == "attribution")
        .collect();
    eprintln!("--- run stdout:\n{stdout}--- run stderr:\n{stderr}--- records:\n{records_text}");
    Run {
        status,
        stderr,
        records_path,
        records_text,
        records,
        capture,
        log,
    }
}

/// Waits for `child` at most twice the wait bound; past that kills it and returns `None`.
fn wait_bounded(child: &mut std::process::Child) -> Option<ExitStatus> {
    let deadline = Instant::now() + WAIT * 2;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn evidence(r: &Value) -> Vec<&str> {
    r["evidence"]
        .as_array()
        .expect("evidence is an array")
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect()
}

fn capture_events(capture: &Path) -> Vec<Value> {
    let lines = capture_lines(capture);
    assert_eq!(lines[0]["type"], "trace");
    lines[1..].to_vec()
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

// ---------------------------------------------------------------------------------------
// The Anthropic upstream: a tool turn calling `mcp__gate__wait` for a first request, a text
// turn for a request carrying a tool_result. The tool_use id and the gate's name follow the
// thread: `main`, or the subagent's id.
// ---------------------------------------------------------------------------------------

fn anthropic_tool_turn(who: &str) -> String {
    let input = json!({"name": who}).to_string();
    sse::body(
        &sse::message(&format!("msg_{who}_1"), "claude")
            .tool_use(&format!("toolu_{who}"), "mcp__gate__wait", Some(&input))
            .end("tool_use", 5),
    )
}

fn anthropic_text_turn(who: &str) -> String {
    sse::body(
        &sse::message(&format!("msg_{who}_2"), "claude")
            .text(&format!("done {who}"))
            .end("end_turn", 2),
    )
}

async fn anthropic_upstream() -> Upstream {
    Upstream::start(
        None,
        handler(|req| async move {
            let who = req
                .headers()
                .get("x-claude-code-agent-id")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("main")
                .to_string();
            let body = read_body(req.into_body()).await;
            let text = if String::from_utf8_lossy(&body).contains("\"tool_result\"") {
                anthropic_text_turn(&who)
            } else {
                anthropic_tool_turn(&who)
            };
            // One SSE event per frame, as a model API streams them.
            event_per_frame(text)
        }),
    )
    .await
}

/// Where the gate server is declared for the fake claude.
#[derive(Clone, Copy)]
enum Declared {
    /// `--mcp-config FILE --strict-mcp-config`.
    Flag,
    /// The project's `.mcp.json` in the working directory, inherited (no flag).
    ProjectFile,
}

/// The fake claude's arguments for `scenario`, with the gate server declared as `declared`.
fn claude_args(dir: &Path, scenario: &str, exit: &str, declared: Declared) -> Vec<String> {
    let gates = dir.join("gates");
    std::fs::create_dir_all(&gates).unwrap();
    let config = json!({"mcpServers":{"gate":{"command":"python3","args":[gate_server(),"--dir",gates.display().to_string()]}}})
        .to_string();
    let mut args = vec![host("claude"), "-p".into(), CANARY.into()];
    match declared {
        Declared::Flag => {
            // With a remote server beside it, which run must name as not observed.
            let mut config: Value = serde_json::from_str(&config).unwrap();
            config["mcpServers"]["docs"] = json!({"type":"http","url":"http://127.0.0.1:9/mcp"});
            let file = write_file(dir, "mcp.json", &config.to_string());
            args.extend([
                "--mcp-config".into(),
                file.display().to_string(),
                "--strict-mcp-config".into(),
            ]);
        }
        Declared::ProjectFile => {
            write_file(dir, ".mcp.json", &config);
        }
    }
    args.extend(s(&[
        "--gate-dir",
        &gates.display().to_string(),
        "--scenario",
        scenario,
        "--exit",
        exit,
    ]));
    args
}

async fn run_claude(scenario: &str, exit: &str, declared: Declared) -> (tempfile::TempDir, Run) {
    run_claude_with(scenario, exit, declared, &[], |_, _| {}).await
}

/// `run_claude` with `extra` host arguments, calling `during(run's pid, gate dir)` while it runs.
async fn run_claude_with(
    scenario: &str,
    exit: &str,
    declared: Declared,
    extra: &[&str],
    during: impl FnOnce(u32, &Path) + Send + 'static,
) -> (tempfile::TempDir, Run) {
    run_claude_args(scenario, exit, declared, &[], extra, during).await
}

/// `run_claude_with` with `run_args` for `windowtap run` itself.
async fn run_claude_args(
    scenario: &str,
    exit: &str,
    declared: Declared,
    run_args: &[&str],
    extra: &[&str],
    during: impl FnOnce(u32, &Path) + Send + 'static,
) -> (tempfile::TempDir, Run) {
    let up = anthropic_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let mut args = claude_args(dir.path(), scenario, exit, declared);
    args.extend(s(extra));
    let run_args = s(run_args);
    let base = format!("http://{}", up.addr);
    let path = dir.path().to_path_buf();
    let run = tokio::task::spawn_blocking(move || {
        let gates = path.join("gates");
        windowtap_run_with(
            &path,
            &run_args,
            &args,
            &[("ANTHROPIC_BASE_URL", base)],
            |pid| during(pid, &gates),
        )
    })
    .await
    .unwrap();
    drop(up);
    (dir, run)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_tool_loop_over_http_sse_is_attributed_by_tool_use_id() {
    if !python() {
        return;
    }
    let (_dir, run) = run_claude("single", "0", Declared::Flag).await;
    assert_eq!(run.status.code(), Some(0), "{}", run.stderr);
    assert_eq!(run.records.len(), 1, "{}", run.records_text);
    let r = &run.records[0];
    assert_eq!(r["decision"], "attributed", "{r}");
    assert_eq!(
        (r["alias"].as_str(), r["tool"].as_str()),
        (Some("gate"), Some("wait"))
    );
    // Claude's MCP `_meta` carries the tool_use id and no thread: no `thread` evidence, though
    // the window's thread (the session) is known. `host`: run knows its host, so every stream
    // and the wrapper's call have it, however short-lived the host's connections are.
    assert_eq!(
        evidence(r),
        ["containment", "tool_use_id", "host", "route"],
        "{r}"
    );
    assert!(r["window"]["thread"].is_string(), "{r}");
    let t = |v: &Value| v.as_f64().expect("a time");
    assert!(
        t(&r["window"]["open"]) <= t(&r["start"]) && t(&r["end"]) <= t(&r["window"]["close"]),
        "the window contains the interval: {r}"
    );

    let events = capture_events(&run.capture);
    let opens: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "stream_open")
        .collect();
    assert_eq!(opens.len(), 2, "a turn and its continuation: {events:?}");
    assert!(opens
        .iter()
        .all(|o| o["client"] == "claude" && o["transport"] == "http"));
    assert_eq!(r["window"]["stream"], opens[0]["stream"]);
    let requests: Vec<&Value> = events.iter().filter(|e| e["type"] == "request").collect();
    assert_eq!(
        r["window"]["request"], requests[1]["request"],
        "the continuation closed the window: {r}"
    );
    let capture = std::fs::read_to_string(&run.capture).unwrap();
    for (what, text) in [
        ("records", &run.records_text),
        ("capture", &capture),
        ("stderr", &run.stderr),
        ("log", &run.log),
    ] {
        for secret in [CANARY, "toolu_main", "sess-e2e-1", "dummy-key"] {
            assert!(
                !text.contains(secret),
                "{secret} reached the {what}:\n{text}"
            );
        }
    }
    assert!(
        run.log.contains(" exchange"),
        "the log is beside the records"
    );
    assert_eq!(
        checked_replay(&run.capture),
        run.records_text,
        "replay equals live"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_hosts_off_by_its_setting_run_s_loop_is_attributed_by_its_hint_alone() {
    if !python() {
        return;
    }
    let up = anthropic_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let args = claude_args(dir.path(), "single", "0", Declared::Flag);
    let base = format!("http://{}", up.addr);
    let path = dir.path().to_path_buf();
    // The documented setting, as a user would put it in a service's environment.
    let env = [
        ("ANTHROPIC_BASE_URL", base),
        ("WINDOWTAP_HOSTS", "off".to_string()),
    ];
    let run = tokio::task::spawn_blocking(move || windowtap_run(&path, &[], &args, &env))
        .await
        .unwrap();
    drop(up);
    assert_eq!(run.status.code(), Some(0), "{}", run.stderr);
    assert_eq!(run.records.len(), 1, "{}", run.records_text);
    let r = &run.records[0];
    assert_eq!(r["decision"], "attributed", "{r}");
    // As with hosts on (the test above), less `host`: run's own host is not adopted either.
    assert_eq!(evidence(r), ["containment", "tool_use_id", "route"], "{r}");
    let events = capture_events(&run.capture);
    let hosted: Vec<&Value> = events
        .iter()
        .filter(|e| e.get("host").is_some_and(|h| !h.is_null()))
        .collect();
    assert!(hosted.is_empty(), "hosts with --hosts off: {hosted:?}");
    assert!(events.iter().any(|e| e["type"] == "stream_open"));
    assert_eq!(checked_replay(&run.capture), run.records_text);
}

/// A Responses WebSocket upstream answering as in the prewarm / turn / continuation shape: the
/// turn calls `wait` in namespace `mcp__gate`, the continuation gets a text answer.
async fn responses_ws_upstream() -> Upstream {
    Upstream::start(
        None,
        handler(|mut req| async move {
            let res = support::ws::switching(&req, None);
            let upgrade = hyper::upgrade::on(&mut req);
            tokio::spawn(async move {
                let Ok(up) = upgrade.await else { return };
                let mut ws = testkit::ws::server(hyper_util::rt::TokioIo::new(up))
                .await;
                let mut n = 0;
                while let Some(Ok(Message::Text(text))) = ws.next().await {
                    n += 1;
                    let req: Value = serde_json::from_str(&text).unwrap();
                    let id = format!("resp_{n}");
                    let continues = text.contains("function_call_output");
                    let evs = if req["generate"] != json!(false) && !continues {
                        let args = json!({"name":"cx"}).to_string();
                        let item = sse::function_call("fc_1", "call_1", "mcp__gate", "wait", &args);
                        sse::function_call_response(&id, &item)
                    } else if continues {
                        let item = json!({"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"done"}]});
                        vec![
                            sse::response_created(&id),
                            sse::item_done(0, &item),
                            sse::response_completed(&id, json!([item])),
                        ]
                    } else {
                        vec![sse::response_created(&id), sse::response_completed(&id, json!([]))]
                    };
                    for ev in evs {
                        if ws.send(Message::text(ev.to_string())).await.is_err() {
                            return;
                        }
                    }
                }
            });
            res
        }),
    )
    .await
}

/// The fake codex through `windowtap run`, its model traffic sent where `model_args` (the
/// host's `-c` overrides) and `run_args` point it.
async fn run_codex(run_args: Vec<String>, model_args: Vec<String>) -> (tempfile::TempDir, Run) {
    run_codex_with_config(run_args, model_args, None).await
}

/// `run_codex` with `config` as `$CODEX_HOME/config.toml`.
async fn run_codex_with_config(
    run_args: Vec<String>,
    model_args: Vec<String>,
    config: Option<String>,
) -> (tempfile::TempDir, Run) {
    let dir = tempfile::tempdir().unwrap();
    if let Some(config) = config {
        let home = dir.path().join("codex-home");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(home.join("config.toml"), config).unwrap();
    }
    let gates = dir.path().join("gates");
    std::fs::create_dir_all(&gates).unwrap();
    let mut host_args = vec![
        host("codex"),
        "exec".into(),
        "--gate-dir".into(),
        gates.display().to_string(),
        "-c".into(),
        r#"mcp_servers.gate.command="python3""#.into(),
        "-c".into(),
        format!(
            "mcp_servers.gate.args={}",
            json!([gate_server(), "--dir", gates.display().to_string()])
        ),
    ];
    host_args.extend(model_args);
    host_args.push("go".into());
    let path = dir.path().to_path_buf();
    let run = tokio::task::spawn_blocking(move || windowtap_run(&path, &run_args, &host_args, &[]))
        .await
        .unwrap();
    (dir, run)
}

/// One attributed call, found on the run's one WebSocket with Codex's hints as evidence.
fn assert_codex_loop_attributed(run: &Run) {
    assert_eq!(run.status.code(), Some(0), "{}", run.stderr);
    assert_eq!(run.records.len(), 1, "{}", run.records_text);
    let r = &run.records[0];
    assert_eq!(r["decision"], "attributed", "{r}");
    assert_eq!(
        (r["alias"].as_str(), r["tool"].as_str()),
        (Some("gate"), Some("wait"))
    );
    assert_eq!(
        evidence(r),
        [
            "containment",
            "item_id",
            "call_id",
            "thread",
            "host",
            "route"
        ],
        "{r}"
    );

    let events = capture_events(&run.capture);
    let opens: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "stream_open")
        .collect();
    assert_eq!(opens.len(), 1, "one WebSocket for the run: {events:?}");
    assert_eq!(
        (opens[0]["client"].as_str(), opens[0]["transport"].as_str()),
        (Some("codex"), Some("websocket"))
    );
    assert_eq!(r["window"]["thread"], opens[0]["thread"]);
    let requests: Vec<&Value> = events.iter().filter(|e| e["type"] == "request").collect();
    assert_eq!(requests.len(), 3, "prewarm, turn, continuation: {events:?}");
    assert_eq!(r["window"]["request"], requests[2]["request"], "{r}");
    assert_eq!(
        events.last().map(|e| &e["type"]),
        Some(&json!("stream_close")),
        "the connection ended without a close frame and was closed: {events:?}"
    );
    assert_eq!(
        checked_replay(&run.capture),
        run.records_text,
        "replay equals live"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_tool_loop_over_websocket_is_attributed_by_item_call_and_thread() {
    if !python_with_tomllib() {
        return;
    }
    let up = responses_ws_upstream().await;
    // API-key login: the built-in provider, pointed at the relay with `openai_base_url`.
    let (_dir, run) = run_codex(
        s(&["--codex-auth", "api", "--upstream", &up.mount("openai", "")]),
        Vec::new(),
    )
    .await;
    assert!(run.stderr.contains("/openai/v1"), "{}", run.stderr);
    assert_codex_loop_attributed(&run);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_custom_provider_gets_its_own_mount_and_its_loop_is_attributed() {
    if !python_with_tomllib() {
        return;
    }
    let up = responses_ws_upstream().await;
    let provider = format!(
        r#"model_providers.fake={{name="fake", base_url="http://{}/v1", wire_api="responses", supports_websockets=true}}"#,
        up.addr
    );
    let (_dir, run) = run_codex(
        Vec::new(),
        s(&["-c", "model_provider=fake", "-c", &provider]),
    )
    .await;
    assert!(run.stderr.contains("/codex-fake"), "{}", run.stderr);
    assert_codex_loop_attributed(&run);
}

/// The user's own `openai_base_url` (issue 27, item 1), given with `-c` or in
/// `$CODEX_HOME/config.toml`, is where the traffic goes: the upstream of the mount run points
/// Codex at. Nothing here can reach api.openai.com, so a run that sent the traffic there
/// instead has no loop to attribute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_users_openai_base_url_is_the_upstream_of_the_mount_codex_goes_through() {
    if !python_with_tomllib() {
        return;
    }
    let up = responses_ws_upstream().await;
    let url = format!("http://{}/v1", up.addr);
    let (_dir, run) = run_codex(
        s(&["--codex-auth", "api"]),
        s(&["-c", &format!("openai_base_url=\"{url}\"")]),
    )
    .await;
    assert!(run.stderr.contains("/codex-openai"), "{}", run.stderr);
    assert_codex_loop_attributed(&run);

    let (_dir, run) = run_codex_with_config(
        s(&["--codex-auth", "chatgpt"]),
        Vec::new(),
        Some(format!("openai_base_url = \"{url}\"\n")),
    )
    .await;
    assert!(run.stderr.contains("/codex-openai"), "{}", run.stderr);
    assert_codex_loop_attributed(&run);
}

/// Claude Code applies its settings' `env` over its environment, so an ANTHROPIC_BASE_URL in
/// `~/.claude/settings.json` sent the real Claude Code past run's relay to the upstream
/// directly (no exchange observed, the call `no_window`). That URL is the user's choice: it
/// becomes the upstream, and a `--settings` of run's points the host at the relay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_base_url_in_claudes_settings_is_the_upstream_and_the_host_goes_through_the_relay() {
    if !python() {
        return;
    }
    let up = anthropic_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let args = claude_args(dir.path(), "single", "0", Declared::Flag);
    std::fs::create_dir_all(dir.path().join(".claude")).unwrap();
    write_file(
        &dir.path().join(".claude"),
        "settings.json",
        &json!({"env": {"ANTHROPIC_BASE_URL": format!("http://{}", up.addr)}}).to_string(),
    );
    let path = dir.path().to_path_buf();
    let run = tokio::task::spawn_blocking(move || windowtap_run(&path, &[], &args, &[]))
        .await
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", run.stderr);
    assert_eq!(run.records.len(), 1, "{}", run.records_text);
    assert_eq!(
        run.records[0]["decision"], "attributed",
        "{}",
        run.records_text
    );
    assert!(
        run.log.contains(" exchange"),
        "the relay saw the traffic: {}",
        run.log
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_calls_of_a_parent_and_its_subagent_go_to_their_own_windows() {
    if !python() {
        return;
    }
    let (_dir, run) = run_claude("subagent", "0", Declared::Flag).await;
    assert_eq!(run.status.code(), Some(0), "{}", run.stderr);
    assert_eq!(run.records.len(), 2, "{}", run.records_text);
    assert!(
        run.records.iter().all(|r| r["decision"] == "attributed"),
        "{}",
        run.records_text
    );
    let mut recs: Vec<&Value> = run.records.iter().collect();
    recs.sort_by(|a, b| {
        a["start"]
            .as_f64()
            .partial_cmp(&b["start"].as_f64())
            .unwrap()
    });
    let (parent, sub) = (recs[0], recs[1]);
    let f = |r: &Value, k: &str| r[k].as_f64().unwrap();
    let w = |r: &Value, k: &str| r["window"][k].as_f64().unwrap();
    // The scenario happened as scripted: the calls overlap, the subagent's window opened
    // while the parent's call ran, and the parent's window closed while the subagent's ran.
    assert!(f(sub, "start") < f(parent, "end"), "the calls overlap");
    assert!(f(parent, "start") < w(sub, "open"), "{sub}");
    assert!(w(parent, "close") < f(sub, "end"), "{parent}");

    let events = capture_events(&run.capture);
    let opens: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "stream_open")
        .collect();
    assert_eq!(opens.len(), 4, "two turns, two continuations: {events:?}");
    // The parent's first request is the first stream, the subagent's the second.
    assert_ne!(
        opens[0]["thread"], opens[1]["thread"],
        "agent ids make threads"
    );
    assert_eq!(parent["window"]["stream"], opens[0]["stream"]);
    assert_eq!(parent["window"]["thread"], opens[0]["thread"]);
    assert_eq!(sub["window"]["stream"], opens[1]["stream"]);
    assert_eq!(sub["window"]["thread"], opens[1]["thread"]);
    for r in [parent, sub] {
        assert_eq!(r["candidates"], 1, "{r}");
        assert_eq!(
            evidence(r),
            ["containment", "tool_use_id", "host", "route"],
            "{r}"
        );
    }
    assert_eq!(
        checked_replay(&run.capture),
        run.records_text,
        "replay equals live"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hosts_exit_code_is_runs_and_the_summary_names_the_records() {
    if !python() {
        return;
    }
    let (_dir, run) = run_claude("single", "3", Declared::Flag).await;
    assert_eq!(run.status.code(), Some(3), "{}", run.stderr);
    assert!(
        run.stderr
            .contains(&format!("records in {}", run.records_path.display())),
        "{}",
        run.stderr
    );
    // The capture is named too, and where the host's mount went (issue 40).
    assert!(
        run.stderr
            .contains(&format!("capture in {}", run.capture.display())),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("/anthropic (relay on http://127.0.0.1:")
            && run.stderr.contains(", upstream http://127.0.0.1:"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("1 interval: 1 attributed, 0 abstained"),
        "{}",
        run.stderr
    );
    // The host exited by itself: no signal was sent, and the log does not say one was.
    assert!(
        run.log
            .contains("draining: no new connections; a signal stops at once")
            && !run.log.contains("a second signal"),
        "{}",
        run.log
    );
    assert!(
        run.stderr.contains("MCP server `docs` (")
            && run.stderr.contains("is not observed: http server"),
        "the remote server is named as not observed: {}",
        run.stderr
    );
    assert!(
        !run.stderr.contains("`gate`") && !run.stderr.contains("no stdio MCP server"),
        "the gate server was wrapped: {}",
        run.stderr
    );
    assert_eq!(run.records.len(), 1, "{}", run.records_text);
    assert_eq!(run.records[0]["decision"], "attributed");
    assert_eq!(
        checked_replay(&run.capture),
        run.records_text,
        "replay equals live"
    );
    // The records start with the run header: the wall-clock time of the run's clock 0, the
    // capture header's (issue 40, item 2).
    let text = std::fs::read_to_string(&run.records_path).unwrap();
    let header: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let capture = capture_lines(&run.capture);
    assert_eq!(header["type"], "run", "{text}");
    assert_eq!(header["version"], 1, "{text}");
    assert!(header["epoch_unix_ms"].as_u64().is_some(), "{text}");
    assert_eq!(
        header["epoch_unix_ms"], capture[0]["epoch_unix_ms"],
        "{text}"
    );
}

/// Servers whose command is not on `PATH`, or that exit before answering anything, are named
/// with why in run's summary; the host goes on without them (as Claude Code does) and the
/// working server's call is attributed. Before, the summary said nothing of them: a silent
/// zero (issue 40, item 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_that_never_ran_are_named_in_runs_summary() {
    if !python() {
        return;
    }
    let up = anthropic_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let args = claude_args(dir.path(), "single", "0", Declared::Flag);
    let file = dir.path().join("mcp.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    config["mcpServers"]["missing"] = json!({"command": "windowtap-test-no-such-mcp-server"});
    config["mcpServers"]["crashing"] = json!({"command": "sh", "args": ["-c", "exit 3"]});
    std::fs::write(&file, config.to_string()).unwrap();
    let base = format!("http://{}", up.addr);
    let path = dir.path().to_path_buf();
    let run = tokio::task::spawn_blocking(move || {
        windowtap_run(&path, &[], &args, &[("ANTHROPIC_BASE_URL", base)])
    })
    .await
    .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", run.stderr);
    for line in [
        "windowtap run: warning: MCP server `missing` never ran: its command was not found",
        "windowtap run: warning: MCP server `crashing` never ran: it exited with code 3 before \
         answering anything",
    ] {
        assert!(run.stderr.contains(line), "{line}\n{}", run.stderr);
    }
    assert!(!run.stderr.contains("`gate` never"), "{}", run.stderr);
    assert_eq!(run.records.len(), 1, "{}", run.records_text);
    assert_eq!(run.records[0]["decision"], "attributed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_inherited_from_the_projects_mcp_json_is_wrapped_and_attributed() {
    if !python() {
        return;
    }
    let (_dir, run) = run_claude("single", "0", Declared::ProjectFile).await;
    assert_eq!(run.status.code(), Some(0), "{}", run.stderr);
    assert_eq!(run.records.len(), 1, "{}", run.records_text);
    assert_eq!(
        run.records[0]["decision"], "attributed",
        "{}",
        run.records_text
    );
    assert_eq!(run.records[0]["alias"], "gate");
}

/// A project `.mcp.json` written for the relay on its own (examples/mcp/claude.mcp.json as
/// written, its server swapped for the gate server) given to run: the server is wrapped once,
/// so its one call has one record (issue 27, item 4). `windowtap` is on the PATH, as the
/// example assumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_already_under_windowtap_wrap_is_wrapped_once() {
    if !python() {
        return;
    }
    let up = anthropic_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let gates = dir.path().join("gates");
    std::fs::create_dir_all(&gates).unwrap();
    let example: Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/mcp/claude.mcp.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let mut server = example["mcpServers"]["everything"].clone();
    assert_eq!(server["command"], "windowtap");
    let mut args: Vec<Value> = server["args"].as_array().unwrap().clone();
    let at = args.iter().position(|a| a == "--").unwrap();
    args.truncate(at + 1);
    args[2] = json!("gate");
    args.extend([
        json!("python3"),
        json!(gate_server()),
        json!("--dir"),
        json!(gates.display().to_string()),
    ]);
    server["args"] = json!(args);
    write_file(
        dir.path(),
        ".mcp.json",
        &json!({"mcpServers": {"gate": server}}).to_string(),
    );
    let host_args = vec![
        host("claude"),
        "-p".to_string(),
        CANARY.to_string(),
        "--gate-dir".to_string(),
        gates.display().to_string(),
        "--scenario".to_string(),
        "single".to_string(),
    ];
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_windowtap"))
        .parent()
        .unwrap()
        .to_path_buf();
    let path_var = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let base = format!("http://{}", up.addr);
    let path = dir.path().to_path_buf();
    let run = tokio::task::spawn_blocking(move || {
        windowtap_run(
            &path,
            &[],
            &host_args,
            &[("ANTHROPIC_BASE_URL", base), ("PATH", path_var)],
        )
    })
    .await
    .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", run.stderr);
    assert_eq!(
        run.records.len(),
        1,
        "one call, one record: {}",
        run.records_text
    );
    assert_eq!(
        run.records[0]["decision"], "attributed",
        "{}",
        run.records_text
    );
    assert!(
        run.stderr
            .contains("was declared under `windowtap wrap` already"),
        "{}",
        run.stderr
    );
}

/// An upstream nobody listens on (issue 27, item 5): the summary says how many exchanges
/// failed, with which class and where that mount goes, and the log has the exchange as WARN.
#[test]
fn the_summary_says_how_many_exchanges_failed_and_why() {
    if !python() {
        return;
    }
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let args = claude_args(dir.path(), "single", "0", Declared::Flag);
    let run = windowtap_run(
        dir.path(),
        &[],
        &args,
        &[("ANTHROPIC_BASE_URL", format!("http://127.0.0.1:{port}"))],
    );
    assert!(!run.status.success(), "the host could not get an answer");
    assert!(
        run.stderr.contains(&format!(
            "windowtap run: warning: 1 exchange failed upstream, so the host got the relay's \
             502/504 answer instead of the model's: refused 1 on /anthropic \
             (http://127.0.0.1:{port}: nothing accepts connections there); each is a line with \
             failure= in the log"
        )),
        "{}",
        run.stderr
    );
    let failed: Vec<&str> = run
        .log
        .lines()
        .filter(|l| l.contains("failure=refused"))
        .collect();
    assert_eq!(failed.len(), 1, "{}", run.log);
    assert!(failed[0].contains(" WARN "), "{}", failed[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_killed_by_a_signal_makes_run_exit_128_plus_the_signal() {
    if !python() {
        return;
    }
    let (_dir, run) = run_claude("single", "-15", Declared::Flag).await;
    assert_eq!(run.status.code(), Some(128 + 15), "{}", run.stderr);
    assert_eq!(
        run.records.len(),
        1,
        "the records were still written: {}",
        run.records_text
    );
}

// ---------------------------------------------------------------------------------------
// Any other program: an agent on an SDK (tests/fixtures/hosts/sdk_agent), its model traffic
// through OPENAI_BASE_URL, its MCP server under `windowtap wrap` started with the MCP SDK's
// small default environment, tools offered to the model under their own names.
// ---------------------------------------------------------------------------------------

/// A Responses upstream as an SDK program meets it over HTTP: a first request gets a response
/// calling `wait` (the tool's own name, no namespace) with a call id of the agent's own; a
/// request carrying a `function_call_output` gets text. Streamed (SSE) or a JSON body, as the
/// request asks.
async fn responses_http_bare_upstream() -> Upstream {
    Upstream::start(
        None,
        handler(|req| async move {
            let body = read_body(req.into_body()).await;
            let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let text = req["input"][0]["content"].as_str().unwrap_or("");
            let who = text.rsplit(' ').next().unwrap_or("agent").to_string();
            let continues = body.windows(20).any(|w| w == b"function_call_output");
            let id = format!("resp_{who}_{}", if continues { 2 } else { 1 });
            let item = if continues {
                json!({"type":"message","id":format!("msg_{who}"),"role":"assistant","status":"completed","content":[{"type":"output_text","text":"done"}]})
            } else {
                json!({"type":"function_call","id":format!("fc_{who}"),"call_id":format!("call_{who}"),"name":"wait","arguments":"{}","status":"completed"})
            };
            if req["stream"] == json!(true) {
                let evs = vec![
                    sse::response_created(&id),
                    sse::item_added(0, &item),
                    sse::item_done(0, &item),
                    sse::response_completed(&id, json!([item])),
                ];
                event_per_frame(sse::body(&evs))
            } else {
                let whole = json!({"id":id,"object":"response","status":"completed","output":[item]});
                hyper::Response::builder()
                    .status(200)
                    .header("content-type", "application/json")
                    .body(full(whole.to_string()))
                    .unwrap()
            }
        }),
    )
    .await
}

/// `windowtap run -- sdk_agent …` with the OpenAI upstream mounted from `up`.
async fn run_sdk_agent(up: &Upstream, agent_args: &[&str]) -> (tempfile::TempDir, Run) {
    let dir = tempfile::tempdir().unwrap();
    let gates = dir.path().join("gates");
    std::fs::create_dir_all(&gates).unwrap();
    let mut host_args = vec![
        host("sdk_agent"),
        "--windowtap".to_string(),
        env!("CARGO_BIN_EXE_windowtap").to_string(),
        "--gate-dir".to_string(),
        gates.display().to_string(),
    ];
    host_args.extend(s(agent_args));
    // A loaded machine may take the scripted program longer than the default second between
    // its call's end and its continuation; the window must not be given up meanwhile.
    let run_args = s(&[
        "--upstream",
        &up.mount("openai", ""),
        "--close-wait",
        "20000",
    ]);
    let path = dir.path().to_path_buf();
    let run = tokio::task::spawn_blocking(move || {
        windowtap_run(
            &path,
            &run_args,
            &host_args,
            &[("OPENAI_BASE_URL", String::new())],
        )
    })
    .await
    .unwrap();
    (dir, run)
}

/// An agent built on an SDK, run as `windowtap run -- PROGRAM`: its SDK goes through the relay
/// by `OPENAI_BASE_URL`, its server under `windowtap wrap` reports to run's socket although the
/// SDK gave it none of run's environment, and its call, offered to the model as `wait`, is
/// attributed by containment, host and route, streamed and as a JSON answer alike. Before
/// issue 37, run refused any program but claude and codex.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sdk_programs_call_is_attributed_by_its_bare_tool_name() {
    if !python() {
        return;
    }
    let up = responses_http_bare_upstream().await;
    for mode in [&[][..], &["--json"][..]] {
        let (_dir, run) = run_sdk_agent(&up, mode).await;
        assert_eq!(run.status.code(), Some(0), "{mode:?}: {}", run.stderr);
        assert!(run.stderr.contains("/openai/v1"), "{}", run.stderr);
        assert_eq!(run.records.len(), 1, "{mode:?}: {}", run.records_text);
        let r = &run.records[0];
        assert_eq!(r["decision"], "attributed", "{mode:?}: {r}");
        assert_eq!(
            (r["alias"].as_str(), r["tool"].as_str()),
            (Some("gate"), Some("wait"))
        );
        assert_eq!(evidence(r), ["containment", "host", "route"], "{r}");
        let events = capture_events(&run.capture);
        let opens: Vec<&Value> = events
            .iter()
            .filter(|e| e["type"] == "stream_open")
            .collect();
        assert!(
            opens
                .iter()
                .all(|o| o["client"] == "other" && o["thread"].is_null()),
            "{opens:?}"
        );
        assert_eq!(
            checked_replay(&run.capture),
            run.records_text,
            "replay equals live"
        );
        assert!(!run.records_text.contains(CANARY) && !run.log.contains(CANARY));
    }
}

/// Two agents of one program call one tool at once, with nothing in the calls to tell them
/// apart: both abstain (`ambiguous`), never a wrong window. With the model's call id in each
/// request's `_meta` (`callId`, read as Codex's is) each goes to its own agent's window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_agents_of_one_program_calling_one_tool_at_once_abstain_unless_they_say_which_call() {
    if !python() {
        return;
    }
    let up = responses_http_bare_upstream().await;
    let (_dir, run) = run_sdk_agent(&up, &["--agents", "2"]).await;
    assert_eq!(run.status.code(), Some(0), "{}", run.stderr);
    assert_eq!(run.records.len(), 2, "{}", run.records_text);
    // Both agents' windows hold both calls: ambiguous. On a loaded machine one call may start
    // before the other agent's window opened (its tool call not yet seen by the relay): then
    // only its own agent's window could have issued it, one candidate, attributed, which is
    // right. Never a choice between two windows.
    let mut windows = Vec::new();
    for r in &run.records {
        match (r["decision"].as_str(), r["reason"].as_str()) {
            (Some("abstained"), Some("ambiguous")) => assert_eq!(r["candidates"], 2, "{r}"),
            (Some("attributed"), None) => {
                assert_eq!(r["candidates"], 1, "{r}");
                windows.push(r["window"]["response"].clone());
            }
            _ => panic!("neither ambiguous nor alone in its window: {r}"),
        }
    }
    assert!(
        windows.len() < 2 || windows[0] != windows[1],
        "two calls of two agents in one window: {}",
        run.records_text
    );
    // (That both calls in both windows abstain is held without timing by the scripted trace
    // in correlator/tests/differential.rs,
    // `two_agents_of_one_program_calling_one_tool_at_once_abstain_unless_their_call_ids_say`.)

    let (_dir, run) = run_sdk_agent(&up, &["--agents", "2", "--meta-call-id"]).await;
    assert_eq!(run.status.code(), Some(0), "{}", run.stderr);
    assert_eq!(run.records.len(), 2, "{}", run.records_text);
    let events = capture_events(&run.capture);
    // Each interval's own window: the response of the stream its call id was issued on.
    let issued: std::collections::HashMap<&str, &str> = events
        .iter()
        .filter(|e| e["type"] == "tool_call")
        .map(|e| (e["call"].as_str().unwrap(), e["response"].as_str().unwrap()))
        .collect();
    let hinted: std::collections::HashMap<&str, &str> = events
        .iter()
        .filter(|e| e["type"] == "mcp_interval")
        .map(|e| {
            (
                e["interval"].as_str().unwrap(),
                e["call_id"].as_str().unwrap(),
            )
        })
        .collect();
    for r in &run.records {
        assert_eq!(r["decision"], "attributed", "{r}");
        assert_eq!(
            evidence(r),
            ["containment", "call_id", "host", "route"],
            "{r}"
        );
        let call = hinted[r["interval"].as_str().unwrap()];
        assert_eq!(r["window"]["response"].as_str(), Some(issued[call]), "{r}");
    }
}

/// Waits (bounded) for the lingering fake claude to say it is up.
fn wait_until_lingering(gates: &Path) {
    let deadline = Instant::now() + WAIT;
    while !gates.join("linger.ready").exists() {
        assert!(
            Instant::now() < deadline,
            "the host never reached its linger"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_to_run_is_passed_on_to_the_host() {
    if !python() {
        return;
    }
    let (_dir, run) = run_claude_with(
        "single",
        "0",
        Declared::Flag,
        &["--linger"],
        |pid, gates| {
            wait_until_lingering(gates);
            testkit::proc::terminate(pid);
        },
    )
    .await;
    // The host died of the SIGTERM run passed on; run itself finished cleanly.
    assert_eq!(run.status.code(), Some(128 + 15), "{}", run.stderr);
    assert!(
        run.log.contains("a second signal stops at once"),
        "{}",
        run.log
    );
    assert!(
        run.stderr.contains("1 interval: 1 attributed"),
        "{}",
        run.stderr
    );
    assert_eq!(run.records.len(), 1, "{}", run.records_text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_to_run_alone_leaves_the_host_running() {
    if !python() {
        return;
    }
    // Ctrl-C reaches the host through the terminal's process group; run must outlive it
    // and wait for the host. Here only run gets the SIGINT, and the host then ends normally.
    let (_dir, run) = run_claude_with(
        "single",
        "0",
        Declared::Flag,
        &["--linger"],
        |pid, gates| {
            wait_until_lingering(gates);
            testkit::proc::signal(pid, testkit::proc::Signal::INT);
            std::fs::write(gates.join("linger.go"), "").unwrap();
        },
    )
    .await;
    assert_eq!(run.status.code(), Some(0), "{}", run.stderr);
    assert!(
        run.stderr.contains("1 interval: 1 attributed"),
        "{}",
        run.stderr
    );
}

/// Whether our child `pid` has exited (a zombie until the test reaps it).
fn exited(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|st| {
            st.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(true)
}

/// Waits (bounded) for `gates/name` to exist.
fn wait_for_gate(gates: &Path, name: &str) {
    let deadline = Instant::now() + WAIT;
    while !gates.join(name).exists() {
        assert!(Instant::now() < deadline, "{name} never appeared");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_stops_run_at_once_with_complete_records_and_capture() {
    if !python() {
        return;
    }
    // A host that outlives SIGTERM: without a fast path, run would wait for it.
    let (dir, run) = run_claude_with(
        "single",
        "0",
        Declared::Flag,
        &["--linger", "--ignore-term"],
        |pid, gates| {
            wait_until_lingering(gates);
            testkit::proc::terminate(pid);
            // Passed on: the host has seen the first before the second is sent (two pending
            // signals of one kind would be one).
            wait_for_gate(gates, "term.seen");
            testkit::proc::terminate(pid);
            // Once run has exited (without a fast path it never would: the host lingers),
            // let the host go, so that the stderr it shares with run is closed.
            let deadline = Instant::now() + WAIT;
            while Instant::now() < deadline && !exited(pid) {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            std::fs::write(gates.join("linger.go"), "").unwrap();
        },
    )
    .await;

    assert_eq!(run.status.code(), Some(128 + 15), "{}", run.stderr);
    assert!(run.stderr.contains("stopping at once"), "{}", run.stderr);
    // The loop that ended before the signals is decided, and both files are whole.
    assert!(
        run.stderr.contains("1 interval: 1 attributed"),
        "{}",
        run.stderr
    );
    assert_eq!(run.records.len(), 1, "{}", run.records_text);
    assert!(run.records_text.ends_with('\n'));
    assert!(std::fs::read_to_string(&run.capture)
        .unwrap()
        .ends_with('\n'));
    assert_eq!(checked_replay(&run.capture), run.records_text);
    drop(dir);
}

#[test]
fn a_host_that_cannot_be_started_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("bin/claude");
    let run = windowtap_run(dir.path(), &[], &[missing.display().to_string()], &[]);
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    assert!(
        run.stderr
            .contains(&format!("starting {}", missing.display())),
        "{}",
        run.stderr
    );
}

/// `windowtap run -- claude` in a terminal: the terminal is the host's while it runs. Driven
/// under a pseudo-terminal (tests/fixtures/pty_run.py) with a host that writes HOST-START
/// first and HOST-END last: everything up to HOST-END is the host's own output, and after it
/// come only run's summary lines, which name the log file beside the records (where the
/// relay's exchange lines went instead of the terminal).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_terminal_only_the_host_writes_while_it_runs_and_the_log_goes_beside_the_records() {
    if !python() {
        return;
    }
    let up = anthropic_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let mut args = claude_args(dir.path(), "single", "0", Declared::Flag);
    args.push("--markers".into());
    let base = format!("http://{}", up.addr);
    let path = dir.path().to_path_buf();
    let (status, stderr) = tokio::task::spawn_blocking(move || {
        let pty_run = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pty_run.py");
        let mut child = Command::new("python3")
            .arg(pty_run)
            .arg(path.join("terminal.txt"))
            .arg(env!("CARGO_BIN_EXE_windowtap"))
            .arg("run")
            .arg("--records")
            .arg(path.join("records.jsonl"))
            .arg("--")
            .args(&args)
            .current_dir(&path)
            .env("HOME", &path)
            .env("XDG_STATE_HOME", &path)
            .env("CODEX_HOME", path.join("codex-home"))
            .env("ANTHROPIC_BASE_URL", base)
            .env_remove("WINDOWTAP_INGEST")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("python3 pty_run.py");
        let stderr = child.stderr.take().unwrap();
        let err_reader =
            std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
        let status = wait_bounded(&mut child).expect("run under a terminal finishes in time");
        (status, err_reader.join().unwrap())
    })
    .await
    .unwrap();
    drop(up);
    let terminal = std::fs::read_to_string(dir.path().join("terminal.txt"))
        .unwrap_or_default()
        .replace("\r\n", "\n");
    eprintln!("--- terminal:\n{terminal}--- pty_run stderr:\n{stderr}");
    assert_eq!(status.code(), Some(0), "{terminal}");
    let end = terminal
        .find("HOST-END\n")
        .expect("the host ran to its end")
        + "HOST-END\n".len();
    let (host, after) = terminal.split_at(end);
    assert_eq!(
        host, "HOST-START\ndone main\nHOST-END\n",
        "nothing but the host wrote to its terminal while it ran"
    );
    assert!(
        after.lines().all(|l| l.starts_with("windowtap run: ")),
        "after the host, only run's summary: {after}"
    );
    let log = dir.path().join("records.log");
    assert!(
        after.contains(&format!("log in {}", log.display())),
        "the summary says where the log is: {after}"
    );
    let log = std::fs::read_to_string(&log).expect("the log beside the records");
    assert!(
        log.contains(" exchange"),
        "the relay's exchange lines: {log}"
    );
    assert!(after.contains("1 interval: 1 attributed"), "{after}");
}

/// `run --help` says where records go and which socket wrappers report on, and nothing that
/// holds for `relay` only.
#[test]
fn run_help_says_where_records_and_the_log_go() {
    let out = Command::new(env!("CARGO_BIN_EXE_windowtap"))
        .args(["run", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(!help.contains("instead of stdout"), "{help}");
    assert!(!help.contains("--ingest <PATH>"), "{help}");
    assert!(help.contains("--log-file"), "{help}");
    assert!(help.contains("$XDG_STATE_HOME/windowtap"), "{help}");
}

/// The MCP configurations in examples/mcp/ (for `windowtap relay` on its own): each server is
/// `windowtap wrap --alias <its own name> -- <the server>`. The Claude Code one, with its
/// server swapped for the gate server, runs a whole tool loop of the scripted claude against a
/// standalone relay, the wrapper finding the relay through WINDOWTAP_INGEST: the call is
/// attributed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_mcp_configs_wrap_their_server_for_a_standalone_relay() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/mcp");
    let claude: Value =
        serde_json::from_str(&std::fs::read_to_string(examples.join("claude.mcp.json")).unwrap())
            .expect("claude.mcp.json is JSON");
    let codex: toml::Table = std::fs::read_to_string(examples.join("codex.config.toml"))
        .unwrap()
        .parse()
        .expect("codex.config.toml is TOML");
    let codex = serde_json::to_value(codex).unwrap();
    let servers = claude["mcpServers"].as_object().unwrap().iter();
    for (name, server) in servers.chain(codex["mcp_servers"].as_object().unwrap()) {
        let args: Vec<&str> = server["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(server["command"], "windowtap", "{name}");
        assert_eq!(args[..4], ["wrap", "--alias", name, "--"], "{name}");
        assert!(args.len() > 4, "{name}: a server after --");
    }
    if !python() {
        return;
    }

    // The Claude Code config as a user adapts it: the gate server under its own name.
    let up = anthropic_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let gates = dir.path().join("gates");
    std::fs::create_dir_all(&gates).unwrap();
    let (_, template) = claude["mcpServers"]
        .as_object()
        .unwrap()
        .iter()
        .next()
        .unwrap();
    let mut server = template.clone();
    server["command"] = json!(env!("CARGO_BIN_EXE_windowtap"));
    server["args"] = json!([
        "wrap",
        "--alias",
        "gate",
        "--",
        "python3",
        gate_server(),
        "--dir",
        gates.display().to_string()
    ]);
    let config = write_file(
        dir.path(),
        "mcp.json",
        &json!({"mcpServers": {"gate": server}}).to_string(),
    );
    let records = dir.path().join("records.jsonl");
    let mut relay = Relay::start(&[
        "--upstream".to_string(),
        up.mount("anthropic", ""),
        "--records".to_string(),
        records.display().to_string(),
        "--close-wait".to_string(),
        "200".to_string(),
    ]);
    let base = format!("http://{}/anthropic", relay.addr);
    let ingest = relay.ingest.clone();
    let gate_dir = gates.display().to_string();
    let host = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .arg(host("claude"))
            .args(["-p", "use the tool", "--mcp-config"])
            .arg(&config)
            .args(["--strict-mcp-config", "--gate-dir", &gate_dir])
            .env("ANTHROPIC_BASE_URL", base)
            .env("WINDOWTAP_INGEST", ingest)
            .stdin(Stdio::null())
            .output()
            .expect("the scripted claude")
    })
    .await
    .unwrap();
    assert!(
        host.status.success(),
        "{}",
        String::from_utf8_lossy(&host.stderr)
    );
    let status = relay.stop();
    assert!(status.success(), "{}", relay.log());
    let text = std::fs::read_to_string(&records).unwrap();
    let rs: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["type"] == "attribution")
        .collect();
    assert_eq!(rs.len(), 1, "{text}");
    assert_eq!(rs[0]["decision"], "attributed", "{text}");
    assert_eq!(rs[0]["alias"], "gate");
}

/// examples/mcp/codex.config.toml as written, its server swapped for the gate server (the
/// table's key and `--alias` both `gate`): what a user puts in `$CODEX_HOME/config.toml`.
fn example_codex_config(gates: &Path) -> toml::Table {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/mcp/codex.config.toml"),
    )
    .unwrap();
    let mut config: toml::Table = text.parse().unwrap();
    let servers = config["mcp_servers"].as_table_mut().unwrap();
    let mut server = servers.remove("everything").unwrap();
    let table = server.as_table_mut().unwrap();
    let args = table["args"].as_array().unwrap();
    let at = args.iter().position(|a| a.as_str() == Some("--")).unwrap();
    let mut args: Vec<toml::Value> = args[..=at].to_vec();
    args[2] = "gate".into();
    for a in [
        gate_server(),
        "--dir".to_string(),
        gates.display().to_string(),
    ] {
        args.push(a.into());
    }
    table.insert("args".into(), toml::Value::Array(args));
    servers.insert("gate".into(), server);
    config
}

/// The scripted codex on its own (no `run`), pointed at `relay` as its banner says, with
/// `config` as `$CODEX_HOME/config.toml` and `env` on top of a user's environment whose
/// `TMPDIR` is `tmpdir` (where the other relay's default socket is). `windowtap` is on the
/// PATH, as the example assumes. Returns the host's stderr (the wrapper's goes there too).
fn codex_alone(
    dir: &Path,
    relay: &Relay,
    config: &toml::Table,
    tmpdir: &Path,
    env: &[(&str, String)],
) -> String {
    let gates = dir.join("gates");
    let home = dir.join("codex-home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("config.toml"), config.to_string()).unwrap();
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_windowtap")).parent().unwrap();
    let out = Command::new(host("codex"))
        .args(["exec", "--gate-dir"])
        .arg(&gates)
        .arg("-c")
        .arg(format!(
            "openai_base_url=\"http://{}/openai/v1\"",
            relay.addr
        ))
        .arg("go")
        .env("CODEX_HOME", &home)
        .env("HOME", dir)
        .env("TMPDIR", tmpdir)
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("WINDOWTAP_INGEST")
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin_dir.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .output()
        .expect("the scripted codex");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    stderr
}

fn attributions(records: &Path) -> Vec<Value> {
    std::fs::read_to_string(records)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["type"] == "attribution")
        .collect()
}

/// Two relays of one user side by side: the other one on the default ingest socket (in its
/// own `TMPDIR`), this one on a socket of its own, exported in the environment as `windowtap
/// env` does (unless `exported` is false); the scripted codex alone runs the README's Codex
/// config (its `env_vars` forwarding WINDOWTAP_INGEST, or not when `forward` is false) against
/// this relay; both relays are stopped. `None` where python3 lacks tomllib.
async fn two_relays_and_the_example_codex_config(
    forward: bool,
    exported: bool,
) -> Option<TwoRelays> {
    if !python_with_tomllib() {
        return None;
    }
    let up = responses_ws_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut other = Relay::start_at_default(&[], tmp.path());
    let records = dir.path().join("records.jsonl");
    let mut relay = Relay::start(&[
        "--upstream".to_string(),
        up.mount("openai", ""),
        "--records".to_string(),
        records.display().to_string(),
        "--close-wait".to_string(),
        "200".to_string(),
    ]);
    let mut config = example_codex_config(&dir.path().join("gates"));
    if !forward {
        config["mcp_servers"]["gate"]
            .as_table_mut()
            .unwrap()
            .remove("env_vars");
    }
    std::fs::create_dir_all(dir.path().join("gates")).unwrap();
    let ingest = relay.ingest.display().to_string();
    let env = if exported {
        vec![("WINDOWTAP_INGEST", ingest)]
    } else {
        Vec::new()
    };
    let stderr = codex_alone(dir.path(), &relay, &config, tmp.path(), &env);
    let (relay_pid, other_pid) = (relay.pid(), other.pid());
    assert!(relay.stop().success(), "{}", relay.log());
    assert!(other.stop().success(), "{}", other.log());
    Some(TwoRelays {
        stderr,
        relay,
        other,
        records,
        relay_pid,
        other_pid,
        _dirs: (dir, tmp),
    })
}

/// What [`two_relays_and_the_example_codex_config`] leaves to check.
struct TwoRelays {
    /// The host's stderr (the wrapper's goes there too).
    stderr: String,
    relay: Relay,
    other: Relay,
    records: PathBuf,
    relay_pid: u32,
    other_pid: u32,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

/// Two relays of one user side by side (issue 27, item 2): the other one on the default
/// ingest socket, this one on a socket of its own, exported as `windowtap env` does. Codex
/// passes MCP servers only a short list of variables; with the ready config's `env_vars` the
/// wrapper sees WINDOWTAP_INGEST itself, and without them (issue 37) it finds it in Codex's
/// own environment (its nearest ancestor that has it): either way it reports to this relay and
/// says so, and the call has its record here. Without `env_vars` this failed before issue 37:
/// the wrapper reported to the other relay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_relays_the_example_codex_config_reports_to_the_relay_codex_uses() {
    for forward in [true, false] {
        with_two_relays_the_wrapper_reports_to_the_relay_codex_uses(forward).await;
    }
}

async fn with_two_relays_the_wrapper_reports_to_the_relay_codex_uses(forward: bool) {
    let Some(run) = two_relays_and_the_example_codex_config(forward, true).await else {
        return;
    };
    let TwoRelays {
        stderr,
        relay,
        other,
        records,
        relay_pid,
        ..
    } = &run;
    let rs = attributions(records);
    assert_eq!(rs.len(), 1, "{}\n{}\n{}", stderr, relay.log(), other.log());
    assert_eq!(rs[0]["decision"], "attributed", "{rs:?}");
    assert!(
        stderr.contains(&format!(
            "`gate` reports its calls to the relay with pid {} through its ingest socket {}",
            relay_pid,
            relay.ingest.display()
        )),
        "the wrapper says which relay: {stderr}"
    );
    assert!(!relay.log().contains("got no report"), "{}", relay.log());
}

/// The same two relays, this one's socket never exported (Codex pointed at it by hand, its
/// socket nowhere in the environment): the wrapper reports to the other relay, at the default
/// place, and says so, and this relay's stop says that a model call to an MCP tool got no
/// report, naming the tool and the likely causes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_relays_a_call_reported_elsewhere_is_named_at_the_stop() {
    let Some(run) = two_relays_and_the_example_codex_config(true, false).await else {
        return;
    };
    let TwoRelays {
        stderr,
        relay,
        records,
        other_pid,
        ..
    } = &run;
    assert!(attributions(records).is_empty(), "{}", relay.log());
    assert!(
        stderr.contains(&format!(
            "reports its calls to the relay with pid {}",
            other_pid
        )),
        "the wrapper says which relay: {stderr}"
    );
    let log = relay.log();
    assert!(
        log.contains(
            "1 model tool call to MCP tools (mcp__gate__wait \u{d7}1) got no report from a wrapper"
        ),
        "{log}"
    );
    assert!(
        log.contains(&format!("--ingest {}", relay.ingest.display())),
        "{log}"
    );
}

/// `windowtap` with `args`, bounded; its exit status and stderr.
fn windowtap(args: &[&str]) -> (ExitStatus, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_windowtap"))
        .args(args)
        .env_remove("WINDOWTAP_INGEST")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let status = wait_bounded(&mut child).expect("windowtap finishes");
    (status, reader.join().unwrap())
}

/// Messages that say what to do (issue 27, item 9), each for a mistake a new user makes.
#[test]
fn mistakes_are_answered_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("ingest.sock");
    let sock = sock.to_str().unwrap();

    // The host before `--`: where it goes, and never the arguments (a prompt) echoed.
    let (status, stderr) = windowtap(&["run", "claude", "-p", "CANARY-ARG"]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("the host goes after `--`")
            && stderr.contains("windowtap run [OPTIONS] -- claude …"),
        "{stderr}"
    );
    assert!(!stderr.contains("CANARY-ARG"), "{stderr}");

    // The server before `--` in `wrap`: where its command goes, and never the command echoed.
    let (status, stderr) = windowtap(&["wrap", "--alias", "p", "node", "CANARY-SRV.js"]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("the MCP server's command goes after `--`")
            && stderr.contains("windowtap wrap --alias NAME [OPTIONS] -- SERVER"),
        "{stderr}"
    );
    assert!(!stderr.contains("CANARY-SRV"), "{stderr}");

    let (status, stderr) = windowtap(&["relay", "--close-wait", "abc"]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("give a number of milliseconds, such as 1000"),
        "{stderr}"
    );

    // An output whose directory is not there.
    let missing = dir.path().join("missing");
    let records = missing.join("r.jsonl");
    let (status, stderr) = windowtap(&[
        "relay",
        "--listen",
        "127.0.0.1:0",
        "--ingest",
        sock,
        "--records",
        records.to_str().unwrap(),
    ]);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the directory {} does not exist; create it first (mkdir -p {})",
            missing.display(),
            missing.display()
        )),
        "{stderr}"
    );

    // A port in use.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let (status, stderr) = windowtap(&[
        "relay",
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--ingest",
        sock,
    ]);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("port {port} is in use"))
            && stderr.contains("--listen 127.0.0.1:PORT"),
        "{stderr}"
    );
    drop(taken);
}

/// `--listen localhost:PORT` and `--listen :PORT` (as the port-in-use advice writes it) are
/// loopback, as a person means them.
#[test]
fn listen_on_localhost_is_loopback() {
    for listen in ["localhost:0", ":0"] {
        listen_is_loopback(listen);
    }
}

fn listen_is_loopback(listen: &str) {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("ingest.sock");
    let mut child = Command::new(env!("CARGO_BIN_EXE_windowtap"))
        .args(["relay", "--listen", listen, "--ingest"])
        .arg(&sock)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stderr));
    let first = lines.next().and_then(Result::ok).unwrap_or_default();
    testkit::proc::terminate(child.id());
    let status = wait_bounded(&mut child).expect("the relay stops");
    assert!(
        first.starts_with("windowtap relay listening on http://127.0.0.1:"),
        "{listen}: {first}"
    );
    assert!(status.success(), "{listen}");
}

/// Without --records, run names its records by a readable UTC time, not epoch milliseconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_records_are_named_by_a_readable_utc_time() {
    if !python() {
        return;
    }
    let up = anthropic_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let args = claude_args(dir.path(), "single", "0", Declared::Flag);
    let base = format!("http://{}", up.addr);
    let path = dir.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_windowtap"))
            .arg("run")
            .arg("--")
            .args(&args)
            .current_dir(&path)
            .env("HOME", &path)
            .env("XDG_STATE_HOME", &path)
            .env("ANTHROPIC_BASE_URL", base)
            .env_remove("WINDOWTAP_INGEST")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let names: Vec<String> = std::fs::read_dir(dir.path().join("windowtap"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let records: Vec<&String> = names.iter().filter(|n| n.ends_with(".jsonl")).collect();
    assert_eq!(records.len(), 1, "{names:?}");
    let stamp = records[0]
        .strip_prefix("records-")
        .and_then(|n| n.strip_suffix("Z.jsonl"))
        .unwrap_or_else(|| panic!("{names:?}"));
    // YYYY-MM-DDTHH-MM-SS
    let shape: String = stamp
        .chars()
        .map(|c| if c.is_ascii_digit() { '9' } else { c })
        .collect();
    assert_eq!(shape, "9999-99-99T99-99-99", "{names:?}");
    assert!(
        stderr.contains(&format!(
            "records in {}",
            dir.path().join("windowtap").join(records[0]).display()
        )),
        "{stderr}"
    );
}

/// `windowtap lookup` finds the record of the `toolu_…` the host showed, by its pseudonym
/// under the key the run kept beside its records (0600); a response id the API sent is found
/// in the records alone; an id of no call is said to be in none (issue 40, item 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookup_finds_the_record_of_the_hosts_own_call_id() {
    if !python() {
        return;
    }
    let (_dir, run) = run_claude("single", "0", Declared::Flag).await;
    assert!(run.status.success(), "{}", run.stderr);
    let key = live_key_path(&run.records_path);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the key is its owner's alone");
    let lookup = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_windowtap"))
            .arg("lookup")
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let records = run.records_path.display().to_string();
    let capture = run.capture.display().to_string();
    let (ok, out, err) = lookup(&["toolu_main", "--records", &records, "--capture", &capture]);
    assert!(ok, "{err}");
    let found: Vec<Value> = out
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(found, run.records, "{out}");
    assert!(out.contains(", started 20"), "the wall-clock time: {out}");
    // The response id the API sent (msg_main_1) is in the records' window.
    let (ok, out, err) = lookup(&["msg_main_1", "--records", &records]);
    assert!(
        ok && out.contains("a call in the window of this response"),
        "{out}{err}"
    );
    // A call id without the capture: said where to look.
    let (ok, _, err) = lookup(&["toolu_main", "--records", &records]);
    assert!(!ok && err.contains("give --capture"), "{err}");
    let (ok, _, err) = lookup(&["toolu_other", "--records", &records, "--capture", &capture]);
    assert!(!ok && err.contains("in none of these records"), "{err}");
    assert!(
        !err.contains("toolu_other"),
        "the raw id is not echoed: {err}"
    );
}

fn live_key_path(records: &Path) -> PathBuf {
    let mut name = records.as_os_str().to_owned();
    name.push(".key");
    PathBuf::from(name)
}

/// A host whose upstream keeps failing is reported while it still runs (here: retrying an
/// upstream where nothing listens), on stderr when that is not a terminal: the host gets
/// only when the line has been seen the word to stop (issue 40, item 5).
#[test]
fn an_upstream_that_keeps_failing_is_reported_while_the_host_runs() {
    if !python() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let gates = dir.path().join("gates");
    std::fs::create_dir_all(&gates).unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let upstream = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let mut child = Command::new(env!("CARGO_BIN_EXE_windowtap"))
        .args(["run", "--records"])
        .arg(dir.path().join("records.jsonl"))
        .arg("--")
        .args([
            host("claude"),
            "-p".into(),
            "hi".into(),
            "--gate-dir".into(),
        ])
        .arg(&gates)
        .args(["--scenario", "retry"])
        .current_dir(dir.path())
        .env("HOME", dir.path())
        .env("ANTHROPIC_BASE_URL", &upstream)
        .env_remove("WINDOWTAP_INGEST")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut all = String::new();
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("warning: while the host runs:") {
                let _ = tx.send(line.clone());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let seen = rx.recv_timeout(WAIT);
    std::fs::write(gates.join("linger.go"), "").unwrap();
    let status = wait_bounded(&mut child).expect("run finishes");
    let all = reader.join().unwrap();
    let line = seen.unwrap_or_else(|_| panic!("no warning while the host ran:\n{all}"));
    assert!(
        line.contains("failed upstream") && line.contains("refused") && line.contains("/anthropic"),
        "{line}"
    );
    assert!(status.success(), "{all}");
}

/// A run refused before its host ran (here: an `--mcp-config` file that is not there, named as
/// missing) leaves no empty records or log file in the state directory (issue 40).
#[test]
fn a_refused_run_says_the_file_is_missing_and_leaves_no_files() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_windowtap"))
        .args([
            "run",
            "--",
            &host("claude"),
            "--mcp-config",
            "nope.json",
            "-p",
            "hi",
        ])
        .current_dir(dir.path())
        .env("HOME", dir.path())
        .env("XDG_STATE_HOME", dir.path())
        .env_remove("WINDOWTAP_INGEST")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("--mcp-config nope.json: no such file"),
        "{stderr}"
    );
    let left: Vec<String> = std::fs::read_dir(dir.path().join("windowtap"))
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// `run --join-host-trace` turns Claude Code's own traces and their propagation on (the
/// scripted claude sends a `traceparent` only when all of Claude Code's switches are set, the
/// OTLP traces endpoint included), and each chat span of the run lands under the host's span
/// its request named, with the MCP call under the response that asked for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_join_host_trace_puts_the_spans_under_claude_codes_own() {
    if !python() {
        return;
    }
    const TRACE: &str = "7e1e7e1e7e1e7e1e7e1e7e1e7e1e7e1e";
    let (collector, got) = otlp_support::receiver(false).await;
    let endpoint = format!("http://{collector}");
    let (_dir, run) = run_claude_args(
        "single",
        "0",
        Declared::Flag,
        &["--otlp-endpoint", &endpoint, "--join-host-trace"],
        &[],
        |_, _| {},
    )
    .await;
    assert_eq!(run.status.code(), Some(0), "{}", run.stderr);
    assert_eq!(run.records.len(), 1, "{}", run.records_text);
    assert_eq!(run.records[0]["decision"], "attributed");
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let spans = otlp_support::spans(&got);
    let chats: Vec<_> = spans
        .iter()
        .filter(|s| s.name.starts_with("chat"))
        .collect();
    assert_eq!(chats.len(), 2, "a turn and its continuation");
    // The scripted host numbers its request spans 1, 2, ...
    let mut parents: Vec<String> = chats
        .iter()
        .map(|c| {
            assert_eq!(hex(&c.trace_id), TRACE);
            hex(&c.parent_span_id)
        })
        .collect();
    parents.sort();
    assert_eq!(parents, ["0000000000000001", "0000000000000002"]);
    let call = spans
        .iter()
        .find(|s| s.name == "execute_tool wait")
        .expect("the MCP call's span");
    assert_eq!(hex(&call.trace_id), TRACE);
    assert!(chats.iter().any(|c| c.span_id == call.parent_span_id));
    let capture = std::fs::read_to_string(&run.capture).unwrap();
    for text in [&run.records_text, &capture, &run.log, &run.stderr] {
        assert!(!text.contains(TRACE));
    }
}
