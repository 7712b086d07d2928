//! Threads, response chains and windows (docs/design.md §3).
//!
//! [`Tracker`] applies relay and MCP events to the state the decision rule reads: which
//! windows are open, closed or broken and when, which streams lost observation, which requests
//! each thread sent, and, per open window, the MCP calls that started inside it (of a host not
//! known to differ from the window's, unless every host counts) and the spans of time in which
//! it could be given up. It keeps only
//! what a pending or future decision can still need: state behind the horizons of
//! [`Tracker::forget_before`] is dropped, and [`Tracker::forgotten_end`] says for which
//! intervals the answers stay exact.
//!
//! Every event passes through here, so the layout is chosen for replay speed (measured in
//! docs/performance.md, "Correlator replay"): windows in a slab addressed by handle, open
//! windows in one sorted vector that is also the `max_window` deadline queue, short handle
//! lists reused through [`Spare`] rather than allocated per window or interval. Each such
//! choice says why where it is made.

use std::collections::VecDeque;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::event::{CallKind, Client, Millis, ResponseStatus};
use crate::intern::Interner;
use crate::route::Names;

/// A window's handle: its slot in the tracker's table and that slot's generation, so a handle
/// to a dropped window never reaches a later one (handles are never reused within one run).
pub(crate) type WinId = u64;

/// The tracker's windows: a table indexed by slot, slots reused through a free list. Cheaper
/// than a hash map on the hot paths (MCP bookkeeping touches every open window per event).
#[derive(Default)]
struct Slab {
    slots: Vec<Slot>,
    free: Vec<u32>,
    len: usize,
}

/// Boxed, so the table (which grows by doubling) costs 16 bytes per slot, not a window's size.
#[derive(Default)]
struct Slot {
    generation: u32,
    window: Option<Box<Window>>,
}

impl Slab {
    fn split(id: WinId) -> (usize, u32) {
        ((id & 0xFFFF_FFFF) as usize, (id >> 32) as u32)
    }

    fn get(&self, id: WinId) -> Option<&Window> {
        let (i, g) = Self::split(id);
        let slot = self.slots.get(i)?;
        if slot.generation != g {
            return None;
        }
        slot.window.as_deref()
    }

    fn get_mut(&mut self, id: WinId) -> Option<&mut Window> {
        let (i, g) = Self::split(id);
        let slot = self.slots.get_mut(i)?;
        if slot.generation != g {
            return None;
        }
        slot.window.as_deref_mut()
    }

    fn insert(&mut self, window: Window) -> WinId {
        self.len += 1;
        let i = match self.free.pop() {
            Some(i) => i as usize,
            None => {
                self.slots.push(Slot::default());
                self.slots.len() - 1
            }
        };
        let slot = &mut self.slots[i];
        slot.window = Some(Box::new(window));
        (u64::from(slot.generation) << 32) | i as u64
    }

    fn remove(&mut self, id: WinId) {
        let (i, g) = Self::split(id);
        let Some(slot) = self.slots.get_mut(i) else {
            return;
        };
        if slot.generation != g || slot.window.is_none() {
            return;
        }
        slot.window = None;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(i as u32);
        self.len -= 1;
    }

    fn len(&self) -> usize {
        self.len
    }
}

/// How many emptied vectors a [`Spare`] keeps, and the largest capacity it keeps.
const MAX_SPARE: usize = 256;
const MAX_SPARE_CAPACITY: usize = 64;

/// Emptied vectors of handles (windows or pending intervals), kept for reuse. Several short
/// lists live and die with every interval or window (a thread's windows awaiting its request,
/// an interval's candidates, the intervals waiting on a window); taking an emptied one with
/// its capacity instead of allocating saved an allocation and a free each on the busy
/// workload. At most [`MAX_SPARE`] of at most [`MAX_SPARE_CAPACITY`] are kept, so a burst
/// leaves no lasting memory behind.
#[derive(Default)]
pub(crate) struct Spare(Vec<Vec<u64>>);

impl Spare {
    /// An empty vector, with capacity when one was given back.
    pub(crate) fn take(&mut self) -> Vec<u64> {
        self.0.pop().unwrap_or_default()
    }

    /// Keeps `v`, emptied, for a later [`Spare::take`] (or drops it when enough are kept).
    pub(crate) fn give(&mut self, mut v: Vec<u64>) {
        if (1..=MAX_SPARE_CAPACITY).contains(&v.capacity()) && self.0.len() < MAX_SPARE {
            v.clear();
            self.0.push(v);
        }
    }
}

/// Windows by the ids of their calls (or of their items), keyed by a 64-bit hash of the id.
///
/// Why a hash: the index holds every held window's calls (tens of thousands on a busy relay,
/// since closed windows are kept for late reports), and a key that is the id itself is compared
/// through a pointer on every probe, a cache miss each time on a table that size. A hash is
/// compared in place. It may point at the wrong window, never at nothing that matters:
/// every reader checks that the window it gets issued the id ([`Tracker::issued`], the
/// continuation's check), and an id whose hash another window's different id already holds is
/// kept by its text in `collided` (checked first, empty in practice), so no id is lost.
#[derive(Default)]
struct IdIndex {
    by_hash: FxHashMap<u64, WinId>,
    collided: FxHashMap<Arc<str>, WinId>,
}

fn id_hash(id: &str) -> u64 {
    use std::hash::BuildHasher;
    // The unit tests make collisions on purpose (no two real ids are known to collide).
    #[cfg(test)]
    if id.starts_with("same-hash-") {
        return 0;
    }
    rustc_hash::FxBuildHasher.hash_one(id)
}

impl IdIndex {
    /// The window that may have issued `id` (the caller checks that it did).
    fn get(&self, id: &str) -> Option<WinId> {
        if !self.collided.is_empty() {
            if let Some(w) = self.collided.get(id) {
                return Some(*w);
            }
        }
        self.by_hash.get(&id_hash(id)).copied()
    }

    /// Indexes `id` for window `w`. `holds(other)` says whether window `other`, which holds
    /// the id's hash, has a call with exactly this id: then the id is repeated and the newest
    /// window takes it (as a continuation would find it), else the hashes collide.
    fn insert(&mut self, id: &Arc<str>, w: WinId, holds: impl FnOnce(WinId) -> bool) {
        use std::collections::hash_map::Entry;
        match self.by_hash.entry(id_hash(id)) {
            Entry::Vacant(v) => {
                v.insert(w);
            }
            Entry::Occupied(mut o) => {
                let other = *o.get();
                if other == w || holds(other) {
                    o.insert(w);
                } else {
                    self.collided.insert(id.clone(), w);
                }
            }
        }
    }

    /// Forgets `id` for window `w` (not if the id has moved on to another window).
    fn remove(&mut self, id: &str, w: WinId) {
        if !self.collided.is_empty() && self.collided.get(id) == Some(&w) {
            self.collided.remove(id);
            return;
        }
        let h = id_hash(id);
        if self.by_hash.get(&h) == Some(&w) {
            self.by_hash.remove(&h);
        }
    }

