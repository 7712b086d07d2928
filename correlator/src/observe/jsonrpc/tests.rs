use super::observer::{state_key, MAX_WAITING};
use super::scanner::{MAX_DEPTH, SCALAR_CAP};
use super::state_digest::StateDigest;
use super::*;
use crate::event::{Hints, Outcome};
use serde_json::Value;
use Direction::{ClientToServer as C2S, ServerToClient as S2C};

/// A compact view of an observation: (start|end, tool, outcome, start, end).
#[derive(Debug, PartialEq)]
enum Seen {
    Start(&'static str, u64),
    End(&'static str, Outcome, u64, u64),
}

fn run(lines: &[(Direction, &str)]) -> (Vec<Seen>, Vec<Observation>) {
    let mut obs = Observer::new();
    let mut out = Vec::new();
    for (t, (dir, line)) in lines.iter().enumerate() {
        obs.line(*dir, line.as_bytes(), 10 * (t as u64 + 1), &mut out);
    }
    let seen = out
        .iter()
        .map(|o| match o {
            Observation::Start(c) => Seen::Start(leak(&c.tool), c.start),
            Observation::End { call, end, outcome } => {
                Seen::End(leak(&call.tool), *outcome, call.start, *end)
            }
        })
        .collect();
    (seen, out)
}

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_string().into_boxed_str())
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"claude-code"}}}"#;
const INIT_OK: &str = r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"s","version":"0"}}}"#;
const DISCOVER: &str = r#"{"jsonrpc":"2.0","id":"server-discover-probe-1","method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
const DISCOVER_OK: &str = r#"{"jsonrpc":"2.0","id":"server-discover-probe-1","result":{"resultType":"complete","supportedVersions":["2026-07-28"]}}"#;

