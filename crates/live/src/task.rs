//! Live correlation: relay events and MCP reports go to ONE correlator (the same code as
//! replay), in `t` order, behind a watermark (docs/design.md §4).
//!
//! Sources of events:
//! - each observed stream: its observer task stamps events with the time the bytes passed
//!   through the relay, so they arrive here late and slightly out of order across streams;
//! - the ingest socket: MCP reports, whose `t` is when they reached the correlator.
//!
//! The watermark `W` is a time before which no relay event can still arrive. Events are held
//! in a heap and fed to the correlator only once they are older than `W`, and the
//! correlator's clock is advanced to `W` (never further), so no decision is ever taken before
//! every relay event stamped at or before it has been applied.
//!
//! How `W` is known without locks on the data path: every observed stream is a [`Source`]
//! with a `pending` counter (copies handed to its observer and not yet fully turned into
//! events here) and `last_t` (the time of the copy its observer last took up). The data path
//! increments `pending` *before* reading the clock for a copy; the observer sends the copy's
//! events *before* decrementing it. So, reading the clock first (`now0`) and then each
//! source: a source with nothing pending cannot produce an event older than `now0`, and one
//! with something pending cannot produce one older than its `last_t` (observers never stamp
//! backwards). The correlator task reads the marks first and drains its channel after, so
//! every event older than `W` is in the heap when `W` is used.
//!
//! That work (a round) runs on a timer, and the timer runs only while a round is due: events
//! are held, or an interval is still undecided. A round with neither decides nothing (records
//! are of intervals), so an idle relay sets no timer at all, and its correlator's clock stays
//! where the last round left it until the next event; pushing that event first decides what
//! fell due before it, as a replay of the capture does. At the stop one last round brings the
//! clock to the stop, as a timer would have.

use std::io::{self, Seek, SeekFrom, Write};
use std::sync::Arc;
use std::time::Duration;

use correlator::records::Summary;
use correlator::sanitize::{Door, Refused, Scrub};
use correlator::Pseudonymizer;
use correlator::{Config, Correlator, Event, EventKind, Millis, Record};
use relay::{Observations, Sources, Timed, EVENT_QUEUE};
use tokio::sync::{mpsc, oneshot};

use sys::clock::Clock;

use crate::capture::{capture_header, end_offset, end_value, CaptureSink, Sinks};
use crate::records_out::{self, RecordsOut, Tail as RecordsTail};
use crate::sequencer::{Sequencer, MAX_HELD};

pub struct LiveConfig {
    pub correlator: Config,
    pub pseudo: Pseudonymizer,
    /// Where each record is also exported as an OTLP span, with the wall-clock time of the
    /// relay clock's 0 in Unix nanoseconds.
    pub otlp: Option<(otlp::ExporterHandle, u64)>,
    /// How often time is advanced while no event arrives.
    pub tick: Duration,
    /// `--join-host-trace` (with OTLP export): streams whose request named the host's span.
    pub host_parents: Option<Arc<relay::HostParents>>,
}

struct Task {
    clock: Clock,
    sources: Arc<Sources>,
    seq: Sequencer,
    corr: Correlator,
    /// Where observed data becomes writable (ids pseudonymized, names checked).
    scrub: Scrub,
    /// Where it leaves: every capture and records line is checked before it is written.
    door: Door,
    /// Lines the door refused (a bug if ever non-zero: everything fed was scrubbed).
    refused: u64,
    capture: Option<CaptureSink>,
    /// What is open in the capture so far, for the next piece's header (rotating only).
    open: Option<correlator::trace::OpenState>,
    /// What each piece's header is made of: the options, the epoch and the capture's word.
    piece_header: (Config, Option<u64>, String),
    /// The time of the last event fed (a piece's `end` when it is cut).
    last_t: Option<Millis>,
    records_out: RecordsOut,
    otlp: Option<otlp::LiveTree>,
    host_parents: Option<Arc<relay::HostParents>>,
    records: Vec<Record>,
    summary: Summary,
    /// MCP-routed model calls and the reports that account for them.
    tally: crate::mcp_tally::McpTally,
    pushed: bool,
    /// How far the correlator's clock was advanced with no event.
    advanced: Option<Millis>,
    /// Where the header's `end` value is in the capture.
    end_at: u64,
}

