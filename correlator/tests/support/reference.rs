//! A reference implementation of design.md §3–§4, written to be obviously right rather than
//! fast: it sees the whole trace at once, works out every window's fate from the events, and
//! then, for each interval, tries every moment at which the answer could change, in order,
//! and takes the first one at which the rule says "decide".
//!
//! It shares nothing with the incremental correlator but the event and record types, so that
//! a disagreement between the two points at a misreading of the text on one side.
//!
//! The points the text leaves open are read as the lead's brief states them (numbered 1–11
//! there); the comments below cite those numbers as "brief n".

use std::collections::{BTreeSet, HashMap};

use correlator::event::{Event, EventKind, Hints, Millis, ResponseStatus};
use correlator::records::{Evidence, Reason, Record, WindowRef};
use correlator::{route, Config, WindowOpen};

struct StreamInfo {
    open_t: Millis,
    close_t: Option<Millis>,
    thread: Option<String>,
    /// Times of `observation_lost` on this stream.
    lost: Vec<Millis>,
}

struct Call {
    idx: usize,
    t: Millis,
    call: String,
    item: Option<String>,
    name: String,
    namespace: Option<String>,
}

struct Response {
    stream: String,
    calls: Vec<Call>,
    /// (index, t, status) of its `response_end`.
    end: Option<(usize, Millis, ResponseStatus)>,
}

struct Request {
    idx: usize,
    t: Millis,
    stream: String,
    id: String,
    previous_response: Option<String>,
    outputs: Vec<String>,
}

/// One MCP call as the correlator learns of it: `mcp_start` (optional) and `mcp_interval`.
#[derive(Default)]
struct Mcp {
    start: Millis,
    /// `t` of its `mcp_start`, if any.
    started_at: Option<Millis>,
    /// `t` and `end` of its `mcp_interval`, if any.
    reported: Option<(Millis, Millis)>,
}

struct Interval {
    report_t: Millis,
    id: String,
    alias: String,
    tool: String,
    s: Millis,
    e: Millis,
    hints: Hints,
}

/// A window W(R) and its fate over the whole trace (brief 3).
struct Window {
    response: String,
    stream: String,
    thread: Option<String>,
    open: Millis,
    /// The continuing request that closed it: (t, request id).
    close: Option<(Millis, String)>,
    /// When it broke. A window neither closed nor broken by an event breaks at
    /// `open + max_window`, which may lie after the end of the trace (then it never does).
    broke: Option<Millis>,
}

impl Window {
    fn closed_by(&self, t: Millis) -> bool {
        self.close.as_ref().is_some_and(|(c, _)| *c <= t)
    }
    fn broken_by(&self, t: Millis) -> bool {
        self.broke.is_some_and(|b| b <= t)
    }
    fn open_at(&self, t: Millis) -> bool {
        !self.closed_by(t) && !self.broken_by(t)
    }
}

struct World<'a> {
    config: &'a Config,
    streams: HashMap<String, StreamInfo>,
    responses: HashMap<String, Response>,
    requests: Vec<Request>,
    /// Event index of a request -> its place in `requests`.
    request_at: HashMap<usize, usize>,
    mcp: HashMap<String, Mcp>,
    intervals: Vec<Interval>,
    windows: Vec<Window>,
    /// Every distinct event time, ascending.
    event_times: Vec<Millis>,
    last_t: Millis,
}

/// The records design.md §4 prescribes for `events` under `config`, in decision order.
///
/// Assumes ids are unique over the trace (streams, responses, requests, intervals), which the
/// generator guarantees.
pub fn reference(events: &[Event], config: &Config) -> Vec<Record> {
    let Some(last) = events.last() else {
        return Vec::new();
    };
    let mut w = World {
        config,
        streams: HashMap::new(),
        responses: HashMap::new(),
        requests: Vec::new(),
        request_at: HashMap::new(),
        mcp: HashMap::new(),
        intervals: Vec::new(),
        windows: Vec::new(),
        event_times: Vec::new(),
        last_t: last.t,
    };
    w.index(events);
    w.find_windows(events);
    let mut decided: Vec<(Millis, bool, usize, Record)> = (0..w.intervals.len())
        .map(|k| {
            let (r, forced) = w.decide(k);
            (r.decided_at, forced, k, r)
        })
        .collect();
    // Brief 9: decision order; ties in the order the intervals were reported. Brief 10: at
    // the end of the trace, what is due at the last event's time is decided first, then
    // the rest, so a forced decision follows every normal one at that time.
    decided.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    decided.into_iter().map(|(_, _, _, r)| r).collect()
}

