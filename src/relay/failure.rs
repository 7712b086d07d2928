//! Errors turned into responses, in one place: what went wrong with an upstream as a fixed
//! word, and the small JSON error body the relay answers with (never a header value).

use std::sync::atomic::Ordering;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::{Either, Full};

use super::exchange::{ExchangeLog, ResBody};

/// What went wrong with the upstream, as a fixed word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    Refused,
    Reset,
    Tls,
    Timeout,
    Dns,
    Other,
}

impl Failure {
    pub fn as_str(self) -> &'static str {
        match self {
            Failure::Refused => "refused",
            Failure::Reset => "reset",
            Failure::Tls => "tls",
            Failure::Timeout => "timeout",
            Failure::Dns => "dns",
            Failure::Other => "upstream_error",
        }
    }

    pub fn status(self) -> StatusCode {
        match self {
            Failure::Timeout => StatusCode::GATEWAY_TIMEOUT,
            _ => StatusCode::BAD_GATEWAY,
        }
    }

    fn message(self, phase: Phase) -> &'static str {
        match (phase, self) {
            (Phase::Handshake, Failure::Timeout) => {
                "the upstream did not answer the WebSocket handshake in time"
            }
            (Phase::Handshake, _) => "the WebSocket handshake with the upstream failed",
            (Phase::Exchange, f) => f.exchange_message(),
        }
    }

    fn exchange_message(self) -> &'static str {
        match self {
            Failure::Refused => "the upstream refused the connection",
            Failure::Reset => "the upstream closed the connection before a complete response",
            Failure::Tls => "the TLS handshake with the upstream failed",
            Failure::Timeout => "the upstream did not answer in time",
            Failure::Dns => "the upstream host name could not be resolved",
            Failure::Other => "the request to the upstream failed",
        }
    }

    /// Classifies an error from the upstream client by walking its causes.
    pub fn classify(err: &(dyn std::error::Error + 'static)) -> Failure {
        let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
        let mut found = Failure::Other;
        while let Some(e) = cur {
            if e.downcast_ref::<rustls::Error>().is_some() {
                return Failure::Tls;
            }
            if let Some(io) = e.downcast_ref::<std::io::Error>() {
                use std::io::ErrorKind as K;
                match io.kind() {
                    K::ConnectionRefused => return Failure::Refused,
                    K::TimedOut => return Failure::Timeout,
                    K::ConnectionReset
                    | K::ConnectionAborted
                    | K::BrokenPipe
                    | K::UnexpectedEof => found = Failure::Reset,
                    _ => {}
                }
                if let Some(inner) = io.get_ref() {
                    let inner: &(dyn std::error::Error + 'static) = inner;
                    if inner.downcast_ref::<rustls::Error>().is_some() {
                        return Failure::Tls;
                    }
                    let f = Failure::classify(inner);
                    if f != Failure::Other {
                        return f;
                    }
                }
            }
            if let Some(h) = e.downcast_ref::<hyper::Error>() {
                if h.is_timeout() {
                    return Failure::Timeout;
                }
                if h.is_incomplete_message() || h.is_closed() || h.is_canceled() {
                    found = Failure::Reset;
                }
            }
            let text = e.to_string();
            if found == Failure::Other && text.contains("dns error") {
                found = Failure::Dns;
            }
            cur = e.source();
        }
        found
    }
}

/// Which part of forwarding failed, for the error message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// An HTTP exchange: the request or the response head.
    Exchange,
    /// A WebSocket handshake.
    Handshake,
}

/// The answer to an exchange the upstream failed, recorded on its log line.
pub fn upstream_failed(
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
pub fn bad_path(log: &ExchangeLog, mount: &str) -> Response<ResBody> {
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
pub fn no_mount() -> Response<ResBody> {
    relay_error(
        "",
        StatusCode::NOT_FOUND,
        "no_mount",
        "no mount matches this path; use /<mount>/... (see the relay's start-up message)",
    )
}

/// The answer to a client over the connection cap (the connection closes after it).
pub fn at_capacity() -> Response<ResBody> {
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
