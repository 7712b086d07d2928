//! The timeline as one self-contained HTML page: inline CSS and SVG, no scripts, no network.
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

use super::model::{Category, LaneKey, Timeline, Window, WindowEnd, NEAR_MAX};

/// Most intervals drawn one by one; more are aggregated.
pub const DETAIL_MAX: usize = 1500;
/// Most windows drawn one by one; more are aggregated.
pub const DETAIL_MAX_WINDOWS: usize = 3000;
/// Intervals per time page in the detailed view.
pub const PAGE_SIZE: usize = 120;
/// Time bins of the aggregated view.
pub const BINS: usize = 100;
/// Thread lanes drawn on their own in the detailed view; the rest share one.
pub const MAX_LANES: usize = 40;
/// Thread lanes drawn on their own in the aggregated view; the rest share one.
pub const MAX_DENSITY_LANES: usize = 24;
/// Abstentions listed by id in the aggregated view.
pub const TABLE_MAX: usize = 200;

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
pub fn esc(s: &str) -> String {
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

const CSS: &str = "
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;margin:16px 20px;color:#1d232a;background:#fff}
h1{font-size:20px;margin:0 0 4px}
h2{font-size:15px;margin:22px 0 6px}
p.meta{margin:2px 0;color:#555;font-size:13px}
table.summary{border-collapse:collapse;margin:10px 0 6px;font-size:13px}
table.summary td,table.summary th{padding:3px 10px;border-bottom:1px solid #e3e6ea;text-align:left}
table.summary td.n{text-align:center;font-variant-numeric:tabular-nums;font-size:15px;font-weight:600}
.sw{display:inline-block;width:12px;height:12px;border-radius:2px;vertical-align:-1px;margin-right:6px}
.legend{display:flex;flex-wrap:wrap;gap:6px 18px;font-size:12px;color:#333;margin:6px 0 2px}
.legend svg{vertical-align:middle;margin-right:4px}
table.list{border-collapse:collapse;font-size:12px}
table.list td,table.list th{padding:2px 8px;border-bottom:1px solid #eee;text-align:left}
svg.tl{display:block;max-width:100%;height:auto}
svg text{font-family:inherit}
.c0{fill:#2e8540}.c1{fill:#7a7a7a}.c2{fill:#e07b00}.c3{fill:#8e44ad}.c4{fill:#d62728}.c5{fill:#1f6fb5}
.w1{fill:#4a7fa7;fill-opacity:.25}.w2{fill:#4a7fa7;fill-opacity:.5}.w3{fill:#4a7fa7;fill-opacity:.8}
";

/// One trace's records (and the trace, when given), drawn on their own.
pub struct Section {
    /// The trace the records name (records v1 `trace`), or `None` when they name none.
    pub name: Option<String>,
    pub timeline: Timeline,
    /// Where its records and trace were read from, for the page to say.
    pub sources: Vec<String>,
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
    if let [only] = sections {
        let tl = &only.timeline;
        meta_line(&mut out, tl, &only.sources);
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
            meta_line(&mut out, &s.timeline, &s.sources);
            summary_table(&mut out, &summary_of(s.timeline.records.iter()));
            view(&mut out, &s.timeline);
        }
    }
    out.push_str("</body>\n</html>\n");
    out
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
/// included, they end before the plot starts at [`LABEL_W`].
pub const LABEL_CHARS: usize = 24;

fn lane_label(out: &mut String, label: &str, y: f64, h: f64) {
    // Long ids (a pseudonym is 32 hex digits) are shortened on screen; the full label is in
    // the hover title.
    let shown: String = if label.chars().count() > LABEL_CHARS {
        label.chars().take(LABEL_CHARS - 1).collect::<String>() + "…"
    } else {
        label.to_string()
    };
    let _ = write!(
        out,
        "<text x=\"8\" y=\"{:.1}\" font-size=\"12\" fill=\"#222\"><title>{}</title>{}</text>",
        y + h / 2.0 + 4.0,
        esc(label),
        esc(&shown)
    );
}

/// A mark across a lane (`y`, height `h`) at `x`: a vertical line drawn with `line` (its SVG
/// stroke attributes) and a triangular flag at its top, filled with `colour`, under a hover
/// `title` that is already escaped.
#[allow(clippy::too_many_arguments)]
fn lane_marker(
    out: &mut String,
    class: &str,
    title: &str,
    x: f64,
    (y, h): (f64, f64),
    line: &str,
    flag: [(f64, f64); 3],
    colour: &str,
) {
    let [(ax, ay), (bx, by), (cx, cy)] = flag;
    let _ = write!(
        out,
        "<g class=\"{class}\"><title>{title}</title><line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" {line}/><path d=\"M{ax:.1} {ay:.1} L{bx:.1} {by:.1} L{cx:.1} {cy:.1} Z\" fill=\"{colour}\"/></g>",
        y + 1.0,
        y + h - 1.0,
    );
}

/// About how wide `s` is drawn, at `per_char` pixels a character.
fn text_width(s: &str, per_char: f64) -> f64 {
    per_char * s.chars().count() as f64
}

/// Lanes as drawn: the first `max` thread lanes each on their own, the rest of the
/// threads sharing one, and the unattributed lane always on its own, last.
struct Slots {
    /// Drawn slot of each lane of the timeline.
    of: Vec<usize>,
    labels: Vec<String>,
    details: Vec<Option<String>>,
}

impl Slots {
    fn new(tl: &Timeline, max: usize) -> Slots {
        let mut of = Vec::with_capacity(tl.lanes.len());
        let mut labels: Vec<String> = Vec::new();
        let mut details = Vec::new();
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
                details.push(lane.detail.clone());
                of.push(labels.len() - 1);
            } else {
                let slot = *merged_slot.get_or_insert_with(|| {
                    labels.push(format!("… {merged} more lanes"));
                    details.push(None);
                    labels.len() - 1
                });
                of.push(slot);
            }
        }
        Slots {
            of,
            labels,
            details,
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
    let lanes = slots.labels.len();
    let lane_of = |l: usize| slots.of[l];
    let mut body = String::new();
    let mut bg = String::new();
    let mut y = AXIS_H;
    for lane in 0..lanes {
        let in_lane = |l: usize| lane_of(l) == lane;
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
            continue;
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
        let mext: Vec<(f64, f64)> = ms_here
            .iter()
            .map(|m| {
                let r = &tl.records[tl.marks[*m].record];
                let a = sc.x(r.start);
                let b = sc.x(r.end).max(a + 3.0);
                let label = r
                    .reason
                    .map_or(0.0, |x| 4.0 + 6.2 * x.as_str().len() as f64);
                (a, b + label)
            })
            .collect();
        let (mrow, nmrows) = pack(&mext);
        // At least two text lines tall, for the label and its detail.
        let h = (LANE_PAD * 2.0 + nwrows as f64 * WIN_ROW + nmrows as f64 * MARK_ROW).max(44.0);
        // Backgrounds go first, under the time grid; the lane's content over it.
        let _ = write!(
            bg,
            "<rect x=\"0\" y=\"{y:.1}\" width=\"{WIDTH}\" height=\"{h:.1}\" fill=\"{}\"/>",
            if lane % 2 == 0 { "#f3f6f9" } else { "#ffffff" }
        );
        body.push_str("<g class=\"lane\">");
        match &slots.details[lane] {
            Some(d) => {
                lane_label(&mut body, &slots.labels[lane], y, h - 14.0);
                let _ = write!(
                    body,
                    "<text x=\"8\" y=\"{:.1}\" font-size=\"10.5\" fill=\"#666\">{}</text>",
                    y + h / 2.0 + 11.0,
                    esc(d)
                );
            }
            None => lane_label(&mut body, &slots.labels[lane], y, h),
        }
        // Turn starts first, under the windows and marks.
        for s in &turns {
            let x = sc.x(s.t);
            let title = format!(
                "turn starts: request {} at {} ms (it continues no response with a tool call)",
                esc(&s.request),
                ms(s.t)
            );
            let flag = [(x, y + 1.0), (x + 6.0, y + 4.0), (x, y + 7.0)];
            let line = "stroke=\"#33475b\" stroke-width=\"1.5\" stroke-dasharray=\"5 3\"";
            lane_marker(&mut body, "turn", &title, x, (y, h), line, flag, "#33475b");
        }
        for (i, w) in wins.iter().enumerate() {
            let (a, b) = wext[i];
            let wy = y + LANE_PAD + wrow[i] as f64 * WIN_ROW;
            let (fill, stroke, dash) = match w.end {
                WindowEnd::Closed(_) => ("#cfe0ef", "#4a7fa7", ""),
                WindowEnd::Broken(..) => ("#f6d5d5", "#b22", " stroke-dasharray=\"4 2\""),
                WindowEnd::Open => ("#eceff1", "#999", " stroke-dasharray=\"1 2\""),
            };
            let _ = write!(
                body,
                "<rect class=\"window\" x=\"{a:.1}\" y=\"{wy:.1}\" width=\"{:.1}\" height=\"{:.1}\" rx=\"2\" fill=\"{fill}\" stroke=\"{stroke}\"{dash}><title>{}</title></rect>",
                b - a,
                WIN_ROW - 4.0,
                esc(&window_title(tl, w))
            );
            if let Some(c) = w.completed_at {
                if c > w.open && c <= sc.t1 && w.final_at().is_none_or(|f| c <= f) {
                    let cx = sc.x(c);
                    let _ = write!(
                        body,
                        "<line x1=\"{cx:.1}\" y1=\"{:.1}\" x2=\"{cx:.1}\" y2=\"{:.1}\" stroke=\"#4a7fa7\" stroke-width=\"1\" stroke-dasharray=\"2 1\"/>",
                        wy + 1.0,
                        wy + WIN_ROW - 5.0
                    );
                }
            }
            if b - a > text_width(&w.response, 6.4) + 8.0 {
                let _ = write!(
                    body,
                    "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" fill=\"#234\" stroke=\"{fill}\" stroke-width=\"3\" paint-order=\"stroke\">{}</text>",
                    a + 4.0,
                    wy + WIN_ROW - 9.0,
                    esc(&w.response)
                );
            }
        }
        let my0 = y + LANE_PAD + nwrows as f64 * WIN_ROW;
        for (i, &mi) in ms_here.iter().enumerate() {
            let r = &tl.records[tl.marks[mi].record];
            let c = Category::of(r);
            let a = sc.x(r.start);
            let b = sc.x(r.end).max(a + 3.0);
            let my = my0 + mrow[i] as f64 * MARK_ROW;
            let _ = write!(
                body,
                "<g class=\"interval\" data-interval=\"{}\"><title>{}</title><rect x=\"{a:.1}\" y=\"{my:.1}\" width=\"{:.1}\" height=\"{:.1}\" rx=\"1.5\" fill=\"{}\"/>",
                esc(&r.interval),
                esc(&mark_title(tl, mi)),
                b - a,
                MARK_ROW - 4.0,
                colour(c)
            );
            // The tool's name on the mark itself, when it fits (else it is in the title).
            if b - a > text_width(&r.tool, 5.8) + 6.0 {
                let _ = write!(
                    body,
                    "<text class=\"tool\" x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" fill=\"#fff\">{}</text>",
                    a + 3.0,
                    my + MARK_ROW - 7.0,
                    esc(&r.tool)
                );
            }
            if let Some(reason) = r.reason {
                let _ = write!(
                    body,
                    "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" fill=\"{}\">{}</text>",
                    b + 3.0,
                    my + MARK_ROW - 6.0,
                    colour(c),
                    reason
                );
            }
            body.push_str("</g>");
        }
        for l in lost {
            let x = sc.x(l.t);
            let title = format!(
                "observation lost on stream {} at {} ms ({})",
                esc(&l.stream),
                ms(l.t),
                esc(&l.reason)
            );
            let flag = [(x - 5.0, y + 1.0), (x + 5.0, y + 1.0), (x, y + 7.0)];
            let line = "stroke=\"#d00\" stroke-width=\"2\"";
            lane_marker(&mut body, "lost", &title, x, (y, h), line, flag, "#d00");
        }
        body.push_str("</g>\n");
        y += h;
    }
    let height = y + 4.0;
    let _ = writeln!(
        out,
        "<svg class=\"tl\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height:.0}\" viewBox=\"0 0 {WIDTH} {height:.0}\" role=\"img\" aria-label=\"timeline\">"
    );
    out.push_str(&bg);
    axis(out, sc, height);
    out.push_str(&body);
    out.push_str("</svg>\n");
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
        lane_label(&mut body, &slots.labels[lane], y, h - 14.0);
        let _ = write!(
            body,
            "<text x=\"8\" y=\"{:.1}\" font-size=\"10.5\" fill=\"#666\">{total} intervals · peak {max_col}/bin</text>",
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
        "<svg class=\"tl\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height:.0}\" viewBox=\"0 0 {WIDTH} {height:.0}\" role=\"img\" aria-label=\"timeline density\">"
    );
    out.push_str(&bg);
    axis(out, &sc, height);
    out.push_str(&body);
    out.push_str("</svg>\n");

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
            "<tr><td>{}</td><td>{}/{}</td><td>{}</td><td>{}</td><td><span class=\"sw\" style=\"background:{}\"></span>{}</td><td>{}</td><td>{}</td></tr>",
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

    #[test]
    fn packing_stacks_only_what_overlaps() {
        let (rows, n) = pack(&[(0.0, 10.0), (5.0, 20.0), (30.0, 40.0), (12.0, 14.0)]);
        assert_eq!(n, 2);
        assert_eq!(rows, vec![0, 1, 0, 0]);
    }
}
