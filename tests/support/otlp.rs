//! A loopback OTLP/HTTP receiver that decodes the real `ExportTraceServiceRequest`, and
//! helpers to read the spans it got. Shared by the replay and relay export tests.
#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use tokio::net::TcpListener;

/// What the receiver got: the request path and the decoded request, per POST.
pub type Log = Arc<Mutex<Vec<(String, ExportTraceServiceRequest)>>>;

/// A loopback OTLP/HTTP receiver; `stall` makes it take requests and never answer.
pub async fn receiver(stall: bool) -> (SocketAddr, Log) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let log: Log = Arc::default();
    let state = log.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let log = state.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<Incoming>| {
                    let log = log.clone();
                    async move {
                        let path = req.uri().path().to_owned();
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        let decoded = ExportTraceServiceRequest::decode(body).unwrap();
                        log.lock().unwrap().push((path, decoded));
                        if stall {
                            std::future::pending::<()>().await;
                        }
                        let answer = ExportTraceServiceResponse::default().encode_to_vec();
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(answer))))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    (addr, log)
}

pub fn spans(log: &Log) -> Vec<Span> {
    log.lock()
        .unwrap()
        .iter()
        .flat_map(|(_, r)| r.resource_spans.clone())
        .flat_map(|rs| rs.scope_spans)
        .flat_map(|ss| ss.spans)
        .collect()
}

pub fn attr<'a>(span: &'a Span, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

pub fn string<'a>(span: &'a Span, key: &str) -> Option<&'a str> {
    match attr(span, key) {
        Some(Value::StringValue(s)) => Some(s),
        _ => None,
    }
}
