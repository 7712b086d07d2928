use super::*;
use crate::trace::{event_line, OpenState, HEADER_V1};

fn read(text: &str) -> Result<Vec<Event>, TraceError> {
    read_all(text.as_bytes(), "t.jsonl")
}

const OPEN: &str = r#"{"type":"stream_open","t":1,"stream":"s1","client":"codex","transport":"websocket","thread":"th1","host":"h1"}"#;

#[test]
fn a_written_trace_reads_back_identically() {
    let text = format!(
        "{HEADER}\n{OPEN}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n",
        r#"{"type":"request","t":2,"stream":"s1","request":"q1","previous_response":null,"outputs":[]}"#,
        r#"{"type":"response_start","t":3,"stream":"s1","response":"r1","request":"q1"}"#,
        r#"{"type":"tool_call","t":4.25,"stream":"s1","response":"r1","call":"c1","item":"fc1","name":"echo","namespace":"mcp__probe","kind":"function"}"#,
        r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed"}"#,
        r#"{"type":"mcp_start","t":6,"interval":"i1","alias":"probe","tool":"echo","start":5.5,"host":null}"#,
        r#"{"type":"mcp_interval","t":8,"interval":"i1","alias":"probe","tool":"echo","start":5.5,"end":7,"outcome":"result","tool_use_id":null,"item_id":"fc1","call_id":"c1","thread":"th1","host":"h1"}"#,
        r#"{"type":"observation_lost","t":9,"stream":"s1","reason":"decode"}"#,
        r#"{"type":"stream_close","t":9,"stream":"s1"}"#,
    );
    let events = read(&text).unwrap();
    assert_eq!(events.len(), 9);
    let mut again = format!("{HEADER}\n");
    for ev in &events {
        again.push_str(&event_line(ev));
    }
    assert_eq!(again, text);
}

#[test]
fn every_written_time_reads_back_exactly() {
    // The first was found by the trace_reader fuzz target (fuzz/regressions/trace_reader/):
    // without correctly rounded float parsing a time read, written and read again changed.
    let times = [
        1.988_888_888_888_889e26,
        1.988_888_888_888_889_3e26,
        1_234.567_890_123_456_7,
        9_007_199_254_740_993.0,
        0.1 + 0.2,
        5e-324,
        f64::MAX,
    ];
    for t in times {
        let ev = Event {
            t,
            kind: EventKind::StreamOpen {
                stream: "s".into(),
                client: Client::Codex,
                transport: Transport::Http,
                thread: None,
                host: None,
            },
        };
        let text = format!("{HEADER}\n{}", event_line(&ev));
        let back = read(&text).unwrap();
        assert_eq!(
            back[0].t.to_bits(),
            t.to_bits(),
            "{t:e} came back as {:e}",
            back[0].t
        );
    }
}

