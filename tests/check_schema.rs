//! The JSON Schemas in docs/ accept the lines windowtap writes and reject the ones its readers
//! reject for a field's type or word.

use serde_json::{json, Value};

fn schema(name: &str) -> jsonschema::Validator {
    let path = format!("{}/docs/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("read schema");
    let schema: Value = serde_json::from_str(&text).expect("schema is JSON");
    jsonschema::draft202012::new(&schema).expect("schema compiles")
}

fn valid(v: &jsonschema::Validator, line: &str) -> bool {
    v.is_valid(&serde_json::from_str::<Value>(line).expect("test line is JSON"))
}

#[test]
fn trace_lines_of_every_type_are_valid_and_broken_ones_are_not() {
    let v = schema("trace-v2.schema.json");
    let good = [
        r#"{"type":"trace","version":2,"close_wait":50}"#,
        r#"{"type":"stream_open","t":0,"stream":"s1","client":"codex","transport":"websocket","thread":"th1","host":"h1"}"#,
        r#"{"type":"stream_open","t":0,"stream":"s2","client":"claude","transport":"http","thread":null,"host":null}"#,
        r#"{"type":"request","t":6000,"stream":"s1","request":"q1","previous_response":null,"outputs":[]}"#,
        r#"{"type":"response_start","t":6100,"stream":"s1","response":"r1","request":"q1"}"#,
        r#"{"type":"tool_call","t":6905.5,"stream":"s1","response":"r1","call":"c1","item":"fc1","name":"echo","namespace":"mcp__probe","kind":"function"}"#,
        r#"{"type":"response_start","t":6100,"stream":"s1","response":"r1","request":"q1","model":"claude-opus-4-5"}"#,
        r#"{"type":"response_end","t":6957,"stream":"s1","response":"r1","status":"completed"}"#,
        r#"{"type":"response_end","t":6957,"stream":"s1","response":"r1","status":"completed","usage":{"input":3,"output":0,"cache_read":100,"cache_creation":null},"stop_reason":"tool_use"}"#,
        r#"{"type":"response_end","t":6957,"stream":"s1","response":"r1","status":"completed","usage":{},"stop_reason":"other"}"#,
        r#"{"type":"observation_lost","t":7000,"stream":"s1","reason":"decode"}"#,
        r#"{"type":"stream_close","t":7001,"stream":"s1"}"#,
        r#"{"type":"mcp_start","t":7188,"interval":"i1","alias":"probe","tool":"echo","start":7187,"host":"h1"}"#,
        r#"{"type":"mcp_interval","t":7265,"interval":"i1","alias":"probe","tool":"echo","start":7187,"end":7264,"outcome":"result","tool_use_id":null,"item_id":"fc1","call_id":"c1","thread":"th1","host":"h1"}"#,
        r#"{"type":"mcp_interval","t":7265,"interval":"i2","alias":"probe","tool":"echo","start":7187,"end":7264,"outcome":"lost","host":null}"#,
        r#"{"type":"stream_close","t":7001,"stream":"s1","extra":"optional fields are allowed"}"#,
        r#"{"type":"mcp_interval","t":7265,"interval":"i3","alias":"probe","tool":"ask","start":7187,"end":7264,"outcome":"cancelled","host":null,"rounds":2,"input_wait":40,"outcome_detail":"input_unanswered"}"#,
        r#"{"type":"mcp_start","t":7188,"interval":"i4","alias":"remote","tool":"echo","start":7187,"host":"h1","transport":"http"}"#,
        r#"{"type":"mcp_interval","t":7265,"interval":"i4","alias":"remote","tool":"echo","start":7187,"end":7264,"outcome":"result","host":"h1","transport":"http"}"#,
    ];
    for line in good {
        assert!(valid(&v, line), "should be valid: {line}");
    }
    let bad = [
        r#"{"type":"trace","version":3}"#,
        r#"{"type":"nope","t":1}"#,
        r#"{"type":"stream_open","t":0,"stream":"s1","client":"codex","transport":"http","thread":null}"#,
        r#"{"type":"stream_open","t":0,"stream":"s1","client":"codex","transport":"http","thread":null,"host":7}"#,
        r#"{"type":"mcp_start","t":7188,"interval":"i1","alias":"probe","tool":"echo","start":7187}"#,
        r#"{"type":"mcp_interval","t":7265,"interval":"i2","alias":"probe","tool":"echo","start":7187,"end":7264,"outcome":"lost"}"#,
        r#"{"type":"response_start","t":6100,"stream":"s1","response":"r1","request":"q1","model":5}"#,
        r#"{"type":"mcp_interval","t":7265,"interval":"i3","alias":"probe","tool":"ask","start":7187,"end":7264,"outcome":"result","host":null,"rounds":0}"#,
        r#"{"type":"mcp_interval","t":7265,"interval":"i3","alias":"probe","tool":"ask","start":7187,"end":7264,"outcome":"cancelled","host":null,"outcome_detail":"bored"}"#,
        r#"{"type":"response_end","t":1,"stream":"s1","response":"r","status":"completed","usage":{"input":-1}}"#,
        r#"{"type":"response_end","t":1,"stream":"s1","response":"r","status":"completed","usage":{"input":1.5}}"#,
        r#"{"type":"response_end","t":1,"stream":"s1","response":"r","status":"completed","usage":[]}"#,
        r#"{"type":"response_end","t":1,"stream":"s1","response":"r","status":"completed","stop_reason":"because"}"#,
        r#"{"type":"stream_close","stream":"s1"}"#,
        r#"{"type":"stream_close","t":-1,"stream":"s1"}"#,
        r#"{"type":"stream_close","t":"1","stream":"s1"}"#,
        r#"{"type":"stream_open","t":0,"stream":"s1","client":"vim","transport":"http","thread":null,"host":null}"#,
        r#"{"type":"stream_open","t":0,"stream":"s1","client":"codex","transport":"http","host":null}"#,
        r#"{"type":"request","t":1,"stream":"s1","request":"q","previous_response":null,"outputs":[1]}"#,
        r#"{"type":"tool_call","t":1,"stream":"s1","response":"r","call":"c","item":null,"name":"n","namespace":null,"kind":"builtin"}"#,
        r#"{"type":"response_end","t":1,"stream":"s1","response":"r","status":"done"}"#,
        r#"{"type":"mcp_interval","t":9,"interval":"i","alias":"a","tool":"t","start":1,"end":4,"outcome":"done","host":null}"#,
        r#"{"type":"mcp_interval","t":9,"interval":"i","alias":"a","tool":"t","start":1,"end":4,"outcome":"result","item_id":7,"host":null}"#,
        r#"{"type":"mcp_start","t":7188,"interval":"i4","alias":"remote","tool":"echo","start":7187,"host":"h1","transport":"stdio"}"#,
        r#"{"type":"mcp_interval","t":9,"interval":"i","alias":"a","tool":"t","start":1,"end":4,"outcome":"result","host":null,"transport":null}"#,
    ];
    for line in bad {
        assert!(!valid(&v, line), "should be invalid: {line}");
    }
}

fn record() -> Value {
    json!({"type":"attribution","version":1,"interval":"i1","alias":"probe","tool":"echo","start":7187,"end":7264,
        "decision":"attributed","reason":null,"evidence":["containment","item_id","thread"],"candidates":1,
        "window":{"thread":"th1","stream":"s1","response":"r1","request":"q2","open":6905,"close":7278},
        "decided_at":7280})
}

#[test]
fn records_follow_the_decision_words() {
    let v = schema("records-v1.schema.json");
    assert!(v.is_valid(&record()), "the design's example record");
    assert!(v.is_valid(&json!({"type":"run","epoch":"2026-11-29T21:00:00Z"})));
    // The run header a live run writes (docs/records-v1.md, "Layout").
    assert!(v.is_valid(&json!({"type":"run","version":1,"epoch_unix_ms":1796689405022u64})));
    assert!(!v.is_valid(&json!({"type":"run","version":1,"epoch_unix_ms":"yesterday"})));
    let mut abstained = record();
    abstained["decision"] = json!("abstained");
    abstained["reason"] = json!("ambiguous");
    abstained["evidence"] = json!([]);
    abstained["candidates"] = json!(2);
    abstained["window"] = Value::Null;
    assert!(v.is_valid(&abstained));

    type Edit = fn(&mut Value);
    let bad: &[(&str, Edit)] = &[
        ("missing field", |r| {
            r.as_object_mut().unwrap().remove("decided_at");
        }),
        ("wrong decision word", |r| r["decision"] = json!("maybe")),
        ("attributed without window", |r| r["window"] = Value::Null),
        ("attributed with a reason", |r| {
            r["reason"] = json!("ambiguous")
        }),
        ("evidence not a fixed word", |r| {
            r["evidence"] = json!(["containment", "vibes"])
        }),
        ("evidence without containment first", |r| {
            r["evidence"] = json!(["item_id"])
        }),
        ("candidates negative", |r| r["candidates"] = json!(-1)),
        ("candidates fractional", |r| r["candidates"] = json!(1.5)),
        ("window without close", |r| {
            r["window"].as_object_mut().unwrap().remove("close");
        }),
        ("attributed window never closed", |r| {
            r["window"]["close"] = Value::Null
        }),
        ("abstained with reason null", |r| {
            r["decision"] = json!("abstained");
            r["window"] = Value::Null;
        }),
        ("no_window with a candidate", |r| {
            r["decision"] = json!("abstained");
            r["reason"] = json!("no_window");
            r["window"] = Value::Null;
        }),
        ("version 2", |r| r["version"] = json!(2)),
    ];
    for (what, edit) in bad {
        let mut r = record();
        edit(&mut r);
        assert!(!v.is_valid(&r), "should be invalid ({what}): {r}");
    }
}

/// Every line `windowtap replay` writes for the demo scenarios validates.
#[test]
fn records_written_by_the_correlator_validate() {
    use correlator::records::{Evidence, Reason, Record, WindowRef};
    let v = schema("records-v1.schema.json");
    let attributed = Record {
        interval: "i\"1".into(),
        alias: "a".into(),
        tool: "t".into(),
        start: 1.5,
        end: 2.0,
        reason: None,
        evidence: vec![Evidence::Containment, Evidence::Route],
        candidates: 1,
        window: Some(WindowRef {
            thread: None,
            stream: "s".into(),
            response: "r".into(),
            request: Some("q".into()),
            open: 1.0,
            close: Some(3.0),
        }),
        decided_at: 4.0,
    };
    for reason in Reason::ALL {
        let candidates = match reason {
            Reason::NoWindow => 0,
            Reason::Ambiguous => 3,
            _ => 1,
        };
        let r = Record {
            reason: Some(reason),
            evidence: vec![],
            candidates,
            window: None,
            ..attributed.clone()
        };
        assert!(valid(&v, r.to_line().trim_end()), "{reason}");
    }
    assert!(valid(&v, attributed.to_line().trim_end()));
    // With the optional `trace` of a replay of several traces.
    let mut line = String::new();
    attributed.write_json_from(Some("claude_tool_use_loop.jsonl"), &mut line);
    assert!(valid(&v, &line), "{line}");
    let mut bad: Value = serde_json::from_str(&line).unwrap();
    bad["trace"] = json!("a\u{1}b");
    assert!(!v.is_valid(&bad), "a control character in a trace name");
    bad["trace"] = json!("");
    assert!(!v.is_valid(&bad), "an empty trace name");
}