impl Task {
    /// `capture`: the capture file, with where its header's `end` value is.
    fn new(
        clock: Clock,
        sources: Arc<Sources>,
        config: Config,
        pseudo: Pseudonymizer,
        otlp: Option<otlp::LiveTree>,
        (capture, end_at): (Option<CaptureSink>, u64),
        records_out: RecordsOut,
    ) -> Task {
        let open =
            matches!(capture, Some(CaptureSink::Pieces(_))).then(correlator::trace::OpenState::new);
        Task {
            open,
            piece_header: (config.clone(), None, String::new()),
            last_t: None,
            clock,
            sources,
            seq: Sequencer::default(),
            corr: Correlator::new(config),
            scrub: Scrub::new(pseudo),
            door: Door::live(),
            refused: 0,
            otlp,
            host_parents: None,
            capture,
            records_out,
            records: Vec::new(),
            summary: Summary::default(),
            tally: Default::default(),
            pushed: false,
            advanced: None,
            end_at,
        }
    }

    fn offer(&mut self, (t, kind): Timed) {
        // A stream's host parent is taken up with its opening, by the raw id, and handed to
        // the OTLP tree alone under the pseudonym: it is in no event, so in no capture.
        // A WebSocket request's, likewise with its request event.
        let parent = match (&kind, &self.host_parents) {
            (EventKind::StreamOpen { stream, .. }, Some(hp)) => hp.take(stream),
            (EventKind::Request { request, .. }, Some(hp)) => hp.take(request),
            _ => None,
        };
        let kind = self.scrub.event(kind);
        match (parent, &mut self.otlp, &kind) {
            (Some(p), Some(otlp), EventKind::StreamOpen { stream, .. }) => otlp.join(stream, p),
            (Some(p), Some(otlp), EventKind::Request { request, .. }) => {
                otlp.join_request(request, p)
            }
            _ => {}
        }
        self.seq.offer(t, kind);
    }

    fn feed(&mut self, ev: Event) -> io::Result<()> {
        if self.capture.is_some() {
            match self.door.event(&ev) {
                Ok(line) => {
                    if let Some(CaptureSink::Pieces(p)) = &self.capture {
                        if p.due(line.as_bytes().len()) {
                            self.cut_capture()?;
                        }
                    }
                    if let Some(cap) = &mut self.capture {
                        cap.file().write_all(line.as_bytes())?;
                    }
                    // What the next piece's header says is open is what the pieces hold.
                    if let Some(open) = &mut self.open {
                        open.apply(&ev);
                    }
                }
                Err(e) => refused(&mut self.refused, e),
            }
        }
        self.last_t = Some(ev.t);
        self.corr.push(&ev, &mut self.records);
        self.tally.event(&ev.kind);
        if let Some(otlp) = &mut self.otlp {
            otlp.event(&ev);
        }
        self.pushed = true;
        Ok(())
    }

    /// Ends the capture's piece (its `end`: how far the correlator's clock had got) and
    /// starts the next with a header carrying what is open, so that the next piece reads on
    /// its own and a replay of the pieces in order decides as this run does.
    fn cut_capture(&mut self) -> io::Result<()> {
        let end = match (self.advanced, self.last_t) {
            (Some(a), Some(t)) => Some(a.max(t)),
            (a, t) => a.or(t),
        };
        let Some(CaptureSink::Pieces(p)) = &mut self.capture else {
            return Ok(());
        };
        p.flush()?;
        if let Some(end) = end {
            let pos = p.stream_position()?;
            p.seek(SeekFrom::Start(self.end_at))?;
            p.write_all(end_value(Some(end)).as_bytes())?;
            p.seek(SeekFrom::Start(pos))?;
        }
        p.cut()?;
        let (config, epoch, word) = &self.piece_header;
        let header = capture_header(config, *epoch, Some((word, p.seq())));
        let open = self.open.get_or_insert_with(Default::default);
        let line = self
            .door
            .piece_header(&header, open)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        self.end_at = end_offset(line.as_str());
        p.write_all(line.as_bytes())?;
        p.mark_body();
        Ok(())
    }

