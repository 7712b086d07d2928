//! HTTP forwarding: one exchange in, the same exchange out to the mount's upstream.
//!
//! Only what a reverse proxy must change changes: `Host` (set from the upstream URL),
//! hop-by-hop headers (RFC 9110 §7.6.1 and those named in `Connection`) and the mount prefix of
//! the path. Bodies stream frame by frame in both directions; content encodings pass untouched.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Version};
use http_body_util::{Either, Full};
use hyper::body::Incoming;

use super::body::{Flow, RelayBody};
use super::mounts::{path_template, Mount};
use super::tap::{Tap, TapMsg};
use super::upstream::{Driven, Lease};
use super::{observer, ws, State};

pub type ResBody = Either<RelayBody<Driven>, Full<Bytes>>;

/// The hop-by-hop headers of RFC 9110 §7.6.1.
const HOP_BY_HOP: [&str; 6] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "te",
    "transfer-encoding",
    "upgrade",
];

/// Removes hop-by-hop headers, including every header named in `Connection`.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|tok| HeaderName::from_bytes(tok.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

/// Whether a request asks to switch protocols (a WebSocket handshake).
pub fn is_upgrade(req: &Request<Incoming>) -> bool {
    let connection_upgrade = req
        .headers()
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|tok| tok.trim().eq_ignore_ascii_case("upgrade"));
    connection_upgrade && req.headers().contains_key(header::UPGRADE)
}

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

    fn status(self) -> StatusCode {
        match self {
            Failure::Timeout => StatusCode::GATEWAY_TIMEOUT,
            _ => StatusCode::BAD_GATEWAY,
        }
    }

    fn message(self) -> &'static str {
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

/// A small JSON error body naming the mount and the failure class (never a header value).
pub fn relay_error(
    mount: &str,
    status: StatusCode,
    class: &str,
    message: &str,
) -> Response<ResBody> {
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

/// One exchange's log line, written when the last part of the exchange lets go of it.
pub struct ExchangeLog {
    pub mount: String,
    pub method: Method,
    pub path: String,
    pub status: AtomicU16,
    pub up: Arc<AtomicU64>,
    pub down: Arc<AtomicU64>,
    pub started: Instant,
    pub failed: Arc<AtomicBool>,
    pub failure: std::sync::Mutex<Option<Failure>>,
}

impl ExchangeLog {
    pub fn new(mount: &str, method: &Method, path: &str) -> Arc<Self> {
        Arc::new(ExchangeLog {
            mount: mount.to_string(),
            method: method.clone(),
            path: path_template(path),
            status: AtomicU16::new(0),
            up: Arc::new(AtomicU64::new(0)),
            down: Arc::new(AtomicU64::new(0)),
            started: Instant::now(),
            failed: Arc::new(AtomicBool::new(false)),
            failure: std::sync::Mutex::new(None),
        })
    }

    pub fn fail(&self, f: Failure) {
        if let Ok(mut g) = self.failure.lock() {
            g.get_or_insert(f);
        }
    }
}

impl Drop for ExchangeLog {
    fn drop(&mut self) {
        let failure = match self.failure.lock().ok().and_then(|g| *g) {
            Some(f) => f.as_str(),
            None if self.failed.load(Ordering::Relaxed) => "broken",
            None => "",
        };
        tracing::info!(
            mount = %self.mount,
            method = %self.method,
            path = %self.path,
            status = self.status.load(Ordering::Relaxed),
            bytes_up = self.up.load(Ordering::Relaxed),
            bytes_down = self.down.load(Ordering::Relaxed),
            ms = self.started.elapsed().as_secs_f64() * 1000.0,
            failure,
            "exchange"
        );
    }
}

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
        return Ok(relay_error(
            "",
            StatusCode::NOT_FOUND,
            "no_mount",
            "no mount matches this path; use /<mount>/... (see the relay's start-up message)",
        ));
    };
    let mount = mount.clone();
    let rest = rest.to_string();
    if is_upgrade(&req) {
        return Ok(ws::forward_upgrade(state, mount, rest, req).await);
    }
    Ok(forward(state, mount, rest, req).await)
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

fn header_str<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Starts observing an exchange if its route is observed.
fn observe_http(state: &State, req: &Request<Incoming>, rest: &str) -> Option<Arc<Tap>> {
    state.live.as_ref()?;
    let plan = observer::plan(req.method().as_str(), rest_path(rest), false, req.headers())?;
    let encoding = header_str(req.headers(), &header::CONTENT_ENCODING);
    state
        .start_tap(|stream, out| plan.open_http(stream, encoding, out))
        .map(Arc::new)
}

async fn forward(
    state: Arc<State>,
    mount: Mount,
    rest: String,
    req: Request<Incoming>,
) -> Response<ResBody> {
    let log = ExchangeLog::new(&mount.name, req.method(), rest_path(&rest));
    let tap = observe_http(&state, &req, &rest);
    let uri = match mount.upstream_uri(&rest) {
        Ok(u) => u,
        Err(_) => {
            log.status.store(400, Ordering::Relaxed);
            return relay_error(
                &mount.name,
                StatusCode::BAD_REQUEST,
                "bad_path",
                "the request path cannot be joined to the upstream URL",
            );
        }
    };
    let (mut parts, body) = req.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    parts.headers.remove(header::HOST);
    parts.uri = uri;
    parts.version = Version::HTTP_11;
    let body = RelayBody::new(body, Flow::Request, tap.clone(), log.up.clone());
    let upstream_req = Request::from_parts(parts, body);

    let sent = state.upstreams.send(upstream_req);
    let res = match tokio::time::timeout(state.response_timeout, sent).await {
        Err(_) => Err(Failure::Timeout),
        Ok(Err(e)) => Err(Failure::classify(&*e)),
        Ok(Ok(res)) => Ok(res),
    };
    let (res, lease) = match res {
        Ok(r) => r,
        Err(f) => {
            log.fail(f);
            log.status.store(f.status().as_u16(), Ordering::Relaxed);
            return relay_error(&mount.name, f.status(), f.as_str(), f.message());
        }
    };
    respond(res, Some(lease), tap, log)
}

/// Passes an upstream response back: status and end-to-end headers as received, the body
/// streamed frame by frame, read through `lease` (the connection it arrives on) if given.
pub fn respond(
    res: Response<Incoming>,
    lease: Option<Lease>,
    tap: Option<Arc<Tap>>,
    log: Arc<ExchangeLog>,
) -> Response<ResBody> {
    log.status.store(res.status().as_u16(), Ordering::Relaxed);
    if let Some(tap) = &tap {
        tap.send(TapMsg::ResponseHead {
            status: res.status().as_u16(),
            content_type: header_str(res.headers(), &header::CONTENT_TYPE).map(str::to_string),
            content_encoding: header_str(res.headers(), &header::CONTENT_ENCODING)
                .map(str::to_string),
        });
    }
    let (mut parts, body) = res.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    parts.version = Version::HTTP_11;
    let body = RelayBody::new(
        Driven::new(body, lease),
        Flow::Response,
        tap,
        log.down.clone(),
    )
    .on_failure(log.failed.clone())
    .keep(log);
    Response::from_parts(parts, Either::Left(body))
}
