//! `windowtap env` prints lines a shell evaluates: `eval "$(windowtap env codex)"` defines
//! `codex` so that it goes through the relay, `eval "$(windowtap env claude)"` exports
//! `ANTHROPIC_BASE_URL`.

use std::path::Path;
use std::process::Command;

/// Runs `script` in bash with `dir` first on PATH and `dir` as CODEX_HOME and HOME.
fn bash(dir: &Path, script: &str) -> std::process::Output {
    let path = format!(
        "{}:{}:{}",
        dir.display(),
        Path::new(env!("CARGO_BIN_EXE_windowtap"))
            .parent()
            .unwrap()
            .display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new("bash")
        .args(["--norc", "--noprofile", "-c", script])
        .env("PATH", path)
        .env("HOME", dir)
        .env("CODEX_HOME", dir)
        .env_remove("WINDOWTAP_INGEST")
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .expect("bash")
}

/// A `codex` that prints its arguments, one per line.
fn fake_codex(dir: &Path) {
    let p = dir.join("codex");
    std::fs::write(
        &p,
        "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn eval_of_env_codex_defines_a_codex_that_goes_through_the_relay() {
    let dir = tempfile::tempdir().unwrap();
    fake_codex(dir.path());
    let out = bash(
        dir.path(),
        r#"set -e; eval "$(windowtap env codex --relay http://127.0.0.1:9000)"; type codex >/dev/null; codex exec "list the files""#,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "-c\nopenai_base_url=\"http://127.0.0.1:9000/openai/v1\"\nexec\nlist the files\n"
    );

    // A ChatGPT login (auth.json) goes to the /chatgpt mount.
    std::fs::write(dir.path().join("auth.json"), r#"{"auth_mode":"chatgpt"}"#).unwrap();
    let out = bash(
        dir.path(),
        r#"set -e; eval "$(windowtap env codex --relay http://127.0.0.1:9000)"; codex"#,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "-c\nopenai_base_url=\"http://127.0.0.1:9000/chatgpt\"\n"
    );
}

#[test]
fn eval_of_env_claude_exports_the_base_url_and_the_ingest_socket() {
    let dir = tempfile::tempdir().unwrap();
    let out = bash(
        dir.path(),
        r#"set -e; eval "$(windowtap env claude --ingest /run/x/ingest.sock)"; printf '%s\n' "$ANTHROPIC_BASE_URL" "$WINDOWTAP_INGEST""#,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "http://127.0.0.1:8787/anthropic\n/run/x/ingest.sock\n"
    );
}