    fn len(&self) -> usize {
        self.by_hash.len() + self.collided.len()
    }
}

/// The call ids of dropped windows' calls (see [`Tracker::forget_before`]), each with when its
/// call was complete, for as long as the end horizon has not passed `max_window` beyond the
/// horizon that dropped it.
///
/// Why: a `call_id` hint that matches no call names nothing (docs/design.md §4 "names": Codex
/// code mode's fresh `exec-…` ids), so one naming a call of a dropped window, if found
/// nowhere, would leave every window eligible that the other hints leave, and where they name
/// a call it would make that call's window the eligible one and excuse every loss. The rule
/// instead leaves no window but the dropped one, which is final long before any interval that
/// is still judged exactly ends. Read as naming a call the relay did not see (as a
/// `tool_use_id` or `item_id` of a dropped window is), it changes only whether losses count,
/// so at worst the answer becomes `incomplete`.
///
/// Kept by id rather than by hash (as [`IdIndex`] does): a hash that another id shares would
/// make that id name a call, and only a `call_id` that finds no held call is looked up here.
#[derive(Default)]
struct ForgottenCalls {
    /// When the call was complete (the earliest, should an id repeat), and the horizon that
    /// dropped it (the latest).
    by_id: FxHashMap<Arc<str>, (Millis, Millis)>,
    /// In drop order, so by horizon: the front goes first.
    order: VecDeque<(Millis, Arc<str>)>,
}

impl ForgottenCalls {
    fn add(&mut self, call: &Arc<str>, at: Millis, horizon: Millis) {
        let e = self.by_id.entry(call.clone()).or_insert((at, horizon));
        *e = (e.0.min(at), e.1.max(horizon));
        self.order.push_back((horizon, call.clone()));
    }

    /// Was `id` the call id of a dropped window's call complete by `s`?
    fn complete_by(&self, id: &str, s: Millis) -> bool {
        self.by_id.get(id).is_some_and(|(at, _)| *at <= s)
    }

    /// Forgets the ids dropped at a horizon before `before`.
    fn expire(&mut self, before: Millis) {
        while let Some((h, _)) = self.order.front() {
            if *h >= before {
                break;
            }
            let Some((h, id)) = self.order.pop_front() else {
                break;
            };
            // A repeated id dropped again later stays for its later drop.
            if self.by_id.get(&id).is_some_and(|(_, last)| *last <= h) {
                self.by_id.remove(&id);
            }
        }
    }

    fn len(&self) -> usize {
        self.by_id.len()
    }
}

/// Total order for times, so they can key ordered sets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Time(pub Millis);

impl Eq for Time {}
impl PartialOrd for Time {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Time {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// Whose requests count as "its thread's" for a window: a known thread key, or, for a stream
/// whose thread is unknown, that stream alone.
///
/// Ids are shared (`Arc<str>`, so the correlator stays `Send`) between the tables and windows that name them: a window's
/// thread, stream, response and call ids are each allocated once, not once per table.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum ThreadKey {
    Known(Arc<str>),
    Anon(Arc<str>),
}

impl ThreadKey {
    fn of(thread: &Option<Arc<str>>, stream: &Arc<str>) -> ThreadKey {
        match thread {
            Some(t) => ThreadKey::Known(t.clone()),
            None => ThreadKey::Anon(stream.clone()),
        }
    }
}

/// One client tool call of a window's response.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    /// When the call item was complete.
    pub(crate) at: Millis,
    pub(crate) call: Arc<str>,
    pub(crate) item: Option<Arc<str>>,
    /// Tool names and namespaces repeat across windows: interned (see [`Tracker::intern`]).
    pub(crate) name: Arc<str>,
    pub(crate) namespace: Option<Arc<str>>,
    pub(crate) kind: CallKind,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum WindowState {
    Open,
    /// Closed at this time by a continuing request.
    Closed(Millis),
    /// Broken at this time: it never closes.
    Broken(Millis),
}

#[derive(Debug, Clone)]
pub(crate) struct Window {
    pub(crate) thread: Option<Arc<str>>,
    /// The host of the window's stream, when known.
    pub(crate) host: Option<Arc<str>>,
    pub(crate) stream: Arc<str>,
    pub(crate) response: Arc<str>,
    /// When the first client tool call of the response was complete.
    pub(crate) open: Millis,
    /// Its stream's client: which visible names route to an MCP tool (docs/design.md §4).
    pub(crate) client: Client,
    pub(crate) calls: Vec<Call>,
    pub(crate) state: WindowState,
    /// The request that closed the window.
    pub(crate) request: Option<Arc<str>>,
    /// When the response ended (any status), and when it completed (status completed).
    pub(crate) response_end: Option<Millis>,
    pub(crate) completed_at: Option<Millis>,
    /// MCP calls that started inside the window (start ≥ open) and are still running.
    pub(crate) running: u32,
    /// The latest end among reported MCP calls that started inside the window.
    pub(crate) max_inside_end: Millis,
    /// While the response has ended and no call inside runs: from when on the window can be
    /// given up (`close_wait` after the response's end and after every reported inside call's
    /// end; docs/design.md §4), as long as nothing changes.
    pub(crate) settle: Millis,
    /// Past spans `[from, until)` in which the window could be given up, ended by a call
    /// starting inside it or a late report. A candidate is given up at the *first* moment the
    /// conditions hold, so these stay valid whatever happens later.
    pub(crate) quiet: Vec<(Millis, Millis)>,
    /// The last route asked about, and when the first call that could issue it was complete
    /// (infinity if none): intervals of one tool ask the same question of every window they
    /// gather, so it is answered once per window. Forgotten when a call is added.
    route_memo: Option<(Arc<Names>, Millis)>,
    /// The first request of the window's thread after the window opened.
    pub(crate) next_request: Option<Millis>,
    /// How many pending intervals hold this window as a candidate (it must stay until they
    /// are decided).
    pub(crate) refs: u32,
    /// Pending intervals to wake (re-evaluate) when this window changes in a way that can make
    /// their decision earlier: it closes or breaks, or stops blocking (its response has ended
    /// and no MCP call that started inside it still runs). May hold stale entries; the
    /// correlator checks.
    pub(crate) attached: Vec<u64>,
    thread_key: ThreadKey,
}

impl Window {
    pub(crate) fn is_open(&self) -> bool {
        self.state == WindowState::Open
    }

    /// When the first call of the response that could have issued a call of `names`'s tool
    /// was complete: one whose visible name routes to it (for the window's client), or an
    /// opaque program call (kind `custom`), which may call any tool. Infinity if none.
    pub(crate) fn first_call_for(&self, names: &Names) -> Millis {
        self.calls
            .iter()
            .filter(|c| {
                c.kind == CallKind::Custom
                    || names.matches(self.client, &c.name, c.namespace.as_deref())
            })
            .map(|c| c.at)
            .fold(f64::INFINITY, f64::min)
    }

