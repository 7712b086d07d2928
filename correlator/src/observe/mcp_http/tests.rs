//! The MCP mount observer against design.md §8, one table row per rule, then hostile input.

use proptest::prelude::*;

use super::*;

const ALIAS: &str = "remote";
const MAX_WINDOW: Millis = 1000.0;
const S1: &[u8] = b"session-one";
const S2: &[u8] = b"session-two";
const V2025: Option<&str> = Some("2025-11-25");
const V2026: Option<&str> = Some("2026-07-28");

fn mount() -> McpMount {
    McpMount::new(ALIAS, "i", MAX_WINDOW)
}

fn head<'a>(
    method: HttpMethod,
    session: Option<&'a [u8]>,
    version: Option<&'a str>,
    host: Option<&'a str>,
) -> RequestHead<'a> {
    RequestHead {
        method,
        session_id: session,
        protocol_version: version,
        content_encoding: None,
        host,
    }
}

fn call(id: &str, tool: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{{"q":"secret-arg"}},"_meta":{{"claudecode/toolUseId":"toolu_{tool}","progressToken":2}}}}}}"#
    )
}

fn result(id: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"secret-result"}}],"isError":false}}}}"#
    )
}

/// A POST of `body` in session `session` whose body passed at `s`.
fn post(
    m: &mut McpMount,
    session: Option<&[u8]>,
    version: Option<&str>,
    body: &str,
    s: Millis,
) -> ExchangeId {
    let x = m.open(head(HttpMethod::Post, session, version, Some("h1")));
    m.handle_request_body(x, body.as_bytes());
    m.handle_request_end(x, s);
    x
}

fn json_reply(m: &mut McpMount, x: ExchangeId, status: u16, body: &str, at: Millis) {
    m.handle_response_head(x, status, Some("application/json"), None);
    m.handle_response_body(x, body.as_bytes(), at);
    m.handle_end(x, at + 1.0, ExchangeEnd::Complete);
}

fn sse_head(m: &mut McpMount, x: ExchangeId) {
    m.handle_response_head(x, 200, Some("text/event-stream"), None);
}

fn events(m: &mut McpMount) -> Vec<McpEvent> {
    std::iter::from_fn(|| m.poll_event()).collect()
}

/// The ends, as (interval, start, end, outcome).
fn ends(evs: &[McpEvent]) -> Vec<(String, Millis, Millis, Outcome)> {
    evs.iter()
        .filter_map(|e| match &e.kind {
            EventKind::McpInterval {
                interval,
                start,
                end,
                outcome,
                ..
            } => Some((interval.clone(), *start, *end, *outcome)),
            _ => None,
        })
        .collect()
}

fn starts(evs: &[McpEvent]) -> Vec<(String, Millis)> {
    evs.iter()
        .filter_map(|e| match &e.kind {
            EventKind::McpStart {
                interval, start, ..
            } => Some((interval.clone(), *start)),
            _ => None,
        })
        .collect()
}

fn end(i: &str, s: Millis, e: Millis, o: Outcome) -> (String, Millis, Millis, Outcome) {
    (i.to_string(), s, e, o)
}

// ---- Messages, s, e and outcome -------------------------------------------------------------

#[test]
fn a_json_answer_ends_its_call_at_the_piece_with_its_last_byte() {
    let mut m = mount();
    let x = post(&mut m, Some(S1), V2025, &call("1", "echo"), 10.0);
    m.handle_response_head(x, 200, Some("application/json; charset=utf-8"), None);
    let body = result("1");
    let (a, b) = body.split_at(20);
    m.handle_response_body(x, a.as_bytes(), 15.0);
    m.handle_response_body(x, b.as_bytes(), 17.0);
    // Trailing whitespace after the value is not part of the message.
    m.handle_response_body(x, b"\r\n", 19.0);
    m.handle_end(x, 20.0, ExchangeEnd::Complete);
    let evs = events(&mut m);
    assert_eq!(evs.len(), 2);
    let EventKind::McpStart {
        interval,
        alias,
        tool,
        start,
        host,
        transport,
    } = &evs[0].kind
    else {
        panic!("{evs:?}")
    };
    assert_eq!(
        (
            interval.as_str(),
            alias.as_str(),
            tool.as_str(),
            *start,
            host.as_deref(),
            *transport
        ),
        ("i1", ALIAS, "echo", 10.0, Some("h1"), McpTransport::Http)
    );
    assert_eq!(evs[0].at, 10.0);
    let EventKind::McpInterval {
        end,
        outcome,
        hints,
        transport,
        rounds,
        ..
    } = &evs[1].kind
    else {
        panic!()
    };
    assert_eq!(
        (*end, *outcome, *transport, *rounds),
        (17.0, Outcome::Result, McpTransport::Http, None)
    );
    assert_eq!(hints.tool_use_id.as_deref(), Some("toolu_echo"));
    assert!(evs[1].at >= 17.0);
}

#[test]
fn hints_are_read_from_meta_as_the_wrapper_reads_them() {
    let mut m = mount();
    let body = r#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"t","arguments":{},"_meta":{"callId":"call_1","itemId":"fc_1","threadId":"th_1","sessionId":"x","x-codex-turn-metadata":{"turn":"y"},"progressToken":3}}}"#;
    let x = post(&mut m, None, V2025, body, 1.0);
    json_reply(
        &mut m,
        x,
        200,
        r#"{"jsonrpc":"2.0","id":"a","result":{}}"#,
        2.0,
    );
    let evs = events(&mut m);
    let EventKind::McpInterval { hints, .. } = &evs[1].kind else {
        panic!()
    };
    assert_eq!(
        hints,
        &Hints {
            tool_use_id: None,
            item_id: Some("fc_1".into()),
            call_id: Some("call_1".into()),
            thread: Some("th_1".into()),
        }
    );
}

