//! `windowtap env`: the lines that point a host at a running relay.

mod support;

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

/// The URL and the socket of one running relay (`env` refuses a pair it cannot tie to one).
#[test]
fn codex_gets_a_function_for_its_login_and_the_ingest_path_when_given() {
    let mut relay = support::Relay::start(&[]);
    let url = format!("http://{}", relay.addr);
    let sock = relay.ingest.display().to_string();
    for (auth, mount) in [("api", "openai/v1"), ("chatgpt", "chatgpt")] {
        let (ok, out, err) = env(&[
            "codex",
            "--relay",
            &url,
            "--ingest",
            &sock,
            "--codex-auth",
            auth,
        ]);
        assert!(ok, "{err}");
        assert!(
            out.contains(&format!(
                "codex() {{ command codex -c 'openai_base_url=\"{url}/{mount}\"' \"$@\"; }}"
            )),
            "{out}"
        );
        assert!(
            out.contains(&format!("export WINDOWTAP_INGEST='{sock}'")),
            "{out}"
        );
        // Every line is shell: a comment, an export or the function.
        assert!(
            out.lines().all(|l| l.starts_with('#')
                || l.starts_with("export ")
                || l.starts_with("codex() {")),
            "{out}"
        );
    }
    relay.stop();
}

#[test]
fn a_relay_url_that_would_break_the_shell_line_is_refused() {
    let (ok, out, err) = env(&["claude", "--relay", "http://x'; rm -rf ~; '"]);
    assert!(!ok);
    assert!(out.is_empty());
    assert!(err.contains("--relay"), "{err}");
}
