//! Errors turned into responses, in one place: the small JSON error body the relay answers
//! with (never a header value), for a failed upstream, a path that leaves its mount, no
//! mount, and a client over the connection cap.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::{Either, Full};

use crate::exchange::{ExchangeLog, ResBody};
use crate::failure::{Failure, Phase};

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

/// The answer to a request whose path cannot be joined to its mount's upstream URL.
pub(crate) fn bad_path(log: &ExchangeLog, mount: &str) -> Response<ResBody> {
    log.status
        .store(StatusCode::BAD_REQUEST.as_u16(), Ordering::Relaxed);
    relay_error(
        mount,
        StatusCode::BAD_REQUEST,
        "bad_path",
        "the request path cannot be joined to the upstream URL",
    )
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