    fn write_records(&mut self) -> io::Result<()> {
        if self.records.is_empty() {
            return Ok(());
        }
        // The capture first: a record never names an event the capture lacks.
        if let Some(cap) = &mut self.capture {
            cap.file().flush()?;
        }
        for r in self.records.drain(..) {
            self.summary.add(&r);
            let cleared = match self.door.record(&r) {
                Ok(c) => c,
                Err(e) => {
                    refused(&mut self.refused, e);
                    continue;
                }
            };
            // Never waits: the writer thread takes it (or, past its bound, counts it lost).
            self.records_out.send(cleared.line().clone());
            // Never waits: a full export queue drops the span and counts it.
            if let Some(otlp) = &mut self.otlp {
                otlp.record(&cleared);
            }
        }
        Ok(())
    }

    /// One round: marks first, then whatever has arrived, then release and advance.
    fn round(&mut self, rx: &mut mpsc::Receiver<Timed>, ingest: &mut Ingest) -> io::Result<()> {
        let now0 = self.clock.now_ms();
        let w = self.sources.watermark(now0);
        while let Ok(ev) = rx.try_recv() {
            self.offer(ev);
        }
        ingest.drain(|ev| self.offer(ev));
        let mut released = Vec::new();
        self.seq.release(w, |ev| released.push(ev));
        for ev in released {
            self.feed(ev)?;
        }
        if self.pushed {
            self.corr.advance(w, &mut self.records);
            self.advanced = Some(w);
        }
        if let Some(cap) = &mut self.capture {
            cap.file().flush()?;
        }
        self.write_records()
    }

    /// Whether a round has anything to do: events held for the watermark, or intervals
    /// whose decision may fall due as time passes. Otherwise a round would only move the
    /// correlator's clock, which its next push does as well.
    fn due(&self) -> bool {
        !self.seq.is_empty() || self.corr.pending() > 0
    }

    fn finish(&mut self, rx: &mut mpsc::Receiver<Timed>, ingest: &mut Ingest) -> io::Result<()> {
        while let Ok(ev) = rx.try_recv() {
            self.offer(ev);
        }
        ingest.drain(|ev| self.offer(ev));
        let mut released = Vec::new();
        self.seq.release_all(|ev| released.push(ev));
        for ev in released {
            self.feed(ev)?;
        }
        self.corr.finish(&mut self.records);
        let written = self.write_records();
        // Every record has its span now; what is still open in the tree ends here.
        if let Some(otlp) = &mut self.otlp {
            otlp.finish(self.advanced.unwrap_or(0.0));
        }
        if let Some(cap) = &mut self.capture {
            let cap = cap.file();
            cap.flush()?;
            if let Some(end) = self.advanced {
                let pos = cap.stream_position()?;
                cap.seek(SeekFrom::Start(self.end_at))?;
                cap.write_all(end_value(Some(end)).as_bytes())?;
                cap.seek(SeekFrom::Start(pos))?;
                cap.flush()?;
            }
        }
        written
    }
}

/// A line the door refused is not written; the field (never the value) is logged.
fn refused(count: &mut u64, e: Refused) {
    *count += 1;
    tracing::error!(
        field = e.field,
        refused = *count,
        "the sanitizing door refused a line; it was not written"
    );
}

/// The MCP reports channel (absent until the ingest socket is wired).
struct Ingest(Option<mpsc::Receiver<Timed>>);

