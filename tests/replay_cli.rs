//! `windowtap replay` as a user runs it: files and directories in, records out, clear errors.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn windowtap(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_windowtap"))
        .args(args)
        .output()
        .expect("run windowtap")
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

const HEADER: &str = r#"{"type":"trace","version":1}"#;

/// A Codex-shaped run: call item complete at 6905, response completed 6957, MCP call
/// 7187–7264, continuation at 7278 (seed 000).
fn codex_single_call() -> String {
    [
        HEADER,
        r#"{"type":"stream_open","t":0,"stream":"s1","client":"codex","transport":"websocket","thread":"th1"}"#,
        r#"{"type":"request","t":6000,"stream":"s1","request":"q1","previous_response":null,"outputs":[]}"#,
        r#"{"type":"response_start","t":6100,"stream":"s1","response":"r1","request":"q1"}"#,
        r#"{"type":"tool_call","t":6905,"stream":"s1","response":"r1","call":"c1","item":"fc1","name":"echo","namespace":"mcp__probe","kind":"function"}"#,
        r#"{"type":"response_end","t":6957,"stream":"s1","response":"r1","status":"completed"}"#,
        r#"{"type":"mcp_interval","t":7265,"interval":"i1","alias":"probe","tool":"echo","start":7187,"end":7264,"outcome":"result","tool_use_id":null,"item_id":"fc1","call_id":"c1","thread":"th1"}"#,
        r#"{"type":"request","t":7278,"stream":"s1","request":"q2","previous_response":"r1","outputs":[]}"#,
        "",
    ]
    .join("\n")
}

#[test]
fn a_trace_replays_to_its_record_and_a_summary() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write(dir.path(), "codex.jsonl", &codex_single_call());
    let out = windowtap(&["replay", trace.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        stdout,
        concat!(
            r#"{"type":"attribution","version":1,"interval":"i1","alias":"probe","tool":"echo","start":7187,"end":7264,"#,
            r#""decision":"attributed","reason":null,"evidence":["containment","item_id","call_id","thread","route"],"candidates":1,"#,
            r#""window":{"thread":"th1","stream":"s1","response":"r1","request":"q2","open":6905,"close":7278},"decided_at":7278}"#,
            "\n"
        )
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "1 interval: 1 attributed, 0 abstained (incomplete 0, ambiguous 0, unclosed 0, identity_conflict 0, no_window 0)"
    );
}

