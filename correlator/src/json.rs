//! Small helpers for writing JSON Lines by hand, so that field order and number format are
//! fixed (replay must be byte-identical run after run).

use std::fmt::Write;

/// Appends `s` as a JSON string literal. Runs of characters that need no escape (all of an
/// id, nearly always) are copied whole: a character at a time was a third of writing a record.
pub fn push_str(out: &mut String, s: &str) {
    out.push('"');
    let mut rest = s;
    while let Some(at) = rest
        .bytes()
        .position(|b| b == b'"' || b == b'\\' || b < 0x20)
    {
        // An ASCII byte: the cut is on a character boundary.
        out.push_str(&rest[..at]);
        match rest.as_bytes()[at] {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            c => {
                let _ = write!(out, "\\u{:04x}", c);
            }
        }
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
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
        if t < 0.0 {
            out.push('-');
        }
        push_u64(out, t.abs() as u64);
    } else if let Some(hundredths) = hundredths(t) {
        // Times are often quarter or tenth milliseconds: written without the general
        // shortest-decimal search, to the same text.
        push_u64(out, hundredths / 100);
        out.push('.');
        let frac = (hundredths % 100) as u8;
        out.push(char::from(b'0' + frac / 10));
        if frac % 10 != 0 {
            out.push(char::from(b'0' + frac % 10));
        }
    } else if t.is_finite() {
        // Rust's `Display` for f64 is the shortest round-tripping decimal, never exponent form.
        let _ = write!(out, "{t}");
    } else {
        out.push_str("null");
    }
}

/// Appends `n` in decimal. (Records carry six numbers each: `write!`'s formatting machinery,
/// and then a digit at a time, were a visible part of writing them.)
pub(crate) fn push_u64(out: &mut String, n: u64) {
    out.push_str(itoa::Buffer::new().format(n));
}

/// `t` as a whole number of hundredths, when it is the `f64` nearest to one (what parsing its
/// two-decimal text gives) and small enough that no shorter decimal is as near: below 2^40
/// (35 years of milliseconds) two doubles are less than 0.00025 apart, so a decimal with fewer
/// places, 0.01 or more away, reads back to another double. Then that two-decimal text, its
/// trailing zero dropped, is the shortest that reads back to `t`: what `Display` writes.
fn hundredths(t: f64) -> Option<u64> {
    if !(0.0..1_099_511_627_776.0).contains(&t) {
        return None;
    }
    let h = (t * 100.0).round();
    // Both exact doubles (h < 2^47), so the quotient is the correctly rounded h/100.
    (h / 100.0 == t).then_some(h as u64)
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
    fn whole_numbers_are_written_as_display_writes_them() {
        for n in [0u64, 1, 9, 10, 99, 100, 7187, 1 << 53, u64::MAX] {
            let mut s = String::new();
            push_u64(&mut s, n);
            assert_eq!(s, n.to_string());
        }
        for t in [-0.0, -1.0, -7187.0, 8.9e15, -8.9e15] {
            let mut s = String::new();
            push_ms(&mut s, t);
            assert_eq!(s, format!("{}", t as i64), "{t}");
        }
    }

    #[test]
    fn hundredths_are_written_as_display_writes_them() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..200_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Quarter and hundredth milliseconds over many magnitudes, and arbitrary doubles.
            let t = match i % 3 {
                0 => (x % 10u64.pow(1 + (i % 13) as u32)) as f64 / 4.0,
                1 => (x % 10u64.pow(1 + (i % 14) as u32)) as f64 / 100.0,
                _ => f64::from_bits(x >> 2) % 1e12,
            };
            let mut s = String::new();
            push_ms(&mut s, t);
            assert_eq!(s, format!("{t}"), "{t:e}");
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
