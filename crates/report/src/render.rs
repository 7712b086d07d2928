//! The timeline as one self-contained HTML page: inline CSS and SVG and one small inline script
//! (zoom and find; the page reads fully without it), no network.
//!
//! Readable by a person at any window width: the drawing keeps its size (text never below
//! 11 px; the page scrolls sideways rather than shrink it), every interval is labelled with its
//! tool and decision in full, placed so that no label is cut by the drawing's edges, windows
//! carry the names of their calls when they fit, subagent lanes sit under their parent's lane
//! (see [`super::model::SPAWN_TOOLS`]), and a list of every call follows each timeline. The
//! script zooms a timeline to a range (typed, dragged, a turn or a window clicked, or given in
//! the address as `#t=FROM,TO` in seconds, as W3C Media Fragments write a time range) by laying
//! its elements out again from their `data-` times with the same rules as here, and finds calls
//! by tool, alias, decision, thread or id.
//!
//! Readable at any size: up to [`DETAIL_MAX`] intervals every window and interval is drawn,
//! split into time pages of at most [`PAGE_SIZE`] intervals, each page with its own SVG and
//! time axis, so marks stay wide enough to see and hover. Past that, lanes collapse to density
//! strips: the run is cut into [`BINS`] time bins and each lane shows, per bin, how many windows
//! were open and a stacked column of interval counts by decision; only the first
//! [`TABLE_MAX`] abstentions are listed by id. Thread lanes past [`MAX_LANES`]
//! ([`MAX_DENSITY_LANES`] when aggregated) share one lane; the unattributed lane always stays
//! on its own. The file size is then bounded by lanes × bins, not by the number of intervals
//! (about 0.4 MB for 10,000 intervals on 49 threads).
//!
//! Everything that comes from the input (ids, aliases, tool names, reasons) is data: it is
//! escaped before it goes into HTML or SVG.

use std::fmt::Write;

use correlator::json::push_ms;
use correlator::records::Summary;
use correlator::Millis;

use super::model::{Category, LaneKey, Lost, Timeline, TurnStart, Window, WindowEnd, NEAR_MAX};

/// Most intervals drawn one by one; more are aggregated.
pub(crate) const DETAIL_MAX: usize = 1500;
/// Most windows drawn one by one; more are aggregated.
pub(crate) const DETAIL_MAX_WINDOWS: usize = 3000;
/// Intervals per time page in the detailed view.
pub(crate) const PAGE_SIZE: usize = 120;
/// Time bins of the aggregated view.
pub(crate) const BINS: usize = 100;
/// Thread lanes drawn on their own in the detailed view; the rest share one.
pub(crate) const MAX_LANES: usize = 40;
/// Thread lanes drawn on their own in the aggregated view; the rest share one.
pub(crate) const MAX_DENSITY_LANES: usize = 24;
/// Abstentions listed by id in the aggregated view.
pub(crate) const TABLE_MAX: usize = 200;

const WIDTH: f64 = 1360.0;
const LABEL_W: f64 = 200.0;
const RIGHT_PAD: f64 = 24.0;
const AXIS_H: f64 = 26.0;
const WIN_ROW: f64 = 21.0;
const MARK_ROW: f64 = 16.0;
const LANE_PAD: f64 = 9.0;

/// The colour of each decision category, in [`Category::ALL`] order.
const COLOURS: [&str; 6] = [
    "#2e8540", // attributed
    "#7a7a7a", // incomplete
    "#e07b00", // ambiguous
    "#8e44ad", // unclosed
    "#d62728", // identity_conflict
    "#1f6fb5", // no_window
];

fn colour(c: Category) -> &'static str {
    COLOURS[c.index()]
}

