//! The exporter: a bounded queue that the correlator's side fills without ever waiting, and
//! one task that batches spans and POSTs them as OTLP/HTTP protobuf.
//!
//! Delivery is best effort by design: a slow or dead collector costs spans (counted in the
//! [`ExportReport`]), never correlation time. Failures are reported by kind only: no header
//! value, URL credential or response body is ever logged.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_ENCODING, CONTENT_TYPE, USER_AGENT};
use http::{Method, Request};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::config::{Endpoint, ExportConfig};
use super::span;

/// Responses larger than this are not read (an OTLP response is a few bytes).
const MAX_RESPONSE_BYTES: usize = 64 * 1024;
/// Retries for a collector that says "try again" (429, 502, 503, 504), within the timeout.
const RETRIES: u32 = 2;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("otlp: not inside a tokio runtime")]
    NoRuntime,
    #[error("otlp: {0}")]
    Tls(#[from] crate::tls::TlsError),
}

/// Why a batch was not delivered: a fixed word and, for HTTP, the status code. Never a body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ExportError {
    #[error("could not connect ({0})")]
    Connect(std::io::ErrorKind),
    #[error("the request failed")]
    Request,
    #[error("timed out")]
    Timeout,
    #[error("the collector answered HTTP {0}")]
    Status(u16),
}

/// What happened to the spans handed to the exporter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExportReport {
    /// Accepted into the queue.
    pub queued: u64,
    /// Refused because the queue was full or the exporter had shut down.
    pub dropped: u64,
    /// Accepted by the collector.
    pub exported: u64,
    /// Refused by the collector in a partial success.
    pub rejected: u64,
    /// In batches that failed (connection, timeout, HTTP error).
    pub failed: u64,
    /// Still queued or in flight when the shutdown bound ran out.
    pub unsent: u64,
    /// The first failure, if any.
    pub first_error: Option<ExportError>,
}

impl ExportReport {
    /// Spans handed over that did not reach the collector.
    pub fn lost(&self) -> u64 {
        self.dropped + self.rejected + self.failed + self.unsent
    }
}

#[derive(Default)]
struct Counters {
    queued: AtomicU64,
    dropped: AtomicU64,
    exported: AtomicU64,
    rejected: AtomicU64,
    failed: AtomicU64,
    first_error: Mutex<Option<ExportError>>,
}

impl Counters {
    fn fail(&self, n: u64, e: ExportError) {
        self.failed.fetch_add(n, Ordering::Relaxed);
        let mut first = self.first_error.lock().unwrap_or_else(|p| p.into_inner());
        if first.is_none() {
            *first = Some(e);
            drop(first);
            tracing::warn!(error = %e, spans = n, "otlp: export failed");
        }
    }

    fn report(&self) -> ExportReport {
        let queued = self.queued.load(Ordering::Relaxed);
        let exported = self.exported.load(Ordering::Relaxed);
        let rejected = self.rejected.load(Ordering::Relaxed);
        let failed = self.failed.load(Ordering::Relaxed);
        ExportReport {
            queued,
            dropped: self.dropped.load(Ordering::Relaxed),
            exported,
            rejected,
            failed,
            unsent: queued.saturating_sub(exported + rejected + failed),
            first_error: *self.first_error.lock().unwrap_or_else(|p| p.into_inner()),
        }
    }
}

/// The cheap, cloneable side that queues finished spans.
#[derive(Clone)]
pub struct ExporterHandle {
    tx: mpsc::Sender<Span>,
    counters: Arc<Counters>,
}

impl ExporterHandle {
    /// Queues a span; never waits. Returns false when it was dropped (queue full or shut
    /// down). Spans come from [`super::tree::Tree`], which takes only what the sanitizing
    /// door let out.
    pub fn span(&self, span: Span) -> bool {
        let accepted = self.tx.try_send(span).is_ok();
        self.count(accepted)
    }

    /// Like [`span`](Self::span), but waits up to `wait` for room in the queue. For offline
    /// replay only, where the records are already decided and completeness matters more than
    /// pace; a live command must use `span`.
    pub async fn span_waiting(&self, span: Span, wait: Duration) -> bool {
        let accepted = matches!(
            tokio::time::timeout(wait, self.tx.send(span)).await,
            Ok(Ok(()))
        );
        self.count(accepted)
    }

