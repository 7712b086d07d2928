//! Header vocabulary: the comma-separated tokens of a value, what `Connection` makes
//! hop-by-hop, and what it never can.

/// The hop-by-hop headers of RFC 9110 §7.6.1.
const HOP_BY_HOP: [&str; 6] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "te",
    "transfer-encoding",
    "upgrade",
];

/// The headers that say where a message ends and where it goes. `Connection` can never
/// remove them: a proxy that drops `Content-Length` because `Connection: Content-Length`
/// names it still sends the body, and the next hop reads that body as a request (or a
/// response) of its own on a connection that other clients then share: request smuggling.
/// hyper, nginx and HAProxy ignore such names the same way. (`Transfer-Encoding` is
/// hop-by-hop anyway: the relay frames the body it forwards itself.)
const FRAMING: [&str; 3] = ["content-length", "transfer-encoding", "host"];

/// The comma-separated tokens of a header value, trimmed.
pub fn tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(|t| t.trim_ascii())
}

/// The names the `Connection` header lines among `lines` list, lowercased: hop-by-hop too,
/// except the [`FRAMING`] names, which no `Connection` line can make hop-by-hop.
pub fn connection_names<'a>(lines: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> Vec<Vec<u8>> {
    lines
        .into_iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case(b"connection"))
        .flat_map(|(_, value)| tokens(value).map(<[u8]>::to_ascii_lowercase))
        .filter(|name| !FRAMING.iter().any(|f| name == f.as_bytes()))
        .collect()
}

/// Whether a header passes end to end: neither hop-by-hop nor among the `named` ones.
pub fn end_to_end(name: &[u8], named: &[Vec<u8>]) -> bool {
    !HOP_BY_HOP
        .iter()
        .any(|h| name.eq_ignore_ascii_case(h.as_bytes()))
        && !named.iter().any(|n| name.eq_ignore_ascii_case(n))
}
