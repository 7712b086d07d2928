use super::*;
use crate::head::{parse_request, Parsed};

const T: Timeouts = Timeouts {
    response: Duration::from_secs(600),
    client_body_idle: Duration::from_secs(60),
    upstream_body_idle: Duration::from_secs(300),
    send: Duration::from_secs(60),
};

fn request(head: &str) -> RequestHead {
    match parse_request(head.as_bytes()) {
        Parsed::Complete(len, h) if len == head.len() => h,
        _ => panic!("not taken whole: {head:?}"),
    }
}

fn secs(t0: Instant, s: u64) -> Instant {
    t0 + Duration::from_secs(s)
}

/// Every event queued now.
fn events(ex: &mut Exchange) -> Vec<Event> {
    std::iter::from_fn(|| ex.poll_event()).collect()
}

/// The next client write, concatenated, and the observer's copy.
fn transmit(ex: &mut Exchange, now: Instant) -> (Vec<u8>, Option<Bytes>) {
    let mut out = Vec::new();
    let copy = ex.poll_transmit(&mut out, true);
    ex.handle_client_written(now);
    (out.concat(), copy)
}

fn upstream(ex: &mut Exchange, bytes: &[u8], now: Instant) -> BytesMut {
    let mut buf = BytesMut::from(bytes);
    ex.handle_upstream_bytes(&mut buf, now);
    buf
}

#[test]
fn a_request_body_goes_up_its_length_and_no_further() {
    let t0 = Instant::now();
    let mut ex = Exchange::new(
        &request("POST /x HTTP/1.1\r\nContent-Length: 5\r\n\r\n"),
        T,
        t0,
    );
    assert!(!ex.wants_request_body(), "the head goes up first");
    ex.handle_upstream_written(t0);
    assert!(ex.wants_request_body() && ex.wants_client_read(0));
    let mut client = BytesMut::from(&b"hel"[..]);
    ex.handle_client_bytes(&mut client, t0);
    assert!(client.is_empty());
    // One piece in flight: no more is taken until it is written.
    assert!(!ex.wants_request_body());
    assert_eq!(ex.poll_transmit_upstream().as_deref(), Some(&b"hel"[..]));
    assert!(!ex.wants_request_body(), "the piece is not written yet");
    ex.handle_upstream_written(t0);
    // The rest of the body and, behind it, a pipelined request: only the body goes up.
    let mut client = BytesMut::from(&b"loGET /smuggled HTTP/1.1\r\n\r\n"[..]);
    ex.handle_client_bytes(&mut client, t0);
    assert_eq!(&client[..], b"GET /smuggled HTTP/1.1\r\n\r\n");
    assert_eq!(ex.poll_transmit_upstream().as_deref(), Some(&b"lo"[..]));
    ex.handle_upstream_written(t0);
    assert!(!ex.wants_request_body());
    assert_eq!(
        events(&mut ex),
        vec![
            Event::RequestBody(Bytes::from_static(b"hel")),
            Event::RequestBody(Bytes::from_static(b"lo")),
            Event::RequestEnd
        ]
    );
}

#[test]
fn a_length_response_passes_byte_for_byte_and_keeps_both_connections() {
    let t0 = Instant::now();
    let mut ex = Exchange::new(&request("GET /x HTTP/1.1\r\n\r\n"), T, t0);
    assert_eq!(events(&mut ex), vec![Event::RequestEnd]);
    let rest = upstream(
        &mut ex,
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 6\r\n\r\nabc",
        t0,
    );
    assert!(rest.is_empty());
    assert_eq!(
        events(&mut ex),
        vec![Event::ResponseHead {
            status: 200,
            content_type: Some(Bytes::from_static(b"text/plain")),
            content_encoding: None,
        }]
    );
    let (out, copy) = transmit(&mut ex, t0);
    assert_eq!(
        out,
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 6\r\n\r\nabc"
    );
    assert_eq!(copy.as_deref(), Some(&b"abc"[..]));
    assert!(!ex.is_ended());
    upstream(&mut ex, b"def", t0);
    let (out, copy) = transmit(&mut ex, t0);
    assert_eq!(
        (&out[..], copy.as_deref()),
        (&b"def"[..], Some(&b"def"[..]))
    );
    assert_eq!(
        events(&mut ex),
        vec![Event::End(End::Done {
            keep_client: true,
            reuse_upstream: true
        })]
    );
}