impl Ingest {
    fn drain(&mut self, mut each: impl FnMut(Timed)) {
        if let Some(rx) = &mut self.0 {
            while let Ok(ev) = rx.try_recv() {
                each(ev);
            }
        }
    }

    async fn recv(&mut self) -> Option<Timed> {
        match &mut self.0 {
            Some(rx) => match rx.recv().await {
                Some(ev) => Some(ev),
                None => {
                    // The ingest side went away: nothing more will come from it.
                    self.0 = None;
                    std::future::pending().await
                }
            },
            None => std::future::pending().await,
        }
    }
}

/// How long the records writer is waited for at the stop when the sender of `shutdown` went
/// away without saying.
const RECORDS_WAIT: Duration = Duration::from_secs(10);

/// A live run's records header (records v1, "Layout"): `{"type":"run","version":1,
/// "epoch_unix_ms":N}`, N the wall-clock time of the relay clock's 0 in Unix milliseconds,
/// the same as the capture header's `epoch_unix_ms`.
pub fn run_header(epoch_unix_ms: u64) -> String {
    format!(r#"{{"type":"run","version":1,"epoch_unix_ms":{epoch_unix_ms}}}"#)
}

/// What the correlator task returns when it has finished.
#[derive(Debug)]
pub struct Finished {
    pub summary: Summary,
    /// Model tool calls to MCP tools that no wrapper reported.
    pub unreported: crate::mcp_tally::Unreported,
    /// What became of the records (all written, unless the output was not read).
    pub records: RecordsTail,
}

/// Starts the correlator task. It runs until `shutdown` fires (or its sender is dropped),
/// then feeds everything held, finishes the correlator, flushes the capture and waits for
/// the records writer, up to the time `shutdown` carried.
pub fn spawn(
    cfg: LiveConfig,
    clock: Clock,
    mut sinks: Sinks,
    ingest: Option<mpsc::Receiver<Timed>>,
    shutdown: oneshot::Receiver<Duration>,
) -> io::Result<(Observations, tokio::task::JoinHandle<io::Result<Finished>>)> {
    let epoch_unix_ms = cfg
        .otlp
        .as_ref()
        .map(|(_, nanos)| *nanos)
        .unwrap_or_else(|| otlp::clock_epoch_unix_nanos(clock.now_ms()))
        / 1_000_000;
    // The word that ties a rotated capture's pieces together: random, so that pieces of two
    // runs at the same path never pass for one capture.
    let word = format!("{:032x}", rand::random::<u128>());
    let rotating = matches!(sinks.capture, Some(CaptureSink::Pieces(_)));
    let header = capture_header(
        &cfg.correlator,
        Some(epoch_unix_ms),
        rotating.then_some((word.as_str(), 0)),
    );
    let mut end_at = 0;
    if let Some(cap) = &mut sinks.capture {
        let door = Door::live();
        let line = if rotating {
            door.piece_header(&header, &correlator::trace::OpenState::new())
        } else {
            door.meta(&header)
        }
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let file = cap.file();
        end_at = file.stream_position()? + end_offset(line.as_str());
        file.write_all(line.as_bytes())?;
        file.flush()?;
        if let CaptureSink::Pieces(p) = cap {
            p.mark_body();
        }
    }
    let (tx, mut rx) = mpsc::channel::<Timed>(EVENT_QUEUE);
    let sources = Arc::new(Sources::default());
    let mut records_out = RecordsOut::start(sinks.records, records_out::MAX_PENDING_BYTES)?;
    // The records' first line: the run header (docs/records-v1.md), with the wall-clock time
    // of the clock's 0, so that a record's times can be told as times of day. Without it a
    // live run's records could not be tied to anything a person saw (issue 40, item 2).
    let run_header = run_header(epoch_unix_ms);
    records_out.send(
        Door::live()
            .meta(&run_header)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?,
    );
    let otlp = cfg
        .otlp
        .map(|(handle, epoch)| otlp::LiveTree::new(handle, epoch, &cfg.correlator));
    let mut task = Task::new(
        clock,
        sources.clone(),
        cfg.correlator,
        cfg.pseudo,
        otlp,
        (sinks.capture, end_at),
        records_out,
    );
    task.piece_header = (task.piece_header.0.clone(), Some(epoch_unix_ms), word);
    // Parents are only of use to a tree that exports.
    let host_parents = cfg.host_parents.filter(|_| task.otlp.is_some());
    task.host_parents = host_parents.clone();
    let tick = cfg.tick;
    let join = tokio::spawn(async move {
        let mut ingest = Ingest(ingest);
        let mut shutdown = shutdown;
        let mut timer = tokio::time::interval(tick);
        timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Events are taken in as they come (so the queue never fills) but fed and decided
        // on the timer only: a round reads every source's mark, which is too much work to do
        // per event with a thousand streams open, and a record is due within one tick anyway.
        // The relay's events end when its last stream has (the drain), but MCP reports may
        // still come until `shutdown`: calls that end during the drain, and those the ingest
        // socket ends `lost` as it closes (docs/design.md §4).
        // The timer runs only while a round is due (`Task::due`; the module doc says why that
        // moves no decision): an idle relay waits for its next event with no timer at all.
        let mut relay_open = true;
        let wait = loop {
            let due = task.due();
            tokio::select! {
                w = &mut shutdown => break w.unwrap_or(RECORDS_WAIT),
                ev = rx.recv(), if relay_open => match ev {
                    Some(ev) => task.offer(ev),
                    None => relay_open = false,
                },
                ev = ingest.recv() => if let Some(ev) = ev { task.offer(ev) },
                _ = timer.tick(), if due => task.round(&mut rx, &mut ingest)?,
            }
            if !due && task.due() {
                // The first round a tick after the event that made one due, not at once for
                // the ticks missed while idle.
                timer.reset();
            }
        };
        // One last round at the stop, so the correlator's clock (the capture's `end`, where
        // open OTLP spans end) has reached it however long the relay was idle before.
        task.round(&mut rx, &mut ingest)?;
        task.finish(&mut rx, &mut ingest)?;
        if task.seq.late > 0 {
            tracing::debug!(
                late = task.seq.late,
                "events moved up to the watermark on arrival"
            );
        }
        if task.seq.forced > 0 {
            tracing::warn!(
                forced = task.seq.forced,
                held = MAX_HELD,
                "events released ahead of the watermark: an observer fell this far behind, and decisions near its stream may have been taken without its events"
            );
        }
        let records = task.records_out.finish(wait).await;
        let unreported = task.tally.unreported();
        if unreported.calls > 0 {
            tracing::warn!(
                calls = unreported.calls,
                "model tool calls to MCP tools got no wrapper report: no record says where they ran"
            );
        }
        Ok(Finished {
            summary: task.summary,
            unreported,
            records,
        })
    });
    Ok((
        Observations {
            events: tx,
            sources,
            host_parents,
        },
        join,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::END_ROOM;
    use crate::sequencer::Sequencer;
    use std::sync::Mutex;

    fn close(s: &str) -> EventKind {
        EventKind::StreamClose { stream: s.into() }
    }

    fn drain(seq: &mut Sequencer, w: Millis) -> Vec<(Millis, String)> {
        let mut v = Vec::new();
        seq.release(w, |e| v.push((e.t, e.kind.stream().unwrap().to_string())));
        v
    }

    #[test]
    fn events_are_released_in_time_order_once_the_watermark_passes_them() {
        let mut s = Sequencer::default();
        s.offer(5.0, close("b"));
        s.offer(3.0, close("a"));
        s.offer(5.0, close("c"));
        s.offer(9.0, close("d"));
        assert_eq!(
            drain(&mut s, 5.0),
            vec![(3.0, "a".to_string())],
            "an event at the watermark itself waits"
        );
        assert_eq!(
            drain(&mut s, 6.0),
            vec![(5.0, "b".to_string()), (5.0, "c".to_string())],
            "ties keep their arrival order"
        );
        assert_eq!(s.held(), 1);
    }

    #[test]
    fn a_late_event_is_moved_up_to_the_release_point() {
        let mut s = Sequencer::default();
        s.offer(1.0, close("a"));
        drain(&mut s, 10.0);
        s.offer(4.0, close("late"));
        assert_eq!(s.late, 1);
        assert_eq!(drain(&mut s, 11.0), vec![(10.0, "late".to_string())]);
    }

    #[test]
    fn past_its_bound_the_oldest_events_go_ahead_of_the_watermark_and_stragglers_move_up() {
        let mut s = Sequencer::with_bound(3);
        // A stuck source holds the watermark at 1 while the others go on.
        for (t, id) in [(4.0, "d"), (2.0, "b"), (5.0, "e"), (3.0, "c"), (6.0, "f")] {
            s.offer(t, close(id));
        }
        assert_eq!(
            drain(&mut s, 1.0),
            vec![(2.0, "b".to_string()), (3.0, "c".to_string())],
            "the oldest go, in order, until the bound holds"
        );
        assert_eq!((s.held(), s.forced), (3, 2));
        // The stuck source's event, when it comes, is moved up past what went ahead.
        s.offer(1.5, close("stuck"));
        assert_eq!(s.late, 1);
        assert_eq!(
            drain(&mut s, 7.0),
            vec![
                (3.0, "stuck".to_string()),
                (4.0, "d".to_string()),
                (5.0, "e".to_string()),
                (6.0, "f".to_string())
            ]
        );
        assert_eq!(s.forced, 2, "released behind the watermark: not forced");
    }

    /// An in-memory file shared with the test.
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<io::Cursor<Vec<u8>>>>);

    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().write(b)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Seek for Buf {
        fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
            self.0.lock().unwrap().seek(pos)
        }
    }

    impl Buf {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().get_ref().clone()).unwrap()
        }
    }

    /// Replays a capture as `windowtap replay` should: every event, then time advanced to
    /// the header's `end`, then finish.
    fn replay_capture(trace: &str, config: &Config) -> String {
        let header: serde_json::Value =
            serde_json::from_str(trace.lines().next().unwrap()).unwrap();
        let events =
            correlator::trace::read_all(trace.as_bytes(), "capture").expect("a valid trace v2");
        let mut c = Correlator::new(config.clone());
        let mut out = Vec::new();
        for ev in &events {
            c.push(ev, &mut out);
        }
        if let Some(end) = header["end"].as_f64() {
            c.advance(end, &mut out);
        }
        c.finish(&mut out);
        out.iter().map(|r| r.to_line()).collect()
    }

    use correlator::{CallKind, Client, Hints, Outcome, ResponseStatus, Transport};

    /// Relay events of one stream, sent the way an observer task sends them: registered,
    /// stamped when their bytes passed, deregistered after the close.
    async fn stream_events(live: &Observations, clock: &Clock, events: Vec<EventKind>) {
        let guard = live.sources.register(clock);
        for (i, kind) in events.into_iter().enumerate() {
            if i > 0 {
                guard.source().begin();
            }
            let t = clock.now_ms();
            guard.source().took_up(t);
            live.events.send((t, kind)).await.unwrap();
            guard.source().done();
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    fn claude_turn(
        stream: &str,
        request: &str,
        outputs: Vec<String>,
        call: Option<&str>,
    ) -> Vec<EventKind> {
        let response = format!("{stream}/r");
        let mut v = vec![
            EventKind::StreamOpen {
                stream: stream.into(),
                client: Client::Claude,
                transport: Transport::Http,
                thread: Some("sess".into()),
                host: None,
            },
            EventKind::Request {
                stream: stream.into(),
                request: request.into(),
                previous_response: None,
                outputs,
            },
            EventKind::ResponseStart {
                stream: stream.into(),
                response: response.clone(),
                request: Some(request.into()),
                model: None,
            },
        ];
        if let Some(call) = call {
            v.push(EventKind::ToolCall {
                stream: stream.into(),
                response: response.clone(),
                call: call.into(),
                item: None,
                name: "mcp__probe__echo".into(),
                namespace: None,
                kind: CallKind::ToolUse,
            });
        }
        v.push(EventKind::ResponseEnd {
            stream: stream.into(),
            response,
            status: ResponseStatus::Completed,
            usage: None,
            stop_reason: None,
        });
        v.push(EventKind::StreamClose {
            stream: stream.into(),
        });
        v
    }

    /// Runs a Claude tool loop with one MCP call inside its window through the live task
    /// (with or without the continuation that closes the window); returns the records
    /// written live and the records of `replay` over the capture written live.
    async fn live_and_replayed(continuation: bool) -> (String, String) {
        let clock = Clock::start();
        let records = Buf::default();
        let capture = Buf::default();
        let (ingest_tx, ingest_rx) = mpsc::channel(16);
        let (stop, stopped) = oneshot::channel();
        let config = Config {
            close_wait: 30.0,
            ..Config::default()
        };
        let (live, task) = spawn(
            LiveConfig {
                correlator: config.clone(),
                pseudo: Pseudonymizer::new(&[3; 32]),
                tick: Duration::from_millis(5),
                otlp: None,
                host_parents: None,
            },
            clock,
            Sinks {
                records: Box::new(records.clone()),
                capture: Some(CaptureSink::File(Box::new(capture.clone()))),
            },
            Some(ingest_rx),
            stopped,
        )
        .unwrap();
        stream_events(
            &live,
            &clock,
            claude_turn("s1", "q1", vec![], Some("toolu_1")),
        )
        .await;
        let start = clock.now_ms();
        tokio::time::sleep(Duration::from_millis(3)).await;
        let end = clock.now_ms();
        ingest_tx
            .send((
                clock.now_ms(),
                EventKind::McpInterval {
                    rounds: None,
                    interval: "i1".into(),
                    alias: "probe".into(),
                    tool: "echo".into(),
                    start,
                    end,
                    outcome: Outcome::Result,
                    hints: Hints {
                        tool_use_id: Some("toolu_1".into()),
                        ..Hints::default()
                    },
                    host: None,
                    transport: correlator::McpTransport::Stdio,
                },
            ))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        if continuation {
            stream_events(
                &live,
                &clock,
                claude_turn("s2", "q2", vec!["toolu_1".into()], None),
            )
            .await;
        }
        // Idle long enough for timer-driven decisions (close_wait is 30 ms) to happen live.
        tokio::time::sleep(Duration::from_millis(100)).await;
        stop.send(Duration::from_secs(30)).unwrap();
        let summary = task.await.unwrap().unwrap().summary;
        assert_eq!(summary.total(), 1);

        let trace = capture.text();
        assert!(
            !trace.contains("toolu_1") && !trace.contains("sess"),
            "ids are pseudonymized"
        );
        // The live records open with the run header, which replay does not write.
        let text = records.text();
        let (header, live) = text.split_once('\n').expect("a header line");
        let header: serde_json::Value = serde_json::from_str(header).unwrap();
        assert_eq!(header["type"], "run", "{text}");
        let capture_header: serde_json::Value =
            serde_json::from_str(trace.lines().next().unwrap()).unwrap();
        assert_eq!(header["epoch_unix_ms"], capture_header["epoch_unix_ms"]);
        (live.to_string(), replay_capture(&trace, &config))
    }

    #[tokio::test]
    async fn live_records_equal_the_replay_of_the_capture() {
        let (live, replayed) = live_and_replayed(true).await;
        let record: serde_json::Value = serde_json::from_str(live.trim()).unwrap();
        assert_eq!(record["decision"], "attributed", "{live}");
        assert_eq!(replayed, live);
    }

    #[tokio::test]
    async fn a_window_given_up_while_idle_replays_the_same() {
        let (live, replayed) = live_and_replayed(false).await;
        let record: serde_json::Value = serde_json::from_str(live.trim()).unwrap();
        assert_eq!(record["reason"], "unclosed", "{live}");
        assert_eq!(replayed, live);
    }

    /// The live task's timer runs only while a round is due: with events held for the
    /// watermark, or an interval that time alone may decide. Once all is decided, an idle
    /// relay sets no timer.
    #[tokio::test]
    async fn rounds_are_due_only_while_something_waits_on_the_clock() {
        let clock = Clock::start();
        let sources = Arc::new(Sources::default());
        // Long enough that a slow machine's few milliseconds between the steps below never
        // let the interval fall due before it is looked at.
        let config = Config {
            close_wait: 500.0,
            ..Config::default()
        };
        let records = Buf::default();
        let mut task = Task::new(
            clock,
            sources,
            config,
            Pseudonymizer::new(&[3; 32]),
            None,
            (None, 0),
            RecordsOut::start(Box::new(records.clone()), 1 << 20).unwrap(),
        );
        let (_tx, mut rx) = mpsc::channel(1);
        let mut ingest = Ingest(None);
        assert!(!task.due(), "a new task waits for nothing");

        // A response whose tool call opens a window, and no continuation.
        for kind in claude_turn("s1", "q1", vec![], Some("toolu_1")) {
            task.offer((clock.now_ms(), kind));
        }
        assert!(task.due(), "events are held for the watermark");
        tokio::time::sleep(Duration::from_millis(2)).await;
        task.round(&mut rx, &mut ingest).unwrap();
        assert!(!task.due(), "every event was fed and no interval waits");

        // An MCP call inside the open window: undecided until `close_wait` has passed.
        let start = clock.now_ms();
        let interval = EventKind::McpInterval {
            rounds: None,
            interval: "i1".into(),
            alias: "probe".into(),
            tool: "echo".into(),
            start,
            end: start + 1.0,
            outcome: Outcome::Result,
            hints: Hints::default(),
            host: None,
            transport: correlator::McpTransport::Stdio,
        };
        tokio::time::sleep(Duration::from_millis(2)).await;
        task.offer((clock.now_ms(), interval));
        tokio::time::sleep(Duration::from_millis(2)).await;
        task.round(&mut rx, &mut ingest).unwrap();
        assert!(task.due(), "the interval waits for its window to close");
        assert_eq!(task.corr.pending(), 1);

        tokio::time::sleep(Duration::from_millis(600)).await;
        task.round(&mut rx, &mut ingest).unwrap();
        assert!(!task.due(), "the interval was decided as time passed");
        assert_eq!(task.summary.total(), 1);
    }

    #[test]
    fn the_capture_header_carries_the_options() {
        let h = capture_header(&Config::default(), Some(1_764_000_000_000), None);
        assert!(h.starts_with(r#"{"type":"trace","version":2,"#));
        let v: serde_json::Value = serde_json::from_str(&h).unwrap();
        assert_eq!(v["epoch_unix_ms"], 1_764_000_000_000u64);
        assert_eq!(v["close_wait"], 1000);
        assert_eq!(v["window_open"], "call");
        assert_eq!(v["max_window"], 1800000);
        assert_eq!(v["candidates"], "eligible");
        assert!(v["end"].is_null());
        let all = Config {
            candidates: correlator::Candidates::All,
            ..Config::default()
        };
        let v: serde_json::Value = serde_json::from_str(&capture_header(&all, None, None)).unwrap();
        assert_eq!(v["candidates"], "all");
        let at = end_offset(&h) as usize;
        let filled = format!(
            "{}{}{}",
            &h[..at],
            end_value(Some(1234.5)).as_str(),
            &h[at + END_ROOM..]
        );
        assert_eq!(filled.len(), h.len());
        let v: serde_json::Value = serde_json::from_str(&filled).unwrap();
        assert_eq!(v["end"], 1234.5);
    }
}
