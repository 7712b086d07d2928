//! Small helpers for writing JSON Lines by hand, so that field order and number format are
//! fixed (replay must be byte-identical run after run).

use std::fmt::Write;

/// Appends `s` as a JSON string literal.
pub fn push_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Appends a string or `null`.
pub(crate) fn push_opt_str(out: &mut String, s: Option<&str>) {
    match s {
        Some(s) => push_str(out, s),
        None => out.push_str("null"),
    }
}

/// Appends a time in milliseconds: whole numbers without a fraction (`7187`, not `7187.0`),
/// others in the shortest form that reads back to the same `f64`.
pub fn push_ms(out: &mut String, t: f64) {
    if t.fract() == 0.0 && t.abs() < 9.0e15 {
        let _ = write!(out, "{}", t as i64);
    } else if t.is_finite() {
        // Rust's `Display` for f64 is the shortest round-tripping decimal, never exponent form.
        let _ = write!(out, "{t}");
    } else {
        out.push_str("null");
    }
}

/// Appends `"key":` (the key is a fixed ASCII word).
pub(crate) fn push_key(out: &mut String, key: &str) {
    out.push('"');
    out.push_str(key);
    out.push_str("\":");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_written_as_integers_when_whole() {
        let cases: &[(f64, &str)] = &[
            (0.0, "0"),
            (7187.0, "7187"),
            (7187.5, "7187.5"),
            (0.1, "0.1"),
            (1e15, "1000000000000000"),
        ];
        for (t, want) in cases {
            let mut s = String::new();
            push_ms(&mut s, *t);
            assert_eq!(&s, want, "{t}");
            assert_eq!(s.parse::<f64>().unwrap(), *t);
        }
    }

    #[test]
    fn strings_are_escaped_and_read_back() {
        for s in [
            "plain",
            "quo\"te",
            "back\\slash",
            "line\nbreak",
            "\u{1}ctl",
            "ünï",
        ] {
            let mut out = String::new();
            push_str(&mut out, s);
            let back: String = serde_json::from_str(&out).unwrap();
            assert_eq!(back, s);
        }
    }
}
