//! Request paths as an upstream may read them, sans I/O.
//!
//! The relay forwards a path under a mount's base path byte for byte, and two questions about
//! it are answered here, because an upstream may read a path otherwise than as written:
//!
//! - [`has_dot_segment`]: whether a path could *leave* the base path once an upstream resolves
//!   it (RFC 3986 §5.2.4). Every spelling an upstream might take for a dot segment counts:
//!   dots plain or percent-encoded, segments between `/` or `\`, plain or encoded, and `;`
//!   parameters after the dots. The relay refuses such a path.
//! - [`route_path`]: which route a path *is* to an upstream that normalizes it, so that the
//!   observer sees a model route however it is spelled.
//!
//! The fuzz target `h1_target` holds both to an independent reading: a path not refused stays
//! under any base path after decoding once, `\` read as `/`, parameters dropped and dot
//! segments resolved; and [`route_path`] leaves no `//` and no `;`.

use std::borrow::Cow;

/// The byte `%XY` stands for, if `XY` are two hex digits.
fn percent_byte(hex: &[u8]) -> Option<u8> {
    let digit = |b: u8| (b as char).to_digit(16);
    match hex {
        [h, l, ..] => Some((digit(*h)? * 16 + digit(*l)?) as u8),
        _ => None,
    }
}

/// The path with every percent-encoding decoded once (an invalid one left as it is).
fn decoded(path: &str) -> Cow<'_, [u8]> {
    if !path.contains('%') {
        return Cow::Borrowed(path.as_bytes());
    }
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], percent_byte(&bytes[i + 1..])) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    Cow::Owned(out)
}

/// Whether `path` has a `.` or `..` segment in any spelling an upstream might resolve: dots
/// plain or percent-encoded, segments between `/` or `\`, plain or encoded, and a segment's
/// `;` parameters ignored (`..;x` is `..` to a server that strips them).
pub fn has_dot_segment(path: &str) -> bool {
    decoded(path)
        .split(|&b| b == b'/' || b == b'\\')
        .map(|seg| seg.split(|&b| b == b';').next().unwrap_or(seg))
        .any(|seg| {
            // Control bytes are what a server may strip (`..%00` is `..` to one that drops
            // NUL after decoding), so they count for nothing here.
            let mut dots = seg.iter().filter(|b| !b.is_ascii_control());
            matches!(
                (dots.next(), dots.next(), dots.next()),
                (Some(b'.'), None, _) | (Some(b'.'), Some(b'.'), None)
            )
        })
}

/// The path (no query) as a normalizing upstream would route it: percent-encoded unreserved
/// characters decoded (RFC 3986 §6.2.2.2), runs of `/` made one, and each segment's `;`
/// parameters dropped. (Dot segments are refused before, [`has_dot_segment`].)
pub fn route_path(path: &str) -> Cow<'_, str> {
    let plain = !path.contains(['%', ';']) && !path.contains("//");
    if plain {
        return Cow::Borrowed(path);
    }
    // Only ASCII is dropped or decoded to, so what is left of the text stays UTF-8.
    let mut out: Vec<u8> = Vec::with_capacity(path.len());
    let bytes = path.as_bytes();
    let mut i = 0;
    let mut in_params = false;
    while i < bytes.len() {
        let b = bytes[i];
        i += 1;
        match b {
            b'/' => {
                in_params = false;
                if out.last() != Some(&b'/') {
                    out.push(b'/');
                }
            }
            _ if in_params => {}
            b';' => in_params = true,
            b'%' => match percent_byte(&bytes[i..]) {
                Some(d) if d.is_ascii_alphanumeric() || b"-._~".contains(&d) => {
                    out.push(d);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            _ => out.push(b),
        }
    }
    Cow::Owned(
        String::from_utf8(out)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
    )
}