#[test]
fn a_batch_starts_every_call_at_one_s_and_a_batch_answer_ends_each() {
    let mut m = mount();
    let body = format!(
        "[{},{},{}]",
        call("1", "a"),
        call("2", "b"),
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#
    );
    let x = post(&mut m, None, V2025, &body, 5.0);
    json_reply(
        &mut m,
        x,
        200,
        &format!(
            "[{},{}]",
            result("2"),
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"m"}}"#
        ),
        9.0,
    );
    let evs = events(&mut m);
    assert_eq!(starts(&evs), vec![("i1".into(), 5.0), ("i2".into(), 5.0)]);
    assert_eq!(
        ends(&evs),
        vec![
            end("i2", 5.0, 9.0, Outcome::Result),
            end("i1", 5.0, 9.0, Outcome::Error)
        ]
    );
}

#[test]
fn sse_events_each_carry_one_message_and_empty_or_non_json_data_is_skipped() {
    let mut m = mount();
    let x = post(
        &mut m,
        Some(S1),
        V2025,
        &format!("[{},{}]", call("1", "a"), call("2", "b")),
        1.0,
    );
    sse_head(&mut m, x);
    let pieces: [(&str, Millis); 6] = [
        (": keep-alive\n\ndata:\n\n", 2.0),
        ("data: not json\n\n", 3.0),
        ("event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n", 4.0),
        // A server request inside the stream is no answer, though it has an id.
        ("data: {\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"elicitation/create\",\"params\":{}}\n\n", 5.0),
        // Data lines of one event are joined with `\n`.
        ("data: {\"jsonrpc\":\"2.0\",\n", 6.0),
        ("data: \"id\":2,\"result\":{}}\r\n\r\n", 7.0),
    ];
    for (p, t) in pieces {
        m.handle_response_body(x, p.as_bytes(), t);
    }
    m.handle_response_body(x, format!("data: {}\r\r", result("1")).as_bytes(), 8.0);
    m.handle_end(x, 9.0, ExchangeEnd::Complete);
    let evs = events(&mut m);
    assert_eq!(
        ends(&evs),
        vec![
            end("i2", 1.0, 7.0, Outcome::Result),
            end("i1", 1.0, 8.0, Outcome::Result)
        ]
    );
    assert_eq!(m.counts().problems.get(&Problem::EventSkipped), Some(&2));
    assert_eq!(
        m.counts()
            .messages
            .get(&(Sender::Server, "elicitation/create")),
        Some(&1)
    );
}

#[test]
fn data_lines_are_joined_with_a_newline_not_run_together() {
    // `1` and `2` on two data lines are `1\n2`, not JSON, never the id `12`.
    let mut m = mount();
    let x = post(&mut m, None, V2025, &call("12", "a"), 1.0);
    sse_head(&mut m, x);
    m.handle_response_body(
        x,
        b"data: {\"jsonrpc\":\"2.0\",\"id\":1\ndata: 2,\"result\":{}}\n\n",
        2.0,
    );
    m.handle_end(x, 3.0, ExchangeEnd::Complete);
    assert_eq!(
        ends(&events(&mut m)),
        vec![end("i1", 1.0, 3.0, Outcome::Lost)]
    );
    assert_eq!(m.counts().problems.get(&Problem::EventSkipped), Some(&1));
}

#[test]
fn the_observer_can_move_to_the_task_that_drives_it() {
    fn send<T: Send>() {}
    send::<McpMount>();
}

#[test]
fn an_event_cut_off_by_the_end_of_the_stream_carries_nothing() {
    let mut m = mount();
    let x = post(&mut m, Some(S1), V2025, &call("1", "a"), 1.0);
    sse_head(&mut m, x);
    // The whole message, but no blank line: not dispatched.
    m.handle_response_body(x, format!("data: {}\n", result("1")).as_bytes(), 2.0);
    m.handle_end(x, 3.0, ExchangeEnd::Complete);
    assert_eq!(
        ends(&events(&mut m)),
        vec![end("i1", 1.0, 3.0, Outcome::Lost)]
    );
}

#[test]
fn ids_are_equal_only_when_type_and_value_are() {
    let mut m = mount();
    let x = post(&mut m, None, V2025, &call("1", "a"), 1.0);
    json_reply(&mut m, x, 200, &result("\"1\""), 2.0);
    assert_eq!(
        ends(&events(&mut m)),
        vec![end("i1", 1.0, 3.0, Outcome::Lost)]
    );
    assert_eq!(m.counts().problems.get(&Problem::UnmatchedAnswer), Some(&1));
    let x = post(&mut m, None, V2025, &call("\"1\"", "a"), 4.0);
    json_reply(&mut m, x, 200, &result("\"1\""), 5.0);
    assert_eq!(
        ends(&events(&mut m)),
        vec![end("i2", 4.0, 5.0, Outcome::Result)]
    );
}

