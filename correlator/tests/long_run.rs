//! Hours of traffic through one correlator (issue 28 item 0): the answers stay the rule's, and
//! the state it holds follows the recent traffic, not the length of the run.
//!
//! The run is a sequence of epochs, each a generated multi-host trace (ids made unique per
//! epoch; the host processes are the same all along), laid end to end with a gap longer than
//! `max_window` between one epoch's last event and the next one's first. Each epoch ends
//! with an idle event once every window it opened has closed, broken or expired.
//!
//! Why the records of one epoch inside the long run must equal the records of that epoch
//! replayed alone (docs/design.md §4): a window of an earlier epoch opened more than
//! `max_window` before any later call's end, so it is no candidate for it, cannot make it
//! `incomplete` and cannot point at it for `identity_conflict`; every stream of an earlier
//! epoch closed before the epoch ended, so no loss there touches a later call; an MCP call of
//! an earlier epoch that never reported its end started before every later window opened, so
//! it holds none of them; no hint names another epoch's call or thread. And nothing is left
//! to decide when an epoch's idle event comes (every candidate is final by then), so the end
//! of the trace forces nothing in the epoch replayed alone either. The epoch alone is
//! checked against the independent reference (tests/support/reference.rs), so this test
//! checks the correlator's answers after hours, not only its agreement with itself.
//!
//! Under the text before issue 28 a window that broke on a thread that never spoke again
//! stayed a candidate of every later call of its tool and made it `incomplete`: the records of
//! later epochs would differ from their epoch alone, and the tracker would keep every such
//! window (the state bound below fails).

mod support;

use correlator::records::Record;
use correlator::{Candidates, Config, Correlator, Event, EventKind, Millis, WindowOpen};
use correlator::{Client, Held, Transport};

use support::gen::{generate, Shape};
use support::reference::reference;

/// `max_window` of the run: one minute, so that three hours hold many spans of it.
const MAX_WINDOW: Millis = 60_000.0;
/// The late-report allowance of the run: a second, longer than any report delay the
/// generator makes and shorter than an epoch, so that every epoch is dropped while the run
/// goes on.
const ALLOWANCE: Millis = 1000.0;
/// How long the run lasts at least, in trace milliseconds.
const HOURS: Millis = 3.0 * 3600.0 * 1000.0;

/// One epoch: its events on the run's clock, and what it opened (for the state bound).
struct Epoch {
    events: Vec<Event>,
    windows: usize,
    lost_streams: usize,
    calls: usize,
    threads: usize,
}

fn prefixed(p: &str, id: &str) -> String {
    format!("{p}{id}")
}

