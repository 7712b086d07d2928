//! The relay's exchange log line says what failed, in a fixed word of ours, and nothing when
//! nothing did; its duration is rounded for people.

mod support;

use support::*;

#[tokio::test]
async fn a_failed_exchange_logs_its_class_and_a_good_one_logs_none() {
    let good = Upstream::start(
        None,
        handler(|req| async move {
            let _ = read_body(req.into_body()).await;
            sse_response(full("event: ping\ndata: {}\n\n"))
        }),
    )
    .await;
    // Nothing listens on a port that was just let go of: the connection is refused.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = closed.local_addr().unwrap();
    drop(closed);
    let mut relay = Relay::start(&[
        "--upstream".to_string(),
        good.mount("good", ""),
        "--upstream".to_string(),
        format!("dead=http://{dead}"),
    ]);
    for (mount, want) in [("good", 200), ("dead", 502)] {
        let req = request("GET", relay.addr, &format!("/{mount}/v1/models"))
            .body(full(""))
            .unwrap();
        let res = send(relay.addr, req).await.expect("a response");
        assert_eq!(res.status(), want, "{mount}");
        let _ = collect(res.into_body()).await;
    }
    relay.wait_log("mount=dead");
    relay.stop();
    let log = relay.log();
    let line = |mount: &str| {
        log.lines()
            .find(|l| l.contains(" exchange") && l.contains(&format!("mount={mount} ")))
            .unwrap_or_else(|| panic!("no exchange line for {mount}: {log}"))
            .to_string()
    };
    let (good_line, dead_line) = (line("good"), line("dead"));
    assert!(!good_line.contains("failure"), "{good_line}");
    assert!(dead_line.contains("status=502"), "{dead_line}");
    assert!(dead_line.contains("failure=refused"), "{dead_line}");
    assert!(!good_line.contains("<withheld>"), "{good_line}");
    assert!(!dead_line.contains("<withheld>"), "{dead_line}");
    // Milliseconds with at most two decimals, or three significant digits below 0.1 (a
    // refused connection can fail in 70 us).
    for l in [&good_line, &dead_line] {
        let ms = l
            .split_whitespace()
            .find_map(|w| w.strip_prefix("ms="))
            .unwrap_or_else(|| panic!("no ms in {l}"));
        let fraction = ms.split('.').nth(1).unwrap_or("");
        let significant = fraction.trim_start_matches('0').len();
        let value: f64 = ms
            .parse()
            .unwrap_or_else(|_| panic!("ms not a number in {l}"));
        assert!(
            fraction.len() <= 2 || (value < 0.1 && significant <= 3),
            "{l}"
        );
    }
}

/// A request method is a token the client chooses: the log line names it only as one of the
/// standard methods, anything else as `other`, so a method never carries text into the log
/// (docs/design.md §7). The request still reaches the upstream with its method as sent.
#[tokio::test]
async fn a_method_of_the_clients_own_reaches_the_log_as_a_fixed_word() {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let at_upstream = seen.clone();
    let up = Upstream::start(
        None,
        handler(move |req| {
            let at_upstream = at_upstream.clone();
            async move {
                *at_upstream.lock().unwrap() = req.method().as_str().to_string();
                let _ = read_body(req.into_body()).await;
                sse_response(full("event: ping\ndata: {}\n\n"))
            }
        }),
    )
    .await;
    let mut relay = Relay::start(&["--upstream".to_string(), up.mount("up", "")]);
    let req = request("XSECRETMETHOD", relay.addr, "/up/v1/models")
        .body(full(""))
        .unwrap();
    let res = send(relay.addr, req).await.expect("a response");
    let _ = collect(res.into_body()).await;
    relay.wait_log("mount=up");
    relay.stop();
    let log = relay.log();
    assert_eq!(*seen.lock().unwrap(), "XSECRETMETHOD", "forwarded as sent");
    assert!(!log.contains("XSECRETMETHOD"), "{log}");
    let line = log
        .lines()
        .find(|l| l.contains(" exchange") && l.contains("mount=up "))
        .unwrap_or_else(|| panic!("no exchange line: {log}"));
    assert!(line.contains("method=other"), "{line}");
}
