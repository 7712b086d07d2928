//! The door to hyper: a client connection the verbatim path hands over is served by hyper
//! from here on, each request routed to its mount, then to HTTP or WebSocket forwarding.

use std::convert::Infallible;
use std::sync::Arc;

use ::http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::sync::watch;

use super::exchange::ResBody;
use super::headers::{upgrade_ask, UpgradeAsk};
use super::state::State;
use super::{answers, http, ws};

/// Serves a client connection with hyper (WebSocket upgrades, everything the verbatim path
/// hands over) until it ends or the drain closes it.
pub(super) async fn serve_hyper<I>(io: I, state: Arc<State>, mut drain: watch::Receiver<bool>)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let header_timeout = state.clients.header_timeout;
    let timers = state.timers.clone();
    let service = hyper::service::service_fn(move |req| handle(state.clone(), req));
    let conn = hyper::server::conn::http1::Builder::new()
        .preserve_header_case(true)
        // The response head is the upstream's: no Date it did not send.
        .auto_date_header(false)
        // Without a timer hyper applies no header read timeout at all: slow and idle
        // clients held their connections (and descriptors) for good.
        .timer(timers)
        .header_read_timeout(header_timeout)
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    tokio::pin!(conn);
    let ended = tokio::select! {
        r = conn.as_mut() => r,
        // Also when the sender is gone: nobody is left to wait for this connection.
        _ = async { drop(drain.wait_for(|d| *d).await) } => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    drop(drain);
    if let Err(e) = ended {
        tracing::debug!(error_kind = %error_kind(&e), "client connection ended with an error");
    }
}

/// The relay's request handler.
pub(crate) async fn handle(
    state: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<ResBody>, Infallible> {
    let target = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".to_string());
    let Some((mount, rest)) = state.mounts.route(&target) else {
        tracing::info!(
            method = crate::exchange::method_word(req.method()),
            "no mount for this path"
        );
        return Ok(answers::no_mount());
    };
    let mount = mount.clone();
    let rest = rest.to_string();
    match upgrade_ask(&req) {
        UpgradeAsk::No => Ok(http::forward(state, mount, rest, req).await),
        UpgradeAsk::WebSocket => Ok(ws::forward_upgrade(state, mount, rest, req).await),
        UpgradeAsk::Other => {
            tracing::info!(
                mount = %mount.name,
                method = crate::exchange::method_word(req.method()),
                "a protocol switch other than WebSocket was refused"
            );
            Ok(answers::upgrade_refused(&mount.name))
        }
    }
}

/// A fixed word for a connection error (its text could echo request bytes).
fn error_kind(e: &hyper::Error) -> &'static str {
    if e.is_parse() {
        "parse"
    } else if e.is_incomplete_message() {
        "incomplete"
    } else if e.is_timeout() {
        "timeout"
    } else if e.is_canceled() {
        "canceled"
    } else {
        "io"
    }
}
