//! The detailed view: every window and interval of a time page, lane by lane, and the list
//! of every call below it.

use std::fmt::Write;

use super::geometry::*;
use super::lanes::*;
use super::text::*;
use crate::model::{Category, Lost, Timeline, TurnStart, Window, WindowEnd};

/// Every window and interval, in time pages of at most [`PAGE_SIZE`] intervals.
pub(super) fn detailed_view(out: &mut String, tl: &Timeline) {
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

pub(super) fn page(out: &mut String, tl: &Timeline, sc: &Scale, marks: &[usize]) {
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
pub(super) struct LaneLayout<'t> {
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

/// Every call of the timeline, by start: a list to read and to search, each row zooming the
/// timeline to its call when clicked.
pub(super) fn calls_table(out: &mut String, tl: &Timeline) {
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
