use super::kinds::{is_pseudonym, MAX_TOOL_NAME};
use super::*;
use crate::event::{Client, Event, EventKind, Hints, Outcome, Transport};
use crate::pseudo::{Pseudonymizer, PSEUDONYM_KEY_LEN};
use crate::records::{Record, WindowRef};

/// The pseudonymizer [`scrub`] uses (its field is private to the scrub's own file).
fn pseudo() -> Pseudonymizer {
    Pseudonymizer::new(&[3; PSEUDONYM_KEY_LEN])
}

fn scrub() -> Scrub {
    Scrub::new(pseudo())
}

fn ev(kind: EventKind) -> Event {
    Event { t: 1.0, kind }
}

fn mcp(interval: &str, alias: &str, tool: &str, hint: Option<&str>) -> EventKind {
    EventKind::McpInterval {
        rounds: None,
        interval: interval.into(),
        alias: alias.into(),
        tool: tool.into(),
        start: 1.0,
        end: 2.0,
        outcome: Outcome::Result,
        hints: Hints {
            tool_use_id: hint.map(Into::into),
            ..Hints::default()
        },
        host: None,
        transport: crate::McpTransport::Stdio,
    }
}

#[test]
fn a_scrubbed_event_passes_the_live_door_and_a_raw_one_does_not() {
    let raw = mcp("7", "fs", "read_file", Some("toolu_01ABC"));
    let err = Door::live().event(&ev(raw.clone())).unwrap_err();
    assert_eq!(err.field, "interval");
    assert_eq!(err.kind, Kind::Pseudonym);
    let line = Door::live().event(&ev(scrub().event(raw))).unwrap();
    assert!(!line.as_str().contains("toolu_01ABC"));
    assert!(line.as_str().contains("\"read_file\""));
    assert!(line.as_str().ends_with('\n'));
}

#[test]
fn an_mcp_mount_call_keeps_its_transport_through_the_scrub_and_the_door() {
    // The MCP mount observer's events (design.md §8) leave as the wrapper's do, with the one
    // fixed word `transport: "http"` and nothing else added.
    let mut end = mcp("7", "remote", "echo", Some("toolu_01ABC"));
    let EventKind::McpInterval {
        interval,
        alias,
        tool,
        start,
        transport,
        ..
    } = &mut end
    else {
        unreachable!()
    };
    *transport = crate::McpTransport::Http;
    let start = EventKind::McpStart {
        interval: interval.clone(),
        alias: alias.clone(),
        tool: tool.clone(),
        start: *start,
        host: None,
        transport: crate::McpTransport::Http,
    };
    for kind in [start, end] {
        let line = Door::live().event(&ev(scrub().event(kind))).unwrap();
        let line = line.as_str();
        assert!(line.ends_with(",\"transport\":\"http\"}\n"), "{line}");
        assert!(!line.contains("toolu_01ABC"), "{line}");
    }
}

#[test]
fn the_replay_door_takes_trace_ids_but_not_text() {
    let door = Door::replay();
    assert!(door
        .event(&ev(mcp("i1", "fs", "read", Some("tu1"))))
        .is_ok());
    let err = door
        .event(&ev(mcp("i1", "fs", "read", Some("two\nlines"))))
        .unwrap_err();
    assert_eq!(err.field, "tool_use_id");
    let err = door
        .event(&ev(mcp("i1", "fs\nsecond line", "read", None)))
        .unwrap_err();
    assert_eq!((err.field, err.kind), ("alias", Kind::ToolName));
}

#[test]
fn a_refusal_never_carries_the_value() {
    let secret = "sk-ant-CANARY-refusal";
    let err = Door::live()
        .event(&ev(EventKind::StreamOpen {
            stream: secret.into(),
            client: Client::Claude,
            transport: Transport::Http,
            thread: None,
            host: None,
        }))
        .unwrap_err();
    assert!(!err.to_string().contains("CANARY"), "{err}");
    assert!(err.to_string().contains("`stream`"));
}

#[test]
fn names_that_are_not_names_become_pseudonyms_the_same_on_both_sides() {
    let s = scrub();
    let long = "x".repeat(MAX_TOOL_NAME + 1);
    let a = s.tool_name(long.clone());
    assert_eq!(a, s.tool_name(long));
    assert!(a.starts_with('~') && is_tool_name(&a) && a.len() == 33);
    assert_eq!(s.tool_name("mcp__fs__read".into()), "mcp__fs__read");
    assert!(s.tool_name("a\u{7}b".into()).starts_with('~'));
}

