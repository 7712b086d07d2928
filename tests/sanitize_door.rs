//! A tripwire for the sanitizing door (`correlator::sanitize`, docs/design.md §7).
//!
//! The door is enforced by types where the data is the traffic's (capture and records lines
//! are `Line`s, OTLP spans come from `Cleared` records, logs go through one formatter). What
//! types cannot stop is a new `eprintln!` or `write_all` somewhere that writes something else.
//! So this test lists every place in the shipped code that writes bytes out, with why it may;
//! a new one fails here until it goes through the door or is reviewed and listed. It also
//! holds every log call of ours to a literal message: the log formatter admits our messages
//! as they are, so they must never interpolate a value.

use std::path::{Path, PathBuf};

/// Every file of the shipped code that writes (paths from the workspace's root), how many
/// write sites it has, and why each may.
const REVIEWED: &[(&str, usize, &str)] = &[
    ("src/lookup_cmd.rs", 3, "records lines as the records file holds them (written by the door), a line saying why each was found (fixed words, pseudonyms, a UTC time) and what the id led to in the capture (fixed words, pseudonyms, model-visible tool names); the raw id is never printed"),
    ("src/check.rs", 2, "verdicts on the user's files; faults quote input only via sanitize::quote"),
    ("crates/hosts/src/env.rs", 4, "the override lines: a relay URL and fixed text; the warnings that no relay answers there (the URL, an error kind) and that a settings file sets the base URL (the scope's name, never the value); the --shim script (the relay URL and the path of the codex found on PATH)"),
    ("src/ingest_cmd.rs", 4, "the debug command: trace lines as door `Line`s, its socket path, counts"),
    ("crates/live/src/ingest/server.rs", 1, "the note beside the socket: the relay's pid and listen address"),
    ("crates/live/src/task.rs", 5, "capture lines from the door, the header via `Door::meta` (a rotated capture's, each piece's, via `Door::piece_header`), the padded end (at the stop, and of each piece at its cut)"),
    ("crates/live/src/records_out.rs", 1, "records as door `Line`s, on the writer thread"),
    ("crates/sys/src/logging.rs", 4, "the one log formatter, by the door's log policy"),
    ("src/main.rs", 3, "the error at the edge: our messages; readers quote input via sanitize::quote; `run claude` without `--`: the host's fixed name, never its arguments; `wrap SERVER` without `--`: fixed words"),
    ("crates/otlp/src/config.rs", 3, "an endpoint as scheme://host:port, never userinfo, path or query"),
    ("crates/otlp/src/export.rs", 3, "an export failure: fixed words, the relay's failure word, an HTTP status code"),
    ("crates/live/src/service/args.rs", 5, "start-up warnings: the OTLP set-up's (fixed text, an endpoint as scheme://host:port), --allow-remote's (the listen address), a clear-text upstream's (a mount as name and base URL, no userinfo); the run's random pseudonymization key, mode 0600 beside its records, for `windowtap lookup`"),
    ("src/relay_cmd.rs", 7, "the banner, the ingest socket's path, the run summary, unreported MCP calls (counts, model-visible tool names), failed exchanges (counts, mount names, fixed words, upstream scheme://host:port), servers that never ran (alias as the name rule admits it, fixed reason)"),
    ("crates/relay/src/mounts.rs", 1, "a mount as its name and upstream base URL (no userinfo)"),
    ("crates/live/src/service/stop.rs", 3, "lost-record counts, the export report"),
    ("crates/relay/src/verbatim.rs", 4, "the verbatim path: the traffic itself (request to its upstream, response, the relay's own error answers to the client)"),
    ("crates/relay/src/prefixed.rs", 1, "a connection handed to hyper: the traffic itself, to the client it came from"),
    ("crates/relay/src/ws.rs", 1, "the WebSocket splice: the traffic itself, to its own destination (what hyper read ahead, then the rest)"),
    ("src/replay_cmd.rs", 13, "records as `Cleared` lines, the summary, the export report and its warnings, each bad trace's reader error (file, line, field; input quoted by the reader as sanitize::quote does), the incomplete-output notice (counts and the user's own paths), a rotated capture's piece refused (out of order, missing one, after a bad one) and the warning that a replay starts mid-capture (the user's own paths, piece numbers, the capture's word as sanitize::quote lets it out); when no input can be read at all, each input's error (the user's own paths) before the one error line, with no summary"),
    ("crates/report/src/lib.rs", 4, "the HTML of cleared records, and counts; a warning that a --trace lacks some of the records' intervals (counts and the user's own path)"),
    ("crates/report/src/render/page.rs", 9, "the page: its head, the static style and script (no data in them), per section the warning, counts of MCP calls no wrapper reported (counts, model-visible tool names of checked events, fixed words), the summary table (counts), the legend (fixed words)"),
    ("crates/report/src/render/detailed.rs", 15, "the detailed view: SVG of cleared records and checked trace events, escaped (ids, aliases, tool names, lane labels, times), and the list of calls"),
    ("crates/report/src/render/aggregated.rs", 12, "the aggregated view: counts per lane and time bin, escaped lane labels, abstentions by escaped id"),
    ("crates/report/src/render/lanes.rs", 3, "lane labels and marks, escaped; the time axis (times)"),
    ("crates/report/src/render/text.rs", 14, "hover titles of windows and intervals: escaped ids, names and times, fixed words"),
    ("crates/hosts/src/claude.rs", 1, "the host's own MCP config, wrapped, into a private 0600 file for it"),
    ("crates/hosts/src/run.rs", 13, "the run summary (counts, the records and capture paths, the upstream as scheme://host:port, aliases of servers wrapped once, servers that never ran by alias and fixed reason, unreported MCP calls by model-visible tool name, failed exchanges by mount, fixed word and upstream scheme://host:port, also while the host runs), signal notices naming the host program"),
    ("crates/hosts/src/wrap.rs", 10, "the MCP pass-through (the traffic itself), ingest reports on the verified socket (calls, and the server's start as a fixed word, exit code or signal), fixed warnings naming a path and a uid, which relay (socket path, pid) reports go to, one that an alias is outside the name rule (without it), and that the server never ran (its alias, exit code or signal)"),
];

