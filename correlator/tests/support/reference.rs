//! A reference implementation of docs/design.md §3–§4, written to be obviously right rather than
//! fast: it sees the whole trace at once, works out every window's fate from the events, and
//! then, for each interval, tries every moment at which the answer could change, in order,
//! and takes the first one at which the rule says "decide".
//!
//! It shares nothing with the incremental correlator but the event and record types, so that
//! a disagreement between the two points at a misreading of the text on one side.
//!
//! The points the text leaves open are read as the lead's brief states them (numbered 1–11
//! there); the comments below cite those numbers as "brief n".
//!
//! Hosts, identity and eligibility (docs/design.md §3 "Host", §4 "names", "eligible") are read
//! as written: a hint names a call among those complete by the interval's start (a
//! `tool_use_id` or `item_id` always, a `call_id` only when it equals an observed call's id);
//! a window is eligible for an interval when the hosts do not differ (a null host never rules
//! anything out), its response has a call complete by the interval's start that routes to the
//! interval's alias and tool or is `custom`, its response issued every named call, and its
//! thread, when known, equals a `thread` hint. A candidate is an eligible window that opened
//! by the start and no longer than `max_window` before the end; only candidates contain the
//! interval or break it into `incomplete`. A loss counts only on a stream whose host and thread
//! are not known to differ from the interval's host and `thread` hint, and none counts when a
//! hint names a call observed in an eligible window. `identity_conflict` is read as "no
//! eligible window contains it, and a window that only the identity ruled out was open
//! throughout it, or still is" (see [`World::pointed_at`]). An MCP call counts for a window's
//! give-up only if its host does not differ from the window's. A candidate is given up at the
//! first moment T (at or after `close_wait` past the interval's end) at which the conditions
//! hold, before the report or not, and stays so. Under `--candidates all` every window is
//! eligible, every loss and host counts, and a hint only contradicts the one containing window.
//! Routing is written out here again from the text (Claude's normalization, Codex's sanitizing
//! and SHA-1 suffixes) for the short names the generator uses; the 128-byte cap never applies
//! to them.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};

use correlator::records::{Evidence, Reason, Record, WindowRef};
use correlator::{CallKind, Client, Event, EventKind, Hints, Millis, ResponseStatus};
use correlator::{Candidates, Config, WindowOpen};
use sha1::{Digest, Sha1};

struct StreamInfo {
    client: Client,
    open_t: Millis,
    close_t: Option<Millis>,
    thread: Option<String>,
    host: Option<String>,
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
    kind: CallKind,
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
    /// `t` and host of its `mcp_start`, if any.
    started_at: Option<(Millis, Option<String>)>,
    /// `t`, `end` and host of its `mcp_interval`, if any.
    reported: Option<(Millis, Millis, Option<String>)>,
}

struct Interval {
    report_t: Millis,
    id: String,
    alias: String,
    tool: String,
    s: Millis,
    e: Millis,
    hints: Hints,
    host: Option<String>,
}

/// A window W(R) and its fate over the whole trace (brief 3).
struct Window {
    response: String,
    stream: String,
    thread: Option<String>,
    host: Option<String>,
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
    /// The first give-up moment per (window, interval), once worked out.
    give_up: RefCell<HashMap<(usize, usize), Option<Millis>>>,
}

/// Do two hosts differ? Only when both are known.
fn differ(a: &Option<String>, b: &Option<String>) -> bool {
    matches!((a, b), (Some(a), Some(b)) if a != b)
}

/// Claude Code's `normalizeNameForMCP`: `[A-Za-z0-9_-]` kept, each UTF-16 unit of anything
/// else becomes `_`.
fn claude_part(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            let keep = c.is_ascii_alphanumeric() || c == '_' || c == '-';
            let n = if keep { 1 } else { c.len_utf16() };
            std::iter::repeat_n(if keep { c } else { '_' }, n)
        })
        .collect()
}

/// Codex's sanitizer: `[A-Za-z0-9_]` kept, any other char `_`, empty → `_`.
fn codex_part(s: &str) -> String {
    let out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() {
        "_".into()
    } else {
        out
    }
}

