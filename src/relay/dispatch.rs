//! The relay's request handler: routes a request to its mount, then to HTTP or WebSocket
//! forwarding.

use std::convert::Infallible;
use std::sync::Arc;

use ::http::{Request, Response};
use hyper::body::Incoming;

use super::exchange::ResBody;
use super::headers::is_upgrade;
use super::state::State;
use super::{failure, http, ws};

/// The relay's request handler.
pub async fn handle(
    state: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<ResBody>, Infallible> {
    let target = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".to_string());
    let Some((mount, rest)) = state.mounts.route(&target) else {
        tracing::info!(method = %req.method(), "no mount for this path");
        return Ok(failure::no_mount());
    };
    let mount = mount.clone();
    let rest = rest.to_string();
    if is_upgrade(&req) {
        return Ok(ws::forward_upgrade(state, mount, rest, req).await);
    }
    Ok(http::forward(state, mount, rest, req).await)
}

/// The path part of `rest` (no query), for routing observers.
pub fn rest_path(rest: &str) -> &str {
    let p = rest.split('?').next().unwrap_or("");
    if p.is_empty() {
        "/"
    } else {
        p
    }
}
