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
//!
//! One file a concern: [`page`] (the page and its sections), [`detailed`] and [`aggregated`]
//! (the two views), [`lanes`] (lanes, their labels, the axis), [`geometry`] (sizes, scale,
//! packing, label places), [`text`] (escaping, times, titles).

mod aggregated;
mod detailed;
mod geometry;
mod lanes;
mod page;
mod text;

pub use page::{render, Section};

#[cfg(test)]
mod tests {
    use super::geometry::*;
    use super::text::*;

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