#[test]
fn errors_end_calls_error_and_an_id_null_error_answers_every_call_of_its_post() {
    let mut m = mount();
    let x = post(&mut m, None, V2025, &call("1", "a"), 1.0);
    json_reply(
        &mut m,
        x,
        200,
        r#"{"jsonrpc":"2.0","id":1,"result":{"isError":true,"content":[]}}"#,
        2.0,
    );
    let x = post(
        &mut m,
        None,
        V2025,
        &format!("[{},{}]", call("2", "b"), call("3", "c")),
        4.0,
    );
    json_reply(
        &mut m,
        x,
        200,
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#,
        5.0,
    );
    // Another POST's calls are not answered by it.
    let y = post(&mut m, None, V2025, &call("4", "d"), 6.0);
    let z = post(&mut m, None, V2025, "{}", 7.0);
    json_reply(
        &mut m,
        z,
        200,
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"m"}}"#,
        8.0,
    );
    json_reply(&mut m, y, 200, &result("4"), 10.0);
    assert_eq!(
        ends(&events(&mut m)),
        vec![
            end("i1", 1.0, 2.0, Outcome::Error),
            end("i2", 4.0, 5.0, Outcome::Error),
            end("i3", 4.0, 5.0, Outcome::Error),
            end("i4", 6.0, 10.0, Outcome::Result),
        ]
    );
}

#[test]
fn a_reply_without_the_answer_ends_the_call_error_for_4xx_5xx_lost_otherwise() {
    let cases: [(u16, Option<&str>, &str, Outcome); 6] = [
        (500, Some("text/html"), "<h1>secret</h1>", Outcome::Error),
        (
            404,
            Some("application/json"),
            r#"{"error":"x"}"#,
            Outcome::Error,
        ),
        (401, None, "", Outcome::Error),
        (202, None, "", Outcome::Lost),
        (
            200,
            Some("application/json"),
            r#"{"jsonrpc":"2.0","id":9,"result":{}}"#,
            Outcome::Lost,
        ),
        (
            200,
            Some("text/event-stream"),
            "data: {}\n\n",
            Outcome::Lost,
        ),
    ];
    for (status, ct, body, want) in cases {
        let mut m = mount();
        let x = post(&mut m, Some(S1), V2025, &call("1", "a"), 1.0);
        m.handle_response_head(x, status, ct, None);
        m.handle_response_body(x, body.as_bytes(), 2.0);
        m.handle_end(x, 3.0, ExchangeEnd::Complete);
        assert_eq!(
            ends(&events(&mut m)),
            vec![end("i1", 1.0, 3.0, want)],
            "{status}"
        );
        assert_eq!(m.running(), 0);
    }
    // An answer in a 4xx body still ends the call by its own word.
    let mut m = mount();
    let x = post(&mut m, None, V2025, &call("1", "a"), 1.0);
    json_reply(&mut m, x, 400, &result("1"), 2.0);
    assert_eq!(
        ends(&events(&mut m)),
        vec![end("i1", 1.0, 2.0, Outcome::Result)]
    );
    // No response at all (the upstream never answered): lost when the exchange ends.
    let x = post(&mut m, None, V2025, &call("2", "a"), 4.0);
    m.handle_end(x, 6.0, ExchangeEnd::UpstreamBroke);
    assert_eq!(
        ends(&events(&mut m)),
        vec![end("i2", 4.0, 6.0, Outcome::Lost)]
    );
}

// ---- The 2025 revisions: resumable streams --------------------------------------------------

/// A POST whose SSE reply set an event id and ended without the answer.
fn resumable(m: &mut McpMount, version: Option<&str>, session: Option<&[u8]>) -> ExchangeId {
    let x = post(m, session, version, &call("7", "slow"), 1.0);
    sse_head(m, x);
    m.handle_response_body(x, b"id: ev-1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n", 2.0);
    m.handle_end(x, 3.0, ExchangeEnd::UpstreamBroke);
    x
}

#[test]
fn under_2025_a_call_whose_stream_set_an_event_id_runs_on_and_a_get_of_its_session_answers_it() {
    for version in [V2025, Some("2025-03-26"), None] {
        let mut m = mount();
        resumable(&mut m, version, Some(S1));
        assert_eq!(ends(&events(&mut m)), vec![]);
        assert_eq!(m.running(), 1);
        // A GET of another session cannot answer it; nor can another POST.
        let other = m.open(head(HttpMethod::Get, Some(S2), version, Some("h1")));
        m.handle_request_end(other, 4.0);
        sse_head(&mut m, other);
        m.handle_response_body(other, format!("data: {}\n\n", result("7")).as_bytes(), 5.0);
        let p = post(
            &mut m,
            Some(S1),
            version,
            "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}",
            5.5,
        );
        sse_head(&mut m, p);
        m.handle_response_body(p, format!("data: {}\n\n", result("7")).as_bytes(), 5.6);
        assert_eq!(ends(&events(&mut m)), vec![]);
        // The session's GET, resumed with Last-Event-ID, does.
        let g = m.open(head(HttpMethod::Get, Some(S1), version, Some("h1")));
        m.handle_request_end(g, 6.0);
        sse_head(&mut m, g);
        m.handle_response_body(
            g,
            format!("id: ev-2\ndata: {}\n\n", result("7")).as_bytes(),
            8.0,
        );
        assert_eq!(
            ends(&events(&mut m)),
            vec![end("i1", 1.0, 8.0, Outcome::Result)],
            "{version:?}"
        );
    }
}

