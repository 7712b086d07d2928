//! A loopback OTLP/HTTP receiver for tests: decodes every request into the real
//! `ExportTraceServiceRequest` and answers as told.

use std::io::Read;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use tokio::net::TcpListener;

/// The OpenTelemetry crates read their `OTEL_*` variables from the process environment when
/// an exporter is made: tests that set some make theirs one at a time, and unset them after.
pub fn start_with_env<T>(vars: &[(&str, &str)], start: impl FnOnce() -> T) -> T {
    static ENV: Mutex<()> = Mutex::new(());
    let _one_at_a_time = ENV.lock().unwrap_or_else(|p| p.into_inner());
    for (k, v) in vars {
        std::env::set_var(k, v);
    }
    let made = start();
    for (k, _) in vars {
        std::env::remove_var(k);
    }
    made
}

/// How the receiver answers the n-th request (the last entry repeats).
#[derive(Clone, Debug)]
pub enum Answer {
    Ok,
    Status(u16),
    Reject(i64),
    /// Never answer.
    Stall,
}

pub struct Received {
    pub headers: HeaderMap,
    pub request: ExportTraceServiceRequest,
}

impl Received {
    pub fn spans(&self) -> Vec<&Span> {
        self.request
            .resource_spans
            .iter()
            .flat_map(|rs| &rs.scope_spans)
            .flat_map(|ss| &ss.spans)
            .collect()
    }
}

pub struct Receiver {
    pub addr: SocketAddr,
    pub received: Arc<Mutex<Vec<Received>>>,
}

type State = (
    Arc<Mutex<Vec<Received>>>,
    Arc<Vec<Answer>>,
    Arc<Mutex<usize>>,
);

impl Receiver {
    pub async fn start(answers: Vec<Answer>) -> Receiver {
        Self::start_with(answers, None).await
    }

    /// The same over TLS with this server configuration.
    pub async fn start_tls(answers: Vec<Answer>, tls: Arc<rustls::ServerConfig>) -> Receiver {
        Self::start_with(answers, Some(tokio_rustls::TlsAcceptor::from(tls))).await
    }

    async fn start_with(answers: Vec<Answer>, tls: Option<tokio_rustls::TlsAcceptor>) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let state: State = (received.clone(), Arc::new(answers), Arc::new(Mutex::new(0)));
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let state = state.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    match tls {
                        None => serve(TokioIo::new(tcp), state).await,
                        Some(acceptor) => {
                            if let Ok(stream) = acceptor.accept(tcp).await {
                                serve(TokioIo::new(stream), state).await
                            }
                        }
                    }
                });
            }
        });
        Receiver { addr, received }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Span counts per request, in arrival order.
    pub fn batch_sizes(&self) -> Vec<usize> {
        self.received
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.spans().len())
            .collect()
    }
}

async fn serve<IO>(io: IO, (received, answers, count): State)
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let svc = service_fn(move |req: Request<Incoming>| {
        let (received, answers, count) = (received.clone(), answers.clone(), count.clone());
        async move {
            let n = {
                let mut c = count.lock().unwrap();
                *c += 1;
                *c - 1
            };
            let answer = answers
                .get(n)
                .or(answers.last())
                .cloned()
                .unwrap_or(Answer::Ok);
            let (parts, body) = req.into_parts();
            let body = body.collect().await.unwrap().to_bytes();
            let raw = if parts
                .headers
                .get("content-encoding")
                .is_some_and(|v| v == "gzip")
            {
                let mut out = Vec::new();
                flate2::read::GzDecoder::new(&body[..])
                    .read_to_end(&mut out)
                    .unwrap();
                Bytes::from(out)
            } else {
                body
            };
            let request = ExportTraceServiceRequest::decode(raw).unwrap();
            received.lock().unwrap().push(Received {
                headers: parts.headers,
                request,
            });
            let resp = match answer {
                Answer::Ok => ok(ExportTraceServiceResponse::default()),
                Answer::Reject(n) => ok(ExportTraceServiceResponse {
                    partial_success: Some(ExportTracePartialSuccess {
                        rejected_spans: n,
                        error_message: "no".into(),
                    }),
                }),
                Answer::Status(code) => Response::builder()
                    .status(StatusCode::from_u16(code).unwrap())
                    .body(Full::new(Bytes::from_static(b"nope")))
                    .unwrap(),
                Answer::Stall => std::future::pending().await,
            };
            Ok::<_, std::convert::Infallible>(resp)
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(io, svc)
        .await;
}

fn ok(r: ExportTraceServiceResponse) -> Response<Full<Bytes>> {
    Response::builder()
        .header("content-type", "application/x-protobuf")
        .body(Full::new(Bytes::from(r.encode_to_vec())))
        .unwrap()
}