/// Epoch `k`'s trace from `seed`, moved to start at `offset`, every id but the hosts made
/// unique to the epoch, and closed by an idle stream once every window has had time to
/// expire. With `known_hosts`, a stream whose host was not known is given host `h0`.
fn epoch(k: usize, seed: u64, offset: Millis, known_hosts: bool) -> Epoch {
    let g = generate(Shape {
        seed,
        hosts: 2 + (seed % 5) as usize,
        max_turns: 4,
    });
    let p = format!("e{k}-");
    let ren = |id: &str| prefixed(&p, id);
    let ren_opt = |id: &Option<String>| id.as_deref().map(ren);
    let mut events = Vec::with_capacity(g.events.len() + 2);
    let (mut windows, mut lost_streams, mut calls, mut threads) = (0, 0, 0, 0);
    let mut responses_with_calls = std::collections::HashSet::new();
    for ev in &g.events {
        let kind = match &ev.kind {
            EventKind::StreamOpen {
                stream,
                client,
                transport,
                thread,
                host,
            } => {
                threads += usize::from(thread.is_some());
                EventKind::StreamOpen {
                    stream: ren(stream),
                    client: *client,
                    transport: *transport,
                    thread: ren_opt(thread),
                    host: host
                        .clone()
                        .or_else(|| known_hosts.then(|| "h0".to_string())),
                }
            }
            EventKind::Request {
                stream,
                request,
                previous_response,
                outputs,
            } => EventKind::Request {
                stream: ren(stream),
                request: ren(request),
                previous_response: ren_opt(previous_response),
                outputs: outputs.iter().map(|o| ren(o)).collect(),
            },
            EventKind::ResponseStart {
                stream,
                response,
                request,
                model,
            } => EventKind::ResponseStart {
                stream: ren(stream),
                response: ren(response),
                request: ren_opt(request),
                model: model.clone(),
            },
            EventKind::ToolCall {
                stream,
                response,
                call,
                item,
                name,
                namespace,
                kind,
            } => {
                calls += 1;
                if responses_with_calls.insert(response.clone()) {
                    windows += 1;
                }
                EventKind::ToolCall {
                    stream: ren(stream),
                    response: ren(response),
                    call: ren(call),
                    item: ren_opt(item),
                    name: name.clone(),
                    namespace: namespace.clone(),
                    kind: *kind,
                }
            }
            EventKind::ResponseEnd {
                stream,
                response,
                status,
                usage,
                stop_reason,
            } => EventKind::ResponseEnd {
                stream: ren(stream),
                response: ren(response),
                status: *status,
                usage: *usage,
                stop_reason: *stop_reason,
            },
            EventKind::StreamClose { stream } => EventKind::StreamClose {
                stream: ren(stream),
            },
            EventKind::ObservationLost { stream, reason } => {
                lost_streams += 1;
                EventKind::ObservationLost {
                    stream: ren(stream),
                    reason: reason.clone(),
                }
            }
            EventKind::McpStart {
                interval,
                alias,
                tool,
                start,
                host,
                transport,
            } => EventKind::McpStart {
                interval: ren(interval),
                alias: alias.clone(),
                tool: tool.clone(),
                start: start + offset,
                host: host.clone(),
                transport: *transport,
            },
            EventKind::McpInterval {
                interval,
                alias,
                tool,
                start,
                end,
                outcome,
                hints,
                host,
                rounds,
                transport,
            } => {
                let mut hints = hints.clone();
                hints.tool_use_id = ren_opt(&hints.tool_use_id);
                hints.item_id = ren_opt(&hints.item_id);
                hints.call_id = ren_opt(&hints.call_id);
                hints.thread = ren_opt(&hints.thread);
                EventKind::McpInterval {
                    interval: ren(interval),
                    alias: alias.clone(),
                    tool: tool.clone(),
                    start: start + offset,
                    end: end + offset,
                    outcome: *outcome,
                    hints,
                    host: host.clone(),
                    rounds: *rounds,
                    transport: *transport,
                }
            }
        };
        events.push(Event {
            t: ev.t + offset,
            kind,
        });
    }
    // Every window has expired (or closed, or broken) by `max_window` after the last event,
    // and every candidate's give-up wait is shorter than the margin.
    let last = events.last().map_or(offset, |e| e.t);
    let idle_at = last + MAX_WINDOW + 1000.0;
    let idle = ren("idle");
    events.push(Event {
        t: idle_at,
        kind: EventKind::StreamOpen {
            stream: idle.clone(),
            client: Client::Other,
            transport: Transport::Http,
            thread: None,
            host: None,
        },
    });
    events.push(Event {
        t: idle_at,
        kind: EventKind::StreamClose { stream: idle },
    });
    Epoch {
        events,
        windows,
        lost_streams,
        calls,
        threads,
    }
}

fn lines(records: &[Record]) -> String {
    records.iter().map(Record::to_line).collect()
}

/// A call that runs through the whole run: it starts before the first epoch (so inside no
/// window) and ends after the last, with a host no stream has (every stream's host is known
/// in such a run) and a `thread` hint no stream has. No window can contain it (it is longer
/// than `max_window`), and a loss counts for it only under `--candidates all`, where every
/// loss does (docs/design.md §4 rule 1): `no_window`, or `incomplete` under `all`, however
/// long ago the windows and losses of its time were dropped.
struct LongCall {
    start: Millis,
    end: Millis,
}

impl LongCall {
    const HOST: &str = "h-long";
    const THREAD: &str = "th-long";

    fn start_event(&self) -> Event {
        Event {
            t: self.start,
            kind: EventKind::McpStart {
                interval: "long".into(),
                alias: "probe".into(),
                tool: "echo".into(),
                start: self.start,
                host: Some(Self::HOST.into()),
                transport: correlator::McpTransport::Stdio,
            },
        }
    }

    fn end_event(&self) -> Event {
        Event {
            t: self.end,
            kind: EventKind::McpInterval {
                interval: "long".into(),
                alias: "probe".into(),
                tool: "echo".into(),
                start: self.start,
                end: self.end,
                outcome: correlator::Outcome::Result,
                hints: correlator::Hints {
                    thread: Some(Self::THREAD.into()),
                    ..correlator::Hints::default()
                },
                host: Some(Self::HOST.into()),
                rounds: None,
                transport: correlator::McpTransport::Stdio,
            },
        }
    }

    /// The rule's answer: `incomplete` when a loss counts (any, under `--candidates all`;
    /// none else, since every stream's host differs from its own), else `no_window`.
    fn expected(epochs: &[Epoch], candidates: Candidates) -> Option<correlator::records::Reason> {
        use correlator::records::Reason;
        let lost = epochs.iter().any(|e| e.lost_streams > 0);
        Some(if lost && candidates == Candidates::All {
            Reason::Incomplete
        } else {
            Reason::NoWindow
        })
    }
}

