//! `windowtap env` prints lines a shell evaluates: `eval "$(windowtap env codex)"` defines
//! `codex` so that it goes through the relay, `eval "$(windowtap env claude)"` exports
//! `ANTHROPIC_BASE_URL`.

mod support;

use std::path::Path;
use std::process::Command;

use support::Relay;

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
    // Something answers at the URL, so `env` has nothing to warn of.
    let _relay = std::net::TcpListener::bind("127.0.0.1:9000");
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
    let mut relay = Relay::start(&[]);
    let out = bash(
        dir.path(),
        &format!(
            r#"set -e; eval "$(windowtap env claude --ingest {})"; printf '%s\n' "$ANTHROPIC_BASE_URL" "$WINDOWTAP_INGEST""#,
            relay.ingest.display()
        ),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "http://{}/anthropic\n{}\n",
            relay.addr,
            relay.ingest.display()
        ),
        "the URL is the relay's that listens on the socket"
    );
    relay.stop();
}

/// `windowtap env` in a shell whose default ingest socket is under `tmpdir`.
fn env_cmd(tmpdir: &Path, args: &[&str], ingest: Option<&Path>) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_windowtap"));
    cmd.arg("env")
        .args(args)
        .env("TMPDIR", tmpdir)
        .env("HOME", tmpdir)
        .env("CODEX_HOME", tmpdir)
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("WINDOWTAP_INGEST");
    if let Some(p) = ingest {
        cmd.env("WINDOWTAP_INGEST", p);
    }
    cmd.output().expect("windowtap env")
}

/// Two relays of one user side by side (issue 27, item 3): one on the default ingest socket,
/// one on a socket of its own. What `env` prints always belongs to one of them: the URL of the
/// relay whose socket it exports, and a --relay naming the other is refused, saying why.
#[test]
fn with_two_relays_env_prints_the_url_and_socket_of_one_relay_or_refuses() {
    let tmp = tempfile::tempdir().unwrap();
    let mut first = Relay::start_at_default(&[], tmp.path());
    let mut second = Relay::start(&[]);

    // The second relay's URL with no socket named: the default socket is the first's.
    let url = format!("http://{}", second.addr);
    let out = env_cmd(tmp.path(), &["claude", "--relay", &url], None);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "refused, not paired: {stdout}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains(&format!(
            "the ingest socket {} belongs to the relay on http://{} (pid {}), not to {url}",
            first.ingest.display(),
            first.addr,
            first.pid()
        )),
        "{stderr}"
    );

    // The second relay's socket (as `eval` of its lines exports it): its own URL.
    let out = env_cmd(tmp.path(), &["claude"], Some(&second.ingest));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "export ANTHROPIC_BASE_URL=http://{}/anthropic\nexport WINDOWTAP_INGEST='{}'\n",
            second.addr,
            second.ingest.display()
        )
    );

    // Nothing named: the relay on the default socket, URL and socket both.
    let out = env_cmd(tmp.path(), &["codex", "--codex-auth", "api"], None);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!(
            "openai_base_url=\"http://{}/openai/v1\"",
            first.addr
        )) && stdout.contains(&format!(
            "export WINDOWTAP_INGEST='{}'",
            first.ingest.display()
        )),
        "{stdout}"
    );

    // A socket nobody listens on is refused, not printed.
    second.stop();
    let out = env_cmd(tmp.path(), &["claude"], Some(&second.ingest));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("no relay can be reached on the ingest socket"),
        "{stderr}"
    );
    first.stop();
}

/// `windowtap env` with no relay at the URL it prints says so on stderr (a host pointed there
/// retried for minutes with nothing on screen); `env claude` says when a settings file's `env`
/// sets ANTHROPIC_BASE_URL, which Claude Code applies over the export, so that the host would
/// go past the relay (issue 40, items 3 and 5). Both warnings leave stdout to the lines.
#[test]
fn env_says_when_no_relay_answers_and_when_claudes_settings_override_it() {
    let dir = tempfile::tempdir().unwrap();
    let env = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_windowtap"))
            .arg("env")
            .args(args)
            .current_dir(dir.path())
            .env("HOME", dir.path())
            .env_remove("WINDOWTAP_INGEST")
            .env("XDG_RUNTIME_DIR", "/nonexistent-windowtap-test")
            .output()
            .unwrap();
        assert!(out.status.success());
        (
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let (out, err) = env(&["claude", "--relay", &url]);
    assert!(out.starts_with("export ANTHROPIC_BASE_URL="), "{out}");
    assert!(
        err.contains(&format!(
            "no relay answers at {url} (nothing listens there)"
        )),
        "{err}"
    );
    assert!(!err.contains("settings"), "{err}");

    let mut relay = Relay::start(&[]);
    let url = format!("http://{}", relay.addr);
    let (_, err) = env(&["claude", "--relay", &url]);
    assert!(err.is_empty(), "{err}");
    std::fs::create_dir_all(dir.path().join(".claude")).unwrap();
    std::fs::write(
        dir.path().join(".claude/settings.json"),
        r#"{"env":{"ANTHROPIC_BASE_URL":"https://gw.example/SECRET-PATH"}}"#,
    )
    .unwrap();
    let (_, err) = env(&["claude", "--relay", &url]);
    assert!(
        err.contains("warning: .claude/settings.json sets ANTHROPIC_BASE_URL"),
        "{err}"
    );
    assert!(!err.contains("SECRET-PATH"), "the URL is not echoed: {err}");
    relay.stop();
}

/// `env codex --shim DIR` puts a `codex` on PATH that passes the relay's URL, which `timeout`
/// and scripts run (a shell function they never see: `timeout 120 codex exec …` went to the
/// real API; issue 40, item 4); removing DIR/codex goes back.
#[test]
fn env_codex_shim_puts_a_codex_on_path_that_timeout_sees() {
    let dir = tempfile::tempdir().unwrap();
    fake_codex(dir.path());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let shim = dir.path().join("shim");
    let out = bash(
        dir.path(),
        &format!(
            r#"set -e; eval "$(windowtap env codex --codex-auth api --relay {url} --shim {})"; timeout 20 codex exec hi"#,
            shim.display()
        ),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("-c\nopenai_base_url=\"{url}/openai/v1\"\nexec\nhi\n")
    );
    // The way back: without the shim, codex is the real one again.
    std::fs::remove_file(shim.join("codex")).unwrap();
    let out = bash(
        dir.path(),
        &format!("export PATH={}:\"$PATH\"; codex exec hi", shim.display()),
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "exec\nhi\n");
}