#[test]
fn without_an_event_id_or_under_2026_or_without_a_session_the_stream_end_is_final() {
    // No event id: lost at the end.
    let mut m = mount();
    let x = post(&mut m, Some(S1), V2025, &call("7", "slow"), 1.0);
    sse_head(&mut m, x);
    m.handle_response_body(
        x,
        b"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n",
        2.0,
    );
    m.handle_end(x, 3.0, ExchangeEnd::UpstreamBroke);
    assert_eq!(
        ends(&events(&mut m)),
        vec![end("i1", 1.0, 3.0, Outcome::Lost)]
    );
    // An empty id resets it: no id to resume from.
    let mut m = mount();
    let x = post(&mut m, Some(S1), V2025, &call("7", "slow"), 1.0);
    sse_head(&mut m, x);
    m.handle_response_body(x, b"id: 5\n\nid\n\n", 2.0);
    m.handle_end(x, 3.0, ExchangeEnd::UpstreamBroke);
    assert_eq!(
        ends(&events(&mut m)),
        vec![end("i1", 1.0, 3.0, Outcome::Lost)]
    );
    // 2026-07-28 has no resumption.
    let mut m = mount();
    resumable(&mut m, V2026, Some(S1));
    assert_eq!(
        ends(&events(&mut m)),
        vec![end("i1", 1.0, 3.0, Outcome::Lost)]
    );
    // Without a session the call runs on (the rule), but no GET can answer it: max_window.
    let mut m = mount();
    resumable(&mut m, V2025, None);
    let g = m.open(head(HttpMethod::Get, None, V2025, Some("h1")));
    sse_head(&mut m, g);
    m.handle_response_body(g, format!("data: {}\n\n", result("7")).as_bytes(), 8.0);
    assert_eq!(ends(&events(&mut m)), vec![]);
    m.handle_timeout(2000.0);
    assert_eq!(
        ends(&events(&mut m)),
        vec![end("i1", 1.0, 1001.0, Outcome::Lost)]
    );
}

#[test]
fn a_call_running_on_is_given_up_lost_max_window_after_its_start() {
    let mut m = mount();
    resumable(&mut m, V2025, Some(S1));
    assert_eq!(m.poll_timeout(), Some(1.0 + MAX_WINDOW));
    m.handle_timeout(1000.0);
    assert_eq!(ends(&events(&mut m)), vec![]);
    m.handle_timeout(1500.0);
    let evs = events(&mut m);
    assert_eq!(ends(&evs), vec![end("i1", 1.0, 1001.0, Outcome::Lost)]);
    assert_eq!(evs[0].at, 1500.0);
    assert_eq!(m.poll_timeout(), None);
    // The first end is final: a late answer ends nothing.
    let g = m.open(head(HttpMethod::Get, Some(S1), V2025, Some("h1")));
    sse_head(&mut m, g);
    m.handle_response_body(g, format!("data: {}\n\n", result("7")).as_bytes(), 1600.0);
    assert_eq!(events(&mut m), vec![]);
}

#[test]
fn delete_ends_the_running_calls_of_its_session_lost() {
    let mut m = mount();
    resumable(&mut m, V2025, Some(S1));
    let open = post(&mut m, Some(S1), V2025, &call("8", "b"), 4.0);
    let other = post(&mut m, Some(S2), V2025, &call("8", "c"), 4.5);
    let d = m.open(head(HttpMethod::Delete, Some(S1), V2025, Some("h1")));
    m.handle_request_end(d, 6.0);
    assert_eq!(
        ends(&events(&mut m)),
        vec![
            end("i1", 1.0, 6.0, Outcome::Lost),
            end("i2", 4.0, 6.0, Outcome::Lost)
        ]
    );
    json_reply(&mut m, open, 200, &result("8"), 7.0);
    json_reply(&mut m, other, 200, &result("8"), 7.0);
    assert_eq!(
        ends(&events(&mut m)),
        vec![end("i3", 4.5, 7.0, Outcome::Result)]
    );
}

// ---- Cancellation ---------------------------------------------------------------------------

fn cancel(id: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{id},"reason":"secret-reason"}}}}"#
    )
}

#[test]
fn the_clients_cancellation_ends_the_call_when_its_body_has_passed_and_the_first_end_is_final() {
    let mut m = mount();
    let x = post(&mut m, Some(S1), V2025, &call("1", "a"), 1.0);
    sse_head(&mut m, x);
    // Another host's cancellation, or another session's, names another call.
    let h2 = m.open(head(HttpMethod::Post, Some(S1), V2025, Some("h2")));
    m.handle_request_body(h2, cancel("1").as_bytes());
    m.handle_request_end(h2, 2.0);
    let _ = post(&mut m, Some(S2), V2025, &cancel("1"), 2.5);
    // One whose body has not passed does nothing yet.
    let c = m.open(head(HttpMethod::Post, Some(S1), V2025, Some("h1")));
    m.handle_request_body(c, cancel("1").as_bytes());
    assert_eq!(ends(&events(&mut m)), vec![]);
    m.handle_request_end(c, 4.0);
    assert_eq!(
        ends(&events(&mut m)),
        vec![end("i1", 1.0, 4.0, Outcome::Cancelled)]
    );
    m.handle_response_body(x, format!("data: {}\n\n", result("1")).as_bytes(), 5.0);
    m.handle_end(x, 6.0, ExchangeEnd::Complete);
    assert_eq!(events(&mut m), vec![]);
    assert_eq!(m.counts().problems.get(&Problem::UnmatchedCancel), Some(&2));
}