const WRITES: &[&str] = &[
    "write_all(",
    // The data path's own writes, polled by hand.
    ".poll_write(",
    ".write_vectored(",
    "println!",
    "eprintln!",
    "print!(",
    "eprint!(",
    "writeln!(",
    "write!(",
    "fs::write(",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Whether `path` is a module's unit tests in a file of their own: `x_tests.rs`, included
/// by a sibling as `#[cfg(test)] #[path = "x_tests.rs"] mod tests;`, or a folder's
/// `tests.rs`, declared by its `mod.rs` as `#[cfg(test)] mod tests;`.
fn test_only(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    // A folder's `tests.rs`, declared by its `mod.rs` as `#[cfg(test)] mod tests;`.
    let include = if name == "tests.rs" {
        "#[cfg(test)]\nmod tests;".to_string()
    } else if name.ends_with("_tests.rs") {
        format!("#[cfg(test)]\n#[path = \"{name}\"]\nmod tests;")
    } else {
        return false;
    };
    std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.unwrap().path()).ok())
        .any(|text| text.contains(&include))
}

/// The shipped part of a source file: its unit tests cut off (all of it for a file that
/// holds only a module's tests).
fn shipped(path: &Path) -> String {
    if test_only(path) {
        return String::new();
    }
    let text = std::fs::read_to_string(path).unwrap();
    match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

fn count_writes(text: &str) -> usize {
    let mut n = 0;
    for w in WRITES {
        let mut from = 0;
        while let Some(i) = text[from..].find(w) {
            let at = from + i;
            // `eprintln!` holds `println!`: count each under its own name only.
            let prev = text[..at].chars().next_back();
            if !prev.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                n += 1;
            }
            from = at + w.len();
        }
    }
    n
}

/// The sources of every crate that ships in the binary, but the sans-IO ones (the correlator
/// and `h1` write nowhere at all: below) and the test kit.
fn shipped_sources(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        if dir.file_name().is_some_and(|n| n != "testkit") {
            rust_files(&dir.join("src"), &mut files);
        }
    }
    files.sort();
    files
}

