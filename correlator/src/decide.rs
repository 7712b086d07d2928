//! The decision rule (docs/design.md §4), driven incrementally by [`Correlator`].
//!
//! Only *eligible* windows take part: of a host not known to differ from the interval's, with
//! a call complete by its start that could have issued it (its visible name routes to the
//! interval's alias and tool, or it is an opaque program call, kind `custom`), and of the
//! interval's identity: its response issued every call a hint names, and its thread, when
//! known, is the `thread` hint. With `--candidates all` every window is eligible and every
//! host counts.
//!
//! Identity costs one look at the call index per naming hint, once per interval, and is then
//! fixed: a hint names a call complete by the interval's start, and every such call is known by
//! the report, which comes after its end. For the same reason the two other things the
//! identity decides are fixed when the candidates are gathered, at the report: whether a hint
//! names a call seen in an eligible window (then no loss counts), and whether a window that
//! only the identity ruled out was open at the interval's end (`identity_conflict`: a window
//! open at the report, which is at or after the end, was neither closed nor broken before it,
//! whatever it does later; one final before the report is judged by its final time). Such a
//! window is no candidate, so it never delays a decision: a call whose hints leave only its own
//! window is decided when that window closes, whatever its siblings' windows do.
//!
//! A candidate must also have opened no longer than `max_window` before the interval's end: a
//! window closes or breaks within `max_window` of opening, so an older one cannot contain the
//! interval, and its break makes nothing `incomplete`. That is what lets the tracker drop
//! broken windows of threads that never spoke again (see `Tracker::forget_before`), so the
//! state held, and the work per event, stay flat over a long run.
//!
//! Every reported interval waits, pending, until the first moment its answer cannot change:
//! every candidate window (an eligible one whose first call completed at or before the
//! interval's start) has closed, broken or been given up, or `incomplete` holds. A candidate
//! is given up at the first moment the conditions hold, and stays so: the tracker keeps each
//! window's past spans in which it could be given up, so a call that starts inside it later
//! cannot take that back. That moment is computed, not
//! polled, and lazily: each pending interval is either queued at a *lower bound* of its due
//! time, or parked on one candidate that blocks it (its response still streams, or an MCP call
//! that started inside it still runs). Time advances from one queued time or `max_window`
//! deadline to the next; a popped interval's exact due time is computed then, and it is
//! decided, queued again later, or parked.
//!
//! Why lazy: most events (an MCP call starting or ending inside a window) can only delay
//! decisions, so they leave every lower bound valid and need no per-interval work. Only a few
//! can make one earlier: a candidate closing or breaking, its response ending, its running
//! calls dropping to none (those wake the intervals attached to that window: the ones parked
//! on it, or queued at a due time it set), and a loss or a break (`incomplete` may now hold).
//! Rule 1 is kept per interval: the losses and broken windows that count for it are found
//! once, when its candidates are gathered; after that a loss wakes only the intervals it
//! counts for (and marks them), a break only the intervals that hold the window as a
//! candidate, whose evaluation looks at their own candidates. So no event costs as much as all
//! the pending intervals, nor an evaluation as much as every loss and broken window held (on a
//! trace of many hosts, losses and long calls, thousands of each; issue 38).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::event::{CallKind, Event, EventKind, Hints, Millis};
use crate::records::{Evidence, Reason, Record, WindowRef};
use crate::route::Names;
use crate::windows::{
    Call, Changes, EarlierLosses, Fit, Identity, LostSpan, Named, Spare, Time, Tracker, WinId,
    Window, WindowState,
};

/// How many alias/tool pairs keep their route names cached.
const MAX_ROUTES: usize = 4096;

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

/// Which windows may be candidates for an interval (docs/design.md §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Candidates {
    /// Only eligible windows: same host (or one unknown), and a call that could have issued
    /// the MCP call. Losses and running calls count only within a host. The default.
    #[default]
    Eligible,
    /// The literal rule, as before hosts existed: every window, every loss, every call.
    All,
}

impl Candidates {
    pub fn as_str(self) -> &'static str {
        match self {
            Candidates::Eligible => "eligible",
            Candidates::All => "all",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "eligible" => Some(Candidates::Eligible),
            "all" => Some(Candidates::All),
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
    /// How late a report may come and still be judged exactly (default 5 minutes): a call's
    /// first report (its `mcp_start`, else its `mcp_interval`) within this of its start, and
    /// its `mcp_interval` within this of its end. What decides the intervals of a later report
    /// may have been dropped, so one that starts or ends before what was dropped is judged
    /// `incomplete` rather than guessed. It bounds what is held: final windows and lost spans
    /// stay this long (broken windows `max_window` longer), plus what open windows, pending
    /// intervals and running calls still need (see `Tracker::forget_before`).
    ///
    /// Why minutes: the wrapper sends each report as the line passes (a report that cannot
    /// leave within seconds is dropped, not held), so a report is late by milliseconds. The
    /// allowance matters only for a call whose start report was lost: it is judged exactly if
    /// it lasted less than this, else `incomplete`.
    pub late_allowance: Millis,
    /// `--candidates` (default `eligible`).
    pub candidates: Candidates,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            close_wait: 1000.0,
            window_open: WindowOpen::Call,
            max_window: 30.0 * 60.0 * 1000.0,
            late_allowance: 5.0 * 60.0 * 1000.0,
            candidates: Candidates::Eligible,
        }
    }
}

