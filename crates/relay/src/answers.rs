//! Errors turned into responses, in one place: the small JSON error body the relay answers
//! with (never a header value), for a failed upstream, a path that leaves its mount, no
//! mount, a protocol switch other than WebSocket, and a client over the connection cap.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::{Either, Full};

use crate::exchange::{ExchangeLog, ResBody};
use crate::failure::{Failure, Phase};
use crate::mounts::BadPath;

/// The answer to an exchange the upstream failed, recorded on its log line.
pub(crate) fn upstream_failed(
    log: &ExchangeLog,
    mount: &str,
    failure: Failure,
    phase: Phase,
) -> Response<ResBody> {
    log.fail(failure);
    let status = failure.status();
    log.status.store(status.as_u16(), Ordering::Relaxed);
    relay_error(mount, status, failure.as_str(), failure.message(phase))
}

/// The answer to a request whose path is not forwarded ([`BadPath`]).
pub(crate) fn bad_path(log: &ExchangeLog, mount: &str, why: BadPath) -> Response<ResBody> {
    log.status
        .store(StatusCode::BAD_REQUEST.as_u16(), Ordering::Relaxed);
    let message = match why {
        BadPath::DotSegment => {
            "the request path has a '.' or '..' segment (in some spelling), which could leave \
             the mount's base path upstream; send the path without it"
        }
        BadPath::Invalid => "the request path cannot be joined to the upstream URL",
    };
    relay_error(mount, StatusCode::BAD_REQUEST, "bad_path", message)
}

/// The answer to a request no mount routes.
pub(crate) fn no_mount() -> Response<ResBody> {
    relay_error(
        "",
        StatusCode::NOT_FOUND,
        "no_mount",
        "no mount matches this path; use /<mount>/... (see the relay's start-up message)",
    )
}

/// The answer to a request that asks to switch to a protocol other than WebSocket (the
/// connection stays HTTP/1.1).
pub(crate) fn upgrade_refused(mount: &str) -> Response<ResBody> {
    relay_error(
        mount,
        StatusCode::NOT_IMPLEMENTED,
        "upgrade_refused",
        "the relay switches protocols for WebSocket only (GET with Upgrade: websocket)",
    )
}

/// The answer to a WebSocket handshake over the tunnel cap (an eighth of the connection cap
/// is kept for other clients, [`crate::limits::tunnel_cap`]).
pub(crate) fn tunnels_at_capacity(log: &ExchangeLog, mount: &str) -> Response<ResBody> {
    let status = StatusCode::SERVICE_UNAVAILABLE;
    log.status.store(status.as_u16(), Ordering::Relaxed);
    if let Some(left_out) = TUNNELS_AT_CAP_LOG.allow() {
        tracing::warn!(
            mount,
            left_out,
            "at the tunnel cap: new WebSocket handshakes are refused with 503 (an eighth of \
             --max-connections is kept for other clients)"
        );
    }
    let mut res = relay_error(
        mount,
        status,
        "at_capacity",
        "the relay holds as many WebSocket tunnels as --max-connections allows; retry shortly",
    );
    res.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    // The connection closes after it: left open until the header timeout, it held the place
    // kept for other clients (found by an outside probe).
    res.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    res
}

static TUNNELS_AT_CAP_LOG: sys::ratelimit::Repeated =
    sys::ratelimit::Repeated::new(1, std::time::Duration::from_secs(10));

/// The answer to a client over the connection cap (the connection closes after it).
pub(crate) fn at_capacity() -> Response<ResBody> {
    let mut res = relay_error(
        "",
        StatusCode::SERVICE_UNAVAILABLE,
        "at_capacity",
        "the relay is at its connection cap (--max-connections); retry shortly",
    );
    res.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    res
}

/// A small JSON error body naming the mount and the failure class (never a header value).
fn relay_error(mount: &str, status: StatusCode, class: &str, message: &str) -> Response<ResBody> {
    let mut body = String::with_capacity(160);
    body.push_str(r#"{"error":{"type":"relay_error","mount":"#);
    correlator::json::push_str(&mut body, mount);
    body.push_str(r#","class":"#);
    correlator::json::push_str(&mut body, class);
    body.push_str(r#","message":"#);
    correlator::json::push_str(&mut body, message);
    body.push_str("}}");
    let mut res = Response::new(Either::Right(Full::new(Bytes::from(body))));
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    res
}