impl World<'_> {
    fn index(&mut self, events: &[Event]) {
        for (idx, ev) in events.iter().enumerate() {
            if self.event_times.last() != Some(&ev.t) {
                self.event_times.push(ev.t);
            }
            let t = ev.t;
            match &ev.kind {
                EventKind::StreamOpen { stream, thread, .. } => {
                    self.streams.insert(
                        stream.clone(),
                        StreamInfo {
                            open_t: t,
                            close_t: None,
                            thread: thread.clone(),
                            lost: Vec::new(),
                        },
                    );
                }
                EventKind::StreamClose { stream } => {
                    if let Some(s) = self.streams.get_mut(stream) {
                        s.close_t = Some(t);
                    }
                }
                EventKind::ObservationLost { stream, .. } => {
                    if let Some(s) = self.streams.get_mut(stream) {
                        s.lost.push(t);
                    }
                }
                EventKind::Request {
                    stream,
                    request,
                    previous_response,
                    outputs,
                } => {
                    self.request_at.insert(idx, self.requests.len());
                    self.requests.push(Request {
                        idx,
                        t,
                        stream: stream.clone(),
                        id: request.clone(),
                        previous_response: previous_response.clone(),
                        outputs: outputs.clone(),
                    });
                }
                EventKind::ResponseStart {
                    stream, response, ..
                } => {
                    self.responses.insert(
                        response.clone(),
                        Response {
                            stream: stream.clone(),
                            calls: Vec::new(),
                            end: None,
                        },
                    );
                }
                EventKind::ToolCall {
                    response,
                    call,
                    item,
                    name,
                    namespace,
                    ..
                } => {
                    if let Some(r) = self.responses.get_mut(response) {
                        r.calls.push(Call {
                            idx,
                            t,
                            call: call.clone(),
                            item: item.clone(),
                            name: name.clone(),
                            namespace: namespace.clone(),
                        });
                    }
                }
                EventKind::ResponseEnd {
                    response, status, ..
                } => {
                    if let Some(r) = self.responses.get_mut(response) {
                        r.end = Some((idx, t, *status));
                    }
                }
                EventKind::McpStart {
                    interval, start, ..
                } => {
                    let m = self.mcp.entry(interval.clone()).or_default();
                    m.start = *start;
                    m.started_at = Some(t);
                }
                EventKind::McpInterval {
                    interval,
                    alias,
                    tool,
                    start,
                    end,
                    hints,
                    ..
                } => {
                    let m = self.mcp.entry(interval.clone()).or_default();
                    m.start = *start;
                    m.reported = Some((t, *end));
                    self.intervals.push(Interval {
                        report_t: t,
                        id: interval.clone(),
                        alias: alias.clone(),
                        tool: tool.clone(),
                        s: *start,
                        e: *end,
                        hints: hints.clone(),
                    });
                }
            }
        }
    }

    fn stream_thread(&self, stream: &str) -> Option<&String> {
        self.streams.get(stream).and_then(|s| s.thread.as_ref())
    }

    /// Brief 2: does request `q` continue response `r`?
    fn continues(&self, q: &Request, r_id: &str, r: &Response) -> bool {
        let by_id = q.previous_response.as_deref() == Some(r_id)
            || q.outputs
                .iter()
                .any(|o| r.calls.iter().any(|c| c.idx < q.idx && &c.call == o));
        let threads_agree = match (self.stream_thread(&q.stream), self.stream_thread(&r.stream)) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        by_id && threads_agree
    }

    /// Brief 3: every response with a client tool call has a window; walk the events after
    /// its open to find how it ends.
    fn find_windows(&mut self, events: &[Event]) {
        let mut windows = Vec::new();
        for (r_id, r) in &self.responses {
            let Some(first) = r.calls.first() else {
                continue;
            };
            let open = first.t;
            let deadline = open + self.config.max_window;
            let mut close = None;
            let mut broke = None;
            for (idx, ev) in events.iter().enumerate().skip(first.idx + 1) {
                if ev.t > deadline {
                    broke = Some(deadline);
                    break;
                }
                match &ev.kind {
                    EventKind::Request { .. } => {
                        let q = &self.requests[self.request_at[&idx]];
                        if self.continues(q, r_id, r) {
                            close = Some((ev.t, q.id.clone()));
                            break;
                        }
                    }
                    EventKind::ResponseEnd {
                        response, status, ..
                    } if response == r_id && *status != ResponseStatus::Completed => {
                        broke = Some(ev.t);
                        break;
                    }
                    EventKind::StreamClose { stream } if *stream == r.stream => {
                        let ended = r.end.is_some_and(|(end_idx, _, _)| end_idx < idx);
                        if !ended {
                            broke = Some(ev.t);
                            break;
                        }
                    }
                    _ => {}
                }
            }
            if close.is_none() && broke.is_none() {
                // Still open at the last event: it breaks at the deadline, events at that
                // same t first (which is the same as saying at the deadline, if the trace
                // gets that far).
                broke = Some(deadline);
            }
            windows.push(Window {
                response: r_id.clone(),
                stream: r.stream.clone(),
                thread: self.stream_thread(&r.stream).cloned(),
                open,
                close,
                broke,
            });
        }
        // Deterministic order (by open, then response id) for readable debugging only.
        windows.sort_by(|a, b| a.open.total_cmp(&b.open).then(a.response.cmp(&b.response)));
        self.windows = windows;
    }

    /// When R ended with status completed, if it did.
    fn completed_at(&self, w: &Window) -> Option<Millis> {
        match self.responses[&w.response].end {
            Some((_, t, ResponseStatus::Completed)) => Some(t),
            _ => None,
        }
    }

    /// Brief 5: W is given up at `t` for interval `iv`.
    fn given_up(&self, w: &Window, iv: &Interval, t: Millis) -> bool {
        let cw = self.config.close_wait;
        let Some((_, ended, _)) = self.responses[&w.response].end.filter(|e| e.1 <= t) else {
            return false;
        };
        if t < iv.e.max(ended) + cw {
            return false;
        }
        for m in self.mcp.values() {
            if m.start < w.open {
                continue;
            }
            let started = m.started_at.is_some_and(|x| x <= t);
            match m.reported {
                Some((rt, end)) if rt <= t => {
                    if t < end + cw {
                        return false;
                    }
                }
                _ => {
                    if started {
                        return false;
                    }
                }
            }
        }
        true
    }

    /// Brief 6: `incomplete` holds at `t` for interval `iv`.
    fn incomplete(&self, iv: &Interval, t: Millis) -> bool {
        let lost = self.streams.values().any(|st| {
            let span_end = match st.close_t {
                Some(c) if c <= t => c,
                _ => Millis::INFINITY,
            };
            st.open_t <= iv.e && span_end >= iv.s && st.lost.iter().any(|&l| l <= t)
        });
        if lost {
            return true;
        }
        self.windows.iter().any(|w| {
            w.open <= iv.s
                && w.broken_by(t)
                && !self
                    .requests
                    .iter()
                    .any(|q| w.open < q.t && q.t <= iv.s && self.same_thread(w, &q.stream))
        })
    }

    /// Brief 1: is `stream` on W's thread? A null thread is the window's own stream only.
    fn same_thread(&self, w: &Window, stream: &str) -> bool {
        match &w.thread {
            Some(th) => self.stream_thread(stream) == Some(th),
            None => stream == w.stream,
        }
    }

    /// Response-mode containment condition: R completed at or before s (brief 4).
    fn response_mode_ok(&self, w: &Window, iv: &Interval) -> bool {
        match self.config.window_open {
            WindowOpen::Call => true,
            WindowOpen::Response => self.completed_at(w).is_some_and(|c| c <= iv.s),
        }
    }

    /// Every moment at or after the report, up to the last event, at which the rule's inputs
    /// can change for interval `iv` (brief 9: a decision due between events happens at
    /// exactly its time).
    fn moments(&self, iv: &Interval) -> Vec<Millis> {
        let cw = self.config.close_wait;
        let mut m: Vec<Millis> = vec![iv.report_t, iv.e + cw];
        m.extend(self.event_times.iter().copied());
        m.extend(self.windows.iter().filter_map(|w| w.broke));
        m.extend(
            self.responses
                .values()
                .filter_map(|r| r.end.map(|(_, t, _)| t + cw)),
        );
        m.extend(
            self.mcp
                .values()
                .filter_map(|x| x.reported.map(|(_, end)| end + cw)),
        );
        let set: BTreeSet<u64> = m
            .into_iter()
            .filter(|&t| t >= iv.report_t && t <= self.last_t)
            .map(f64::to_bits)
            .collect();
        let mut v: Vec<Millis> = set.into_iter().map(f64::from_bits).collect();
        v.sort_by(f64::total_cmp);
        v
    }

    /// The record for interval `k`, and whether the end of the trace forced it.
    fn decide(&self, k: usize) -> (Record, bool) {
        let iv = &self.intervals[k];
        for t in self.moments(iv) {
            if let Some(r) = self.decide_at(iv, t, false) {
                return (r, false);
            }
        }
        // Brief 10: the trace ended; still-open candidates count as given up.
        let r = self
            .decide_at(iv, self.last_t, true)
            .expect("a forced decision always decides");
        (r, true)
    }

    /// The record for `iv` if the rule decides at `t` (always, when `forced`).
    fn decide_at(&self, iv: &Interval, t: Millis, forced: bool) -> Option<Record> {
        let candidates: Vec<&Window> = self.windows.iter().filter(|w| w.open <= iv.s).collect();
        let incomplete = self.incomplete(iv, t);
        if !incomplete && !forced {
            let all_settled = candidates
                .iter()
                .all(|w| !w.open_at(t) || self.given_up(w, iv, t));
            if !all_settled {
                return None;
            }
        }
        // Brief 7: the windows that contain I, or could (still open at t).
        let c: Vec<&&Window> = candidates
            .iter()
            .filter(|w| {
                let contains_or_could = if w.closed_by(t) {
                    w.close.as_ref().is_some_and(|(c, _)| *c >= iv.e)
                } else {
                    !w.broken_by(t)
                };
                contains_or_could && self.response_mode_ok(w, iv)
            })
            .collect();
        let mut record = Record {
            interval: iv.id.clone(),
            alias: iv.alias.clone(),
            tool: iv.tool.clone(),
            start: iv.s,
            end: iv.e,
            reason: None,
            evidence: Vec::new(),
            candidates: c.len(),
            window: None,
            decided_at: t,
        };
        let reason = if incomplete {
            Some(Reason::Incomplete)
        } else if c.len() >= 2 {
            Some(Reason::Ambiguous)
        } else if c.is_empty() {
            Some(Reason::NoWindow)
        } else if !c[0].closed_by(t) {
            Some(Reason::Unclosed)
        } else {
            self.identity(iv, c[0], t)
        };
        if reason.is_some() {
            record.reason = reason;
            return Some(record);
        }
        let w = c[0];
        record.evidence = self.evidence(iv, w, t);
        let (close_t, request) = w.close.clone().expect("closed");
        record.window = Some(WindowRef {
            thread: w.thread.clone(),
            stream: w.stream.clone(),
            response: w.response.clone(),
            request: Some(request),
            open: w.open,
            close: Some(close_t),
        });
        Some(record)
    }

    /// R's calls known at `t`.
    fn calls_by<'a>(&'a self, w: &Window, t: Millis) -> impl Iterator<Item = &'a Call> {
        self.responses[&w.response]
            .calls
            .iter()
            .filter(move |c| c.t <= t)
    }

    /// Brief 7: a hint that contradicts the one containing window.
    fn identity(&self, iv: &Interval, w: &Window, t: Millis) -> Option<Reason> {
        let h = &iv.hints;
        if let Some(id) = &h.tool_use_id {
            if !self.calls_by(w, t).any(|c| &c.call == id) {
                return Some(Reason::IdentityConflict);
            }
        }
        if let Some(id) = &h.item_id {
            if !self.calls_by(w, t).any(|c| c.item.as_ref() == Some(id)) {
                return Some(Reason::IdentityConflict);
            }
        }
        if let (Some(hint), Some(th)) = (&h.thread, &w.thread) {
            if hint != th {
                return Some(Reason::IdentityConflict);
            }
        }
        None
    }

    /// Brief 8. How a model-visible name maps to an MCP alias and tool is `correlator::route`'s
    /// business (tested on its own); which calls are asked, and where `route` goes, is the
    /// rule's.
    fn evidence(&self, iv: &Interval, w: &Window, t: Millis) -> Vec<Evidence> {
        let h = &iv.hints;
        let mut ev = vec![Evidence::Containment];
        let names_call = |id: &Option<String>| {
            id.as_ref()
                .is_some_and(|id| self.calls_by(w, t).any(|c| &c.call == id))
        };
        if names_call(&h.tool_use_id) {
            ev.push(Evidence::ToolUseId);
        }
        if h.item_id
            .as_ref()
            .is_some_and(|id| self.calls_by(w, t).any(|c| c.item.as_ref() == Some(id)))
        {
            ev.push(Evidence::ItemId);
        }
        if names_call(&h.call_id) {
            ev.push(Evidence::CallId);
        }
        if let (Some(hint), Some(th)) = (&h.thread, &w.thread) {
            if hint == th {
                ev.push(Evidence::Thread);
            }
        }
        if self
            .calls_by(w, t)
            .any(|c| route::resolves(&c.name, c.namespace.as_deref(), &iv.alias, &iv.tool))
        {
            ev.push(Evidence::Route);
        }
        ev
    }
}