/// What [`Correlator::held`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Held {
    /// Intervals reported and not yet decided.
    pub pending: usize,
    /// Windows, open and final.
    pub windows: usize,
    /// Broken windows kept because they may still make a call `incomplete`.
    pub broken: usize,
    /// Spans of streams whose observation was lost.
    pub lost: usize,
    /// Call and item ids indexed for continuations and hints, and the call ids of dropped
    /// windows kept for hints.
    pub ids: usize,
    /// Threads with a window waiting for their next request.
    pub threads_awaiting: usize,
}

struct Pending {
    interval: Arc<str>,
    /// Interned (see `Tracker::intern`): records of one tool share them.
    alias: Arc<str>,
    tool: Arc<str>,
    start: Millis,
    end: Millis,
    hints: HintText,
    host: Option<Arc<str>>,
    /// The visible names its alias and tool can have.
    names: Arc<Names>,
    /// Candidate windows: `windows[..open]` not yet settled (open, and not given up, at
    /// gathering or at the last evaluation), the rest given up (for good) or closed at or
    /// after its end (containment is judged at the decision). Candidates that broke or closed before its end cannot change its record
    /// and are let go.
    windows: Vec<WinId>,
    open: usize,
    /// The window its naming hints leave (docs/design.md §4 "same identity"; `Any` under
    /// `--candidates all`, where hints only contradict). Fixed when its candidates are
    /// gathered: every call complete by its start is known by its report.
    named: Named,
    /// A hint names a call observed in an eligible window: then no other stream can hide an
    /// eligible window, and no loss makes it `incomplete` (§4 rule 1).
    names_eligible: bool,
    /// A window eligible by host and route alone but ruled out by its identity, opened by its
    /// start (response mode: completed by it) and no longer than `max_window` before its end,
    /// was open at its end (§4 rule 4). Fixed at gathering, which comes after its end: a
    /// window open then was neither closed nor broken before it, whatever it does later.
    pointed_at: bool,
    /// How far the tracker had forgotten when its first report came (its `mcp_start`, else
    /// its `mcp_interval`): if it started earlier, what decides it may be gone.
    exact_from: Millis,
    /// Lost spans dropped while it ran (see `Tracker::forget_before`), counted as the held
    /// ones are.
    earlier_losses: EarlierLosses,
    /// A loss counts for it (§4 rule 1): one held or dropped while it ran, found when its
    /// candidates were gathered, or one since (the loss wakes it). Once true, true for good.
    lost: bool,
    /// An eligible window that opened by its start and within `max_window` of its end broke
    /// with no request of its thread by its start (§4 rule 1): one broken when its candidates
    /// were gathered, or a candidate that broke since and has been let go. A candidate still
    /// held is looked at directly ([`incomplete`]).
    broke: bool,
    /// Identifies its one live queue entry; older entries are stale.
    generation: u32,
    /// The window whose changes wake it, if any.
    attached: Option<WinId>,
}

/// A pending interval's hints, in one allocation: they are kept until its decision, and a
/// string of its own for each was nearly a tenth of a replay's allocations.
struct HintText {
    text: Box<str>,
    /// Where each hint is in `text`, in [`Hints`] field order.
    cuts: [Option<(usize, usize)>; 4],
}

impl HintText {
    fn new<S: AsRef<str>>(h: &Hints<S>) -> HintText {
        let fields = [&h.tool_use_id, &h.item_id, &h.call_id, &h.thread];
        let len = fields
            .iter()
            .filter_map(|f| f.as_ref())
            .map(|v| v.as_ref().len())
            .sum();
        let mut text = String::with_capacity(len);
        let cuts = fields.map(|f| {
            f.as_ref().map(|v| {
                let from = text.len();
                text.push_str(v.as_ref());
                (from, text.len())
            })
        });
        HintText {
            text: text.into_boxed_str(),
            cuts,
        }
    }

    fn get(&self) -> Hints<&str> {
        let [tool_use_id, item_id, call_id, thread] = self
            .cuts
            .map(|c| c.and_then(|(from, to)| self.text.get(from..to)));
        Hints {
            tool_use_id,
            item_id,
            call_id,
            thread,
        }
    }
}

/// What an evaluation found.
enum Next {
    Decide,
    /// Not before this time; the window that set it.
    Queue(Millis, WinId),
    /// Not while this window blocks it.
    Park(WinId),
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
    /// Pending intervals by lower bound of their due time, ties in report order; entries
    /// whose generation is not the interval's current one are stale and skipped.
    queue: BinaryHeap<Reverse<(Time, u64, u32)>>,
    /// Reported at the current time; their candidates are gathered once every event of this
    /// time has been applied.
    ungathered: Vec<u64>,
    /// Reused buffers for gathering candidates.
    scratch: Vec<WinId>,
    gathered: Vec<(Time, WinId)>,
    /// Emptied candidate vectors of decided intervals, and wake lists of windows that became
    /// final, for the next intervals and windows.
    spare: Spare,
    /// Reused for what each applied event changed: most events change something, and a fresh
    /// vector each time was one allocation per event.
    changes: Changes,
    next_seq: u64,
    last_gc: Millis,
    /// Route names by alias, then tool (bounded: see [`MAX_ROUTES`]).
    routes: FxHashMap<Box<str>, FxHashMap<Box<str>, Arc<Names>>>,
    routes_len: usize,
    /// The last alias, tool and names asked for: intervals of one tool come in runs, and two
    /// short comparisons cost less than hashing both strings into `routes` (which showed in
    /// `perf` at about 5% of replay on the busy workload). Strings rewritten in place, so
    /// alternating tools allocate nothing either.
    last_route: (String, String, Option<Arc<Names>>),
    /// How many evaluations ran (tests hold wake-ups to the intervals a change concerns).
    #[cfg(test)]
    evaluated: usize,
}