#[test]
fn a_scripted_table_of_sessions() {
    use Outcome::*;
    #[allow(clippy::type_complexity)]
    let table: Vec<(&str, Vec<(Direction, &str)>, Vec<Seen>)> = vec![
        (
            "initialize era, integer id, Claude Code's field order",
            vec![
                (C2S, INIT),
                (S2C, INIT_OK),
                (
                    C2S,
                    r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
                ),
                (C2S, r#"{"method":"tools/list","jsonrpc":"2.0","id":1}"#),
                (S2C, r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}"#),
                (
                    C2S,
                    r#"{"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"},"_meta":{"claudecode/toolUseId":"toolu_1","progressToken":2}},"jsonrpc":"2.0","id":2}"#,
                ),
                (
                    S2C,
                    r#"{"result":{"content":[{"type":"text","text":"hi"}]},"jsonrpc":"2.0","id":2}"#,
                ),
            ],
            vec![Seen::Start("echo", 60), Seen::End("echo", Result, 60, 70)],
        ),
        (
            "discover era, string ids",
            vec![
                (C2S, DISCOVER),
                (S2C, DISCOVER_OK),
                (
                    C2S,
                    r#"{"jsonrpc":"2.0","id":"c1","method":"tools/call","params":{"name":"add","arguments":{"a":1},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
                ),
                (
                    S2C,
                    r#"{"jsonrpc":"2.0","id":"c1","result":{"resultType":"complete","content":[]}}"#,
                ),
            ],
            vec![Seen::Start("add", 30), Seen::End("add", Result, 30, 40)],
        ),
        (
            "responses out of order",
            vec![
                (
                    C2S,
                    r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow"}}"#,
                ),
                (
                    C2S,
                    r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fast"}}"#,
                ),
                (S2C, r#"{"jsonrpc":"2.0","id":2,"result":{}}"#),
                (S2C, r#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
            ],
            vec![
                Seen::Start("slow", 10),
                Seen::Start("fast", 20),
                Seen::End("fast", Result, 20, 30),
                Seen::End("slow", Result, 10, 40),
            ],
        ),
        (
            "the string id \"1\" is not the integer id 1",
            vec![
                (
                    C2S,
                    r#"{"jsonrpc":"2.0","id":"1","method":"tools/call","params":{"name":"s"}}"#,
                ),
                (
                    C2S,
                    r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"i"}}"#,
                ),
                (S2C, r#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
                (S2C, r#"{"jsonrpc":"2.0","id":"1","result":{}}"#),
            ],
            vec![
                Seen::Start("s", 10),
                Seen::Start("i", 20),
                Seen::End("i", Result, 20, 30),
                Seen::End("s", Result, 10, 40),
            ],
        ),
        (
            "JSON-RPC error and isError both end as error",
            vec![
                (
                    C2S,
                    r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"nope"}}"#,
                ),
                (
                    S2C,
                    r#"{"jsonrpc":"2.0","id":5,"error":{"code":-32602,"message":"Unknown tool"}}"#,
                ),
                (
                    C2S,
                    r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"boom"}}"#,
                ),
                (
                    S2C,
                    r#"{"jsonrpc":"2.0","id":6,"result":{"content":[],"isError":true}}"#,
                ),
                (
                    C2S,
                    r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"fine"}}"#,
                ),
                (
                    S2C,
                    r#"{"jsonrpc":"2.0","id":7,"result":{"content":[],"isError":false}}"#,
                ),
            ],
            vec![
                Seen::Start("nope", 10),
                Seen::End("nope", Error, 10, 20),
                Seen::Start("boom", 30),
                Seen::End("boom", Error, 30, 40),
                Seen::Start("fine", 50),
                Seen::End("fine", Result, 50, 60),
            ],
        ),
        (
            "cancellation ends the call; the late answer is ignored",
            vec![
                (
                    C2S,
                    r#"{"jsonrpc":"2.0","id":"long","method":"tools/call","params":{"name":"wait"}}"#,
                ),
                (
                    S2C,
                    r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}"#,
                ),
                (
                    C2S,
                    r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"long","reason":"user"}}"#,
                ),
                (S2C, r#"{"jsonrpc":"2.0","id":"long","result":{}}"#),
            ],
            vec![
                Seen::Start("wait", 10),
                Seen::End("wait", Cancelled, 10, 30),
            ],
        ),
        (
            "unknown ids, other methods and the server's own requests are ignored",
            vec![
                (S2C, r#"{"jsonrpc":"2.0","id":99,"result":{}}"#),
                (
                    C2S,
                    r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":98}}"#,
                ),
                (
                    C2S,
                    r#"{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"x"}}"#,
                ),
                (
                    S2C,
                    r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"backwards"}}"#,
                ),
                (C2S, r#"{"jsonrpc":"2.0","id":3,"result":{}}"#),
                (S2C, r#"{"jsonrpc":"2.0","id":3,"result":{}}"#),
                (
                    S2C,
                    r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}"#,
                ),
            ],
            vec![],
        ),
        (
            "a server cancelling its own request does not end the client's call with that id",
            vec![
                (
                    C2S,
                    r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"t"}}"#,
                ),
                (
                    S2C,
                    r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":4}}"#,
                ),
                (S2C, r#"{"jsonrpc":"2.0","id":4,"result":{}}"#),
            ],
            vec![Seen::Start("t", 10), Seen::End("t", Result, 10, 30)],
        ),
        (
            "garbage, truncated JSON and calls without a name or id report nothing",
            vec![
                (C2S, "hello"),
                (C2S, ""),
                (
                    C2S,
                    r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x""#,
                ),
                (
                    C2S,
                    r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}} trailing"#,
                ),
                (
                    C2S,
                    r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":7}}"#,
                ),
                (
                    C2S,
                    r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"no-id"}}"#,
                ),
                (
                    C2S,
                    r#"{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"x"}}"#,
                ),
                (
                    C2S,
                    r#"{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"x"}}"#,
                ),
                (C2S, r#"[1,2"#),
                (C2S, r#"{"a":tru}"#),
                (S2C, r#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
            ],
            vec![],
        ),
        (
            "a reused running id loses the older call",
            vec![
                (
                    C2S,
                    r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}}"#,
                ),
                (
                    C2S,
                    r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"b"}}"#,
                ),
                (S2C, r#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
            ],
            vec![
                Seen::Start("a", 10),
                Seen::End("a", Lost, 10, 20),
                Seen::Start("b", 20),
                Seen::End("b", Result, 20, 30),
            ],
        ),
        (
            "a batch holds several messages",
            vec![
                (
                    C2S,
                    r#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"b"}}]"#,
                ),
                (
                    S2C,
                    r#"[{"jsonrpc":"2.0","id":2,"result":{}},{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m"}}]"#,
                ),
            ],
            vec![
                Seen::Start("a", 10),
                Seen::Start("b", 10),
                Seen::End("b", Result, 10, 20),
                Seen::End("a", Error, 10, 20),
            ],
        ),
    ];
    for (name, lines, want) in table {
        let (seen, _) = run(&lines);
        assert_eq!(seen, want, "{name}");
    }
}

/// The 2026-07-28 `_meta` every request carries.
const META26: &str = r#""io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}"#;

fn mrtr_call(id: &str, tool: &str, meta: &str, retry: Option<&str>) -> String {
    let retry = match retry {
        Some(state) => format!(
            r#","inputResponses":{{"ask":{{"action":"accept","content":{{"secret":"CANARY-answer"}}}}}},"requestState":"{state}""#
        ),
        None => String::new(),
    };
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{{"q":"x"}},"_meta":{{{META26}{meta}}}{retry}}}}}"#
    )
}

