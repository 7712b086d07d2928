//! The exporter for synchronous commands (`windowtap replay`): its own small runtime on one
//! worker thread, so the caller's thread only builds spans and queues them.
//!
//! Replay hands over a whole trace's records at once, far faster than any collector takes
//! them, so here a full queue is waited for (bounded by the export timeout) instead of
//! dropping spans: the records are decided already, and a replay into a backend should be
//! complete. Once a wait runs out or a batch fails, the collector is taken to be stuck or down
//! and the rest is queued without waiting (and dropped when full), so a dead collector costs
//! a replay about one export timeout, not one per record.

use correlator::Record;
use opentelemetry_proto::tonic::trace::v1::Span;

use super::config::{Endpoint, ExportConfig};
use super::export::{ExportReport, Exporter, ExporterHandle, StartError};
use super::span::unix_nanos;

pub struct BlockingExporter {
    rt: tokio::runtime::Runtime,
    exporter: Exporter,
    handle: ExporterHandle,
    stuck: std::cell::Cell<bool>,
}

impl BlockingExporter {
    pub fn start(config: ExportConfig) -> Result<Self, StartError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("windowtap-otlp")
            .enable_all()
            .build()
            .map_err(|_| StartError::NoRuntime)?;
        let exporter = {
            let _in_rt = rt.enter();
            Exporter::start(config)?
        };
        let handle = exporter.handle();
        Ok(BlockingExporter {
            rt,
            exporter,
            handle,
            stuck: std::cell::Cell::new(false),
        })
    }

    /// Queues one span, waiting for room at most once per export timeout.
    pub fn span(&self, span: Span) -> bool {
        if self.stuck.get() || self.handle.has_failed() {
            return self.handle.span(span);
        }
        let wait = self.exporter.timeout();
        let queued = self.rt.block_on(self.handle.span_waiting(span, wait));
        if !queued {
            self.stuck.set(true);
        }
        queued
    }

    /// Flushes (bounded by the export timeout) and says what was delivered, and where.
    pub fn finish(self) -> (Endpoint, ExportReport) {
        let endpoint = self.exporter.endpoint().clone();
        let report = self.rt.block_on(self.exporter.shutdown());
        // Idle connections and the aborted task (if any) go with the runtime, without waiting.
        self.rt.shutdown_background();
        (endpoint, report)
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
    use crate::otlp::config::Endpoint;
    use crate::otlp::testing::{Answer, Receiver};

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

    fn tiny_queue(url: &str) -> ExportConfig {
        let mut c = ExportConfig::new(Endpoint::from_flag(url).unwrap());
        c.max_queue = 1;
        c.max_batch = 1;
        c.timeout = std::time::Duration::from_millis(500);
        c
    }

    #[test]
    fn a_replay_waits_for_room_and_delivers_every_span() {
        let (_rt, rx) = receiver(vec![Answer::Ok]);
        let e = BlockingExporter::start(tiny_queue(&rx.url())).unwrap();
        for i in 0..40 {
            assert!(e.span(span(i)));
        }
        let (_, report) = e.finish();
        assert_eq!((report.exported, report.lost()), (40, 0));
        assert_eq!(rx.batch_sizes(), vec![1; 40]);
    }

    #[test]
    fn a_stuck_collector_costs_one_wait_then_drops() {
        let (_rt, rx) = receiver(vec![Answer::Stall]);
        let e = BlockingExporter::start(tiny_queue(&rx.url())).unwrap();
        let queued = (0..40).filter(|i| e.span(span(*i))).count();
        // One in flight, one queued, and perhaps one more that got in as the first request
        // failed; after that nothing waits.
        assert!(queued <= 3, "{queued}");
        assert!(e.stuck.get() || e.handle.has_failed());
        let (_, report) = e.finish();
        assert_eq!((report.exported, report.lost()), (0, 40));
        assert_eq!(report.dropped, 40 - queued as u64);
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