#[test]
fn a_chunked_body_leaves_one_chunk_per_read_with_its_trailers() {
    let t0 = Instant::now();
    let mut ex = Exchange::new(&request("GET /x HTTP/1.1\r\n\r\n"), T, t0);
    upstream(
        &mut ex,
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n",
        t0,
    );
    let (out, copy) = transmit(&mut ex, t0);
    assert_eq!(
        out,
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nabcde\r\n"
    );
    assert_eq!(copy.as_deref(), Some(&b"abcde"[..]));
    upstream(&mut ex, b"0\r\nx-t: 1\r\n\r\n", t0);
    let (out, copy) = transmit(&mut ex, t0);
    assert_eq!(out, b"0\r\nx-t: 1\r\n\r\n");
    assert_eq!(copy, None, "no payload, no copy");
    assert!(ex.is_ended());
}

#[test]
fn many_small_chunks_of_one_read_leave_joined() {
    let t0 = Instant::now();
    let mut ex = Exchange::new(&request("GET /x HTTP/1.1\r\n\r\n"), T, t0);
    upstream(
        &mut ex,
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        t0,
    );
    transmit(&mut ex, t0);
    let body: Vec<u8> = (0..20)
        .flat_map(|i| format!("1\r\n{}\r\n", i % 10).into_bytes())
        .collect();
    upstream(&mut ex, &body, t0);
    let mut out = Vec::new();
    let copy = ex.poll_transmit(&mut out, false);
    assert_eq!(copy, None, "no copy asked for");
    assert!(out.len() <= MAX_PIECES);
    assert_eq!(out.concat(), b"14\r\n01234567890123456789\r\n");
}

#[test]
fn an_upstream_that_answers_early_leaves_neither_connection_reusable() {
    let t0 = Instant::now();
    let mut ex = Exchange::new(
        &request("POST /x HTTP/1.1\r\nContent-Length: 100\r\n\r\n"),
        T,
        t0,
    );
    ex.handle_upstream_written(t0);
    let mut client = BytesMut::from(&b"0123456789"[..]);
    ex.handle_client_bytes(&mut client, t0);
    upstream(
        &mut ex,
        b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\n\r\n",
        t0,
    );
    assert_eq!(
        ex.poll_transmit_upstream(),
        None,
        "the rest of the request is not sent"
    );
    assert!(!ex.wants_request_body());
    let (out, _) = transmit(&mut ex, t0);
    assert!(out.ends_with(b"connection: close\r\n\r\n"));
    assert_eq!(
        events(&mut ex).pop(),
        Some(Event::End(End::Done {
            keep_client: false,
            reuse_upstream: false
        }))
    );
}