fn sha12(s: &str) -> String {
    let d = Sha1::digest(s.as_bytes());
    d.iter().map(|b| format!("{b:02x}")).collect::<String>()[..12].to_string()
}

/// Does the visible call name (in its namespace), seen on a stream of `client`, route to
/// `alias`/`tool`? (docs/design.md §4 `route`, for names short enough that no cut applies.)
fn routes(client: Client, name: &str, namespace: Option<&str>, alias: &str, tool: &str) -> bool {
    // "any other client [...] also the tool's own name, exactly".
    if client == Client::Other && namespace.is_none() && name == tool {
        return true;
    }
    let san = codex_part(alias);
    let ns = if san.starts_with("mcp__") {
        san
    } else {
        format!("mcp__{san}")
    };
    let ns_id = format!("{alias}\0{alias}\0");
    let ns_hashed = match ns.strip_suffix("__") {
        Some(stem) => format!("{stem}_{}__", sha12(&ns_id)),
        None => format!("{ns}_{}", sha12(&ns_id)),
    };
    let f = codex_part(tool);
    let f_hashed = format!("{f}_{}", sha12(&format!("{ns_id}\0{tool}\0{tool}")));
    let pairs = [
        (&ns, &f),
        (&ns, &f_hashed),
        (&ns_hashed, &f),
        (&ns_hashed, &f_hashed),
    ];
    match namespace {
        Some(given) => pairs.iter().any(|(n, g)| *n == given && *g == name),
        None => {
            name == format!("mcp__{}__{}", claude_part(alias), claude_part(tool))
                || pairs.iter().any(|(n, g)| name == format!("{n}__{g}"))
        }
    }
}

