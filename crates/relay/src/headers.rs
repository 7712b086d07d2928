//! Header vocabulary shared by hyper's HTTP and WebSocket forwarding: what a reverse proxy
//! must remove (hop-by-hop headers, as [`h1::headers`] says) and how to read the few headers
//! the relay looks at.

use http::header::{self, HeaderMap, HeaderName};
use http::Request;

use h1::{connection_names, end_to_end, tokens};

/// Removes hop-by-hop headers, including every header named in `Connection`, and a
/// `Content-Length` beside a `Transfer-Encoding`: such a message was framed by its coding
/// (RFC 9112 §6.3), and hyper, which frames the message anew on its way out, would frame it
/// by the length it finds (a chunked 42-byte body beside `Content-Length: 0` reached the
/// client empty). A proxy removes the length there (the same section).
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    if headers.contains_key(header::TRANSFER_ENCODING) {
        headers.remove(header::CONTENT_LENGTH);
    }
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
pub(crate) fn is_upgrade<B>(req: &Request<B>) -> bool {
    let connection_upgrade = req
        .headers()
        .get_all(header::CONNECTION)
        .iter()
        .flat_map(|v| tokens(v.as_bytes()))
        .any(|tok| tok.eq_ignore_ascii_case(b"upgrade"));
    connection_upgrade && req.headers().contains_key(header::UPGRADE)
}

/// A header's value, if it is text.
pub(crate) fn header_str<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}