fn input_required(id: &str, state: Option<&str>) -> String {
    let state = state
        .map(|s| format!(r#","requestState":"{s}""#))
        .unwrap_or_default();
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"resultType":"input_required","inputRequests":{{"ask":{{"method":"elicitation/create","params":{{"mode":"form","message":"CANARY-question","requestedSchema":{{}}}}}}}}{state}}}}}"#
    )
}

fn done(id: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"resultType":"complete","content":[{{"type":"text","text":"ok"}}],"isError":false}}}}"#
    )
}

/// Feeds (direction, line, time) and returns the observations.
fn feed(lines: &[(Direction, String, u64)]) -> (Observer, Vec<Observation>) {
    let mut obs = Observer::new();
    let mut out = Vec::new();
    for (dir, line, t) in lines {
        obs.line(*dir, line.as_bytes(), *t, &mut out);
    }
    (obs, out)
}

/// (start?, tool, rounds, input_wait, start, end, outcome, unanswered) of one observation.
type Summary = (bool, String, u32, u64, u64, u64, Option<Outcome>, bool);

/// The [`Summary`] of each observation.
fn summary(out: &[Observation]) -> Vec<Summary> {
    out.iter()
        .map(|o| match o {
            Observation::Start(c) => (
                true,
                c.tool.clone(),
                c.rounds,
                c.input_wait,
                c.start,
                c.start,
                None,
                c.unanswered,
            ),
            Observation::End {
                call: c,
                end,
                outcome,
            } => (
                false,
                c.tool.clone(),
                c.rounds,
                c.input_wait,
                c.start,
                *end,
                Some(*outcome),
                c.unanswered,
            ),
        })
        .collect()
}