impl Correlator {
    pub fn new(config: Config) -> Self {
        Correlator {
            tracker: Tracker::new(
                config.close_wait,
                config.max_window,
                config.candidates == Candidates::All,
            ),
            config,
            now: 0.0,
            started: false,
            pending: FxHashMap::default(),
            queue: BinaryHeap::new(),
            ungathered: Vec::new(),
            scratch: Vec::new(),
            gathered: Vec::new(),
            spare: Spare::default(),
            changes: Changes::default(),
            next_seq: 0,
            last_gc: 0.0,
            routes: FxHashMap::default(),
            routes_len: 0,
            last_route: (String::new(), String::new(), None),
            #[cfg(test)]
            evaluated: 0,
        }
    }

    /// The names an alias and tool can have, computed once per pair (hosts use a handful).
    fn route_names(&mut self, alias: &str, tool: &str) -> Arc<Names> {
        if let (a, t, Some(n)) = &self.last_route {
            if a == alias && t == tool {
                return n.clone();
            }
        }
        let names = self.route_names_from_table(alias, tool);
        let (a, t, n) = &mut self.last_route;
        a.clear();
        a.push_str(alias);
        t.clear();
        t.push_str(tool);
        *n = Some(names.clone());
        names
    }

    fn route_names_from_table(&mut self, alias: &str, tool: &str) -> Arc<Names> {
        if let Some(n) = self.routes.get(alias).and_then(|tools| tools.get(tool)) {
            return n.clone();
        }
        let names = Arc::new(Names::new(alias, tool));
        if self.routes_len < MAX_ROUTES {
            self.routes_len += 1;
            self.routes
                .entry(alias.into())
                .or_default()
                .insert(tool.into(), names.clone());
        }
        names
    }

    /// Intervals reported and not yet decided.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Windows held in memory (open, and final ones kept for late reports).
    pub fn windows_held(&self) -> usize {
        self.tracker.window_count()
    }

    /// How much state the correlator holds, by kind (for tests and memory reports: it
    /// should follow the traffic of the last `late_allowance` (broken windows: plus
    /// `max_window`) and what is open, not the run's length).
    pub fn held(&self) -> Held {
        let [windows, broken, lost, ids, threads_awaiting] = self.tracker.sizes();
        Held {
            pending: self.pending.len(),
            windows,
            broken,
            lost,
            ids,
            threads_awaiting,
        }
    }

