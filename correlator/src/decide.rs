//! The decision rule (design.md §4), driven incrementally by [`Correlator`].
//!
//! Every reported interval waits, pending, until the first moment its answer cannot change:
//! every candidate window (one whose first call completed at or before the interval's start)
//! has closed, broken or been given up, or `incomplete` holds. That moment is computed, not
//! polled: each pending interval has a due time derived from its candidates' state, recomputed
//! only when an event touches one of them, and time advances from one due time or `max_window`
//! deadline to the next until it reaches the next event.

use std::collections::BTreeSet;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::event::{Event, EventKind, Hints, Millis};
use crate::records::{Evidence, Reason, Record, WindowRef};
use crate::route;
use crate::windows::{Call, Changes, Time, Tracker, WinId, Window, WindowState};

/// When a window opens for containment purposes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WindowOpen {
    /// At the first complete client tool call of the response (the default).
    #[default]
    Call,
    /// At the response's completion (stricter; changes containment only).
    Response,
}

impl WindowOpen {
    pub fn as_str(self) -> &'static str {
        match self {
            WindowOpen::Call => "call",
            WindowOpen::Response => "response",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "call" => Some(WindowOpen::Call),
            "response" => Some(WindowOpen::Response),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `--close-wait`, milliseconds (default 1000).
    pub close_wait: Millis,
    pub window_open: WindowOpen,
    /// `--max-window`, milliseconds (default 30 minutes).
    pub max_window: Millis,
    /// How long final windows and lost spans are kept for late reports (default 2 hours, and
    /// never less than `max_window`). An interval that starts before what was dropped is
    /// judged `incomplete`, since a dropped window might have contained it.
    pub retain: Millis,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            close_wait: 1000.0,
            window_open: WindowOpen::Call,
            max_window: 30.0 * 60.0 * 1000.0,
            retain: 2.0 * 60.0 * 60.0 * 1000.0,
        }
    }
}

struct Pending {
    interval: String,
    alias: String,
    tool: String,
    start: Millis,
    end: Millis,
    hints: Hints,
    /// Candidate windows: open ones (at gathering) and closed ones that contain it.
    windows: Vec<WinId>,
    /// The currently scheduled decision time, if any.
    due: Option<Millis>,
}

/// The incremental correlator. Feed events in non-decreasing `t`; records come out in
/// decision order.
pub struct Correlator {
    config: Config,
    tracker: Tracker,
    /// The time up to which events have been applied (or time advanced).
    now: Millis,
    started: bool,
    pending: FxHashMap<u64, Pending>,
    /// Pending intervals by due time, ties in report order.
    queue: BTreeSet<(Time, u64)>,
    /// Reported at the current time; their candidates are gathered once every event of this
    /// time has been applied.
    ungathered: Vec<u64>,
    dirty: FxHashSet<u64>,
    all_dirty: bool,
    next_seq: u64,
    last_gc: Millis,
}