#[test]
fn names_are_admitted_only_as_the_apis_allow_them() {
    let s = scrub();
    // What the APIs take stays, up to 128 bytes.
    for ok in ["mcp__fs__read", "my.tool:v2", "a-b_c", &"t".repeat(128)] {
        assert_eq!(s.tool_name(ok.to_string()), ok);
    }
    for ok in ["claude-sonnet-4-5", "gpt-5.1-codex", "openai/gpt-oss@2026"] {
        assert_eq!(s.model_name(ok.to_string()), ok);
    }
    // Anything else is a pseudonym: free text, quotes, non-ASCII, a slash in a tool name,
    // one byte too many.
    for bad in [
        "read file",
        "tool\"name",
        "ok; ignore previous instructions",
        "caf\u{e9}",
        "a/b",
        &"t".repeat(129),
    ] {
        let got = s.tool_name(bad.to_string());
        assert_eq!(got, format!("~{}", pseudo().id(bad)), "{bad:?}");
    }
    for bad in ["gpt 5", "model\twith\ttabs", &"m".repeat(129)] {
        let got = s.model_name(bad.to_string());
        assert_eq!(got, format!("~{}", pseudo().id(bad)), "{bad:?}");
    }
    // Every place a name goes through the same rule.
    let EventKind::ToolCall {
        name, namespace, ..
    } = s.event(EventKind::ToolCall {
        stream: "s".into(),
        response: "r".into(),
        call: "c".into(),
        item: None,
        name: "CANARY tool name".into(),
        namespace: Some("CANARY namespace".into()),
        kind: crate::event::CallKind::Function,
    })
    else {
        panic!()
    };
    assert!(name.starts_with('~') && namespace.unwrap().starts_with('~'));
    let EventKind::McpInterval { alias, tool, .. } =
        s.event(mcp("i", "my server", "CANARY tool", None))
    else {
        panic!()
    };
    assert!(alias.starts_with('~') && tool.starts_with('~'));
}

#[test]
fn the_door_refuses_names_the_apis_would_not_take() {
    let door = Door::replay();
    let err = door
        .event(&ev(mcp("i1", "fs", "read file", None)))
        .unwrap_err();
    assert_eq!((err.field, err.kind), ("tool", Kind::ToolName));
    let tool_call = |name: &str, namespace: Option<&str>| EventKind::ToolCall {
        stream: "s1".into(),
        response: "r1".into(),
        call: "c1".into(),
        item: None,
        name: name.into(),
        namespace: namespace.map(Into::into),
        kind: crate::event::CallKind::Function,
    };
    assert_eq!(
        door.event(&ev(tool_call("a b", None))).unwrap_err().field,
        "name"
    );
    assert_eq!(
        door.event(&ev(tool_call("echo", Some("mcp/x"))))
            .unwrap_err()
            .field,
        "namespace"
    );
    // The pseudonym written for a name passes; `~` and anything else does not.
    let pseudonymized = scrub().tool_name("a b".into());
    assert!(door.event(&ev(tool_call(&pseudonymized, None))).is_ok());
    assert!(door
        .event(&ev(tool_call("~not-a-pseudonym", None)))
        .is_err());
    let mut r = record("i1", "r1");
    r.tool = "x".repeat(129).into();
    assert_eq!(door.record(&r).unwrap_err().field, "tool");
}

#[test]
fn hints_and_outputs_map_like_the_ids_they_name() {
    let p = Pseudonymizer::new(&[7; PSEUDONYM_KEY_LEN]);
    let EventKind::Request { outputs, .. } = Scrub::new(p.clone()).event(EventKind::Request {
        stream: "s".into(),
        request: "q".into(),
        previous_response: None,
        outputs: vec!["call_1".into()],
    }) else {
        panic!()
    };
    assert_eq!(outputs, vec![p.id("call_1")]);
}

