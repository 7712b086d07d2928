//! Stopping: signals, the drain of what is in flight, and the last records out.

use anyhow::Context;
use correlator::records::Summary;

use relay::Drain;

use super::start::Running;

/// What [`Running::stop_with`] returns.
#[derive(Debug)]
pub struct Stopped {
    pub summary: Summary,
    /// Model tool calls to MCP tools that no wrapper reported (`crate::mcp_tally`).
    pub unreported: crate::mcp_tally::Unreported,
    pub how: Drain,
    /// Failed exchanges: (mount, failure word, how many), by mount then word.
    pub failed: Vec<(String, &'static str, u64)>,
    /// What the wrappers said of their servers' starts (empty without an ingest socket).
    pub servers: crate::ingest::ServersSeen,
}

impl Running {
    /// Stops accepting, lets what is in flight end (up to the drain bound) while the ingest
    /// socket still takes MCP reports, then ends every MCP call still running `lost`,
    /// finishes the correlator (every pending interval decided), flushes and fsyncs the records and the
    /// capture, and returns the run's summary and how the drain went. When `at_once`
    /// completes (a second signal, yielding its number) the wait for in-flight streams ends
    /// there and then. The correlator is still finished and both files end on a complete
    /// line: every line is written whole by the correlator task (records by its writer
    /// thread), which is asked to stop rather than torn down mid-write.
    pub async fn stop_with(
        self,
        at_once: impl std::future::Future<Output = i32>,
    ) -> anyhow::Result<Stopped> {
        // The ingest socket stays open through the drain: calls that end meanwhile are
        // reported (docs/design.md §4), it is closed below.
        let drain_bound = self.relay.drain_bound();
        let drained = self.relay.drain(self.signalled, at_once).await;
        let how = drained.how;
        // No new reports from here on: calls still running end `lost` now, and those events
        // reach the correlator before it finishes.
        let mut servers = crate::ingest::ServersSeen::default();
        if let Some(ingest) = self.ingest_socket {
            servers = ingest.servers();
            ingest.close().await;
        }
        // The records writer gets the drain bound to get the last records out: all of that
        // only when its output is not being read (a file or a live reader takes them at once).
        let _ = self.stop_live.send(drain_bound);
        let finished = self
            .live
            .await
            .context("the correlator task failed")?
            .context("writing the capture")?;
        // The correlator task has flushed its last line and the records writer is done (or
        // blocked on an output nobody reads, which holds no file to sync).
        for f in &self.sync {
            f.sync_all().context("fsyncing records or capture")?;
        }
        let summary = finished.summary;
        let unreported = finished.unreported;
        let tail = finished.records;
        if tail.lost() > 0 {
            eprintln!(
                "windowtap: {} of {} records were not written ({} dropped while the output was \
                 not read, {} still waiting when the run stopped); {}",
                tail.lost(),
                summary.total(),
                tail.dropped,
                tail.unwritten,
                if self.capture {
                    "every event is in the capture: `windowtap replay` of it gives every record"
                } else {
                    "without --capture they are lost"
                }
            );
        }
        if let Some(e) = tail.error {
            return Err(anyhow::Error::new(e).context("writing records"));
        }
        // Every record has been handed to the exporter: flush it (bounded) and say how it went.
        // Not after a second signal, which asked for an exit at once.
        if let Some(exporter) = self.exporter {
            if matches!(how, Drain::AtOnce(_)) {
                eprintln!("windowtap: otlp: not flushed (stopped at once)");
            } else {
                let endpoint = exporter.endpoint().clone();
                let report = exporter.shutdown().await;
                eprintln!("{}", otlp::report_line(&endpoint, &report));
            }
        }
        let failed = drained.finish();
        Ok(Stopped {
            summary,
            unreported,
            how,
            failed,
            servers,
        })
    }
}

/// SIGINT and SIGTERM. The handlers are installed when this is made (before the banner is
/// printed), so a signal sent as soon as the banner appears is never fatal; kept for the
/// whole stop, so that a second signal is seen too.
pub struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl Signals {
    pub fn install() -> anyhow::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            int: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
            term: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
        })
    }

    /// The next SIGINT or SIGTERM, as its number.
    pub async fn next(&mut self) -> i32 {
        tokio::select! {
            _ = self.int.recv() => rustix::process::Signal::INT.as_raw(),
            _ = self.term.recv() => rustix::process::Signal::TERM.as_raw(),
        }
    }
}