    /// Whether any batch has failed (the collector is down, stuck or refusing).
    pub fn has_failed(&self) -> bool {
        self.counters.failed.load(Ordering::Relaxed) > 0
    }

    fn count(&self, accepted: bool) -> bool {
        if accepted {
            self.counters.queued.fetch_add(1, Ordering::Relaxed);
        } else if self.counters.dropped.fetch_add(1, Ordering::Relaxed) == 0 {
            tracing::warn!("otlp: export queue full or closed, dropping spans");
        }
        accepted
    }
}

/// The running exporter: hands out [`ExporterHandle`]s and flushes on [`Exporter::shutdown`].
pub struct Exporter {
    handle: ExporterHandle,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
    bound: Duration,
    endpoint: Endpoint,
}

type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

impl Exporter {
    /// Starts the export task on the current tokio runtime.
    pub fn start(config: ExportConfig) -> Result<Exporter, StartError> {
        let rt = tokio::runtime::Handle::try_current().map_err(|_| StartError::NoRuntime)?;
        let client = http_client(&config)?;
        let (tx, rx) = mpsc::channel(config.max_queue.max(1));
        let (stop, stop_rx) = oneshot::channel();
        let counters = Arc::new(Counters::default());
        let resource: Vec<KeyValue> = config
            .resource
            .iter()
            .map(|(k, v)| span::kv_str(k, v))
            .collect();
        let bound = config.timeout;
        let endpoint = config.endpoint.clone();
        let sender = Sender {
            client,
            config,
            resource,
            counters: counters.clone(),
        };
        let task = rt.spawn(run(rx, stop_rx, sender));
        Ok(Exporter {
            handle: ExporterHandle { tx, counters },
            stop,
            task,
            bound,
            endpoint,
        })
    }

    pub fn handle(&self) -> ExporterHandle {
        self.handle.clone()
    }

    /// The bound on one export request (and on the flush at shutdown).
    pub fn timeout(&self) -> Duration {
        self.bound
    }

    /// Where spans go, without credentials.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Stops taking spans, sends what is queued, and waits at most the export timeout.
    pub async fn shutdown(self) -> ExportReport {
        let Exporter {
            handle,
            stop,
            mut task,
            bound,
            ..
        } = self;
        // The task may have ended already (it never does on its own, but be total).
        let _ = stop.send(());
        if tokio::time::timeout(bound, &mut task).await.is_err() {
            task.abort();
            let _ = task.await;
        }
        handle.counters.report()
    }
}

struct Sender {
    client: HttpClient,
    config: ExportConfig,
    resource: Vec<KeyValue>,
    counters: Arc<Counters>,
}

async fn run(mut rx: mpsc::Receiver<Span>, mut stop: oneshot::Receiver<()>, s: Sender) {
    let max_batch = s.config.max_batch.max(1);
    let mut batch: Vec<Span> = Vec::with_capacity(max_batch.min(1024));
    let mut tick = tokio::time::interval(s.config.schedule_delay);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            _ = &mut stop => break,
            next = rx.recv() => match next {
                Some(span) => {
                    batch.push(span);
                    if batch.len() >= max_batch {
                        s.send(std::mem::take(&mut batch)).await;
                    }
                }
                None => break,
            },
            _ = tick.tick() => {
                if !batch.is_empty() {
                    s.send(std::mem::take(&mut batch)).await;
                }
            }
        }
    }
    // Shutting down: later records count as dropped; what is queued goes out now.
    rx.close();
    while let Some(span) = rx.recv().await {
        batch.push(span);
        if batch.len() >= max_batch {
            s.send(std::mem::take(&mut batch)).await;
        }
    }
    if !batch.is_empty() {
        s.send(batch).await;
    }
}

