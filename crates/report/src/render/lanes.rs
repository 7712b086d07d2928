//! Lanes: which thread lanes are drawn on their own and which share one, their labels, the
//! marks across them, and the time axis above them.

use std::fmt::Write;

use correlator::Millis;

use super::geometry::*;
use super::text::*;
use crate::model::{LaneKey, Timeline};

pub(super) fn axis(out: &mut String, sc: &Scale, height: f64) {
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

pub(super) fn lane_label(out: &mut String, label: &str, depth: usize, y: f64, h: f64) {
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
pub(super) fn lane_marker(
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

/// Lanes as drawn: the first `max` thread lanes each on their own, the rest of the
/// threads sharing one, and the unattributed lane always on its own, last.
pub(super) struct Slots {
    /// Drawn slot of each lane of the timeline.
    pub(super) of: Vec<usize>,
    pub(super) labels: Vec<String>,
    pub(super) details: Vec<Option<String>>,
    /// Subagent nesting of each slot (0: a top-level thread).
    pub(super) depths: Vec<usize>,
    /// The label of each slot's parent lane, for a subagent's.
    pub(super) parents: Vec<Option<String>>,
    /// What started each slot's subagent lane (its hover title).
    pub(super) started_by: Vec<Option<String>>,
}

impl Slots {
    pub(super) fn new(tl: &Timeline, max: usize) -> Slots {
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