    /// The time the window became final, if it has.
    pub(crate) fn final_at(&self) -> Option<Millis> {
        match self.state {
            WindowState::Open => None,
            WindowState::Closed(t) | WindowState::Broken(t) => Some(t),
        }
    }
}

/// Which window a hint of an interval leaves (docs/design.md §4 "same identity": the window
/// whose response issued every call a hint names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Named {
    /// No hint names a call: identity leaves every window (but the thread's).
    Any,
    /// Every call the hints name is one of this window's response.
    Window(WinId),
    /// A hint names a call the relay did not see by the interval's start, or two hints name
    /// calls of two responses: no window issued them all.
    NoWindow,
}

impl Named {
    /// Adds one more named call's window (`None`: a call the relay did not see).
    pub(crate) fn and(self, window: Option<WinId>) -> Named {
        match (self, window) {
            (_, None) | (Named::NoWindow, _) => Named::NoWindow,
            (Named::Any, Some(w)) => Named::Window(w),
            (Named::Window(a), Some(b)) if a == b => self,
            (Named::Window(_), Some(_)) => Named::NoWindow,
        }
    }
}

/// An interval's identity: the window its naming hints leave, and its `thread` hint.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Identity<'a> {
    pub(crate) named: Named,
    pub(crate) thread: Option<&'a str>,
}

impl Identity<'_> {
    /// Does the identity leave window `w` (handle `id`)? It must have issued every named call,
    /// and its thread, when known, must be the `thread` hint, when given.
    pub(crate) fn allows(&self, id: WinId, w: &Window) -> bool {
        let named = match self.named {
            Named::Any => true,
            Named::Window(n) => n == id,
            Named::NoWindow => false,
        };
        named && !matches!((self.thread, &w.thread), (Some(a), Some(b)) if a != &**b)
    }
}

/// How a window stands for an interval: not eligible by host or route, eligible by those
/// alone but ruled out by the interval's identity, or eligible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fit {
    No,
    RuledOut,
    Eligible,
}

struct StreamState {
    name: Arc<str>,
    client: Client,
    thread: Option<Arc<str>>,
    host: Option<Arc<str>>,
    key: ThreadKey,
    open: Millis,
    lost: bool,
    /// Responses started on this stream that have not ended.
    active: Vec<Arc<str>>,
}

struct ResponseState {
    /// The response id, shared with the map's key: a window takes it without a second lookup.
    name: Arc<str>,
    stream: Arc<str>,
    window: Option<WinId>,
}

/// The open span of a stream whose observation was lost.
#[derive(Debug, Clone)]
pub(crate) struct LostSpan {
    pub(crate) stream: String,
    /// The stream's host and thread, when known.
    pub(crate) host: Option<Arc<str>>,
    pub(crate) thread: Option<Arc<str>>,
    pub(crate) open: Millis,
    pub(crate) close: Option<Millis>,
    pub(crate) lost_at: Millis,
}

/// An MCP call whose start was reported and whose end not yet.
struct RunningCall {
    start: Millis,
    host: Option<Arc<str>>,
    /// [`Tracker::forgotten_end`] when its start was reported.
    exact_from: Millis,
    losses: EarlierLosses,
}

/// How many streams an [`EarlierLosses`] tells apart.
const MAX_EARLIER_LOSSES: usize = 16;

/// The streams (host and thread) of lost spans dropped while an MCP call was running, that
/// were open at some time since its start: rule 1 (docs/design.md §4) still counts them for
/// the call once it is reported, and a call that runs for hours must not keep every lost span
/// of those hours. An entry counts for every interval for which the streams it stands for
/// count, perhaps more: a stream already stood for is not added, and past
/// [`MAX_EARLIER_LOSSES`] entries their threads are forgotten (each host's entry then stands
/// for every thread of it), then their hosts. So at worst an `incomplete`, never a loss
/// overlooked.
#[derive(Debug, Default)]
pub(crate) struct EarlierLosses(Vec<HostThread>);

/// A stream's host and thread, when known.
type HostThread = (Option<Arc<str>>, Option<Arc<str>>);

impl EarlierLosses {
    fn add(&mut self, host: &Option<Arc<str>>, thread: &Option<Arc<str>>) {
        // An unknown host or thread is one not known to differ from any.
        let stands_for =
            |(h, t): &HostThread| (h.is_none() || h == host) && (t.is_none() || t == thread);
        if self.0.iter().any(stands_for) {
            return;
        }
        self.0.push((host.clone(), thread.clone()));
        if self.0.len() > MAX_EARLIER_LOSSES {
            let mut hosts: Vec<HostThread> = Vec::new();
            for (h, _) in self.0.drain(..) {
                if !hosts.iter().any(|(x, _)| *x == h) {
                    hosts.push((h, None));
                }
            }
            if hosts.len() > MAX_EARLIER_LOSSES || hosts.iter().any(|(h, _)| h.is_none()) {
                hosts = vec![(None, None)];
            }
            self.0 = hosts;
        }
    }

    /// Does `counts` (given a stream's host and thread) hold for one of them?
    pub(crate) fn any(
        &self,
        counts: impl Fn(Option<&Arc<str>>, Option<&Arc<str>>) -> bool,
    ) -> bool {
        self.0.iter().any(|(h, t)| counts(h.as_ref(), t.as_ref()))
    }
}

/// What an applied event changed that can make a pending decision earlier. (Changes that can
/// only delay one, an MCP call starting or ending inside a window while others still run, are
/// not reported: a pending interval's queued time stays a valid lower bound.)
#[derive(Debug, Default)]
pub(crate) struct Changes {
    /// Windows that closed or broke, or stopped blocking decisions: their response has ended
    /// and no MCP call that started inside them still runs (whichever happened last).
    pub(crate) windows: Vec<WinId>,
    /// Something that can make any pending interval `incomplete` happened (a loss, a break).
    pub(crate) global: bool,
}

