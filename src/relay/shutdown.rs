//! Stopping: signals, the drain of what is in flight, and the last records out.

use std::time::Duration;

use anyhow::Context;
use correlator::records::Summary;

use super::server::Running;

/// How a stop went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drain {
    /// Everything in flight ended within the bound.
    Drained,
    /// Something was still in flight at the bound; it was cut.
    Cut,
    /// Stopped at once on this signal, without waiting for what was in flight.
    AtOnce(i32),
}

/// What [`Running::stop_with`] returns.
#[derive(Debug)]
pub struct Stopped {
    pub summary: Summary,
    /// Model tool calls to MCP tools that no wrapper reported (`crate::mcp_tally`).
    pub unreported: crate::mcp_tally::Unreported,
    pub how: Drain,
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
        tokio::pin!(at_once);
        // The ingest socket stays open through the drain: calls that end meanwhile are
        // reported (docs/design.md §4), it is closed below.
        let _ = self.stop_accepting.send(());
        // The listener is closed once the accept loop has returned: new connections are
        // refused from here on.
        let _ = self.server.await;
        // Idle keep-alive connections close now; ones with a request in flight after it.
        let _ = self.draining.send(true);
        let connections = self.draining.receiver_count();
        let streams = self.sources.len();
        let tunnels = self.tunnels.len();
        let drain_ms = self.drain.as_millis() as u64;
        if self.signalled {
            tracing::info!(
                connections,
                streams,
                tunnels,
                drain_ms,
                "draining: no new connections; a second signal stops at once"
            );
        } else {
            tracing::info!(
                connections,
                streams,
                tunnels,
                drain_ms,
                "draining: no new connections; a signal stops at once"
            );
        }
        let draining = &self.draining;
        let sources = &self.sources;
        let open_tunnels = &self.tunnels;
        let ended = async {
            draining.closed().await;
            // Observed streams deregister once their observer has sent its last events,
            // which may be a little after their connection ended; tunnels live on after
            // their connection's task.
            while sources.len() > 0 || open_tunnels.len() > 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        let how = tokio::select! {
            r = tokio::time::timeout(self.drain, ended) => match r {
                Ok(()) => Drain::Drained,
                Err(_) => Drain::Cut,
            },
            signo = &mut at_once => Drain::AtOnce(signo),
        };
        match how {
            Drain::Drained => {}
            Drain::Cut => tracing::warn!(
                connections = self.draining.receiver_count(),
                streams = self.sources.len(),
                tunnels = self.tunnels.len(),
                "still in flight after --drain: cut, and their remaining events not correlated"
            ),
            Drain::AtOnce(_) => tracing::warn!(
                connections = self.draining.receiver_count(),
                streams = self.sources.len(),
                tunnels = self.tunnels.len(),
                "second signal: stopping at once, in-flight streams cut"
            ),
        }
        // HTTP streams still open end with the runtime; tunnels are ended here, so that an
        // in-process caller (`run`) does not keep them either.
        self.tunnels.cut();
        // No new reports from here on: calls still running end `lost` now, and those events
        // reach the correlator before it finishes.
        if let Some(ingest) = self.ingest_socket {
            ingest.close().await;
        }
        // The records writer gets the drain bound to get the last records out: all of that
        // only when its output is not being read (a file or a live reader takes them at once).
        let _ = self.stop_live.send(self.drain);
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
                eprintln!("{}", crate::otlp::report_line(&endpoint, &report));
            }
        }
        Ok(Stopped {
            summary,
            unreported,
            how,
        })
    }
}

/// SIGINT and SIGTERM. The handlers are installed when this is made (before the banner is
/// printed), so a signal sent as soon as the banner appears is never fatal; kept for the
/// whole stop, so that a second signal is seen too.
pub(crate) struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl Signals {
    pub(crate) fn install() -> anyhow::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            int: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
            term: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
        })
    }

    /// The next SIGINT or SIGTERM, as its number.
    pub(crate) async fn next(&mut self) -> i32 {
        tokio::select! {
            _ = self.int.recv() => libc::SIGINT,
            _ = self.term.recv() => libc::SIGTERM,
        }
    }
}
