//! The exporter for synchronous commands (`windowtap replay`), and where a replayed trace sits
//! in time.

use correlator::Record;
use opentelemetry::InstrumentationScope;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

use super::config::{Endpoint, ExportConfig};
use super::export::{Counting, ExportReport, StartError};
use super::span::unix_nanos;
use super::span_data::{scope, span_data};

/// The exporter for synchronous commands (`windowtap replay`): batches are sent from the
/// caller's thread, one at a time, each bounded by the export timeout, on a runtime of its own.
///
/// Replay hands over a whole trace's records at once, far faster than any collector takes
/// them, and the SDK's processor only drops what does not fit its queue. Here the caller waits
/// for each batch instead: the records are decided already, and a replay into a backend should
/// be complete. Once a batch fails, the collector is taken to be down and the rest is dropped,
/// so a dead collector costs a replay about one export timeout, not one per batch.
pub struct BlockingExporter {
    rt: tokio::runtime::Runtime,
    exporter: Counting,
    scope: InstrumentationScope,
    batch: std::cell::RefCell<Vec<SpanData>>,
    max_batch: usize,
    stuck: std::cell::Cell<bool>,
    endpoint: Endpoint,
}

impl BlockingExporter {
    pub fn start(config: ExportConfig) -> Result<Self, StartError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("windowtap-otlp")
            .enable_all()
            .build()
            .map_err(|_| StartError::NoRuntime)?;
        let exporter = Counting::new(&config, rt.handle().clone())?;
        Ok(BlockingExporter {
            rt,
            exporter,
            scope: scope(),
            batch: Default::default(),
            max_batch: config.max_batch.max(1),
            stuck: Default::default(),
            endpoint: config.endpoint,
        })
    }

    /// Hands one span over; sends a batch when one is full.
    pub fn span(&self, span: Span) {
        self.exporter.handed();
        if self.stuck.get() {
            return;
        }
        let full = {
            let mut batch = self.batch.borrow_mut();
            batch.push(span_data(span, &self.scope));
            batch.len() >= self.max_batch
        };
        if full {
            self.send();
        }
    }

    fn send(&self) {
        let batch = std::mem::take(&mut *self.batch.borrow_mut());
        if batch.is_empty() || self.stuck.get() {
            return;
        }
        if self.rt.block_on(self.exporter.export(batch)).is_err() {
            self.stuck.set(true);
        }
    }

    /// Sends the last batch and says what was delivered, and where.
    pub fn finish(self) -> (Endpoint, ExportReport) {
        self.send();
        let _ = self.exporter.shutdown();
        // Idle connections go with the runtime, without waiting.
        let report = self.exporter.report(true);
        self.rt.shutdown_background();
        (self.endpoint, report)
    }
}

/// The wall-clock time of a replayed trace's clock 0: the header's `epoch_unix_ms` when it
/// has one (a live capture knows when it started); otherwise the trace is placed so that its
/// last decision is `now`, as if the session had just ended.
pub fn replay_epoch(header_epoch_unix_ms: Option<f64>, records: &[Record], now: u64) -> u64 {
    if let Some(ms) = header_epoch_unix_ms {
        return unix_nanos(0, ms);
    }
    let last = records
        .iter()
        .map(|r| r.decided_at.max(r.end))
        .fold(0.0_f64, f64::max);
    now.saturating_sub(unix_nanos(0, last))
}

#[cfg(test)]
mod tests {
    use super::*;
    use correlator::Record;

    fn span(i: u64) -> Span {
        Span {
            trace_id: vec![1; 16],
            span_id: (i + 1).to_be_bytes().to_vec(),
            name: "execute_tool t".into(),
            ..Default::default()
        }
    }
    use crate::config::Endpoint;
    use crate::testing::{start_with_env, Answer, Receiver};

    fn record(end: f64, decided_at: f64) -> Record {
        Record {
            interval: "i".into(),
            alias: "a".into(),
            tool: "t".into(),
            start: 0.0,
            end,
            reason: None,
            evidence: vec![],
            candidates: 0,
            window: None,
            decided_at,
        }
    }

    fn receiver(answers: Vec<Answer>) -> (tokio::runtime::Runtime, Receiver) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let rx = rt.block_on(Receiver::start(answers));
        (rt, rx)
    }

    fn one_span_batches(url: &str) -> ExportConfig {
        let mut c = ExportConfig::new(Endpoint::from_flag(url).unwrap());
        c.max_batch = 1;
        c.timeout = std::time::Duration::from_millis(500);
        c
    }

    #[test]
    fn a_replay_waits_for_each_batch_and_delivers_every_span() {
        let (_rt, rx) = receiver(vec![Answer::Ok]);
        let e =
            start_with_env(&[], || BlockingExporter::start(one_span_batches(&rx.url()))).unwrap();
        for i in 0..40 {
            e.span(span(i));
        }
        let (_, report) = e.finish();
        assert_eq!((report.exported, report.lost()), (40, 0));
        assert_eq!(rx.batch_sizes(), vec![1; 40]);
    }

    #[test]
    fn a_stuck_collector_costs_one_batch_then_drops() {
        let (_rt, rx) = receiver(vec![Answer::Stall]);
        let e =
            start_with_env(&[], || BlockingExporter::start(one_span_batches(&rx.url()))).unwrap();
        for i in 0..40 {
            e.span(span(i));
        }
        assert!(e.stuck.get());
        let (_, report) = e.finish();
        // The first batch timed out; nothing else was sent.
        assert_eq!(rx.batch_sizes(), [1]);
        assert_eq!(
            (
                report.exported,
                report.failed,
                report.dropped,
                report.lost()
            ),
            (0, 1, 39, 40)
        );
        assert_eq!(report.first_error, Some(super::super::ExportError::Timeout));
    }

    #[test]
    fn the_header_epoch_wins() {
        assert_eq!(
            replay_epoch(Some(1_700_000_000_123.5), &[record(5.0, 6.0)], 42),
            1_700_000_000_123_500_000
        );
    }

    #[test]
    fn without_one_the_last_decision_lands_at_now() {
        let now = 1_800_000_000_000_000_000;
        let rs = [record(5.0, 2_000.0), record(9_000.0, 3_000.0)];
        assert_eq!(replay_epoch(None, &rs, now), now - 9_000_000_000);
        assert_eq!(replay_epoch(None, &[], now), now);
    }
}
