use super::*;

fn request(head: &str) -> RequestHead {
    match parse_request(head.as_bytes()) {
        Parsed::Complete(len, r) => {
            assert_eq!(len, head.len(), "the whole head is used");
            r
        }
        Parsed::Partial => panic!("partial: {head:?}"),
        Parsed::Handover => panic!("handed over: {head:?}"),
    }
}

fn hands_over(head: &str) -> bool {
    matches!(parse_request(head.as_bytes()), Parsed::Handover)
}

/// The upstream head as the relay writes it for a mount at `http://127.0.0.1:9/base`.
fn upstream(r: &RequestHead) -> String {
    let path = format!("/base{}", r.target.strip_prefix("/up").unwrap_or(&r.target));
    String::from_utf8(upstream_head(r, &path, Some(b"127.0.0.1:9")).to_vec()).unwrap()
}

#[test]
fn a_head_still_arriving_is_partial() {
    let head = b"POST /up/v1/messages HTTP/1.1\r\nContent-Len";
    assert!(matches!(parse_request(head), Parsed::Partial));
}

#[test]
fn what_the_relay_does_not_frame_itself_is_handed_over() {
    for head in [
        // A body whose end only chunk framing tells; an expectation to answer; an upgrade.
        "POST /up/x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST /up/x HTTP/1.1\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n",
        "GET /up/x HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
        "GET /up/x HTTP/1.1\r\nUpgrade: h2c\r\n\r\n",
        // Ambiguous lengths.
        "POST /up/x HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
        "POST /up/x HTTP/1.1\r\nContent-Length: +3\r\n\r\n",
        // Methods with their own rules, other versions and targets.
        "HEAD /up/x HTTP/1.1\r\n\r\n",
        "CONNECT up:443 HTTP/1.1\r\n\r\n",
        "GET /up/x HTTP/1.0\r\n\r\n",
        "GET http://up/x HTTP/1.1\r\n\r\n",
        // Not HTTP at all.
        "\x16\x03\x01\x02\x00\x01\x00\x01\x7f\r\n\r\n",
    ] {
        assert!(hands_over(head), "{head:?}");
    }
    let huge = format!("GET /up/x HTTP/1.1\r\nx: {}\r\n", "a".repeat(MAX_HEAD));
    assert!(hands_over(&huge), "a head past the limit");
}

#[test]
fn the_upstream_head_changes_only_the_target_host_and_hop_by_hop_lines() {
    let r = request(
        "POST /up/v1/messages HTTP/1.1\r\nHost: relay\r\nX-Api-Key: k\r\nConnection: keep-alive, X-Hop\r\n\
         X-Hop: 1\r\nKeep-Alive: timeout=5\r\nTE: trailers\r\nContent-Length: 2\r\nAnthropic-Version: 2023\r\n\r\n",
    );
    assert_eq!(
        upstream(&r),
        "POST /base/v1/messages HTTP/1.1\r\nhost: 127.0.0.1:9\r\nX-Api-Key: k\r\n\
         Content-Length: 2\r\nAnthropic-Version: 2023\r\n\r\n"
    );
}

fn response(head: &str) -> ResponseHead {
    match parse_response(head.as_bytes()) {
        ResponseParsed::Complete(len, r) => {
            assert_eq!(len, head.len());
            r
        }
        _ => panic!("not a complete final response: {head:?}"),
    }
}

