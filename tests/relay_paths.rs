//! Request paths through the relay binary, on both of its doors (the verbatim path takes a
//! plain request; a chunked request body hands the connection to hyper): nothing leaves a
//! mount's base path upstream, and a model route is observed however it is spelled
//! (crates/relay/src/mounts.rs).

mod support;

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// An upstream that answers every request with a short Claude turn as SSE, recording the
/// paths it was asked for.
async fn recording_upstream() -> (Upstream, Arc<Mutex<Vec<String>>>) {
    let paths = Arc::new(Mutex::new(Vec::new()));
    let seen = paths.clone();
    let up = Upstream::start(
        None,
        handler(move |req| {
            seen.lock().unwrap().push(req.uri().path().to_string());
            async move {
                read_body(req.into_body()).await;
                let (tx, body) = channel_body();
                tokio::spawn(async move {
                    for event in claude_turn("msg_paths", &[]) {
                        if tx.send(Ok(Bytes::from(event))).await.is_err() {
                            return;
                        }
                    }
                });
                sse_response(body)
            }
        }),
    )
    .await;
    (up, paths)
}

/// Sends `POST target` with a small JSON body on a fresh connection, through the verbatim
/// path (`Content-Length`) or hyper's door (chunked), and returns the whole answer.
async fn post(relay: &Relay, target: &str, chunked: bool) -> String {
    let body = r#"{"model":"m","stream":true}"#;
    let framing = if chunked {
        format!(
            "Transfer-Encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
            body.len()
        )
    } else {
        format!("Content-Length: {}\r\n\r\n{body}", body.len())
    };
    let mut tcp = TcpStream::connect(relay.addr).await.unwrap();
    let req = format!(
        "POST {target} HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\n\
         x-claude-code-session-id: sess-paths\r\nConnection: close\r\n{framing}"
    );
    tcp.write_all(req.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(WAIT, tcp.read_to_end(&mut answer))
        .await
        .expect("an answer within the wait bound")
        .unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dot_segment_in_any_spelling_never_reaches_the_upstream() {
    let (up, paths) = recording_upstream().await;
    let relay = Relay::start(&[
        "--upstream".into(),
        up.mount("chatgpt", "/backend-api/codex"),
    ]);
    let mut failures = Vec::new();
    for target in [
        "/chatgpt/../../../admin/keys",
        "/chatgpt/%2e%2e/%2e%2e/%2e%2e/admin/keys",
        "/chatgpt/..\\..\\..\\admin\\keys",
        "/chatgpt/..%2f..%2f..%2fadmin/keys",
        "/chatgpt/./responses",
        "/chatgpt/..;/..;/admin/keys",
    ] {
        for chunked in [false, true] {
            let answer = post(&relay, target, chunked).await;
            if !answer.starts_with("HTTP/1.1 400") || !answer.contains(r#""class":"bad_path""#) {
                failures.push(format!("{target} (chunked: {chunked}): {answer}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        paths.lock().unwrap().is_empty(),
        "the upstream was asked for {:?}",
        paths.lock().unwrap()
    );
    // The ordinary path still goes through, under the base path.
    let answer = post(&relay, "/chatgpt/responses", false).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(*paths.lock().unwrap(), ["/backend-api/codex/responses"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_route_is_observed_under_every_spelling_a_normalizing_upstream_serves() {
    let (up, paths) = recording_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let (mut relay, _, capture) = relay_with_files(&up, "anthropic", dir.path(), &[]);
    let spellings = [
        "/anthropic/v1/messages",
        "/anthropic/v1/%6dessages",
        "/anthropic//v1/messages",
        "/anthropic/v1/messages;x",
    ];
    for target in spellings {
        for chunked in [false, true] {
            let answer = post(&relay, target, chunked).await;
            assert!(answer.starts_with("HTTP/1.1 200"), "{target}: {answer}");
            assert!(answer.contains("message_stop"), "{target}: {answer}");
        }
    }
    let forwarded = paths.lock().unwrap().clone();
    // The client's bytes went upstream as they were.
    for target in spellings {
        let want = target.strip_prefix("/anthropic").unwrap();
        assert_eq!(
            forwarded.iter().filter(|p| *p == want).count(),
            2,
            "{target} in {forwarded:?}"
        );
    }
    assert!(relay.stop().success(), "{}", relay.log());
    let opened = capture_of_type(&capture, "stream_open").len();
    assert_eq!(
        opened,
        spellings.len() * 2,
        "every spelling's stream observed\n{}",
        relay.log()
    );
}
