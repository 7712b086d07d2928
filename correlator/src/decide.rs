//! The decision rule (design.md §4), driven incrementally by [`Correlator`].

use crate::event::{Event, Millis};
use crate::records::Record;

/// When a window opens for containment purposes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WindowOpen {
    /// At the first complete client tool call of the response (the default).
    #[default]
    Call,
    /// At the response's completion (stricter; changes containment only).
    Response,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `--close-wait`, milliseconds (default 1000).
    pub close_wait: Millis,
    pub window_open: WindowOpen,
    /// `--max-window`, milliseconds (default 30 minutes).
    pub max_window: Millis,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            close_wait: 1000.0,
            window_open: WindowOpen::Call,
            max_window: 30.0 * 60.0 * 1000.0,
        }
    }
}

/// The incremental correlator. Feed events in non-decreasing `t`; records come out in
/// decision order.
pub struct Correlator {
    config: Config,
}

impl Correlator {
    pub fn new(config: Config) -> Self {
        Correlator { config }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Applies one event. First decides everything due strictly before `ev.t`.
    pub fn push(&mut self, ev: &Event, out: &mut Vec<Record>) {
        let _ = (ev, out);
    }

    /// Lets time pass to `now` with no event (live mode): decides everything due before `now`.
    pub fn advance(&mut self, now: Millis, out: &mut Vec<Record>) {
        let _ = (now, out);
    }

    /// The trace ended: decides every pending interval at the time of the last event.
    pub fn finish(&mut self, out: &mut Vec<Record>) {
        let _ = out;
    }
}

/// Replays a whole event sequence and returns its records.
pub fn replay(events: impl IntoIterator<Item = Event>, config: &Config) -> Vec<Record> {
    let mut c = Correlator::new(config.clone());
    let mut out = Vec::new();
    for ev in events {
        c.push(&ev, &mut out);
    }
    c.finish(&mut out);
    out
}
