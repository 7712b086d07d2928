//! What went wrong with an upstream, as a fixed word (never the error's own text, which could
//! echo request bytes). [`crate::answers`] turns it into the relay's response.

use http::StatusCode;

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

    pub(crate) fn message(self, phase: Phase) -> &'static str {
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
pub(crate) enum Phase {
    /// An HTTP exchange: the request or the response head.
    Exchange,
    /// A WebSocket handshake.
    Handshake,
}
