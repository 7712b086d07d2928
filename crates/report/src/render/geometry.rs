//! The drawing's geometry: its sizes and bounds, the time scale and its ticks, colours, row
//! packing, and where a label goes so that it is never cut off.

use correlator::Millis;

use crate::model::Category;

/// Most intervals drawn one by one; more are aggregated.
pub(super) const DETAIL_MAX: usize = 1500;

/// Most windows drawn one by one; more are aggregated.
pub(super) const DETAIL_MAX_WINDOWS: usize = 3000;

/// Intervals per time page in the detailed view.
pub(super) const PAGE_SIZE: usize = 120;

/// Time bins of the aggregated view.
pub(super) const BINS: usize = 100;

/// Thread lanes drawn on their own in the detailed view; the rest share one.
pub(super) const MAX_LANES: usize = 40;

/// Thread lanes drawn on their own in the aggregated view; the rest share one.
pub(super) const MAX_DENSITY_LANES: usize = 24;

/// Abstentions listed by id in the aggregated view.
pub(super) const TABLE_MAX: usize = 200;

pub(super) const WIDTH: f64 = 1360.0;

pub(super) const LABEL_W: f64 = 200.0;

pub(super) const RIGHT_PAD: f64 = 24.0;

pub(super) const AXIS_H: f64 = 26.0;

pub(super) const WIN_ROW: f64 = 21.0;

pub(super) const MARK_ROW: f64 = 16.0;

pub(super) const LANE_PAD: f64 = 9.0;

/// The colour of each decision category, in [`Category::ALL`] order.
pub(super) const COLOURS: [&str; 6] = [
    "#2e8540", // attributed
    "#7a7a7a", // incomplete
    "#e07b00", // ambiguous
    "#8e44ad", // unclosed
    "#d62728", // identity_conflict
    "#1f6fb5", // no_window
];

pub(super) fn colour(c: Category) -> &'static str {
    COLOURS[c.index()]
}

/// A tick step of 1, 2 or 5 × 10^k ms (or whole minutes, past half a minute) giving about
/// `n` ticks over `span`.
pub(super) fn tick_step(span: Millis, n: f64) -> Millis {
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

pub(super) struct Scale {
    pub(super) t0: Millis,
    pub(super) t1: Millis,
}

impl Scale {
    pub(super) fn plot_w() -> f64 {
        WIDTH - LABEL_W - RIGHT_PAD
    }
    pub(super) fn x(&self, t: Millis) -> f64 {
        let t = t.clamp(self.t0, self.t1);
        LABEL_W + (t - self.t0) / (self.t1 - self.t0) * Self::plot_w()
    }
}

/// Greedy row packing: each item (pixel extent) goes on the first row whose last item ends
/// before it starts. Returns each item's row and the number of rows.
pub(super) fn pack(extents: &[(f64, f64)]) -> (Vec<usize>, usize) {
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

/// The most characters of a lane label drawn: at 12 px, wider characters than average
/// included, they end before the plot starts at [`LABEL_W`] (fewer for a nested lane, which
/// is indented).
pub(super) const LABEL_CHARS: usize = 24;

/// How far each level of subagent nesting indents a lane's label.
pub(super) const INDENT: f64 = 14.0;

/// About how wide `s` is drawn, at `per_char` pixels a character.
pub(super) fn text_width(s: &str, per_char: f64) -> f64 {
    per_char * s.chars().count() as f64
}

/// Pixels per character of the 11 px labels, wide enough for hex ids and capitals.
pub(super) const LABEL_CHAR_W: f64 = 7.0;

/// A label's x, whether it is anchored at its end, and the extent of mark and label.
pub(super) type Place = (f64, bool, (f64, f64));

/// Where a mark's label goes: inside the mark when it fits, else right of it, else (near the
/// plot's right edge) left of it, so that it is never cut off. Returns the label's x, whether
/// it is anchored at its end, and the pixel extent of mark and label together. The page's
/// script places labels the same way when it zooms.
pub(super) fn label_place(a: f64, b: f64, w: f64) -> Place {
    let right_edge = WIDTH - 2.0;
    if b - a >= w + 6.0 {
        (a + 3.0, false, (a, b))
    } else if b + 3.0 + w <= right_edge || a - 3.0 - w < LABEL_W {
        (b + 3.0, false, (a, b + 3.0 + w))
    } else {
        (a - 3.0, true, (a - 3.0 - w, b))
    }
}
