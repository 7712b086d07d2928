//! What the timeline shows, computed before anything is drawn: lanes (one per thread), windows,
//! where each interval goes, and where observation was lost.
//!
//! Windows come from the records alone (only the windows intervals were attributed to) or, with
//! a trace, from a read-only pass over it that follows docs/design.md §3 the way the correlator
//! does: a window opens at its response's first complete client tool call, closes at the first
//! request of the same thread that continues the response, and breaks when the response ends
//! in any other status than completed, when its stream closes first, or `max_window` after it
//! opened. The pass keeps everything (it is for drawing, not for deciding), so it stays apart
//! from `correlator::windows`, whose tracker forgets what no decision needs.
//!
//! The same pass finds where each **turn** starts: at a request that continues no response
//! with a client tool call (docs/design.md §3: by `previous_response` or a tool output for one of
//! its calls, the threads equal when both are known), as docs/otlp.md defines an agent turn.
//! A user prompt starts one; the continuations of a tool loop do not.

use std::collections::HashMap;

use correlator::records::Reason;
use correlator::{Client, EventKind, ResponseStatus, StopReason, Usage};
use correlator::{Event, Millis, Record};

use live::mcp_tally::{McpTally, Unreported};

/// How a window ended, as far as the input shows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum WindowEnd {
    Closed(Millis),
    Broken(Millis, BreakCause),
    /// Still open when the input ends (or, from records alone, never seen to close).
    Open,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakCause {
    Status(ResponseStatus),
    StreamClosed,
    MaxWindow,
}

