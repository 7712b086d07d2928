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

/// What a request asks for by way of a protocol switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UpgradeAsk {
    /// Nothing: `Connection` does not name `upgrade`, or there is no `Upgrade` (then an
    /// `Upgrade` line is an ordinary hop-by-hop header, and goes).
    No,
    /// A WebSocket handshake: `GET`, and `Upgrade` holds the one token `websocket`.
    WebSocket,
    /// Any other switch (`h2c`, several tokens, a WebSocket token on another method). The
    /// relay's tunnel after a `101` is a raw splice: what went through it would reach the
    /// upstream unparsed (another path, another `Host`), so only WebSocket, whose frames are
    /// all that may follow, is forwarded.
    Other,
}

/// What `req` asks for by way of `Connection: upgrade` and `Upgrade`.
pub(crate) fn upgrade_ask<B>(req: &Request<B>) -> UpgradeAsk {
    let headers = req.headers();
    let connection_upgrade = headers
        .get_all(header::CONNECTION)
        .iter()
        .flat_map(|v| tokens(v.as_bytes()))
        .any(|tok| tok.eq_ignore_ascii_case(b"upgrade"));
    if !connection_upgrade || !headers.contains_key(header::UPGRADE) {
        return UpgradeAsk::No;
    }
    let mut asked = headers
        .get_all(header::UPGRADE)
        .iter()
        .flat_map(|v| tokens(v.as_bytes()))
        .filter(|t| !t.is_empty());
    let websocket = matches!(
        (asked.next(), asked.next()),
        (Some(t), None) if t.eq_ignore_ascii_case(b"websocket")
    );
    if websocket && req.method() == http::Method::GET {
        UpgradeAsk::WebSocket
    } else {
        UpgradeAsk::Other
    }
}

/// A header's value, if it is text.
pub(crate) fn header_str<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}
