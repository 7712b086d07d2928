//! Records v1: one attribution record per MCP interval, written in decision order
//! (design.md §6). Field order and number format are fixed so that replay output is
//! byte-identical from run to run.

use std::fmt;

use crate::event::Millis;
use crate::json::{push_key, push_ms, push_opt_str, push_str};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    Incomplete,
    Ambiguous,
    Unclosed,
    IdentityConflict,
    NoWindow,
}

impl Reason {
    pub const ALL: [Reason; 5] = [
        Reason::Incomplete,
        Reason::Ambiguous,
        Reason::Unclosed,
        Reason::IdentityConflict,
        Reason::NoWindow,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Incomplete => "incomplete",
            Reason::Ambiguous => "ambiguous",
            Reason::Unclosed => "unclosed",
            Reason::IdentityConflict => "identity_conflict",
            Reason::NoWindow => "no_window",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What agreed between an interval and the window it was attributed to, in record order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Evidence {
    Containment,
    ToolUseId,
    ItemId,
    CallId,
    Thread,
    Route,
}

impl Evidence {
    pub fn as_str(self) -> &'static str {
        match self {
            Evidence::Containment => "containment",
            Evidence::ToolUseId => "tool_use_id",
            Evidence::ItemId => "item_id",
            Evidence::CallId => "call_id",
            Evidence::Thread => "thread",
            Evidence::Route => "route",
        }
    }
}

/// The window an interval was attributed to.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowRef {
    pub thread: Option<String>,
    pub stream: String,
    pub response: String,
    /// The request that continued the response (closed the window).
    pub request: Option<String>,
    pub open: Millis,
    pub close: Option<Millis>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub interval: String,
    pub alias: String,
    pub tool: String,
    pub start: Millis,
    pub end: Millis,
    /// `None` means attributed; `Some(reason)` means abstained for that reason.
    pub reason: Option<Reason>,
    pub evidence: Vec<Evidence>,
    pub candidates: usize,
    pub window: Option<WindowRef>,
    pub decided_at: Millis,
}

impl Record {
    pub fn attributed(&self) -> bool {
        self.reason.is_none()
    }

    /// `attributed` or `abstained`.
    pub fn decision(&self) -> &'static str {
        if self.attributed() {
            "attributed"
        } else {
            "abstained"
        }
    }

    /// Appends the record as one JSON line (without the newline).
    pub fn write_json(&self, out: &mut String) {
        out.push_str("{\"type\":\"attribution\",\"version\":1,");
        push_key(out, "interval");
        push_str(out, &self.interval);
        out.push(',');
        push_key(out, "alias");
        push_str(out, &self.alias);
        out.push(',');
        push_key(out, "tool");
        push_str(out, &self.tool);
        out.push_str(",\"start\":");
        push_ms(out, self.start);
        out.push_str(",\"end\":");
        push_ms(out, self.end);
        out.push_str(",\"decision\":\"");
        out.push_str(self.decision());
        out.push_str("\",\"reason\":");
        push_opt_str(out, self.reason.map(Reason::as_str));
        out.push_str(",\"evidence\":[");
        for (i, e) in self.evidence.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            push_str(out, e.as_str());
        }
        out.push_str("],\"candidates\":");
        out.push_str(&self.candidates.to_string());
        out.push_str(",\"window\":");
        match &self.window {
            None => out.push_str("null"),
            Some(w) => {
                out.push('{');
                push_key(out, "thread");
                push_opt_str(out, w.thread.as_deref());
                out.push(',');
                push_key(out, "stream");
                push_str(out, &w.stream);
                out.push(',');
                push_key(out, "response");
                push_str(out, &w.response);
                out.push(',');
                push_key(out, "request");
                push_opt_str(out, w.request.as_deref());
                out.push_str(",\"open\":");
                push_ms(out, w.open);
                out.push_str(",\"close\":");
                match w.close {
                    Some(c) => push_ms(out, c),
                    None => out.push_str("null"),
                }
                out.push('}');
            }
        }
        out.push_str(",\"decided_at\":");
        push_ms(out, self.decided_at);
        out.push('}');
    }

    /// The record as one JSON line, newline included.
    pub fn to_line(&self) -> String {
        let mut s = String::with_capacity(320);
        self.write_json(&mut s);
        s.push('\n');
        s
    }
}

/// Counts for the one-line summary: `N intervals: A attributed, B abstained (incomplete x, ...)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub attributed: usize,
    /// Abstentions per reason, in [`Reason::ALL`] order.
    pub abstained: [usize; 5],
}

impl Summary {
    pub fn add(&mut self, r: &Record) {
        match r.reason {
            None => self.attributed += 1,
            Some(reason) => {
                let i = Reason::ALL.iter().position(|x| *x == reason).unwrap_or(0);
                self.abstained[i] += 1;
            }
        }
    }

    pub fn total(&self) -> usize {
        self.attributed + self.abstained.iter().sum::<usize>()
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let abstained: usize = self.abstained.iter().sum();
        write!(
            f,
            "{} intervals: {} attributed, {} abstained (",
            self.total(),
            self.attributed,
            abstained
        )?;
        for (i, reason) in Reason::ALL.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{} {}", reason, self.abstained[i])?;
        }
        f.write_str(")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_design_example_is_written_exactly() {
        let r = Record {
            interval: "i1".into(),
            alias: "probe".into(),
            tool: "echo".into(),
            start: 7187.0,
            end: 7264.0,
            reason: None,
            evidence: vec![Evidence::Containment, Evidence::ItemId, Evidence::Thread],
            candidates: 1,
            window: Some(WindowRef {
                thread: Some("th1".into()),
                stream: "s1".into(),
                response: "r1".into(),
                request: Some("q2".into()),
                open: 6905.0,
                close: Some(7278.0),
            }),
            decided_at: 7280.0,
        };
        assert_eq!(
            r.to_line(),
            concat!(
                r#"{"type":"attribution","version":1,"interval":"i1","alias":"probe","tool":"echo","start":7187,"end":7264,"#,
                r#""decision":"attributed","reason":null,"evidence":["containment","item_id","thread"],"candidates":1,"#,
                r#""window":{"thread":"th1","stream":"s1","response":"r1","request":"q2","open":6905,"close":7278},"#,
                r#""decided_at":7280}"#,
                "\n"
            )
        );
    }

    #[test]
    fn summary_line_names_every_reason() {
        let s = Summary {
            attributed: 3,
            abstained: [0, 2, 0, 0, 0],
        };
        assert_eq!(
            s.to_string(),
            "5 intervals: 3 attributed, 2 abstained (incomplete 0, ambiguous 2, unclosed 0, identity_conflict 0, no_window 0)"
        );
    }
}