#[derive(Default)]
pub(crate) struct Tracker {
    streams: FxHashMap<Arc<str>, StreamState>,
    responses: FxHashMap<Arc<str>, ResponseState>,
    windows: Slab,
    /// Open windows, by open time (for candidates and MCP bookkeeping), then handle: the order
    /// of a `BTreeSet<(Time, WinId)>`, kept in a sorted vector. Windows open at the current
    /// time, so a new one goes at (or next to) the end, and the hot loops (every MCP start and
    /// end, every candidate gathering) walk contiguous memory instead of tree nodes.
    ///
    /// It is also the `max_window` deadline queue: a window's deadline is its open time plus
    /// `max_window`, and adding a constant keeps the order (float addition is monotone), so
    /// the first open window is the first to expire. No second ordered set to keep in step.
    open: Vec<(Time, WinId)>,
    /// Open windows by their response id (for continuations).
    open_by_response: FxHashMap<Arc<str>, WinId>,
    /// Every held window (open or final) by its calls' ids and by their item ids: a request's
    /// outputs find the open window they continue through it, and an interval's hints find the
    /// call they name (docs/design.md §4 "names"), whichever state its window is in. One map
    /// for both uses, so a call costs one insertion; an entry leaves with its window.
    by_call: IdIndex,
    by_item: IdIndex,
    /// Closed windows in close order (closes happen in time order).
    closed: VecDeque<(Millis, WinId)>,
    /// Broken windows, in break order.
    broken: VecDeque<WinId>,
    /// Windows (open or broken) whose thread has sent no request since they opened.
    awaiting_request: FxHashMap<ThreadKey, Vec<WinId>>,
    /// Emptied lists of `awaiting_request`: a thread's list empties at each of its requests
    /// and fills again at its next window.
    spare_lists: Spare,
    /// Spans of streams whose observation was lost.
    lost: Vec<LostSpan>,
    /// Running MCP calls by interval id (the id handed to the interval at its report).
    running: FxHashMap<Arc<str>, RunningCall>,
    /// No running call started later than this (the latest start since `running` was last
    /// empty). A window opens at the current time and calls are reported once started, so
    /// this is almost always earlier and a new window need not scan `running`.
    running_started_by: Millis,
    /// MCP calls reported at the current time (a window opening at the same time must see
    /// them): start, end, host.
    reported_now: Vec<(Millis, Millis, Option<Arc<str>>)>,
    /// `close_wait`, for the spans in which windows can be given up.
    close_wait: Millis,
    /// `max_window`: an open window breaks this long after it opened.
    max_window: Millis,
    /// `--candidates all`: every MCP call counts for every window, whatever the hosts.
    all_hosts: bool,
    now: Millis,
    /// Scratch for the windows a request continues.
    continued: Vec<WinId>,
    /// Interned tool names and namespaces, MCP aliases and hosts (bounded).
    names: Interner,
    /// The horizons of [`Tracker::forget_before`]: what was dropped can only matter to an
    /// interval that ends before `forgotten_end`, or that starts before the `forgotten_end` of
    /// its first report (after which the start horizon, `forgotten_start`, does not pass its
    /// start). Such an interval cannot be judged exactly.
    forgotten_start: Millis,
    forgotten_end: Millis,
    /// Final windows past the horizon kept only because an MCP call still running started
    /// while they were open, or one of their calls is recent or may still come, so a report
    /// may name one of their calls (docs/design.md §4 "names"). Bounded by what was open when
    /// the running calls started, and by the responses still streaming.
    kept_for_running: Vec<WinId>,
    /// The call ids of dropped windows, so that a `call_id` hint naming one still names a call.
    /// Not under `--candidates all`, where hints only contradict.
    forgotten_calls: ForgottenCalls,
}

/// Can an MCP call of host `call` count for a window of host `window`? Not when both are known
/// and differ (docs/design.md §4), unless every host counts.
fn same_host(all_hosts: bool, call: Option<&Arc<str>>, window: Option<&Arc<str>>) -> bool {
    all_hosts
        || match (call, window) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        }
}

impl Tracker {
    /// `close_wait` and `max_window` as configured; `all_hosts` for `--candidates all`.
    pub(crate) fn new(close_wait: Millis, max_window: Millis, all_hosts: bool) -> Self {
        Tracker {
            forgotten_start: f64::NEG_INFINITY,
            forgotten_end: f64::NEG_INFINITY,
            running_started_by: f64::NEG_INFINITY,
            close_wait,
            max_window,
            all_hosts,
            ..Default::default()
        }
    }

    /// A shared copy of a name that repeats (see [`Interner`]).
    pub(crate) fn intern(&mut self, name: &str) -> Arc<str> {
        self.names.get(name)
    }

    pub(crate) fn window(&self, id: WinId) -> Option<&Window> {
        self.windows.get(id)
    }

    pub(crate) fn window_mut(&mut self, id: WinId) -> Option<&mut Window> {
        self.windows.get_mut(id)
    }

    /// An interval that ends before this, or starts before this as it was at its first
    /// report (see [`Tracker::mcp_interval`]), cannot be judged exactly.
    pub(crate) fn forgotten_end(&self) -> Millis {
        self.forgotten_end
    }

    /// Sets the current time (non-decreasing); clears the per-instant bookkeeping.
    pub(crate) fn set_now(&mut self, t: Millis) {
        if t > self.now {
            self.reported_now.clear();
        }
        self.now = t;
    }

    /// The open windows that opened at or before `s`.
    fn open_by(&self, s: Millis) -> &[(Time, WinId)] {
        let k = self.open.partition_point(|(o, _)| *o <= Time(s));
        &self.open[..k]
    }

