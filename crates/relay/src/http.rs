//! HTTP forwarding: one exchange in, the same exchange out to the mount's upstream.
//!
//! Only what a reverse proxy must change changes: `Host` (set from the upstream URL),
//! hop-by-hop headers (RFC 9110 §7.6.1 and those named in `Connection`) and the mount prefix of
//! the path. Bodies stream frame by frame in both directions; content encodings pass untouched.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use http::header;
use http::{Request, Response, StatusCode, Version};
use http_body_util::Either;
use hyper::body::Incoming;

use super::answers;
use super::body::{Flow, RelayBody};
use super::exchange::{ExchangeLog, ResBody};
use super::failure::{Failure, Phase};
use super::headers::{header_str, strip_hop_by_hop};
use super::mounts::rest_path;
use super::mounts::Mount;
use super::observer;
use super::state::State;
use super::tap::{Tap, TapMsg};
use super::upstream::{Driven, Lease};

/// Forwards one HTTP exchange to `mount`'s upstream and streams its response back.
pub(crate) async fn forward(
    state: Arc<State>,
    mount: Mount,
    rest: String,
    req: Request<Incoming>,
) -> Response<ResBody> {
    let log = ExchangeLog::new(&state.failed, &mount.name, req.method(), rest_path(&rest));
    let uri = match mount.upstream_uri(&rest) {
        Ok(uri) => uri,
        Err(why) => return answers::bad_path(&log, &mount.name, why),
    };
    let tap = observer::observe(&state, req.method(), &rest, req.headers()).map(Arc::new);
    let (mut parts, body) = req.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    parts.headers.remove(header::HOST);
    parts.uri = uri;
    parts.version = Version::HTTP_11;
    let body = RelayBody::new(body, Flow::Request, tap.clone(), log.up.clone())
        .idle_timeout(&state.timers, state.client_body_timeout);
    let upstream_req = Request::from_parts(parts, body);

    let sent = state.upstreams.send(upstream_req);
    let res = match state.timers.timeout(state.response_timeout, sent).await {
        Err(_) => Err(Failure::Timeout),
        Ok(Err(e)) => Err(Failure::classify(&*e)),
        Ok(Ok(res)) => Ok(res),
    };
    let (res, lease) = match res {
        Ok(r) => r,
        Err(f) => return answers::upstream_failed(&log, &mount.name, f, Phase::Exchange),
    };
    if res.status() == StatusCode::SWITCHING_PROTOCOLS {
        // A switch nobody asked for (this request is no upgrade): no client can read on
        // past it, as the verbatim path also refuses it (`h1::parse_response`).
        return answers::upstream_failed(&log, &mount.name, Failure::Other, Phase::Exchange);
    }
    respond(&state, res, Some(lease), tap, log)
}

/// Passes an upstream response back: status and end-to-end headers as received, the body
/// streamed frame by frame, read through `lease` (the connection it arrives on) if given,
/// and cut if the upstream sends nothing of it for `--body-timeout`.
pub(crate) fn respond(
    state: &State,
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
    .idle_timeout(&state.timers, state.body_timeout)
    .on_failure(log.failed.clone())
    .keep(log);
    Response::from_parts(parts, Either::Left(body))
}