#[test]
fn bytes_after_the_body_or_a_close_keep_the_upstream_from_reuse() {
    let t0 = Instant::now();
    let head = "GET /x HTTP/1.1\r\n\r\n";
    let mut ex = Exchange::new(&request(head), T, t0);
    let rest = upstream(
        &mut ex,
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA",
        t0,
    );
    assert_eq!(&rest[..], b"EXTRA");
    transmit(&mut ex, t0);
    assert_eq!(
        events(&mut ex).pop(),
        Some(Event::End(End::Done {
            keep_client: true,
            reuse_upstream: false
        }))
    );
    let mut ex = Exchange::new(&request(head), T, t0);
    upstream(&mut ex, b"HTTP/1.1 204 No Content\r\n\r\nX", t0);
    transmit(&mut ex, t0);
    assert!(matches!(
        events(&mut ex).pop(),
        Some(Event::End(End::Done {
            reuse_upstream: false,
            ..
        }))
    ));
    let mut ex = Exchange::new(&request(head), T, t0);
    upstream(
        &mut ex,
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
        t0,
    );
    transmit(&mut ex, t0);
    assert!(matches!(
        events(&mut ex).pop(),
        Some(Event::End(End::Done {
            keep_client: true,
            reuse_upstream: false,
        }))
    ));
    let mut ex = Exchange::new(
        &request("GET /x HTTP/1.1\r\nConnection: close\r\n\r\n"),
        T,
        t0,
    );
    upstream(&mut ex, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", t0);
    let (out, _) = transmit(&mut ex, t0);
    assert!(out.ends_with(b"connection: close\r\n\r\n"));
    assert!(matches!(
        events(&mut ex).pop(),
        Some(Event::End(End::Done {
            keep_client: false,
            ..
        }))
    ));
}

#[test]
fn a_body_until_close_ends_at_the_close_and_a_length_body_cut_short_is_broken() {
    let t0 = Instant::now();
    let mut ex = Exchange::new(&request("GET /x HTTP/1.1\r\n\r\n"), T, t0);
    upstream(&mut ex, b"HTTP/1.1 200 OK\r\n\r\nall", t0);
    let (out, _) = transmit(&mut ex, t0);
    assert!(out.ends_with(b"transfer-encoding: chunked\r\n\r\n3\r\nall\r\n"));
    ex.handle_upstream_closed(false);
    let (out, _) = transmit(&mut ex, t0);
    assert_eq!(out, b"0\r\n\r\n");
    assert!(matches!(
        events(&mut ex).pop(),
        Some(Event::End(End::Done {
            reuse_upstream: false,
            ..
        }))
    ));

    let mut ex = Exchange::new(&request("GET /x HTTP/1.1\r\n\r\n"), T, t0);
    upstream(
        &mut ex,
        b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc",
        t0,
    );
    transmit(&mut ex, t0);
    ex.handle_upstream_closed(false);
    assert_eq!(
        events(&mut ex).pop(),
        Some(Event::End(End::Cut(Cut::UpstreamBroken)))
    );
    assert!(!ex.has_transmit(), "nothing more is written after a cut");
}

#[test]
fn a_head_no_client_could_read_or_no_head_at_all_is_answered_by_the_relay() {
    let t0 = Instant::now();
    let mut ex = Exchange::new(&request("GET /x HTTP/1.1\r\n\r\n"), T, t0);
    upstream(
        &mut ex,
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        t0,
    );
    assert_eq!(
        events(&mut ex).pop(),
        Some(Event::End(End::Unanswered {
            why: Unanswered::BadHead,
            keep_client: true
        }))
    );
    // Before the whole request body came, the client connection cannot be kept.
    let mut ex = Exchange::new(
        &request("POST /x HTTP/1.1\r\nContent-Length: 9\r\n\r\n"),
        T,
        t0,
    );
    ex.handle_upstream_closed(true);
    assert_eq!(
        events(&mut ex).pop(),
        Some(Event::End(End::Unanswered {
            why: Unanswered::UpstreamFailed,
            keep_client: false
        }))
    );
}

#[test]
fn the_response_deadline_counts_from_the_start() {
    let t0 = Instant::now();
    let mut ex = Exchange::new(&request("GET /x HTTP/1.1\r\n\r\n"), T, t0);
    assert_eq!(ex.poll_timeout(), Some(secs(t0, 600)));
    ex.handle_timeout(secs(t0, 599));
    assert!(!ex.is_ended());
    ex.handle_timeout(secs(t0, 600));
    assert_eq!(
        events(&mut ex).pop(),
        Some(Event::End(End::Unanswered {
            why: Unanswered::Timeout,
            keep_client: true
        }))
    );
}

#[test]
fn a_stalled_request_body_counts_only_while_the_client_owes_it() {
    let t0 = Instant::now();
    let mut ex = Exchange::new(
        &request("POST /x HTTP/1.1\r\nContent-Length: 9\r\n\r\n"),
        T,
        t0,
    );
    // While the head goes up (a connect first), the client owes nothing yet.
    assert_eq!(ex.poll_timeout(), Some(secs(t0, 600)));
    ex.handle_upstream_written(t0);
    assert_eq!(ex.poll_timeout(), Some(secs(t0, 60)));
    let mut client = BytesMut::from(&b"abc"[..]);
    ex.handle_client_bytes(&mut client, secs(t0, 10));
    ex.poll_transmit_upstream();
    // The upstream takes its time with the piece: the client owes nothing meanwhile.
    assert_eq!(ex.poll_timeout(), Some(secs(t0, 600)));
    ex.handle_timeout(secs(t0, 100));
    assert!(!ex.is_ended());
    ex.handle_upstream_written(secs(t0, 100));
    assert_eq!(ex.poll_timeout(), Some(secs(t0, 160)));
    ex.handle_timeout(secs(t0, 160));
    assert_eq!(
        events(&mut ex).pop(),
        Some(Event::End(End::Cut(Cut::ClientIdle)))
    );
}

#[test]
fn a_body_deadline_moves_with_progress_and_a_waiting_write_has_its_own() {
    let t0 = Instant::now();
    let mut ex = Exchange::new(&request("GET /x HTTP/1.1\r\n\r\n"), T, t0);
    upstream(&mut ex, b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", t0);
    transmit(&mut ex, t0);
    assert_eq!(ex.poll_timeout(), Some(secs(t0, 300)));
    upstream(&mut ex, b"abc", secs(t0, 200));
    // A timer set for the old deadline fires: the deadline moved, nothing ends.
    ex.handle_timeout(secs(t0, 300));
    assert!(!ex.is_ended());
    let mut out = Vec::new();
    ex.poll_transmit(&mut out, false);
    ex.handle_client_write_waits(secs(t0, 210));
    assert_eq!(ex.poll_timeout(), Some(secs(t0, 270)));
    assert!(!ex.wants_upstream_read(), "one read in flight");
    ex.handle_timeout(secs(t0, 270));
    assert_eq!(
        events(&mut ex).pop(),
        Some(Event::End(End::Cut(Cut::ClientStopped)))
    );

    let mut ex = Exchange::new(&request("GET /x HTTP/1.1\r\n\r\n"), T, t0);
    upstream(&mut ex, b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", t0);
    transmit(&mut ex, t0);
    ex.handle_timeout(secs(t0, 300));
    assert_eq!(
        events(&mut ex).pop(),
        Some(Event::End(End::Cut(Cut::UpstreamIdle)))
    );
}

#[test]
fn a_client_that_leaves_cuts_the_exchange_once() {
    let t0 = Instant::now();
    let mut ex = Exchange::new(&request("GET /x HTTP/1.1\r\n\r\n"), T, t0);
    upstream(&mut ex, b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", t0);
    assert!(ex.wants_client_read(0) && !ex.wants_client_read(MAX_AHEAD));
    ex.handle_client_closed();
    ex.handle_client_closed();
    ex.handle_upstream_closed(true);
    assert_eq!(
        events(&mut ex),
        vec![
            Event::RequestEnd,
            Event::ResponseHead {
                status: 200,
                content_type: None,
                content_encoding: None
            },
            Event::End(End::Cut(Cut::ClientGone))
        ]
    );
    assert!(!ex.has_transmit() && !ex.wants_upstream_read() && ex.poll_timeout().is_none());
}

#[test]
fn chunk_size_lines_are_hex_and_crlf_and_stay_apart() {
    let mut lines = BytesMut::new();
    let lens = [
        0,
        1,
        9,
        10,
        15,
        16,
        255,
        256,
        4095,
        65_536,
        1 << 40,
        usize::MAX,
    ];
    // Many lines from one buffer: each must keep its bytes once later ones are cut.
    let mut cut = Vec::new();
    for _ in 0..200 {
        for &len in &lens {
            cut.push(chunk_size_line(len, &mut lines));
        }
    }
    for (line, len) in cut.iter().zip(lens.iter().cycle()) {
        assert_eq!(&line[..], format!("{len:x}\r\n").as_bytes());
    }
}