/// Escapes text for HTML and SVG, in element content and in quoted attributes alike. Control
/// characters (never valid in XML) become U+FFFD.
pub(crate) fn esc(s: &str) -> String {
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
fn ms(t: Millis) -> String {
    let mut rounded = (t * 100.0).round() / 100.0;
    if rounded == 0.0 {
        rounded = 0.0; // not `-0`
    }
    let mut s = String::new();
    push_ms(&mut s, rounded);
    s
}

/// A time for axis labels and headings: seconds, or minutes and seconds past a minute.
fn clock(t: Millis, step: Millis) -> String {
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

/// A tick step of 1, 2 or 5 × 10^k ms (or whole minutes, past half a minute) giving about
/// `n` ticks over `span`.
fn tick_step(span: Millis, n: f64) -> Millis {
    let raw = (span / n).max(1e-3);
    if raw > 30_000.0 {
        let minutes = [
            1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 240.0, 480.0, 1440.0,
        ];
        let m = minutes
            .into_iter()
            .find(|m| m * 60_000.0 >= raw)
            .unwrap_or(1440.0);
        return m * 60_000.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * p >= raw {
            return m * p;
        }
    }
    10.0 * p
}

struct Scale {
    t0: Millis,
    t1: Millis,
}

impl Scale {
    fn plot_w() -> f64 {
        WIDTH - LABEL_W - RIGHT_PAD
    }
    fn x(&self, t: Millis) -> f64 {
        let t = t.clamp(self.t0, self.t1);
        LABEL_W + (t - self.t0) / (self.t1 - self.t0) * Self::plot_w()
    }
}

/// Greedy row packing: each item (pixel extent) goes on the first row whose last item ends
/// before it starts. Returns each item's row and the number of rows.
fn pack(extents: &[(f64, f64)]) -> (Vec<usize>, usize) {
    let mut order: Vec<usize> = (0..extents.len()).collect();
    order.sort_by(|a, b| extents[*a].0.total_cmp(&extents[*b].0));
    let mut row_end: Vec<f64> = Vec::new();
    let mut rows = vec![0; extents.len()];
    for i in order {
        let (a, b) = extents[i];
        match row_end.iter().position(|e| *e + 2.0 <= a) {
            Some(r) => {
                row_end[r] = b;
                rows[i] = r;
            }
            None => {
                row_end.push(b);
                rows[i] = row_end.len() - 1;
            }
        }
    }
    (rows, row_end.len())
}

/// The page's style sheet (a file of its own, so that it reads and diffs as CSS).
const CSS: &str = include_str!("../assets/timeline.css");

/// One trace's records (and the trace, when given), drawn on their own.
pub struct Section {
    /// The trace the records name (records v1 `trace`), or `None` when they name none.
    pub name: Option<String>,
    pub timeline: Timeline,
    /// Where its records and trace were read from, for the page to say.
    pub sources: Vec<String>,
    /// Said above its timeline when set (a trace that may not be the records' own).
    pub warning: Option<String>,
}

fn is_aggregated(tl: &Timeline) -> bool {
    tl.records.len() > DETAIL_MAX || tl.windows.len() > DETAIL_MAX_WINDOWS
}

fn summary_of<'a>(records: impl Iterator<Item = &'a correlator::Record>) -> Summary {
    let mut summary = Summary::default();
    for r in records {
        summary.add(r);
    }
    summary
}

/// Writes the whole page: one timeline per section, each with its own lanes, time axis and
/// counts, so that records of different traces are never drawn as one run.
pub fn render(sections: &[Section]) -> String {
    let mut out = String::with_capacity(64 * 1024);
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n");
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\n");
    out.push_str("<title>windowtap timeline</title>\n<style>");
    out.push_str(CSS);
    out.push_str("</style>\n</head>\n<body>\n<h1>windowtap timeline</h1>\n");
    out.push_str(FIND);
    if let [only] = sections {
        let tl = &only.timeline;
        warning(&mut out, only);
        meta_line(&mut out, tl, &only.sources);
        unreported(&mut out, tl);
        summary_table(&mut out, &summary_of(tl.records.iter()));
        legend(&mut out, is_aggregated(tl));
        view(&mut out, tl);
    } else {
        let _ = writeln!(
            out,
            "<p class=\"meta\">{} traces, each drawn on its own below</p>",
            sections.len()
        );
        summary_table(
            &mut out,
            &summary_of(sections.iter().flat_map(|s| s.timeline.records.iter())),
        );
        legend(
            &mut out,
            sections.iter().all(|s| is_aggregated(&s.timeline)),
        );
        for s in sections {
            let name = s.name.as_deref().unwrap_or("(records that name no trace)");
            let _ = writeln!(
                out,
                "<h2 class=\"trace\" data-trace=\"{}\">trace {}</h2>",
                esc(name),
                esc(name)
            );
            warning(&mut out, s);
            meta_line(&mut out, &s.timeline, &s.sources);
            unreported(&mut out, &s.timeline);
            summary_table(&mut out, &summary_of(s.timeline.records.iter()));
            view(&mut out, &s.timeline);
        }
    }
    out.push_str("<script>");
    out.push_str(SCRIPT);
    out.push_str("</script>\n</body>\n</html>\n");
    out
}

fn warning(out: &mut String, s: &Section) {
    if let Some(w) = &s.warning {
        let _ = writeln!(out, "<p class=\"warning\">warning: {}</p>", esc(w));
    }
}

/// How many of the model's tool calls to MCP tools no wrapper reported (they have no interval,
/// so nothing else on the page shows them), in the words the relay's stop uses, with the lanes
/// they were made on; or, without the trace, that the count needs it.
fn unreported(out: &mut String, tl: &Timeline) {
    let Some(u) = &tl.unreported else {
        out.push_str(
            "<p class=\"meta unreported\" data-unreported=\"unknown\">Model tool calls to MCP \
             tools that no wrapper reported: not known without the trace (pass --trace with the \
             run's capture to count them).</p>\n",
        );
        return;
    };
    let Some(text) = u.describe(live::mcp_tally::Setting::Capture) else {
        out.push_str(
            "<p class=\"meta unreported\" data-unreported=\"0\">Every model tool call to an MCP \
             tool in the trace got a wrapper's report.</p>\n",
        );
        return;
    };
    let by_lane = tl
        .unreported_lanes
        .iter()
        .map(|(lane, n)| {
            let l = &tl.lanes[*lane];
            let what = match (l.parent, &l.detail) {
                (Some(p), _) => format!(" (subagent of {})", tl.lanes[p].key.label()),
                (None, Some(d)) => format!(" ({d})"),
                (None, None) => String::new(),
            };
            format!(
                "<span class=\"lane-unreported\" data-lane=\"{}\" data-n=\"{n}\">{}{}: {n}</span>",
                esc(&l.key.label()),
                esc(&l.key.label()),
                esc(&what)
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    let _ = writeln!(
        out,
        "<p class=\"warning unreported\" data-unreported=\"{}\">warning: {}{}</p>",
        u.calls,
        esc(&text),
        if by_lane.is_empty() {
            String::new()
        } else {
            // Reports that named no call take one each off the total, not off a lane.
            let named: usize = tl.unreported_lanes.iter().map(|(_, n)| n).sum();
            let of = if named > u.calls {
                " (of the calls no report named; reports that named no call may account for \
                 some of them)"
            } else {
                ""
            };
            format!("<br/>By thread{of}: {by_lane}")
        }
    );
}

fn meta_line(out: &mut String, tl: &Timeline, sources: &[String]) {
    let _ = writeln!(
        out,
        "<p class=\"meta\">{} · {} lanes · {} windows{} · {} to {}</p>",
        sources
            .iter()
            .map(|s| esc(s))
            .collect::<Vec<_>>()
            .join(" + "),
        tl.lanes.len(),
        tl.windows.len(),
        if tl.from_trace {
            " (every window, from the trace)"
        } else {
            " (attributed windows only: pass --trace for all)"
        },
        ms(tl.t0) + " ms",
        ms(tl.t1) + " ms",
    );
}

fn view(out: &mut String, tl: &Timeline) {
    if is_aggregated(tl) {
        aggregated_view(out, tl);
    } else {
        detailed_view(out, tl);
        calls_table(out, tl);
    }
}

fn summary_table(out: &mut String, s: &Summary) {
    // One row of counts, one column per decision: compact, and the colours double as legend.
    let mut head = String::from("<tr><th>intervals</th>");
    let mut row = format!(
        "<tr><td class=\"n\" data-count=\"total\">{}</td>",
        s.total()
    );
    for c in Category::ALL {
        let n = match c {
            Category::Attributed => s.attributed,
            Category::Abstained(r) => {
                s.abstained[correlator::records::Reason::ALL
                    .iter()
                    .position(|x| *x == r)
                    .unwrap_or(0)]
            }
        };
        let label = match c {
            Category::Attributed => "attributed".to_string(),
            Category::Abstained(r) => format!("abstained: {r}"),
        };
        let _ = write!(
            head,
            "<th><span class=\"sw\" style=\"background:{}\"></span>{label}</th>",
            colour(c)
        );
        let _ = write!(row, "<td class=\"n\" data-count=\"{}\">{n}</td>", c.word());
    }
    let _ = writeln!(
        out,
        "<table class=\"summary\">{head}</tr>\n{row}</tr></table>"
    );
}

fn legend(out: &mut String, aggregated: bool) {
    out.push_str("<div class=\"legend\">");
    let item = |out: &mut String, svg: &str, text: &str| {
        let _ = write!(
            out,
            "<span><svg width=\"30\" height=\"14\" viewBox=\"0 0 30 14\">{svg}</svg>{text}</span>"
        );
    };
    item(
        out,
        "<rect x=\"1\" y=\"2\" width=\"28\" height=\"10\" fill=\"#cfe0ef\" stroke=\"#4a7fa7\"/>",
        "window: first tool call complete → continuation",
    );
    item(
        out,
        "<rect x=\"1\" y=\"2\" width=\"28\" height=\"10\" fill=\"#cfe0ef\" stroke=\"#4a7fa7\"/><line x1=\"12\" y1=\"3\" x2=\"12\" y2=\"11\" stroke=\"#4a7fa7\" stroke-dasharray=\"2 1\"/>",
        "response completed",
    );
    item(
        out,
        "<rect x=\"1\" y=\"2\" width=\"28\" height=\"10\" fill=\"#f6d5d5\" stroke=\"#b22\" stroke-dasharray=\"3 2\"/>",
        "broken window",
    );
    item(
        out,
        "<rect x=\"1\" y=\"2\" width=\"28\" height=\"10\" fill=\"#eceff1\" stroke=\"#999\" stroke-dasharray=\"1 2\"/>",
        "window still open at the end",
    );
    item(
        out,
        "<path d=\"M15 1 L15 13\" stroke=\"#d00\" stroke-width=\"2\"/><path d=\"M11 1 L19 1 L15 6 Z\" fill=\"#d00\"/>",
        "observation lost",
    );
    if !aggregated {
        item(
            out,
            "<path d=\"M15 1 L15 13\" stroke=\"#33475b\" stroke-width=\"1.5\" stroke-dasharray=\"5 3\"/><path d=\"M15 1 L21 4 L15 7 Z\" fill=\"#33475b\"/>",
            "turn starts (a request that continues no response with a tool call)",
        );
    }
    if aggregated {
        out.push_str("<span>columns: intervals per time bin, stacked by decision; shade: windows open</span>");
    } else {
        out.push_str("<span>hover any bar for times and evidence</span>");
    }
    out.push_str("</div>\n");
}

fn window_title(tl: &Timeline, w: &Window) -> String {
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

fn mark_title(tl: &Timeline, mi: usize) -> String {
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

fn axis(out: &mut String, sc: &Scale, height: f64) {
    let step = tick_step(sc.t1 - sc.t0, 10.0);
    let mut t = (sc.t0 / step).ceil() * step;
    let mut n = 0;
    while t <= sc.t1 && n < 40 {
        let x = sc.x(t);
        let _ = write!(
            out,
            "<line x1=\"{x:.1}\" y1=\"{a:.1}\" x2=\"{x:.1}\" y2=\"{height:.1}\" stroke=\"#e4e7eb\"/>\
             <text x=\"{x:.1}\" y=\"{y:.1}\" font-size=\"11\" fill=\"#555\" text-anchor=\"middle\">{}</text>",
            clock(t, step),
            a = AXIS_H - 6.0,
            y = AXIS_H - 10.0,
        );
        t += step;
        n += 1;
    }
}

/// The most characters of a lane label drawn: at 12 px, wider characters than average
/// included, they end before the plot starts at [`LABEL_W`] (fewer for a nested lane, which
/// is indented).
pub(crate) const LABEL_CHARS: usize = 24;

/// How far each level of subagent nesting indents a lane's label.
const INDENT: f64 = 14.0;

/// What started a subagent lane, for its hover title: the parent's spawn call when the
/// trace says which one, else every candidate (parallel subagents).
fn started_by_text(parent: &str, spawned_by: &[String]) -> String {
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

fn lane_label(out: &mut String, label: &str, depth: usize, y: f64, h: f64) {
    // Long ids (a pseudonym is 32 hex digits) are shortened on screen; the full label is in
    // the hover title. A subagent's label is indented under its parent's and marked `↳`.
    let depth = depth.min(4);
    let chars = LABEL_CHARS - 2 * depth;
    let mut shown: String = if label.chars().count() > chars {
        label.chars().take(chars - 1).collect::<String>() + "…"
    } else {
        label.to_string()
    };
    if depth > 0 {
        // The arrow takes the room of the indent's first step.
        shown = format!("↳ {shown}");
    }
    let _ = write!(
        out,
        "<text class=\"lane-label\" x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\" fill=\"#222\"><title>{}</title>{}</text>",
        8.0 + depth as f64 * INDENT,
        y + h / 2.0 + 4.0,
        esc(label),
        esc(&shown)
    );
}

/// A mark across a lane (`y`, height `h`) at time `t` (drawn at `x`): a vertical line drawn
/// with `line` (its SVG stroke attributes) and a triangular flag at its top (`flag`, relative
/// to the line), filled with `colour`, under a hover `title` that is already escaped. Drawn
/// at x = 0 and moved by a transform, so that zooming moves it as one.
#[allow(clippy::too_many_arguments)]
fn lane_marker(
    out: &mut String,
    class: &str,
    title: &str,
    (t, x): (Millis, f64),
    (y, h): (f64, f64),
    line: &str,
    flag: [(f64, f64); 3],
    colour: &str,
) {
    let [(ax, ay), (bx, by), (cx, cy)] = flag;
    let _ = write!(
        out,
        "<g class=\"{class}\" data-t=\"{}\" transform=\"translate({x:.1} 0)\"><title>{title}</title><line x1=\"0\" y1=\"{:.1}\" x2=\"0\" y2=\"{:.1}\" {line}/><path d=\"M{ax:.1} {ay:.1} L{bx:.1} {by:.1} L{cx:.1} {cy:.1} Z\" fill=\"{colour}\"/></g>",
        ms(t),
        y + 1.0,
        y + h - 1.0,
    );
}

/// About how wide `s` is drawn, at `per_char` pixels a character.
fn text_width(s: &str, per_char: f64) -> f64 {
    per_char * s.chars().count() as f64
}

/// Pixels per character of the 11 px labels, wide enough for hex ids and capitals.
const LABEL_CHAR_W: f64 = 7.0;

/// The text beside an interval: its tool and its decision, in full.
fn mark_label(r: &correlator::Record) -> String {
    format!("{} · {}", r.tool, Category::of(r).word())
}

/// A label's x, whether it is anchored at its end, and the extent of mark and label.
type Place = (f64, bool, (f64, f64));

/// Where a mark's label goes: inside the mark when it fits, else right of it, else (near the
/// plot's right edge) left of it, so that it is never cut off. Returns the label's x, whether
/// it is anchored at its end, and the pixel extent of mark and label together. The page's
/// script places labels the same way when it zooms.
fn label_place(a: f64, b: f64, w: f64) -> Place {
    let right_edge = WIDTH - 2.0;
    if b - a >= w + 6.0 {
        (a + 3.0, false, (a, b))
    } else if b + 3.0 + w <= right_edge || a - 3.0 - w < LABEL_W {
        (b + 3.0, false, (a, b + 3.0 + w))
    } else {
        (a - 3.0, true, (a - 3.0 - w, b))
    }
}

/// Lanes as drawn: the first `max` thread lanes each on their own, the rest of the
/// threads sharing one, and the unattributed lane always on its own, last.
struct Slots {
    /// Drawn slot of each lane of the timeline.
    of: Vec<usize>,
    labels: Vec<String>,
    details: Vec<Option<String>>,
    /// Subagent nesting of each slot (0: a top-level thread).
    depths: Vec<usize>,
    /// The label of each slot's parent lane, for a subagent's.
    parents: Vec<Option<String>>,
    /// What started each slot's subagent lane (its hover title).
    started_by: Vec<Option<String>>,
}

impl Slots {
    fn new(tl: &Timeline, max: usize) -> Slots {
        let mut of = Vec::with_capacity(tl.lanes.len());
        let mut labels: Vec<String> = Vec::new();
        let mut details = Vec::new();
        let mut depths = Vec::new();
        let mut parents = Vec::new();
        let mut started_by = Vec::new();
        let threads = tl
            .lanes
            .iter()
            .filter(|l| l.key != LaneKey::Unattributed)
            .count();
        let merged = threads.saturating_sub(max);
        let mut merged_slot = None;
        for lane in &tl.lanes {
            if lane.key == LaneKey::Unattributed || labels.len() < max || merged <= 1 {
                labels.push(lane.key.label());
                details.push(match (lane.parent, &lane.detail) {
                    (Some(_), Some(d)) => Some(format!("subagent · {d}")),
                    (Some(_), None) => Some("subagent".into()),
                    (None, d) => d.clone(),
                });
                started_by.push(
                    lane.parent
                        .map(|p| started_by_text(&tl.lanes[p].key.label(), &lane.spawned_by)),
                );
                parents.push(lane.parent.map(|p| tl.lanes[p].key.label()));
                depths.push(lane.depth);
                of.push(labels.len() - 1);
            } else {
                let slot = *merged_slot.get_or_insert_with(|| {
                    labels.push(format!("… {merged} more lanes"));
                    details.push(None);
                    depths.push(0);
                    parents.push(None);
                    started_by.push(None);
                    labels.len() - 1
                });
                of.push(slot);
            }
        }
        Slots {
            of,
            labels,
            details,
            depths,
            parents,
            started_by,
        }
    }
}

/// Every window and interval, in time pages of at most [`PAGE_SIZE`] intervals.
fn detailed_view(out: &mut String, tl: &Timeline) {
    let mut order: Vec<usize> = (0..tl.marks.len()).collect();
    order.sort_by(|a, b| {
        tl.records[tl.marks[*a].record]
            .start
            .total_cmp(&tl.records[tl.marks[*b].record].start)
    });
    // Page k covers from the start of its first interval (the run's start for the first
    // page) to the start of the next page, widened to hold its own intervals' ends.
    let chunks: Vec<&[usize]> = if order.is_empty() {
        vec![&[][..]]
    } else {
        order.chunks(PAGE_SIZE).collect()
    };
    let pages = chunks.len();
    for (k, chunk) in chunks.iter().enumerate() {
        let from = if k == 0 {
            tl.t0
        } else {
            tl.records[tl.marks[chunk[0]].record].start
        };
        let mut to = if k + 1 < pages {
            tl.records[tl.marks[chunks[k + 1][0]].record].start
        } else {
            tl.t1
        };
        for &mi in chunk.iter() {
            to = to.max(tl.records[tl.marks[mi].record].end);
        }
        let pad = ((to - from) * 0.01).max(0.5);
        let sc = Scale {
            t0: from - pad,
            t1: to + pad,
        };
        let _ = writeln!(
            out,
            "<h2>{}{} ms – {} ms · {} intervals</h2>",
            if pages > 1 {
                format!("Page {} of {} · ", k + 1, pages)
            } else {
                String::new()
            },
            ms(from),
            ms(to),
            chunk.len()
        );
        page(out, tl, &sc, chunk);
    }
}

fn page(out: &mut String, tl: &Timeline, sc: &Scale, marks: &[usize]) {
    let slots = Slots::new(tl, MAX_LANES);
    let mut body = String::new();
    let mut bg = String::new();
    let mut y = AXIS_H;
    for lane in 0..slots.labels.len() {
        if let Some(layout) = LaneLayout::of(tl, sc, &slots, lane, marks) {
            y += layout.draw(&mut body, &mut bg, tl, sc, &slots, lane, y);
        }
    }
    let height = y + 4.0;
    let _ = writeln!(
        out,
        "<div class=\"zoom\">show from <input class=\"z0\" type=\"number\" step=\"any\" value=\"{}\"/> s to <input class=\"z1\" type=\"number\" step=\"any\" value=\"{}\"/> s <button type=\"button\" class=\"zgo\">zoom</button> <button type=\"button\" class=\"zout\">zoom out</button> <button type=\"button\" class=\"zall\">whole page</button> <span class=\"zhint\">or drag across the timeline, click a turn flag (▸) or a window</span></div>",
        secs(sc.t0),
        secs(sc.t1)
    );
    let _ = writeln!(
        out,
        "<div class=\"scroll\"><svg class=\"tl\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height:.0}\" viewBox=\"0 0 {WIDTH} {height:.0}\" data-t0=\"{}\" data-t1=\"{}\" role=\"img\" aria-label=\"timeline\">",
        ms(sc.t0),
        ms(sc.t1)
    );
    out.push_str(&bg);
    out.push_str("<g class=\"axis\">");
    axis(out, sc, height);
    out.push_str("</g>");
    out.push_str(&body);
    out.push_str("</svg></div>\n");
}

/// One lane of a page: what falls in the page's time range, packed in rows (windows above,
/// then intervals with their labels), and the lane's height.
struct LaneLayout<'t> {
    /// MCP calls no wrapper reported on this lane's threads: they have no mark, so the lane
    /// says so.
    unreported: usize,
    turns: Vec<&'t TurnStart>,
    wins: Vec<&'t Window>,
    /// Each window's pixel extent and row.
    wext: Vec<(f64, f64)>,
    wrow: Vec<usize>,
    nwrows: usize,
    /// The intervals (indices into `tl.marks`), each with its extent, label and where the
    /// label goes, and its row.
    ms_here: Vec<usize>,
    placed: Vec<(f64, f64, String, Place)>,
    mrow: Vec<usize>,
    lost: Vec<&'t Lost>,
    h: f64,
}

impl<'t> LaneLayout<'t> {
    /// `None` when nothing of the lane falls in the page's range.
    fn of(
        tl: &'t Timeline,
        sc: &Scale,
        slots: &Slots,
        lane: usize,
        marks: &[usize],
    ) -> Option<LaneLayout<'t>> {
        let in_lane = |l: usize| slots.of[l] == lane;
        let unreported = tl
            .unreported_lanes
            .iter()
            .filter(|(l, _)| in_lane(*l))
            .map(|(_, n)| n)
            .sum();
        let wins: Vec<&Window> = tl
            .windows
            .iter()
            .filter(|w| in_lane(w.lane))
            .filter(|w| w.open <= sc.t1 && w.final_at().unwrap_or(tl.t1) >= sc.t0)
            .collect();
        let ms_here: Vec<usize> = marks
            .iter()
            .copied()
            .filter(|m| in_lane(tl.marks[*m].lane))
            .collect();
        let lost: Vec<_> = tl
            .lost
            .iter()
            .filter(|l| in_lane(l.lane) && l.t >= sc.t0 && l.t <= sc.t1)
            .collect();
        if wins.is_empty() && ms_here.is_empty() && lost.is_empty() {
            return None;
        }
        let turns: Vec<_> = tl
            .turns
            .iter()
            .filter(|s| in_lane(s.lane) && s.t >= sc.t0 && s.t <= sc.t1)
            .collect();
        let wext: Vec<(f64, f64)> = wins
            .iter()
            .map(|w| {
                let a = sc.x(w.open);
                (a, sc.x(w.final_at().unwrap_or(tl.t1)).max(a + 3.0))
            })
            .collect();
        let (wrow, nwrows) = pack(&wext);
        // Each mark with its label (tool and decision), placed where it is never cut off;
        // rows are packed so that no label runs into another mark.
        let placed: Vec<(f64, f64, String, Place)> = ms_here
            .iter()
            .map(|m| {
                let r = &tl.records[tl.marks[*m].record];
                let a = sc.x(r.start);
                let b = sc.x(r.end).max(a + 3.0);
                let label = mark_label(r);
                let w = text_width(&label, LABEL_CHAR_W);
                (a, b, label, label_place(a, b, w))
            })
            .collect();
        let mext: Vec<(f64, f64)> = placed.iter().map(|p| p.3 .2).collect();
        let (mrow, nmrows) = pack(&mext);
        // At least two text lines tall, for the label and its detail (three with a count of
        // unreported calls).
        let min_h = if unreported > 0 { 58.0 } else { 44.0 };
        let h = (LANE_PAD * 2.0 + nwrows as f64 * WIN_ROW + nmrows as f64 * MARK_ROW).max(min_h);
        Some(LaneLayout {
            unreported,
            turns,
            wins,
            wext,
            wrow,
            nwrows,
            ms_here,
            placed,
            mrow,
            lost,
            h,
        })
    }

    /// Draws the lane at `y`: its background into `bg` (under the time grid), everything
    /// else into `body`; returns its height.
    #[allow(clippy::too_many_arguments)]
    fn draw(
        &self,
        body: &mut String,
        bg: &mut String,
        tl: &Timeline,
        sc: &Scale,
        slots: &Slots,
        lane: usize,
        y: f64,
    ) -> f64 {
        let h = self.h;
        let _ = write!(
            bg,
            "<rect x=\"0\" y=\"{y:.1}\" width=\"{WIDTH}\" height=\"{h:.1}\" fill=\"{}\"/>",
            if lane % 2 == 0 { "#f3f6f9" } else { "#ffffff" }
        );
        self.heading(body, slots, lane, y);
        // Turn starts first, under the windows and marks.
        for s in &self.turns {
            let title = format!(
                "turn starts: request {} at {} ms (it continues no response with a tool call) · click to zoom to this turn",
                esc(&s.request),
                ms(s.t)
            );
            let flag = [(0.0, y + 1.0), (7.0, y + 4.5), (0.0, y + 8.0)];
            let line = "stroke=\"#33475b\" stroke-width=\"1.5\" stroke-dasharray=\"5 3\"";
            lane_marker(
                body,
                "turn",
                &title,
                (s.t, sc.x(s.t)),
                (y, h),
                line,
                flag,
                "#33475b",
            );
        }
        self.windows(body, tl, sc, y);
        self.intervals(body, tl, y);
        for l in &self.lost {
            let title = format!(
                "observation lost on stream {} at {} ms ({})",
                esc(&l.stream),
                ms(l.t),
                esc(&l.reason)
            );
            let flag = [(-5.0, y + 1.0), (5.0, y + 1.0), (0.0, y + 7.0)];
            let line = "stroke=\"#d00\" stroke-width=\"2\"";
            lane_marker(
                body,
                "lost",
                &title,
                (l.t, sc.x(l.t)),
                (y, h),
                line,
                flag,
                "#d00",
            );
        }
        body.push_str("</g>\n");
        h
    }

    /// The lane's label (and its detail, the bracket from its parent's lane, the count of
    /// unreported calls) in the label column; opens the lane's group.
    fn heading(&self, body: &mut String, slots: &Slots, lane: usize, y: f64) {
        let h = self.h;
        let depth = slots.depths[lane];
        let _ = write!(
            body,
            "<g class=\"lane\" data-depth=\"{depth}\"{}>",
            slots.parents[lane]
                .as_deref()
                .map(|p| format!(" data-parent=\"{}\"", esc(p)))
                .unwrap_or_default()
        );
        if depth > 0 {
            // A bracket from the parent's lane down to this one, in the label column.
            let x = 8.0 + (depth.min(4) - 1) as f64 * INDENT + 3.0;
            let _ = write!(
                body,
                "<path d=\"M{x:.1} {:.1} L{x:.1} {:.1} L{:.1} {:.1}\" fill=\"none\" stroke=\"#8a9bb0\"/>",
                y,
                y + (h - 14.0) / 2.0,
                x + 6.0,
                y + (h - 14.0) / 2.0
            );
        }
        match &slots.details[lane] {
            Some(d) => {
                lane_label(body, &slots.labels[lane], depth, y, h - 14.0);
                let x = 8.0 + depth.min(4) as f64 * INDENT;
                let chars = ((LABEL_W - 6.0 - x) / 6.4) as usize;
                let shown: String = if d.chars().count() > chars {
                    d.chars().take(chars - 1).collect::<String>() + "…"
                } else {
                    d.clone()
                };
                let full = match &slots.started_by[lane] {
                    Some(p) => format!("{d}: started by {p}"),
                    None => d.clone(),
                };
                let _ = write!(
                    body,
                    "<text class=\"lane-detail\" x=\"{x:.1}\" y=\"{:.1}\" font-size=\"11\" fill=\"#555\"><title>{}</title>{}</text>",
                    y + h / 2.0 + 11.0,
                    esc(&full),
                    esc(&shown)
                );
            }
            None => lane_label(body, &slots.labels[lane], depth, y, h),
        }
        if self.unreported > 0 {
            let n = self.unreported;
            let _ = write!(
                body,
                "<text class=\"lane-noreport\" x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" font-weight=\"600\" fill=\"#b35c00\"><title>model tool calls to MCP tools on this thread that no wrapper reported: no mark shows them (see the warning above)</title>⚠ {n} MCP call{} not reported</text>",
                8.0 + depth.min(4) as f64 * INDENT,
                y + h / 2.0 + 24.0,
                if n == 1 { "" } else { "s" }
            );
        }
    }

    /// Its response windows, each with its completion line and the names of its calls.
    fn windows(&self, body: &mut String, tl: &Timeline, sc: &Scale, y: f64) {
        for (i, w) in self.wins.iter().enumerate() {
            let (a, b) = self.wext[i];
            let wy = y + LANE_PAD + self.wrow[i] as f64 * WIN_ROW;
            let (fill, stroke, dash) = match w.end {
                WindowEnd::Closed(_) => ("#cfe0ef", "#4a7fa7", ""),
                WindowEnd::Broken(..) => ("#f6d5d5", "#b22", " stroke-dasharray=\"4 2\""),
                WindowEnd::Open => ("#eceff1", "#999", " stroke-dasharray=\"1 2\""),
            };
            let _ = write!(
                body,
                "<rect class=\"window\" data-s=\"{}\" data-e=\"{}\" x=\"{a:.1}\" y=\"{wy:.1}\" width=\"{:.1}\" height=\"{:.1}\" rx=\"2\" fill=\"{fill}\" stroke=\"{stroke}\"{dash}><title>{}</title></rect>",
                ms(w.open),
                ms(w.final_at().unwrap_or(tl.t1)),
                b - a,
                WIN_ROW - 4.0,
                esc(&window_title(tl, w))
            );
            if let Some(c) = w.completed_at {
                if c > w.open && c <= sc.t1 && w.final_at().is_none_or(|f| c <= f) {
                    let cx = sc.x(c);
                    let _ = write!(
                        body,
                        "<line class=\"done\" data-t=\"{}\" x1=\"{cx:.1}\" y1=\"{:.1}\" x2=\"{cx:.1}\" y2=\"{:.1}\" stroke=\"#4a7fa7\" stroke-width=\"1\" stroke-dasharray=\"2 1\"/>",
                        ms(c),
                        wy + 1.0,
                        wy + WIN_ROW - 5.0
                    );
                }
            }
            // The names of the calls it holds (else its response id), when they fit; the
            // script shows them as zooming makes room.
            let text = if w.names.is_empty() {
                w.response.clone()
            } else {
                w.names.join(", ")
            };
            let tw = text_width(&text, LABEL_CHAR_W);
            let _ = write!(
                body,
                "<text class=\"wlabel\" data-w=\"{tw:.0}\" x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" fill=\"#234\"{}>{}</text>",
                a + 4.0,
                wy + WIN_ROW - 8.0,
                if b - a > tw + 8.0 {
                    ""
                } else {
                    " display=\"none\""
                },
                esc(&text)
            );
        }
    }

    /// Its intervals, each coloured by its decision and labelled with its tool and decision.
    fn intervals(&self, body: &mut String, tl: &Timeline, y: f64) {
        let my0 = y + LANE_PAD + self.nwrows as f64 * WIN_ROW;
        for (i, &mi) in self.ms_here.iter().enumerate() {
            let r = &tl.records[tl.marks[mi].record];
            let c = Category::of(r);
            let (a, b, label, (lx, end, _)) = &self.placed[i];
            let my = my0 + self.mrow[i] as f64 * MARK_ROW;
            let inside = *lx == a + 3.0 && !end && b - a >= text_width(label, LABEL_CHAR_W) + 6.0;
            let _ = write!(
                body,
                "<g class=\"interval\" data-interval=\"{}\" data-s=\"{}\" data-e=\"{}\" data-find=\"{}\"><title>{}</title><rect x=\"{a:.1}\" y=\"{my:.1}\" width=\"{:.1}\" height=\"{:.1}\" rx=\"1.5\" fill=\"{}\"/>",
                esc(&r.interval),
                ms(r.start),
                ms(r.end),
                esc(&find_text(tl, mi)),
                esc(&mark_title(tl, mi)),
                b - a,
                MARK_ROW - 4.0,
                colour(c)
            );
            // Its tool and decision beside it (or on it, when it is wide enough), in full.
            let _ = write!(
                body,
                "<text class=\"label\" data-w=\"{:.0}\" x=\"{lx:.1}\" y=\"{:.1}\" font-size=\"11\" fill=\"{}\"{}><tspan class=\"tool\" font-weight=\"600\">{}</tspan> · <tspan class=\"decision\">{}</tspan></text>",
                text_width(label, LABEL_CHAR_W),
                my + MARK_ROW - 5.5,
                if inside { "#fff" } else { colour(c) },
                if *end { " text-anchor=\"end\"" } else { "" },
                esc(&r.tool),
                c.word()
            );
            body.push_str("</g>");
        }
    }
}

/// Seconds for the zoom inputs, to the millisecond.
fn secs(t: Millis) -> String {
    format!("{:.3}", t / 1000.0)
}

/// What the find box matches an interval by: its id, alias, tool, decision and lane.
fn find_text(tl: &Timeline, mi: usize) -> String {
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

/// Every call of the timeline, by start: a list to read and to search, each row zooming the
/// timeline to its call when clicked.
fn calls_table(out: &mut String, tl: &Timeline) {
    let mut order: Vec<usize> = (0..tl.marks.len()).collect();
    order.sort_by(|a, b| {
        tl.records[tl.marks[*a].record]
            .start
            .total_cmp(&tl.records[tl.marks[*b].record].start)
    });
    let _ = writeln!(
        out,
        "<h2>Calls ({})</h2>\n<table class=\"list calls\"><tr><th>start ms</th><th>ms</th><th>alias/tool</th><th>decision</th><th>thread</th><th>window</th><th>interval</th></tr>",
        order.len()
    );
    for mi in order {
        let m = &tl.marks[mi];
        let r = &tl.records[m.record];
        let c = Category::of(r);
        let window = match &r.window {
            Some(w) => &*w.response,
            None => "–",
        };
        let _ = writeln!(
            out,
            "<tr data-interval=\"{}\" data-find=\"{}\"><td>{}</td><td>{}</td><td>{}/{}</td><td><span class=\"sw\" style=\"background:{}\"></span>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&r.interval),
            esc(&find_text(tl, mi)),
            ms(r.start),
            ms(r.end - r.start),
            esc(&r.alias),
            esc(&r.tool),
            colour(c),
            c.word(),
            esc(&tl.lanes[m.lane].key.label()),
            esc(window),
            esc(&r.interval)
        );
    }
    out.push_str("</table>\n");
}

/// Density strips: per lane and time bin, windows open and intervals by decision.
///
/// Sized for the worst case (every lane busy in every bin): colours are CSS classes, window
/// shading is quantized and run-length merged, and each non-empty bin has one short title.
fn aggregated_view(out: &mut String, tl: &Timeline) {
    let sc = Scale {
        t0: tl.t0,
        t1: tl.t1,
    };
    let span = tl.t1 - tl.t0;
    let bin_of = |t: Millis| (((t - tl.t0) / span * BINS as f64) as usize).min(BINS - 1);
    let bin_t = |b: usize| ms((tl.t0 + b as f64 * span / BINS as f64).round());
    let slots = Slots::new(tl, MAX_DENSITY_LANES);
    let lanes = slots.labels.len();
    let lane_of = |l: usize| slots.of[l];

    // counts[lane][bin][category], windows[lane][bin]
    let mut counts = vec![[[0usize; 6]; BINS]; lanes];
    let mut wins = vec![[0usize; BINS]; lanes];
    for m in &tl.marks {
        let r = &tl.records[m.record];
        counts[lane_of(m.lane)][bin_of(r.start)][Category::of(r).index()] += 1;
    }
    for w in &tl.windows {
        let (a, b) = (bin_of(w.open), bin_of(w.final_at().unwrap_or(tl.t1)));
        for bin in &mut wins[lane_of(w.lane)][a..=b] {
            *bin += 1;
        }
    }
    let max_win = wins
        .iter()
        .flat_map(|l| l.iter())
        .copied()
        .max()
        .unwrap_or(1)
        .max(1);

    let _ = writeln!(
        out,
        "<h2 class=\"aggregated\" data-bins=\"{BINS}\">Aggregated: {} intervals and {} windows in {BINS} time bins of {} ms (more than {DETAIL_MAX} intervals are not drawn one by one)</h2>",
        tl.records.len(),
        tl.windows.len(),
        ms((span / BINS as f64 * 1000.0).round() / 1000.0)
    );
    let bw = Scale::plot_w() / BINS as f64;
    let strip = 10.0;
    let col_h = 40.0;
    let h = LANE_PAD * 2.0 + strip + 4.0 + col_h;
    let mut body = String::new();
    let mut bg = String::new();
    let mut y = AXIS_H;
    for lane in 0..lanes {
        let total: usize = counts[lane].iter().flat_map(|b| b.iter()).sum();
        let _ = write!(
            bg,
            "<rect x=\"0\" y=\"{y:.1}\" width=\"{WIDTH}\" height=\"{h:.1}\" fill=\"{}\"/>",
            if lane % 2 == 0 { "#f3f6f9" } else { "#ffffff" }
        );
        // Each lane is scaled to its own busiest bin (a busy lane would flatten quiet ones);
        // the label says how many intervals the lane has and its peak.
        let max_col = counts[lane]
            .iter()
            .map(|b| b.iter().sum::<usize>())
            .max()
            .unwrap_or(1)
            .max(1);
        let _ = write!(body, "<g class=\"lane\" data-intervals=\"{total}\">");
        lane_label(
            &mut body,
            &slots.labels[lane],
            slots.depths[lane],
            y,
            h - 14.0,
        );
        let _ = write!(
            body,
            "<text x=\"8\" y=\"{:.1}\" font-size=\"11\" fill=\"#555\">{total} intervals · peak {max_col}/bin</text>",
            y + h / 2.0 + 11.0
        );
        // Windows open: shade in four levels, equal neighbours merged into one rect.
        let level = |n: usize| {
            if n == 0 {
                0
            } else {
                1 + (3 * n - 1) / max_win
            }
        };
        let mut bin = 0;
        while bin < BINS {
            let lv = level(wins[lane][bin]);
            let mut end = bin + 1;
            while end < BINS && level(wins[lane][end]) == lv {
                end += 1;
            }
            if lv > 0 {
                let most = wins[lane][bin..end].iter().max().copied().unwrap_or(0);
                let _ = write!(
                    body,
                    "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{strip}\" class=\"w{lv}\"><title>{}–{} ms: up to {most} window(s) open</title></rect>",
                    LABEL_W + bin as f64 * bw,
                    y + LANE_PAD,
                    (end - bin) as f64 * bw,
                    bin_t(bin),
                    bin_t(end)
                );
            }
            bin = end;
        }
        for (bin, c) in counts[lane].iter().enumerate() {
            let sum: usize = c.iter().sum();
            if sum == 0 {
                continue;
            }
            let x = LABEL_W + bin as f64 * bw;
            let _ = write!(
                body,
                "<g><title>{}–{} ms: {sum}",
                bin_t(bin),
                bin_t(bin + 1)
            );
            for cat in Category::ALL {
                if c[cat.index()] > 0 {
                    let _ = write!(body, " · {} {}", cat.word(), c[cat.index()]);
                }
            }
            body.push_str("</title>");
            let mut top = y + h - LANE_PAD;
            for cat in Category::ALL {
                let n = c[cat.index()];
                if n == 0 {
                    continue;
                }
                let hh = (n as f64 / max_col as f64 * col_h).max(1.5);
                top -= hh;
                let _ = write!(
                    body,
                    "<rect x=\"{x:.1}\" y=\"{top:.1}\" width=\"{:.1}\" height=\"{hh:.1}\" class=\"c{}\"/>",
                    (bw - 1.0).max(0.5),
                    cat.index()
                );
            }
            body.push_str("</g>");
        }
        for l in tl.lost.iter().filter(|l| lane_of(l.lane) == lane) {
            let x = sc.x(l.t);
            let _ = write!(
                body,
                "<path d=\"M{:.1} {:.1} L{:.1} {:.1} L{x:.1} {:.1} Z\" fill=\"#d00\"><title>observation lost on stream {} at {} ms ({})</title></path>",
                x - 4.0,
                y + 1.0,
                x + 4.0,
                y + 1.0,
                y + 7.0,
                esc(&l.stream),
                ms(l.t),
                esc(&l.reason)
            );
        }
        body.push_str("</g>\n");
        y += h;
    }
    let height = y + 4.0;
    let _ = writeln!(
        out,
        "<div class=\"scroll\"><svg class=\"tl\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height:.0}\" viewBox=\"0 0 {WIDTH} {height:.0}\" role=\"img\" aria-label=\"timeline density\">"
    );
    out.push_str(&bg);
    axis(out, &sc, height);
    out.push_str(&body);
    out.push_str("</svg></div>\n");

    // The abstentions by id: the ones worth a look, capped so the page stays bounded.
    let abstained: Vec<usize> = (0..tl.marks.len())
        .filter(|m| tl.records[tl.marks[*m].record].reason.is_some())
        .collect();
    let _ = writeln!(
        out,
        "<h2>Abstentions ({}{})</h2>\n<table class=\"list\"><tr><th>interval</th><th>alias/tool</th><th>start ms</th><th>end ms</th><th>reason</th><th>candidates</th><th>lane</th></tr>",
        abstained.len(),
        if abstained.len() > TABLE_MAX {
            format!(", the first {TABLE_MAX} listed")
        } else {
            String::new()
        }
    );
    for &mi in abstained.iter().take(TABLE_MAX) {
        let m = &tl.marks[mi];
        let r = &tl.records[m.record];
        let c = Category::of(r);
        let _ = writeln!(
            out,
            "<tr data-find=\"{}\"><td>{}</td><td>{}/{}</td><td>{}</td><td>{}</td><td><span class=\"sw\" style=\"background:{}\"></span>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&find_text(tl, mi)),
            esc(&r.interval),
            esc(&r.alias),
            esc(&r.tool),
            ms(r.start),
            ms(r.end),
            colour(c),
            c.word(),
            r.candidates,
            esc(&tl.lanes[m.lane].key.label())
        );
    }
    out.push_str("</table>\n");
}

/// The find box, above the first timeline.
const FIND: &str = "<div class=\"find\"><label>find a call <input id=\"find\" type=\"search\" placeholder=\"tool, alias, decision, thread or interval id\" autocomplete=\"off\"/></label> <button type=\"button\" id=\"findnext\">next match</button> <span id=\"found\"></span></div>\n";

/// Zoom and find, inline: static text with no data in it, no network. Positions follow the
/// same rules as the Rust layout ([`Scale::x`], [`label_place`], [`tick_step`], [`clock`]),
/// computed from each element's `data-s`/`data-e`/`data-t` times and the page's range.
const SCRIPT: &str = include_str!("../assets/timeline.js");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_covers_markup_quotes_and_control_characters() {
        assert_eq!(
            esc("<script>alert(\"x\")&'</script>\u{1}"),
            "&lt;script&gt;alert(&quot;x&quot;)&amp;&#39;&lt;/script&gt;\u{fffd}"
        );
    }

    #[test]
    fn ticks_are_round_numbers() {
        assert_eq!(tick_step(10_000.0, 10.0), 1000.0);
        assert_eq!(tick_step(1_300.0, 10.0), 200.0);
        assert_eq!(tick_step(4.0, 10.0), 0.5);
        assert_eq!(tick_step(1_000_000.0, 10.0), 120_000.0);
        assert_eq!(clock(7000.0, 1000.0), "7s");
        assert_eq!(clock(7250.0, 250.0), "7.25s");
        assert_eq!(clock(7200.0, 200.0), "7.2s");
        assert_eq!(clock(65_000.0, 5000.0), "1m05s");
    }

    /// A label goes on its mark when it fits, else right of it, else (at the right edge)
    /// left of it: never past either edge of the drawing.
    #[test]
    fn labels_are_placed_where_they_are_not_cut() {
        assert_eq!(
            label_place(300.0, 500.0, 100.0),
            (303.0, false, (300.0, 500.0))
        );
        assert_eq!(
            label_place(300.0, 303.0, 100.0),
            (306.0, false, (300.0, 406.0))
        );
        let (x, end, (a, b)) = label_place(1330.0, 1333.0, 120.0);
        assert!(end && x == 1327.0 && a >= LABEL_W && b <= WIDTH);
        let r = correlator::Record {
            interval: "i".into(),
            alias: "a".into(),
            tool: "lookup".into(),
            start: 0.0,
            end: 1.0,
            reason: Some(correlator::records::Reason::IdentityConflict),
            evidence: vec![],
            candidates: 2,
            window: None,
            decided_at: 1.0,
        };
        assert_eq!(mark_label(&r), "lookup · identity_conflict");
    }

    #[test]
    fn packing_stacks_only_what_overlaps() {
        let (rows, n) = pack(&[(0.0, 10.0), (5.0, 20.0), (30.0, 40.0), (12.0, 14.0)]);
        assert_eq!(n, 2);
        assert_eq!(rows, vec![0, 1, 0, 0]);
    }
}
