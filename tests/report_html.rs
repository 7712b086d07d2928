//! `windowtap report` as a user runs it: records (and a trace) in, one self-contained HTML
//! timeline out, well-formed, escaped, and bounded in size however many intervals there are.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use correlator::records::{Evidence, Reason, Record, WindowRef};

fn windowtap(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_windowtap"))
        .args(args)
        .output()
        .expect("run windowtap")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// Runs `windowtap report` and returns the page.
fn report(records: &Path, trace: Option<&Path>) -> String {
    let out_path = records.with_extension("html");
    let mut args = vec!["report", s(records), "-o", s(&out_path)];
    if let Some(t) = trace {
        args.extend(["--trace", s(t)]);
    }
    let out = windowtap(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(out_path).unwrap()
}

/// Checks that every tag the page opens is closed, in order (void tags are written `<x/>`).
/// The inline script's text is not markup: it is left out.
fn assert_balanced(html: &str) {
    let without_script = match html.split_once("<script>") {
        Some((a, b)) => format!(
            "{a}<script>{}",
            b.split_once("</script>").expect("closed").1
        ),
        None => html.to_string(),
    };
    let html = without_script.replace("<script>", "");
    let mut stack: Vec<String> = Vec::new();
    let mut rest = html.as_str();
    while let Some(i) = rest.find('<') {
        rest = &rest[i + 1..];
        let end = rest.find('>').expect("a tag is closed by `>`");
        let tag = &rest[..end];
        rest = &rest[end + 1..];
        if tag.starts_with('!') {
            continue;
        }
        if let Some(name) = tag.strip_prefix('/') {
            let open = stack
                .pop()
                .unwrap_or_else(|| panic!("`</{name}>` closes nothing"));
            assert_eq!(open, name, "`</{name}>` closes `<{open}>`");
        } else if !tag.ends_with('/') {
            let name = tag.split_whitespace().next().expect("tag name");
            assert!(
                name.chars().all(|c| c.is_ascii_alphanumeric()),
                "odd tag `<{tag}>`"
            );
            stack.push(name.to_string());
        }
    }
    assert!(stack.is_empty(), "never closed: {stack:?}");
}

/// No reference to anything on a network, except the SVG namespace name; one inline script
/// (zoom and find) that loads nothing and asks nothing of a network.
fn assert_offline(html: &str) {
    let without_ns = html.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
    assert!(!without_ns.contains("http://"), "http:// reference");
    assert!(!without_ns.contains("https://"), "https:// reference");
    assert_eq!(html.matches("<script").count(), 1, "one inline script");
    let script = html
        .split("<script>")
        .nth(1)
        .expect("an inline script, no src")
        .split("</script>")
        .next()
        .unwrap();
    for api in [
        "fetch",
        "XMLHttpRequest",
        "WebSocket",
        "import",
        "src=",
        "href",
        "location",
        "eval",
        "innerHTML",
        "cookie",
        "Storage",
    ] {
        assert!(!script.contains(api), "the script uses `{api}`");
    }
    assert!(!html.contains("<link"), "external resources");
    assert!(
        !html.contains("@import") && !html.contains("url("),
        "CSS fetches"
    );
}

const HEADER: &str = r#"{"type":"trace","version":1}"#;

/// A Claude thread with one attributed call, a Codex stream whose observation is lost, a call
/// with no window at all, and a response that fails (a broken window).
fn trace(alias: &str) -> String {
    let alias = serde_json::to_string(alias).unwrap();
    [
        HEADER.to_string(),
        r#"{"type":"stream_open","t":0,"stream":"c1","client":"claude","transport":"http","thread":"sess"}"#.into(),
        r#"{"type":"request","t":5,"stream":"c1","request":"q1","previous_response":null,"outputs":[]}"#.into(),
        r#"{"type":"response_start","t":300,"stream":"c1","response":"r1","request":"q1"}"#.into(),
        r#"{"type":"tool_call","t":1800,"stream":"c1","response":"r1","call":"toolu_1","item":null,"name":"mcp__probe__echo","namespace":null,"kind":"tool_use"}"#.into(),
        r#"{"type":"response_end","t":1900,"stream":"c1","response":"r1","status":"completed"}"#.into(),
        r#"{"type":"stream_close","t":1901,"stream":"c1"}"#.into(),
        format!(r#"{{"type":"mcp_interval","t":2102,"interval":"i1","alias":{alias},"tool":"echo","start":1850,"end":2100,"outcome":"result","tool_use_id":"toolu_1"}}"#),
        r#"{"type":"stream_open","t":2200,"stream":"c2","client":"claude","transport":"http","thread":"sess"}"#.into(),
        r#"{"type":"request","t":2205,"stream":"c2","request":"q2","previous_response":null,"outputs":["toolu_1"]}"#.into(),
        r#"{"type":"response_start","t":2500,"stream":"c2","response":"r2","request":"q2"}"#.into(),
        r#"{"type":"tool_call","t":2600,"stream":"c2","response":"r2","call":"toolu_2","item":null,"name":"mcp__probe__echo","namespace":null,"kind":"tool_use"}"#.into(),
        r#"{"type":"response_end","t":2700,"stream":"c2","response":"r2","status":"failed"}"#.into(),
        r#"{"type":"stream_close","t":2701,"stream":"c2"}"#.into(),
        // The thread moves on (a side request), so the broken window hides nothing.
        r#"{"type":"stream_open","t":3000,"stream":"c3","client":"claude","transport":"http","thread":"sess"}"#.into(),
        r#"{"type":"request","t":3005,"stream":"c3","request":"q3","previous_response":null,"outputs":[]}"#.into(),
        r#"{"type":"stream_close","t":3100,"stream":"c3"}"#.into(),
        r#"{"type":"mcp_interval","t":5002,"interval":"i2","alias":"probe","tool":"echo","start":4000,"end":5000,"outcome":"result"}"#.into(),
        r#"{"type":"stream_open","t":6000,"stream":"x1","client":"codex","transport":"websocket","thread":"th-x"}"#.into(),
        r#"{"type":"observation_lost","t":6500,"stream":"x1","reason":"decode"}"#.into(),
        r#"{"type":"mcp_interval","t":7002,"interval":"i3","alias":"probe","tool":"echo","start":6400,"end":7000,"outcome":"result"}"#.into(),
        r#"{"type":"stream_close","t":8000,"stream":"x1"}"#.into(),
        String::new(),
    ]
    .join("\n")
}

/// Replays `trace` (a file or directory) with the binary into `records`.
fn replay_into(trace: &Path, records: &Path) {
    let out = windowtap(&["replay", s(trace), "-o", s(records)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Replays a trace with the binary and returns (trace path, records path).
fn replayed(dir: &Path, alias: &str) -> (PathBuf, PathBuf) {
    let t = write(dir, "run.jsonl", &trace(alias));
    let r = dir.join("records.jsonl");
    replay_into(&t, &r);
    (t, r)
}

#[test]
fn a_replayed_run_draws_every_window_and_interval_with_its_decision() {
    let dir = tempfile::tempdir().unwrap();
    let (t, r) = replayed(dir.path(), "probe");
    let records = std::fs::read_to_string(&r).unwrap();
    assert!(
        records.contains(r#""interval":"i1","#) && records.contains(r#""decision":"attributed""#)
    );
    assert!(
        records.contains(r#""reason":"no_window""#) && records.contains(r#""reason":"incomplete""#)
    );

    let html = report(&r, Some(&t));
    assert_balanced(&html);
    assert_offline(&html);
    for id in ["i1", "i2", "i3"] {
        assert_eq!(
            html.matches(&format!("<g class=\"interval\" data-interval=\"{id}\""))
                .count(),
            1,
            "{id}"
        );
    }
    // Both windows, the broken one said to be broken, and the loss of observation.
    assert!(html.contains("window of response r1"));
    assert!(html.contains("closed 2205 ms by request q2"));
    assert!(html.contains("window of response r2"));
    assert!(html.contains("broken 2700 ms: its response ended `failed`"));
    assert!(html.contains("observation lost on stream x1 at 6500 ms (decode)"));
    // Abstentions are labelled with their reason; the attributed one lists its evidence.
    assert!(html.contains(">no_window</tspan>"));
    assert!(html.contains(">incomplete</tspan>"));
    assert!(html.contains("evidence: containment, tool_use_id, route"));
    assert!(html.contains("data-count=\"total\">3<"));
    assert!(html.contains("data-count=\"attributed\">1<"));
    // Lanes: one per thread; the no-window call sits on the unattributed lane.
    for lane in ["thread sess", "thread th-x", "unattributed"] {
        assert!(html.contains(&format!(">{lane}</text>")), "{lane}");
    }
    assert!(html.contains(">claude · http</text>"));
    assert!(html.contains(">codex · websocket</text>"));
}

#[test]
fn without_the_trace_only_attributed_windows_are_known() {
    let dir = tempfile::tempdir().unwrap();
    let (_, r) = replayed(dir.path(), "probe");
    let html = report(&r, None);
    assert_balanced(&html);
    assert!(html.contains("attributed windows only"));
    assert!(html.contains("window of response r1"));
    assert!(!html.contains("window of response r2"));
    assert!(html.contains(">unattributed</text>"));
    for id in ["i1", "i2", "i3"] {
        assert!(html.contains(&format!("data-interval=\"{id}\"")), "{id}");
    }
}

#[test]
fn hostile_ids_and_names_are_escaped() {
    let dir = tempfile::tempdir().unwrap();
    // A name no API allows is refused before anything is drawn (docs/design.md §7), and
    // the refusal does not quote it.
    let hostile = write(
        dir.path(),
        "hostile.jsonl",
        &trace("<script>alert('x')</script>"),
    );
    let out = windowtap(&["replay", s(&hostile), "-o", s(&dir.path().join("no.jsonl"))]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("field `alias`"),
        "{err}"
    );
    assert!(!err.contains("script"), "{err}");

    let (t, r) = replayed(dir.path(), "probe");
    // Ids and thread names are data too, and a trace's ids are opaque strings.
    let text = std::fs::read_to_string(&t)
        .unwrap()
        .replace("\"sess\"", "\"</svg><img src=x onerror=alert(1)>\"")
        .replace("\"i2\"", "\"\\\"><b>i2&amp;\"")
        .replace("\"i1\"", "\"<script>alert('x')</script>\"");
    let t = write(dir.path(), "run.jsonl", &text);
    replay_into(&t, &r);

    let html = report(&r, Some(&t));
    assert_balanced(&html);
    assert_offline(&html);
    assert!(!html.contains("<img") && !html.contains("<b>") && !html.contains("<script>alert"));
    assert!(html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"));
    assert!(html.contains("thread &lt;/svg&gt;&lt;img src=x onerror=alert(1)&gt;"));
    assert!(html.contains("data-interval=\"&quot;&gt;&lt;b&gt;i2&amp;amp;\""));
}

fn attributed(i: usize, thread: &str, t: f64) -> Record {
    Record {
        interval: format!("i{i}").into(),
        alias: "probe".into(),
        tool: "echo".into(),
        start: t + 10.0,
        end: t + 60.0,
        reason: None,
        evidence: vec![Evidence::Containment, Evidence::ToolUseId],
        candidates: 1,
        window: Some(WindowRef {
            thread: Some(thread.into()),
            stream: format!("s{i}").into(),
            response: format!("r{i}").into(),
            request: Some(format!("q{i}").into()),
            open: t,
            close: Some(t + 80.0),
        }),
        decided_at: t + 80.0,
    }
}

fn abstained(i: usize, reason: Reason, t: f64) -> Record {
    Record {
        reason: Some(reason),
        evidence: vec![],
        candidates: match reason {
            Reason::Ambiguous => 2,
            Reason::NoWindow => 0,
            _ => 1,
        },
        window: None,
        ..attributed(i, "-", t)
    }
}

/// `n` records over `threads` threads, one in five abstained (reasons in turn).
fn records_file(dir: &Path, n: usize, threads: usize) -> PathBuf {
    let mut text = String::new();
    for i in 0..n {
        let t = i as f64 * 100.0;
        let r = if i % 5 == 4 {
            abstained(i, Reason::ALL[(i / 5) % 5], t)
        } else {
            attributed(i, &format!("th{}", i % threads), t)
        };
        text.push_str(&r.to_line());
    }
    write(dir, "many.jsonl", &text)
}

#[test]
fn a_few_hundred_intervals_are_drawn_one_by_one_on_time_pages() {
    let dir = tempfile::tempdir().unwrap();
    let html = report(&records_file(dir.path(), 300, 4), None);
    assert_balanced(&html);
    assert!(html.contains("Page 1 of 3"));
    assert!(html.contains("Page 3 of 3"));
    assert_eq!(html.matches("<svg class=\"tl\"").count(), 3);
    for i in 0..300 {
        assert!(html.contains(&format!("data-interval=\"i{i}\"")), "i{i}");
    }
    assert!(!html.contains("class=\"aggregated\""));
}

#[test]
fn ten_thousand_intervals_collapse_to_density_strips_of_bounded_size() {
    let dir = tempfile::tempdir().unwrap();
    let n = 10_000;
    let html = report(&records_file(dir.path(), n, 60), None);
    assert_balanced(&html);
    assert_offline(&html);
    // Aggregated: no interval drawn one by one, the counts still exact.
    assert!(html.contains("class=\"aggregated\""));
    assert!(!html.contains("data-interval="));
    assert!(html.contains("data-count=\"total\">10000<"));
    assert!(html.contains("data-count=\"attributed\">8000<"));
    for reason in Reason::ALL {
        assert!(
            html.contains(&format!("data-count=\"{reason}\">400<")),
            "{reason}"
        );
    }
    // Per-lane counts add up to every interval; thread lanes past the cap share one (48 threads, 24 drawn alone
    // carry the attributed intervals), the unattributed lane stays on its own.
    let lane_total: usize = html
        .split("data-intervals=\"")
        .skip(1)
        .map(|s| s[..s.find('"').unwrap()].parse::<usize>().unwrap())
        .sum();
    assert_eq!(lane_total, n);
    assert!(html.contains("… 24 more lanes"));
    assert!(html.contains(">unattributed</text>"));
    // The abstentions table is capped.
    assert!(html.contains("Abstentions (2000, the first 200 listed)"));
    assert!(
        html.len() < 1_000_000,
        "{} bytes for {n} intervals",
        html.len()
    );
}

/// A live-looking run (trace v2): pseudonymous 32-hex ids, times with fractions, the model,
/// tokens and stop reason of each response, and two turns on one thread.
fn live_trace() -> String {
    let th = "3f2a91bc4d5e6f708192a3b4c5d6e7f8";
    [
        r#"{"type":"trace","version":2}"#.to_string(),
        format!(r#"{{"type":"stream_open","t":0,"stream":"s1","client":"claude","transport":"http","thread":"{th}","host":null}}"#),
        r#"{"type":"request","t":12.5,"stream":"s1","request":"q1","previous_response":null,"outputs":[]}"#.into(),
        r#"{"type":"response_start","t":300.25,"stream":"s1","response":"r1","request":"q1","model":"claude-sonnet-4-5"}"#.into(),
        r#"{"type":"tool_call","t":540.281971,"stream":"s1","response":"r1","call":"toolu_1","item":null,"name":"mcp__probe__echo","namespace":null,"kind":"tool_use"}"#.into(),
        r#"{"type":"response_end","t":560.5,"stream":"s1","response":"r1","status":"completed","usage":{"input":12,"output":5,"cache_read":3},"stop_reason":"tool_use"}"#.into(),
        r#"{"type":"stream_close","t":561,"stream":"s1"}"#.into(),
        r#"{"type":"mcp_interval","t":1100.5,"interval":"i1","alias":"probe","tool":"echo","start":600.75,"end":1100.25,"outcome":"result","tool_use_id":"toolu_1","host":null}"#.into(),
        format!(r#"{{"type":"stream_open","t":1162,"stream":"s2","client":"claude","transport":"http","thread":"{th}","host":null}}"#),
        r#"{"type":"request","t":1162.01602,"stream":"s2","request":"q2","previous_response":null,"outputs":["toolu_1"]}"#.into(),
        r#"{"type":"response_start","t":1300,"stream":"s2","response":"r2","request":"q2","model":"claude-sonnet-4-5"}"#.into(),
        r#"{"type":"response_end","t":1400,"stream":"s2","response":"r2","status":"completed","usage":{"input":20,"output":7},"stop_reason":"end_turn"}"#.into(),
        r#"{"type":"stream_close","t":1401,"stream":"s2"}"#.into(),
        // The user's next prompt: a new turn.
        format!(r#"{{"type":"stream_open","t":2000,"stream":"s3","client":"claude","transport":"http","thread":"{th}","host":null}}"#),
        r#"{"type":"request","t":2000.5,"stream":"s3","request":"q3","previous_response":null,"outputs":[]}"#.into(),
        r#"{"type":"stream_close","t":2100,"stream":"s3"}"#.into(),
        String::new(),
    ]
    .join("\n")
}

/// What a person reads: labels that end before the plot, rounded times, no `-0s`, the tool's
/// name on its mark, the model and tokens of a window's response, and where turns start.
#[test]
fn the_page_reads_well_on_live_data() {
    let dir = tempfile::tempdir().unwrap();
    let t = write(dir.path(), "live.jsonl", &live_trace());
    let r = dir.path().join("records.jsonl");
    replay_into(&t, &r);
    let html = report(&r, Some(&t));
    assert_balanced(&html);

    // The lane label, shortened so that it ends before the first bar (the plot starts at
    // 200 px; 24 characters of 12 px text end well before it).
    let label = html
        .split("<title>thread 3f2a91bc4d5e6f708192a3b4c5d6e7f8</title>")
        .nth(1)
        .expect("the lane label's title")
        .split("</text>")
        .next()
        .unwrap();
    assert!(label.chars().count() <= 24, "`{label}` runs into the plot");
    assert!(label.starts_with("thread 3f2a"), "{label}");

    // Times for people.
    assert!(
        !html.contains("540.281971") && !html.contains("1162.01602"),
        "unrounded times"
    );
    assert!(html.contains("1162.02 ms"), "the window's close, rounded");
    assert!(
        !html.contains(">-0s<") && !html.contains(">-0"),
        "a negative zero on the axis"
    );

    // The tool's name on its mark.
    let mark = html
        .split("data-interval=\"i1\"")
        .nth(1)
        .unwrap()
        .split("</g>")
        .next()
        .unwrap();
    assert!(mark.contains("class=\"tool\""), "{mark}");
    assert!(mark.contains(">echo</tspan>"), "{mark}");

    // Model, tokens and stop reason in the window's hover text.
    assert!(html.contains("model claude-sonnet-4-5"), "the model");
    assert!(
        html.contains("tokens: input 12 · output 5 · cache read 3"),
        "the tokens"
    );
    assert!(html.contains("stop reason tool_use"), "the stop reason");

    // Two turns start (q1, q3); q2 continues r1's tool call.
    assert_eq!(
        html.matches("<g class=\"turn\"").count(),
        2,
        "two turn starts"
    );
    assert!(html.contains("turn starts: request q1 at 12.5 ms"));
    assert!(html.contains("turn starts: request q3 at 2000.5 ms"));
    assert!(!html.contains("turn starts: request q2"));
}

/// Records of several traces (`replay DIR`) name their trace, and the report draws each trace
/// on its own with its own lanes; records mixed without names are refused, not drawn as one
/// plausible but wrong run.
#[test]
fn records_of_several_traces_are_drawn_apart_and_an_unnamed_mix_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let traces = dir.path().join("traces");
    std::fs::create_dir(&traces).unwrap();
    // Two traces whose intervals share their ids (i1, i2, i3), as the bundled ones do.
    let a = write(&traces, "a.jsonl", &trace("probe"));
    let b = write(&traces, "b.jsonl", &trace("other"));
    let r = dir.path().join("records.jsonl");
    replay_into(&traces, &r);
    let text = std::fs::read_to_string(&r).unwrap();
    assert_eq!(text.matches(r#","trace":"a.jsonl"}"#).count(), 3, "{text}");
    assert_eq!(text.matches(r#","trace":"b.jsonl"}"#).count(), 3, "{text}");
    let checked = windowtap(&["check", s(&r)]);
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );

    let out_path = dir.path().join("both.html");
    let out = windowtap(&[
        "report",
        s(&r),
        "--trace",
        s(&a),
        "--trace",
        s(&b),
        "-o",
        s(&out_path),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(&out_path).unwrap();
    assert_balanced(&html);
    for name in ["a.jsonl", "b.jsonl"] {
        assert_eq!(
            html.matches(&format!("<h2 class=\"trace\" data-trace=\"{name}\">"))
                .count(),
            1,
            "{name}"
        );
    }
    // Each trace's intervals and windows on its own timeline: every id twice, once per trace.
    assert_eq!(
        html.matches("<g class=\"interval\" data-interval=\"i1\"")
            .count(),
        2
    );
    let (first, second) = html.split_at(html.find("data-trace=\"b.jsonl\"").unwrap());
    assert!(first.contains("probe/echo") && !first.contains("other/echo"));
    // (Only i1 carries the alias; i2 and i3 are `probe` in both traces.)
    assert!(second.contains("other/echo"));

    // The same records without their names (two replays concatenated): refused.
    let ra = windowtap(&["replay", s(&a)]);
    let rb = windowtap(&["replay", s(&b)]);
    let mut mixed = ra.stdout.clone();
    mixed.extend_from_slice(&rb.stdout);
    assert!(
        !String::from_utf8_lossy(&mixed).contains("\"trace\""),
        "one trace names none"
    );
    let m = dir.path().join("mixed.jsonl");
    std::fs::write(&m, mixed).unwrap();
    let out = windowtap(&["report", s(&m), "-o", s(&dir.path().join("m.html"))]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("interval `i1` has two records"), "{err}");
    assert!(
        err.contains("windowtap replay"),
        "it says what to do: {err}"
    );
}

/// Every `attr="number"` in `html`.
fn numbers(html: &str, attr: &str) -> Vec<f64> {
    html.split(&format!(" {attr}=\""))
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap().parse().unwrap())
        .collect()
}

/// A 70 s run of short calls on three sessions, two of them with a subagent, as a real run
/// gives: the calls last a few hundred milliseconds, so every mark is a sliver at full view.
/// The last call is an abstention that ends at the very end of the run.
fn seventy_seconds() -> String {
    let mut lines = vec![r#"{"type":"trace","version":2}"#.to_string()];
    let mut n = 0;
    for (k, (client, transport, spawn)) in [
        ("claude", "http", "Agent"),
        ("claude", "http", "Agent"),
        ("codex", "websocket", "spawn_agent"),
    ]
    .into_iter()
    .enumerate()
    {
        let t0 = 1000.0 + 24_000.0 * k as f64;
        let (p, c) = (format!("S{k}"), format!("S{k}-sub"));
        lines.push(format!(r#"{{"type":"stream_open","t":{t0},"stream":"p{k}","client":"{client}","transport":"{transport}","thread":"{p}","host":"h{k}"}}"#));
        lines.push(format!(r#"{{"type":"request","t":{},"stream":"p{k}","request":"pq{k}","previous_response":null,"outputs":[]}}"#, t0 + 1.0));
        lines.push(format!(r#"{{"type":"response_start","t":{},"stream":"p{k}","response":"pr{k}","request":"pq{k}"}}"#, t0 + 50.0));
        lines.push(format!(r#"{{"type":"tool_call","t":{},"stream":"p{k}","response":"pr{k}","call":"spawn{k}","item":null,"name":"{spawn}","namespace":null,"kind":"tool_use"}}"#, t0 + 200.0));
        lines.push(format!(r#"{{"type":"response_end","t":{},"stream":"p{k}","response":"pr{k}","status":"completed"}}"#, t0 + 210.0));
        lines.push(format!(r#"{{"type":"stream_open","t":{},"stream":"c{k}","client":"{client}","transport":"{transport}","thread":"{c}","host":"h{k}"}}"#, t0 + 300.0));
        lines.push(format!(r#"{{"type":"request","t":{},"stream":"c{k}","request":"cq{k}","previous_response":null,"outputs":[]}}"#, t0 + 301.0));
        lines.push(format!(r#"{{"type":"response_start","t":{},"stream":"c{k}","response":"cr{k}","request":"cq{k}"}}"#, t0 + 350.0));
        lines.push(format!(r#"{{"type":"tool_call","t":{},"stream":"c{k}","response":"cr{k}","call":"toolu_{k}","item":null,"name":"mcp__probe__lookup","namespace":null,"kind":"tool_use"}}"#, t0 + 400.0));
        lines.push(format!(r#"{{"type":"response_end","t":{},"stream":"c{k}","response":"cr{k}","status":"completed"}}"#, t0 + 410.0));
        n += 1;
        lines.push(format!(r#"{{"type":"mcp_interval","t":{},"interval":"i{n}","alias":"probe","tool":"lookup","start":{},"end":{},"outcome":"result","tool_use_id":"toolu_{k}","host":"h{k}"}}"#, t0 + 700.0, t0 + 420.0, t0 + 690.0));
        lines.push(format!(r#"{{"type":"request","t":{},"stream":"c{k}","request":"cq{k}b","previous_response":null,"outputs":["toolu_{k}"]}}"#, t0 + 720.0));
        lines.push(format!(
            r#"{{"type":"stream_close","t":{},"stream":"c{k}"}}"#,
            t0 + 800.0
        ));
        lines.push(format!(r#"{{"type":"request","t":{},"stream":"p{k}","request":"pq{k}b","previous_response":null,"outputs":["spawn{k}"]}}"#, t0 + 900.0));
    }
    // Two calls in flight with no tool_use_id while both subagent windows... none is open:
    // one call with no window at the end, ending last.
    lines.push(r#"{"type":"mcp_interval","t":71000,"interval":"i-last","alias":"probe","tool":"lookup","start":70500,"end":70990,"outcome":"result","host":null}"#.into());
    lines.push(String::new());
    lines.join("\n")
}

fn seventy_seconds_report(dir: &Path) -> String {
    let t = write(dir, "run.jsonl", &seventy_seconds());
    let r = dir.join("records.jsonl");
    replay_into(&t, &r);
    report(&r, Some(&t))
}

/// At 900 px the page used to scale its 1360-px timeline down to 6-px text: now the timeline
/// keeps its size (the page scrolls sideways) and no text is smaller than 11 px.
#[test]
fn text_stays_at_least_11_px_whatever_the_window_width() {
    let dir = tempfile::tempdir().unwrap();
    let html = seventy_seconds_report(dir.path());
    assert_balanced(&html);
    let sizes = numbers(&html, "font-size");
    assert!(!sizes.is_empty());
    for px in sizes {
        assert!(px >= 11.0, "text of {px} px");
    }
    for css in html.split("font-size:").skip(1) {
        let px: f64 = css.split("px").next().unwrap().parse().unwrap();
        assert!(px >= 11.0, "CSS text of {px} px");
    }
    // No scaling of the drawing to the window: it scrolls inside its box instead.
    let css = html
        .split("<style>")
        .nth(1)
        .unwrap()
        .split("</style>")
        .next()
        .unwrap();
    let svg_rule = css
        .split("svg.tl{")
        .nth(1)
        .unwrap()
        .split('}')
        .next()
        .unwrap();
    assert!(!svg_rule.contains("max-width:100%"), "{svg_rule}");
    assert!(css.contains("div.scroll{overflow-x:auto"), "{css}");
    assert_eq!(
        html.matches("<svg class=\"tl\"").count(),
        html.matches("<div class=\"scroll\"><svg class=\"tl\"")
            .count()
    );
}

/// Every call is labelled with its tool and its decision in full, and no label runs past the
/// drawing's edges, not even the one of the call that ends the run.
#[test]
fn every_call_shows_its_tool_and_its_decision_in_full_and_no_label_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let html = seventy_seconds_report(dir.path());
    let marks: Vec<&str> = html
        .split("<g class=\"interval\"")
        .skip(1)
        .map(|m| m.split("</g>").next().unwrap())
        .collect();
    assert_eq!(marks.len(), 4);
    for m in &marks {
        assert!(
            m.contains("<tspan class=\"tool\" font-weight=\"600\">lookup</tspan>"),
            "{m}"
        );
    }
    let last = marks
        .iter()
        .find(|m| m.contains("data-interval=\"i-last\""))
        .unwrap();
    assert!(last.contains(">no_window</tspan>"), "{last}");
    let attributed = marks.iter().filter(|m| m.contains(">attributed</tspan>"));
    assert_eq!(attributed.count(), 3);
    // Each label inside the drawing (1360 px wide, the plot from 200 px), by its width as
    // drawn (`data-w`, 7 px a character) and its anchor.
    for label in html.split("<text class=\"label\"").skip(1) {
        let tag = label.split('>').next().unwrap();
        let x: f64 = numbers(tag, "x")[0];
        let w: f64 = numbers(tag, "data-w")[0];
        let text: String = label
            .split("</text>")
            .next()
            .unwrap()
            .split('>')
            .skip(1)
            .map(|s| s.split('<').next().unwrap())
            .collect();
        assert!(w >= 7.0 * text.chars().count() as f64 - 0.5, "{text}: {w}");
        let (a, b) = if tag.contains("text-anchor=\"end\"") {
            (x - w, x)
        } else {
            (x, x + w)
        };
        assert!(a >= 200.0 && b <= 1360.0, "`{text}` drawn over {a}..{b}");
    }
    // Windows carry the names of their calls.
    assert!(html.contains("class=\"wlabel\""));
    assert!(html.contains(">mcp__probe__lookup</text>"));
}

/// A person can zoom (a range control per timeline, click a turn or a window, drag) and find
/// a call (a box matching tool, alias, decision, thread or id, and a list of every call):
/// every element carries the times the page's script lays it out by.
#[test]
fn the_page_can_be_zoomed_and_searched() {
    let dir = tempfile::tempdir().unwrap();
    let html = seventy_seconds_report(dir.path());
    assert_offline(&html);
    assert!(html.contains("<input id=\"find\" type=\"search\""));
    let svgs = html.matches("<svg class=\"tl\"").count();
    assert_eq!(html.matches("<div class=\"zoom\">").count(), svgs);
    assert_eq!(html.matches(" data-t0=\"").count(), svgs);
    assert!(html.contains("<input class=\"z0\" type=\"number\" step=\"any\" value=\""));
    for g in html.split("<g class=\"interval\"").skip(1) {
        let tag = g.split('>').next().unwrap();
        assert_eq!(numbers(tag, "data-s").len(), 1, "{tag}");
        assert_eq!(numbers(tag, "data-e").len(), 1, "{tag}");
        assert!(
            tag.contains("data-find=\"") && tag.contains("probe/lookup"),
            "{tag}"
        );
    }
    assert!(html.contains("data-find=\"i-last probe/lookup no_window unattributed\""));
    for w in html.split("<rect class=\"window\"").skip(1) {
        assert_eq!(numbers(w.split('>').next().unwrap(), "data-s").len(), 1);
    }
    assert!(html.matches("<g class=\"turn\" data-t=\"").count() >= 6);
    // The list of calls, one row each, searchable the same way.
    assert!(html.contains("<h2>Calls (4)</h2>"));
    assert_eq!(html.matches("<tr data-interval=").count(), 4);
    // The script places labels and ticks by the same rules as the page.
    let script = html.split("<script>").nth(1).unwrap();
    assert!(script.contains("var L=200,R=1336,W=1360;"));
}

/// Subagents are drawn nested under the thread whose `Agent` / `spawn_agent` call started
/// them, for Claude Code and Codex alike, in the bundled traces and in a three-session run.
#[test]
fn subagents_are_nested_under_their_parents() {
    let dir = tempfile::tempdir().unwrap();
    let html = seventy_seconds_report(dir.path());
    let lanes: Vec<(String, String)> = html
        .split("<g class=\"lane\" ")
        .skip(1)
        .map(|g| {
            let tag = g.split('>').next().unwrap().to_string();
            let label = g
                .split("<title>")
                .nth(1)
                .unwrap()
                .split("</title>")
                .next()
                .unwrap()
                .to_string();
            (tag, label)
        })
        .collect();
    let order: Vec<&str> = lanes.iter().map(|(_, l)| l.as_str()).collect();
    assert_eq!(
        order,
        [
            "thread S0",
            "thread S0-sub",
            "thread S1",
            "thread S1-sub",
            "thread S2",
            "thread S2-sub",
            "unattributed"
        ]
    );
    for (tag, label) in &lanes {
        if let Some(parent) = label.strip_suffix("-sub") {
            assert!(tag.contains("data-depth=\"1\""), "{tag}");
            assert!(tag.contains(&format!("data-parent=\"{parent}\"")), "{tag}");
        } else {
            assert!(tag.contains("data-depth=\"0\"") && !tag.contains("data-parent"));
        }
    }
    assert!(html.contains(">↳ thread S0-sub</text>"));

    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("traces");
    // Parallel subagents: the trace does not say which of the parent's calls started which
    // subagent, so each lane names every candidate.
    for (file, parent, children, calls) in [
        (
            "claude_parallel_agents_same_tool.jsonl",
            "thread sess1",
            &["thread sess1+agentA", "thread sess1+agentB"][..],
            "one of the 2 calls Agent toolu_a1, Agent toolu_a2 of thread sess1",
        ),
        (
            "codex_parallel_subagents.jsonl",
            "thread thP",
            &["thread thC1", "thread thC2"][..],
            "one of the 2 calls spawn_agent call_s1, spawn_agent call_s2 of thread thP",
        ),
    ] {
        let r = dir.path().join(format!("{file}.records"));
        replay_into(&root.join(file), &r);
        let html = report(&r, Some(&root.join(file)));
        for child in children {
            let tag = html
                .split("<g class=\"lane\" ")
                .find(|g| g.contains(&format!("<title>{child}</title>")))
                .unwrap_or_else(|| panic!("{file}: no lane {child}"))
                .split('>')
                .next()
                .unwrap();
            assert!(
                tag.contains(&format!("data-depth=\"1\" data-parent=\"{parent}\"")),
                "{file}: {child}: {tag}"
            );
            assert!(
                html.find(&format!("<title>{parent}</title>")).unwrap()
                    < html.find(&format!("<title>{child}</title>")).unwrap()
            );
            let lane = html
                .split("<g class=\"lane\" ")
                .find(|g| g.contains(&format!("<title>{child}</title>")))
                .unwrap();
            assert!(
                lane.contains(&format!(
                    "started by {calls} (the trace does not say which)"
                )),
                "{file}: {child}: {lane}"
            );
        }
    }
}

/// A trace that is not the records' own is refused (none of their intervals is in it), and
/// one that lacks some of them is drawn under a warning, said on stderr too.
#[test]
fn a_trace_that_does_not_belong_to_the_records_is_refused_or_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let (_, r) = replayed(dir.path(), "probe");
    let other = write(dir.path(), "other.jsonl", &seventy_seconds());
    let out_path = dir.path().join("o.html");
    let out = windowtap(&["report", s(&r), "--trace", s(&other), "-o", s(&out_path)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("does not belong to these records"), "{err}");
    assert!(err.contains("none of their 3 intervals is in it"), "{err}");
    assert!(!out_path.exists());

    // A trace holding only one of the three intervals: drawn, with a warning.
    let partial: String = trace("probe")
        .lines()
        .filter(|l| !l.contains("\"interval\":\"i2\"") && !l.contains("\"interval\":\"i3\""))
        .map(|l| format!("{l}\n"))
        .collect();
    let partial = write(dir.path(), "partial.jsonl", &partial);
    let out = windowtap(&["report", s(&r), "--trace", s(&partial), "-o", s(&out_path)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("warning: --trace"), "{err}");
    assert!(
        err.contains("2 of the 3 intervals of the records are not in this trace"),
        "{err}"
    );
    let html = std::fs::read_to_string(&out_path).unwrap();
    assert!(html.contains("<p class=\"warning\">warning: --trace"));
    assert_balanced(&html);
}

/// A run in which the model called an MCP tool twice and only one call was ever reported (its
/// wrapper reported elsewhere, or the server was not wrapped): the call has no interval, so no
/// mark shows it. With the trace the page says how many such calls there are, on which thread,
/// and the likely causes in the words of the relay's stop; without it, that the count needs it.
/// A call to a built-in tool (Bash) and a Codex call reported by item id are not counted.
#[test]
fn mcp_calls_no_wrapper_reported_are_counted_from_the_trace() {
    let dir = tempfile::tempdir().unwrap();
    let t = write(
        dir.path(),
        "lost.jsonl",
        &[
            r#"{"type":"trace","version":2}"#,
            r#"{"type":"stream_open","t":0,"stream":"c1","client":"claude","transport":"http","thread":"sess","host":null}"#,
            r#"{"type":"request","t":5,"stream":"c1","request":"q1","previous_response":null,"outputs":[]}"#,
            r#"{"type":"response_start","t":300,"stream":"c1","response":"r1","request":"q1"}"#,
            r#"{"type":"tool_call","t":1800,"stream":"c1","response":"r1","call":"toolu_1","item":null,"name":"mcp__probe__echo","namespace":null,"kind":"tool_use"}"#,
            r#"{"type":"tool_call","t":1810,"stream":"c1","response":"r1","call":"toolu_2","item":null,"name":"mcp__probe__echo","namespace":null,"kind":"tool_use"}"#,
            r#"{"type":"tool_call","t":1820,"stream":"c1","response":"r1","call":"toolu_3","item":null,"name":"Bash","namespace":null,"kind":"tool_use"}"#,
            r#"{"type":"response_end","t":1900,"stream":"c1","response":"r1","status":"completed"}"#,
            r#"{"type":"mcp_interval","t":2102,"interval":"i1","alias":"probe","tool":"echo","start":1850,"end":2100,"outcome":"result","tool_use_id":"toolu_1","host":null}"#,
            r#"{"type":"request","t":2205,"stream":"c1","request":"q2","previous_response":null,"outputs":["toolu_1","toolu_2","toolu_3"]}"#,
            r#"{"type":"stream_open","t":3000,"stream":"x1","client":"codex","transport":"websocket","thread":"cx","host":null}"#,
            r#"{"type":"request","t":3005,"stream":"x1","request":"qx","previous_response":null,"outputs":[]}"#,
            r#"{"type":"response_start","t":3100,"stream":"x1","response":"rx","request":"qx"}"#,
            r#"{"type":"tool_call","t":3200,"stream":"x1","response":"rx","call":"call_x","item":"fc_x","name":"echo","namespace":"mcp__probe","kind":"function"}"#,
            r#"{"type":"response_end","t":3300,"stream":"x1","response":"rx","status":"completed"}"#,
            r#"{"type":"mcp_interval","t":3502,"interval":"i2","alias":"probe","tool":"echo","start":3350,"end":3500,"outcome":"result","item_id":"fc_x","host":null}"#,
            r#"{"type":"request","t":3600,"stream":"x1","request":"qx2","previous_response":"rx","outputs":["call_x"]}"#,
            "",
        ]
        .join("\n"),
    );
    let r = dir.path().join("records.jsonl");
    replay_into(&t, &r);

    let html = report(&r, Some(&t));
    assert_balanced(&html);
    assert!(
        html.contains("data-unreported=\"1\">warning: 1 model tool call to MCP tools (mcp__probe__echo \u{d7}1) got no report from a wrapper"),
        "{html}"
    );
    // The causes of a relay on its own and of `run`, as their stops say them.
    assert!(html.contains("does not run under `windowtap wrap`"));
    assert!(html.contains("another relay&#39;s ingest socket"));
    assert!(html.contains("declared where run does not look"));
    assert!(html.contains("the host did not run the call"));
    // On the thread that made it.
    assert!(
        html.contains("data-lane=\"thread sess\" data-n=\"1\">thread sess (claude · http): 1<"),
        "{html}"
    );
    assert!(!html.contains("data-lane=\"thread cx\""));
    // And its lane in the drawing, where no mark shows the call.
    assert_eq!(html.matches("<text class=\"lane-noreport\"").count(), 1);
    assert!(html.contains("⚠ 1 MCP call not reported</text>"));
    let out = windowtap(&[
        "report",
        s(&r),
        "--trace",
        s(&t),
        "-o",
        s(&dir.path().join("x.html")),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(", 1 MCP tool call no wrapper reported"),
        "{err}"
    );

    // Without the trace the count is not known, and the page says what it needs.
    let html = report(&r, None);
    assert!(html.contains("data-unreported=\"unknown\""));
    assert!(html.contains("pass --trace with the run's capture"));

    // A run where every call was reported says so.
    let (t, r) = replayed(dir.path(), "probe");
    assert!(report(&r, Some(&t)).contains("data-unreported=\"0\""));
}