#[test]
fn multi_round_trip_fields_read_back_and_are_checked() {
    let ok = [
        (
            r#"{"type":"mcp_interval","t":8,"interval":"i1","alias":"a","tool":"t","start":1,"end":5,"outcome":"result","tool_use_id":"tu","item_id":null,"call_id":null,"thread":null,"host":null,"rounds":2,"input_wait":2.5}"#,
            Rounds {
                rounds: 2,
                input_wait: 2.5,
                unanswered: false,
            },
        ),
        (
            r#"{"type":"mcp_interval","t":8,"interval":"i2","alias":"a","tool":"t","start":1,"end":5,"outcome":"cancelled","tool_use_id":null,"item_id":null,"call_id":null,"thread":null,"host":null,"rounds":1,"input_wait":4,"outcome_detail":"input_unanswered"}"#,
            Rounds {
                rounds: 1,
                input_wait: 4.0,
                unanswered: true,
            },
        ),
    ];
    for (line, want) in ok {
        let text = format!("{HEADER}\n{line}\n");
        let events = read(&text).unwrap();
        let EventKind::McpInterval { rounds, .. } = &events[0].kind else {
            panic!()
        };
        assert_eq!(rounds, &Some(want));
        // Written back the same (the fast path hands these lines to the strict one).
        assert_eq!(event_line(&events[0]), format!("{line}\n"));
    }
    let base = r#"{"type":"mcp_interval","t":8,"interval":"i1","alias":"a","tool":"t","start":1,"end":5,"host":null,"#;
    for (rest, field) in [
        (r#""outcome":"result","rounds":0}"#, "rounds"),
        (r#""outcome":"result","rounds":1.5}"#, "rounds"),
        (r#""outcome":"result","input_wait":4}"#, ""),
        (r#""outcome":"result","input_wait":-1}"#, "input_wait"),
        (
            r#""outcome":"result","outcome_detail":"input_unanswered"}"#,
            "outcome_detail",
        ),
        (
            r#""outcome":"cancelled","outcome_detail":"bored"}"#,
            "outcome_detail",
        ),
    ] {
        let line = format!("{base}{rest}");
        let got = read(&format!("{HEADER}\n{line}\n"));
        if field.is_empty() {
            assert!(got.is_ok(), "{line}: {got:?}");
        } else {
            let err = got.expect_err(&line).to_string();
            assert!(err.contains(field), "{line}: {err}");
        }
    }
    let too_long = format!(r#"{base}"outcome":"result","input_wait":4.5}}"#);
    assert!(read(&format!("{HEADER}\n{too_long}\n")).is_err());
}

#[test]
fn the_http_transport_of_an_mcp_call_reads_back_and_nothing_else_is_a_spelling_of_it() {
    // design.md §8: `transport: "http"` on both MCP events; absent is stdio.
    let start = r#"{"type":"mcp_start","t":6,"interval":"i1","alias":"a","tool":"t","start":5,"host":null,"transport":"http"}"#;
    let end = r#"{"type":"mcp_interval","t":8,"interval":"i1","alias":"a","tool":"t","start":5,"end":7,"outcome":"result","tool_use_id":"tu","item_id":null,"call_id":null,"thread":null,"host":null,"transport":"http"}"#;
    let text = format!("{HEADER}\n{start}\n{end}\n");
    let events = read(&text).unwrap();
    for ev in &events {
        let (EventKind::McpStart { transport, .. } | EventKind::McpInterval { transport, .. }) =
            &ev.kind
        else {
            panic!()
        };
        assert_eq!(*transport, McpTransport::Http);
    }
    let mut again = format!("{HEADER}\n");
    for ev in &events {
        again.push_str(&event_line(ev));
    }
    assert_eq!(again, text);
    // Absent is stdio, and stdio writes no field (so older traces write back unchanged).
    let stdio = start.replace(r#","transport":"http""#, "");
    let ev = &read(&format!("{HEADER}\n{stdio}\n")).unwrap()[0];
    assert!(matches!(
        ev.kind,
        EventKind::McpStart {
            transport: McpTransport::Stdio,
            ..
        }
    ));
    assert_eq!(event_line(ev), format!("{stdio}\n"));
    for bad in [r#""stdio""#, "null", r#""HTTP""#, "1"] {
        let line = start.replace(r#""http""#, bad);
        let err = read(&format!("{HEADER}\n{line}\n")).expect_err(&line);
        assert!(err.to_string().contains("transport"), "{line}: {err}");
    }
    // In a v1 trace the key is no field, like every v2 key.
    let v1 = read(&format!(
        "{HEADER_V1}\n{}\n",
        start.replace(r#","host":null"#, "")
    ))
    .unwrap();
    assert!(matches!(
        v1[0].kind,
        EventKind::McpStart {
            transport: McpTransport::Stdio,
            ..
        }
    ));
}

#[test]
fn hints_may_be_absent() {
    let text = format!(
        "{HEADER}\n{}\n",
        r#"{"type":"mcp_interval","t":8,"interval":"i1","alias":"a","tool":"t","start":1,"end":2,"outcome":"error","host":null}"#
    );
    let events = read(&text).unwrap();
    let EventKind::McpInterval { hints, .. } = &events[0].kind else {
        panic!()
    };
    assert_eq!(hints, &Hints::default());
}

/// The strict path's answer for one event line.
fn strict(line: &str) -> Result<Event, Fault> {
    parse_event(&object(line)?, Version::V2).map(Event::into_owned)
}

fn strict_v1(line: &str) -> Result<Event, Fault> {
    parse_event(&object(line)?, Version::V1).map(Event::into_owned)
}

/// Lines the fast path must take, each as the strict path reads it.
const TAKEN: &[&str] = &[
    OPEN,
    r#"{"type":"stream_open","t":0,"stream":"s2é","client":"claude","transport":"http","thread":null,"host":null}"#,
    r#"{"type":"request","t":2,"stream":"s1","request":"q1","previous_response":null,"outputs":[]}"#,
    r#"{"type":"request","t":2.5,"stream":"s1","request":"q2","previous_response":"r1","outputs":["c1","c2"]}"#,
    r#"{"type":"response_start","t":3,"stream":"s1","response":"r1","request":"q1"}"#,
    r#"{"type":"response_start","t":3,"stream":"s1","response":"r1","request":null}"#,
    r#"{"type":"response_start","t":3,"stream":"s1","response":"r1","request":null,"model":"gpt-5.1-codex"}"#,
    r#"{"type":"response_start","t":3,"stream":"s1","response":"r1","request":null,"model":null}"#,
    r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed","usage":{"input":12,"output":0,"cache_read":1000000,"cache_creation":7},"stop_reason":"tool_use"}"#,
    r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed","usage":{},"stop_reason":null}"#,
    r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed","usage":{ "output" : 3 },"stop_reason":"other"}"#,
    r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed","usage":null}"#,
    r#"{"type":"tool_call","t":4.25,"stream":"s1","response":"r1","call":"c1","item":"fc1","name":"echo","namespace":"mcp__probe","kind":"function"}"#,
    r#"{"type":"tool_call","t":4.25,"stream":"s1","response":"r1","call":"c1","item":null,"name":"mcp__p__e","namespace":null,"kind":"tool_use"}"#,
    r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"incomplete"}"#,
    r#"{"type":"mcp_start","t":6,"interval":"i1","alias":"probe","tool":"echo","start":6,"host":"h2"}"#,
    r#"{"type":"mcp_interval","t":8,"interval":"i1","alias":"probe","tool":"echo","start":5.5,"end":8,"outcome":"result","tool_use_id":null,"item_id":"fc1","call_id":"c1","thread":"th1","host":null}"#,
    r#"{"type":"mcp_interval","t":8,"interval":"i1","alias":"probe","tool":"echo","start":5.5,"end":5.5,"outcome":"lost","host":"h"}"#,
    r#"{"type":"mcp_start","t":6,"interval":"i1","alias":"probe","tool":"echo","start":6,"host":"h2","transport":"http"}"#,
    r#"{"type":"mcp_interval","t":8,"interval":"i1","alias":"probe","tool":"echo","start":5.5,"end":8,"outcome":"error","tool_use_id":"tu","item_id":null,"call_id":null,"thread":null,"host":null,"transport":"http"}"#,
    r#"{"type":"observation_lost","t":9,"stream":"s1","reason":"decode"}"#,
    r#"{"type":"stream_close","t":1000,"stream":"s1"}"#,
    r#" { "t" : 9 , "type" : "stream_close" , "stream" : "s1" } "#,
    // Numbers as `json::push_ms` writes them, down to the last bit.
    r#"{"type":"stream_close","t":0.05,"stream":"s1"}"#,
    r#"{"type":"stream_close","t":0.30000000000000004,"stream":"s1"}"#,
    r#"{"type":"stream_close","t":123456789012.25,"stream":"s1"}"#,
    r#"{"type":"stream_close","t":0.1,"stream":"s1"}"#,
];

#[test]
fn the_fast_path_reads_every_written_line_as_the_strict_path_does() {
    for &line in TAKEN {
        let fast = fast::event(line, Version::V2).map(Event::into_owned);
        assert!(fast.is_some(), "the fast path should take {line}");
        assert_eq!(fast.map(Ok), Some(strict(line)), "{line}");
    }
}

#[test]
fn a_line_changed_anywhere_is_read_by_the_fast_path_as_the_strict_path_reads_it_or_left_to_it() {
    // Each taken line with one to three bytes replaced, inserted or removed (bytes that
    // matter to JSON most of the time): whatever the fast path takes, the strict path
    // must read the same.
    const BYTES: &[u8] = b"\"\\:,{}[] \t\n0123456789.-eEnultrsa\x00\x1f\x7f\xc3\xa9";
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut taken = 0;
    for _ in 0..200_000 {
        let mut line = TAKEN[next() as usize % TAKEN.len()].as_bytes().to_vec();
        for _ in 0..1 + next() % 3 {
            let at = next() as usize % (line.len() + 1);
            let byte = BYTES[next() as usize % BYTES.len()];
            match next() % 3 {
                0 if at < line.len() => line[at] = byte,
                1 => line.insert(at, byte),
                _ if at < line.len() => {
                    line.remove(at);
                }
                _ => {}
            }
        }
        let Ok(line) = std::str::from_utf8(&line) else {
            continue;
        };
        if let Some(fast) = fast::event(line, Version::V2).map(Event::into_owned) {
            assert_eq!(Ok(fast), strict(line), "{line}");
            taken += 1;
        }
    }
    assert!(
        taken > 5_000,
        "the fast path took only {taken} changed lines"
    );
}

#[test]
fn the_fast_path_reads_written_times_to_the_same_bit() {
    // SplitMix64 over times of every magnitude and precision a trace may hold.
    let mut x = 7u64;
    let mut taken = 0;
    for _ in 0..20_000 {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let t = (z >> 24) as f64 / f64::from(1u32 << (z % 32));
        let ev = Event {
            t,
            kind: EventKind::StreamClose {
                stream: "s1".into(),
            },
        };
        let line = event_line(&ev);
        let line = line.trim_end();
        if let Some(fast) = fast::event(line, Version::V2).map(Event::into_owned) {
            assert_eq!(Ok(fast.clone()), strict(line), "{line}");
            assert_eq!(fast, ev, "{line}");
            taken += 1;
        }
    }
    assert!(taken > 10_000, "the fast path took only {taken} lines");
}

const ESCAPED: &str = r#"{"type":"stream_open","t":0,"stream":"s\"2\u00e9","client":"claude","transport":"http","thread":null,"host":null}"#;

#[test]
fn the_fast_path_leaves_every_doubtful_line_to_the_strict_path() {
    // Each is either refused by the fast path or read identically by both.
    let lines = [
        // Unknown and repeated keys, even harmless ones.
        r#"{"type":"stream_close","t":9,"stream":"s1","extra":[[[1]]]}"#,
        r#"{"type":"stream_close","t":9,"stream":"s1","stream":"s2"}"#,
        r#"{"type":"stream_close","t":9,"t":10,"stream":"s1"}"#,
        // Fields of other event types, with or without the type the strict path wants.
        r#"{"type":"stream_close","t":9,"stream":"s1","start":"x"}"#,
        r#"{"type":"stream_close","t":9,"stream":"s1","reason":"why","start":1}"#,
        // Missing versus null.
        r#"{"type":"stream_open","t":1,"stream":"s1","client":"codex","transport":"http"}"#,
        r#"{"type":"stream_open","t":1,"stream":"s1","client":"codex","transport":"http","thread":null}"#,
        r#"{"type":"stream_open","t":1,"stream":"s1","client":"codex","transport":"http","thread":null,"host":7}"#,
        r#"{"type":"mcp_start","t":6,"interval":"i1","alias":"a","tool":"t","start":6}"#,
        r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed","usage":{"input":1.0}}"#,
        r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed","usage":{"input":1e3}}"#,
        r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed","usage":{"input":-1}}"#,
        r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed","usage":{"input":01}}"#,
        r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed","usage":{"input":1,"input":2}}"#,
        r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed","usage":{"input":null}}"#,
        r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed","usage":{"reasoning":5}}"#,
        r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed","usage":{"input":123456789012345678901}}"#,
        r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed","usage":[1]}"#,
        r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed","stop_reason":"Because"}"#,
        r#"{"type":"response_start","t":3,"stream":"s1","response":"r1","request":null,"model":"gpt\n5"}"#,
        r#"{"type":"response_start","t":3,"stream":"s1","response":"r1","request":null,"model":5}"#,
        r#"{"type":"stream_open","t":1,"stream":null,"client":"codex","transport":"http","thread":null}"#,
        r#"{"type":"request","t":2,"stream":"s1","request":"q","outputs":[]}"#,
        r#"{"type":"request","t":2,"stream":"s1","request":"q","previous_response":null,"outputs":null}"#,
        r#"{"type":"request","t":2,"stream":"s1","request":"q","previous_response":null,"outputs":[1]}"#,
        r#"{"type":"mcp_interval","t":8,"interval":"i","alias":"a","tool":"t","start":1,"end":2,"outcome":"error","thread":null,"item_id":7}"#,
        // Values out of range, words out of the vocabulary.
        r#"{"type":"stream_close","t":-1,"stream":"s1"}"#,
        r#"{"type":"stream_close","t":1e400,"stream":"s1"}"#,
        r#"{"type":"stream_close","t":"9","stream":"s1"}"#,
        r#"{"type":"stream_open","t":1,"stream":"s1","client":"vim","transport":"http","thread":null}"#,
        r#"{"type":"mcp_start","t":6,"interval":"i1","alias":"a","tool":"t","start":6.25}"#,
        r#"{"type":"mcp_interval","t":8,"interval":"i","alias":"a","tool":"t","start":5,"end":4,"outcome":"result"}"#,
        r#"{"type":"mcp_interval","t":3,"interval":"i","alias":"a","tool":"t","start":1,"end":4,"outcome":"result"}"#,
        // Escapes, exponents, long or malformed numbers.
        ESCAPED,
        r#"{"type":"request","t":2.5,"stream":"s1","request":"q2","previous_response":"r1","outputs":["c1","c\n2"]}"#,
        r#"{"type":"stream_close","t":1e3,"stream":"s1"}"#,
        r#"{"type":"stream_close","t":1E-3,"stream":"s1"}"#,
        r#"{"type":"stream_close","t":12345678901234567890.5,"stream":"s1"}"#,
        r#"{"type":"stream_close","t":05,"stream":"s1"}"#,
        r#"{"type":"stream_close","t":5.,"stream":"s1"}"#,
        r#"{"type":"stream_close","t":.5,"stream":"s1"}"#,
        r#"{"type":"stream_close","t":1.2.3,"stream":"s1"}"#,
        r#"{"type":"stream_close","t":-0,"stream":"s1"}"#,
        r#"{"type":"stream_close","t":9,"stream":nul}"#,
        r#"{"type":"stream_close","t":9,"stream":"s1",}"#,
        "{\"type\":\"stream_close\",\"t\":9,\"stream\":\"s\t1\"}",
        r#"{}"#,
        // Not an event at all.
        r#"{"type":"trace","version":1}"#,
        r#"{"type":"nope","t":1}"#,
        r#"{"type":"stream_close","t":9,"stream":"s1"} x"#,
        r#"{"type":"stream_close","t":9,"stream":"\ud800"}"#,
        "[1,2]",
        "not json",
    ];
    for line in lines {
        if let Some(ev) = fast::event(line, Version::V2).map(Event::into_owned) {
            assert_eq!(Ok(ev), strict(line), "{line}");
        }
    }
    assert!(fast::event(lines[0], Version::V2).is_none() && strict(lines[0]).is_ok());
    assert!(fast::event(lines[1], Version::V2).is_none() && strict(lines[1]).is_ok());
    // Refused lines that the strict path takes still read, through it.
    let escaped = format!("{HEADER}\n{ESCAPED}\n");
    let events = read(&escaped).unwrap();
    assert_eq!(events[0].kind.stream(), Some("s\"2é"));
}

/// Each malformed input names its line and, where there is one, the field.
#[test]
fn malformed_lines_are_rejected_precisely() {
    let cases: &[(&str, usize, Option<&str>, &str)] = &[
        ("", 1, None, "empty trace"),
        ("{\"type\":\"trace\",\"version\":3}\n", 1, Some("version"), "unsupported"),
        (OPEN, 1, Some("type"), "first line must be the trace header"),
        ("{HEADER}\nnot json\n", 2, None, "bad JSON"),
        ("{HEADER}\n[1,2]\n", 2, None, "expected a JSON object"),
        ("{HEADER}\n{\"type\":\"nope\",\"t\":1}\n", 2, Some("type"), "unknown event type `nope`"),
        ("{HEADER}\n{\"t\":1}\n", 2, Some("type"), "missing"),
        (
            "{HEADER}\n{\"type\":\"stream_close\",\"stream\":\"s\"}\n",
            2,
            Some("t"),
            "missing",
        ),
        (
            "{HEADER}\n{\"type\":\"stream_close\",\"t\":\"1\",\"stream\":\"s\"}\n",
            2,
            Some("t"),
            "expected a number",
        ),
        (
            "{HEADER}\n{\"type\":\"stream_close\",\"t\":-1,\"stream\":\"s\"}\n",
            2,
            Some("t"),
            ">= 0",
        ),
        (
            "{HEADER}\n{\"type\":\"stream_open\",\"t\":1,\"stream\":\"s\",\"client\":\"vim\",\"transport\":\"http\",\"thread\":null}\n",
            2,
            Some("client"),
            "`vim` is not one of",
        ),
        (
            "{HEADER}\n{\"type\":\"stream_open\",\"t\":1,\"stream\":5,\"client\":\"codex\",\"transport\":\"http\",\"thread\":null}\n",
            2,
            Some("stream"),
            "expected a string, got a number",
        ),
        (
            "{HEADER}\n{\"type\":\"stream_open\",\"t\":1,\"stream\":\"s\",\"client\":\"codex\",\"transport\":\"http\"}\n",
            2,
            Some("thread"),
            "missing",
        ),
        (
            "{HEADER}\n{OPEN}\n{\"type\":\"stream_close\",\"t\":0.5,\"stream\":\"s1\"}\n",
            3,
            Some("t"),
            "goes backwards",
        ),
        (
            "{HEADER}\n{\"type\":\"stream_close\",\"t\":1,\"stream\":\"s9\"}\n",
            2,
            Some("stream"),
            "not open",
        ),
        (
            "{HEADER}\n{OPEN}\n{OPEN}\n",
            3,
            Some("stream"),
            "already open",
        ),
        (
            "{HEADER}\n{OPEN}\n{\"type\":\"tool_call\",\"t\":2,\"stream\":\"s1\",\"response\":\"r9\",\"call\":\"c\",\"item\":null,\"name\":\"n\",\"namespace\":null,\"kind\":\"function\"}\n",
            3,
            Some("response"),
            "not open on stream",
        ),
        (
            "{HEADER}\n{OPEN}\n{\"type\":\"response_end\",\"t\":2,\"stream\":\"s1\",\"response\":\"r9\",\"status\":\"completed\"}\n",
            3,
            Some("response"),
            "not open",
        ),
        (
            "{HEADER}\n{OPEN}\n{\"type\":\"observation_lost\",\"t\":2,\"stream\":\"s1\",\"reason\":\"decode\"}\n{\"type\":\"request\",\"t\":3,\"stream\":\"s1\",\"request\":\"q\",\"previous_response\":null,\"outputs\":[]}\n",
            4,
            Some("stream"),
            "only stream_close may follow",
        ),
        (
            "{HEADER}\n{OPEN}\n{\"type\":\"request\",\"t\":3,\"stream\":\"s1\",\"request\":\"q\",\"previous_response\":null,\"outputs\":[1]}\n",
            3,
            Some("outputs"),
            "expected strings",
        ),
        (
            "{HEADER}\n{\"type\":\"mcp_interval\",\"t\":9,\"interval\":\"i\",\"alias\":\"a\",\"tool\":\"t\",\"start\":5,\"end\":4,\"outcome\":\"result\"}\n",
            2,
            Some("end"),
            "before start",
        ),
        (
            "{HEADER}\n{\"type\":\"mcp_interval\",\"t\":3,\"interval\":\"i\",\"alias\":\"a\",\"tool\":\"t\",\"start\":1,\"end\":4,\"outcome\":\"result\"}\n",
            2,
            Some("end"),
            "after the report time",
        ),
        (
            "{HEADER}\n{\"type\":\"mcp_interval\",\"t\":9,\"interval\":\"i\",\"alias\":\"a\",\"tool\":\"t\",\"start\":1,\"end\":4,\"outcome\":\"done\"}\n",
            2,
            Some("outcome"),
            "not one of",
        ),
        (
            "{HEADER}\n{\"type\":\"mcp_interval\",\"t\":9,\"interval\":\"i\",\"alias\":\"a\",\"tool\":\"t\",\"start\":1,\"end\":4,\"outcome\":\"result\",\"item_id\":7}\n",
            2,
            Some("item_id"),
            "expected a string or null",
        ),
        (
            "{HEADER}\n{\"type\":\"mcp_start\",\"t\":1,\"interval\":\"i\",\"alias\":\"a\",\"tool\":\"t\",\"start\":1,\"host\":null}\n{\"type\":\"mcp_interval\",\"t\":9,\"interval\":\"i\",\"alias\":\"a\",\"tool\":\"other\",\"start\":1,\"end\":4,\"outcome\":\"result\",\"host\":null}\n",
            3,
            Some("interval"),
            "disagrees with its mcp_start",
        ),
        ("{HEADER}\n{HEADER}\n", 2, Some("type"), "second trace header"),
    ];
    for (input, line, field, needle) in cases {
        let input = input.replace("{HEADER}", HEADER).replace("{OPEN}", OPEN);
        let err = read(&input).expect_err(&input);
        assert_eq!(err.line, *line, "{input}\n{err}");
        assert_eq!(err.field, *field, "{input}\n{err}");
        assert!(err.problem.to_string().contains(needle), "{input}\n{err}");
        assert!(
            err.to_string().starts_with(&format!("t.jsonl:{line}: ")),
            "{err}"
        );
    }
}

#[test]
fn a_v1_trace_reads_as_v2_with_every_host_null() {
    let v1 = [
        r#"{"type":"stream_open","t":1,"stream":"s1","client":"codex","transport":"http","thread":"th1"}"#,
        // v2 keys in a v1 line are not fields: ignored like any unknown key.
        r#"{"type":"stream_open","t":1,"stream":"s2","client":"codex","transport":"http","thread":null,"host":"h1"}"#,
        r#"{"type":"response_start","t":3,"stream":"s1","response":"r1","request":null,"model":"m"}"#,
        r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed","usage":{"input":1},"stop_reason":"end_turn"}"#,
        r#"{"type":"mcp_start","t":6,"interval":"i1","alias":"a","tool":"t","start":6}"#,
        r#"{"type":"mcp_interval","t":8,"interval":"i1","alias":"a","tool":"t","start":6,"end":7,"outcome":"result","host":"h9"}"#,
    ];
    for line in v1 {
        let ev = strict_v1(line).unwrap();
        if let Some(fast) = fast::event(line, Version::V1).map(Event::into_owned) {
            assert_eq!(fast, ev, "{line}");
        }
        let text = event_line(&ev);
        for absent in ["\"host\":\"", "model", "usage", "stop_reason"] {
            assert!(!text.contains(absent), "{line} -> {text}");
        }
    }
    // The plain v1 lines still take the fast path.
    assert!(fast::event(v1[0], Version::V1).is_some());
    assert!(fast::event(v1[4], Version::V1).is_some());
    // A whole v1 file reads, and written again it is v2 with null hosts.
    let text = format!("{HEADER_V1}\n{}\n{}\n", v1[0], v1[4]);
    let mut reader = TraceReader::new(text.as_bytes(), "v1.jsonl");
    let events: Vec<Event> = reader.by_ref().collect::<Result<_, _>>().unwrap();
    assert_eq!(reader.version, Version::V1);
    assert!(event_line(&events[0]).ends_with(
        r#""thread":"th1","host":null}
"#
    ));
    // In v2 the host is required.
    let err = read(&format!("{HEADER}\n{}\n", v1[0])).unwrap_err();
    assert_eq!((err.line, err.field), (2, Some("host")));
}

#[test]
fn optional_v2_fields_are_omitted_when_unknown_and_kept_when_known() {
    let mut ev = Event {
        t: 5.0,
        kind: EventKind::ResponseEnd {
            stream: "s1".into(),
            response: "r1".into(),
            status: ResponseStatus::Completed,
            usage: None,
            stop_reason: None,
        },
    };
    assert_eq!(
        event_line(&ev),
        "{\"type\":\"response_end\",\"t\":5,\"stream\":\"s1\",\"response\":\"r1\",\"status\":\"completed\"}\n"
    );
    if let EventKind::ResponseEnd {
        usage, stop_reason, ..
    } = &mut ev.kind
    {
        *usage = Some(Usage {
            input: Some(3),
            output: None,
            cache_read: Some(0),
            cache_creation: Some(u64::MAX),
        });
        *stop_reason = Some(StopReason::MaxTokens);
    }
    let line = event_line(&ev);
    assert!(line.contains(r#""usage":{"input":3,"cache_read":0,"cache_creation":18446744073709551615},"stop_reason":"max_tokens"}"#), "{line}");
    assert_eq!(strict(line.trim_end()), Ok(ev.clone()));
    assert_eq!(
        StopReason::from_api("finish_for_some_new_reason"),
        StopReason::Other
    );
    assert_eq!(StopReason::from_api("end_turn"), StopReason::EndTurn);
}

#[test]
fn invalid_utf8_is_an_error_not_a_panic() {
    let mut bytes = format!("{HEADER}\n").into_bytes();
    bytes.extend_from_slice(b"{\"type\":\"\xff\"}\n");
    let err = read_all(&bytes[..], "bin.jsonl").unwrap_err();
    assert_eq!(err.line, 2);
    assert!(err.problem.to_string().contains("UTF-8"));
}

/// An input that hands out at most a few bytes per read, as a pipe may.
struct Trickle<'a>(&'a [u8], usize);

impl std::io::Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.1.min(buf.len()).min(self.0.len());
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}

/// Lines are read in place from a buffer: lines cut across reads, a line longer than the
/// buffer, CRLF endings, blank lines and a last line without its break read as they do
/// whole, and a bad line is still named by its number.
#[test]
fn lines_cut_across_reads_or_longer_than_the_buffer_read_as_whole() {
    let long = "x".repeat(700 * 1024);
    let text = format!(
        "{{\"type\":\"trace\",\"version\":2,\"note\":\"{long}\"}}\r\n\n  \n{OPEN}\r\n{}\n\n{}",
        r#"{"type":"request","t":2,"stream":"s1","request":"q1","previous_response":null,"outputs":[]}"#,
        r#"{"type":"stream_close","t":3,"stream":"s1"}"#,
    );
    let whole = read(&text).unwrap();
    assert_eq!(whole.len(), 3);
    for step in [1, 3, 7, 4096, 300 * 1024] {
        let input = std::io::BufReader::with_capacity(5, Trickle(text.as_bytes(), step));
        assert_eq!(read_all(input, "t.jsonl").unwrap(), whole, "step {step}");
    }
    let bad = format!("{text}\n{{\"type\":\"wat\",\"t\":4}}\n");
    for step in [1, 7, 300 * 1024] {
        let input = std::io::BufReader::with_capacity(5, Trickle(bad.as_bytes(), step));
        let err = read_all(input, "t.jsonl").unwrap_err();
        assert_eq!(err.line, 8, "step {step}");
        assert_eq!(err.field, Some("type"));
    }
}

/// A rotated capture's piece starts with what was open at its cut: its header's `open`
/// lets it check on its own exactly as the whole capture does.
#[test]
fn a_piece_header_carries_what_is_open_and_the_piece_checks_on_its_own() {
    let whole = [
        OPEN,
        r#"{"type":"response_start","t":2,"stream":"s1","response":"r1","request":null}"#,
        r#"{"type":"mcp_start","t":3,"interval":"i1","alias":"probe","tool":"echo","start":3,"host":null}"#,
        r#"{"type":"tool_call","t":4,"stream":"s1","response":"r1","call":"c1","item":null,"name":"echo","namespace":null,"kind":"tool_use"}"#,
        r#"{"type":"response_end","t":5,"stream":"s1","response":"r1","status":"completed"}"#,
        r#"{"type":"mcp_interval","t":6,"interval":"i1","alias":"probe","tool":"echo","start":3,"end":6,"outcome":"result","host":null}"#,
        r#"{"type":"stream_close","t":7,"stream":"s1"}"#,
    ];
    for cut in 0..=whole.len() {
        let mut open = OpenState::new();
        let before = format!("{HEADER}\n{}\n", whole[..cut].join("\n"));
        for ev in read(&before).unwrap() {
            open.apply(&ev);
        }
        let header = format!(
            r#"{{"type":"trace","version":2,"capture":"c","piece":1,"open":{}}}"#,
            open.json()
        );
        let piece = format!("{header}\n{}\n", whole[cut..].join("\n"));
        let events = read(&piece).unwrap_or_else(|e| panic!("cut {cut}: {e}"));
        assert_eq!(events.len(), whole.len() - cut);
        if cut > 0 && cut < whole.len() {
            // Without it, what follows the cut does not check.
            let bare = format!("{HEADER}\n{}\n", whole[cut..].join("\n"));
            assert!(read(&bare).is_err(), "cut {cut}");
        }
    }
}

#[test]
fn a_header_open_that_is_not_the_written_shape_is_an_error() {
    for open in [
        r#"[]"#,
        r#"{"streams":[]}"#,
        r#"{"streams":[["s1",false]],"running":[]}"#,
        r#"{"streams":[["s1",false,[]],["s1",false,[]]],"running":[]}"#,
        r#"{"streams":[],"running":[["i1","a","t",-1]]}"#,
    ] {
        let text = format!("{{\"type\":\"trace\",\"version\":2,\"open\":{open}}}\n{OPEN}\n");
        let err = read(&text).unwrap_err();
        assert_eq!((err.line, err.field), (1, Some("open")), "{open}");
    }
}