impl BreakCause {
    pub fn describe(self) -> String {
        match self {
            BreakCause::Status(s) => format!("its response ended `{s}`"),
            BreakCause::StreamClosed => "its stream closed before the response ended".into(),
            BreakCause::MaxWindow => "not closed within max_window".into(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Window {
    pub thread: Option<String>,
    pub stream: String,
    pub response: String,
    /// When the first client tool call was complete.
    pub open: Millis,
    pub end: WindowEnd,
    /// The request that closed it.
    pub request: Option<String>,
    /// Client tool calls seen (0 when the window is known only from a record).
    pub calls: usize,
    /// When the response completed, if it did (and the trace says so).
    pub completed_at: Option<Millis>,
    pub lane: usize,
    /// The response's model, token counts and stop reason, when the trace has them (v2).
    pub model: Option<String>,
    pub usage: Option<Usage>,
    pub stop: Option<StopReason>,
    /// The names of its client tool calls, in order, each once (from the trace).
    pub names: Vec<String>,
}

impl Window {
    /// The time the window stopped being open, if it did.
    pub fn final_at(&self) -> Option<Millis> {
        match self.end {
            WindowEnd::Closed(t) | WindowEnd::Broken(t, _) => Some(t),
            WindowEnd::Open => None,
        }
    }
}

/// Whose lane something goes on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LaneKey {
    Thread(String),
    /// A stream whose thread is unknown is a thread of its own.
    Stream(String),
    Unattributed,
}

impl LaneKey {
    fn of(thread: Option<&str>, stream: &str) -> LaneKey {
        match thread {
            Some(t) => LaneKey::Thread(t.to_string()),
            None => LaneKey::Stream(stream.to_string()),
        }
    }

    pub fn label(&self) -> String {
        match self {
            LaneKey::Thread(t) => format!("thread {t}"),
            LaneKey::Stream(s) => format!("stream {s} (no thread)"),
            LaneKey::Unattributed => "unattributed".into(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Lane {
    pub key: LaneKey,
    /// Which hosts and transports the lane's streams used (`claude · http`), from the trace.
    pub detail: Option<String>,
    /// The earliest time anything on the lane happens (lanes are ordered by it).
    pub first: Millis,
    /// The lane of the thread that started this one as a subagent, when the trace shows it
    /// (see [`SPAWN_TOOLS`]); lanes are ordered so that a subagent follows its parent.
    pub parent: Option<usize>,
    /// How many parents up to a top-level thread (0 for one).
    pub depth: usize,
    /// A subagent's: the spawn calls (`Agent c1`, `spawn_agent c2`) of the parent's window
    /// it was placed under. One: the call that started it. Several (parallel subagents): the
    /// trace does not say which one did; each is a candidate.
    pub spawned_by: Vec<String>,
}

/// Tool calls that start a subagent: Claude Code's `Agent` (formerly `Task`), Codex's
/// `spawn_agent`. A thread is drawn nested under the thread whose most recent window holding
/// such a call opened before the thread's first request, on the same host when both are known.
/// Thread ids are pseudonyms, so this is the only link between a subagent and its parent.
pub(crate) const SPAWN_TOOLS: [&str; 3] = ["Agent", "Task", "spawn_agent"];

/// How many windows open at an abstention's start are kept for its hover title; one more is
/// kept to know that there were more.
pub(crate) const NEAR_MAX: usize = 8;

/// Where one record is drawn.
#[derive(Debug, Clone)]
pub struct Mark {
    pub record: usize,
    pub lane: usize,
    /// Windows that opened by the interval's start and had not ended before it, most recent
    /// first, at most [`NEAR_MAX`] + 1 (from the trace; for an attributed record, its window).
    pub near: Vec<usize>,
}

/// Where a turn starts: a request that continues no response with a client tool call.
#[derive(Debug, Clone)]
pub struct TurnStart {
    pub lane: usize,
    pub t: Millis,
    pub request: String,
}

#[derive(Debug, Clone)]
pub struct Lost {
    pub lane: usize,
    pub t: Millis,
    pub stream: String,
    pub reason: String,
}

/// The decision category a mark is coloured by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Category {
    Attributed,
    Abstained(Reason),
}

impl Category {
    pub(crate) const ALL: [Category; 6] = [
        Category::Attributed,
        Category::Abstained(Reason::Incomplete),
        Category::Abstained(Reason::Ambiguous),
        Category::Abstained(Reason::Unclosed),
        Category::Abstained(Reason::IdentityConflict),
        Category::Abstained(Reason::NoWindow),
    ];

    pub(crate) fn of(r: &Record) -> Category {
        match r.reason {
            None => Category::Attributed,
            Some(reason) => Category::Abstained(reason),
        }
    }

    pub(crate) fn index(self) -> usize {
        Category::ALL.iter().position(|c| *c == self).unwrap_or(0)
    }

    pub(crate) fn word(self) -> &'static str {
        match self {
            Category::Attributed => "attributed",
            Category::Abstained(r) => r.as_str(),
        }
    }
}

pub struct Timeline {
    pub records: Vec<Record>,
    pub windows: Vec<Window>,
    pub lanes: Vec<Lane>,
    pub marks: Vec<Mark>,
    pub lost: Vec<Lost>,
    /// Turn starts on the lanes that have something else drawn (from the trace).
    pub turns: Vec<TurnStart>,
    /// Whether windows come from a trace (all windows) or from records (attributed ones only).
    pub from_trace: bool,
    /// Model tool calls to MCP tools that no wrapper reported, counted from the trace as the
    /// relay counts them at its stop (`live::mcp_tally`); `None` without a trace.
    pub unreported: Option<Unreported>,
    /// Those calls by lane (lane, count), in lane order, of the ones the tally names.
    pub unreported_lanes: Vec<(usize, usize)>,
    pub t0: Millis,
    pub t1: Millis,
}

#[derive(Default)]
struct Lanes {
    lanes: Vec<Lane>,
    index: HashMap<LaneKey, usize>,
}

impl Lanes {
    fn get(&mut self, key: LaneKey, t: Millis) -> usize {
        if let Some(&i) = self.index.get(&key) {
            let lane = &mut self.lanes[i];
            lane.first = lane.first.min(t);
            return i;
        }
        self.lanes.push(Lane {
            key: key.clone(),
            detail: None,
            first: t,
            parent: None,
            depth: 0,
            spawned_by: Vec::new(),
        });
        self.index.insert(key, self.lanes.len() - 1);
        self.lanes.len() - 1
    }
}

/// What one pass over a trace finds.
struct FromTrace {
    windows: Vec<Window>,
    lost: Vec<Lost>,
    /// Turn starts by lane key: only lanes that get something else are drawn.
    turns: Vec<(LaneKey, Millis, String)>,
    /// Subagent lane key -> its parent's lane key and the spawn calls of the parent's window.
    parents: HashMap<LaneKey, (LaneKey, Vec<String>)>,
}

/// Every window of a trace, every loss of observation and every turn start, per docs/design.md §3.
fn trace_windows(events: &[Event], max_window: Millis, lanes: &mut Lanes) -> FromTrace {
    struct Stream {
        thread: Option<String>,
        active: Vec<String>,
    }
    let mut streams: HashMap<&str, Stream> = HashMap::new();
    // Response -> its window, once it has one.
    let mut by_response: HashMap<&str, usize> = HashMap::new();
    // Call id -> window, for continuations by tool output.
    let mut by_call: HashMap<&str, Vec<usize>> = HashMap::new();
    let mut windows: Vec<Window> = Vec::new();
    // Response -> its spawn calls (`name call`), for naming what started a subagent.
    let mut spawn_calls: HashMap<&str, Vec<String>> = HashMap::new();
    let mut open: Vec<usize> = Vec::new();
    let mut lost = Vec::new();
    let mut turns = Vec::new();
    // Response -> its model, until it has a window to carry it.
    let mut models: HashMap<&str, &str> = HashMap::new();
    // Host and transport per lane, in order of first appearance.
    let mut details: HashMap<LaneKey, Vec<String>> = HashMap::new();
    // Per lane: its first request and its host, for finding subagents' parents.
    let mut first_request: Vec<(LaneKey, Millis)> = Vec::new();
    let mut hosts: HashMap<LaneKey, Option<String>> = HashMap::new();
    let mut clients: HashMap<LaneKey, Client> = HashMap::new();

    for ev in events {
        // A window not closed within max_window breaks at that moment, before anything at or
        // after it applies (the correlator expires deadlines the same way).
        open.retain(|&i| {
            let w = &mut windows[i];
            let deadline = w.open + max_window;
            if deadline <= ev.t {
                w.end = WindowEnd::Broken(deadline, BreakCause::MaxWindow);
                false
            } else {
                true
            }
        });
        match &ev.kind {
            EventKind::StreamOpen {
                stream,
                thread,
                client,
                transport,
                host,
            } => {
                hosts
                    .entry(LaneKey::of(thread.as_deref(), stream))
                    .or_insert_with(|| host.clone());
                clients
                    .entry(LaneKey::of(thread.as_deref(), stream))
                    .or_insert(*client);
                let d = details
                    .entry(LaneKey::of(thread.as_deref(), stream))
                    .or_default();
                let word = format!("{client} · {transport}");
                if !d.contains(&word) {
                    d.push(word);
                }
                streams.insert(
                    stream,
                    Stream {
                        thread: thread.clone(),
                        active: Vec::new(),
                    },
                );
            }
            EventKind::ResponseStart {
                stream,
                response,
                model,
                ..
            } => {
                if let Some(st) = streams.get_mut(stream.as_str()) {
                    st.active.push(response.clone());
                }
                if let Some(m) = model {
                    models.insert(response, m);
                }
            }
            EventKind::ToolCall {
                stream,
                response,
                call,
                name,
                ..
            } => {
                let idx = match by_response.get(response.as_str()) {
                    Some(&i) => {
                        windows[i].calls += 1;
                        if !windows[i].names.contains(name) {
                            windows[i].names.push(name.clone());
                        }
                        i
                    }
                    None => {
                        let thread = streams.get(stream.as_str()).and_then(|s| s.thread.clone());
                        let lane = lanes.get(LaneKey::of(thread.as_deref(), stream), ev.t);
                        windows.push(Window {
                            thread,
                            stream: stream.clone(),
                            response: response.clone(),
                            open: ev.t,
                            end: WindowEnd::Open,
                            request: None,
                            calls: 1,
                            completed_at: None,
                            lane,
                            model: models.get(response.as_str()).map(|m| m.to_string()),
                            usage: None,
                            stop: None,
                            names: vec![name.clone()],
                        });
                        let i = windows.len() - 1;
                        by_response.insert(response, i);
                        open.push(i);
                        i
                    }
                };
                by_call.entry(call).or_default().push(idx);
                if SPAWN_TOOLS.contains(&name.as_str()) {
                    spawn_calls
                        .entry(response)
                        .or_default()
                        .push(format!("{name} {call}"));
                }
            }
            EventKind::Request {
                stream,
                request,
                previous_response,
                outputs,
            } => {
                let thread = streams.get(stream.as_str()).and_then(|s| s.thread.clone());
                let key = LaneKey::of(thread.as_deref(), stream);
                if !first_request.iter().any(|(k, _)| *k == key) {
                    first_request.push((key, ev.t));
                }
                let mut continued: Vec<usize> = Vec::new();
                if let Some(&i) = previous_response
                    .as_deref()
                    .and_then(|p| by_response.get(p))
                {
                    continued.push(i);
                }
                for c in outputs {
                    continued.extend(by_call.get(c.as_str()).into_iter().flatten().copied());
                }
                let mut continues_a_window = false;
                for i in continued {
                    let w = &mut windows[i];
                    let same_thread = match (&thread, &w.thread) {
                        (Some(a), Some(b)) => a == b,
                        _ => true,
                    };
                    continues_a_window |= same_thread;
                    if w.end == WindowEnd::Open && same_thread {
                        w.end = WindowEnd::Closed(ev.t);
                        w.request = Some(request.clone());
                        open.retain(|&o| o != i);
                    }
                }
                if !continues_a_window {
                    turns.push((
                        LaneKey::of(thread.as_deref(), stream),
                        ev.t,
                        request.clone(),
                    ));
                }
            }
            EventKind::ResponseEnd {
                stream,
                response,
                status,
                usage,
                stop_reason,
            } => {
                if let Some(st) = streams.get_mut(stream.as_str()) {
                    st.active.retain(|r| r != response);
                }
                models.remove(response.as_str());
                if let Some(&i) = by_response.get(response.as_str()) {
                    let w = &mut windows[i];
                    w.usage = *usage;
                    w.stop = *stop_reason;
                    if *status == ResponseStatus::Completed {
                        w.completed_at = Some(ev.t);
                    } else if w.end == WindowEnd::Open {
                        w.end = WindowEnd::Broken(ev.t, BreakCause::Status(*status));
                        open.retain(|&o| o != i);
                    }
                }
            }
            EventKind::StreamClose { stream } => {
                if let Some(st) = streams.remove(stream.as_str()) {
                    for r in st.active {
                        if let Some(&i) = by_response.get(r.as_str()) {
                            let w = &mut windows[i];
                            if w.end == WindowEnd::Open {
                                w.end = WindowEnd::Broken(ev.t, BreakCause::StreamClosed);
                                open.retain(|&o| o != i);
                            }
                        }
                    }
                }
            }
            EventKind::ObservationLost { stream, reason } => {
                let thread = streams.get(stream.as_str()).and_then(|s| s.thread.clone());
                let lane = lanes.get(LaneKey::of(thread.as_deref(), stream), ev.t);
                lost.push(Lost {
                    lane,
                    t: ev.t,
                    stream: stream.clone(),
                    reason: reason.clone(),
                });
            }
            EventKind::McpStart { .. } | EventKind::McpInterval { .. } => {}
        }
    }
    for lane in &mut lanes.lanes {
        if let Some(d) = details.get(&lane.key) {
            lane.detail = Some(d.join(", "));
        }
    }
    // A subagent's parent: the lane of the latest window that called a spawn tool and opened
    // before the subagent's first request, on another lane of the same client that started
    // earlier, on the same host when both hosts are known.
    let mut parents = HashMap::new();
    for (key, t) in &first_request {
        let host = hosts.get(key).cloned().flatten();
        let parent = windows
            .iter()
            .filter(|w| w.open <= *t && w.names.iter().any(|n| SPAWN_TOOLS.contains(&n.as_str())))
            .filter_map(|w| {
                let k = LaneKey::of(w.thread.as_deref(), &w.stream);
                let started = first_request.iter().find(|(pk, _)| *pk == k)?.1;
                let same_host = match (&host, hosts.get(&k).cloned().flatten()) {
                    (Some(a), Some(b)) => *a == b,
                    _ => true,
                };
                // A host's subagents are of its own kind (Claude Code's, Codex's).
                let same_client = clients.get(&k) == clients.get(key);
                (k != *key && started < *t && same_host && same_client).then_some((
                    w.open,
                    k,
                    w.response.as_str(),
                ))
            })
            .max_by(|a, b| a.0.total_cmp(&b.0));
        if let Some((_, k, response)) = parent {
            let calls = spawn_calls.get(response).cloned().unwrap_or_default();
            parents.insert(key.clone(), (k, calls));
        }
    }
    FromTrace {
        windows,
        lost,
        turns,
        parents,
    }
}

impl Timeline {
    /// Lays out records, with the trace they came from when there is one.
    pub fn build(records: Vec<Record>, trace: Option<(&[Event], Millis)>) -> Timeline {
        let mut lanes = Lanes::default();
        let FromTrace {
            mut windows,
            lost,
            turns,
            parents,
        } = match trace {
            Some((events, max_window)) => trace_windows(events, max_window, &mut lanes),
            None => FromTrace {
                windows: Vec::new(),
                lost: Vec::new(),
                turns: Vec::new(),
                parents: HashMap::new(),
            },
        };
        let n_trace = windows.len();
        let mut by_response: HashMap<String, usize> = windows
            .iter()
            .enumerate()
            .map(|(i, w)| (w.response.clone(), i))
            .collect();

        let mut marks = Vec::with_capacity(records.len());
        let mut unattributed: Vec<usize> = Vec::new();
        for (ri, r) in records.iter().enumerate() {
            if let Some(wr) = &r.window {
                // The trace's window when it knows it; otherwise the record's own account.
                let wi = match by_response.get(&*wr.response) {
                    Some(&i) => i,
                    None => {
                        let lane =
                            lanes.get(LaneKey::of(wr.thread.as_deref(), &wr.stream), wr.open);
                        windows.push(Window {
                            thread: wr.thread.as_deref().map(str::to_string),
                            stream: wr.stream.to_string(),
                            response: wr.response.to_string(),
                            open: wr.open,
                            end: wr.close.map_or(WindowEnd::Open, WindowEnd::Closed),
                            request: wr.request.as_deref().map(str::to_string),
                            calls: 0,
                            completed_at: None,
                            lane,
                            model: None,
                            usage: None,
                            stop: None,
                            names: Vec::new(),
                        });
                        by_response.insert(wr.response.to_string(), windows.len() - 1);
                        windows.len() - 1
                    }
                };
                let lane = windows[wi].lane;
                lanes.get(lanes.lanes[lane].key.clone(), r.start);
                marks.push(Mark {
                    record: ri,
                    lane,
                    near: vec![wi],
                });
                continue;
            }
            // An abstention: beside the most recent window that could have held it, if the
            // trace shows one; else on the unattributed lane.
            // The trace's windows are in open order and none stays open past max_window, so
            // only those that opened in [start - max_window, start] can qualify.
            let mut near: Vec<usize> = Vec::new();
            if let Some((_, max_window)) = trace {
                let from = windows[..n_trace].partition_point(|w| w.open < r.start - max_window);
                let to = windows[..n_trace].partition_point(|w| w.open <= r.start);
                // Most recent first, and only as many as a hover title lists.
                near = (from..to)
                    .rev()
                    .filter(|&i| windows[i].final_at().is_none_or(|f| f >= r.start))
                    .take(NEAR_MAX + 1)
                    .collect();
            }
            match near
                .iter()
                .copied()
                .max_by(|a, b| windows[*a].open.total_cmp(&windows[*b].open))
            {
                Some(wi) => {
                    let lane = windows[wi].lane;
                    marks.push(Mark {
                        record: ri,
                        lane,
                        near,
                    });
                }
                None => {
                    unattributed.push(marks.len());
                    marks.push(Mark {
                        record: ri,
                        lane: usize::MAX,
                        near,
                    });
                }
            }
        }
        if !unattributed.is_empty() {
            let lane = lanes.get(LaneKey::Unattributed, f64::INFINITY);
            for m in unattributed {
                marks[m].lane = lane;
            }
        }

        // Lanes in order of first activity, each subagent right under its parent (its own
        // subagents under it), the unattributed lane last.
        let parent_of: Vec<Option<usize>> = lanes
            .lanes
            .iter()
            .map(|l| {
                parents
                    .get(&l.key)
                    .and_then(|(k, _)| lanes.index.get(k).copied())
            })
            .collect();
        let mut by_first: Vec<usize> = (0..lanes.lanes.len()).collect();
        by_first.sort_by(|a, b| {
            let (la, lb) = (&lanes.lanes[*a], &lanes.lanes[*b]);
            (la.key == LaneKey::Unattributed)
                .cmp(&(lb.key == LaneKey::Unattributed))
                .then(la.first.total_cmp(&lb.first))
        });
        let mut order: Vec<usize> = Vec::with_capacity(by_first.len());
        let mut depth = vec![0; lanes.lanes.len()];
        fn visit(
            l: usize,
            d: usize,
            by_first: &[usize],
            parent_of: &[Option<usize>],
            order: &mut Vec<usize>,
            depth: &mut [usize],
        ) {
            if order.contains(&l) {
                return;
            }
            order.push(l);
            depth[l] = d;
            for &c in by_first {
                if parent_of[c] == Some(l) {
                    visit(c, d + 1, by_first, parent_of, order, depth);
                }
            }
        }
        for &l in &by_first {
            // Roots first; a lane whose parent is not drawn is a root.
            if parent_of[l].is_none() {
                visit(l, 0, &by_first, &parent_of, &mut order, &mut depth);
            }
        }
        for &l in &by_first {
            visit(l, 0, &by_first, &parent_of, &mut order, &mut depth);
        }
        let mut new_index = vec![0; order.len()];
        for (new, old) in order.iter().enumerate() {
            new_index[*old] = new;
        }
        let sorted: Vec<Lane> = order
            .iter()
            .map(|i| Lane {
                parent: parent_of[*i].map(|p| new_index[p]),
                depth: depth[*i],
                spawned_by: match parent_of[*i] {
                    Some(_) => parents
                        .get(&lanes.lanes[*i].key)
                        .map(|(_, calls)| calls.clone())
                        .unwrap_or_default(),
                    None => Vec::new(),
                },
                ..lanes.lanes[*i].clone()
            })
            .collect();
        for w in &mut windows {
            w.lane = new_index[w.lane];
        }
        for m in &mut marks {
            m.lane = new_index[m.lane];
        }
        let mut lost = lost;
        for l in &mut lost {
            l.lane = new_index[l.lane];
        }
        let turns: Vec<TurnStart> = turns
            .into_iter()
            .filter_map(|(key, t, request)| {
                let lane = new_index[*lanes.index.get(&key)?];
                Some(TurnStart { lane, t, request })
            })
            .collect();

        let times = records
            .iter()
            .flat_map(|r| [r.start, r.end])
            .chain(
                windows
                    .iter()
                    .flat_map(|w| [Some(w.open), w.final_at()].into_iter().flatten()),
            )
            .chain(lost.iter().map(|l| l.t))
            .chain(turns.iter().map(|s| s.t));
        // The same tally the relay keeps live, over the same (pseudonymized) events; each
        // waiting call's stream has a window (its tool call opened or joined one), hence a lane.
        let unreported = trace.map(|(events, _)| {
            let mut tally = McpTally::default();
            for e in events {
                tally.event(&e.kind);
            }
            tally.unreported()
        });
        let mut unreported_lanes: Vec<(usize, usize)> = Vec::new();
        if let Some(u) = &unreported {
            let lane_of: HashMap<&str, usize> = windows[..n_trace]
                .iter()
                .map(|w| (w.stream.as_str(), w.lane))
                .collect();
            for (stream, n) in &u.streams {
                if let Some(&lane) = lane_of.get(stream.as_str()) {
                    match unreported_lanes.iter_mut().find(|(l, _)| *l == lane) {
                        Some((_, k)) => *k += n,
                        None => unreported_lanes.push((lane, *n)),
                    }
                }
            }
            unreported_lanes.sort();
        }

        let (mut t0, mut t1) = (f64::INFINITY, f64::NEG_INFINITY);
        for t in times {
            t0 = t0.min(t);
            t1 = t1.max(t);
        }
        if !t0.is_finite() {
            (t0, t1) = (0.0, 1.0);
        }
        if t1 <= t0 {
            t1 = t0 + 1.0;
        }
        Timeline {
            records,
            windows,
            lanes: sorted,
            marks,
            lost,
            turns,
            from_trace: trace.is_some(),
            unreported,
            unreported_lanes,
            t0,
            t1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use correlator::records::{Evidence, WindowRef};
    use correlator::trace::read_all;

    fn events(lines: &[&str]) -> Vec<Event> {
        let text = format!("{}\n{}\n", correlator::trace::HEADER_V1, lines.join("\n"));
        read_all(text.as_bytes(), "t.jsonl").unwrap()
    }

    fn record(interval: &str, start: Millis, end: Millis, reason: Option<Reason>) -> Record {
        Record {
            interval: interval.into(),
            alias: "a".into(),
            tool: "t".into(),
            start,
            end,
            reason,
            evidence: vec![],
            candidates: 2,
            window: None,
            decided_at: end,
        }
    }

    /// Two threads with a window open each; an interval in both is ambiguous and is drawn
    /// beside the more recent window, its title naming both.
    #[test]
    fn an_abstention_sits_beside_the_latest_window_open_at_its_start() {
        let ev = events(&[
            r#"{"type":"stream_open","t":0,"stream":"a","client":"claude","transport":"http","thread":"A"}"#,
            r#"{"type":"stream_open","t":0,"stream":"b","client":"codex","transport":"websocket","thread":"B"}"#,
            r#"{"type":"response_start","t":1,"stream":"a","response":"ra","request":null}"#,
            r#"{"type":"response_start","t":1,"stream":"b","response":"rb","request":null}"#,
            r#"{"type":"tool_call","t":10,"stream":"a","response":"ra","call":"ca","item":null,"name":"n","namespace":null,"kind":"tool_use"}"#,
            r#"{"type":"tool_call","t":20,"stream":"b","response":"rb","call":"cb","item":"ib","name":"n","namespace":null,"kind":"function"}"#,
            r#"{"type":"response_end","t":25,"stream":"a","response":"ra","status":"completed"}"#,
            r#"{"type":"response_end","t":26,"stream":"b","response":"rb","status":"incomplete"}"#,
            r#"{"type":"request","t":90,"stream":"b","request":"qb","previous_response":"rb","outputs":[]}"#,
            r#"{"type":"request","t":100,"stream":"a","request":"qa","previous_response":null,"outputs":["ca"]}"#,
        ]);
        let tl = Timeline::build(
            vec![
                record("i1", 22.0, 24.0, Some(Reason::Ambiguous)),
                record("i2", 5.0, 6.0, Some(Reason::NoWindow)),
            ],
            Some((&ev, 1_000_000.0)),
        );
        assert_eq!(tl.windows.len(), 2);
        let ra = &tl.windows[0];
        assert_eq!(ra.end, WindowEnd::Closed(100.0));
        assert_eq!(ra.request.as_deref(), Some("qa"));
        let rb = &tl.windows[1];
        assert_eq!(
            rb.end,
            WindowEnd::Broken(26.0, BreakCause::Status(ResponseStatus::Incomplete))
        );
        assert_eq!(tl.lanes[rb.lane].key, LaneKey::Thread("B".into()));
        assert_eq!(
            tl.lanes[rb.lane].detail.as_deref(),
            Some("codex · websocket")
        );

        assert_eq!(tl.marks[0].lane, rb.lane);
        assert_eq!(tl.marks[0].near, vec![1, 0]);
        // Nothing was open at 5: the unattributed lane, last.
        assert_eq!(tl.lanes[tl.marks[1].lane].key, LaneKey::Unattributed);
        assert_eq!(tl.marks[1].lane, tl.lanes.len() - 1);
    }

    /// A thread that starts while another thread's window holds an `Agent` call is drawn
    /// under it; a thread of another host or of another client is not.
    #[test]
    fn a_subagent_lane_follows_its_parent_and_knows_it() {
        // Version 2: streams name their host.
        let v2 = |lines: &[&str]| {
            let text = format!(
                "{{\"type\":\"trace\",\"version\":2}}\n{}\n",
                lines.join("\n")
            );
            read_all(text.as_bytes(), "t.jsonl").unwrap()
        };
        let ev = v2(&[
            r#"{"type":"stream_open","t":0,"stream":"p","client":"claude","transport":"http","thread":"P","host":"h1"}"#,
            r#"{"type":"request","t":1,"stream":"p","request":"qp","previous_response":null,"outputs":[]}"#,
            r#"{"type":"response_start","t":2,"stream":"p","response":"rp","request":"qp"}"#,
            r#"{"type":"tool_call","t":10,"stream":"p","response":"rp","call":"a","item":null,"name":"Agent","namespace":null,"kind":"tool_use"}"#,
            r#"{"type":"response_end","t":11,"stream":"p","response":"rp","status":"completed"}"#,
            r#"{"type":"stream_open","t":15,"stream":"o","client":"claude","transport":"http","thread":"O","host":"h2"}"#,
            r#"{"type":"request","t":16,"stream":"o","request":"qo","previous_response":null,"outputs":[]}"#,
            r#"{"type":"response_start","t":17,"stream":"o","response":"ro","request":"qo"}"#,
            r#"{"type":"tool_call","t":18,"stream":"o","response":"ro","call":"o1","item":null,"name":"x","namespace":null,"kind":"tool_use"}"#,
            r#"{"type":"stream_open","t":20,"stream":"c","client":"claude","transport":"http","thread":"C","host":"h1"}"#,
            r#"{"type":"request","t":21,"stream":"c","request":"qc","previous_response":null,"outputs":[]}"#,
            r#"{"type":"response_start","t":22,"stream":"c","response":"rc","request":"qc"}"#,
            r#"{"type":"tool_call","t":30,"stream":"c","response":"rc","call":"c1","item":null,"name":"x","namespace":null,"kind":"tool_use"}"#,
            // A Codex thread of an unknown host: Claude Code's Agent call did not start it.
            r#"{"type":"stream_open","t":32,"stream":"x","client":"codex","transport":"websocket","thread":"X","host":null}"#,
            r#"{"type":"request","t":33,"stream":"x","request":"qx","previous_response":null,"outputs":[]}"#,
            r#"{"type":"response_start","t":34,"stream":"x","response":"rx","request":"qx"}"#,
            r#"{"type":"tool_call","t":35,"stream":"x","response":"rx","call":"x1","item":"ix","name":"x","namespace":null,"kind":"function"}"#,
            r#"{"type":"request","t":40,"stream":"p","request":"qp2","previous_response":null,"outputs":["a"]}"#,
        ]);
        let tl = Timeline::build(vec![], Some((&ev, 1_000_000.0)));
        let keys: Vec<&LaneKey> = tl.lanes.iter().map(|l| &l.key).collect();
        assert_eq!(
            keys,
            [
                &LaneKey::Thread("P".into()),
                &LaneKey::Thread("C".into()),
                &LaneKey::Thread("O".into()),
                &LaneKey::Thread("X".into())
            ]
        );
        assert_eq!(tl.lanes[3].parent, None);
        assert_eq!((tl.lanes[1].parent, tl.lanes[1].depth), (Some(0), 1));
        assert_eq!((tl.lanes[0].parent, tl.lanes[2].parent), (None, None));
        assert_eq!(tl.windows[0].names, ["Agent"]);
        // The one Agent call of the parent's window started it; a root names none.
        assert_eq!(tl.lanes[1].spawned_by, ["Agent a"]);
        assert!(tl.lanes[0].spawned_by.is_empty() && tl.lanes[2].spawned_by.is_empty());
    }

    /// Parallel subagents (one response, two spawn calls): each subagent's call is drawn on
    /// its own subagent's lane, and both lanes name both calls as candidates.
    #[test]
    fn parallel_subagents_calls_sit_on_their_own_lanes() {
        for (file, parent, calls) in [
            (
                "claude_parallel_agents_same_tool.jsonl",
                "sess1",
                ["Agent toolu_a1", "Agent toolu_a2"],
            ),
            (
                "codex_parallel_subagents.jsonl",
                "thP",
                ["spawn_agent call_s1", "spawn_agent call_s2"],
            ),
        ] {
            let path = format!("{}/../../traces/{file}", env!("CARGO_MANIFEST_DIR"));
            let ev = read_all(std::fs::read(&path).unwrap().as_slice(), file).unwrap();
            let mut c = correlator::Correlator::new(correlator::Config::default());
            let mut records = Vec::new();
            for e in &ev {
                c.push(e, &mut records);
            }
            c.finish(&mut records);
            let tl = Timeline::build(records, Some((&ev, 1_800_000.0)));
            let mut subagent_marks = 0;
            for m in &tl.marks {
                let r = &tl.records[m.record];
                let Some(w) = &r.window else { continue };
                let lane = &tl.lanes[m.lane];
                assert_eq!(
                    lane.key,
                    LaneKey::Thread(w.thread.as_deref().unwrap().to_string()),
                    "{file}"
                );
                if let Some(p) = lane.parent {
                    subagent_marks += 1;
                    assert_eq!(tl.lanes[p].key, LaneKey::Thread(parent.into()));
                    assert_eq!(lane.spawned_by, calls, "{file}");
                }
            }
            assert_eq!(
                subagent_marks, 2,
                "{file}: both subagents' calls attributed"
            );
        }
    }

    #[test]
    fn max_window_breaks_a_window_at_its_deadline_and_records_alone_give_their_windows() {
        let ev = events(&[
            r#"{"type":"stream_open","t":0,"stream":"a","client":"claude","transport":"http","thread":null}"#,
            r#"{"type":"response_start","t":1,"stream":"a","response":"ra","request":null}"#,
            r#"{"type":"tool_call","t":10,"stream":"a","response":"ra","call":"ca","item":null,"name":"n","namespace":null,"kind":"tool_use"}"#,
            r#"{"type":"response_end","t":11,"stream":"a","response":"ra","status":"completed"}"#,
            r#"{"type":"stream_close","t":12,"stream":"a"}"#,
            r#"{"type":"stream_open","t":500,"stream":"b","client":"claude","transport":"http","thread":null}"#,
            r#"{"type":"request","t":500,"stream":"b","request":"q","previous_response":null,"outputs":["ca"]}"#,
        ]);
        let tl = Timeline::build(vec![], Some((&ev, 100.0)));
        assert_eq!(
            tl.windows[0].end,
            WindowEnd::Broken(110.0, BreakCause::MaxWindow)
        );
        assert_eq!(tl.lanes[0].key, LaneKey::Stream("a".into()));

        let mut r = record("i1", 20.0, 30.0, None);
        r.candidates = 1;
        r.evidence = vec![Evidence::Containment];
        r.window = Some(WindowRef {
            thread: None,
            stream: "s".into(),
            response: "r".into(),
            request: Some("q".into()),
            open: 10.0,
            close: Some(40.0),
        });
        let tl = Timeline::build(vec![r], None);
        assert_eq!(tl.windows.len(), 1);
        assert_eq!(tl.windows[0].end, WindowEnd::Closed(40.0));
        assert_eq!(tl.marks[0].near, vec![0]);
        assert_eq!(tl.lanes.len(), 1);
        assert_eq!((tl.t0, tl.t1), (10.0, 40.0));
    }
}