    /// Applies one event. First decides everything due strictly before `ev.t`. An event older
    /// than the current time (which a live caller must not send) is applied at the current time.
    pub fn push<S: AsRef<str>>(&mut self, ev: &Event<S>, out: &mut Vec<Record>) {
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

    fn apply<S: AsRef<str>>(&mut self, t: Millis, kind: &EventKind<S>) {
        let mut ch = self.take_changes();
        let tr = &mut self.tracker;
        match kind {
            EventKind::StreamOpen {
                stream,
                client,
                thread,
                host,
                ..
            } => {
                let host = host.as_ref().map(|h| tr.intern(h.as_ref()));
                let thread = thread.as_ref().map(AsRef::as_ref);
                tr.stream_open(t, stream.as_ref(), *client, thread, host)
            }
            EventKind::Request {
                stream,
                request,
                previous_response,
                outputs,
            } => tr.request(
                t,
                stream.as_ref(),
                request.as_ref(),
                previous_response.as_ref().map(AsRef::as_ref),
                outputs,
                &mut ch,
            ),
            EventKind::ResponseStart {
                stream, response, ..
            } => tr.response_start(stream.as_ref(), response.as_ref()),
            EventKind::ToolCall {
                response,
                call,
                item,
                name,
                namespace,
                kind,
                ..
            } => {
                let call = Call {
                    at: t,
                    call: call.as_ref().into(),
                    item: item.as_ref().map(|i| Arc::from(i.as_ref())),
                    name: tr.intern(name.as_ref()),
                    namespace: namespace.as_ref().map(|n| tr.intern(n.as_ref())),
                    kind: *kind,
                };
                tr.tool_call(t, response.as_ref(), call)
            }
            EventKind::ResponseEnd {
                stream,
                response,
                status,
                ..
            } => tr.response_end(t, stream.as_ref(), response.as_ref(), *status, &mut ch),
            EventKind::StreamClose { stream } => tr.stream_close(t, stream.as_ref(), &mut ch),
            EventKind::ObservationLost { stream, .. } => {
                tr.observation_lost(t, stream.as_ref(), &mut ch)
            }
            EventKind::McpStart {
                interval,
                start,
                host,
                ..
            } => {
                let host = host.as_ref().map(|h| tr.intern(h.as_ref()));
                tr.mcp_start(interval.as_ref(), *start, host)
            }
            EventKind::McpInterval {
                interval,
                alias,
                tool,
                start,
                end,
                hints,
                host,
                ..
            } => {
                let host = host.as_ref().map(|h| tr.intern(h.as_ref()));
                let (interval, exact_from, earlier_losses) =
                    tr.mcp_interval(interval.as_ref(), *start, *end, host.clone(), &mut ch);
                let (alias, tool) = (alias.as_ref(), tool.as_ref());
                let names = self.route_names(alias, tool);
                let seq = self.next_seq;
                self.next_seq += 1;
                self.pending.insert(
                    seq,
                    Pending {
                        interval,
                        alias: self.tracker.intern(alias),
                        tool: self.tracker.intern(tool),
                        start: *start,
                        end: *end,
                        hints: HintText::new(hints),
                        host,
                        names,
                        windows: Vec::new(),
                        open: 0,
                        named: Named::Any,
                        names_eligible: false,
                        pointed_at: false,
                        exact_from,
                        earlier_losses,
                        lost: false,
                        broke: false,
                        generation: 0,
                        attached: None,
                    },
                );
                self.ungathered.push(seq);
            }
        }
        self.mark(&ch);
        self.changes = ch;
    }

    /// The reused change buffer, emptied; give it back to `self.changes` after [`Self::mark`].
    fn take_changes(&mut self) -> Changes {
        let mut ch = std::mem::take(&mut self.changes);
        ch.clear();
        ch
    }

    /// Wakes the intervals that an applied change may let be decided earlier.
    ///
    /// Only the intervals a change concerns are woken: for a loss, those for which it counts
    /// (§4 rule 1), which are marked `lost` on the way; for a break, the intervals that hold
    /// the window (a window broken before an interval was gathered was looked at then); for a
    /// window that closed, broke or stopped blocking, the intervals attached to it.
    fn mark(&mut self, ch: &Changes) {
        let now = self.now;
        let all = self.config.candidates == Candidates::All;
        if !ch.lost.is_empty() {
            let mut woken = std::mem::take(&mut self.scratch);
            for l in &ch.lost {
                for (seq, p) in self.pending.iter_mut() {
                    if !p.lost && loss_counts(all, p, l, now) {
                        p.lost = true;
                        woken.push(*seq);
                    }
                }
            }
            for &seq in &woken {
                self.requeue(seq, now);
            }
            woken.clear();
            self.scratch = woken;
        }
        for id in &ch.broken {
            let Some(w) = self.tracker.window_mut(*id) else {
                continue;
            };
            let holders = std::mem::take(&mut w.holders);
            for &seq in &holders {
                self.requeue(seq, now);
            }
            if let Some(w) = self.tracker.window_mut(*id) {
                w.holders = holders;
            }
        }
        for id in &ch.windows {
            let Some(w) = self.tracker.window_mut(*id) else {
                continue;
            };
            let mut attached = std::mem::take(&mut w.attached);
            for &seq in &attached {
                if self
                    .pending
                    .get(&seq)
                    .is_some_and(|p| p.attached == Some(*id))
                {
                    self.requeue(seq, now);
                }
            }
            // An open window gets it back emptied: intervals attach to it again and again. A
            // final one (kept a while for late reports) gets no attachments any more: the
            // vector goes to the spares, for the next window's first attachment.
            attached.clear();
            match self.tracker.window_mut(*id) {
                Some(w) if w.is_open() => w.attached = attached,
                _ => self.spare.give(attached),
            }
        }
    }

    /// Queues a pending interval at `t` (a lower bound of its due time), detached from any
    /// window; its older queue entries become stale.
    fn requeue(&mut self, seq: u64, t: Millis) {
        if let Some(p) = self.pending.get_mut(&seq) {
            p.attached = None;
            p.generation = p.generation.wrapping_add(1);
            self.queue.push(Reverse((Time(t), seq, p.generation)));
        }
    }

    /// Every event of the current time has been applied: intervals reported at this time get
    /// their candidates and are queued now.
    fn end_instant(&mut self) {
        if self.ungathered.is_empty() {
            return;
        }
        let all = self.config.candidates == Candidates::All;
        let response_mode = self.config.window_open == WindowOpen::Response;
        let max_window = self.config.max_window;
        let now = self.now;
        // Taken and given back, so the buffer keeps its capacity from instant to instant.
        let mut ungathered = std::mem::take(&mut self.ungathered);
        for &seq in &ungathered {
            let Some(p) = self.pending.get_mut(&seq) else {
                continue;
            };
            let (s, e) = (p.start, p.end);
            let mut found = std::mem::take(&mut self.scratch);
            let tr = &mut self.tracker;
            if !all {
                p.named = named(tr, &p.hints.get(), s);
            }
            let identity = Identity {
                named: p.named,
                thread: p.hints.get().thread,
            };
            tr.open_candidates(p.host.as_ref(), &p.names, s, &mut found, &mut self.gathered);
            let open = found.len();
            found.extend(tr.closed_containing(s, e));
            // Only eligible windows stay, in order (the open ones first), each held until the
            // interval is decided. Into a vector a decided interval gave back, when there is one.
            // Every window gathered opened by s and is open or closed at or after e, so one
            // that identity rules out is pointed at (rule 4) if it also passes the age and
            // response-mode conditions.
            let mut windows = self.spare.take();
            p.open = 0;
            let mut pointed_at = false;
            for (i, &id) in found.iter().enumerate() {
                match tr.fit(id, p.host.as_ref(), &p.names, s, &identity) {
                    Some(Fit::Eligible) => {
                        tr.hold(id, seq);
                        windows.push(id);
                        p.open += usize::from(i < open);
                    }
                    Some(Fit::RuledOut) if !pointed_at => {
                        pointed_at = tr
                            .window(id)
                            .is_some_and(|w| points(w, s, e, max_window, response_mode));
                    }
                    _ => {}
                }
            }
            // Rule 4 also counts a ruled-out window that broke at or after e. Broken windows
            // are in break order: only the newest are looked at.
            if !all && !pointed_at && identity_rules_out(&identity) {
                found.clear();
                found.extend(
                    tr.broken_windows()
                        .rev()
                        .take_while(|(_, w)| w.final_at().is_some_and(|b| b >= e))
                        .filter(|(_, w)| points(w, s, e, max_window, response_mode))
                        .map(|(id, _)| id),
                );
                pointed_at = found.iter().any(|&id| {
                    tr.fit(id, p.host.as_ref(), &p.names, s, &identity) == Some(Fit::RuledOut)
                });
            }
            p.pointed_at = pointed_at;
            p.names_eligible = match p.named {
                Named::Window(id) => {
                    tr.fit(id, p.host.as_ref(), &p.names, s, &identity) == Some(Fit::Eligible)
                }
                _ => false,
            };
            // Rule 1 as it stands now; later losses and breaks are told by `mark`.
            p.lost = (all || !p.names_eligible)
                && (tr.lost_spans().iter().any(|l| loss_counts(all, p, l, now))
                    || p.earlier_losses.any(|h, t| counts(all, p, h, t)));
            p.broke = tr
                .broken_for(p.host.as_ref())
                .any(|(id, w)| broke_uncontinued(w, p, now, max_window) && eligible(all, p, id, w));
            p.windows = windows;
            found.clear();
            self.scratch = found;
            self.requeue(seq, self.now);
        }
        ungathered.clear();
        self.ungathered = ungathered;
    }

    /// The earliest live queue entry, dropping stale ones.
    fn next_queued(&mut self) -> Option<(Millis, u64)> {
        while let Some(Reverse((t, seq, generation))) = self.queue.peek() {
            let live = self
                .pending
                .get(seq)
                .is_some_and(|p| p.generation == *generation);
            if live {
                return Some((t.0, *seq));
            }
            self.queue.pop();
        }
        None
    }

    /// Advances time through queued evaluations and `max_window` deadlines up to `limit`
    /// (inclusive or not). A deadline goes before an evaluation at the same time.
    fn run_until(&mut self, limit: Millis, inclusive: bool, out: &mut Vec<Record>) {
        loop {
            let next_due = self.next_queued();
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
                let mut ch = self.take_changes();
                self.tracker.expire(next, &mut ch);
                self.mark(&ch);
                self.changes = ch;
                continue;
            }
            if let Some((_, seq)) = next_due {
                self.queue.pop();
                self.evaluate(seq, next, out);
            }
        }
    }