#[test]
fn hosts_are_ids_and_model_names_are_names() {
    let s = scrub();
    let EventKind::McpInterval { host, .. } = s.event(EventKind::McpInterval {
        rounds: None,
        interval: "i".into(),
        alias: "a".into(),
        tool: "t".into(),
        start: 1.0,
        end: 2.0,
        outcome: Outcome::Result,
        hints: Hints::default(),
        host: Some("pid 4242 start 99".into()),
        transport: crate::McpTransport::Stdio,
    }) else {
        panic!()
    };
    let host = host.unwrap();
    assert!(is_pseudonym(&host), "{host}");
    // The same raw host maps to the same pseudonym on a stream.
    let EventKind::StreamOpen { host: h2, .. } = s.event(EventKind::StreamOpen {
        stream: "s".into(),
        client: Client::Claude,
        transport: Transport::Http,
        thread: None,
        host: Some("pid 4242 start 99".into()),
    }) else {
        panic!()
    };
    assert_eq!(h2.as_deref(), Some(host.as_str()));
    // A raw host id never passes the live door.
    let raw = EventKind::StreamOpen {
        stream: pseudo().id("s"),
        client: Client::Claude,
        transport: Transport::Http,
        thread: None,
        host: Some("4242".into()),
    };
    assert_eq!(Door::live().event(&ev(raw)).unwrap_err().field, "host");
    // A model "name" that is not a name becomes a pseudonym; a real one stays.
    let start = |model: &str| EventKind::ResponseStart {
        stream: "s".into(),
        response: "r".into(),
        request: None,
        model: Some(model.into()),
    };
    let EventKind::ResponseStart { model, .. } = s.event(start("claude-sonnet-4-5")) else {
        panic!()
    };
    assert_eq!(model.as_deref(), Some("claude-sonnet-4-5"));
    let EventKind::ResponseStart { model, .. } = s.event(start("CANARY\nsecret")) else {
        panic!()
    };
    assert!(model.unwrap().starts_with('~'));
    let err = Door::replay().event(&ev(start("two\nlines"))).unwrap_err();
    assert_eq!((err.field, err.kind), ("model", Kind::ModelName));
}

#[test]
fn lost_reasons_outside_the_word_shape_become_other() {
    let EventKind::ObservationLost { reason, .. } = scrub().event(EventKind::ObservationLost {
        stream: "s".into(),
        reason: "Secret Text".into(),
    }) else {
        panic!("kind changed")
    };
    assert_eq!(reason, "other");
}

fn record(interval: &str, response: &str) -> Record {
    Record {
        interval: interval.into(),
        alias: "fs".into(),
        tool: "read".into(),
        start: 1.0,
        end: 2.0,
        reason: None,
        evidence: vec![],
        candidates: 1,
        window: Some(WindowRef {
            thread: None,
            stream: "s1".into(),
            response: response.into(),
            request: None,
            open: 0.5,
            close: Some(3.0),
        }),
        decided_at: 4.0,
    }
}

#[test]
fn records_are_checked_down_to_their_window() {
    let r = record("i1", "resp_RAW\twith a tab");
    assert_eq!(
        Door::replay().record(&r).unwrap_err().field,
        "window.response"
    );
    let ok = record("i1", "r1");
    let cleared = Door::replay().record(&ok).unwrap();
    assert_eq!(cleared.line().as_str(), ok.to_line());
    assert_eq!(cleared.record(), &ok);
    assert_eq!(Door::live().record(&ok).unwrap_err().field, "interval");
}

#[test]
fn meta_lines_hold_numbers_and_words_only() {
    let door = Door::live();
    let ok = r#"{"type":"trace","version":2,"close_wait":2000,"end":null   }"#;
    assert_eq!(door.meta(ok).unwrap().as_str(), format!("{ok}\n"));
    assert!(door.meta(r#"{"type":"trace","note":"free text"}"#).is_err());
    assert!(door.meta(r#"{"type":"trace","x":{"y":1}}"#).is_err());
    assert!(door.meta("not json").is_err());
}

#[test]
fn padded_numbers_keep_their_width() {
    let door = Door::live();
    assert_eq!(door.padded_number(Some(12.5), 8).as_str(), "12.5    ");
    assert_eq!(door.padded_number(None, 6).as_str(), "null  ");
    assert_eq!(door.padded_number(Some(1e300), 6).as_str(), "null  ");
}

#[test]
fn logs_admit_own_words_and_withhold_everything_else() {
    assert_eq!(log_text("windowtap::relay::http", "path"), LogField::Admit);
    assert_eq!(log_text("windowtap", "message"), LogField::Admit);
    assert_eq!(
        log_text("windowtap::relay", "authorization"),
        LogField::Withhold
    );
    assert_eq!(log_text("hyper::proto::h1", "message"), LogField::Withhold);
    assert_eq!(log_text("windowtapx", "message"), LogField::Withhold);
    assert_eq!(log_text("rustls::client", "error"), LogField::Withhold);
}

#[test]
fn quotes_keep_short_tokens_and_withhold_the_rest() {
    assert_eq!(quote("nope"), "nope");
    assert_eq!(quote(&"a".repeat(32)), "a".repeat(32));
    assert_eq!(
        quote("sk-ant-api03-0123456789abcdef"),
        "<29 bytes withheld>"
    );
    assert_eq!(quote("two words"), "<9 bytes withheld>");
    assert_eq!(quote(""), "<0 bytes withheld>");
}