impl Sender {
    async fn send(&self, spans: Vec<Span>) {
        let n = spans.len() as u64;
        let body = match self.encode(spans) {
            Ok(b) => b,
            Err(_) => {
                self.counters.fail(n, ExportError::Request);
                return;
            }
        };
        match tokio::time::timeout(self.config.timeout, self.post_with_retries(body)).await {
            Ok(Ok(rejected)) => {
                let rejected = rejected.min(n);
                self.counters
                    .exported
                    .fetch_add(n - rejected, Ordering::Relaxed);
                if rejected > 0 {
                    self.counters
                        .rejected
                        .fetch_add(rejected, Ordering::Relaxed);
                    tracing::warn!(spans = rejected, "otlp: the collector rejected spans");
                }
            }
            Ok(Err(e)) => self.counters.fail(n, e),
            Err(_) => self.counters.fail(n, ExportError::Timeout),
        }
    }

    fn encode(&self, spans: Vec<Span>) -> std::io::Result<Bytes> {
        let raw = span::request(&self.resource, spans).encode_to_vec();
        if !self.config.gzip {
            return Ok(Bytes::from(raw));
        }
        let mut gz = flate2::write::GzEncoder::new(
            Vec::with_capacity(raw.len() / 2),
            flate2::Compression::fast(),
        );
        gz.write_all(&raw)?;
        Ok(Bytes::from(gz.finish()?))
    }

    /// The number of spans the collector rejected, or why the batch failed.
    async fn post_with_retries(&self, body: Bytes) -> Result<u64, ExportError> {
        let mut attempt = 0;
        loop {
            match self.post(body.clone()).await {
                Err(ExportError::Status(code))
                    if attempt < RETRIES && matches!(code, 429 | 502 | 503 | 504) =>
                {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(100 << (2 * attempt))).await;
                }
                other => return other,
            }
        }
    }

    async fn post(&self, body: Bytes) -> Result<u64, ExportError> {
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(self.config.endpoint.uri().clone())
            .header(CONTENT_TYPE, "application/x-protobuf")
            .header(USER_AGENT, concat!("windowtap/", env!("CARGO_PKG_VERSION")));
        if self.config.gzip {
            req = req.header(CONTENT_ENCODING, "gzip");
        }
        for (k, v) in &self.config.headers {
            req = req.header(k, v);
        }
        let req = req
            .body(Full::new(body))
            .map_err(|_| ExportError::Request)?;
        let resp = self.client.request(req).await.map_err(classify)?;
        let status = resp.status();
        let body = Limited::new(resp.into_body(), MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        if !status.is_success() {
            return Err(ExportError::Status(status.as_u16()));
        }
        // A body that is not an ExportTraceServiceResponse (some collectors answer JSON or
        // nothing) is still a success: only an explicit partial success rejects spans.
        let rejected = ExportTraceServiceResponse::decode(body)
            .ok()
            .and_then(|r| r.partial_success)
            .map(|p| u64::try_from(p.rejected_spans).unwrap_or(0))
            .unwrap_or(0);
        Ok(rejected)
    }
}

/// A client error as a fixed word and the I/O error kind from its causes.
fn classify(e: hyper_util::client::legacy::Error) -> ExportError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(&e);
    let mut kind = None;
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            kind = Some(io.kind());
            break;
        }
        source = s.source();
    }
    if e.is_connect() {
        ExportError::Connect(kind.unwrap_or(std::io::ErrorKind::Other))
    } else {
        ExportError::Request
    }
}

