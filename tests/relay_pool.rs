//! The relay's upstream connection pool lets go of idle connections: a burst of streams must
//! not leave as many upstream sockets open for good (found by the soak, docs/soak.md: the
//! relay's descriptors never came back down after the load).

mod support;

use std::convert::Infallible;

use support::*;
use tokio::sync::mpsc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_upstream_connection_is_closed_after_the_idle_timeout() {
    // An upstream that says when each of its connections has ended.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (ended_tx, mut ended) = mpsc::unbounded_channel::<()>();
    let server = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let ended_tx = ended_tx.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|req: hyper::Request<_>| async move {
                    let _ = read_body(req.into_body()).await;
                    Ok::<_, Infallible>(hyper::Response::new(full("pong")))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                    .await;
                let _ = ended_tx.send(());
            });
        }
    });
    let relay = Relay::start(&[
        "--upstream".into(),
        format!("anthropic=http://{addr}"),
        "--upstream-idle".into(),
        "200".into(),
    ]);

    let req = request("POST", relay.addr, "/anthropic/v1/ping")
        .body(full("ping"))
        .unwrap();
    let res = send(relay.addr, req).await.unwrap();
    assert_eq!(collect(res.into_body()).await.unwrap(), b"pong");

    // The relay keeps the upstream connection for reuse, then closes it once idle.
    tokio::time::timeout(WAIT, ended.recv())
        .await
        .expect("the idle upstream connection was closed within the wait bound")
        .unwrap();
    server.abort();
}
