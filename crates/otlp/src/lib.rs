//! OTLP export of a run as a trace tree (OTLP/HTTP protobuf, `POST …/v1/traces`): one trace per
//! agent turn, a `chat {model}` span per model response, and each MCP call's
//! `execute_tool {tool}` span under the response it ran in, or, abstained, linked to every
//! candidate with windowtap's reason.
//!
//! - [`config`]: the `--otlp-endpoint` flag and the `OTEL_*` variables windowtap reads itself
//!   (endpoint, timeout, certificate).
//! - [`tree`]: the sans-IO span builder: events and records in, finished spans out, ids derived
//!   from a source key.
//! - [`span`]: attribute names and values, times, the export request.
//! - [`offline`]: the tree of a replayed trace file; [`LiveTree`]: of a live run.
//! - [`span_data`]: a finished span in the OpenTelemetry SDK's form.
//! - [`export`]: the OpenTelemetry SDK's batch processor and `opentelemetry-otlp`'s exporter,
//!   over windowtap's HTTP transport, counting what became of each span.
//! - [`blocking`]: batches sent one by one for synchronous commands (`replay`).
//! - `--join-host-trace`: a request's W3C `traceparent` as its chat span's parent, read on the
//!   data path (`relay::HostParent`) and carried beside the events, never in them.
//!
//! Live commands (relay, run) flatten [`OtlpArgs`], start an [`Exporter`] inside their
//! runtime and feed a [`LiveTree`] on the correlator task; `docs/otlp.md` shows the code and
//! documents the tree and the decisions behind it.

#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

pub mod blocking;
pub mod config;
pub mod export;
pub mod offline;
pub mod span;
pub mod span_data;
#[cfg(test)]
pub mod testing;
pub mod tree;

pub use blocking::{replay_epoch, BlockingExporter};
// The live commands (relay, run) take these; replay uses the blocking wrapper.
#[allow(unused_imports)]
pub use config::{resolve, ConfigError, Endpoint, ExportConfig, Resolved};
#[allow(unused_imports)]
pub use export::{ExportError, ExportReport, Exporter, ExporterHandle, StartError};

/// The command-line side, for every command that exports (`#[command(flatten)]` it).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct OtlpArgs {
    /// Also export each record as an OpenTelemetry span (OTLP/HTTP) to URL.
    ///
    /// Protobuf, to `URL/v1/traces` (or to URL itself when it ends in `/v1/traces`). Without it,
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT` turn export on.
    /// Export failures are warnings: the records are written regardless.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
}

impl OtlpArgs {
    /// The flag and this process's `OTEL_*` environment.
    pub fn resolve(&self) -> Result<Resolved, ConfigError> {
        resolve(self.otlp_endpoint.as_deref(), &|k| std::env::var(k).ok())
    }
}

/// The trace tree of a live run (relay, run): fed on the correlator task with every event
/// and record, it queues each span as it is finished, never waiting.
pub struct LiveTree {
    handle: ExporterHandle,
    tree: tree::Tree,
    buf: Vec<opentelemetry_proto::tonic::trace::v1::Span>,
}

impl LiveTree {
    /// `epoch_unix_nanos`: the wall-clock time of the run clock's 0. Ids come from a fresh
    /// random key, so no two runs share one.
    pub fn new(handle: ExporterHandle, epoch_unix_nanos: u64, config: &correlator::Config) -> Self {
        // A record is decided at most `max_window` plus the give-up wait after its window
        // opened; twice that keeps every response a record can name.
        let horizon = 2.0 * (config.max_window + config.close_wait) + 60_000.0;
        let key = tree::SourceKey::for_run(rand::random());
        LiveTree {
            handle,
            tree: tree::Tree::new(
                key,
                epoch_unix_nanos,
                correlator::sanitize::Door::live(),
                horizon,
            ),
            buf: Vec::new(),
        }
    }

    pub fn event(&mut self, ev: &correlator::Event) {
        self.tree.event(ev, &mut self.buf);
        self.send();
    }

    /// `stream`'s (pseudonymous id) request was made under the host's span `parent`.
    pub fn join(&mut self, stream: &str, parent: relay::HostParent) {
        self.tree.join(stream, parent);
    }

    /// `request`'s (pseudonymous id, a WebSocket's) was made under the host's span `parent`.
    pub fn join_request(&mut self, request: &str, parent: relay::HostParent) {
        self.tree.join_request(request, parent);
    }

    pub fn record(&mut self, record: &correlator::sanitize::Cleared<'_>) {
        self.tree.record(record, &mut self.buf);
        self.send();
    }

    /// The run is over at `now` (trace clock): every open span ends.
    pub fn finish(&mut self, now: correlator::Millis) {
        self.tree.finish(now, &mut self.buf);
        self.send();
    }

    fn send(&mut self) {
        for s in self.buf.drain(..) {
            // Never waits: a full queue drops the span.
            self.handle.span(s);
        }
    }
}

/// One line for the user: how many spans went where, and what was lost and why.
pub fn report_line(endpoint: &Endpoint, r: &ExportReport) -> String {
    let mut line = format!("otlp: {} spans exported to {endpoint}", r.exported);
    let lost = r.lost();
    if lost > 0 {
        line.push_str(&format!(
            "; {lost} not delivered ({} dropped from a full queue, {} rejected, {} failed, {} unsent at shutdown)",
            r.dropped, r.rejected, r.failed, r.unsent
        ));
        if let Some(e) = r.first_error {
            line.push_str(&format!(": {e}"));
        }
    }
    line
}

/// The wall-clock time of a running clock's 0, from how far that clock has run: call it once
/// at start with the clock's current reading in ms.
pub fn clock_epoch_unix_nanos(clock_now_ms: f64) -> u64 {
    span::unix_nanos(now_unix_nanos(), -clock_now_ms)
}

/// Wall-clock now in Unix nanoseconds (0 if the clock is before 1970).
pub fn now_unix_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_epoch_is_now_less_the_clock_reading() {
        let before = now_unix_nanos();
        let epoch = clock_epoch_unix_nanos(1500.0);
        let after = now_unix_nanos();
        assert!(before - 1_500_000_000 <= epoch && epoch <= after - 1_500_000_000);
    }

    #[test]
    fn the_report_line_says_what_was_lost_and_why() {
        let e = Endpoint::from_flag("http://127.0.0.1:9").unwrap();
        let ok = ExportReport {
            queued: 3,
            exported: 3,
            ..Default::default()
        };
        assert_eq!(
            report_line(&e, &ok),
            "otlp: 3 spans exported to http://127.0.0.1:9/v1/traces"
        );
        let bad = ExportReport {
            queued: 2,
            dropped: 1,
            failed: 2,
            first_error: Some(ExportError::Status(503)),
            ..Default::default()
        };
        assert_eq!(
            report_line(&e, &bad),
            "otlp: 0 spans exported to http://127.0.0.1:9/v1/traces; 3 not delivered \
             (1 dropped from a full queue, 0 rejected, 2 failed, 0 unsent at shutdown): \
             the collector answered HTTP 503"
        );
    }
}