#[test]
fn under_2026_a_client_closing_the_stream_of_its_call_has_cancelled_it() {
    for (version, how, want) in [
        (V2026, ExchangeEnd::ClientClosed, Outcome::Cancelled),
        (V2026, ExchangeEnd::UpstreamBroke, Outcome::Lost),
        (Some("2025-06-18"), ExchangeEnd::ClientClosed, Outcome::Lost),
    ] {
        let mut m = mount();
        let x = post(&mut m, None, version, &call("1", "a"), 1.0);
        sse_head(&mut m, x);
        m.handle_end(x, 3.0, how);
        assert_eq!(
            ends(&events(&mut m)),
            vec![end("i1", 1.0, 3.0, want)],
            "{version:?} {how:?}"
        );
    }
}

// ---- Multi-round calls ----------------------------------------------------------------------

fn ask(id: &str, extra: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"ask","arguments":{{}},"_meta":{{"claudecode/toolUseId":"toolu_1"}}{extra}}}}}"#
    )
}

const INPUT_REQUIRED: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","inputRequests":{"c":{"method":"elicitation/create","params":{"message":"secret"}}},"requestState":"st\/A"}}"#;

#[test]
fn a_multi_round_call_is_one_interval_from_its_first_s_to_its_last_answer() {
    let mut m = mount();
    let x = post(&mut m, None, V2026, &ask("1", ""), 1.0);
    json_reply(&mut m, x, 200, INPUT_REQUIRED, 2.0);
    assert_eq!(ends(&events(&mut m)), vec![]);
    // The retry carries the state (escaped another way) and the input, under a new id.
    let y = post(
        &mut m,
        None,
        V2026,
        &ask(
            "2",
            r#","inputResponses":{"c":{"action":"accept"}},"requestState":"st/\u0041""#,
        ),
        5.0,
    );
    json_reply(&mut m, y, 200, &result("2"), 9.0);
    let evs = events(&mut m);
    assert_eq!(starts(&evs), vec![]);
    let EventKind::McpInterval {
        start,
        end,
        outcome,
        rounds,
        ..
    } = &evs[0].kind
    else {
        panic!()
    };
    assert_eq!((*start, *end, *outcome), (1.0, 9.0, Outcome::Result));
    assert_eq!(
        *rounds,
        Some(Rounds {
            rounds: 2,
            input_wait: 3.0,
            unanswered: false
        })
    );
}