    /// A queued interval's time `at` came: decides it if it is due now, else queues it at its
    /// exact due time or parks it on a blocking candidate.
    fn evaluate(&mut self, seq: u64, at: Millis, out: &mut Vec<Record>) {
        #[cfg(test)]
        {
            self.evaluated += 1;
        }
        let cw = self.config.close_wait;
        let Some(p) = self.pending.get_mut(&seq) else {
            return;
        };
        // The entry just popped was its live one.
        p.generation = p.generation.wrapping_add(1);
        p.attached = None;
        let max_window = self.config.max_window;
        let next = if incomplete(&self.tracker, p, &p.windows, at, max_window) {
            Next::Decide
        } else {
            next_step(p, &mut self.tracker, cw, max_window, at)
        };
        match next {
            Next::Decide => self.decide(seq, at, out),
            Next::Queue(due, id) => {
                p.attached = Some(id);
                self.queue.push(Reverse((Time(due), seq, p.generation)));
                self.attach(seq, id);
            }
            Next::Park(id) => {
                p.attached = Some(id);
                self.attach(seq, id);
            }
        }
    }

    /// Puts interval `seq` on window `id`'s wake list (a spare vector if it has none yet).
    fn attach(&mut self, seq: u64, id: WinId) {
        if let Some(w) = self.tracker.window_mut(id) {
            if w.attached.capacity() == 0 {
                w.attached = self.spare.take();
            }
            w.attached.push(seq);
        }
    }

    fn decide(&mut self, seq: u64, at: Millis, out: &mut Vec<Record>) {
        let Some(mut p) = self.pending.remove(&seq) else {
            return;
        };
        let windows = std::mem::take(&mut p.windows);
        out.push(self.judge(p, &windows, at));
        for &id in &windows {
            self.tracker.unref(id);
            // Decided intervals linger on a window's holders until they outnumber the rest.
            if let Some(w) = self.tracker.window_mut(id) {
                if w.holders.len() > 2 * w.refs as usize + 16 {
                    let pending = &self.pending;
                    w.holders.retain(|h| pending.contains_key(h));
                }
            }
        }
        self.spare.give(windows);
    }

