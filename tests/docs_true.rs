//! What the README, the pages in `docs/` and the help say is what the code does (issue 27,
//! item 8): each check is against the thing itself (the trace directory, a capture's header,
//! the help text), so a change to either side that leaves the other behind fails here. Each
//! statement is checked on the page that makes it (`page`).

mod support;

use std::path::Path;
use std::process::Command;

/// A page of the repository by its path: `README.md`, `docs/usage.md`, ….
fn page(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The README and every page in `docs/`.
fn pages() -> Vec<(String, String)> {
    let mut names = vec!["README.md".to_string()];
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    let mut md: Vec<String> = std::fs::read_dir(docs)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    md.sort();
    names.extend(md);
    names.into_iter().map(|n| (page(&n), n)).collect()
}

/// The issue asks for a README one reads in minutes; the rest lives in `docs/`.
#[test]
fn the_readme_is_a_page() {
    let lines = page("README.md").lines().count();
    assert!(
        lines <= 200,
        "README.md has {lines} lines; move detail to docs/"
    );
}

#[test]
fn the_readme_installs_with_the_locked_versions() {
    assert!(page("README.md").contains("cargo install --path . --locked"));
    for (text, name) in pages() {
        for (i, _) in text.match_indices("cargo install") {
            let line = text[i..].lines().next().unwrap();
            assert!(
                line.contains("cargo install --path . --locked"),
                "{name}: without --locked, cargo install picks other crate versions than the \
                 tests ran against: {line}"
            );
        }
    }
}

#[test]
fn the_testing_page_counts_the_traces_there_are() {
    let traces = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("traces"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "jsonl")
        })
        .count();
    let testing = page("docs/testing.md");
    let said = testing
        .split(" hand-written traces in `traces/`")
        .next()
        .and_then(|before| before.rsplit(' ').next())
        .and_then(|n| n.parse::<usize>().ok())
        .expect("docs/testing.md counts the hand-written traces");
    assert_eq!(said, traces);
}

/// The replay section (docs/usage.md) names every option a capture's header carries (what
/// replay takes from it): read off a real capture.
#[test]
fn the_replay_section_names_every_option_of_a_capture_header() {
    let dir = tempfile::tempdir().unwrap();
    let capture = dir.path().join("capture.jsonl");
    let mut relay =
        support::Relay::start(&["--capture".to_string(), capture.display().to_string()]);
    assert!(relay.stop().success(), "{}", relay.log());
    let header: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(&capture)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    let options: Vec<&String> = header
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| !["type", "version", "epoch_unix_ms", "end"].contains(&k.as_str()))
        .collect();
    assert!(!options.is_empty(), "{header}");
    let usage = page("docs/usage.md");
    let sentence = usage
        .split("taken from the trace header (")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .expect("the replay section says which header options it takes")
        .replace('\n', " ");
    for o in options {
        assert!(
            sentence.contains(&format!("`{o}`")),
            "`{o}` missing: {sentence}"
        );
    }
}

#[test]
fn capture_help_names_the_trace_version_written() {
    for cmd in ["relay", "run"] {
        let out = Command::new(env!("CARGO_BIN_EXE_windowtap"))
            .args([cmd, "--help"])
            .output()
            .unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        // The option's paragraph: its line and the description under it.
        let text = help
            .split("--capture")
            .nth(1)
            .and_then(|rest| rest.split("\n  -").next())
            .unwrap_or_default();
        assert!(text.contains("trace v2"), "{cmd}: {text}");
    }
}

/// `npx -y` with Codex: the wrapper's section (docs/usage.md) says why it can fail and shows
/// the installed binary.
#[test]
fn the_wrap_section_shows_an_installed_server_beside_npx() {
    let usage = page("docs/usage.md");
    assert!(
        usage.contains("npm install -g @modelcontextprotocol/server-everything")
            && usage.contains(r#""--", "mcp-server-everything"]"#),
        "the installed-binary alternative"
    );
}

/// `-h` is a short summary (at most 40 lines) and `--help` the whole, with the relay's tuning,
/// the rule's options and rotation each under its own heading (issue 40: `-h` was the same
/// 118 lines as `--help`, the relay's tuning flags dominating `run`'s help).
#[test]
fn short_help_is_a_summary_and_long_help_puts_tuning_under_its_heading() {
    let help = |cmd: &str, flag: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_windowtap"))
            .args([cmd, flag])
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    for cmd in ["run", "relay"] {
        let short = help(cmd, "-h");
        assert!(short.lines().count() <= 40, "{cmd} -h:\n{short}");
        assert!(
            short.contains("--listen") && short.contains("--records"),
            "{short}"
        );
        assert!(!short.contains("--connect-timeout"), "{cmd} -h:\n{short}");
        let long = help(cmd, "--help");
        let tuning = long
            .split("\nRelay tuning:\n")
            .nth(1)
            .unwrap_or_else(|| panic!("{cmd} --help has no Relay tuning heading:\n{long}"));
        for flag in ["--connect-timeout", "--drain", "--max-connections"] {
            assert!(
                tuning.contains(flag),
                "{cmd} --help: {flag} under Relay tuning"
            );
        }
        assert!(long.contains("\nDecision rule:\n") && long.contains("\nRotation:\n"));
    }
}

/// The README's sample of replay's summary is what `windowtap replay traces/` prints (it
/// said 60 intervals after the bundled traces had grown to 71; issue 40).
#[test]
fn the_readmes_replay_summary_is_what_replay_of_the_traces_prints() {
    let readme = page("README.md").replace('\n', " ");
    let sample = readme
        .split("one-line summary on stderr (`")
        .nth(1)
        .and_then(|rest| rest.split('`').next())
        .expect("the README quotes replay's summary");
    let shown = sample.trim_end_matches(')').trim_end_matches('…');
    let out = Command::new(env!("CARGO_BIN_EXE_windowtap"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["replay", "traces/"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summary = stderr.lines().last().unwrap_or_default();
    assert!(
        summary.starts_with(shown),
        "README: {sample}\nreplay: {summary}"
    );
}