#[test]
fn a_retry_from_another_host_or_with_another_state_continues_nothing() {
    let mut m = mount();
    let x = post(&mut m, None, V2026, &ask("1", ""), 1.0);
    json_reply(&mut m, x, 200, INPUT_REQUIRED, 2.0);
    assert_eq!(starts(&events(&mut m)), vec![("i1".to_string(), 1.0)]);
    let y = m.open(head(HttpMethod::Post, None, V2026, Some("h2")));
    m.handle_request_body(y, ask("2", r#","requestState":"st/A""#).as_bytes());
    m.handle_request_end(y, 5.0);
    assert_eq!(starts(&events(&mut m)), vec![("i2".to_string(), 5.0)]);
    let z = post(
        &mut m,
        None,
        V2026,
        &ask("3", r#","requestState":"other""#),
        6.0,
    );
    let evs = events(&mut m);
    // A new call for the same tool use: the waiting one ended, unanswered.
    assert_eq!(starts(&evs), vec![("i3".to_string(), 6.0)]);
    assert_eq!(ends(&evs), vec![end("i1", 1.0, 6.0, Outcome::Cancelled)]);
    let _ = z;
}

#[test]
fn no_continuation_within_max_window_ends_the_call_cancelled_as_from_the_wrapper() {
    let mut m = mount();
    let x = post(&mut m, None, V2026, &ask("1", ""), 1.0);
    json_reply(&mut m, x, 200, INPUT_REQUIRED, 2.0);
    assert_eq!(m.poll_timeout(), Some(2.0 + MAX_WINDOW));
    m.handle_timeout(5000.0);
    let evs = events(&mut m);
    let EventKind::McpInterval {
        end,
        outcome,
        rounds,
        ..
    } = &evs.last().unwrap().kind
    else {
        panic!()
    };
    assert_eq!((*end, *outcome), (1002.0, Outcome::Cancelled));
    assert_eq!(
        *rounds,
        Some(Rounds {
            rounds: 1,
            input_wait: 1000.0,
            unanswered: true
        })
    );
}

// ---- Stop, counts, what is never written -----------------------------------------------------

#[test]
fn a_stop_ends_every_running_call_lost() {
    let mut m = mount();
    let _ = post(&mut m, Some(S1), V2025, &call("1", "a"), 1.0);
    resumable(&mut m, V2025, Some(S2));
    let x = post(&mut m, None, V2026, &ask("1", ""), 3.0);
    json_reply(&mut m, x, 200, INPUT_REQUIRED, 4.0);
    m.handle_stop(10.0);
    assert_eq!(
        ends(&events(&mut m)),
        vec![
            end("i1", 1.0, 10.0, Outcome::Lost),
            end("i2", 1.0, 10.0, Outcome::Lost),
            end("i3", 3.0, 10.0, Outcome::Cancelled),
        ]
    );
    assert_eq!(m.running(), 0);
}

#[test]
fn everything_else_is_counted_by_method_status_and_mcp_method_word() {
    let mut m = mount();
    let x = post(
        &mut m,
        None,
        Some("2026-07-28"),
        r#"{"jsonrpc":"2.0","id":0,"method":"server/discover","params":{}}"#,
        1.0,
    );
    json_reply(
        &mut m,
        x,
        200,
        r#"{"jsonrpc":"2.0","id":0,"error":{"code":-32601,"message":"m"}}"#,
        2.0,
    );
    let x = post(
        &mut m,
        Some(S1),
        V2025,
        r#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"},{"jsonrpc":"2.0","id":2,"method":"secret/method"}]"#,
        3.0,
    );
    json_reply(&mut m, x, 404, "", 4.0);
    let g = m.open(head(HttpMethod::Get, Some(S1), V2025, None));
    m.handle_response_head(g, 405, None, None);
    m.handle_end(g, 5.0, ExchangeEnd::Complete);
    let c = m.counts();
    assert_eq!(c.exchanges.get(&(HttpMethod::Post, 200)), Some(&1));
    assert_eq!(c.exchanges.get(&(HttpMethod::Post, 404)), Some(&1));
    assert_eq!(c.exchanges.get(&(HttpMethod::Get, 405)), Some(&1));
    assert_eq!(
        c.messages.get(&(Sender::Client, "server/discover")),
        Some(&1)
    );
    assert_eq!(c.messages.get(&(Sender::Client, "tools/list")), Some(&1));
    assert_eq!(c.messages.get(&(Sender::Client, "other")), Some(&1));
    assert_eq!(c.messages.get(&(Sender::Server, "response")), Some(&1));
    assert!(!format!("{c:?}").contains("secret"));
    assert_eq!(events(&mut m), vec![]);
}

#[test]
fn no_session_id_header_value_argument_result_or_reason_reaches_an_event_or_a_count() {
    let mut m = mount();
    let session: &[u8] = b"canary-session-4f2a";
    let x = post(&mut m, Some(session), V2025, &call("1", "a"), 1.0);
    sse_head(&mut m, x);
    m.handle_response_body(
        x,
        format!("id: canary-event-id\ndata: {}\n\n", result("1")).as_bytes(),
        2.0,
    );
    m.handle_end(x, 3.0, ExchangeEnd::Complete);
    let _ = post(&mut m, Some(session), V2025, &cancel("9"), 4.0);
    let seen = format!("{:?}{:?}", events(&mut m), m.counts());
    for canary in ["canary", "secret", "session"] {
        assert!(!seen.contains(canary), "{canary} in {seen}");
    }
}

#[test]
fn compressed_bodies_are_read_as_their_plain_bytes() {
    use crate::observe::decode::tests::encode;
    for coding in ["gzip", "br", "zstd", "deflate"] {
        let mut m = mount();
        let x = m.open(RequestHead {
            content_encoding: Some(coding),
            ..head(HttpMethod::Post, None, V2025, Some("h1"))
        });
        m.handle_request_body(x, &encode(coding, call("1", "a").as_bytes()));
        m.handle_request_end(x, 1.0);
        m.handle_response_head(x, 200, Some("text/event-stream"), Some(coding));
        let body = encode(coding, format!("data: {}\n\n", result("1")).as_bytes());
        m.handle_response_body(x, &body, 2.0);
        m.handle_end(x, 3.0, ExchangeEnd::Complete);
        // Compressed bytes may sit in the decoder until the end: e is when they came out.
        let got = ends(&events(&mut m));
        assert_eq!(got.len(), 1, "{coding}");
        assert_eq!(got[0].3, Outcome::Result, "{coding}");
    }
    // An unknown coding gives no interval and is counted.
    let mut m = mount();
    let x = m.open(RequestHead {
        content_encoding: Some("compress"),
        ..head(HttpMethod::Post, None, V2025, Some("h1"))
    });
    m.handle_request_body(x, call("1", "a").as_bytes());
    m.handle_request_end(x, 1.0);
    assert_eq!(events(&mut m), vec![]);
    assert_eq!(
        m.counts().problems.get(&Problem::RequestUndecodable),
        Some(&1)
    );
}

#[test]
fn a_body_that_never_passes_whole_starts_nothing() {
    let mut m = mount();
    let x = m.open(head(HttpMethod::Post, None, V2025, Some("h1")));
    m.handle_request_body(x, call("1", "a").as_bytes());
    m.handle_end(x, 2.0, ExchangeEnd::ClientClosed);
    assert_eq!(events(&mut m), vec![]);
    assert_eq!(m.counts().problems.get(&Problem::RequestNotWhole), Some(&1));
    // A body cut short starts nothing either.
    let full = call("2", "a");
    let _ = post(&mut m, None, V2025, &full[..full.len() - 1], 3.0);
    assert_eq!(events(&mut m), vec![]);
}

// ---- Hostile input ----------------------------------------------------------------------------

/// One exchange's script: a request body and an SSE response, each fed in the given pieces
/// (the response's stamped with its piece number), then ended.
fn run_split(request: &[&[u8]], response: &[(&[u8], Millis)], how: ExchangeEnd) -> Vec<McpEvent> {
    let mut m = mount();
    let x = m.open(head(HttpMethod::Post, Some(S1), V2025, Some("h1")));
    for p in request {
        m.handle_request_body(x, p);
    }
    m.handle_request_end(x, 1.0);
    sse_head(&mut m, x);
    for (p, t) in response {
        m.handle_response_body(x, p, *t);
    }
    m.handle_end(x, 100.0, how);
    events(&mut m)
}

fn stream_script() -> (String, String) {
    let req = format!("[{},\n {}]", call("1", "a"), call("\"b\"", "é漢"));
    let resp = format!(
        "\u{feff}: hi\r\nevent: message\r\ndata: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}}\r\n\r\ndata: {}\r\ndata:\r\n\r\nid: 3\rdata:{}\r\r",
        r#"{"jsonrpc":"2.0","id":"b","result":{"content":[{"type":"text","text":"é \" \\ 漢"}]}"#.to_string() + "}",
        result("1")
    );
    (req, resp)
}

#[test]
fn bytes_split_at_any_offset_give_the_same_events_at_the_piece_holding_the_decisive_byte() {
    let (req, resp) = stream_script();
    let (req, resp) = (req.as_bytes(), resp.as_bytes());
    // Byte by byte, each byte stamped with 10 + its offset: e is then (10 +) the offset of the
    // byte that completed each message (the dispatching line end).
    let bytewise: Vec<(&[u8], Millis)> = resp
        .chunks(1)
        .enumerate()
        .map(|(i, b)| (b, 10.0 + i as f64))
        .collect();
    let reqwise: Vec<&[u8]> = req.chunks(1).collect();
    let base = ends(&run_split(&reqwise, &bytewise, ExchangeEnd::Complete));
    assert_eq!(base.len(), 2, "{base:?}");
    assert!(base.iter().all(|e| e.3 == Outcome::Result));
    for k in 0..=resp.len() {
        let (a, b) = resp.split_at(k);
        let got = ends(&run_split(
            &[&req[..k.min(req.len())], &req[k.min(req.len())..]],
            &[(a, 10.0), (b, 11.0)],
            ExchangeEnd::Complete,
        ));
        let want: Vec<_> = base
            .iter()
            .map(|(i, s, e, o)| {
                (
                    i.clone(),
                    *s,
                    if (*e as usize - 10) < k { 10.0 } else { 11.0 },
                    *o,
                )
            })
            .collect();
        assert_eq!(got, want, "split at {k}");
    }
}

#[test]
fn a_stream_cut_at_any_offset_answers_exactly_the_calls_whose_event_was_dispatched() {
    let (req, resp) = stream_script();
    let resp = resp.as_bytes();
    let bytewise: Vec<(&[u8], Millis)> = resp
        .chunks(1)
        .enumerate()
        .map(|(i, b)| (b, 10.0 + i as f64))
        .collect();
    let base = ends(&run_split(
        &[req.as_bytes()],
        &bytewise,
        ExchangeEnd::Complete,
    ));
    for k in 0..=resp.len() {
        let got = ends(&run_split(
            &[req.as_bytes()],
            &[(&resp[..k], 10.0)],
            ExchangeEnd::UpstreamBroke,
        ));
        let mut want: Vec<_> = base
            .iter()
            .filter(|(_, _, e, _)| (*e as usize - 10) < k)
            .map(|(i, s, _, o)| (i.clone(), *s, 10.0, *o))
            .collect();
        // The event id (`id: 3`) comes before the last answer: once it has passed, an
        // unanswered call runs on; before, it is lost at the cut.
        let id_at = resp.windows(5).position(|w| w == b"id: 3").unwrap() + 5;
        for (i, s) in [("i1", 1.0)] {
            if !want.iter().any(|w| w.0 == i) && k <= id_at {
                want.push((i.to_string(), s, 100.0, Outcome::Lost));
            }
        }
        if !want.iter().any(|w| w.0 == "i2") {
            want.push(("i2".to_string(), 1.0, 100.0, Outcome::Lost));
        }
        let mut got = got;
        got.sort_by(|a, b| a.0.cmp(&b.0));
        want.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(got, want, "cut at {k}");
    }
}

#[test]
fn a_json_answer_cut_at_any_offset_is_no_answer_until_it_is_whole() {
    let body = result("1");
    for k in 0..=body.len() {
        let mut m = mount();
        let x = post(&mut m, None, V2025, &call("1", "a"), 1.0);
        m.handle_response_head(x, 200, Some("application/json"), None);
        m.handle_response_body(x, &body.as_bytes()[..k], 2.0);
        m.handle_end(x, 3.0, ExchangeEnd::UpstreamBroke);
        let want = if k == body.len() {
            end("i1", 1.0, 2.0, Outcome::Result)
        } else {
            end("i1", 1.0, 3.0, Outcome::Lost)
        };
        assert_eq!(ends(&events(&mut m)), vec![want], "cut at {k}");
    }
}

#[test]
fn a_32_mib_result_in_one_event_ends_its_call_in_bounded_memory() {
    let mut m = mount();
    let x = post(&mut m, None, V2025, &call("1", "a"), 1.0);
    sse_head(&mut m, x);
    m.handle_response_body(
        x,
        b"data: {\"jsonrpc\":\"2.0\",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"",
        2.0,
    );
    let chunk = "abc é \\\" ".repeat(64 * 1024 / 10);
    let mut fed = 0;
    while fed < 32 << 20 {
        m.handle_response_body(x, chunk.as_bytes(), 3.0);
        fed += chunk.len();
        let held = m.exchanges[&x].response.as_ref().unwrap().held();
        assert!(held <= 2 * chunk.len(), "{held} bytes held");
    }
    m.handle_response_body(x, b"\"}]},\"id\":1}\n\n", 4.0);
    m.handle_end(x, 5.0, ExchangeEnd::Complete);
    assert_eq!(
        ends(&events(&mut m)),
        vec![end("i1", 1.0, 4.0, Outcome::Result)]
    );
}

#[test]
fn invalid_utf8_and_deep_nesting_are_no_messages() {
    let mut m = mount();
    let mut bad = call("1", "a").into_bytes();
    let at = bad.len() - 10;
    bad[at] = 0xff;
    let x = m.open(head(HttpMethod::Post, None, V2025, Some("h1")));
    m.handle_request_body(x, &bad);
    m.handle_request_end(x, 1.0);
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let _ = post(&mut m, None, V2025, &deep, 2.0);
    assert_eq!(events(&mut m), vec![]);
    assert_eq!(
        m.counts().problems.get(&Problem::RequestUndecodable),
        Some(&2)
    );
    // In an answer: the call is not answered by it.
    let x = post(&mut m, None, V2025, &call("1", "a"), 3.0);
    sse_head(&mut m, x);
    let mut ans = format!("data: {}\n\n", result("1")).into_bytes();
    let at = ans.len() - 8;
    ans[at] = 0xc3;
    m.handle_response_body(x, &ans, 4.0);
    m.handle_response_body(x, format!("data: {deep}\n\n").as_bytes(), 5.0);
    m.handle_end(x, 6.0, ExchangeEnd::Complete);
    assert_eq!(
        ends(&events(&mut m)),
        vec![end("i1", 3.0, 6.0, Outcome::Lost)]
    );
}

#[test]
fn a_duplicate_id_in_one_post_ends_the_older_call_lost() {
    let mut m = mount();
    let x = post(
        &mut m,
        None,
        V2025,
        &format!("[{},{}]", call("1", "a"), call("1", "b")),
        1.0,
    );
    json_reply(&mut m, x, 200, &result("1"), 2.0);
    assert_eq!(
        ends(&events(&mut m)),
        vec![
            end("i1", 1.0, 1.0, Outcome::Lost),
            end("i2", 1.0, 2.0, Outcome::Result)
        ]
    );
    // The same id in two POSTs is two calls, each answered on its own exchange.
    let a = post(&mut m, None, V2025, &call("5", "a"), 3.0);
    let b = post(&mut m, None, V2025, &call("5", "b"), 4.0);
    json_reply(&mut m, b, 200, &result("5"), 5.0);
    json_reply(&mut m, a, 200, &result("5"), 6.0);
    assert_eq!(
        ends(&events(&mut m)),
        vec![
            end("i4", 4.0, 5.0, Outcome::Result),
            end("i3", 3.0, 6.0, Outcome::Result)
        ]
    );
}

#[test]
fn a_batch_of_ten_thousand_calls_is_bounded_and_counted_not_half_read() {
    let calls: Vec<String> = (0..10_000).map(|i| call(&i.to_string(), "a")).collect();
    let mut m = mount();
    let _ = post(&mut m, None, V2025, &format!("[{}]", calls.join(",")), 1.0);
    // Its skeleton is past the scanner's cap: no call is reported rather than some.
    assert_eq!(events(&mut m), vec![]);
    assert_eq!(
        m.counts().problems.get(&Problem::RequestUndecodable),
        Some(&1)
    );
    // A batch of a hundred is read whole, and its answer batch ends each.
    let calls: Vec<String> = (0..100).map(|i| call(&i.to_string(), "a")).collect();
    let answers: Vec<String> = (0..100).map(|i| result(&i.to_string())).collect();
    let x = post(&mut m, None, V2025, &format!("[{}]", calls.join(",")), 2.0);
    json_reply(&mut m, x, 200, &format!("[{}]", answers.join(",")), 3.0);
    let evs = events(&mut m);
    assert_eq!(starts(&evs).len(), 100);
    assert!(ends(&evs)
        .iter()
        .all(|e| e.3 == Outcome::Result && e.2 == 3.0));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any chunking of both bodies, every piece stamped alike, gives the events of the whole.
    #[test]
    fn any_chunking_gives_the_events_of_the_whole(
        req_cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..8),
        resp_cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..16),
    ) {
        let (req, resp) = stream_script();
        let cut = |bytes: &[u8], cuts: &[prop::sample::Index]| -> Vec<Vec<u8>> {
            let mut at: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
            at.push(0);
            at.push(bytes.len());
            at.sort();
            at.windows(2).map(|w| bytes[w[0]..w[1]].to_vec()).collect()
        };
        let rq = cut(req.as_bytes(), &req_cuts);
        let rs = cut(resp.as_bytes(), &resp_cuts);
        let rq: Vec<&[u8]> = rq.iter().map(Vec::as_slice).collect();
        let rs: Vec<(&[u8], Millis)> = rs.iter().map(|p| (p.as_slice(), 5.0)).collect();
        let whole = run_split(&[req.as_bytes()], &[(resp.as_bytes(), 5.0)], ExchangeEnd::Complete);
        prop_assert_eq!(ends(&whole).len(), 2);
        prop_assert_eq!(run_split(&rq, &rs, ExchangeEnd::Complete), whole);
    }
}