    /// The record for a pending interval decided at `at`: candidates still open count as
    /// given up.
    fn judge(&self, p: Pending, windows: &[WinId], at: Millis) -> Record {
        let response_mode = self.config.window_open == WindowOpen::Response;
        let completed_by_start =
            |w: &Window| !response_mode || w.completed_at.is_some_and(|c| c <= p.start);
        // How many contain it, and the first (only read when it is the one candidate).
        let (mut contained, mut first) = (0usize, None::<&Window>);
        let mut given_up = 0usize;
        for id in windows {
            let Some(w) = self.tracker.window(*id) else {
                continue;
            };
            match w.state {
                WindowState::Closed(c) if c >= p.end && completed_by_start(w) => {
                    contained += 1;
                    first = first.or(Some(w));
                }
                WindowState::Open if completed_by_start(w) => given_up += 1,
                _ => {}
            }
        }
        let candidates = contained + given_up;
        // Exactly one candidate, and it contains the interval.
        let only = first.filter(|_| candidates == 1);
        let all = self.config.candidates == Candidates::All;
        let reason = if incomplete(&self.tracker, &p, windows, at, self.config.max_window) {
            Some(Reason::Incomplete)
        } else if candidates >= 2 {
            Some(Reason::Ambiguous)
        } else if given_up == 1 {
            Some(Reason::Unclosed)
        } else {
            match only {
                // No eligible window contains it; one its identity ruled out was open
                // throughout it (or still is).
                None if p.pointed_at => Some(Reason::IdentityConflict),
                None => Some(Reason::NoWindow),
                // `--candidates all`: the one window contains it, and a hint contradicts.
                Some(w) if all && conflicts(&p, w) => Some(Reason::IdentityConflict),
                Some(_) => None,
            }
        };
        let attributed = only.filter(|_| reason.is_none());
        let mut record = Record {
            evidence: attributed.map_or_else(Vec::new, |w| evidence(&p, w)),
            interval: p.interval,
            alias: p.alias,
            tool: p.tool,
            start: p.start,
            end: p.end,
            reason,
            candidates,
            window: None,
            decided_at: at,
        };
        if let Some(w) = attributed {
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

    /// Drops what no interval reported within `late_allowance` can need (at most every
    /// sixteenth of it). The end horizon never passes a pending interval's start: what it
    /// needs stays until it is decided.
    fn collect_garbage(&mut self, now: Millis) {
        let allowance = self.config.late_allowance;
        if now - self.last_gc < allowance / 16.0 {
            return;
        }
        self.last_gc = now;
        let pending_from = self.pending.values().map(|p| p.start).fold(now, f64::min);
        self.tracker
            .forget_before((now - allowance).min(pending_from));
    }
}

/// Both hosts known and different: the one thing that rules a window, a loss or a running call
/// out for an interval (a null host never does).
fn hosts_differ(a: Option<&Arc<str>>, b: Option<&Arc<str>>) -> bool {
    matches!((a, b), (Some(a), Some(b)) if a != b)
}

/// Both threads known and different (a loss's stream thread against an interval's `thread`
/// hint).
fn threads_differ(a: Option<&str>, b: Option<&Arc<str>>) -> bool {
    matches!((a, b), (Some(a), Some(b)) if a != &**b)
}

/// docs/design.md §4 "names": the window whose response issued every call that `h` names
/// among the calls complete by `s`. A `tool_use_id` or `item_id` that matches none names a
/// call the relay did not see (no window issued it); a `call_id` that matches none names
/// nothing (Codex code mode's fresh `exec-…` ids).
fn named(tracker: &Tracker, h: &Hints<&str>, s: Millis) -> Named {
    let mut n = Named::Any;
    if let Some(id) = &h.tool_use_id {
        n = n.and(tracker.named(id, false, s));
    }
    if let Some(id) = &h.item_id {
        n = n.and(tracker.named(id, true, s));
    }
    if let Some(id) = &h.call_id {
        // Usually the call the other hints named: then no lookup.
        let known = matches!(n, Named::Window(w) if tracker.issued(w, id, false, s));
        if !known {
            if let Some(w) = tracker.named(id, false, s) {
                n = n.and(Some(w));
            } else if tracker.forgot_call(id, s) {
                // A call of a window dropped since: one the relay did not see, as a
                // `tool_use_id` or `item_id` that finds nothing (`Tracker::forget_before`).
                n = n.and(None);
            }
        }
    }
    n
}

/// Can an identity rule any window out? Only with a naming hint or a `thread` hint.
fn identity_rules_out(identity: &Identity<'_>) -> bool {
    identity.named != Named::Any || identity.thread.is_some()
}

/// Rule 4's timing for window `w` and interval [s, e]: opened by s (response mode: its
/// response completed by s), no longer than `max_window` before e, and not final before e.
fn points(w: &Window, s: Millis, e: Millis, max_window: Millis, response_mode: bool) -> bool {
    let by_start = if response_mode {
        w.completed_at.is_some_and(|c| c <= s)
    } else {
        w.open <= s
    };
    let not_final_before_end = match w.state {
        WindowState::Open => true,
        WindowState::Closed(t) | WindowState::Broken(t) => t >= e,
    };
    by_start && w.open >= e - max_window && not_final_before_end
}

/// docs/design.md §4 "eligible": could window `w` (handle `id`) hold interval `p`? Same host
/// (or one unknown), a call complete by `p`'s start that routes to its alias and tool or is an
/// opaque program call (kind `custom`), which may call any tool, and the same identity. Under
/// `--candidates all`, every window.
fn eligible(all: bool, p: &Pending, id: WinId, w: &Window) -> bool {
    if all {
        return true;
    }
    let identity = Identity {
        named: p.named,
        thread: p.hints.get().thread,
    };
    !hosts_differ(p.host.as_ref(), w.host.as_ref())
        && w.first_call_for(&p.names) <= p.start
        && identity.allows(id, w)
}

/// docs/design.md §4 rule 1, at time `at`: a loss on a stream open during the interval whose
/// host is not known to differ from its own and whose thread is not known to differ from its
/// `thread` hint, unless a hint names a call observed in an eligible window (then no other
/// stream can hide an eligible window); or a candidate (an eligible window that opened by its
/// start and no longer than `max_window` before its end) that broke with no request of its
/// thread in between. Under `--candidates all`, every loss and every window that opened by its
/// start and within `max_window` of its end.
///
/// What was known when its candidates were gathered, and every loss since, is in `p.lost` and
/// `p.broke` (see [`Correlator::mark`]); what is left is whether one of its candidates
/// `windows` has broken since: a window that was open then and opened by its start, if
/// eligible, is one of them. So this costs the interval's candidates, not every loss and
/// broken window held.
#[inline]
fn incomplete(
    tracker: &Tracker,
    p: &Pending,
    windows: &[WinId],
    at: Millis,
    max_window: Millis,
) -> bool {
    // What could decide it may have been dropped: it was reported late (see
    // `Config::late_allowance`).
    if p.start < p.exact_from || p.end < tracker.forgotten_end() {
        return true;
    }
    p.lost
        || p.broke
        || windows.iter().any(|id| {
            tracker
                .window(*id)
                .is_some_and(|w| broke_uncontinued(w, p, at, max_window))
        })
}

/// Does a loss or a lost stream's host and thread count for `p` (§4 rule 1)? Under
/// `--candidates all`, every one; else not when a hint of `p` names a call of an eligible
/// window, nor when its host or thread is known to differ.
fn counts(all: bool, p: &Pending, host: Option<&Arc<str>>, thread: Option<&Arc<str>>) -> bool {
    all || (!p.names_eligible
        && !hosts_differ(p.host.as_ref(), host)
        && !threads_differ(p.hints.get().thread, thread))
}

/// Does lost span `l` count for `p` at `at`: lost by then, its stream was open at some time
/// during `p`, and its host and thread count.
fn loss_counts(all: bool, p: &Pending, l: &LostSpan, at: Millis) -> bool {
    l.lost_at <= at
        && l.open <= p.end
        && l.close.is_none_or(|c| c >= p.start)
        && counts(all, p, l.host.as_ref(), l.thread.as_ref())
}

/// Rule 1's broken candidate, but for eligibility: window `w` broke by `at`, opened by `p`'s
/// start and no longer than `max_window` before its end, and its thread sent no request after
/// it opened and by the start.
fn broke_uncontinued(w: &Window, p: &Pending, at: Millis, max_window: Millis) -> bool {
    matches!(w.state, WindowState::Broken(b) if b <= at)
        && w.open <= p.start
        && w.open >= p.end - max_window
        && !w.next_request.is_some_and(|q| q <= p.start)
}

/// For an interval not `incomplete` at `at`: decide now, or the exact due time and the
/// candidate that sets it, or a candidate that cannot be given up yet (its response still
/// streams or an MCP call that started inside it still runs, and it could not be given up
/// before). Of several blocking candidates the latest opened is chosen: it is likely to block
/// longest, so the interval is woken fewer times.
///
/// On the way, candidates that became final leave the open part of `p.windows`: those that
/// closed at or after its end stay for the judgement, the others (broken, or closed before its
/// end: they neither delay nor can contain it) are let go.
fn next_step(
    p: &mut Pending,
    tracker: &mut Tracker,
    close_wait: Millis,
    max_window: Millis,
    at: Millis,
) -> Next {
    let mut due = at;
    let mut setter = None;
    let mut blocker: Option<(Millis, WinId)> = None;
    let mut i = 0;
    while i < p.open {
        let id = p.windows[i];
        let Some(w) = tracker.window(id) else {
            // Gone (cannot happen while held): it neither delays nor contains.
            p.open -= 1;
            p.windows.swap(i, p.open);
            p.windows.swap_remove(p.open);
            continue;
        };
        match w.state {
            WindowState::Open => {}
            WindowState::Closed(c) if c >= p.end => {
                p.open -= 1;
                p.windows.swap(i, p.open);
                continue;
            }
            _ => {
                // Let go; if it broke as rule 1 says, that is remembered.
                p.broke |= broke_uncontinued(w, p, at, max_window);
                p.open -= 1;
                p.windows.swap(i, p.open);
                p.windows.swap_remove(p.open);
                tracker.unref(id);
                continue;
            }
        }
        match tracker.give_up_at(w, p.end + close_wait) {
            Some(give_up) if give_up <= at => {
                // Given up, and so for good (docs/design.md §4): it no longer delays this interval
                // and is not looked at again until the judgement.
                p.open -= 1;
                p.windows.swap(i, p.open);
                continue;
            }
            Some(give_up) => {
                if give_up > due {
                    due = give_up;
                    setter = Some(id);
                }
            }
            None => {
                if blocker.is_none_or(|(open, _)| w.open > open) {
                    blocker = Some((w.open, id));
                }
            }
        }
        i += 1;
    }
    if p.broke {
        return Next::Decide;
    }
    match (blocker, setter) {
        (Some((_, id)), _) => Next::Park(id),
        (None, Some(id)) => Next::Queue(due, id),
        (None, None) => Next::Decide,
    }
}

/// Rule 4 under `--candidates all`: the one window that contains `p`, but its `tool_use_id` or
/// `item_id` names no call of that window's response (among the calls complete by its start,
/// as "names" says), or its `thread` hint is not the window's thread.
fn conflicts(p: &Pending, w: &Window) -> bool {
    let h = p.hints.get();
    let by_start = |c: &&Call| c.at <= p.start;
    if let Some(id) = h.tool_use_id {
        if !w.calls.iter().filter(by_start).any(|c| *c.call == *id) {
            return true;
        }
    }
    if let Some(item) = h.item_id {
        if !w
            .calls
            .iter()
            .filter(by_start)
            .any(|c| c.item.as_deref() == Some(item))
        {
            return true;
        }
    }
    matches!((h.thread, &w.thread), (Some(a), Some(b)) if a != &**b)
}

/// What agreed between an attributed interval and its window, in record order. Hints and
/// routes are read off the window's calls complete by the interval's start (docs/design.md
/// §4 "names", "route").
fn evidence(p: &Pending, w: &Window) -> Vec<Evidence> {
    let h = p.hints.get();
    let calls = || w.calls.iter().filter(|c| c.at <= p.start);
    // Room for every kind at once: one allocation per record.
    let mut ev = Vec::with_capacity(Evidence::ALL.len());
    ev.push(Evidence::Containment);
    if h.tool_use_id
        .is_some_and(|id| calls().any(|c| &*c.call == id))
    {
        ev.push(Evidence::ToolUseId);
    }
    if h.item_id
        .is_some_and(|id| calls().any(|c| c.item.as_deref() == Some(id)))
    {
        ev.push(Evidence::ItemId);
    }
    if h.call_id.is_some_and(|id| calls().any(|c| &*c.call == id)) {
        ev.push(Evidence::CallId);
    }
    if matches!((h.thread, &w.thread), (Some(a), Some(b)) if a == &**b) {
        ev.push(Evidence::Thread);
    }
    if matches!((&p.host, &w.host), (Some(a), Some(b)) if a == b) {
        ev.push(Evidence::Host);
    }
    if calls().any(|c| {
        c.kind != CallKind::Custom && p.names.matches(w.client, &c.name, c.namespace.as_deref())
    }) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{CallKind, Client, Outcome, ResponseStatus, Transport};

    fn ev(t: Millis, kind: EventKind) -> Event {
        Event { t, kind }
    }

    fn open(stream: &str, host: &str) -> EventKind {
        EventKind::StreamOpen {
            stream: stream.into(),
            client: Client::Claude,
            transport: Transport::Http,
            thread: Some(format!("th-{stream}")),
            host: Some(host.into()),
        }
    }

    /// Issue 38: a loss wakes only the pending intervals it can make `incomplete` (before,
    /// every pending interval was evaluated again at each loss and each break). A loss on a
    /// stream of another host leaves an interval alone; one of its own host decides it at once.
    #[test]
    fn a_loss_wakes_only_the_intervals_it_counts_for() {
        let mut c = Correlator::new(Config::default());
        let mut out = Vec::new();
        let events = vec![
            ev(0.0, open("sa", "host-a")),
            ev(0.0, open("sb", "host-b")),
            ev(0.0, open("sc", "host-a")),
            ev(
                1.0,
                EventKind::ResponseStart {
                    stream: "sa".into(),
                    response: "r1".into(),
                    request: None,
                    model: None,
                },
            ),
            ev(
                2.0,
                EventKind::ToolCall {
                    stream: "sa".into(),
                    response: "r1".into(),
                    call: "toolu_1".into(),
                    item: None,
                    name: "mcp__a__t".into(),
                    namespace: None,
                    kind: CallKind::ToolUse,
                },
            ),
            ev(
                10.0,
                EventKind::McpInterval {
                    rounds: None,
                    interval: "i1".into(),
                    alias: "a".into(),
                    tool: "t".into(),
                    start: 3.0,
                    end: 9.0,
                    outcome: Outcome::Result,
                    hints: Hints::default(),
                    host: Some("host-a".into()),
                    transport: crate::event::McpTransport::Stdio,
                },
            ),
            ev(
                20.0,
                EventKind::ResponseEnd {
                    stream: "sa".into(),
                    response: "r1".into(),
                    status: ResponseStatus::Completed,
                    usage: None,
                    stop_reason: None,
                },
            ),
            ev(
                30.0,
                EventKind::StreamClose {
                    stream: "sa".into(),
                },
            ),
        ];
        for e in &events {
            c.push(e, &mut out);
        }
        // Pending until `close_wait` after the response's end (1,020).
        let before = c.evaluated;
        let lost = |stream: &str| EventKind::ObservationLost {
            stream: stream.into(),
            reason: "overflow".into(),
        };
        c.push(&ev(100.0, lost("sb")), &mut out);
        c.push(
            &ev(
                200.0,
                EventKind::StreamClose {
                    stream: "sb".into(),
                },
            ),
            &mut out,
        );
        assert_eq!(c.evaluated, before, "another host's loss woke it");
        assert!(out.is_empty());
        c.push(&ev(300.0, lost("sc")), &mut out);
        c.push(
            &ev(
                400.0,
                EventKind::StreamClose {
                    stream: "sc".into(),
                },
            ),
            &mut out,
        );
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].reason, Some(Reason::Incomplete));
        assert_eq!(out[0].decided_at, 300.0);
    }

    #[test]
    fn hint_text_gives_back_each_hint_it_was_given() {
        let words = [None, Some(""), Some("toolu_1"), Some("ctc_2"), Some("é~x")];
        for a in words {
            for b in words {
                for c in words {
                    for d in words {
                        let h = Hints {
                            tool_use_id: a,
                            item_id: b,
                            call_id: c,
                            thread: d,
                        };
                        assert_eq!(HintText::new(&h).get(), h);
                    }
                }
            }
        }
    }
}
