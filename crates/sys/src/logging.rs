//! Log lines, written through the sanitizing door's log policy (`correlator::sanitize`).
//!
//! Every event is formatted here, whatever crate it comes from and whatever the level:
//! numbers and booleans as they are; text only for the allow-listed fields of windowtap's own
//! code (and its own literal messages); everything else, other crates' messages included,
//! as `<withheld>`. `RUST_LOG=trace` therefore shows what hyper or rustls do, how often and
//! how much, but never a header value or a byte of a body.

use std::fmt;

use correlator::sanitize::{log_text, LogField};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{self, FormatEvent, FormatFields};
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::registry::LookupSpan;

const WITHHELD: &str = "<withheld>";

/// Installs the logger on stderr: `RUST_LOG` if set, else `level`.
pub fn init(level: &str) {
    init_to(level, None);
}

/// Installs the logger on `file`, or on stderr when there is none: `RUST_LOG` if set, else
/// `level`. (`run` logs to a file, so that the host keeps its terminal.)
pub fn init_to(level: &str, file: Option<std::fs::File>) {
    use tracing_subscriber::fmt::writer::BoxMakeWriter;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let writer = match file {
        // Each line is one write of its own (`&File` writes unbuffered).
        Some(f) => BoxMakeWriter::new(std::sync::Arc::new(f)),
        None => BoxMakeWriter::new(std::io::stderr),
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .event_format(Sanitized)
        .try_init();
}

/// The one event format: time, level, target, then the fields the policy admits.
pub struct Sanitized;

impl<S, N> FormatEvent<S, N> for Sanitized
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut w: format::Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        SystemTime.format_time(&mut w)?;
        write!(w, " {:>5} {}:", meta.level(), meta.target())?;
        let mut fields = Fields {
            target: meta.target(),
            out: String::new(),
        };
        event.record(&mut fields);
        writeln!(w, "{}", fields.out)
    }
}

/// Writes each field by the policy.
struct Fields<'t> {
    target: &'t str,
    out: String,
}

impl Fields<'_> {
    fn push(&mut self, field: &Field, value: fmt::Arguments<'_>) {
        use fmt::Write;
        if field.name() == "message" {
            let _ = write!(self.out, " {value}");
        } else {
            let _ = write!(self.out, " {}={value}", field.name());
        }
    }

    fn text(&mut self, field: &Field, value: &dyn fmt::Display) {
        match log_text(self.target, field.name()) {
            LogField::Admit => self.push(field, format_args!("{value}")),
            LogField::Withhold => self.push(field, format_args!("{WITHHELD}")),
        }
    }
}

/// A fraction as people read it: two decimals (`9.23`), or three significant digits below
/// 0.1 (`0.0123`); whole numbers as they are. Durations are logged in milliseconds, where
/// nanoseconds (`9.233896999999999`) are noise.
pub fn for_people(v: f64) -> f64 {
    if !v.is_finite() || v == 0.0 {
        return v;
    }
    let decimals = if v.abs() >= 0.1 {
        2
    } else {
        (2 - v.abs().log10().floor() as i32).min(15)
    };
    let scale = 10f64.powi(decimals);
    (v * scale).round() / scale
}

impl Visit for Fields<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.push(field, format_args!("{}", for_people(value)));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.push(field, format_args!("{value}"));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.push(field, format_args!("{value}"));
    }

    fn record_i128(&mut self, field: &Field, value: i128) {
        self.push(field, format_args!("{value}"));
    }

    fn record_u128(&mut self, field: &Field, value: u128) {
        self.push(field, format_args!("{value}"));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.push(field, format_args!("{value}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.text(field, &value);
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.text(field, &value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // `message` arrives here as the formatted literal; `%x` fields as their Display.
        self.text(field, &DebugAsDisplay(value));
    }
}

struct DebugAsDisplay<'a>(&'a dyn fmt::Debug);

impl fmt::Display for DebugAsDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn capture(f: impl FnOnce()) -> String {
        let buf = Buf::default();
        let out = buf.clone();
        let sub = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(move || out.clone())
            .event_format(Sanitized)
            .finish();
        tracing::subscriber::with_default(sub, f);
        let bytes = buf.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn own_words_pass_and_anything_else_is_withheld() {
        let secret = "Bearer sk-ant-CANARY-log";
        let text = capture(|| {
            tracing::info!(
                mount = "anthropic",
                status = 200u64,
                authorization = secret,
                header = %secret,
                "exchange"
            );
        });
        assert!(text.contains("mount=anthropic"), "{text}");
        assert!(text.contains("status=200"), "{text}");
        assert!(text.contains("authorization=<withheld>"), "{text}");
        assert!(text.contains("header=<withheld>"), "{text}");
        assert!(text.contains(" exchange"), "{text}");
        assert!(!text.contains("CANARY"), "{text}");
    }

    #[test]
    fn fractions_are_rounded_for_people() {
        assert_eq!(for_people(9.233896999999999), 9.23);
        assert_eq!(for_people(1162.01602), 1162.02);
        assert_eq!(for_people(0.012345), 0.0123);
        assert_eq!(for_people(7.0), 7.0);
        let text = capture(|| tracing::info!(ms = 9.233896999999999f64, "exchange"));
        assert!(text.contains(" ms=9.23"), "{text}");
    }

    #[test]
    fn other_crates_keep_numbers_but_lose_their_messages() {
        let secret = "x-api-key: CANARY-dep";
        let text = capture(|| {
            tracing::trace!(target: "hyper::proto::h1::role", bytes = 512u64, "parsed {}", secret);
        });
        assert!(text.contains("hyper::proto::h1::role"), "{text}");
        assert!(text.contains("bytes=512"), "{text}");
        assert!(text.contains("<withheld>"), "{text}");
        assert!(!text.contains("CANARY"), "{text}");
        assert!(!correlator::sanitize::log_target_is_own("hyper::proto"));
    }
}