#[test]
fn every_write_site_in_src_is_reviewed() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = shipped_sources(root);
    let mut problems = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(root).unwrap().to_string_lossy().to_string();
        let n = count_writes(&shipped(f));
        let listed = REVIEWED.iter().find(|(p, _, _)| *p == rel).map(|r| r.1);
        if n != listed.unwrap_or(0) {
            problems.push(format!(
                "{rel}: {n} write sites, {} reviewed: route new output through \
                 correlator::sanitize (Door, Line, Cleared) or review it and update REVIEWED",
                listed.unwrap_or(0)
            ));
        }
    }
    for (p, _, _) in REVIEWED {
        if !files
            .iter()
            .any(|f| f.strip_prefix(root).unwrap() == Path::new(p))
        {
            problems.push(format!("{p} is listed but gone"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_counter_finds_each_kind_of_write_once() {
    let text = r#"eprintln!("a"); println!("b"); eprint!("c"); print!("d"); w.write_all(x);
        writeln!(o, "e"); write!(o, "f"); std::fs::write(p, b); my_write_all(y);"#;
    assert_eq!(count_writes(text), 8);
}

/// The correlator is sans-IO: it writes nowhere at all.
#[test]
fn the_correlator_writes_nothing() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("correlator/src");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    for f in files {
        let text = shipped(&f);
        for forbidden in [
            "print!(", "println!", "std::fs", "std::net", "stdout()", "stderr()",
        ] {
            assert!(
                !text.contains(forbidden),
                "{}: `{forbidden}` in the sans-IO core",
                f.display()
            );
        }
    }
}

/// The arguments of a macro call starting at `open` (the index of its `(`), split at
/// top-level commas.
fn macro_args(text: &str, open: usize) -> Vec<String> {
    let mut depth = 0;
    let mut args = vec![String::new()];
    let mut in_str = false;
    let mut escaped = false;
    for c in text[open..].chars() {
        if in_str {
            args.last_mut().unwrap().push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            '(' | '[' | '{' => {
                depth += 1;
                if depth == 1 {
                    continue;
                }
            }
            ')' | ']' | '}' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            ',' if depth == 1 => {
                args.push(String::new());
                continue;
            }
            '"' => in_str = true,
            _ => {}
        }
        args.last_mut().unwrap().push(c);
    }
    args.into_iter()
        .map(|a| a.trim().to_string())
        .filter(|a| !a.is_empty())
        .collect()
}

/// Why a log call's arguments break the rule, if they do: the message must be the last
/// argument, a string literal with no `{}`; every other argument is a `name = value` field
/// (or `target: ...`), whose text the formatter filters by name.
fn log_call_fault(args: &[String]) -> Option<String> {
    let Some(message) = args.last() else {
        return Some("no message".into());
    };
    if !(message.starts_with('"') && message.ends_with('"')) {
        return Some(format!("the message is not a literal: {message}"));
    }
    if message.contains('{') {
        return Some(format!("the message interpolates: {message}"));
    }
    for a in &args[..args.len() - 1] {
        let named = a.starts_with("target:") || a.contains('=');
        let shorthand = a
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '.');
        if !named && !shorthand {
            return Some(format!(
                "an argument is neither a field nor the message: {a}"
            ));
        }
    }
    None
}

#[test]
fn our_log_messages_are_literals() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = shipped_sources(root);
    rust_files(&root.join("correlator/src"), &mut files);
    let mut calls = 0;
    let mut problems = Vec::new();
    for f in files {
        let text = shipped(&f);
        for level in ["trace", "debug", "info", "warn", "error"] {
            let needle = format!("tracing::{level}!(");
            let mut from = 0;
            while let Some(i) = text[from..].find(&needle) {
                let open = from + i + needle.len() - 1;
                calls += 1;
                if let Some(fault) = log_call_fault(&macro_args(&text, open)) {
                    problems.push(format!("{}: {fault}", f.display()));
                }
                from = open;
            }
        }
    }
    assert!(
        calls >= 15,
        "the scan found only {calls} log calls: is it still looking?"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_log_rule_catches_interpolation() {
    let call = r#"tracing::warn!(error = %e, "failed for {}", name)"#;
    let args = macro_args(call, call.find('(').unwrap());
    assert!(log_call_fault(&args).is_some());
    let call = r#"tracing::warn!(error = %e, count, "failed")"#;
    let args = macro_args(call, call.find('(').unwrap());
    assert_eq!(args.len(), 3);
    assert_eq!(log_call_fault(&args), None);
    let call = r#"tracing::info!("sent {n}")"#;
    assert!(log_call_fault(&macro_args(call, call.find('(').unwrap())).is_some());
}

/// The log formatter admits the text of a message only from windowtap's own crates
/// (`correlator::sanitize::log_target_is_own`), whose calls the test above holds to literal
/// messages: a crate of the workspace left off that list would have its own words withheld,
/// and one that logs and is not checked above would be admitted unchecked.
#[test]
fn every_crate_that_logs_is_one_of_our_log_targets() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        let name = dir.file_name().unwrap().to_str().unwrap().to_string();
        let mut files = Vec::new();
        rust_files(&dir.join("src"), &mut files);
        let logs = files.iter().any(|f| shipped(f).contains("tracing::"));
        if logs && name != "testkit" {
            assert!(
                correlator::sanitize::log_target_is_own(&format!("{name}::module")),
                "crates/{name} logs, but its target is not one of the log policy's own"
            );
        }
    }
}
