//! The exporter for synchronous commands (`windowtap replay`): its own small runtime on one
//! worker thread, so correlation on the caller's thread never waits for the network.

use correlator::Record;

use super::config::{Endpoint, ExportConfig};
use super::export::{ExportReport, Exporter, ExporterHandle, StartError};
use super::span::unix_nanos;

pub struct BlockingExporter {
    rt: tokio::runtime::Runtime,
    exporter: Exporter,
    handle: ExporterHandle,
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
        })
    }

    /// Queues one record's span; never waits.
    pub fn record(&self, record: &Record, epoch_unix_nanos: u64) -> bool {
        self.handle.record(record, epoch_unix_nanos)
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