#[test]
fn a_multi_round_trip_call_is_one_call_with_its_rounds_and_wait() {
    let st = "eyJzdGF0ZSI6IkNBTkFSWS1zdGF0ZSJ9";
    let st2 = "c2Vjb25kLXJvdW5k";
    let (obs, out) = feed(&[
        (
            C2S,
            mrtr_call("1", "book", r#","claudecode/toolUseId":"toolu_1""#, None),
            10,
        ),
        (S2C, input_required("1", Some(st)), 20),
        // The client takes 100 to answer; the retry has a new id.
        (
            C2S,
            mrtr_call(
                "2",
                "book",
                r#","claudecode/toolUseId":"toolu_1""#,
                Some(st),
            ),
            120,
        ),
        (S2C, input_required("2", Some(st2)), 130),
        (
            C2S,
            mrtr_call(
                "\"three\"",
                "book",
                r#","claudecode/toolUseId":"toolu_1""#,
                Some(st2),
            ),
            180,
        ),
        (S2C, done("\"three\""), 200),
    ]);
    assert_eq!(
        summary(&out),
        vec![
            (true, "book".into(), 1, 0, 10, 10, None, false),
            (
                false,
                "book".into(),
                3,
                100 + 50,
                10,
                200,
                Some(Outcome::Result),
                false
            ),
        ]
    );
    assert_eq!(obs.running(), 0);
}

#[test]
fn before_mrtr_an_input_required_answer_ended_the_call() {
    // The same two rounds as a client sends them: one call, not two.
    let st = "s1";
    let (_, out) = feed(&[
        (C2S, mrtr_call("1", "book", "", None), 1),
        (S2C, input_required("1", Some(st)), 2),
        (C2S, mrtr_call("2", "book", "", Some(st)), 5),
        (S2C, done("2"), 6),
    ]);
    let starts = out
        .iter()
        .filter(|o| matches!(o, Observation::Start(_)))
        .count();
    assert_eq!((starts, out.len()), (1, 2), "{out:?}");
}

#[test]
fn retries_are_matched_by_state_then_by_tool_and_ids() {
    use Outcome::*;
    // Two waiting calls of one tool with different states: each retry joins its own.
    let (_, out) = feed(&[
        (C2S, mrtr_call("1", "t", "", None), 1),
        (C2S, mrtr_call("2", "t", "", None), 2),
        (S2C, input_required("1", Some("A")), 3),
        (S2C, input_required("2", Some("B")), 4),
        (C2S, mrtr_call("3", "t", "", Some("B")), 10),
        (C2S, mrtr_call("4", "t", "", Some("A")), 20),
        (S2C, done("4"), 30),
        (
            S2C,
            r#"{"jsonrpc":"2.0","id":3,"error":{"code":1,"message":"m"}}"#.to_string(),
            40,
        ),
    ]);
    let s = summary(&out);
    assert_eq!(s[2], (false, "t".into(), 2, 17, 1, 30, Some(Result), false));
    assert_eq!(s[3], (false, "t".into(), 2, 6, 2, 40, Some(Error), false));
    assert_eq!(s.len(), 4);

    // Without state: one waiting call of the tool is joined; the inputResponses alone
    // make the request a retry.
    let retry_no_state = |id: &str, meta: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"t","_meta":{{{META26}{meta}}},"inputResponses":{{"a":{{}}}}}}}}"#
        )
    };
    let (_, out) = feed(&[
        (C2S, mrtr_call("1", "t", "", None), 1),
        (S2C, input_required("1", None), 2),
        (C2S, retry_no_state("2", ""), 7),
        (S2C, done("2"), 9),
    ]);
    assert_eq!(
        summary(&out)[1],
        (false, "t".into(), 2, 5, 1, 9, Some(Result), false)
    );

    // Two waiting calls of the tool and nothing to tell them apart: not guessed. The
    // retry is a new call; with a matching tool-use id it is joined.
    let (obs, out) = feed(&[
        (C2S, mrtr_call("1", "t", r#","itemId":"fc_1""#, None), 1),
        (C2S, mrtr_call("2", "t", r#","itemId":"fc_2""#, None), 1),
        (S2C, input_required("1", None), 2),
        (S2C, input_required("2", None), 2),
        (C2S, retry_no_state("3", ""), 5),
        (C2S, retry_no_state("4", r#","itemId":"fc_2""#), 6),
        (S2C, done("4"), 8),
    ]);
    let s = summary(&out);
    assert_eq!(s[2], (true, "t".into(), 1, 0, 5, 5, None, false));
    assert_eq!(s[3], (false, "t".into(), 2, 4, 1, 8, Some(Result), false));
    assert_eq!(
        obs.running(),
        2,
        "fc_1 still waits, the unjoined retry runs"
    );

    // A retry whose state matches nothing, or whose tool-use id differs, is a new call.
    let (_, out) = feed(&[
        (
            C2S,
            mrtr_call("1", "t", r#","claudecode/toolUseId":"toolu_1""#, None),
            1,
        ),
        (S2C, input_required("1", Some("A")), 2),
        (
            C2S,
            mrtr_call("2", "t", r#","claudecode/toolUseId":"toolu_2""#, Some("A")),
            3,
        ),
        (C2S, mrtr_call("3", "u", "", Some("A")), 4),
    ]);
    let starts = out
        .iter()
        .filter(|o| matches!(o, Observation::Start(_)))
        .count();
    assert_eq!(starts, 3, "{out:?}");
}

#[test]
fn a_round_that_never_gets_its_retry_ends_unanswered() {
    // At the end of the pipe, with the wait counted up to then.
    let (mut obs, mut out) = feed(&[
        (C2S, mrtr_call("1", "t", "", None), 1),
        (S2C, input_required("1", Some("A")), 4),
        (C2S, mrtr_call("2", "t", "", None), 5),
    ]);
    obs.lose_all(50, &mut out);
    let s = summary(&out);
    assert_eq!(
        s[2],
        (
            false,
            "t".into(),
            1,
            46,
            1,
            50,
            Some(Outcome::Cancelled),
            true
        )
    );
    assert_eq!(
        s[3],
        (false, "t".into(), 1, 0, 5, 50, Some(Outcome::Lost), false)
    );

    // When the host sends a new request for the same tool use instead of the retry.
    let (obs, out) = feed(&[
        (C2S, mrtr_call("1", "t", r#","callId":"c1""#, None), 1),
        (S2C, input_required("1", Some("A")), 4),
        (C2S, mrtr_call("2", "t", r#","callId":"c1""#, None), 9),
    ]);
    let s = summary(&out);
    assert_eq!(
        s[1],
        (
            false,
            "t".into(),
            1,
            5,
            1,
            9,
            Some(Outcome::Cancelled),
            true
        )
    );
    assert_eq!(s[2], (true, "t".into(), 1, 0, 9, 9, None, false));
    assert_eq!(obs.running(), 1);

    // When too many wait: the oldest.
    let mut lines = Vec::new();
    for n in 0..=MAX_WAITING as u64 {
        lines.push((C2S, mrtr_call(&n.to_string(), "t", "", None), n));
        lines.push((
            S2C,
            input_required(&n.to_string(), Some(&format!("s{n}"))),
            n,
        ));
    }
    let (obs, out) = feed(&lines);
    let ends: Vec<_> = out
        .iter()
        .filter_map(|o| match o {
            Observation::End { call, .. } => Some((call.seq, call.unanswered)),
            _ => None,
        })
        .collect();
    assert_eq!(ends, vec![(0, true)]);
    assert_eq!(obs.running(), MAX_WAITING);
}

#[test]
fn a_state_is_the_same_state_however_it_is_escaped() {
    // The server writes `\/` and `\u00e9`, the client re-serialises them plainly; split
    // anywhere, the retry still joins its call.
    let server = r"a\/b\u00e9\ud83d\ude00\n";
    let client = "a/b\u{e9}\u{1F600}\\n";
    for cut in 1..8 {
        let mut obs = Observer::new();
        let mut out = Vec::new();
        let scan = |dir, line: String, t, obs: &mut Observer, out: &mut Vec<Observation>| {
            let mut s = LineScanner::new();
            for p in line.as_bytes().chunks(cut) {
                s.push(p);
            }
            obs.skeleton(dir, &s.finish().unwrap(), t, out);
        };
        scan(C2S, mrtr_call("1", "t", "", None), 1, &mut obs, &mut out);
        scan(
            S2C,
            input_required("1", Some(server)),
            2,
            &mut obs,
            &mut out,
        );
        scan(
            C2S,
            mrtr_call("2", "t", "", Some(client)),
            3,
            &mut obs,
            &mut out,
        );
        scan(S2C, done("2"), 4, &mut obs, &mut out);
        assert_eq!(out.len(), 2, "cut {cut}: {out:?}");
    }
    // And the digest is that of the decoded value.
    let mut raw = StateDigest::new();
    raw.write(server.as_bytes());
    assert_eq!(raw.finish(), state_key("a/b\u{e9}\u{1F600}\n"));
}

#[test]
fn state_and_answers_never_reach_the_skeleton() {
    let st = "CANARY-state-0123456789";
    for line in [
        mrtr_call("2", "t", "", Some(st)),
        input_required("1", Some(st)),
    ] {
        let mut s = LineScanner::new();
        for piece in line.as_bytes().chunks(3) {
            s.push(piece);
        }
        let sk = String::from_utf8(s.finish().unwrap()).unwrap();
        assert!(!sk.contains("CANARY"), "{sk}");
        assert!(sk.contains("\"requestState\":\""), "{sk}");
    }
    let mut s = LineScanner::new();
    s.push(mrtr_call("2", "t", "", Some(st)).as_bytes());
    let sk = String::from_utf8(s.finish().unwrap()).unwrap();
    assert!(sk.contains(r#""inputResponses":{}"#), "{sk}");
    // A state longer than any kept scalar still digests (and still matches).
    let long = "S".repeat(SCALAR_CAP * 4);
    let (_, out) = feed(&[
        (C2S, mrtr_call("1", "t", "", None), 1),
        (S2C, input_required("1", Some(&long)), 2),
        (C2S, mrtr_call("2", "t", "", Some(&long)), 3),
        (S2C, done("2"), 4),
    ]);
    assert_eq!(out.len(), 2, "{out:?}");
}

#[test]
fn hints_come_from_meta_for_both_hosts() {
    let (_, out) = run(&[
        (
            C2S,
            r#"{"method":"tools/call","params":{"name":"echo","_meta":{"claudecode/toolUseId":"toolu_01","progressToken":1}},"jsonrpc":"2.0","id":1}"#,
        ),
        (
            C2S,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"_meta":{"callId":"exec-9","itemId":"fc_1","x-codex-turn-metadata":{"turn_id":"x","nested":{"deep":[1,2]}},"threadId":"th-1","progressToken":1},"name":"echo","arguments":{"text":"hi"}}}"#,
        ),
        (
            C2S,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","_meta":{"claudecode\/toolUseId":"toolu_esc","itemId":5}}}"#,
        ),
    ]);
    let hints: Vec<Hints> = out
        .into_iter()
        .map(|o| match o {
            Observation::Start(c) => c.hints,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    let h = |t: Option<&str>, i: Option<&str>, c: Option<&str>, th: Option<&str>| Hints {
        tool_use_id: t.map(Into::into),
        item_id: i.map(Into::into),
        call_id: c.map(Into::into),
        thread: th.map(Into::into),
    };
    assert_eq!(
        hints,
        vec![
            h(Some("toolu_01"), None, None, None),
            h(None, Some("fc_1"), Some("exec-9"), Some("th-1")),
            // An escaped key is the same key; a non-string hint is no hint.
            h(Some("toolu_esc"), None, None, None),
        ]
    );
}

#[test]
fn lose_all_ends_running_calls_oldest_first() {
    let mut obs = Observer::new();
    let mut out = Vec::new();
    for (id, name) in [(3, "c"), (1, "a"), (2, "b")] {
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{name}"}}}}"#
        );
        obs.line(C2S, line.as_bytes(), id, &mut out);
    }
    out.clear();
    obs.lose_all(100, &mut out);
    let tools: Vec<(&str, Outcome, u64)> = out
        .iter()
        .map(|o| match o {
            Observation::End { call, outcome, end } => (call.tool.as_str(), *outcome, *end),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(
        tools,
        vec![
            ("c", Outcome::Lost, 100),
            ("a", Outcome::Lost, 100),
            ("b", Outcome::Lost, 100)
        ]
    );
    assert_eq!(obs.running(), 0);
}

#[test]
fn skeleton_drops_what_is_never_read() {
    let mut s = LineScanner::new();
    s.push(br#"{"result":{"content":[{"type":"text","text":"big"}],"isError":true,"#);
    s.push(br#""structuredContent":{"a":[1,{"b":"c"}]}},"jsonrpc":"2.0","id":7}"#);
    let sk = s.finish().unwrap();
    assert_eq!(
        std::str::from_utf8(&sk).unwrap(),
        r#"{"result":{"isError":true},"jsonrpc":"2.0","id":7}"#
    );
}

#[test]
fn a_giant_result_split_anywhere_still_ends_its_call() {
    // 8 MiB of text, including escapes and multi-byte characters, before the id.
    let mut text = String::new();
    while text.len() < 8 << 20 {
        text.push_str("ab\\\"cd é 漢字 \\u00e9 \\\\ ");
    }
    let line = format!(
        r#"{{"result":{{"content":[{{"type":"text","text":"{text}"}}],"isError":false}},"jsonrpc":"2.0","id":"big"}}"#
    );
    for piece_len in [1usize << 20, 4093, 7] {
        let mut obs = Observer::new();
        let mut out = Vec::new();
        let req = r#"{"jsonrpc":"2.0","id":"big","method":"tools/call","params":{"name":"read"}}"#;
        obs.line(C2S, req.as_bytes(), 1, &mut out);
        let mut s = LineScanner::new();
        let bytes = line.as_bytes();
        // Only the first and the last 64 KiB go through in small pieces, to keep it quick.
        let (head, rest) = bytes.split_at(64 << 10);
        let (mid, tail) = rest.split_at(rest.len() - (64 << 10));
        for p in head.chunks(piece_len) {
            s.push(p);
        }
        s.push(mid);
        for p in tail.chunks(piece_len) {
            s.push(p);
        }
        let sk = s.finish().expect("a JSON line");
        assert!(sk.len() < 200, "skeleton of {} bytes", sk.len());
        obs.skeleton(S2C, &sk, 2, &mut out);
        assert_eq!(out.len(), 2, "piece length {piece_len}");
        assert!(matches!(
            out[1],
            Observation::End {
                outcome: Outcome::Result,
                end: 2,
                ..
            }
        ));
    }
}

#[test]
fn invalid_utf8_anywhere_digests_to_nothing() {
    let good = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"s":"é"}}}"#;
    let mut s = LineScanner::new();
    s.push(good.as_bytes());
    assert!(s.finish().is_some());
    // A multi-byte character split across pieces is fine.
    let cut = good.find('é').unwrap() + 1;
    s.push(&good.as_bytes()[..cut]);
    s.push(&good.as_bytes()[cut..]);
    assert!(s.finish().is_some());
    // A stray byte inside a dropped string is not.
    let mut bad = good.as_bytes().to_vec();
    let at = good.find('é').unwrap();
    bad[at] = 0xff;
    s.push(&bad);
    assert!(s.finish().is_none());
    // Nor is a sequence cut off at the end of the line.
    s.push(&good.as_bytes()[..cut]);
    assert!(s.finish().is_none());
    // And the scanner is ready for the next line.
    s.push(good.as_bytes());
    assert!(s.finish().is_some());
}

#[test]
fn nesting_deeper_than_serde_follows_is_given_up_without_growing() {
    let mut s = LineScanner::new();
    for _ in 0..1000 {
        s.push(&[b'['; 1000]);
    }
    assert!(s.stack.len() <= MAX_DEPTH);
    assert!(s.finish().is_none());
    let ok = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
    s.push(ok.as_bytes());
    assert!(s.finish().is_some());
}

#[test]
fn over_long_scalars_become_null_and_are_not_reported() {
    let long = "x".repeat(SCALAR_CAP + 1);
    let line =
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{long}"}}}}"#);
    let (seen, _) = run(&[(C2S, &line)]);
    assert_eq!(seen, vec![]);
}

#[test]
fn skeleton_reads_the_same_as_the_whole_line() {
    // For ordinary messages, observing the skeleton equals observing a full parse.
    let lines = [
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"_meta":{"callId":"c","itemId":"i","threadId":"t","x":{"y":[1]}},"name":"echo","arguments":{"text":"hi","n":[1,2,{"z":null}]}}}"#,
        r#"  {"jsonrpc" : "2.0" , "id" : 2 , "result" : { "content" : [ ] , "isError" : false } }  "#,
        r#"{"jsonrpc":"2.0","id":-3,"error":{"code":-32601,"message":"nope","data":{"x":1}}}"#,
        r#"[]"#,
        r#"{}"#,
        r#"42"#,
        r#""str""#,
    ];
    for line in lines {
        let mut s = LineScanner::new();
        s.push(line.as_bytes());
        let sk = s.finish().unwrap_or_else(|| panic!("{line}"));
        let whole: Value = serde_json::from_str(line).unwrap();
        let skel: Value = serde_json::from_slice(&sk).unwrap();
        let pick = |v: &Value| {
            (
                v.get("id").cloned(),
                v.get("method").cloned(),
                v.pointer("/params/name").cloned(),
                v.pointer("/params/_meta/itemId").cloned(),
                v.pointer("/result/isError").cloned(),
                v.get("error").is_some(),
                v.get("result").is_some(),
            )
        };
        assert_eq!(pick(&whole), pick(&skel), "{line}");
    }
}

mod properties {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z_/]{0,12}",
            "\\PC{0,8}",
            Just("quo\"te\\back\nline\u{1}é漢".to_string()),
            Just("itemId".to_string()),
            Just("params".to_string()),
            Just("requestState".to_string()),
            Just("inputResponses".to_string()),
        ]
    }

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            (-1e9f64..1e9).prop_map(|f| json!(f)),
            text().prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec((text(), inner), 0..6)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    fn id() -> impl Strategy<Value = Value> {
        prop_oneof![
            (0i64..4).prop_map(Value::from),
            "[a-c]".prop_map(Value::from),
            value()
        ]
    }

    fn meta() -> impl Strategy<Value = Value> {
        (
            prop::option::of(prop_oneof![text().prop_map(Value::from), value()]),
            prop::option::of(text()),
            prop::option::of(text()),
            prop::option::of(text()),
            value(),
        )
            .prop_map(|(tu, item, call, thread, extra)| {
                let mut m = serde_json::Map::new();
                if let Some(v) = tu {
                    m.insert("claudecode/toolUseId".into(), v);
                }
                if let Some(v) = item {
                    m.insert("itemId".into(), v.into());
                }
                if let Some(v) = call {
                    m.insert("callId".into(), v.into());
                }
                if let Some(v) = thread {
                    m.insert("threadId".into(), v.into());
                }
                m.insert("x-codex-turn-metadata".into(), extra);
                Value::Object(m)
            })
    }

    /// A line and the direction it travels: mostly MCP-shaped, some anything at all.
    fn message() -> impl Strategy<Value = (Direction, Value)> {
        prop_oneof![
            (id(), text(), value(), meta()).prop_map(|(id, name, args, meta)| (
                Direction::ClientToServer,
                json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":name,"arguments":args,"_meta":meta}})
            )),
            (id(), value(), prop_oneof![any::<bool>().prop_map(Value::from), value()]).prop_map(
                |(id, content, is_error)| (
                    Direction::ServerToClient,
                    json!({"result":{"content":content,"isError":is_error},"jsonrpc":"2.0","id":id})
                )
            ),
            (id(), value()).prop_map(|(id, e)| (Direction::ServerToClient, json!({"jsonrpc":"2.0","id":id,"error":e}))),
            // Multi Round-Trip: an input-required answer, and a retry with the answers
            // and a state from a small set (so that some match and some do not).
            (id(), prop::option::of("[xy]"), value()).prop_map(|(id, state, asks)| {
                let mut r = json!({"resultType":"input_required","inputRequests":asks});
                if let Some(s) = state {
                    r["requestState"] = s.into();
                }
                (Direction::ServerToClient, json!({"jsonrpc":"2.0","id":id,"result":r}))
            }),
            (id(), "[ab]", prop::option::of("[xy]"), value(), meta()).prop_map(|(id, name, state, answers, meta)| {
                let mut p = json!({"name":name,"inputResponses":answers,"_meta":meta});
                if let Some(s) = state {
                    p["requestState"] = s.into();
                }
                (Direction::ClientToServer, json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":p}))
            }),
            id().prop_map(|id| (
                Direction::ClientToServer,
                json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":id}})
            )),
            (any::<bool>(), value()).prop_map(|(up, v)| (
                if up { Direction::ClientToServer } else { Direction::ServerToClient },
                v
            )),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Whatever the lines and however they are cut into pieces, observing through the
        /// skeleton gives exactly what observing the whole parsed line gives.
        #[test]
        fn the_skeleton_observes_like_the_whole_line(
            msgs in prop::collection::vec(message(), 1..12),
            cuts in prop::collection::vec(1usize..64, 1..8),
        ) {
            let mut fast = Observer::new();
            let mut whole = Observer::new();
            let (mut got, mut want) = (Vec::new(), Vec::new());
            let mut scanner = LineScanner::new();
            for (n, (dir, msg)) in msgs.iter().enumerate() {
                let line = serde_json::to_vec(msg).unwrap();
                let mut rest = &line[..];
                let mut k = 0;
                while !rest.is_empty() {
                    let take = cuts[k % cuts.len()].min(rest.len());
                    scanner.push(&rest[..take]);
                    rest = &rest[take..];
                    k += 1;
                }
                let t = n as u64;
                if let Some(sk) = scanner.finish() {
                    fast.skeleton(*dir, &sk, t, &mut got);
                } else {
                    prop_assert!(false, "a JSON line digests: {}", String::from_utf8_lossy(&line));
                }
                whole.skeleton(*dir, &line, t, &mut want);
            }
            prop_assert_eq!(got, want);
        }

        /// Interleaved Multi Round-Trip calls, each of its own number of rounds, with states
        /// written with or without escapes and lines cut anywhere: each is one start and one
        /// end, with its rounds, however the rounds of different calls interleave.
        #[test]
        fn interleaved_multi_round_trip_calls_are_one_call_each(
            plan in prop::collection::vec((1u32..4, any::<bool>(), any::<bool>()), 1..6),
            order in prop::collection::vec(any::<prop::sample::Index>(), 0..64),
            cuts in prop::collection::vec(1usize..48, 1..6),
        ) {
            // Each call: (rounds, escape its states, give it a tool-use id).
            let mut next_id = 0u64;
            let mut pending: Vec<(usize, u32)> = plan.iter().enumerate().map(|(c, _)| (c, 0)).collect();
            let mut lines: Vec<(Direction, String)> = Vec::new();
            let mut k = 0;
            while !pending.is_empty() {
                let pick = order.get(k).map_or(0, |i| i.index(pending.len()));
                k += 1;
                let (c, done_rounds) = pending[pick];
                let (rounds, escape, with_id) = plan[c];
                let id = next_id;
                next_id += 1;
                let state = |r: u32, escaped: bool| {
                    if escaped { format!("c{c}\\/r{r}\\u0041") } else { format!("c{c}/r{r}A") }
                };
                let meta = if with_id { format!(r#","claudecode/toolUseId":"tu{c}""#) } else { String::new() };
                let retry = (done_rounds > 0).then(|| state(done_rounds, false));
                lines.push((Direction::ClientToServer, mrtr_call(&id.to_string(), "same", &meta, retry.as_deref())));
                if done_rounds + 1 < rounds {
                    lines.push((Direction::ServerToClient, input_required(&id.to_string(), Some(&state(done_rounds + 1, escape)))));
                    pending[pick].1 += 1;
                } else {
                    lines.push((Direction::ServerToClient, done(&id.to_string())));
                    pending.remove(pick);
                }
            }
            let mut obs = Observer::new();
            let mut out = Vec::new();
            let mut scanner = LineScanner::new();
            for (n, (dir, line)) in lines.iter().enumerate() {
                let mut rest = line.as_bytes();
                let mut j = n;
                while !rest.is_empty() {
                    let take = cuts[j % cuts.len()].min(rest.len());
                    scanner.push(&rest[..take]);
                    rest = &rest[take..];
                    j += 1;
                }
                let sk = scanner.finish().expect("a JSON line");
                obs.skeleton(*dir, &sk, n as u64, &mut out);
            }
            let mut rounds: Vec<u32> = out.iter().filter_map(|o| match o {
                Observation::End { call, outcome: Outcome::Result, .. } => Some(call.rounds),
                _ => None,
            }).collect();
            let starts = out.iter().filter(|o| matches!(o, Observation::Start(_))).count();
            let mut want: Vec<u32> = plan.iter().map(|p| p.0).collect();
            rounds.sort_unstable();
            want.sort_unstable();
            prop_assert_eq!(starts, plan.len(), "{:?}", out);
            prop_assert_eq!(rounds, want);
            prop_assert_eq!(obs.running(), 0);
        }

        /// Bytes that are not one JSON value never digest to anything.
        #[test]
        fn garbage_never_digests(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            let mut s = LineScanner::new();
            s.push(&bytes);
            let digested = s.finish();
            let is_json = serde_json::from_slice::<Value>(&bytes).is_ok();
            if !is_json {
                prop_assert!(digested.is_none(), "{:?}", String::from_utf8_lossy(&bytes));
            }
        }
    }
}
