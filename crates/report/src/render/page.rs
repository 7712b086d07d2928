//! The page: its head, style and script, and per section the warning, the summary, the
//! legend and the view (detailed or aggregated).

use std::fmt::Write;

use correlator::records::Summary;

use super::aggregated::*;
use super::detailed::*;
use super::geometry::*;
use super::text::*;
use crate::model::{Category, Timeline};

/// The page's style sheet (a file of its own, so that it reads and diffs as CSS).
const CSS: &str = include_str!("../../assets/timeline.css");

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

pub(super) fn is_aggregated(tl: &Timeline) -> bool {
    tl.records.len() > DETAIL_MAX || tl.windows.len() > DETAIL_MAX_WINDOWS
}

pub(super) fn summary_of<'a>(records: impl Iterator<Item = &'a correlator::Record>) -> Summary {
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

pub(super) fn warning(out: &mut String, s: &Section) {
    if let Some(w) = &s.warning {
        let _ = writeln!(out, "<p class=\"warning\">warning: {}</p>", esc(w));
    }
}

/// How many of the model's tool calls to MCP tools no wrapper reported (they have no interval,
/// so nothing else on the page shows them), in the words the relay's stop uses, with the lanes
/// they were made on; or, without the trace, that the count needs it.
pub(super) fn unreported(out: &mut String, tl: &Timeline) {
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

pub(super) fn meta_line(out: &mut String, tl: &Timeline, sources: &[String]) {
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

pub(super) fn view(out: &mut String, tl: &Timeline) {
    if is_aggregated(tl) {
        aggregated_view(out, tl);
    } else {
        detailed_view(out, tl);
        calls_table(out, tl);
    }
}

pub(super) fn summary_table(out: &mut String, s: &Summary) {
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

pub(super) fn legend(out: &mut String, aggregated: bool) {
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

/// The find box, above the first timeline.
const FIND: &str = "<div class=\"find\"><label>find a call <input id=\"find\" type=\"search\" placeholder=\"tool, alias, decision, thread or interval id\" autocomplete=\"off\"/></label> <button type=\"button\" id=\"findnext\">next match</button> <span id=\"found\"></span></div>\n";

/// Zoom and find, inline: static text with no data in it, no network. Positions follow the
/// same rules as the Rust layout ([`Scale::x`], [`label_place`], [`tick_step`], [`clock`]),
/// computed from each element's `data-s`/`data-e`/`data-t` times and the page's range.
const SCRIPT: &str = include_str!("../../assets/timeline.js");
