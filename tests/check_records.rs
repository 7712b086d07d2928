//! The strict records v1 reader, line by line: every malformed record is named by line and
//! field, with what was wrong.

use correlator::records::{read_all, RecordError};

const GOOD: &str = r#"{"type":"attribution","version":1,"interval":"i1","alias":"probe","tool":"echo","start":7187,"end":7264,"decision":"attributed","reason":null,"evidence":["containment","item_id","thread"],"candidates":1,"window":{"thread":"th1","stream":"s1","response":"r1","request":"q2","open":6905,"close":7278},"decided_at":7280}"#;
const ABSTAINED: &str = r#"{"type":"attribution","version":1,"interval":"i2","alias":"probe","tool":"echo","start":7187,"end":7264,"decision":"abstained","reason":"ambiguous","evidence":[],"candidates":2,"window":null,"decided_at":7280}"#;

/// The good record with `from` replaced by `to` (which must occur exactly once).
fn edit(base: &str, from: &str, to: &str) -> String {
    assert_eq!(base.matches(from).count(), 1, "`{from}` must occur once");
    base.replace(from, to)
}

fn read(text: &str) -> Result<usize, RecordError> {
    read_all(text.as_bytes(), "r.jsonl").map(|v| v.len())
}

#[test]
fn good_records_read_and_blank_lines_are_skipped() {
    let text = format!("{{\"type\":\"run\",\"epoch_unix_ms\":1}}\n{GOOD}\n\n{ABSTAINED}\n");
    assert_eq!(read(&text).unwrap(), 2);
}

#[test]
fn malformed_records_are_rejected_precisely() {
    let no_window = edit(
        &edit(
            &edit(ABSTAINED, "\"ambiguous\"", "\"no_window\""),
            "\"candidates\":2",
            "\"candidates\":0",
        ),
        "\"interval\":\"i2\"",
        "\"interval\":\"i3\"",
    );
    let cases: Vec<(String, Option<&str>, &str)> = vec![
        ("not json".into(), None, "bad JSON"),
        ("[1]".into(), None, "expected a JSON object"),
        (edit(GOOD, r#""type":"attribution","#, ""), Some("type"), "missing"),
        (edit(GOOD, "\"attribution\"", "\"attr\""), Some("type"), "unknown record type `attr`"),
        (r#"{"type":"trace","version":1}"#.into(), Some("type"), "is this a trace file?"),
        (edit(GOOD, "\"version\":1", "\"version\":2"), Some("version"), "unsupported records version 2"),
        (edit(GOOD, "\"alias\":\"probe\",", ""), Some("alias"), "missing"),
        (edit(GOOD, "\"tool\":\"echo\"", "\"tool\":7"), Some("tool"), "expected a string, got a number"),
        (edit(GOOD, "\"start\":7187", "\"start\":-1"), Some("start"), ">= 0"),
        (edit(GOOD, "\"end\":7264", "\"end\":7000"), Some("end"), "before start"),
        (edit(GOOD, "\"attributed\"", "\"maybe\""), Some("decision"), "`maybe` is not one of attributed, abstained"),
        (edit(GOOD, "\"reason\":null", "\"reason\":\"ambiguous\""), Some("reason"), "must be null when the decision is attributed"),
        (edit(GOOD, "\"reason\":null", "\"reason\":\"unsure\""), Some("reason"), "`unsure` is not one of"),
        (edit(GOOD, "\"window\":{\"thread\":\"th1\",\"stream\":\"s1\",\"response\":\"r1\",\"request\":\"q2\",\"open\":6905,\"close\":7278}", "\"window\":null"), Some("window"), "attributed record must name its window"),
        (edit(ABSTAINED, "\"reason\":\"ambiguous\"", "\"reason\":null"), Some("reason"), "abstained record names its reason"),
        (edit(ABSTAINED, "\"window\":null", "\"window\":{\"thread\":null,\"stream\":\"s\",\"response\":\"r\",\"request\":\"q\",\"open\":1,\"close\":8000}"), Some("window"), "must be null when the decision is abstained"),
        (edit(GOOD, "\"item_id\"", "\"vibes\""), Some("evidence"), "`vibes` is not one of containment"),
        (edit(GOOD, "\"item_id\"", "\"thread\""), Some("evidence"), "listed twice"),
        (edit(GOOD, "[\"containment\",\"item_id\",\"thread\"]", "[\"item_id\"]"), Some("evidence"), "starts with `containment`"),
        (edit(GOOD, "[\"containment\",\"item_id\",\"thread\"]", "\"containment\""), Some("evidence"), "expected an array"),
        (edit(ABSTAINED, "\"candidates\":2", "\"candidates\":-1"), Some("candidates"), "whole number >= 0"),
        (edit(ABSTAINED, "\"candidates\":2", "\"candidates\":1.5"), Some("candidates"), "whole number >= 0"),
        (edit(ABSTAINED, "\"candidates\":2", "\"candidates\":1"), Some("candidates"), "`ambiguous` means 2 or more candidates"),
        (edit(no_window.as_str(), "\"candidates\":0", "\"candidates\":1"), Some("candidates"), "`no_window` means 0 candidates"),
        (edit(GOOD, "\"candidates\":1", "\"candidates\":2"), Some("candidates"), "exactly 1 candidate"),
        (edit(GOOD, "\"open\":6905", "\"open\":7200"), Some("window.open"), "does not contain it"),
        (edit(GOOD, "\"close\":7278", "\"close\":7290"), Some("window.close"), "after decided_at"),
        (edit(GOOD, "\"close\":7278", "\"close\":7200"), Some("window.close"), "does not contain it"),
        (edit(GOOD, "\"close\":7278", "\"close\":null"), Some("window.close"), "has closed"),
        (edit(GOOD, "\"stream\":\"s1\",", ""), Some("window.stream"), "missing"),
        (edit(GOOD, "\"request\":\"q2\"", "\"request\":null"), Some("window.request"), "names the request"),
        (edit(GOOD, "\"decided_at\":7280", "\"decided_at\":7000"), Some("decided_at"), "before the interval's end"),
        (format!("{GOOD}\n{{\"type\":\"run\"}}"), Some("type"), "only be the first line"),
    ];
    for (input, field, needle) in &cases {
        // The bad line is always the last one; put a good record before it.
        let text = if input.contains('\n') {
            input.clone()
        } else {
            format!("{ABSTAINED}\n{input}\n")
        };
        let line = text.trim_end().lines().count();
        let err = read(&text).expect_err(input);
        assert_eq!(err.line, line, "{input}\n{err}");
        assert_eq!(err.field, *field, "{input}\n{err}");
        assert!(err.problem.to_string().contains(needle), "{input}\n{err}");
        let shown = err.to_string();
        match field {
            Some(f) => assert!(
                shown.starts_with(&format!("r.jsonl:{line}: field `{f}`: ")),
                "{shown}"
            ),
            None => assert!(shown.starts_with(&format!("r.jsonl:{line}: ")), "{shown}"),
        }
    }
    // The no_window record itself is good.
    assert_eq!(read(&no_window).unwrap(), 1);
}

#[test]
fn invalid_utf8_is_an_error_not_a_panic() {
    let mut bytes = format!("{GOOD}\n").into_bytes();
    bytes.extend_from_slice(b"{\"type\":\"\xff\"}\n");
    let err = read_all(&bytes[..], "bin.jsonl").unwrap_err();
    assert_eq!(err.line, 2);
    assert!(err.problem.to_string().contains("UTF-8"), "{err}");
}