#[test]
fn the_response_framing_is_read_as_a_client_reads_it() {
    let r = response("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 9\r\n\r\n");
    assert!(matches!(r.framing, Framing::Chunked(_)) && r.reusable);
    let r = response("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n");
    assert!(matches!(r.framing, Framing::Length(9)) && r.reusable);
    let r = response("HTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\n");
    assert!(matches!(r.framing, Framing::Empty));
    // A body only the end of the connection ends: never reused.
    let r = response("HTTP/1.1 200 OK\r\n\r\n");
    assert!(matches!(r.framing, Framing::UntilClose) && !r.reusable);
    let r = response("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n");
    assert!(matches!(r.framing, Framing::UntilClose) && !r.reusable);
    let r = response("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\n");
    assert!(!r.reusable);
    let r = response("HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n");
    assert!(!r.reusable);
    assert!(matches!(
        parse_response(b"HTTP/1.1 103 Early Hints\r\nLink: x\r\n\r\nHTTP/1.1 200 OK\r\n"),
        ResponseParsed::Interim(37)
    ));
    for bad in [
        "HTTP/1.1 101 Switching Protocols\r\n\r\n",
        // Found by the h1_response fuzz target: written on as `0`, no client could read it.
        "HTTP/1.1 000 OK\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 099 Nearly\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
        "garbage\r\n\r\n",
        // Found by the differential check against hyper's client (tests/hyper_agrees.rs): an
        // HTTP/1.0 response has no transfer codings, so its framing is faulty.
        "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.0 200 OK\r\nTransfer-Encoding: 0\r\n\r\n",
    ] {
        assert!(
            matches!(parse_response(bad.as_bytes()), ResponseParsed::Bad),
            "{bad:?}"
        );
    }
}

#[test]
fn the_client_head_keeps_the_status_line_and_end_to_end_lines() {
    let r = response(
        "HTTP/1.1 429 Slow Down\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\
         Connection: X-Hop\r\nX-Hop: 1\r\nRetry-After: 3\r\n\r\n",
    );
    let head = client_head(&r, false);
    assert_eq!(
        std::str::from_utf8(&head).unwrap(),
        "HTTP/1.1 429 Slow Down\r\nContent-Type: text/event-stream\r\nRetry-After: 3\r\n\
         transfer-encoding: chunked\r\n\r\n"
    );
    let r = response("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nKeep-Alive: timeout=1\r\n\r\n");
    assert_eq!(
        std::str::from_utf8(&client_head(&r, true)).unwrap(),
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nconnection: close\r\n\r\n"
    );
    // A body the upstream ends by closing goes on in chunks of the relay's own.
    let r = response("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: identity\r\n\r\n");
    assert_eq!(
        std::str::from_utf8(&client_head(&r, false)).unwrap(),
        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    );
}

#[test]
fn connection_never_removes_framing_and_lengths_are_the_relays_own() {
    // `Connection: Content-Length` once dropped the length and still sent the body: the
    // upstream read the body as a second request (request smuggling).
    let r = request(
        "POST /up/v1/messages HTTP/1.1\r\nHost: relay\r\nConnection: Content-Length, Host, X-Hop\r\n\
         X-Hop: 1\r\nContent-Length: 7\r\ncontent-length: 07\r\n\r\n",
    );
    assert_eq!(r.body_len, 7);
    assert_eq!(
        upstream(&r),
        "POST /base/v1/messages HTTP/1.1\r\nhost: 127.0.0.1:9\r\nContent-Length: 7\r\n\r\n"
    );
    // The same on the way back: the client gets the length the relay frames the body with.
    let r = response(
        "HTTP/1.1 200 OK\r\nConnection: Content-Length, Transfer-Encoding\r\nContent-Length: 5\r\n\
         X-Kept: 1\r\n\r\n",
    );
    assert!(matches!(r.framing, Framing::Length(5)) && r.reusable);
    assert_eq!(
        std::str::from_utf8(&client_head(&r, false)).unwrap(),
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Kept: 1\r\n\r\n"
    );
}

#[test]
fn a_bodyless_status_that_announces_a_body_is_never_reused() {
    for (head, reusable) in [
        (
            "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
            false,
        ),
        (
            "HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n",
            false,
        ),
        (
            "HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n",
            false,
        ),
        ("HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n", true),
        // A 304's length is the representation's, not a body's.
        (
            "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n",
            true,
        ),
    ] {
        let r = response(head);
        assert!(matches!(r.framing, Framing::Empty), "{head:?}");
        assert_eq!(r.reusable, reusable, "{head:?}");
    }
    let r = response("HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n");
    assert_eq!(
        std::str::from_utf8(&client_head(&r, false)).unwrap(),
        "HTTP/1.1 204 No Content\r\n\r\n"
    );
    let r = response("HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n");
    assert_eq!(
        std::str::from_utf8(&client_head(&r, false)).unwrap(),
        "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n"
    );
}