/// The records docs/design.md §4 prescribes for `events` under `config`, in decision order.
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
        give_up: RefCell::new(HashMap::new()),
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
                EventKind::StreamOpen {
                    stream,
                    client,
                    thread,
                    host,
                    ..
                } => {
                    self.streams.insert(
                        stream.clone(),
                        StreamInfo {
                            client: *client,
                            open_t: t,
                            close_t: None,
                            thread: thread.clone(),
                            host: host.clone(),
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
                    kind,
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
                            kind: *kind,
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
                    interval,
                    start,
                    host,
                    ..
                } => {
                    let m = self.mcp.entry(interval.clone()).or_default();
                    m.start = *start;
                    m.started_at = Some((t, host.clone()));
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
                    let m = self.mcp.entry(interval.clone()).or_default();
                    m.start = *start;
                    m.reported = Some((t, *end, host.clone()));
                    self.intervals.push(Interval {
                        report_t: t,
                        id: interval.clone(),
                        alias: alias.clone(),
                        tool: tool.clone(),
                        s: *start,
                        e: *end,
                        hints: hints.clone(),
                        host: host.clone(),
                    });
                }
            }
        }
    }

    /// The client of the stream that carried window `w`'s response.
    fn client_of(&self, w: &Window) -> Client {
        self.streams[&w.stream].client
    }

    fn stream_thread(&self, stream: &str) -> Option<&String> {
        self.streams.get(stream).and_then(|s| s.thread.as_ref())
    }

    fn all(&self) -> bool {
        self.config.candidates == Candidates::All
    }

    /// §4 "eligible": same host (or one unknown), a call complete by the interval's start
    /// that routes to its alias and tool or is `custom`, and the same identity. Every window,
    /// with `--candidates all`.
    fn eligible(&self, w: &Window, iv: &Interval) -> bool {
        self.all() || (self.eligible_by_host_and_route(w, iv) && self.same_identity(w, iv))
    }

    /// The first two conditions of §4 "eligible" alone.
    fn eligible_by_host_and_route(&self, w: &Window, iv: &Interval) -> bool {
        if differ(&w.host, &iv.host) {
            return false;
        }
        self.responses[&w.response].calls.iter().any(|c| {
            c.t <= iv.s
                && (c.kind == CallKind::Custom
                    || routes(
                        self.client_of(w),
                        &c.name,
                        c.namespace.as_deref(),
                        &iv.alias,
                        &iv.tool,
                    ))
        })
    }

    /// §4 "names": the responses that issued a call complete at or before the interval's start
    /// (on any stream) whose call id (`item`: item id) equals `id`.
    fn issuers(&self, id: &str, item: bool, s: Millis) -> Vec<&str> {
        let mut out: Vec<&str> = self
            .responses
            .iter()
            .filter(|(_, r)| {
                r.calls.iter().any(|c| {
                    let cid = if item {
                        c.item.as_deref()
                    } else {
                        Some(c.call.as_str())
                    };
                    c.t <= s && cid == Some(id)
                })
            })
            .map(|(r_id, _)| r_id.as_str())
            .collect();
        out.sort_unstable();
        out
    }

    /// The calls the interval's hints name, each as the responses that issued it (an empty
    /// list: a call the relay did not see). A `tool_use_id` or `item_id` always names a call;
    /// a `call_id` only when it equals an observed call's id.
    fn named_calls(&self, iv: &Interval) -> Vec<Vec<&str>> {
        let h = &iv.hints;
        let mut named = Vec::new();
        if let Some(id) = &h.tool_use_id {
            named.push(self.issuers(id, false, iv.s));
        }
        if let Some(id) = &h.item_id {
            named.push(self.issuers(id, true, iv.s));
        }
        if let Some(id) = &h.call_id {
            let issuers = self.issuers(id, false, iv.s);
            if !issuers.is_empty() {
                named.push(issuers);
            }
        }
        named
    }

    /// §4 "same identity": W's response issued every call a hint names, and a `thread` hint
    /// equals W's thread when that is known.
    fn same_identity(&self, w: &Window, iv: &Interval) -> bool {
        let issued_all = self
            .named_calls(iv)
            .iter()
            .all(|issuers| issuers.contains(&w.response.as_str()));
        let thread_ok = match (&iv.hints.thread, &w.thread) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        issued_all && thread_ok
    }

    /// §4 rule 1's exception: a hint names a call that was observed in an eligible window.
    fn names_a_call_in_an_eligible_window(&self, iv: &Interval) -> bool {
        self.named_calls(iv).iter().any(|issuers| {
            issuers.iter().any(|r| {
                self.windows
                    .iter()
                    .any(|w| w.response == *r && self.eligible(w, iv))
            })
        })
    }

    /// §4 "candidate": eligible, its first call complete by s, opened no longer than
    /// `max_window` before e (both modes).
    fn candidate(&self, w: &Window, iv: &Interval) -> bool {
        w.open <= iv.s && w.open >= iv.e - self.config.max_window && self.eligible(w, iv)
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
                host: self.streams.get(&r.stream).and_then(|s| s.host.clone()),
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

    /// Brief 5's conditions at the moment `t`, for interval `iv` and window `w`: the response
    /// has ended, `close_wait` has passed since the interval's and the response's end, no call
    /// that started inside `w` (of a host not differing from `w`'s) runs, and `close_wait` has
    /// passed since the end of every such call reported by `t`.
    fn could_give_up(&self, w: &Window, iv: &Interval, t: Millis) -> bool {
        let cw = self.config.close_wait;
        let Some((_, ended, _)) = self.responses[&w.response].end.filter(|e| e.1 <= t) else {
            return false;
        };
        if t < iv.e.max(ended) + cw {
            return false;
        }
        let counts = |h: &Option<String>| self.all() || !differ(h, &w.host);
        for m in self.mcp.values() {
            if m.start < w.open {
                continue;
            }
            match &m.reported {
                Some((rt, end, h)) if *rt <= t => {
                    if counts(h) && t < end + cw {
                        return false;
                    }
                }
                _ => {
                    if let Some((st, h)) = &m.started_at {
                        if *st <= t && counts(h) {
                            return false;
                        }
                    }
                }
            }
        }
        true
    }

    /// §4: W is given up for `iv` from the first moment the conditions hold, whatever comes
    /// later (before the report or not). The conditions change only at event times and at
    /// `close_wait` past an end, so those are the moments to try.
    fn first_give_up(&self, wi: usize, k: usize) -> Option<Millis> {
        if let Some(t) = self.give_up.borrow().get(&(wi, k)) {
            return *t;
        }
        let (w, iv) = (&self.windows[wi], &self.intervals[k]);
        let cw = self.config.close_wait;
        let mut m = self.change_moments(iv);
        m.retain(|&t| t >= iv.e + cw && t <= self.last_t);
        m.sort_by(f64::total_cmp);
        let first = m.into_iter().find(|&t| self.could_give_up(w, iv, t));
        self.give_up.borrow_mut().insert((wi, k), first);
        first
    }

    fn given_up(&self, wi: usize, k: usize, t: Millis) -> bool {
        self.first_give_up(wi, k).is_some_and(|g| g <= t)
    }

    /// §4 rule 1: `incomplete` holds at `t` for interval `iv`: a loss on a stream open during
    /// it, of a host not known to differ and a thread not known to differ from its `thread`
    /// hint, unless a hint names a call observed in an eligible window (every loss counts with
    /// `--candidates all`); or a candidate broke, its thread silent from its open to s.
    fn incomplete(&self, iv: &Interval, t: Millis) -> bool {
        let hidden_possible = self.all() || !self.names_a_call_in_an_eligible_window(iv);
        let lost = hidden_possible
            && self.streams.values().any(|st| {
                let span_end = match st.close_t {
                    Some(c) if c <= t => c,
                    _ => Millis::INFINITY,
                };
                st.open_t <= iv.e
                    && span_end >= iv.s
                    && st.lost.iter().any(|&l| l <= t)
                    && (self.all()
                        || (!differ(&st.host, &iv.host) && !differ(&st.thread, &iv.hints.thread)))
            });
        if lost {
            return true;
        }
        self.windows.iter().any(|w| {
            self.candidate(w, iv)
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

    /// The moments at which a give-up condition can start to hold for `iv`: event times, and
    /// `close_wait` after its end, after every response's end and after every reported call's.
    fn change_moments(&self, iv: &Interval) -> Vec<Millis> {
        let cw = self.config.close_wait;
        let mut m: Vec<Millis> = vec![iv.e + cw];
        m.extend(self.event_times.iter().copied());
        m.extend(
            self.responses
                .values()
                .filter_map(|r| r.end.map(|(_, t, _)| t + cw)),
        );
        m.extend(
            self.mcp
                .values()
                .filter_map(|x| x.reported.as_ref().map(|(_, end, _)| end + cw)),
        );
        m
    }

    /// Every moment at or after the report, up to the last event, at which the rule's inputs
    /// can change for interval `iv` (brief 9: a decision due between events happens at
    /// exactly its time).
    fn moments(&self, iv: &Interval) -> Vec<Millis> {
        let mut m = self.change_moments(iv);
        m.push(iv.report_t);
        m.extend(self.windows.iter().filter_map(|w| w.broke));
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
            if let Some(r) = self.decide_at(k, t, false) {
                return (r, false);
            }
        }
        // Brief 10: the trace ended; still-open candidates count as given up.
        let r = self
            .decide_at(k, self.last_t, true)
            .expect("a forced decision always decides");
        (r, true)
    }

    /// The record for interval `k` if the rule decides at `t` (always, when `forced`).
    fn decide_at(&self, k: usize, t: Millis, forced: bool) -> Option<Record> {
        let iv = &self.intervals[k];
        let candidates: Vec<(usize, &Window)> = self
            .windows
            .iter()
            .enumerate()
            .filter(|(_, w)| self.candidate(w, iv))
            .collect();
        let incomplete = self.incomplete(iv, t);
        if !incomplete && !forced {
            let all_settled = candidates
                .iter()
                .all(|(wi, w)| !w.open_at(t) || self.given_up(*wi, k, t));
            if !all_settled {
                return None;
            }
        }
        // Brief 7: the windows that contain I, or could (still open at t).
        let c: Vec<&Window> = candidates
            .iter()
            .map(|(_, w)| *w)
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
            interval: iv.id.clone().into(),
            alias: iv.alias.clone().into(),
            tool: iv.tool.clone().into(),
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
            if !self.all() && self.pointed_at(iv, t) {
                Some(Reason::IdentityConflict)
            } else {
                Some(Reason::NoWindow)
            }
        } else if !c[0].closed_by(t) {
            Some(Reason::Unclosed)
        } else if self.all() {
            self.identity(iv, c[0])
        } else {
            None
        };
        if reason.is_some() {
            record.reason = reason;
            return Some(record);
        }
        let w = c[0];
        record.evidence = self.evidence(iv, w);
        let (close_t, request) = w.close.clone().expect("closed");
        record.window = Some(WindowRef {
            thread: w.thread.as_deref().map(Into::into),
            stream: w.stream.clone().into(),
            response: w.response.clone().into(),
            request: Some(request.into()),
            open: w.open,
            close: Some(close_t),
        });
        Some(record)
    }

    /// §4 rule 4 (default mode): a window eligible by host and route alone that the
    /// interval's identity rules out, opened at or before s (response mode: its response
    /// completed at or before s) and no longer than `max_window` before e, that had neither
    /// closed nor broken before e by the decision at `t`. Read as a window the identity rules
    /// out ("the timing points at a response that the call's own identity rules out"): an
    /// eligible window that broke after e is no identity's doing.
    fn pointed_at(&self, iv: &Interval, t: Millis) -> bool {
        self.windows.iter().any(|w| {
            let by_start = match self.config.window_open {
                WindowOpen::Call => w.open <= iv.s,
                WindowOpen::Response => self.completed_at(w).is_some_and(|c| c <= iv.s),
            };
            let final_before_end = w.close.as_ref().is_some_and(|(c, _)| *c < iv.e && *c <= t)
                || w.broke.is_some_and(|b| b < iv.e && b <= t);
            by_start
                && w.open >= iv.e - self.config.max_window
                && !final_before_end
                && self.eligible_by_host_and_route(w, iv)
                && !self.same_identity(w, iv)
        })
    }

    /// R's calls complete at or before the interval's start: the ones a hint can name (§4
    /// "names") and a route can be read off.
    fn calls_by<'a>(&'a self, w: &Window, s: Millis) -> impl Iterator<Item = &'a Call> {
        self.responses[&w.response]
            .calls
            .iter()
            .filter(move |c| c.t <= s)
    }

    /// §4 rule 4 with `--candidates all`: a hint that contradicts the one containing window.
    fn identity(&self, iv: &Interval, w: &Window) -> Option<Reason> {
        let h = &iv.hints;
        if let Some(id) = &h.tool_use_id {
            if !self.calls_by(w, iv.s).any(|c| &c.call == id) {
                return Some(Reason::IdentityConflict);
            }
        }
        if let Some(id) = &h.item_id {
            if !self.calls_by(w, iv.s).any(|c| c.item.as_ref() == Some(id)) {
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

    /// Brief 8. How a model-visible name maps to an MCP alias and tool is `correlator::resolves`'s
    /// business (tested on its own); which calls are asked, and where `route` goes, is the
    /// rule's.
    fn evidence(&self, iv: &Interval, w: &Window) -> Vec<Evidence> {
        let h = &iv.hints;
        let mut ev = vec![Evidence::Containment];
        let s = iv.s;
        let names_call = |id: &Option<String>| {
            id.as_ref()
                .is_some_and(|id| self.calls_by(w, s).any(|c| &c.call == id))
        };
        if names_call(&h.tool_use_id) {
            ev.push(Evidence::ToolUseId);
        }
        if h.item_id
            .as_ref()
            .is_some_and(|id| self.calls_by(w, s).any(|c| c.item.as_ref() == Some(id)))
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
        if let (Some(a), Some(b)) = (&iv.host, &w.host) {
            if a == b {
                ev.push(Evidence::Host);
            }
        }
        if self.calls_by(w, s).any(|c| {
            c.kind != CallKind::Custom
                && routes(
                    self.client_of(w),
                    &c.name,
                    c.namespace.as_deref(),
                    &iv.alias,
                    &iv.tool,
                )
        }) {
            ev.push(Evidence::Route);
        }
        ev
    }
}