#[test]
fn options_come_from_the_command_line_then_the_header() {
    let dir = tempfile::tempdir().unwrap();
    let text =
        codex_single_call().replacen(HEADER, r#"{"type":"trace","version":1,"close_wait":5}"#, 1);
    let trace = write(dir.path(), "short.jsonl", &text);
    // close_wait 5 from the header: given up at 7269, before the continuation.
    let out = windowtap(&["replay", trace.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stdout).contains(r#""reason":"unclosed""#));
    assert!(String::from_utf8_lossy(&out.stdout).contains(r#""decided_at":7269"#));
    // The command line wins over the header.
    let out = windowtap(&["replay", trace.to_str().unwrap(), "--close-wait", "1000"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains(r#""decision":"attributed""#));
}

#[test]
fn output_file_and_directory_inputs() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.jsonl", &codex_single_call());
    write(
        dir.path(),
        "b.jsonl",
        &codex_single_call().replace("\"i1\"", "\"i2\""),
    );
    write(dir.path(), "notes.txt", "not a trace");
    let records = dir.path().join("out").with_extension("records");
    let out = windowtap(&[
        "replay",
        dir.path().to_str().unwrap(),
        "-o",
        records.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty());
    let text = std::fs::read_to_string(&records).unwrap();
    let intervals: Vec<&str> = text
        .lines()
        .map(|l| if l.contains("\"i1\"") { "i1" } else { "i2" })
        .collect();
    assert_eq!(
        intervals,
        ["i1", "i2"],
        "each file on its own, in name order"
    );
}

#[test]
fn replaying_twice_gives_identical_bytes() {
    let a = windowtap(&["replay", repo().join("traces").to_str().unwrap()]);
    let b = windowtap(&["replay", repo().join("traces").to_str().unwrap()]);
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    assert!(!a.stdout.is_empty());
    assert_eq!(a.stdout, b.stdout);
    assert_eq!(a.stderr, b.stderr);
}

/// Every malformed trace is exit code 1 and one message naming the file, line and field.
#[test]
fn malformed_traces_fail_with_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let open = r#"{"type":"stream_open","t":5,"stream":"s1","client":"claude","transport":"http","thread":null}"#;
    let cases: &[(&str, String, &str)] = &[
        ("empty", String::new(), "empty.jsonl:1: empty trace"),
        (
            "noheader",
            format!("{open}\n"),
            "noheader.jsonl:1: field `type`",
        ),
        (
            "badjson",
            format!("{HEADER}\n{{oops\n"),
            "badjson.jsonl:2: bad JSON",
        ),
        (
            "unknown",
            format!("{HEADER}\n{{\"type\":\"wat\",\"t\":1}}\n"),
            "unknown.jsonl:2: field `type`: unknown event type `wat`",
        ),
        (
            "missing",
            format!("{HEADER}\n{}\n", open.replace(r#","thread":null"#, "")),
            "missing.jsonl:2: field `thread`: missing",
        ),
        (
            "mistyped",
            format!("{HEADER}\n{}\n", open.replace(r#""t":5"#, r#""t":"5""#)),
            "mistyped.jsonl:2: field `t`: expected a number",
        ),
        (
            "backwards",
            format!(
                "{HEADER}\n{open}\n{}\n",
                r#"{"type":"stream_close","t":4,"stream":"s1"}"#
            ),
            "backwards.jsonl:3: field `t`",
        ),
        (
            "notopen",
            format!(
                "{HEADER}\n{}\n",
                r#"{"type":"stream_close","t":4,"stream":"s9"}"#
            ),
            "notopen.jsonl:2: field `stream`: stream `s9` is not open",
        ),
        (
            "endstart",
            format!(
                "{HEADER}\n{}\n",
                r#"{"type":"mcp_interval","t":9,"interval":"i","alias":"a","tool":"t","start":5,"end":3,"outcome":"result"}"#
            ),
            "endstart.jsonl:2: field `end`",
        ),
        (
            "badheader",
            r#"{"type":"trace","version":1,"close_wait":"soon"}"#.to_string() + "\n",
            "badheader.jsonl:1: header field `close_wait`",
        ),
    ];
    for (name, text, needle) in cases {
        let path = write(dir.path(), &format!("{name}.jsonl"), text);
        let out = windowtap(&["replay", path.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {stderr}");
        assert!(stderr.contains(needle), "{name}: {stderr}");
        assert!(!stderr.contains("panicked"), "{name}: {stderr}");
        assert!(out.stdout.is_empty(), "{name}: no partial records");
    }
}

#[test]
fn bad_arguments_are_named() {
    let out = windowtap(&["replay", "/nonexistent/trace.jsonl"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/trace.jsonl"));
    let out = windowtap(&["replay", "x.jsonl", "--window-open", "sometimes"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("`sometimes` is not `call` or `response`")
    );
    let out = windowtap(&["replay", "x.jsonl", "--close-wait", "-5"]);
    assert!(!out.status.success());
}

/// `--candidates` on the command line wins over the header's `candidates`, which wins over the
/// default (`eligible`); a bad word is refused with the field named.
#[test]
fn candidates_come_from_the_command_line_then_the_header() {
    let trace = repo().join("traces/dead_host_open_window.jsonl");
    let trace_all = repo().join("traces/dead_host_open_window_all.jsonl");
    let expected = |name: &str| {
        std::fs::read_to_string(repo().join(format!("traces/expected/{name}.records.jsonl")))
            .unwrap()
    };
    let run = |args: &[&str]| {
        let out = windowtap(args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let t = trace.to_str().unwrap();
    let t_all = trace_all.to_str().unwrap();
    assert_eq!(run(&["replay", t]), expected("dead_host_open_window"));
    assert_eq!(
        run(&["replay", t_all]),
        expected("dead_host_open_window_all")
    );
    assert_eq!(
        run(&["replay", t, "--candidates", "all"]),
        expected("dead_host_open_window_all")
    );
    assert_eq!(
        run(&["replay", t_all, "--candidates", "eligible"]),
        expected("dead_host_open_window")
    );

    let dir = tempfile::tempdir().unwrap();
    let bad = std::fs::read_to_string(&trace).unwrap().replacen(
        r#"{"type":"trace","version":2}"#,
        r#"{"type":"trace","version":2,"candidates":"some"}"#,
        1,
    );
    let bad = write(dir.path(), "bad.jsonl", &bad);
    let out = windowtap(&["replay", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("header field `candidates`"), "{err}");
    let out = windowtap(&["replay", t, "--candidates", "some"]);
    assert!(!out.status.success());
}

/// One verdict: over a directory of good and bad traces, `check` and `replay` call the same
/// files bad, in the same words; `replay` still replays the good ones (and a bad one's records
/// decided before its bad line), and exits 1 with a last line saying the records are
/// incomplete. With `-o FILE` those records are left in `FILE.partial` and `FILE` is not
/// written; with only good traces `FILE` holds exactly what stdout would.
#[test]
fn replay_and_check_agree_on_a_directory_and_replay_goes_on_past_a_bad_trace() {
    let dir = tempfile::tempdir().unwrap();
    let traces = dir.path().join("traces");
    std::fs::create_dir(&traces).unwrap();
    write(&traces, "a.jsonl", &codex_single_call());
    // Bad halfway: its interval is decided (at 7278, once a later event has come) before the
    // bad line, a second close of the stream.
    write(
        &traces,
        "b.jsonl",
        &(codex_single_call().replace("\"i1\"", "\"i2\"")
            + r#"{"type":"stream_close","t":7300,"stream":"s1"}"#
            + "\n"
            + r#"{"type":"stream_close","t":7400,"stream":"s1"}"#
            + "\n"),
    );
    write(&traces, "c.jsonl", "");
    write(
        &traces,
        "d.jsonl",
        &codex_single_call().replacen(
            HEADER,
            r#"{"type":"trace","version":1,"close_wait":"soon"}"#,
            1,
        ),
    );
    write(
        &traces,
        "e.jsonl",
        &codex_single_call().replace("\"i1\"", "\"i5\""),
    );
    let t = traces.to_str().unwrap();

    let check = windowtap(&["check", t]);
    assert_eq!(check.status.code(), Some(1));
    let check_errors: Vec<String> = String::from_utf8(check.stderr)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(check_errors.len(), 2, "{check_errors:?}");
    for (line, (file, at)) in check_errors.iter().zip([
        ("b.jsonl", ":10: field `stream`: stream `s1` is not open"),
        ("d.jsonl", ":1: header field `close_wait`"),
    ]) {
        let want = format!("{}{at}", traces.join(file).display());
        assert!(line.starts_with(&want), "{line} (wanted {want}…)");
    }
    // The empty file: an empty records file, never a trace, and check's verdict says replay
    // refuses it (as it does below).
    let check_ok = String::from_utf8(check.stdout).unwrap();
    assert!(
        check_ok.contains(&format!(
            "{}: ok (0 records; an empty file, so not a trace: replay refuses it)",
            traces.join("c.jsonl").display()
        )),
        "{check_ok}"
    );

    let replay = windowtap(&["replay", t]);
    assert_eq!(replay.status.code(), Some(1));
    let stderr = String::from_utf8(replay.stderr).unwrap();
    let said: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("windowtap: error: "))
        .collect();
    assert_eq!(said.len(), 4, "{stderr}");
    // Every trace check refuses, replay refuses in the same words; and the empty file.
    assert_eq!(
        [said[0], said[2]],
        check_errors[..],
        "one verdict, in the same words"
    );
    assert!(said[1].contains("c.jsonl:1: empty trace"), "{stderr}");
    assert!(
        said[3].starts_with("3 traces are bad (above): the records written are incomplete"),
        "{stderr}"
    );
    assert!(
        stderr.contains("3 intervals: 3 attributed"),
        "the summary counts what was written: {stderr}"
    );
    let stdout = String::from_utf8(replay.stdout).unwrap();
    let from: Vec<(&str, &str)> = stdout
        .lines()
        .map(|l| {
            let field = |k: &str| {
                let at = l.find(&format!("\"{k}\":\"")).unwrap() + k.len() + 4;
                &l[at..at + l[at..].find('"').unwrap()]
            };
            (field("trace"), field("interval"))
        })
        .collect();
    assert_eq!(
        from,
        [("a.jsonl", "i1"), ("b.jsonl", "i2"), ("e.jsonl", "i5")]
    );

    // -o FILE: the same records, left as FILE.partial; FILE is not written.
    let records = dir.path().join("records.jsonl");
    let partial = dir.path().join("records.jsonl.partial");
    let out = windowtap(&["replay", t, "-o", records.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!records.exists());
    assert_eq!(std::fs::read_to_string(&partial).unwrap(), stdout);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!(
            "left in {} ({} was not written)",
            partial.display(),
            records.display()
        )),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_file(&partial).unwrap();

    // Only good traces: FILE, no FILE.partial, the bytes stdout gets.
    let (a, e) = (traces.join("a.jsonl"), traces.join("e.jsonl"));
    let (a, e) = (a.to_str().unwrap(), e.to_str().unwrap());
    let out = windowtap(&["replay", a, e, "-o", records.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!partial.exists());
    let to_stdout = windowtap(&["replay", a, e]);
    assert_eq!(std::fs::read(&records).unwrap(), to_stdout.stdout);
}

/// A trace that is not there is said to be missing, and with nothing to replay no summary of
/// zero intervals is printed (it read as if a trace had been replayed and held no call;
/// issue 40).
#[test]
fn a_missing_trace_is_named_and_no_summary_is_printed() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.jsonl");
    let out = windowtap(&["replay", missing.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(out.stdout.is_empty());
    assert!(
        err.contains(&format!("{}: no such file or directory", missing.display())),
        "{err}"
    );
    assert!(!err.contains("intervals"), "no summary: {err}");
    assert!(!err.contains("is bad"), "{err}");
}