    /// Open windows that opened at or before `s`.
    pub(crate) fn open_candidates(&self, s: Millis) -> impl Iterator<Item = WinId> + '_ {
        self.open_by(s).iter().map(|(_, id)| *id)
    }

    /// Closed windows with open ≤ s and close ≥ e.
    pub(crate) fn closed_containing(
        &self,
        s: Millis,
        e: Millis,
    ) -> impl Iterator<Item = WinId> + '_ {
        // From the newest: an interval is reported soon after its end, so the windows that
        // closed since are few, while the deque holds every window of the retention span.
        let since_end = self.closed.iter().rev().take_while(move |(c, _)| *c >= e);
        since_end.filter_map(move |(_, id)| {
            let w = self.windows.get(*id)?;
            (w.open <= s).then_some(*id)
        })
    }

    /// Broken windows, in break order, with their handles.
    pub(crate) fn broken_windows(&self) -> impl DoubleEndedIterator<Item = (WinId, &Window)> + '_ {
        self.broken
            .iter()
            .filter_map(|id| Some((*id, self.windows.get(*id)?)))
    }

    /// The window whose response issued the call a hint names (docs/design.md §4): a call
    /// complete at or before `s` whose call id (`by_item`: item id) is `id`. `None` when the
    /// relay saw no such call by `s`, or its window was dropped (see [`Tracker::forget_before`]).
    pub(crate) fn named(&self, id: &str, by_item: bool, s: Millis) -> Option<WinId> {
        let index = if by_item {
            &self.by_item
        } else {
            &self.by_call
        };
        let wid = index.get(id)?;
        self.issued(wid, id, by_item, s).then_some(wid)
    }

    /// Was `id` the call id of a call complete by `s` whose window was dropped since (see
    /// [`ForgottenCalls`])?
    pub(crate) fn forgot_call(&self, id: &str, s: Millis) -> bool {
        self.forgotten_calls.complete_by(id, s)
    }

    /// Did window `wid`'s response issue a call complete by `s` whose call id (`by_item`: item
    /// id) is `id`? Ids are unique, so a hint naming a call of a window already found needs no
    /// lookup in the index.
    pub(crate) fn issued(&self, wid: WinId, id: &str, by_item: bool, s: Millis) -> bool {
        self.windows.get(wid).is_some_and(|w| {
            w.calls.iter().any(|c| {
                let cid = if by_item {
                    c.item.as_deref()
                } else {
                    Some(&*c.call)
                };
                cid == Some(id) && c.at <= s
            })
        })
    }

    pub(crate) fn lost_spans(&self) -> &[LostSpan] {
        &self.lost
    }

    /// The earliest `max_window` deadline of an open window.
    pub(crate) fn next_deadline(&self) -> Option<Millis> {
        self.open.first().map(|(t, _)| t.0 + self.max_window)
    }

    pub(crate) fn stream_open(
        &mut self,
        t: Millis,
        stream: &str,
        client: Client,
        thread: Option<&str>,
        host: Option<Arc<str>>,
    ) {
        let name: Arc<str> = stream.into();
        let thread: Option<Arc<str>> = thread.map(Arc::from);
        let key = ThreadKey::of(&thread, &name);
        self.streams.insert(
            name.clone(),
            StreamState {
                name,
                client,
                thread,
                host,
                key,
                open: t,
                lost: false,
                active: Vec::new(),
            },
        );
    }

    pub(crate) fn request<S: AsRef<str>>(
        &mut self,
        t: Millis,
        stream: &str,
        request: &str,
        previous_response: Option<&str>,
        outputs: &[S],
        ch: &mut Changes,
    ) {
        let Some(st) = self.streams.get(stream) else {
            return;
        };
        let thread = st.thread.clone();
        let key = st.key.clone();

        // This request is "after the window opened" for every waiting window of its thread
        // that opened strictly earlier.
        if let Some(list) = self.awaiting_request.get_mut(&key) {
            let windows = &mut self.windows;
            list.retain(|id| match windows.get_mut(*id) {
                Some(w) if w.open < t => {
                    w.next_request = Some(t);
                    false
                }
                Some(_) => true,
                None => false,
            });
            if list.is_empty() {
                if let Some(list) = self.awaiting_request.remove(&key) {
                    self.spare_lists.give(list);
                }
            }
        }

        // A reused buffer: one allocation less per request.
        let mut continued = std::mem::take(&mut self.continued);
        continued.clear();
        if let Some(prev) = previous_response {
            if let Some(id) = self.open_by_response.get(prev) {
                continued.push(*id);
            }
        }
        for c in outputs {
            let c = c.as_ref();
            if let Some(id) = self.by_call.get(c) {
                // The index is by hash: the window must have the call.
                let issued = self
                    .windows
                    .get(id)
                    .is_some_and(|w| w.calls.iter().any(|x| *x.call == *c));
                if issued && !continued.contains(&id) {
                    continued.push(id);
                }
            }
        }
        for &id in &continued {
            // `by_call` also holds final windows: only an open one can be continued.
            let compatible = match self.windows.get(id) {
                Some(w) if w.is_open() => match (&thread, &w.thread) {
                    (Some(a), Some(b)) => a == b,
                    _ => true,
                },
                _ => false,
            };
            if compatible {
                self.close(id, t, request);
                ch.windows.push(id);
            }
        }
        self.continued = continued;
    }

    pub(crate) fn response_start(&mut self, stream: &str, response: &str) {
        let Some(st) = self.streams.get_mut(stream) else {
            return;
        };
        let response: Arc<str> = response.into();
        st.active.push(response.clone());
        self.responses.insert(
            response.clone(),
            ResponseState {
                name: response,
                stream: st.name.clone(),
                window: None,
            },
        );
    }

    pub(crate) fn tool_call(&mut self, t: Millis, response: &str, call: Call) {
        // One lookup of the response for the whole call (the borrow is of `responses` alone).
        let Some(rs) = self.responses.get_mut(response) else {
            return;
        };
        if let Some(id) = rs.window {
            // Indexed whatever the window's state: a hint may name the call later.
            self.index_call(&call, id);
            if let Some(w) = self.windows.get_mut(id) {
                // Exact growth for the first few: most responses make one call or a few, and
                // doubling then shrinking back at the response's end cost two reallocations.
                if w.calls.len() < 4 {
                    w.calls.reserve_exact(1);
                }
                w.calls.push(call);
                w.route_memo = None;
            }
            return;
        }
        let stream = rs.stream.clone();
        let (client, thread, host, thread_key) = match self.streams.get(&stream) {
            Some(s) => (s.client, s.thread.clone(), s.host.clone(), s.key.clone()),
            None => (Client::Other, None, None, ThreadKey::Anon(stream.clone())),
        };

        // MCP calls already running (or reported at this same instant) that started at or
        // after this open are inside the window.
        let all = self.all_hosts;
        let running = if self.running_started_by < t {
            0
        } else {
            self.running
                .values()
                .filter(|r| r.start >= t && same_host(all, r.host.as_ref(), host.as_ref()))
                .count() as u32
        };
        let max_inside_end = self
            .reported_now
            .iter()
            .filter(|(s, _, h)| *s >= t && same_host(all, h.as_ref(), host.as_ref()))
            .map(|(_, e, _)| *e)
            .fold(f64::NEG_INFINITY, f64::max);

        let response = rs.name.clone();
        let id = self.windows.insert(Window {
            thread,
            host,
            stream,
            response: response.clone(),
            open: t,
            client,
            // Room for the one call it opens with (most responses make one or a few).
            calls: Vec::with_capacity(1),
            state: WindowState::Open,
            request: None,
            response_end: None,
            completed_at: None,
            running,
            max_inside_end,
            settle: f64::INFINITY,
            quiet: Vec::new(),
            route_memo: None,
            next_request: None,
            refs: 0,
            attached: Vec::new(),
            thread_key: thread_key.clone(),
        });
        rs.window = Some(id);
        self.open_by_response.insert(response, id);
        self.index_call(&call, id);
        if let Some(w) = self.windows.get_mut(id) {
            w.calls.push(call);
        }
        let at = self.open.partition_point(|e| *e < (Time(t), id));
        self.open.insert(at, (Time(t), id));
        let spare = &mut self.spare_lists;
        self.awaiting_request
            .entry(thread_key)
            .or_insert_with(|| spare.take())
            .push(id);
    }

    /// Indexes a call of window `id` by its call id and item id, before it joins the window's
    /// calls (so an id the window's earlier calls share is told from a hash collision).
    fn index_call(&mut self, call: &Call, id: WinId) {
        let windows = &self.windows;
        let has = |other: WinId, item: bool| {
            windows.get(other).is_some_and(|w| {
                w.calls.iter().any(|c| {
                    if item {
                        c.item.is_some() && c.item == call.item
                    } else {
                        c.call == call.call
                    }
                })
            })
        };
        self.by_call.insert(&call.call, id, |o| has(o, false));
        if let Some(item) = &call.item {
            self.by_item.insert(item, id, |o| has(o, true));
        }
    }

    pub(crate) fn response_end(
        &mut self,
        t: Millis,
        stream: &str,
        response: &str,
        status: ResponseStatus,
        ch: &mut Changes,
    ) {
        if let Some(st) = self.streams.get_mut(stream) {
            st.active.retain(|r| **r != *response);
        }
        let Some(rs) = self.responses.remove(response) else {
            return;
        };
        let Some(id) = rs.window else { return };
        let cw = self.close_wait;
        if let Some(w) = self.windows.get_mut(id) {
            w.response_end = Some(t);
            if status == ResponseStatus::Completed {
                w.completed_at = Some(t);
            }
            if w.running == 0 {
                w.settle = cw + t.max(w.max_inside_end);
                ch.windows.push(id);
            }
            // No calls come after the response; final windows may be kept a while.
            w.calls.shrink_to_fit();
        }
        if status != ResponseStatus::Completed {
            self.break_window(id, t, ch);
        }
    }

    pub(crate) fn stream_close(&mut self, t: Millis, stream: &str, ch: &mut Changes) {
        let Some(st) = self.streams.remove(stream) else {
            return;
        };
        if st.lost {
            if let Some(span) = self.lost.iter_mut().rev().find(|l| l.stream == stream) {
                span.close = Some(t);
            }
        }
        // A response whose stream ends before it does: its window is broken.
        for r in st.active {
            if let Some(rs) = self.responses.remove(&*r) {
                if let Some(id) = rs.window {
                    self.break_window(id, t, ch);
                }
            }
        }
    }

    pub(crate) fn observation_lost(&mut self, t: Millis, stream: &str, ch: &mut Changes) {
        let Some(st) = self.streams.get_mut(stream) else {
            return;
        };
        if st.lost {
            return;
        }
        st.lost = true;
        self.lost.push(LostSpan {
            stream: stream.to_string(),
            host: st.host.clone(),
            thread: st.thread.clone(),
            open: st.open,
            close: None,
            lost_at: t,
        });
        ch.global = true;
    }

    /// A call starting can only delay decisions, so it reports no change. A window that could
    /// be given up until now keeps that span (it was given up then, for any interval whose own
    /// wait had passed).
    pub(crate) fn mcp_start(&mut self, interval: &str, start: Millis, host: Option<Arc<str>>) {
        let (now, all) = (self.now, self.all_hosts);
        let k = self.open_by(start).len();
        for (_, id) in &self.open[..k] {
            if let Some(w) = self.windows.get_mut(*id) {
                if !same_host(all, host.as_ref(), w.host.as_ref()) {
                    continue;
                }
                if w.running == 0 && w.response_end.is_some() && w.settle < now {
                    w.quiet.push((w.settle, now));
                }
                w.running += 1;
            }
        }
        self.running_started_by = self.running_started_by.max(start);
        self.running.insert(
            interval.into(),
            RunningCall {
                start,
                host,
                exact_from: self.forgotten_end,
                losses: EarlierLosses::default(),
            },
        );
    }

    /// A call's end was reported (and its start, if this is its first report). Returns its id
    /// (the running call's copy, if it had one) and what its judgement needs of its time as a
    /// running call: the end horizon at its first report (see `forgotten_end`) and the losses
    /// dropped while it ran.
    pub(crate) fn mcp_interval(
        &mut self,
        interval: &str,
        start: Millis,
        end: Millis,
        host: Option<Arc<str>>,
        ch: &mut Changes,
    ) -> (Arc<str>, Millis, EarlierLosses) {
        let (id, started) = match self.running.remove_entry(interval) {
            Some((id, r)) => (id, Some(r)),
            None => (interval.into(), None),
        };
        if self.running.is_empty() {
            self.running_started_by = f64::NEG_INFINITY;
        }
        let (now, cw, all) = (self.now, self.close_wait, self.all_hosts);
        let k = self.open_by(start).len();
        for (_, id) in &self.open[..k] {
            let Some(w) = self.windows.get_mut(*id) else {
                continue;
            };
            // It ran inside this window (counted at its start, with the host it had then).
            let ran = started
                .as_ref()
                .is_some_and(|r| same_host(all, r.host.as_ref(), w.host.as_ref()));
            if ran && w.running > 0 {
                w.running -= 1;
                w.max_inside_end = w.max_inside_end.max(end);
                if w.running == 0 {
                    if let Some(re) = w.response_end {
                        w.settle = now.max(cw + re.max(w.max_inside_end));
                        ch.windows.push(*id);
                    }
                }
            } else if same_host(all, host.as_ref(), w.host.as_ref()) {
                w.max_inside_end = w.max_inside_end.max(end);
                // A call reported only now that ended less than `close_wait` ago: from now
                // on the window waits again, until `close_wait` after its end.
                let wait_until = cw + end;
                if w.running == 0 && w.response_end.is_some() && wait_until > now {
                    if w.settle < now {
                        w.quiet.push((w.settle, now));
                    }
                    w.settle = w.settle.max(wait_until);
                }
            }
        }
        self.reported_now.push((start, end, host));
        match started {
            Some(r) => (id, r.exact_from, r.losses),
            None => (id, self.forgotten_end, EarlierLosses::default()),
        }
    }

    /// How window `id` stands for an interval of `host`, alias and tool of visible `names`,
    /// starting at `start`, with `identity` (docs/design.md §4 "eligible"): every window under
    /// `--candidates all`; else its host must not be known to differ, its response must have a
    /// call complete by `start` that could have issued the tool ([`Window::first_call_for`],
    /// remembered for the window until it gets another call), and then the identity decides
    /// between eligible and ruled out. `None` for a window no longer held.
    #[inline]
    pub(crate) fn fit(
        &mut self,
        id: WinId,
        host: Option<&Arc<str>>,
        names: &Arc<Names>,
        start: Millis,
        identity: &Identity<'_>,
    ) -> Option<Fit> {
        let all = self.all_hosts;
        let w = self.windows.get_mut(id)?;
        if all {
            return Some(Fit::Eligible);
        }
        if matches!((host, &w.host), (Some(a), Some(b)) if a != b) {
            return Some(Fit::No);
        }
        let first = match &w.route_memo {
            Some((n, at)) if Arc::ptr_eq(n, names) => *at,
            _ => {
                let at = w.first_call_for(names);
                w.route_memo = Some((names.clone(), at));
                at
            }
        };
        Some(if first > start {
            Fit::No
        } else if identity.allows(id, w) {
            Fit::Eligible
        } else {
            Fit::RuledOut
        })
    }

    /// A pending interval takes window `id` as a candidate: it stays until the interval is
    /// decided (see [`Tracker::unref`]).
    pub(crate) fn hold(&mut self, id: WinId) {
        if let Some(w) = self.windows.get_mut(id) {
            w.refs += 1;
        }
    }

    /// The first moment at or after `from` at which window `id` could be given up, if it can
    /// be told now: from a past quiet span, or the current one. `None` while it cannot (its
    /// response still streams, or a call that started inside it still runs).
    pub(crate) fn give_up_at(&self, w: &Window, from: Millis) -> Option<Millis> {
        for &(a, b) in &w.quiet {
            let t = a.max(from);
            if t < b {
                return Some(t);
            }
        }
        (w.response_end.is_some() && w.running == 0).then(|| w.settle.max(from))
    }

    /// Breaks every open window whose `max_window` deadline is at or before `t`.
    pub(crate) fn expire(&mut self, t: Millis, ch: &mut Changes) {
        while let Some(&(Time(open), id)) = self.open.first() {
            let d = open + self.max_window;
            if d > t {
                break;
            }
            self.break_window(id, d, ch);
            // `break_window` took it out of `open`; an entry left behind (which no path makes)
            // must still not stall the loop.
            if self.open.first() == Some(&(Time(open), id)) {
                self.open.remove(0);
            }
        }
    }

    fn leave_open_sets(&mut self, id: WinId) -> Option<&mut Window> {
        let w = self.windows.get_mut(id)?;
        if let Ok(at) = self.open.binary_search(&(Time(w.open), id)) {
            self.open.remove(at);
        }
        self.open_by_response.remove(&w.response);
        Some(w)
    }

    fn close(&mut self, id: WinId, t: Millis, request: &str) {
        match self.windows.get(id) {
            Some(w) if w.is_open() => {}
            _ => return,
        }
        let Some(w) = self.leave_open_sets(id) else {
            return;
        };
        w.state = WindowState::Closed(t);
        w.request = Some(request.into());
        self.closed.push_back((t, id));
    }

    fn break_window(&mut self, id: WinId, t: Millis, ch: &mut Changes) {
        match self.windows.get(id) {
            Some(w) if w.is_open() => {}
            _ => return,
        }
        let Some(w) = self.leave_open_sets(id) else {
            return;
        };
        w.state = WindowState::Broken(t);
        self.broken.push_back(id);
        ch.windows.push(id);
        ch.global = true;
    }

    /// Drops what no decision can need about an interval [s, e] with e at or after
    /// `end_horizon` that is running or pending now, or is first reported later with s at or
    /// after `end_horizon` (docs/design.md §4). The caller picks `end_horizon` (the correlator:
    /// `late_allowance` before now, and not after the start of any interval still pending);
    /// the start horizon is the same but not after the start of any MCP call still running.
    /// Both only move forward. Any other interval is judged `incomplete` (see
    /// [`Tracker::forgotten_end`]).
    /// - A window closed before `end_horizon`: it closed before e, so it neither contains the
    ///   interval nor points at it for `identity_conflict` (that needs a window neither closed
    ///   nor broken before e).
    /// - A broken window that opened more than `max_window` before `end_horizon`, so before e:
    ///   it is no candidate, makes nothing `incomplete` and points at nothing. Or one that broke
    ///   after a request of its thread, both before the start horizon, so by s: it makes
    ///   nothing `incomplete` and broke before e.
    /// - A lost span whose stream closed before `end_horizon`: it matters only to an interval
    ///   that started by then. One pending now started later; one running now that started by
    ///   then keeps the span's host and thread ([`EarlierLosses`]); one first reported later
    ///   is judged `incomplete`.
    ///
    /// A dropped window can still matter in one way: a hint may name one of its calls (§4
    /// "names"). A `tool_use_id` or `item_id` that finds nothing reads as naming a call the
    /// relay never saw, which changes only whether losses count for the interval, so at worst
    /// its answer becomes `incomplete`. A `call_id` that finds nothing names nothing, which
    /// would change far more (other windows become eligible; see [`ForgottenCalls`]): so the
    /// call ids of a dropped window are kept, `max_window` past the horizon that dropped it,
    /// and one of them reads as a call the relay never saw too. Kept for such names
    /// (`kept_for_running`; not under `--candidates all`, where hints only contradict): the
    /// windows that an MCP call still running may name (it started while they were open), up
    /// to `max_window` past the allowance after its start; and a window while its response
    /// still streams or one of its calls was complete at or after `end_horizon`, so that a
    /// dropped window's calls were all complete and its window final before the horizon.
    /// Left over: a call that started after the window of the call it names had become final
    /// and that call complete, or that runs longer than `max_window`, reported more than the
    /// allowance after both, with a loss that then counts; and, when the name is a `call_id`
    /// and the report comes `max_window` later still, any answer (the `call_id` names nothing
    /// then). A host runs a call before it continues, so the first and last do not happen;
    /// and no window holds the second.
    ///
    /// So what is held is what the last allowance of traffic left (broken windows and dropped
    /// windows' call ids: `max_window` more), plus what is open, pending or running, not the
    /// length of the run. A window a pending interval holds stays until it is decided.
    pub(crate) fn forget_before(&mut self, end_horizon: Millis) {
        let h_end = end_horizon.max(self.forgotten_end);
        let mut starts: Vec<Millis> = self.running.values().map(|r| r.start).collect();
        starts.sort_unstable_by(f64::total_cmp);
        // From `end_horizon`, not `h_end`: a pending interval may have started before the
        // end horizon that an earlier call set (its end is after it).
        let h_start = starts
            .first()
            .map_or(end_horizon, |s| s.min(end_horizon))
            .max(self.forgotten_start);
        if h_end == self.forgotten_end && h_start == self.forgotten_start {
            return;
        }
        // A running call that started while `w` was open (at or after its open, by the time it
        // became final) may name one of its calls. Not under `--candidates all` (a hint only
        // contradicts there), nor for a call that started more than `max_window` before
        // `h_end`: no window can hold it, and a name would only decide whether losses count.
        let naming_from = starts.partition_point(|s| *s < h_end - self.max_window);
        let naming = if self.all_hosts {
            &[][..]
        } else {
            &starts[naming_from..]
        };
        // Nor is a window dropped while one of its calls is recent or may still come (its
        // response streams on after the window closed or broke): an on-time report may name a
        // call complete at or after `h_end` (so the window keeps its calls' ids exact).
        let (responses, all) = (&self.responses, self.all_hosts);
        let named_by_running = |w: &Window| {
            let i = naming.partition_point(|s| *s < w.open);
            let running = naming
                .get(i)
                .is_some_and(|s| w.final_at().is_none_or(|f| *s <= f));
            running
                || (!all
                    && (w.calls.iter().any(|c| c.at >= h_end)
                        || responses.contains_key(&*w.response)))
        };
        let mut kept = std::mem::take(&mut self.kept_for_running);
        let mut dropped = Vec::new();
        kept.retain(|&id| match self.windows.get(id) {
            Some(w) if named_by_running(w) => true,
            Some(_) => {
                dropped.push(id);
                false
            }
            None => false,
        });
        while let Some(&(c, id)) = self.closed.front() {
            if c >= h_end {
                break;
            }
            self.closed.pop_front();
            match self.windows.get(id) {
                Some(w) if named_by_running(w) => kept.push(id),
                Some(_) => dropped.push(id),
                None => {}
            }
        }
        let (windows, max_window) = (&self.windows, self.max_window);
        let mut keep = VecDeque::with_capacity(self.broken.len());
        for id in self.broken.drain(..) {
            let Some(w) = windows.get(id) else { continue };
            let spoke = w.final_at().is_some_and(|b| b < h_start)
                && w.next_request.is_some_and(|q| q < h_start);
            if !spoke && w.open + max_window >= h_end {
                keep.push_back(id);
            } else if named_by_running(w) {
                kept.push(id);
            } else {
                dropped.push(id);
            }
        }
        self.broken = keep;
        self.kept_for_running = kept;
        // Set before the drops: the call ids they leave are kept from this horizon on.
        self.forgotten_start = h_start;
        self.forgotten_end = h_end;
        self.forgotten_calls.expire(h_end - self.max_window);
        for id in dropped {
            self.drop_window_if_unwaited(id);
        }
        // A lost span whose stream closed since a running call started goes on counting for
        // it (its end is at or after `h_end`, for a prompt report, so the stream was open
        // during it).
        let running = &mut self.running;
        self.lost.retain(|l| {
            let Some(c) = l.close.filter(|c| *c < h_end) else {
                return true;
            };
            for r in running.values_mut().filter(|r| r.start <= c) {
                r.losses.add(&l.host, &l.thread);
            }
            false
        });
    }

    fn drop_window_if_unwaited(&mut self, id: WinId) {
        let Some(w) = self.windows.get(id) else {
            return;
        };
        if w.refs > 0 {
            return;
        }
        if w.next_request.is_none() {
            if let Some(list) = self.awaiting_request.get_mut(&w.thread_key) {
                list.retain(|x| *x != id);
                if list.is_empty() {
                    if let Some(list) = self.awaiting_request.remove(&w.thread_key) {
                        self.spare_lists.give(list);
                    }
                }
            }
        }
        self.remove_window(id);
    }

    /// Drops window `id` and its calls' entries in the id indexes (those that still point
    /// to it: a duplicated id may have moved on to a later window).
    fn remove_window(&mut self, id: WinId) {
        let Some(w) = self.windows.get(id) else {
            return;
        };
        let horizon = self.forgotten_end;
        for c in &w.calls {
            self.by_call.remove(&c.call, id);
            if let Some(item) = &c.item {
                self.by_item.remove(item, id);
            }
            if !self.all_hosts {
                self.forgotten_calls.add(&c.call, c.at, horizon);
            }
        }
        self.windows.remove(id);
    }

    /// A pending interval no longer holds window `id`: drop it if it is final, no longer
    /// indexed anywhere and was only kept for the intervals that held it.
    pub(crate) fn unref(&mut self, id: WinId) {
        let Some(w) = self.windows.get_mut(id) else {
            return;
        };
        w.refs = w.refs.saturating_sub(1);
        if w.refs > 0 {
            return;
        }
        let Some(f) = w.final_at() else { return };
        let indexed = match w.state {
            WindowState::Closed(_) => {
                f >= self.forgotten_end || self.kept_for_running.contains(&id)
            }
            WindowState::Broken(_) => {
                self.broken.contains(&id) || self.kept_for_running.contains(&id)
            }
            WindowState::Open => true,
        };
        if !indexed {
            self.remove_window(id);
        }
    }

    /// How many windows the tracker holds (for tests and memory reports).
    pub(crate) fn window_count(&self) -> usize {
        self.windows.len()
    }

    /// How much of each kind of state the tracker holds: windows (open and final), broken
    /// windows, lost spans, indexed call and item ids (and dropped windows' call ids), threads
    /// awaiting a request.
    pub(crate) fn sizes(&self) -> [usize; 5] {
        [
            self.windows.len(),
            self.broken.len(),
            self.lost.len(),
            self.by_call.len() + self.by_item.len() + self.forgotten_calls.len(),
            self.awaiting_request.len(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(response: &str) -> Window {
        let stream: Arc<str> = "s1".into();
        Window {
            thread: None,
            host: None,
            stream: stream.clone(),
            response: response.into(),
            open: 0.0,
            client: Client::Claude,
            // Room for the one call it opens with (most responses make one or a few).
            calls: Vec::with_capacity(1),
            state: WindowState::Open,
            request: None,
            response_end: None,
            completed_at: None,
            running: 0,
            max_inside_end: f64::NEG_INFINITY,
            settle: f64::INFINITY,
            quiet: Vec::new(),
            route_memo: None,
            next_request: None,
            refs: 0,
            attached: Vec::new(),
            thread_key: ThreadKey::Anon(stream),
        }
    }

    #[test]
    fn a_handle_to_a_dropped_window_never_reaches_the_window_that_reuses_its_slot() {
        let mut slab = Slab::default();
        let first = slab.insert(window("r1"));
        slab.remove(first);
        let second = slab.insert(window("r2"));
        assert_ne!(first, second);
        assert!(slab.get(first).is_none());
        assert_eq!(slab.get(second).map(|w| &*w.response), Some("r2"));
        // Removing through the stale handle leaves the new window alone.
        slab.remove(first);
        assert_eq!(slab.len(), 1);
        assert!(slab.get_mut(second).is_some());
    }

    #[test]
    fn ids_whose_hashes_collide_are_all_found() {
        let mut index = IdIndex::default();
        let (a, b, c): (Arc<str>, Arc<str>, Arc<str>) =
            ("same-hash-a".into(), "same-hash-b".into(), "other".into());
        // Window 1 holds a; window 2's b has the same hash and is not a repeat of a.
        index.insert(&a, 1, |_| unreachable!("a vacant slot asks nobody"));
        index.insert(&b, 2, |other| {
            assert_eq!(other, 1);
            false
        });
        index.insert(&c, 3, |_| unreachable!());
        assert_eq!(index.get(&a), Some(1));
        assert_eq!(index.get(&b), Some(2));
        assert_eq!(index.get(&c), Some(3));
        assert_eq!(index.len(), 3);
        // A repeated id moves to the newest window.
        index.insert(&a, 4, |other| other == 1);
        assert_eq!(index.get(&a), Some(4));
        // Removing for a window that no longer holds the id leaves it alone.
        index.remove(&a, 1);
        assert_eq!(index.get(&a), Some(4));
        index.remove(&b, 2);
        assert_eq!(index.get(&b), Some(4), "only the hash's holder is left");
        index.remove(&a, 4);
        index.remove(&c, 3);
        assert_eq!(index.get(&a), None);
        assert_eq!(index.len(), 0);
    }
}
