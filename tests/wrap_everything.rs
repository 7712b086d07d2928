//! `windowtap wrap` around a real MCP server nobody here wrote:
//! `@modelcontextprotocol/server-everything` from npm, installed once into a cache under
//! `target/`. A scripted client runs a session through the wrapper while a tee between the
//! wrapper and the server logs both streams; every byte must match, and every `tools/call`
//! must be reported with its outcome and hints.

mod wrap_support;

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use correlator::{Hints, Outcome};
use serde_json::json;
use wrap_support::*;

const PACKAGE: &str = "@modelcontextprotocol/server-everything@2026.8.31";

/// The server's entry point, installing the package on first use; `None` (with a message)
/// where npm or node is absent.
fn server_everything() -> Option<PathBuf> {
    static ENTRY: OnceLock<Option<PathBuf>> = OnceLock::new();
    ENTRY
        .get_or_init(|| {
            if !have("npm") || !have("node") {
                eprintln!("SKIPPED: npm/node not installed; cannot run @modelcontextprotocol/server-everything");
                return None;
            }
            let prefix = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("npm");
            let entry = prefix.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
            if !entry.exists() {
                let status = Command::new("npm")
                    .args(["install", "--no-audit", "--no-fund", "--prefix"])
                    .arg(&prefix)
                    .arg(PACKAGE)
                    .status()
                    .expect("run npm");
                assert!(status.success(), "npm install {PACKAGE} failed");
            }
            assert!(entry.exists(), "{} missing after npm install", entry.display());
            Some(entry)
        })
        .clone()
}

fn tools_of(list: &serde_json::Value) -> Vec<String> {
    list["result"]["tools"]
        .as_array()
        .expect("a tool list")
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_real_server_session_passes_byte_for_byte_and_every_call_is_reported() {
    let Some(entry) = server_everything() else {
        return;
    };
    if !have("python3") {
        eprintln!("SKIPPED: python3 is not installed; the tee needs it");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ingest = Ingest::start(&dir.path().join("ingest.sock"));
    let (in_log, out_log) = (dir.path().join("in.bin"), dir.path().join("out.bin"));
    let tee = fixture("tee.py");
    let server = [
        "python3",
        tee.to_str().unwrap(),
        in_log.to_str().unwrap(),
        out_log.to_str().unwrap(),
        "node",
        entry.to_str().unwrap(),
        "stdio",
    ];
    let mut w = Wrapped::start("everything", Some(&ingest.path), &server);

    // The initialize-era handshake, with the host's burst right after the answer.
    w.send_json(&init_request(json!(0)));
    w.response(json!(0));
    w.send_json(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    w.send_json(&json!({"jsonrpc":"2.0","id":"list","method":"tools/list"}));
    let tools = tools_of(&w.response(json!("list")));
    for needed in ["echo", "trigger-long-running-operation"] {
        assert!(
            tools.iter().any(|t| t == needed),
            "server-everything lists {needed}: {tools:?}"
        );
    }

    // Claude Code's shape: integer id, toolUseId in _meta.
    w.send_json(&call(
        json!(1),
        "echo",
        json!({"message":"hi"}),
        json!({"claudecode/toolUseId":"toolu_ev1","progressToken":1}),
    ));
    assert_eq!(
        w.response(json!(1))["result"]["content"][0]["text"],
        "Echo: hi"
    );
    // Codex's shape: string id, itemId / callId / threadId.
    w.send_json(&call(
        json!("s-2"),
        "echo",
        json!({"message":"again"}),
        json!({"itemId":"fc_ev2","callId":"call_ev2","threadId":"th_ev","progressToken":2,"x-codex-turn-metadata":{"turn_id":"t1"}}),
    ));
    assert_eq!(
        w.response(json!("s-2"))["result"]["content"][0]["text"],
        "Echo: again"
    );
    // A tool that does not exist: the server answers with an error.
    w.send_json(&call(json!(3), "no-such-tool", json!({}), json!({})));
    let failed = w.response(json!(3));
    assert!(
        failed.get("error").is_some() || failed["result"]["isError"] == true,
        "{failed}"
    );
    // A long call, cancelled once it has shown progress.
    w.send_json(&call(
        json!("long"),
        "trigger-long-running-operation",
        json!({"duration": 4, "steps": 40}),
        json!({"progressToken":"p-long"}),
    ));
    w.wait_for("progress of the long call", |v| {
        v["method"] == "notifications/progress" && v["params"]["progressToken"] == "p-long"
    });
    w.send_json(&json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"long","reason":"test"}}));
    // The session goes on.
    w.send_json(&call(
        json!(4),
        "echo",
        json!({"message":"after"}),
        json!({}),
    ));
    assert_eq!(
        w.response(json!(4))["result"]["content"][0]["text"],
        "Echo: after"
    );

    let events = started(ingest.stop_after(5));
    let sent = w.sent.clone();
    let (status, received, stderr) = w.wait();
    assert!(status.success(), "wrapper exit {status}; stderr: {stderr}");
    assert!(
        std::fs::read(&in_log).unwrap() == sent,
        "the server received exactly what the client sent"
    );
    assert!(
        std::fs::read(&out_log).unwrap() == received,
        "the client received exactly what the server wrote"
    );

    let got = intervals(&events);
    let summary: Vec<(&str, &str, Outcome)> = got
        .iter()
        .map(|i| (i.alias.as_str(), i.tool.as_str(), i.outcome))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("everything", "echo", Outcome::Result),
            ("everything", "echo", Outcome::Result),
            ("everything", "no-such-tool", Outcome::Error),
            (
                "everything",
                "trigger-long-running-operation",
                Outcome::Cancelled
            ),
            ("everything", "echo", Outcome::Result),
        ]
    );
    assert_eq!(
        got[0].hints,
        Hints {
            tool_use_id: Some(pseudo("toolu_ev1")),
            ..Hints::default()
        }
    );
    assert_eq!(
        got[1].hints,
        Hints {
            tool_use_id: None,
            item_id: Some(pseudo("fc_ev2")),
            call_id: Some(pseudo("call_ev2")),
            thread: Some(pseudo("th_ev")),
        }
    );
    for pair in got.windows(2) {
        assert!(
            pair[0].end <= pair[1].start,
            "calls made one after another are reported in order: {got:#?}"
        );
    }
}