fn run(candidates: Candidates, long_call: bool) {
    let config = Config {
        close_wait: 10.0,
        window_open: WindowOpen::Call,
        max_window: MAX_WINDOW,
        late_allowance: ALLOWANCE,
        candidates,
    };
    let mut epochs = Vec::new();
    // Room before the first epoch for the long call's start.
    let mut offset = 1000.0;
    let mut k = 0;
    while offset < HOURS {
        let e = epoch(k, 0x28_0000 + k as u64, offset, long_call);
        // The next epoch starts more than `max_window` after this one's last event.
        offset = e.events.last().map_or(offset, |ev| ev.t) + 1.0;
        epochs.push(e);
        k += 1;
    }

    let long = LongCall {
        start: 10.0,
        end: epochs
            .last()
            .and_then(|e| e.events.last())
            .map_or(0.0, |ev| ev.t)
            + 5000.0,
    };

    let mut c = Correlator::new(config.clone());
    let mut out = Vec::new();
    if long_call {
        c.push(&long.start_event(), &mut out);
    }
    let mut seen_incomplete = 0usize;
    let mut total = 0usize;
    let mut held_at_ends: Vec<Held> = Vec::new();
    for (k, e) in epochs.iter().enumerate() {
        let before = out.len();
        for ev in &e.events {
            c.push(ev, &mut out);
        }
        // Decided up to the idle event (decisions at its own time come with the next push,
        // or at finish): compare after letting time reach it.
        c.advance(e.events.last().map_or(0.0, |ev| ev.t) + 0.25, &mut out);
        let got = lines(&out[before..]);
        let want = lines(&reference(&e.events, &config));
        assert_eq!(
            got, want,
            "epoch {k} ({candidates:?}): the long run's records differ from the epoch's alone"
        );
        total += out.len() - before;
        seen_incomplete += out[before..]
            .iter()
            .filter(|r| r.reason == Some(correlator::records::Reason::Incomplete))
            .count();
        let held = c.held();
        assert_eq!(
            held.pending, 0,
            "epoch {k}: everything is decided by its idle event"
        );
        held_at_ends.push(held);
    }
    if long_call {
        c.push(&long.end_event(), &mut out);
        c.finish(&mut out);
        let r = out.pop().expect("the long call's record");
        assert_eq!(&*r.interval, "long");
        assert_eq!(
            r.reason,
            LongCall::expected(&epochs, candidates),
            "the call that ran through the whole run ({candidates:?})"
        );
    }
    c.finish(&mut out);
    assert_eq!(out.len(), total, "nothing was left for the end");
    assert!(total > 1000, "only {total} intervals in the run");
    assert!(
        seen_incomplete < total,
        "every answer was incomplete: nothing was checked"
    );

    // What it holds at the end of an epoch: at most what the epochs of the last `retain` +
    // `max_window` (and the current one) opened, whatever came before. An epoch lasts more
    // than `max_window`, so that is this epoch and the two before it.
    let keep = 3;
    for (k, held) in held_at_ends.iter().enumerate() {
        let recent = &epochs[k.saturating_sub(keep - 1)..=k];
        let windows: usize = recent.iter().map(|e| e.windows).sum();
        let lost: usize = recent.iter().map(|e| e.lost_streams).sum();
        let calls: usize = recent.iter().map(|e| e.calls).sum();
        let threads: usize = recent.iter().map(|e| e.threads).sum();
        let msg = format!("epoch {k} of {}: {held:?}", epochs.len());
        assert!(
            held.windows <= windows,
            "windows beyond the recent ones: {msg}"
        );
        assert!(
            held.broken <= windows,
            "broken windows kept too long: {msg}"
        );
        assert!(held.lost <= lost, "lost spans kept too long: {msg}");
        assert!(held.ids <= 2 * calls, "call ids kept too long: {msg}");
        assert!(
            held.threads_awaiting <= threads + windows,
            "threads kept too long: {msg}"
        );
    }
    eprintln!(
        "{candidates:?}: {} epochs, {} events, {total} intervals ({seen_incomplete} incomplete); \
         held at the last epoch's end: {:?}",
        epochs.len(),
        epochs.iter().map(|e| e.events.len()).sum::<usize>(),
        held_at_ends.last()
    );
}

#[test]
fn hours_of_traffic_keep_their_answers_and_bounded_state() {
    run(Candidates::Eligible, false);
}

#[test]
fn hours_of_traffic_keep_their_answers_and_bounded_state_under_candidates_all() {
    run(Candidates::All, false);
}

/// The same with a call running all along: it holds nothing back (the state bound is the
/// same), the epochs' answers are the same (it started inside no window), and it is judged by
/// the rule, though every window and loss of its time was dropped long before its report.
#[test]
fn a_call_running_through_hours_of_traffic_is_judged_by_the_rule() {
    run(Candidates::Eligible, true);
    run(Candidates::All, true);
}
