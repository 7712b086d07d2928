//! Text from the input, made safe and readable: HTML escaping, times for people, and the
//! hover titles and find strings of windows and intervals.

use std::fmt::Write;

use correlator::json::push_ms;
use correlator::Millis;

use crate::model::{Category, Timeline, Window, WindowEnd, NEAR_MAX};

/// Escapes text for HTML and SVG, in element content and in quoted attributes alike. Control
/// characters (never valid in XML) become U+FFFD.
pub(super) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\n' | '\t' => out.push(c),
            c if c.is_control() => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// A time in milliseconds for people: whole as in records (`7187`), else to two decimals
/// (`540.28`, never `540.281971`).
pub(super) fn ms(t: Millis) -> String {
    let mut rounded = (t * 100.0).round() / 100.0;
    if rounded == 0.0 {
        rounded = 0.0; // not `-0`
    }
    let mut s = String::new();
    push_ms(&mut s, rounded);
    s
}

/// A time for axis labels and headings: seconds, or minutes and seconds past a minute.
pub(super) fn clock(t: Millis, step: Millis) -> String {
    // As many decimals as the step needs: 0.25 s steps get two, 2 s steps none.
    let decimals = (0..3)
        .find(|d| {
            let v = step / 1000.0 * 10f64.powi(*d as i32);
            (v - v.round()).abs() < 1e-6
        })
        .unwrap_or(3);
    let scale = 10f64.powi(decimals as i32);
    let mut secs = (t / 1000.0 * scale).round() / scale;
    if secs == 0.0 {
        secs = 0.0; // a tick a hair before the start reads `0s`, not `-0s`
    }
    if secs.abs() >= 60.0 {
        let m = (secs / 60.0).floor();
        let s = secs - m * 60.0;
        let width = if decimals == 0 { 2 } else { decimals + 3 };
        format!("{m:.0}m{s:0width$.decimals$}s")
    } else {
        format!("{secs:.decimals$}s")
    }
}

pub(super) fn window_title(tl: &Timeline, w: &Window) -> String {
    let mut t = format!("window of response {} · stream {}", w.response, w.stream);
    match &w.thread {
        Some(th) => {
            let _ = write!(t, " · thread {th}");
        }
        None => t.push_str(" · thread unknown"),
    }
    let _ = write!(
        t,
        "\nopen {} ms (first client tool call complete)",
        ms(w.open)
    );
    if w.calls > 0 {
        let _ = write!(t, " · {} tool call(s)", w.calls);
        if !w.names.is_empty() {
            let _ = write!(t, ": {}", w.names.join(", "));
        }
    }
    if let Some(c) = w.completed_at {
        let _ = write!(t, "\nresponse completed {} ms", ms(c));
    }
    if let Some(m) = &w.model {
        let _ = write!(t, "\nmodel {m}");
    }
    if let Some(u) = &w.usage {
        let counts: Vec<String> = [
            ("input", u.input),
            ("output", u.output),
            ("cache read", u.cache_read),
            ("cache creation", u.cache_creation),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| format!("{k} {v}")))
        .collect();
        if !counts.is_empty() {
            let _ = write!(t, "\ntokens: {}", counts.join(" · "));
        }
    }
    if let Some(s) = w.stop {
        let _ = write!(t, "\nstop reason {s}");
    }
    match w.end {
        WindowEnd::Closed(c) => {
            let _ = write!(
                t,
                "\nclosed {} ms by request {} ({} ms long)",
                ms(c),
                w.request.as_deref().unwrap_or("?"),
                ms(c - w.open)
            );
        }
        WindowEnd::Broken(b, why) => {
            let _ = write!(t, "\nbroken {} ms: {}", ms(b), why.describe());
        }
        WindowEnd::Open => t.push_str(if tl.from_trace {
            "\nstill open when the trace ends"
        } else {
            "\nclose not known"
        }),
    }
    t
}

pub(super) fn mark_title(tl: &Timeline, mi: usize) -> String {
    let m = &tl.marks[mi];
    let r = &tl.records[m.record];
    let mut t = format!(
        "interval {} · {}/{}\nran {}–{} ms ({} ms)",
        r.interval,
        r.alias,
        r.tool,
        ms(r.start),
        ms(r.end),
        ms(r.end - r.start)
    );
    match (&r.reason, &r.window) {
        (None, Some(w)) => {
            let _ = write!(
                t,
                "\nattributed to response {} (stream {}, thread {})\nevidence: {}",
                w.response,
                w.stream,
                w.thread.as_deref().unwrap_or("unknown"),
                r.evidence
                    .iter()
                    .map(|e| e.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        (Some(reason), _) => {
            let _ = write!(t, "\nabstained: {reason}");
            if !m.near.is_empty() {
                let names: Vec<&str> = m
                    .near
                    .iter()
                    .take(NEAR_MAX)
                    .map(|i| tl.windows[*i].response.as_str())
                    .collect();
                let _ = write!(t, "\nwindows open at its start: {}", names.join(", "));
                if m.near.len() > NEAR_MAX {
                    t.push_str(" and more");
                }
            }
        }
        (None, None) => {}
    }
    let _ = write!(
        t,
        "\ncandidates {} · decided at {} ms",
        r.candidates,
        ms(r.decided_at)
    );
    t
}

/// What started a subagent lane, for its hover title: the parent's spawn call when the
/// trace says which one, else every candidate (parallel subagents).
pub(super) fn started_by_text(parent: &str, spawned_by: &[String]) -> String {
    match spawned_by {
        [] => parent.to_owned(),
        [one] => format!("{one} of {parent}"),
        several => format!(
            "one of the {} calls {} of {parent} (the trace does not say which)",
            several.len(),
            several.join(", ")
        ),
    }
}

/// The text beside an interval: its tool and its decision, in full.
pub(super) fn mark_label(r: &correlator::Record) -> String {
    format!("{} · {}", r.tool, Category::of(r).word())
}

/// Seconds for the zoom inputs, to the millisecond.
pub(super) fn secs(t: Millis) -> String {
    format!("{:.3}", t / 1000.0)
}

/// What the find box matches an interval by: its id, alias, tool, decision and lane.
pub(super) fn find_text(tl: &Timeline, mi: usize) -> String {
    let m = &tl.marks[mi];
    let r = &tl.records[m.record];
    format!(
        "{} {}/{} {} {}",
        r.interval,
        r.alias,
        r.tool,
        Category::of(r).word(),
        tl.lanes[m.lane].key.label()
    )
    .to_lowercase()
}
