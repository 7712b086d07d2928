//! The exporter: windowtap's finished spans go to the OpenTelemetry SDK's
//! `BatchSpanProcessor` (queue, batches, timer, flush at stop) and from it to
//! `opentelemetry-otlp`'s HTTP span exporter (the `OTEL_EXPORTER_OTLP_*` headers, compression
//! and protocol, retries with backoff, the OTLP encoding).
//!
//! windowtap keeps two small pieces of its own, for what the crates do not give
//! (docs/otlp.md, "What comes from the OpenTelemetry crates"):
//!
//! - [`Transport`], the HTTP client the crate sends with: the relay's hyper + rustls
//!   connector (with the extra root of `OTEL_EXPORTER_OTLP_CERTIFICATE`), a bound on each
//!   request, and what each attempt came to: the failure as the relay's fixed word (`refused`,
//!   `dns`, `tls`, …) or the HTTP status, and the spans a partial success rejected. The crate
//!   reduces a failure to "network error" and reports rejected spans only to its internal log.
//! - [`Counting`], around the crate's exporter: what happened to every span, for the line a
//!   command prints at the end.
//!
//! Delivery is best effort by design: a slow or dead collector costs spans (counted in the
//! [`ExportReport`]), never correlation time. Failures are reported by kind only: no header
//! value, URL credential or response body is ever logged (the crates' internal logs, which
//! carry the endpoint URL and the collector's messages, are not built).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SpanData, SpanExporter, SpanProcessor,
};
use opentelemetry_sdk::Resource;
use prost::Message;

use super::config::{Endpoint, ExportConfig};
use super::span_data::{scope, span_data};
use relay::Failure;

/// Responses larger than this are not read (an OTLP response is a few bytes).
const MAX_RESPONSE_BYTES: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("otlp: not inside a tokio runtime")]
    NoRuntime,
    #[error("otlp: {0}")]
    Tls(#[from] relay::TlsError),
    /// The crate's own message is not shown: it may quote a configured value.
    #[error("otlp: the exporter could not be made from the OTEL_EXPORTER_OTLP_* settings")]
    Build,
}

/// Why a batch was not delivered: a fixed word and, for HTTP, the status code. Never a body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportError {
    /// No connection; the relay's word for why (`refused`, `dns`, `tls`, `timeout`, …).
    Connect(Failure),
    /// The connection broke or the request failed otherwise.
    Request(Failure),
    /// No answer within the export timeout.
    Timeout,
    Status(u16),
    /// The exporter gave up on the batch without a request (e.g. a body over its size limit).
    Exporter,
}

impl fmt::Display for ExportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExportError::Connect(why) => write!(f, "could not connect ({})", why.as_str()),
            ExportError::Request(Failure::Other) => f.write_str("the request failed"),
            ExportError::Request(why) => write!(f, "the request failed ({})", why.as_str()),
            ExportError::Timeout => f.write_str("timed out"),
            ExportError::Status(code) => write!(f, "the collector answered HTTP {code}"),
            ExportError::Exporter => f.write_str("the exporter dropped the batch"),
        }
    }
}

impl std::error::Error for ExportError {}

/// What happened to the spans handed to the exporter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExportReport {
    /// Handed to the exporter.
    pub queued: u64,
    /// Never sent: the queue was full, the exporter had shut down, or (replay) the collector
    /// had already failed.
    pub dropped: u64,
    /// Accepted by the collector.
    pub exported: u64,
    /// Refused by the collector in a partial success.
    pub rejected: u64,
    /// In batches that failed (connection, timeout, HTTP error).
    pub failed: u64,
    /// Never sent, when the flush at stop ran out of time: still queued then, or dropped from
    /// a full queue before (the SDK's processor does not tell which).
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

#[derive(Debug, Default)]
struct Counters {
    handed: AtomicU64,
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

    /// `flushed`: every span that got into the queue reached the exporter (the flush at stop
    /// finished), so the ones that did not were dropped.
    fn report(&self, flushed: bool) -> ExportReport {
        let queued = self.handed.load(Ordering::Relaxed);
        let exported = self.exported.load(Ordering::Relaxed);
        let rejected = self.rejected.load(Ordering::Relaxed);
        let failed = self.failed.load(Ordering::Relaxed);
        let never_sent = queued.saturating_sub(exported + rejected + failed);
        let (dropped, unsent) = if flushed {
            (never_sent, 0)
        } else {
            (0, never_sent)
        };
        ExportReport {
            queued,
            dropped,
            exported,
            rejected,
            failed,
            unsent,
            first_error: *self.first_error.lock().unwrap_or_else(|p| p.into_inner()),
        }
    }
}

