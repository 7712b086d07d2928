//! Every hand-written trace in `traces/` replays to exactly the records in
//! `traces/expected/NAME.records.jsonl`, byte for byte.
//!
//! The expected records were worked out by hand from docs/design.md §3–§4 (one line of reasoning
//! per trace in `traces/README.md`), so a failure here means the code and the hand reading
//! disagree: read the diff, then the text, before touching either.

use std::fmt::Write as _;
use std::fs;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use correlator::trace::TraceReader;
use correlator::{replay, Candidates, Config, WindowOpen};
use serde_json::{Map, Value};

fn traces_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../traces")
}

/// The `.jsonl` traces, sorted so failures come out in a stable order.
fn trace_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(traces_dir())
        .expect("traces/ exists")
        .map(|e| e.expect("readable directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    files
}

fn name_of(path: &Path) -> String {
    path.file_stem()
        .and_then(|s| s.to_str())
        .expect("a UTF-8 file name")
        .to_string()
}

fn expected_path(name: &str) -> PathBuf {
    traces_dir()
        .join("expected")
        .join(format!("{name}.records.jsonl"))
}

/// The replay options a trace asks for in its header; anything else takes the default.
fn config_from_header(header: &Map<String, Value>) -> Result<Config, String> {
    let mut c = Config::default();
    for key in ["close_wait", "max_window"] {
        match header.get(key) {
            None => {}
            Some(v) => {
                let ms = v
                    .as_f64()
                    .filter(|x| x.is_finite() && *x >= 0.0)
                    .ok_or_else(|| format!("header `{key}` must be a number >= 0, got {v}"))?;
                if key == "close_wait" {
                    c.close_wait = ms;
                } else {
                    c.max_window = ms;
                }
            }
        }
    }
    if let Some(v) = header.get("candidates") {
        c.candidates = v.as_str().and_then(Candidates::parse).ok_or_else(|| {
            format!("header `candidates` must be \"eligible\" or \"all\", got {v}")
        })?;
    }
    if let Some(v) = header.get("window_open") {
        c.window_open = v.as_str().and_then(WindowOpen::parse).ok_or_else(|| {
            format!("header `window_open` must be \"call\" or \"response\", got {v}")
        })?;
    }
    Ok(c)
}

/// Reads a trace strictly (the same reader replay uses) and returns its header and events.
fn read_trace(path: &Path) -> Result<(Map<String, Value>, Vec<correlator::Event>), String> {
    let file = fs::File::open(path).map_err(|e| format!("opening {}: {e}", path.display()))?;
    let mut reader = TraceReader::new(BufReader::new(file), path.display().to_string());
    let mut events = Vec::new();
    for ev in reader.by_ref() {
        events.push(ev.map_err(|e| e.to_string())?);
    }
    let header = reader
        .header()
        .cloned()
        .ok_or_else(|| format!("{}: no header", path.display()))?;
    Ok((header, events))
}

/// A line-by-line account of where `got` departs from `want`.
fn diff(want: &str, got: &str) -> String {
    let w: Vec<&str> = want.lines().collect();
    let g: Vec<&str> = got.lines().collect();
    let mut out = String::new();
    for i in 0..w.len().max(g.len()) {
        match (w.get(i), g.get(i)) {
            (Some(a), Some(b)) if a == b => {}
            (a, b) => {
                let _ = writeln!(out, "  line {}:", i + 1);
                let _ = writeln!(out, "    expected: {}", a.unwrap_or(&"(none)"));
                let _ = writeln!(out, "    got:      {}", b.unwrap_or(&"(none)"));
            }
        }
    }
    if out.is_empty() && want != got {
        out.push_str("  (same lines; the files differ in line endings or a final newline)\n");
    }
    out
}

#[test]
fn every_trace_replays_to_its_expected_records() {
    let files = trace_files();
    assert!(
        files.len() >= 20,
        "expected the hand-written traces in {}, found {}",
        traces_dir().display(),
        files.len()
    );
    let mut failures = String::new();
    for path in &files {
        let name = name_of(path);
        let (header, events) = match read_trace(path) {
            Ok(x) => x,
            Err(e) => {
                let _ = writeln!(failures, "{name}: does not read: {e}");
                continue;
            }
        };
        let config = match config_from_header(&header) {
            Ok(c) => c,
            Err(e) => {
                let _ = writeln!(failures, "{name}: {e}");
                continue;
            }
        };
        let want = match fs::read_to_string(expected_path(&name)) {
            Ok(s) => s,
            Err(e) => {
                let _ = writeln!(
                    failures,
                    "{name}: no expected records at {}: {e}",
                    expected_path(&name).display()
                );
                continue;
            }
        };
        let got: String = replay(events, &config)
            .iter()
            .map(|r| r.to_line())
            .collect();
        if got != want {
            let _ = writeln!(
                failures,
                "{name} (options {config:?}):\n{}",
                diff(&want, &got)
            );
        }
    }
    assert!(
        failures.is_empty(),
        "traces whose replay differs from traces/expected:\n{failures}"
    );
}

/// `trace::read_all` (what other tools call) accepts every trace and sees every event line.
#[test]
fn every_trace_reads_with_read_all() {
    for path in trace_files() {
        let text = fs::read_to_string(&path).expect("readable trace");
        let events = correlator::trace::read_all(text.as_bytes(), &path.display().to_string())
            .unwrap_or_else(|e| panic!("{e}"));
        let lines = text.lines().filter(|l| !l.trim().is_empty()).count();
        assert_eq!(
            events.len(),
            lines - 1,
            "{}: one event per line after the header",
            path.display()
        );
    }
}

#[test]
fn every_expected_file_has_its_trace() {
    let dir = traces_dir().join("expected");
    let mut orphans = Vec::new();
    for entry in fs::read_dir(&dir).expect("traces/expected exists") {
        let path = entry.expect("readable directory entry").path();
        let file = path.file_name().and_then(|s| s.to_str()).unwrap_or("");
        let Some(name) = file.strip_suffix(".records.jsonl") else {
            orphans.push(file.to_string());
            continue;
        };
        if !traces_dir().join(format!("{name}.jsonl")).is_file() {
            orphans.push(file.to_string());
        }
    }
    assert!(
        orphans.is_empty(),
        "expected files with no trace: {orphans:?}"
    );
}

/// The expected files are themselves well-formed records v1, one JSON object per line with
/// the fields in the fixed order, so they can serve as examples for other tools.
#[test]
fn expected_records_are_well_formed() {
    const ORDER: [&str; 13] = [
        "type",
        "version",
        "interval",
        "alias",
        "tool",
        "start",
        "end",
        "decision",
        "reason",
        "evidence",
        "candidates",
        "window",
        "decided_at",
    ];
    for path in trace_files() {
        let name = name_of(&path);
        let text = fs::read_to_string(expected_path(&name)).unwrap_or_default();
        for (i, line) in text.lines().enumerate() {
            let v: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{name}:{}: bad JSON: {e}", i + 1));
            let obj = v.as_object().expect("an object");
            let keys: Vec<&str> = obj.keys().map(String::as_str).collect();
            let mut sorted = ORDER.to_vec();
            sorted.sort_unstable();
            let mut have = keys.clone();
            have.sort_unstable();
            assert_eq!(have, sorted, "{name}:{}: fields", i + 1);
            let attributed = obj["decision"] == "attributed";
            assert_eq!(attributed, obj["reason"].is_null(), "{name}:{}", i + 1);
            assert_eq!(attributed, !obj["window"].is_null(), "{name}:{}", i + 1);
            if !attributed {
                assert_eq!(obj["evidence"], Value::Array(vec![]), "{name}:{}", i + 1);
            }
            let start = line.find("\"interval\"").unwrap_or(0);
            let mut at = 0;
            for key in ORDER.iter().skip(2) {
                let pos = line[start..]
                    .find(&format!("\"{key}\":"))
                    .unwrap_or_else(|| panic!("{name}:{}: `{key}` missing", i + 1));
                assert!(pos >= at, "{name}:{}: `{key}` out of order", i + 1);
                at = pos;
            }
            assert!(
                !line.contains(".0,") && !line.contains(".0}"),
                "{name}:{}: whole numbers are written without `.0`",
                i + 1
            );
        }
    }
}