fn http_client(config: &ExportConfig) -> Result<HttpClient, StartError> {
    let roots = crate::tls::ExtraRoots::read_optional(config.ca_file.as_deref())
        .map_err(crate::tls::TlsError::from)?;
    let https = crate::tls::https_connector(&roots, config.timeout)?;
    Ok(Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .build(https))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::otlp::config::Endpoint;
    use crate::otlp::testing::{Answer, Receiver};
    use opentelemetry_proto::tonic::common::v1::any_value;

    /// A span starting `i` × 100 ms after the epoch.
    fn test_span(i: usize, epoch: u64) -> Span {
        Span {
            trace_id: vec![1; 16],
            span_id: vec![i as u8 + 1; 8],
            name: "execute_tool echo".into(),
            start_time_unix_nano: span::unix_nanos(epoch, 100.0 * i as f64),
            end_time_unix_nano: span::unix_nanos(epoch, 100.0 * i as f64 + 50.0),
            ..Default::default()
        }
    }

    fn config(url: &str) -> ExportConfig {
        let mut c = ExportConfig::new(Endpoint::from_flag(url).unwrap());
        // Only a full batch or the shutdown sends, unless a test says otherwise.
        c.schedule_delay = Duration::from_secs(3600);
        c.timeout = Duration::from_secs(5);
        c
    }

    #[tokio::test]
    async fn spans_go_out_in_batches_with_the_resource_and_headers() {
        let rx = Receiver::start(vec![Answer::Ok]).await;
        let mut c = config(&rx.url());
        c.max_batch = 2;
        c.headers.push((
            http::HeaderName::from_static("x-api-key"),
            http::HeaderValue::from_static("k"),
        ));
        c.resource_attr("windowtap.command", "test");
        let exporter = Exporter::start(c).unwrap();
        let h = exporter.handle();
        for i in 0..5 {
            assert!(h.span(test_span(i, 1_000_000_000)));
        }
        let report = exporter.shutdown().await;
        assert_eq!(
            report,
            ExportReport {
                queued: 5,
                exported: 5,
                ..Default::default()
            }
        );
        assert_eq!(rx.batch_sizes(), [2, 2, 1]);
        let got = rx.received.lock().unwrap();
        assert_eq!(got[0].headers["content-type"], "application/x-protobuf");
        assert_eq!(got[0].headers["x-api-key"], "k");
        let resource = got[0].request.resource_spans[0].resource.as_ref().unwrap();
        let attr = |k: &str| {
            resource
                .attributes
                .iter()
                .find(|kv| kv.key == k)
                .and_then(|kv| kv.value.clone())
                .and_then(|v| v.value)
        };
        assert_eq!(
            attr("service.name"),
            Some(any_value::Value::StringValue("windowtap".into()))
        );
        assert_eq!(
            attr("windowtap.command"),
            Some(any_value::Value::StringValue("test".into()))
        );
        let scope = got[0].request.resource_spans[0].scope_spans[0]
            .scope
            .as_ref()
            .unwrap();
        assert_eq!(scope.name, "windowtap");
        let names: Vec<_> = got
            .iter()
            .flat_map(|r| r.spans())
            .map(|s| (s.name.clone(), s.start_time_unix_nano))
            .collect();
        assert_eq!(names[4], ("execute_tool echo".into(), 1_400_000_000));
    }

    #[tokio::test]
    async fn a_partial_batch_goes_out_on_the_timer() {
        let rx = Receiver::start(vec![Answer::Ok]).await;
        let mut c = config(&rx.url());
        c.schedule_delay = Duration::from_millis(10);
        let exporter = Exporter::start(c).unwrap();
        let h = exporter.handle();
        for i in 0..3 {
            h.span(test_span(i, 0));
        }
        // No shutdown: only the timer can send them. Bounded wait.
        for _ in 0..500 {
            if rx.batch_sizes().iter().sum::<usize>() == 3 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(rx.batch_sizes().iter().sum::<usize>(), 3);
        assert_eq!(exporter.shutdown().await.exported, 3);
    }

    #[tokio::test]
    async fn gzip_bodies_decode_to_the_same_spans() {
        let rx = Receiver::start(vec![Answer::Ok]).await;
        let mut c = config(&rx.url());
        c.gzip = true;
        let exporter = Exporter::start(c).unwrap();
        exporter.handle().span(test_span(1, 0));
        assert_eq!(exporter.shutdown().await.exported, 1);
        let got = rx.received.lock().unwrap();
        assert_eq!(got[0].headers["content-encoding"], "gzip");
        assert_eq!(got[0].spans()[0].name, "execute_tool echo");
    }

    #[tokio::test]
    async fn a_partial_success_counts_rejected_spans() {
        let rx = Receiver::start(vec![Answer::Reject(1)]).await;
        let exporter = Exporter::start(config(&rx.url())).unwrap();
        for i in 0..3 {
            exporter.handle().span(test_span(i, 0));
        }
        let r = exporter.shutdown().await;
        assert_eq!((r.exported, r.rejected, r.lost()), (2, 1, 1));
    }

    #[tokio::test]
    async fn try_again_statuses_are_retried_and_others_are_not() {
        let rx = Receiver::start(vec![Answer::Status(503), Answer::Ok]).await;
        let exporter = Exporter::start(config(&rx.url())).unwrap();
        exporter.handle().span(test_span(1, 0));
        let r = exporter.shutdown().await;
        assert_eq!((r.exported, r.failed), (1, 0));
        assert_eq!(rx.batch_sizes(), [1, 1]);

        let rx = Receiver::start(vec![Answer::Status(400), Answer::Ok]).await;
        let exporter = Exporter::start(config(&rx.url())).unwrap();
        exporter.handle().span(test_span(1, 0));
        let r = exporter.shutdown().await;
        assert_eq!((r.exported, r.failed), (0, 1));
        assert_eq!(r.first_error, Some(ExportError::Status(400)));
        assert_eq!(rx.batch_sizes(), [1]);
    }

    #[tokio::test]
    async fn a_stalled_collector_costs_counted_spans_and_never_blocks() {
        let rx = Receiver::start(vec![Answer::Stall]).await;
        let mut c = config(&rx.url());
        c.max_queue = 1;
        c.max_batch = 1;
        c.timeout = Duration::from_millis(200);
        let exporter = Exporter::start(c).unwrap();
        let h = exporter.handle();
        // The task cannot run in between (one-thread runtime): one span queues, the rest
        // find the queue full, and none of these calls waits.
        let accepted = (0..20).filter(|i| h.span(test_span(*i, 0))).count();
        assert_eq!(accepted, 1);
        let r = exporter.shutdown().await;
        assert_eq!((r.queued, r.dropped, r.exported), (1, 19, 0));
        assert_eq!(r.lost(), 20);
        // After shutdown every record is dropped, still without waiting.
        assert!(!h.span(test_span(99, 0)));
    }

    #[tokio::test]
    async fn an_unreachable_collector_is_a_counted_connect_failure() {
        // A port that was just free: nothing listens there.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let exporter = Exporter::start(config(&format!("http://127.0.0.1:{port}"))).unwrap();
        exporter.handle().span(test_span(1, 0));
        let r = exporter.shutdown().await;
        assert_eq!((r.exported, r.failed), (0, 1));
        assert!(matches!(r.first_error, Some(ExportError::Connect(_))));
    }

    #[tokio::test]
    async fn https_with_an_extra_root_from_a_pem_file() {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let leaf_key = rcgen::KeyPair::generate().unwrap();
        let leaf = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .signed_by(&leaf_key, &issuer)
            .unwrap();
        let server = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls_pki_types::PrivateKeyDer::try_from(leaf_key.serialize_der()).unwrap(),
        )
        .unwrap();
        let rx = Receiver::start_tls(vec![Answer::Ok], Arc::new(server)).await;
        let url = format!("https://localhost:{}", rx.addr.port());

        // Without the root the certificate is not trusted: a counted failure.
        let exporter = Exporter::start(config(&url)).unwrap();
        exporter.handle().span(test_span(1, 0));
        assert_eq!(exporter.shutdown().await.failed, 1);

        let dir = tempfile::tempdir().unwrap();
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, ca_cert.pem()).unwrap();
        let mut c = config(&url);
        c.ca_file = Some(ca_file);
        let exporter = Exporter::start(c).unwrap();
        exporter.handle().span(test_span(1, 0));
        assert_eq!(exporter.shutdown().await.exported, 1);
        assert_eq!(rx.batch_sizes(), [1]);
    }

    #[tokio::test]
    async fn a_ca_file_without_certificates_is_a_start_error() {
        let dir = tempfile::tempdir().unwrap();
        let ca_file = dir.path().join("empty.pem");
        std::fs::write(&ca_file, "not a certificate\n").unwrap();
        let mut c = config("https://localhost:1");
        c.ca_file = Some(ca_file);
        assert!(matches!(
            Exporter::start(c),
            Err(StartError::Tls(crate::tls::TlsError::CaFile(
                crate::tls::CaFileError::Empty { .. }
            )))
        ));
    }

    #[test]
    fn starting_outside_a_runtime_is_an_error() {
        assert!(matches!(
            Exporter::start(config("http://127.0.0.1:1")),
            Err(StartError::NoRuntime)
        ));
    }
}