/// What the last request attempt came to, as [`Transport`] saw it.
#[derive(Debug, Default, Clone, Copy)]
struct Attempt {
    error: Option<ExportError>,
    rejected: u64,
}

type SharedAttempt = Arc<Mutex<Attempt>>;

fn lock(a: &SharedAttempt) -> std::sync::MutexGuard<'_, Attempt> {
    a.lock().unwrap_or_else(|p| p.into_inner())
}

type HyperClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The HTTP client `opentelemetry-otlp` sends with. Its requests run on a tokio runtime (the
/// relay's, or replay's own) whichever thread the SDK exports from.
#[derive(Clone)]
pub struct Transport {
    client: HyperClient,
    rt: tokio::runtime::Handle,
    /// Each request's bound: the crate's retry deadline does not cut a request short.
    timeout: Duration,
    last: SharedAttempt,
}

/// No URL, no headers.
impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Transport")
    }
}

impl Transport {
    fn new(
        config: &ExportConfig,
        rt: tokio::runtime::Handle,
        last: SharedAttempt,
    ) -> Result<Self, StartError> {
        let roots = relay::ExtraRoots::read_optional(config.ca_file.as_deref())
            .map_err(relay::TlsError::from)?;
        let https = relay::https_connector(&roots, config.timeout)?;
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(https);
        Ok(Transport {
            client,
            rt,
            timeout: config.timeout,
            last,
        })
    }

    async fn attempt(
        self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, ExportError> {
        let request = request.map(Full::new);
        let exchange = async {
            let response = self.client.request(request).await.map_err(classify)?;
            let (head, body) = response.into_parts();
            let body = Limited::new(body, MAX_RESPONSE_BYTES)
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            Ok(http::Response::from_parts(head, body))
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| ExportError::Timeout)?
    }
}

impl opentelemetry_http::HttpClient for Transport {
    fn send_bytes<'a, 'r>(
        &'a self,
        request: http::Request<Bytes>,
    ) -> Pin<
        Box<
            dyn Future<Output = Result<http::Response<Bytes>, opentelemetry_http::HttpError>>
                + Send
                + 'r,
        >,
    >
    where
        'a: 'r,
        Self: 'r,
    {
        let task = self.rt.spawn(self.clone().attempt(request));
        Box::pin(async move {
            // A runtime that is shutting down cancels the task.
            let outcome = task
                .await
                .unwrap_or(Err(ExportError::Request(Failure::Other)));
            let mut last = lock(&self.last);
            match outcome {
                Ok(response) if response.status().is_success() => {
                    // A body that is not an ExportTraceServiceResponse (some collectors
                    // answer JSON or nothing) is still a success: only an explicit partial
                    // success rejects spans.
                    let rejected = ExportTraceServiceResponse::decode(response.body().clone())
                        .ok()
                        .and_then(|r| r.partial_success)
                        .map_or(0, |p| u64::try_from(p.rejected_spans).unwrap_or(0));
                    *last = Attempt {
                        error: None,
                        rejected,
                    };
                    Ok(response)
                }
                Ok(response) => {
                    // The crate decides on retries from the status.
                    last.error = Some(ExportError::Status(response.status().as_u16()));
                    Ok(response)
                }
                Err(e) => {
                    last.error = Some(e);
                    Err(Box::new(e) as opentelemetry_http::HttpError)
                }
            }
        })
    }
}

/// A client error as the relay's fixed word for it.
fn classify(e: hyper_util::client::legacy::Error) -> ExportError {
    let why = Failure::classify(&e);
    if e.is_connect() {
        ExportError::Connect(why)
    } else if why == Failure::Timeout {
        ExportError::Timeout
    } else {
        ExportError::Request(why)
    }
}

/// `opentelemetry-otlp`'s span exporter, counting what became of each batch.
pub struct Counting {
    inner: opentelemetry_otlp::SpanExporter,
    last: SharedAttempt,
    counters: Arc<Counters>,
}

impl Counting {
    /// The crate's exporter over [`Transport`], for the endpoint windowtap resolved and its
    /// timeout; the crate reads the rest of `OTEL_EXPORTER_OTLP_[TRACES_]*`.
    pub(super) fn new(
        config: &ExportConfig,
        rt: tokio::runtime::Handle,
    ) -> Result<Counting, StartError> {
        let last = SharedAttempt::default();
        let transport = Transport::new(config, rt, last.clone())?;
        let mut inner = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(transport)
            // The crate's default names itself; collectors' logs should name windowtap.
            .with_headers(std::collections::HashMap::from([(
                "User-Agent".to_string(),
                concat!("windowtap/", env!("CARGO_PKG_VERSION")).to_string(),
            )]))
            .with_endpoint(config.endpoint.uri().to_string())
            .with_timeout(config.timeout)
            .build()
            .map_err(|_| StartError::Build)?;
        inner.set_resource(&resource());
        Ok(Counting {
            inner,
            last,
            counters: Arc::default(),
        })
    }
}

/// Not the crate's exporter: its `Debug` shows the request headers, values included.
impl fmt::Debug for Counting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Counting")
    }
}

