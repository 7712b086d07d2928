//! `windowtap env`: the lines that point a host at a running relay.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_windowtap");

fn env(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(BIN)
        .arg("env")
        .args(args)
        .env_remove("WINDOWTAP_INGEST")
        .env("XDG_RUNTIME_DIR", "/nonexistent-windowtap-test")
        .output()
        .expect("run windowtap env");
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn claude_is_pointed_at_the_anthropic_mount_of_the_default_relay() {
    let (ok, out, _) = env(&["claude"]);
    assert!(ok);
    assert!(
        out.starts_with("export ANTHROPIC_BASE_URL=http://127.0.0.1:8787/anthropic\n"),
        "{out}"
    );
}

#[test]
fn codex_gets_the_api_key_and_chatgpt_variants_and_the_ingest_path_when_given() {
    let (ok, out, _) = env(&[
        "codex",
        "--relay",
        "http://127.0.0.1:9999",
        "--ingest",
        "/run/x/ingest.sock",
    ]);
    assert!(ok);
    assert!(
        out.contains("-c 'openai_base_url=\"http://127.0.0.1:9999/openai/v1\"'"),
        "{out}"
    );
    assert!(
        out.contains("-c 'openai_base_url=\"http://127.0.0.1:9999/chatgpt\"'"),
        "{out}"
    );
    assert!(
        out.contains("export WINDOWTAP_INGEST='/run/x/ingest.sock'"),
        "{out}"
    );
}

#[test]
fn a_relay_url_that_would_break_the_shell_line_is_refused() {
    let (ok, out, err) = env(&["claude", "--relay", "http://x'; rm -rf ~; '"]);
    assert!(!ok);
    assert!(out.is_empty());
    assert!(err.contains("--relay"), "{err}");
}