impl Correlator {
    pub fn new(mut config: Config) -> Self {
        config.retain = config.retain.max(config.max_window);
        Correlator {
            config,
            tracker: Tracker::new(),
            now: 0.0,
            started: false,
            pending: FxHashMap::default(),
            queue: BTreeSet::new(),
            ungathered: Vec::new(),
            dirty: FxHashSet::default(),
            all_dirty: false,
            next_seq: 0,
            last_gc: 0.0,
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Intervals reported and not yet decided.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Windows held in memory (open, and final ones kept for late reports).
    pub fn windows_held(&self) -> usize {
        self.tracker.window_count()
    }

    /// Applies one event. First decides everything due strictly before `ev.t`. An event older
    /// than the current time (which a live caller must not send) is applied at the current time.
    pub fn push(&mut self, ev: &Event, out: &mut Vec<Record>) {
        let t = if self.started {
            ev.t.max(self.now)
        } else {
            ev.t
        };
        if !self.started || t > self.now {
            if self.started {
                self.end_instant();
                self.run_until(t, false, out);
                self.collect_garbage(t);
            }
            self.started = true;
            self.set_now(t);
        }
        self.apply(t, &ev.kind);
    }

    /// Lets time pass to `now` with no event (live mode): decides everything due before `now`.
    /// Events pushed afterwards must not be older than `now`.
    pub fn advance(&mut self, now: Millis, out: &mut Vec<Record>) {
        if !self.started || now <= self.now {
            return;
        }
        self.end_instant();
        self.run_until(now, false, out);
        self.set_now(now);
    }

    /// The trace ended (or the relay stopped): decides everything due by the last event's
    /// time, then every interval still pending at that time, counting candidates that are
    /// still open as given up.
    pub fn finish(&mut self, out: &mut Vec<Record>) {
        if !self.started {
            return;
        }
        self.end_instant();
        let now = self.now;
        self.run_until(now, true, out);
        let mut rest: Vec<u64> = self.pending.keys().copied().collect();
        rest.sort_unstable();
        for seq in rest {
            self.decide(seq, now, out);
        }
    }

    fn set_now(&mut self, t: Millis) {
        self.now = t;
        self.tracker.set_now(t);
    }

    fn apply(&mut self, t: Millis, kind: &EventKind) {
        let mut ch = Changes::default();
        let tr = &mut self.tracker;
        match kind {
            EventKind::StreamOpen { stream, thread, .. } => {
                tr.stream_open(t, stream, thread.clone())
            }
            EventKind::Request {
                stream,
                request,
                previous_response,
                outputs,
            } => tr.request(
                t,
                stream,
                request,
                previous_response.as_deref(),
                outputs,
                &mut ch,
            ),
            EventKind::ResponseStart {
                stream, response, ..
            } => tr.response_start(stream, response),
            EventKind::ToolCall {
                response,
                call,
                item,
                name,
                namespace,
                kind,
                ..
            } => tr.tool_call(
                t,
                response,
                Call {
                    call: call.clone(),
                    item: item.clone(),
                    name: name.clone(),
                    namespace: namespace.clone(),
                    kind: *kind,
                },
                self.config.max_window,
            ),
            EventKind::ResponseEnd {
                stream,
                response,
                status,
            } => tr.response_end(t, stream, response, *status, &mut ch),
            EventKind::StreamClose { stream } => tr.stream_close(t, stream, &mut ch),
            EventKind::ObservationLost { stream, .. } => tr.observation_lost(t, stream, &mut ch),
            EventKind::McpStart {
                interval, start, ..
            } => tr.mcp_start(interval, *start, &mut ch),
            EventKind::McpInterval {
                interval,
                alias,
                tool,
                start,
                end,
                hints,
                ..
            } => {
                tr.mcp_interval(interval, *start, *end, &mut ch);
                let seq = self.next_seq;
                self.next_seq += 1;
                self.pending.insert(
                    seq,
                    Pending {
                        interval: interval.clone(),
                        alias: alias.clone(),
                        tool: tool.clone(),
                        start: *start,
                        end: *end,
                        hints: hints.clone(),
                        windows: Vec::new(),
                        due: None,
                    },
                );
                self.ungathered.push(seq);
            }
        }
        self.mark(&ch);
    }

    fn mark(&mut self, ch: &Changes) {
        if ch.global {
            self.all_dirty = true;
        }
        if self.all_dirty {
            return;
        }
        for id in &ch.windows {
            if let Some(w) = self.tracker.window(*id) {
                self.dirty.extend(w.waiters.iter().copied());
            }
        }
    }

    /// Every event of the current time has been applied: intervals reported at this time get
    /// their candidates, then due times are brought up to date.
    fn end_instant(&mut self) {
        for seq in std::mem::take(&mut self.ungathered) {
            let Some(p) = self.pending.get(&seq) else {
                continue;
            };
            let (s, e) = (p.start, p.end);
            let mut windows: Vec<WinId> = self.tracker.open_candidates(s).collect();
            windows.extend(self.tracker.closed_containing(s, e));
            for id in &windows {
                if let Some(w) = self.tracker.window_mut(*id) {
                    w.waiters.push(seq);
                }
            }
            if let Some(p) = self.pending.get_mut(&seq) {
                p.windows = windows;
            }
            self.dirty.insert(seq);
        }
    }

    fn refresh(&mut self) {
        let seqs: Vec<u64> = if self.all_dirty {
            self.dirty.clear();
            self.pending.keys().copied().collect()
        } else {
            self.dirty.drain().collect()
        };
        self.all_dirty = false;
        for seq in seqs {
            let Some(p) = self.pending.get(&seq) else {
                continue;
            };
            let due = self.due(p);
            let old = p.due;
            if old == due {
                continue;
            }
            if let Some(d) = old {
                self.queue.remove(&(Time(d), seq));
            }
            if let Some(d) = due {
                self.queue.insert((Time(d), seq));
            }
            if let Some(p) = self.pending.get_mut(&seq) {
                p.due = due;
            }
        }
    }

    /// Advances time through due decisions and `max_window` deadlines up to `limit`
    /// (inclusive or not). A deadline goes before a decision due at the same time.
    fn run_until(&mut self, limit: Millis, inclusive: bool, out: &mut Vec<Record>) {
        loop {
            self.refresh();
            let next_due = self.queue.first().map(|(t, seq)| (t.0, *seq));
            let next_deadline = self.tracker.next_deadline();
            let next = match (next_due, next_deadline) {
                (None, None) => break,
                (Some((d, _)), None) => d,
                (None, Some(x)) => x,
                (Some((d, _)), Some(x)) => d.min(x),
            };
            if next > limit || (next == limit && !inclusive) {
                break;
            }
            if next > self.now {
                self.set_now(next);
            }
            if next_deadline == Some(next) {
                let mut ch = Changes::default();
                self.tracker.expire(next, &mut ch);
                self.mark(&ch);
                continue;
            }
            if let Some((_, seq)) = next_due {
                self.decide(seq, next, out);
            }
        }
    }

    /// The earliest time this interval can be decided given the current state, or `None`
    /// while a candidate cannot be given up yet (its response still streams or an MCP call
    /// that started inside it still runs).
    fn due(&self, p: &Pending) -> Option<Millis> {
        if self.incomplete(p, self.now) {
            return Some(self.now);
        }
        let cw = self.config.close_wait;
        let mut due = self.now;
        for id in &p.windows {
            let Some(w) = self.tracker.window(*id) else {
                continue;
            };
            if !w.is_open() {
                continue;
            }
            let response_end = w.response_end?;
            if w.running > 0 {
                return None;
            }
            let give_up = cw + p.end.max(response_end).max(w.max_inside_end);
            due = due.max(give_up);
        }
        Some(due)
    }

    /// design.md §4 rule 1, at time `at`.
    fn incomplete(&self, p: &Pending, at: Millis) -> bool {
        if p.start < self.tracker.forgotten_before() {
            return true;
        }
        let lost =
            self.tracker.lost_spans().iter().any(|l| {
                l.lost_at <= at && l.open <= p.end && l.close.is_none_or(|c| c >= p.start)
            });
        if lost {
            return true;
        }
        self.tracker.broken_windows().any(|w| {
            let broken_by = matches!(w.state, WindowState::Broken(b) if b <= at);
            broken_by && w.open <= p.start && !w.next_request.is_some_and(|q| q <= p.start)
        })
    }

    fn decide(&mut self, seq: u64, at: Millis, out: &mut Vec<Record>) {
        let Some(p) = self.pending.remove(&seq) else {
            return;
        };
        if let Some(d) = p.due {
            self.queue.remove(&(Time(d), seq));
        }
        self.dirty.remove(&seq);
        out.push(self.judge(&p, at));

        let mut touched = FxHashSet::default();
        for id in &p.windows {
            if let Some(w) = self.tracker.window_mut(*id) {
                w.waiters.retain(|s| *s != seq);
                touched.insert(*id);
            }
        }
        self.tracker.release(&touched);
    }

    /// The record for a pending interval decided at `at`: candidates still open count as
    /// given up.
    fn judge(&self, p: &Pending, at: Millis) -> Record {
        let response_mode = self.config.window_open == WindowOpen::Response;
        let completed_by_start =
            |w: &Window| !response_mode || w.completed_at.is_some_and(|c| c <= p.start);
        let mut containing: Vec<&Window> = Vec::new();
        let mut given_up = 0usize;
        for id in &p.windows {
            let Some(w) = self.tracker.window(*id) else {
                continue;
            };
            match w.state {
                WindowState::Closed(c) if c >= p.end && completed_by_start(w) => containing.push(w),
                WindowState::Open if completed_by_start(w) => given_up += 1,
                _ => {}
            }
        }
        let candidates = containing.len() + given_up;
        let mut record = Record {
            interval: p.interval.clone(),
            alias: p.alias.clone(),
            tool: p.tool.clone(),
            start: p.start,
            end: p.end,
            reason: None,
            evidence: Vec::new(),
            candidates,
            window: None,
            decided_at: at,
        };
        let reason = if self.incomplete(p, at) {
            Some(Reason::Incomplete)
        } else if candidates >= 2 {
            Some(Reason::Ambiguous)
        } else if given_up == 1 {
            Some(Reason::Unclosed)
        } else if candidates == 0 {
            Some(Reason::NoWindow)
        } else if conflicts(p, containing[0]) {
            Some(Reason::IdentityConflict)
        } else {
            None
        };
        record.reason = reason;
        if reason.is_none() {
            let w = containing[0];
            record.evidence = evidence(p, w);
            record.window = Some(WindowRef {
                thread: w.thread.clone(),
                stream: w.stream.clone(),
                response: w.response.clone(),
                request: w.request.clone(),
                open: w.open,
                close: match w.state {
                    WindowState::Closed(c) => Some(c),
                    _ => None,
                },
            });
        }
        record
    }

    fn collect_garbage(&mut self, now: Millis) {
        let retain = self.config.retain;
        if now - self.last_gc < retain / 16.0 {
            return;
        }
        self.last_gc = now;
        self.tracker.forget_before(now - retain);
    }
}

/// Rule 4: a hint that names something other than the one containing window.
fn conflicts(p: &Pending, w: &Window) -> bool {
    let h = &p.hints;
    if let Some(id) = &h.tool_use_id {
        if !w.calls.iter().any(|c| &c.call == id) {
            return true;
        }
    }
    if let Some(item) = &h.item_id {
        if !w.calls.iter().any(|c| c.item.as_ref() == Some(item)) {
            return true;
        }
    }
    matches!((&h.thread, &w.thread), (Some(a), Some(b)) if a != b)
}

/// What agreed between an attributed interval and its window, in record order.
fn evidence(p: &Pending, w: &Window) -> Vec<Evidence> {
    let h = &p.hints;
    let mut ev = vec![Evidence::Containment];
    if h.tool_use_id
        .as_ref()
        .is_some_and(|id| w.calls.iter().any(|c| &c.call == id))
    {
        ev.push(Evidence::ToolUseId);
    }
    if h.item_id
        .as_ref()
        .is_some_and(|id| w.calls.iter().any(|c| c.item.as_ref() == Some(id)))
    {
        ev.push(Evidence::ItemId);
    }
    if h.call_id
        .as_ref()
        .is_some_and(|id| w.calls.iter().any(|c| &c.call == id))
    {
        ev.push(Evidence::CallId);
    }
    if matches!((&h.thread, &w.thread), (Some(a), Some(b)) if a == b) {
        ev.push(Evidence::Thread);
    }
    if w.calls
        .iter()
        .any(|c| route::resolves(&c.name, c.namespace.as_deref(), &p.alias, &p.tool))
    {
        ev.push(Evidence::Route);
    }
    ev
}

/// Replays a whole event sequence and returns its records.
pub fn replay(events: impl IntoIterator<Item = Event>, config: &Config) -> Vec<Record> {
    let mut c = Correlator::new(config.clone());
    let mut out = Vec::new();
    for ev in events {
        c.push(&ev, &mut out);
    }
    c.finish(&mut out);
    out
}