impl Counting {
    /// One more span handed over.
    pub(super) fn handed(&self) {
        self.counters.handed.fetch_add(1, Ordering::Relaxed);
    }

    /// What became of the spans handed over; `flushed`: every one was offered to the exporter.
    pub(super) fn report(&self, flushed: bool) -> ExportReport {
        self.counters.report(flushed)
    }
}

impl SpanExporter for Counting {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len() as u64;
        *lock(&self.last) = Attempt::default();
        let result = self.inner.export(batch).await;
        let last = *lock(&self.last);
        let c = &self.counters;
        match &result {
            Ok(()) => {
                let rejected = last.rejected.min(n);
                c.exported.fetch_add(n - rejected, Ordering::Relaxed);
                if rejected > 0 {
                    c.rejected.fetch_add(rejected, Ordering::Relaxed);
                    tracing::warn!(spans = rejected, "otlp: the collector rejected spans");
                }
            }
            Err(_) => c.fail(n, last.error.unwrap_or(ExportError::Exporter)),
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The SDK's resource (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `telemetry.sdk.*`),
/// named `windowtap` unless those name the service, with windowtap's version.
fn resource() -> Resource {
    let detected = Resource::builder().build();
    let named = detected
        .get(&opentelemetry::Key::from_static_str("service.name"))
        .is_some_and(|n| !n.as_str().starts_with("unknown_service"));
    let mut b = Resource::builder()
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    if !named {
        b = b.with_service_name("windowtap");
    }
    b.build()
}

/// The cheap, cloneable side that hands finished spans over.
#[derive(Clone)]
pub struct ExporterHandle {
    processor: Arc<BatchSpanProcessor>,
    counters: Arc<Counters>,
    scope: InstrumentationScope,
}

impl ExporterHandle {
    /// Hands a span over; never waits (the SDK's processor drops it when its queue is full).
    /// Spans come from [`super::tree::Tree`], which takes only what the sanitizing door let
    /// out.
    pub fn span(&self, span: Span) {
        self.counters.handed.fetch_add(1, Ordering::Relaxed);
        self.processor.on_end(span_data(span, &self.scope));
    }
}

/// The running exporter: hands out [`ExporterHandle`]s and flushes on [`Exporter::shutdown`].
pub struct Exporter {
    handle: ExporterHandle,
    bound: Duration,
    endpoint: Endpoint,
}

impl Exporter {
    /// Starts the SDK's batch processor; requests run on the current tokio runtime.
    ///
    /// `OTEL_BSP_*` are the SDK's; without `OTEL_BSP_SCHEDULE_DELAY` a partial batch waits
    /// 1 s rather than the SDK's 5 s: records are few and a user watches for them.
    pub fn start(config: ExportConfig) -> Result<Exporter, StartError> {
        let rt = tokio::runtime::Handle::try_current().map_err(|_| StartError::NoRuntime)?;
        let exporter = Counting::new(&config, rt)?;
        let counters = exporter.counters.clone();
        let mut batch = BatchConfigBuilder::default();
        if let Some(delay) = config.schedule_delay {
            batch = batch.with_scheduled_delay(delay);
        }
        let processor = BatchSpanProcessor::builder(exporter)
            .with_batch_config(batch.build())
            .build();
        Ok(Exporter {
            handle: ExporterHandle {
                processor: Arc::new(processor),
                counters,
                scope: scope(),
            },
            bound: config.timeout,
            endpoint: config.endpoint,
        })
    }

    pub fn handle(&self) -> ExporterHandle {
        self.handle.clone()
    }

    /// Where spans go, without credentials.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Stops taking spans, sends what is queued, and waits at most the export timeout.
    pub async fn shutdown(self) -> ExportReport {
        let Exporter { handle, bound, .. } = self;
        let processor = handle.processor.clone();
        // The SDK's shutdown blocks its caller until the flush is done or the bound ran out.
        let flushed =
            tokio::task::spawn_blocking(move || processor.shutdown_with_timeout(bound).is_ok())
                .await
                .unwrap_or(false);
        handle.counters.report(flushed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::config::Endpoint;
    use crate::span;
    use crate::testing::{start_with_env, Answer, Receiver};
    use opentelemetry_proto::tonic::common::v1::any_value;

    /// A span starting `i` × 100 ms after the epoch.
    fn test_span(i: usize, epoch: u64) -> Span {
        Span {
            trace_id: vec![1; 16],
            span_id: vec![i as u8 + 1; 8],
            flags: 1,
            name: "execute_tool echo".into(),
            start_time_unix_nano: span::unix_nanos(epoch, 100.0 * i as f64),
            end_time_unix_nano: span::unix_nanos(epoch, 100.0 * i as f64 + 50.0),
            ..Default::default()
        }
    }

    fn config(url: &str) -> ExportConfig {
        let mut c = ExportConfig::new(Endpoint::from_flag(url).unwrap());
        c.timeout = Duration::from_secs(5);
        c
    }

    fn start(c: ExportConfig, env: &[(&str, &str)]) -> Exporter {
        start_with_env(env, || Exporter::start(c)).unwrap()
    }

    #[tokio::test]
    async fn spans_go_out_in_batches_with_the_resource_headers_and_compression_of_the_environment()
    {
        let rx = Receiver::start(vec![Answer::Ok]).await;
        let exporter = start(
            config(&rx.url()),
            &[
                ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "2"),
                ("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=s3cret%3D%3D,x-a=1"),
                ("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "gzip"),
                ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test"),
            ],
        );
        let h = exporter.handle();
        for i in 0..5 {
            h.span(test_span(i, 1_000_000_000));
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
        let sizes = rx.batch_sizes();
        assert_eq!(sizes.iter().sum::<usize>(), 5);
        assert!(sizes.iter().all(|n| *n <= 2), "{sizes:?}");
        let got = rx.received.lock().unwrap();
        assert_eq!(got[0].headers["content-type"], "application/x-protobuf");
        assert_eq!(
            got[0].headers["user-agent"],
            concat!("windowtap/", env!("CARGO_PKG_VERSION"))
        );
        assert_eq!(got[0].headers["content-encoding"], "gzip");
        assert_eq!(got[0].headers["x-api-key"], "s3cret==");
        assert_eq!(got[0].headers["x-a"], "1");
        let resource = got[0].request.resource_spans[0].resource.as_ref().unwrap();
        let attr = |k: &str| {
            resource
                .attributes
                .iter()
                .find(|kv| kv.key == k)
                .and_then(|kv| kv.value.clone())
                .and_then(|v| v.value)
        };
        let text = |v: &str| Some(any_value::Value::StringValue(v.into()));
        assert_eq!(attr("service.name"), text("windowtap"));
        assert_eq!(attr("service.version"), text(env!("CARGO_PKG_VERSION")));
        assert_eq!(attr("deployment.environment"), text("test"));
        let scope = got[0].request.resource_spans[0].scope_spans[0]
            .scope
            .as_ref()
            .unwrap();
        assert_eq!(scope.name, "windowtap");
        let mut spans: Vec<_> = got
            .iter()
            .flat_map(|r| r.spans())
            .map(|s| (s.span_id.clone(), s.name.clone(), s.start_time_unix_nano))
            .collect();
        spans.sort();
        assert_eq!(
            spans[4],
            (vec![5; 8], "execute_tool echo".into(), 1_400_000_000)
        );
    }

    #[tokio::test]
    async fn no_debug_form_shows_a_header_value() {
        let headers = [("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=s3cret")];
        let c = config("http://127.0.0.1:9");
        let counting = start_with_env(&headers, || {
            Counting::new(&c, tokio::runtime::Handle::current())
        })
        .unwrap();
        // The crate's own exporter would show it (its headers are not marked sensitive).
        assert!(format!("{:?}", counting.inner).contains("s3cret"));
        assert!(!format!("{counting:?}").contains("s3cret"));
        let exporter = start(c, &headers);
        let h = exporter.handle();
        assert!(!format!("{:?}", h.processor).contains("s3cret"));
        exporter.shutdown().await;
    }

    #[tokio::test]
    async fn a_partial_batch_goes_out_on_the_timer() {
        let rx = Receiver::start(vec![Answer::Ok]).await;
        let mut c = config(&rx.url());
        c.schedule_delay = Some(Duration::from_millis(10));
        let exporter = start(c, &[]);
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
    async fn a_partial_success_counts_rejected_spans() {
        let rx = Receiver::start(vec![Answer::Reject(1)]).await;
        let exporter = start(config(&rx.url()), &[]);
        for i in 0..3 {
            exporter.handle().span(test_span(i, 0));
        }
        let r = exporter.shutdown().await;
        assert_eq!((r.exported, r.rejected, r.lost()), (2, 1, 1));
    }

    #[tokio::test]
    async fn try_again_statuses_are_retried_and_others_are_not() {
        let rx = Receiver::start(vec![Answer::Status(503), Answer::Ok]).await;
        let exporter = start(config(&rx.url()), &[]);
        exporter.handle().span(test_span(1, 0));
        let r = exporter.shutdown().await;
        assert_eq!((r.exported, r.failed), (1, 0));
        assert_eq!(rx.batch_sizes(), [1, 1]);

        let rx = Receiver::start(vec![Answer::Status(400), Answer::Ok]).await;
        let exporter = start(config(&rx.url()), &[]);
        exporter.handle().span(test_span(1, 0));
        let r = exporter.shutdown().await;
        assert_eq!((r.exported, r.failed), (0, 1));
        assert_eq!(r.first_error, Some(ExportError::Status(400)));
        assert_eq!(rx.batch_sizes(), [1]);
    }

    #[tokio::test]
    async fn a_stalled_collector_costs_counted_spans_and_the_flush_is_bounded() {
        let rx = Receiver::start(vec![Answer::Stall]).await;
        let mut c = config(&rx.url());
        c.timeout = Duration::from_millis(200);
        let exporter = start(
            c,
            &[
                ("OTEL_BSP_MAX_QUEUE_SIZE", "1"),
                ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "1"),
            ],
        );
        let h = exporter.handle();
        // Handing over never waits: what does not fit the queue is dropped.
        for i in 0..20 {
            h.span(test_span(i, 0));
        }
        let r = exporter.shutdown().await;
        assert_eq!((r.queued, r.exported), (20, 0));
        assert_eq!(r.lost(), 20);
        assert!(r.dropped + r.unsent >= 18, "{r:?}");
        // After shutdown a span is lost, still without waiting.
        h.span(test_span(99, 0));
    }

    /// A port that was just free: nothing listens there.
    fn free_port() -> u16 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    }

    #[tokio::test]
    async fn an_unreachable_collector_is_a_connect_failure_named_like_the_relays() {
        let exporter = start(config(&format!("http://127.0.0.1:{}", free_port())), &[]);
        exporter.handle().span(test_span(1, 0));
        let r = exporter.shutdown().await;
        assert_eq!((r.exported, r.failed), (0, 1));
        let e = r.first_error.unwrap();
        assert_eq!(e, ExportError::Connect(Failure::Refused));
        assert_eq!(e.to_string(), "could not connect (refused)");
    }

    #[tokio::test]
    async fn a_name_that_does_not_resolve_is_a_dns_failure() {
        let exporter = start(config("http://windowtap-otlp-test.invalid:4318"), &[]);
        exporter.handle().span(test_span(1, 0));
        let r = exporter.shutdown().await;
        let e = r.first_error.unwrap();
        assert_eq!(e, ExportError::Connect(Failure::Dns));
        assert_eq!(e.to_string(), "could not connect (dns)");
    }

    #[tokio::test]
    async fn https_with_an_extra_root_from_a_pem_file() {
        let pki = testkit::pki();
        let rx = Receiver::start_tls(vec![Answer::Ok], pki.server.clone()).await;
        let url = format!("https://localhost:{}", rx.addr.port());

        // Without the root the certificate is not trusted: a counted failure, named so.
        let exporter = start(config(&url), &[]);
        exporter.handle().span(test_span(1, 0));
        let r = exporter.shutdown().await;
        assert_eq!(r.failed, 1);
        assert_eq!(r.first_error, Some(ExportError::Connect(Failure::Tls)));

        let dir = tempfile::tempdir().unwrap();
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, &pki.ca_pem).unwrap();
        let mut c = config(&url);
        c.ca_file = Some(ca_file);
        let exporter = start(c, &[]);
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
            Err(StartError::Tls(relay::TlsError::CaFile(
                relay::CaFileError::Empty { .. }
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
