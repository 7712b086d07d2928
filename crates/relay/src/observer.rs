//! The observer side: which exchanges are observed, and `correlator::observe`'s observers
//! driven by the tap's copies. This is the only module that knows the observers' API.

use correlator::observe::Budget;
use correlator::observe::{classify, observed_route, Api, ExchangeInfo, HttpObserver, WsObserver};
use std::sync::Arc;

use correlator::EventKind;
use http::header::{self, HeaderMap};
use http::Method;

use crate::host_trace::{HostParent, HostParents};

use super::headers::header_str;
use super::mounts::route_path;
use super::state::State;
use super::tap::{StreamObserver, Tap, TapMsg};

/// Starts observing an exchange (`method`, the path under its mount, the request headers) if
/// its route is observed: for both the verbatim path and hyper's.
pub(super) fn observe(
    state: &State,
    method: &Method,
    rest: &str,
    headers: &HeaderMap,
) -> Option<Tap> {
    let live = state.observations.as_ref()?;
    let plan = plan(method.as_str(), &route_path(rest), false, headers)?;
    let encoding = header_str(headers, &header::CONTENT_ENCODING);
    // `--join-host-trace`: the host's span this request was made under, left for the
    // correlator task before the stream's first event can reach it (docs/design.md §7).
    let joined = live
        .host_parents
        .as_ref()
        .and_then(|hp| Some((hp, HostParent::from_headers(headers)?)));
    state.start_tap(|stream, out| {
        if let Some((hp, parent)) = joined {
            hp.put(&stream, parent);
        }
        plan.open_http(stream, encoding, &state.budget, out)
    })
}

/// An exchange that will be observed: decided from its request head.
pub(crate) struct Plan {
    api: Api,
    client: correlator::Client,
    thread: Option<String>,
}

/// Whether `method path` (the path after the mount prefix) is a model stream route, and if so
/// how to observe it. Header values are read here only to find the thread key.
pub(crate) fn plan(method: &str, path: &str, websocket: bool, headers: &HeaderMap) -> Option<Plan> {
    let api = observed_route(method, path, websocket)?;
    let pairs: Vec<(&str, &[u8])> = headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_bytes()))
        .collect();
    let (client, thread) = classify(api, &pairs);
    Some(Plan {
        api,
        client,
        thread,
    })
}

impl Plan {
    fn info(self, stream: String) -> ExchangeInfo {
        ExchangeInfo {
            stream,
            api: self.api,
            client: self.client,
            thread: self.thread,
        }
    }

    pub(crate) fn open_http(
        self,
        stream: String,
        request_encoding: Option<&str>,
        budget: &Budget,
        out: &mut Vec<EventKind>,
    ) -> Box<dyn StreamObserver> {
        let mut observer = HttpObserver::new(self.info(stream), request_encoding, out);
        observer.set_budget(budget.account());
        Box::new(observer)
    }

    /// `joins`: with `--join-host-trace`, where each request's trace context goes (Codex
    /// sends it in each `response.create`, a WebSocket having no per-request headers).
    pub(crate) fn open_ws(
        self,
        stream: String,
        extensions: Option<&str>,
        budget: &Budget,
        joins: Option<&Arc<HostParents>>,
        out: &mut Vec<EventKind>,
    ) -> Box<dyn StreamObserver> {
        let mut observer = WsObserver::new(self.info(stream), extensions, out);
        observer.set_budget(budget.account());
        match joins {
            Some(parents) => {
                observer.keep_trace_contexts();
                Box::new(JoiningWs {
                    inner: observer,
                    parents: parents.clone(),
                })
            }
            None => Box::new(observer),
        }
    }
}

impl StreamObserver for HttpObserver {
    fn take(&mut self, msg: TapMsg, out: &mut Vec<EventKind>) {
        match msg {
            TapMsg::RequestChunk(b) => self.request_chunk(&b, out),
            TapMsg::RequestEnd => self.request_end(out),
            TapMsg::ResponseHead {
                status,
                content_type,
                content_encoding,
            } => self.response_head(
                status,
                content_type.as_deref(),
                content_encoding.as_deref(),
                out,
            ),
            TapMsg::ResponseChunk(b) => self.response_chunk(&b, out),
            // Not produced for HTTP exchanges.
            TapMsg::ClientBytes(_) | TapMsg::ServerBytes(_) => {}
        }
    }
    fn lost(&mut self, reason: &'static str, out: &mut Vec<EventKind>) {
        HttpObserver::lost(self, reason, out)
    }
    fn close(&mut self, out: &mut Vec<EventKind>) {
        HttpObserver::close(self, out)
    }
}

/// A WebSocket observer that hands each request's host parent to the correlator task, by the
/// raw request id, before the request's event leaves (the tap sends a copy's events after
/// `take` returns). The raw value is parsed here and dropped.
struct JoiningWs {
    inner: WsObserver,
    parents: Arc<HostParents>,
}

impl StreamObserver for JoiningWs {
    fn take(&mut self, msg: TapMsg, out: &mut Vec<EventKind>) {
        StreamObserver::take(&mut self.inner, msg, out);
        for (request, value) in self.inner.take_trace_contexts() {
            if let Some(p) = HostParent::parse(value.as_bytes()) {
                self.parents.put(&request, p);
            }
        }
    }
    fn lost(&mut self, reason: &'static str, out: &mut Vec<EventKind>) {
        StreamObserver::lost(&mut self.inner, reason, out)
    }
    fn close(&mut self, out: &mut Vec<EventKind>) {
        StreamObserver::close(&mut self.inner, out)
    }
}

impl StreamObserver for WsObserver {
    fn take(&mut self, msg: TapMsg, out: &mut Vec<EventKind>) {
        match msg {
            TapMsg::ClientBytes(b) => self.client_bytes(&b, out),
            TapMsg::ServerBytes(b) => self.server_bytes(&b, out),
            // Not produced for WebSocket connections.
            _ => {}
        }
    }
    fn lost(&mut self, reason: &'static str, out: &mut Vec<EventKind>) {
        WsObserver::lost(self, reason, out)
    }
    fn close(&mut self, out: &mut Vec<EventKind>) {
        WsObserver::close(self, out)
    }
}
