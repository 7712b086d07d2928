//! What every exchange shares, HTTP or WebSocket: the response body type and its log line.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::Method;
use http_body_util::{Either, Full};

use super::body::{Flow, RelayBody};
use super::failure::Failure;
use super::mounts::path_template;
use super::upstream::Driven;

/// A response the relay sends back: an upstream's body streamed through, or one it made.
pub(crate) type ResBody = Either<RelayBody<Driven>, Full<Bytes>>;

/// One exchange's log line, written when the last part of the exchange lets go of it.
pub(crate) struct ExchangeLog {
    pub mount: String,
    /// The request method as a fixed word ([`method_word`]).
    pub method: &'static str,
    pub path: String,
    pub status: AtomicU16,
    pub up: Arc<AtomicU64>,
    pub down: Arc<AtomicU64>,
    pub started: Instant,
    pub failed: Arc<AtomicBool>,
    pub failure: std::sync::Mutex<Option<Failure>>,
    /// Where a failure is counted when the exchange ends.
    tally: Arc<FailedExchanges>,
}

impl ExchangeLog {
    pub(crate) fn new(
        tally: &Arc<FailedExchanges>,
        mount: &str,
        method: &Method,
        path: &str,
    ) -> Arc<Self> {
        Arc::new(ExchangeLog {
            tally: tally.clone(),
            mount: mount.to_string(),
            method: method_word(method),
            path: path_template(path),
            status: AtomicU16::new(0),
            up: Arc::new(AtomicU64::new(0)),
            down: Arc::new(AtomicU64::new(0)),
            started: Instant::now(),
            failed: Arc::new(AtomicBool::new(false)),
            failure: std::sync::Mutex::new(None),
        })
    }

    /// The counter of bytes flowing `flow`'s way.
    pub(super) fn bytes(&self, flow: Flow) -> &AtomicU64 {
        match flow {
            Flow::Request => &self.up,
            Flow::Response => &self.down,
        }
    }

    pub(crate) fn fail(&self, f: Failure) {
        if let Ok(mut g) = self.failure.lock() {
            g.get_or_insert(f);
        }
    }
}

/// A request method as the log may show it: one of the methods of RFC 9110 §9 and PATCH as
/// it is, any other token `other`. A method is a token the client chooses freely, so written
/// as sent it would be a channel for any text into the log (docs/design.md §7 allows fixed
/// words only).
pub(crate) fn method_word(method: &Method) -> &'static str {
    const KNOWN: [&str; 9] = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
    ];
    KNOWN
        .into_iter()
        .find(|k| method.as_str() == *k)
        .unwrap_or("other")
}

/// Failed exchanges of one relay, by mount and failure word, for the stop's summary: an
/// unreachable upstream otherwise shows only in the log, one line per exchange.
#[derive(Debug, Default)]
pub(crate) struct FailedExchanges(std::sync::Mutex<BTreeMap<(String, &'static str), u64>>);

impl FailedExchanges {
    fn count(&self, mount: &str, word: &'static str) {
        let mut failed = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *failed.entry((mount.to_string(), word)).or_default() += 1;
    }

    /// Failed exchanges so far: (mount, failure word, how many), by mount then word.
    pub(crate) fn counts(&self) -> Vec<(String, &'static str, u64)> {
        let failed = self.0.lock().unwrap_or_else(|e| e.into_inner());
        failed
            .iter()
            .map(|((mount, word), n)| (mount.clone(), *word, *n))
            .collect()
    }
}

impl Drop for ExchangeLog {
    fn drop(&mut self) {
        // A fixed word of ours when something failed, and no field at all when nothing did.
        let upstream = self.failure.lock().ok().and_then(|g| *g);
        let failure = match upstream {
            Some(f) => Some(f.as_str()),
            None if self.failed.load(Ordering::Relaxed) => Some("broken"),
            None => None,
        };
        if let Some(word) = failure {
            self.tally.count(&self.mount, word);
        }
        macro_rules! line {
            ($level:ident) => {
                tracing::$level!(
                    mount = %self.mount,
                    method = self.method,
                    path = %self.path,
                    status = self.status.load(Ordering::Relaxed),
                    bytes_up = self.up.load(Ordering::Relaxed),
                    bytes_down = self.down.load(Ordering::Relaxed),
                    ms = self.started.elapsed().as_secs_f64() * 1000.0,
                    failure,
                    "exchange"
                )
            };
        }
        // The upstream could not be reached or failed: the host got our 502/504, not the
        // model's answer, which someone must see. A stream broken mid-way (either side may
        // have gone) stays informational.
        if upstream.is_some() {
            line!(warn);
        } else {
            line!(info);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_method_is_logged_as_a_fixed_word() {
        for m in ["GET", "POST", "PATCH", "DELETE", "OPTIONS"] {
            assert_eq!(method_word(&Method::from_bytes(m.as_bytes()).unwrap()), m);
        }
        for m in ["XSECRETMETHOD", "get", "PROPFIND"] {
            assert_eq!(
                method_word(&Method::from_bytes(m.as_bytes()).unwrap()),
                "other"
            );
        }
    }
}
