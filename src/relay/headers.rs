//! Header vocabulary shared by HTTP and WebSocket forwarding: what a reverse proxy must
//! remove (hop-by-hop headers) and how to read the few headers the relay looks at.

use http::header::{self, HeaderMap, HeaderName};
use http::Request;

/// The hop-by-hop headers of RFC 9110 §7.6.1.
const HOP_BY_HOP: [&str; 6] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "te",
    "transfer-encoding",
    "upgrade",
];

/// The comma-separated tokens of a header value, trimmed.
pub(super) fn tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(|t| t.trim_ascii())
}

/// The headers that say where a message ends and where it goes. `Connection` can never
/// remove them: a proxy that drops `Content-Length` because `Connection: Content-Length`
/// names it still sends the body, and the next hop reads that body as a request (or a
/// response) of its own on a connection that other clients then share: request smuggling.
/// hyper, nginx and HAProxy ignore such names the same way. (`Transfer-Encoding` is
/// hop-by-hop anyway: the relay frames the body it forwards itself.)
const FRAMING: [&str; 3] = ["content-length", "transfer-encoding", "host"];

/// The names the `Connection` header lines among `lines` list, lowercased: hop-by-hop too,
/// except the [`FRAMING`] names, which no `Connection` line can make hop-by-hop.
pub(super) fn connection_names<'a>(
    lines: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
) -> Vec<Vec<u8>> {
    lines
        .into_iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case(b"connection"))
        .flat_map(|(_, value)| tokens(value).map(<[u8]>::to_ascii_lowercase))
        .filter(|name| !FRAMING.iter().any(|f| name == f.as_bytes()))
        .collect()
}

/// Whether a header passes end to end: neither hop-by-hop nor among the `named` ones.
pub(super) fn end_to_end(name: &[u8], named: &[Vec<u8>]) -> bool {
    !HOP_BY_HOP
        .iter()
        .any(|h| name.eq_ignore_ascii_case(h.as_bytes()))
        && !named.iter().any(|n| name.eq_ignore_ascii_case(n))
}

/// Removes hop-by-hop headers, including every header named in `Connection`.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named = connection_names(
        headers
            .iter()
            .map(|(name, value)| (name.as_str().as_bytes(), value.as_bytes())),
    );
    let hop: Vec<HeaderName> = headers
        .keys()
        .filter(|name| !end_to_end(name.as_str().as_bytes(), &named))
        .cloned()
        .collect();
    for name in hop {
        headers.remove(name);
    }
}

/// Whether a request asks to switch protocols (a WebSocket handshake).
pub fn is_upgrade<B>(req: &Request<B>) -> bool {
    let connection_upgrade = req
        .headers()
        .get_all(header::CONNECTION)
        .iter()
        .flat_map(|v| tokens(v.as_bytes()))
        .any(|tok| tok.eq_ignore_ascii_case(b"upgrade"));
    connection_upgrade && req.headers().contains_key(header::UPGRADE)
}

/// A header's value, if it is text.
pub fn header_str<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}
