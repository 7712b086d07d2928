//! `windowtap check` as a user runs it: trace and records files told apart by their first
//! line, every file checked, each error named by file, line and field, exit 1 if any is bad.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn windowtap(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_windowtap"))
        .args(args)
        .output()
        .expect("run windowtap")
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

const TRACE: &str = concat!(
    r#"{"type":"trace","version":1}"#,
    "\n",
    r#"{"type":"stream_open","t":0,"stream":"s1","client":"codex","transport":"websocket","thread":"th1"}"#,
    "\n",
    r#"{"type":"request","t":6000,"stream":"s1","request":"q1","previous_response":null,"outputs":[]}"#,
    "\n",
    r#"{"type":"response_start","t":6100,"stream":"s1","response":"r1","request":"q1"}"#,
    "\n",
    r#"{"type":"tool_call","t":6905,"stream":"s1","response":"r1","call":"c1","item":"fc1","name":"echo","namespace":"mcp__probe","kind":"function"}"#,
    "\n",
    r#"{"type":"response_end","t":6957,"stream":"s1","response":"r1","status":"completed"}"#,
    "\n",
    r#"{"type":"mcp_interval","t":7265,"interval":"i1","alias":"probe","tool":"echo","start":7187,"end":7264,"outcome":"result","tool_use_id":null,"item_id":"fc1","call_id":"c1","thread":"th1"}"#,
    "\n",
    r#"{"type":"request","t":7278,"stream":"s1","request":"q2","previous_response":"r1","outputs":[]}"#,
    "\n",
);

#[test]
fn a_trace_and_the_records_replay_writes_for_it_both_check_clean() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write(dir.path(), "run.jsonl", TRACE);
    let records = dir.path().join("records.jsonl");
    let out = windowtap(&["replay", s(&trace), "-o", s(&records)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = windowtap(&["check", s(&trace), s(&records)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!(
            "{}: ok (7 events)\n{}: ok (1 records)\n",
            s(&trace),
            s(&records)
        )
    );
}

#[test]
fn every_file_is_checked_and_each_error_names_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let good = write(dir.path(), "a_good.jsonl", TRACE);
    let bad_trace = write(
        dir.path(),
        "b_bad_trace.jsonl",
        &TRACE.replace(r#""status":"completed""#, r#""status":"done""#),
    );
    let bad_records = write(
        dir.path(),
        "c_bad_records.jsonl",
        concat!(
            r#"{"type":"attribution","version":1,"interval":"i2","alias":"probe","tool":"echo","start":7187,"end":7264,"decision":"abstained","reason":"ambiguous","evidence":[],"candidates":2,"window":null,"decided_at":7280}"#,
            "\n",
            r#"{"type":"attribution","version":1,"interval":"i3","alias":"probe","tool":"echo","start":7187,"end":7264,"decision":"abstained","reason":null,"evidence":[],"candidates":0,"window":null,"decided_at":7280}"#,
            "\n"
        ),
    );
    let missing = dir.path().join("missing.jsonl");

    let out = windowtap(&[
        "check",
        s(&bad_trace),
        s(&good),
        s(&bad_records),
        s(&missing),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stdout, format!("{}: ok (7 events)\n", s(&good)));
    let errors: Vec<&str> = stderr.lines().collect();
    assert_eq!(errors.len(), 3, "{stderr}");
    assert!(
        errors[0].starts_with(&format!(
            "{}:6: field `status`: `done` is not one of",
            s(&bad_trace)
        )),
        "{stderr}"
    );
    assert!(
        errors[1].starts_with(&format!("{}:2: field `reason`: ", s(&bad_records))),
        "{stderr}"
    );
    assert!(errors[2].starts_with(s(&missing)), "{stderr}");

    // A directory means its *.jsonl files, in name order.
    let out = windowtap(&["check", s(dir.path())]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!("{}: ok (7 events)\n", s(&good))
    );
    assert_eq!(String::from_utf8(out.stderr).unwrap().lines().count(), 2);
}

/// An empty file is not a trace (a trace begins with its header line, design.md §5), and
/// `check` says so as `replay` does, in the same words; a header with no events is a trace.
#[test]
fn an_empty_file_is_an_empty_records_file_never_a_trace_for_check_as_for_replay() {
    let dir = tempfile::tempdir().unwrap();
    let empty = write(dir.path(), "empty.jsonl", "");
    let blank = write(dir.path(), "blank.jsonl", "\n  \n");
    let header = write(
        dir.path(),
        "header.jsonl",
        "{\"type\":\"trace\",\"version\":1}\n",
    );
    // A relay during which no MCP call ran writes an empty records file: it checks clean, and
    // the verdict says it is no trace.
    let out = windowtap(&["check", s(&empty), s(&blank), s(&header)]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let verdict = "ok (0 records; an empty file, so not a trace: replay refuses it)";
    assert_eq!(
        stdout,
        format!(
            "{}: {verdict}\n{}: {verdict}\n{}: ok (0 events)\n",
            s(&empty),
            s(&blank),
            s(&header)
        )
    );
    for file in [&empty, &blank] {
        let replay = windowtap(&["replay", s(file)]);
        assert_eq!(replay.status.code(), Some(1));
        let said = String::from_utf8(replay.stderr).unwrap();
        assert!(said.contains("empty trace"), "replay said {said}");
    }
    let replay = windowtap(&["replay", s(&header)]);
    assert!(replay.status.success());
}

/// Every bundled trace and expected records file (`*.jsonl` in traces/ and traces/expected/)
/// checks clean.
#[test]
fn the_bundled_traces_and_expected_records_check_clean() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("traces");
    let mut files: Vec<PathBuf> = Vec::new();
    for dir in [root.clone(), root.join("expected")] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        files.extend(
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "jsonl")),
        );
    }
    files.sort();
    if files.is_empty() {
        eprintln!("no bundled traces yet under {}", root.display());
        return;
    }
    let args: Vec<&str> = std::iter::once("check")
        .chain(files.iter().map(|p| s(p)))
        .collect();
    let out = windowtap(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().lines().count(),
        files.len()
    );
}
