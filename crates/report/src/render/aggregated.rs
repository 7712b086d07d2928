//! The aggregated view, for runs too large to draw call by call: per lane and time bin,
//! the windows open and the intervals by decision.

use std::fmt::Write;

use correlator::Millis;

use super::geometry::*;
use super::lanes::*;
use super::text::*;
use crate::model::{Category, Timeline};

/// Density strips: per lane and time bin, windows open and intervals by decision.
///
/// Sized for the worst case (every lane busy in every bin): colours are CSS classes, window
/// shading is quantized and run-length merged, and each non-empty bin has one short title.
pub(super) fn aggregated_view(out: &mut String, tl: &Timeline) {
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
