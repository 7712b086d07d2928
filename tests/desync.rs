//! Request smuggling and response desync, end to end: crafted framing goes through the real
//! relay to a strict RFC 9112 upstream that logs every request it parses, and other clients
//! then use the same relay (and so, where the relay pools them, the same upstream
//! connections).
//!
//! What must hold whatever the attacker sends, request side:
//! - the upstream never parses a request the relay did not take as one: the hidden request
//!   in each attack has a target no mount routes (`/smuggled`), so only a request carried
//!   inside another request's body can reach the upstream with it;
//! - no other client's credential ever reaches the upstream inside a body;
//! - every other client gets its own answer (the upstream names the path it answers).
//!
//! Response side: a crafted response head reaches the client framed so that it can be read
//! to its end on a kept-alive connection (or the connection closes, or the relay answers
//! 502), and the answer to the next request, on that connection or another, is that
//! request's own.
//!
//! Every case runs against a fresh relay and upstream; a failing case is reported by name
//! with what went wrong, after all cases ran.

mod support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::{pki, Relay};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How long a read waits before the test says what it got. Only a broken relay (an unframed
/// response on a kept-alive connection, a request that never ends) reaches it.
const READ_BOUND: Duration = Duration::from_secs(10);

/// The victims' credential, per victim; it must only ever reach the upstream as a header.
fn victim_key(n: usize) -> String {
    format!("VICTIM-KEY-{n}-0b1d5e")
}

// ---------------------------------------------------------------------------------------
// A strict RFC 9112 upstream
// ---------------------------------------------------------------------------------------

/// One request as the upstream parsed it.
#[derive(Debug, Clone)]
struct Parsed {
    path: String,
    /// Header lines, name lowercased, value as text.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// What the upstream saw: requests parsed and heads it rejected.
#[derive(Default)]
struct Seen {
    requests: Vec<Parsed>,
    rejected: usize,
    /// Per TLS connection, the protocol ALPN settled on.
    alpn: Vec<Option<Vec<u8>>>,
}

/// A chunked body of 42 payload bytes.
const CHUNKED_42: &str = "2a\r\n0123456789abcdefghijklmnopqrstuvwxyzABCDEF\r\n0\r\n\r\n";

/// The body a client must read from a crafted answer whose framing is clear (RFC 9112 §6.3:
/// the coding frames the body when a length stands beside it).
fn expected_body(case: &str) -> Option<&'static [u8]> {
    match case {
        "te-and-cl-0" => Some(b"0123456789abcdefghijklmnopqrstuvwxyzABCDEF"),
        "te-and-cl-1000" | "cl-and-te" | "conn-te" => Some(b"hello"),
        _ => None,
    }
}

/// A hidden response a bad upstream may leave on its connection: a client that gets it
/// got an answer to a request it never sent.
const HIDDEN_RESPONSE: &str = "HTTP/1.1 200 OK\r\nContent-Length: 16\r\n\r\nanswer:/smuggled";

/// The crafted answer for `/resp/<case>`, or `None` for an ordinary answer. The second
/// value: close the connection after it.
fn crafted(case: &str) -> Option<(String, bool)> {
    let hidden = HIDDEN_RESPONSE;
    Some(match case {
        "conn-cl" => (
            "HTTP/1.1 200 OK\r\nConnection: Content-Length\r\nContent-Length: 5\r\n\r\nhello".into(),
            false,
        ),
        "conn-keep-cl" => (
            "HTTP/1.1 200 OK\r\nConnection: keep-alive, content-length\r\nContent-Length: 5\r\n\r\nhello"
                .into(),
            false,
        ),
        "conn-te" => (
            "HTTP/1.1 200 OK\r\nConnection: Transfer-Encoding\r\nTransfer-Encoding: chunked\r\n\r\n\
             5\r\nhello\r\n0\r\n\r\n"
                .into(),
            false,
        ),
        "cl-and-te" => (
            "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n\
             5\r\nhello\r\n0\r\n\r\n"
                .into(),
            false,
        ),
        "204-with-length" => (
            format!("HTTP/1.1 204 No Content\r\nContent-Length: {}\r\n\r\n{hidden}", hidden.len()),
            false,
        ),
        "204-chunked" => (
            format!(
                "HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n{hidden}"
            ),
            false,
        ),
        "304-with-length" => (
            "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n".into(),
            false,
        ),
        "bytes-past-the-length" => (
            format!("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello{hidden}"),
            false,
        ),
        "two-lengths" => (
            format!("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!{hidden}"),
            false,
        ),
        "length-plus" => (
            format!("HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nhello{hidden}"),
            false,
        ),
        "chunked-not-last" => (
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\nhello".into(),
            true,
        ),
        "obs-fold" => (
            format!("HTTP/1.1 200 OK\r\nX-A: 1\r\n folded\r\nContent-Length: 5\r\n\r\nhello{hidden}"),
            false,
        ),
        "bad-chunk" => (
            format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5x\r\nhello\r\n0\r\n\r\n{hidden}"),
            false,
        ),
        // A length beside the coding, shorter or longer than the chunked body: the coding
        // frames it (RFC 9112 §6.3), and a proxy removes the length.
        "te-and-cl-0" => (
            format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n{CHUNKED_42}"),
            false,
        ),
        "te-and-cl-1000" => (
            "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
                .into(),
            false,
        ),
        // A bare LF in the trailer section: no client could read it on.
        "trailer-bare-lf" => (
            format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nx-t: 1\n\r\n{hidden}"),
            false,
        ),
        _ => return None,
    })
}

/// Reads one request strictly: a head `httparse` takes whole, HTTP/1.1, at most one length
/// (repeats must agree, digits only), `Transfer-Encoding` only as exactly `chunked` and never
/// beside a length; the body by that framing. `Err` rejects the connection's rest.
async fn read_request<S: AsyncRead + Unpin>(
    io: &mut S,
    buf: &mut Vec<u8>,
) -> Result<Option<Parsed>, ()> {
    let (len, path, headers) = loop {
        let mut lines = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut lines);
        match req.parse(buf) {
            Ok(httparse::Status::Complete(n)) => {
                if req.version != Some(1) {
                    return Err(());
                }
                let headers: Vec<(String, String)> = req
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.name.to_ascii_lowercase(),
                            String::from_utf8_lossy(h.value).into_owned(),
                        )
                    })
                    .collect();
                break (n, req.path.unwrap_or("").to_string(), headers);
            }
            Ok(httparse::Status::Partial) => {}
            Err(_) => return Err(()),
        }
        if !read_more(io, buf).await {
            return if buf.is_empty() { Ok(None) } else { Err(()) };
        }
    };
    buf.drain(..len);
    let lengths: Vec<&str> = headers
        .iter()
        .filter(|(n, _)| n == "content-length")
        .map(|(_, v)| v.as_str())
        .collect();
    let codings: Vec<&str> = headers
        .iter()
        .filter(|(n, _)| n == "transfer-encoding")
        .map(|(_, v)| v.as_str())
        .collect();
    let body = if !codings.is_empty() {
        if !lengths.is_empty() || codings.len() != 1 || !codings[0].eq_ignore_ascii_case("chunked")
        {
            return Err(());
        }
        read_chunked(io, buf).await?
    } else {
        let n = match lengths.as_slice() {
            [] => 0,
            [first, rest @ ..] => {
                if !first.bytes().all(|b| b.is_ascii_digit())
                    || first.is_empty()
                    || rest.iter().any(|v| v != first)
                {
                    return Err(());
                }
                first.parse::<usize>().map_err(|_| ())?
            }
        };
        while buf.len() < n {
            if !read_more(io, buf).await {
                return Err(());
            }
        }
        buf.drain(..n).collect()
    };
    Ok(Some(Parsed {
        path,
        headers,
        body,
    }))
}

async fn read_more<S: AsyncRead + Unpin>(io: &mut S, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 16 * 1024];
    match tokio::time::timeout(READ_BOUND, io.read(&mut chunk)).await {
        Ok(Ok(n)) if n > 0 => {
            buf.extend_from_slice(&chunk[..n]);
            true
        }
        _ => false,
    }
}

/// A line ending in CRLF at the front of `buf`, taken off; `Err` if it ends otherwise.
async fn read_line<S: AsyncRead + Unpin>(io: &mut S, buf: &mut Vec<u8>) -> Result<Vec<u8>, ()> {
    loop {
        if let Some(i) = buf.iter().position(|&b| b == b'\n') {
            if i == 0 || buf[i - 1] != b'\r' {
                return Err(());
            }
            let line = buf[..i - 1].to_vec();
            buf.drain(..=i);
            return Ok(line);
        }
        if buf.len() > 4096 || !read_more(io, buf).await {
            return Err(());
        }
    }
}

async fn read_chunked<S: AsyncRead + Unpin>(io: &mut S, buf: &mut Vec<u8>) -> Result<Vec<u8>, ()> {
    let mut body = Vec::new();
    loop {
        let line = read_line(io, buf).await?;
        let size = line.split(|&b| b == b';').next().unwrap_or(&[]);
        if size.is_empty() || size.len() > 8 || !size.iter().all(u8::is_ascii_hexdigit) {
            return Err(());
        }
        let n = usize::from_str_radix(std::str::from_utf8(size).map_err(|_| ())?, 16)
            .map_err(|_| ())?;
        if n == 0 {
            // Trailers, then the empty line.
            while !read_line(io, buf).await?.is_empty() {}
            return Ok(body);
        }
        while buf.len() < n + 2 {
            if !read_more(io, buf).await {
                return Err(());
            }
        }
        if &buf[n..n + 2] != b"\r\n" {
            return Err(());
        }
        body.extend_from_slice(&buf[..n]);
        buf.drain(..n + 2);
    }
}

/// Serves one connection: each request parsed strictly and logged, then answered with
/// `answer:<path>` (or the crafted answer its path asks for); a rejected head gets a `400`
/// and the connection closes, as RFC 9112 asks of a server that cannot tell where the next
/// request starts.
async fn serve_strict<S: AsyncRead + AsyncWrite + Unpin>(mut io: S, seen: Arc<Mutex<Seen>>) {
    let mut buf = Vec::new();
    loop {
        let req = match read_request(&mut io, &mut buf).await {
            Ok(Some(r)) => r,
            Ok(None) => return,
            Err(()) => {
                seen.lock().unwrap().rejected += 1;
                let _ = io
                    .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    .await;
                return;
            }
        };
        let close = req
            .headers
            .iter()
            .any(|(n, v)| n == "connection" && v.to_ascii_lowercase().contains("close"));
        let path = req.path.clone();
        seen.lock().unwrap().requests.push(req);
        let (answer, close_after) = match path.strip_prefix("/resp/").and_then(crafted) {
            Some(c) => c,
            None => {
                let body = format!("answer:{path}");
                (
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    ),
                    false,
                )
            }
        };
        if io.write_all(answer.as_bytes()).await.is_err() || io.flush().await.is_err() {
            return;
        }
        if close || close_after {
            let _ = io.shutdown().await;
            return;
        }
    }
}

struct StrictUpstream {
    addr: SocketAddr,
    tls: bool,
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

impl StrictUpstream {
    async fn start(tls: Option<Arc<rustls::ServerConfig>>) -> StrictUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let is_tls = tls.is_some();
        let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
        let log = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (seen, acceptor) = (log.clone(), acceptor.clone());
                tokio::spawn(async move {
                    match acceptor {
                        Some(a) => {
                            if let Ok(tls) = a.accept(tcp).await {
                                let alpn = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
                                seen.lock().unwrap().alpn.push(alpn);
                                serve_strict(tls, seen).await;
                            }
                        }
                        None => serve_strict(tcp, seen).await,
                    }
                });
            }
        });
        StrictUpstream {
            addr,
            tls: is_tls,
            seen,
            task,
        }
    }

    fn relay(&self, ca: Option<&std::path::Path>) -> Relay {
        let url = if self.tls {
            format!("up=https://localhost:{}", self.addr.port())
        } else {
            format!("up=http://{}", self.addr)
        };
        let mut args = vec!["--upstream".to_string(), url];
        if let Some(ca) = ca {
            args.push("--upstream-ca".into());
            args.push(ca.display().to_string());
        }
        Relay::start(&args)
    }
}

impl Drop for StrictUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ---------------------------------------------------------------------------------------
// A strict client
// ---------------------------------------------------------------------------------------

/// One response as a strict client reads it.
#[derive(Debug)]
struct Answer {
    status: u16,
    body: Vec<u8>,
}

/// What reading one response gave.
#[derive(Debug)]
enum Read {
    Answer(Answer),
    /// The connection ended before a response began.
    Closed,
    /// Something a client cannot read: a bad head, broken framing, or no end in time (an
    /// unframed body on a kept-alive connection never ends).
    Broken(&'static str),
}

/// Reads one final response by RFC 9112 §6.3 (never to a `HEAD`): no body for 204 and 304,
/// chunked when it is the last coding, to the close for another coding or no length.
async fn read_response(io: &mut TcpStream, buf: &mut Vec<u8>) -> Read {
    loop {
        let parsed = {
            let mut lines = [httparse::EMPTY_HEADER; 64];
            let mut res = httparse::Response::new(&mut lines);
            match res.parse(buf) {
                Ok(httparse::Status::Complete(n)) => {
                    let status = res.code.unwrap_or(0);
                    let mut te = None;
                    let mut lengths = Vec::new();
                    for h in res.headers.iter() {
                        if h.name.eq_ignore_ascii_case("transfer-encoding") {
                            te = Some(String::from_utf8_lossy(h.value).to_ascii_lowercase());
                        } else if h.name.eq_ignore_ascii_case("content-length") {
                            lengths.push(String::from_utf8_lossy(h.value).trim().to_string());
                        }
                    }
                    Some((n, status, te, lengths))
                }
                Ok(httparse::Status::Partial) => None,
                Err(_) => return Read::Broken("a response head a client cannot parse"),
            }
        };
        let Some((n, status, te, lengths)) = parsed else {
            if !read_more(io, buf).await {
                return if buf.is_empty() {
                    Read::Closed
                } else {
                    Read::Broken("a response head cut off")
                };
            }
            continue;
        };
        buf.drain(..n);
        if (100..200).contains(&status) {
            continue;
        }
        let body = if status == 204 || status == 304 {
            Vec::new()
        } else if let Some(te) = te {
            if te.rsplit(',').next().map(str::trim) == Some("chunked") {
                match read_chunked(io, buf).await {
                    Ok(b) => b,
                    Err(()) => return Read::Broken("a chunked body that does not end as framed"),
                }
            } else {
                return Read::Broken("a body only the close ends, on a connection kept open");
            }
        } else if let Some(first) = lengths.first() {
            if lengths.iter().any(|l| l != first) {
                return Read::Broken("two lengths");
            }
            let Ok(len) = first.parse::<usize>() else {
                return Read::Broken("a length that is not a number");
            };
            while buf.len() < len {
                if !read_more(io, buf).await {
                    return Read::Broken("a body shorter than its length");
                }
            }
            buf.drain(..len).collect()
        } else {
            // No framing: the body runs to the close. A relay keeping the connection open
            // with such a response has desynchronized it.
            let mut body = std::mem::take(buf);
            loop {
                let mut chunk = [0u8; 4096];
                match tokio::time::timeout(READ_BOUND, io.read(&mut chunk)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => break,
                    Ok(Ok(n)) => body.extend_from_slice(&chunk[..n]),
                    Err(_) => return Read::Broken("an unframed body on a connection kept open"),
                }
            }
            body
        };
        return Read::Answer(Answer { status, body });
    }
}

/// A victim: a fresh connection, one request with its own credential, its answer checked.
async fn victim(relay: SocketAddr, n: usize) -> Result<(), String> {
    let mut io = TcpStream::connect(relay).await.unwrap();
    let req = format!(
        "GET /up/victim/{n} HTTP/1.1\r\nHost: relay\r\nx-api-key: {}\r\n\r\n",
        victim_key(n)
    );
    io.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    match read_response(&mut io, &mut buf).await {
        Read::Answer(a)
            if a.status == 200 && a.body == format!("answer:/victim/{n}").as_bytes() =>
        {
            Ok(())
        }
        Read::Answer(a) => Err(format!(
            "victim {n} got status {} with body {:?}",
            a.status,
            String::from_utf8_lossy(&a.body)
        )),
        other => Err(format!("victim {n} got {other:?}")),
    }
}

/// The request-side invariants over what the upstream parsed.
fn check_upstream(seen: &Seen) -> Result<(), String> {
    for r in &seen.requests {
        if r.path.contains("smuggled") {
            return Err(format!(
                "the upstream parsed a smuggled request {:?}",
                r.path
            ));
        }
        let body = String::from_utf8_lossy(&r.body);
        if body.contains("VICTIM-KEY") {
            return Err(format!(
                "a victim's credential reached the upstream inside the body of {:?}",
                r.path
            ));
        }
        if let Some(n) = r.path.strip_prefix("/victim/") {
            let key = victim_key(n.parse().unwrap_or(usize::MAX));
            if !r.headers.iter().any(|(h, v)| h == "x-api-key" && *v == key) {
                return Err(format!("victim {n}'s request arrived without its own key"));
            }
        }
    }
    Ok(())
}

const VICTIMS: usize = 3;

/// Sends `attack` on one connection, reads what comes back (whatever it is), then runs the
/// victims one after the other (each takes what the relay pooled) and checks everything.
async fn request_case(
    up: &StrictUpstream,
    relay: &Relay,
    attack: &[u8],
    pieces: usize,
) -> Result<(), String> {
    let mut io = TcpStream::connect(relay.addr).await.unwrap();
    // In `pieces` writes: the relay must not care where its reads end.
    let step = attack.len().div_ceil(pieces.max(1));
    for piece in attack.chunks(step.max(1)) {
        if io.write_all(piece).await.is_err() {
            break;
        }
        io.flush().await.ok();
        if pieces > 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    // The attacker's answers: as many as come, until the relay closes or stops sending.
    let mut buf = Vec::new();
    let mut answers = Vec::new();
    for _ in 0..3 {
        match tokio::time::timeout(Duration::from_secs(2), read_response(&mut io, &mut buf)).await {
            Ok(Read::Answer(a)) => answers.push(a),
            _ => break,
        }
    }
    for a in &answers {
        if String::from_utf8_lossy(&a.body).contains("victim") {
            return Err("the attacker got a victim's answer".into());
        }
    }
    for n in 0..VICTIMS {
        victim(relay.addr, n).await?;
    }
    drop(io);
    check_upstream(&up.seen.lock().unwrap())
}

/// Hidden requests: a target no mount routes, and one that swallows the next request sent
/// on its upstream connection into its body.
const HIDDEN: &str = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
const HIDDEN_SWALLOWING: &str = "POST /smuggled HTTP/1.1\r\nHost: x\r\nContent-Length: 200\r\n\r\n";

fn with_length(head: &str, body: &str) -> Vec<u8> {
    format!("{head}Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

/// The request-side table: a name and the bytes an attacker sends.
fn request_attacks() -> Vec<(&'static str, Vec<u8>)> {
    let post = "POST /up/a HTTP/1.1\r\nHost: relay\r\n";
    let chunk = |s: &str| format!("{:x}\r\n{s}\r\n", s.len());
    vec![
        (
            "Connection names Content-Length",
            with_length(&format!("{post}Connection: Content-Length\r\n"), HIDDEN),
        ),
        (
            "Connection names Content-Length (swallowing)",
            with_length(&format!("{post}Connection: Content-Length\r\n"), HIDDEN_SWALLOWING),
        ),
        (
            "Connection: close, content-length",
            with_length(&format!("{post}Connection: close, content-length\r\n"), HIDDEN),
        ),
        (
            "Connection names Host and Content-Length",
            with_length(&format!("{post}Connection: host\r\nConnection: Content-Length\r\n"), HIDDEN_SWALLOWING),
        ),
        (
            "Connection names Transfer-Encoding of a chunked body",
            format!(
                "{post}Connection: Transfer-Encoding\r\nTransfer-Encoding: chunked\r\n\r\n{}0\r\n\r\n",
                chunk(HIDDEN)
            )
            .into_bytes(),
        ),
        (
            "CL.TE: a length and chunked",
            format!(
                "{post}Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{HIDDEN}"
            )
            .into_bytes(),
        ),
        (
            "TE.CL: chunked and a short length",
            format!(
                "{post}Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n{}0\r\n\r\n",
                chunk(HIDDEN_SWALLOWING)
            )
            .into_bytes(),
        ),
        (
            "two different lengths",
            format!("{post}Content-Length: 0\r\nContent-Length: {}\r\n\r\n{HIDDEN}", HIDDEN.len()).into_bytes(),
        ),
        (
            "a length with a sign",
            format!("{post}Content-Length: +{}\r\n\r\n{HIDDEN}", HIDDEN.len()).into_bytes(),
        ),
        (
            "a length list",
            format!("{post}Content-Length: {0}, {0}\r\n\r\n{HIDDEN}", HIDDEN.len()).into_bytes(),
        ),
        (
            "a space before the colon",
            format!("{post}Content-Length : {}\r\n\r\n{HIDDEN}", HIDDEN.len()).into_bytes(),
        ),
        (
            "a coding before chunked",
            format!(
                "{post}Transfer-Encoding: gzip, chunked\r\n\r\n{}0\r\n\r\n{HIDDEN}",
                chunk("abc")
            )
            .into_bytes(),
        ),
        (
            "chunked, then another coding",
            format!("{post}Transfer-Encoding: chunked, gzip\r\n\r\n{}0\r\n\r\n{HIDDEN}", chunk("abc")).into_bytes(),
        ),
        (
            "an oddly spelled coding",
            format!("{post}Transfer-Encoding: xchunked\r\nContent-Length: 3\r\n\r\nabc{HIDDEN}").into_bytes(),
        ),
        (
            "two Transfer-Encoding lines",
            format!(
                "{post}Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n{}0\r\n\r\n{HIDDEN}",
                chunk("abc")
            )
            .into_bytes(),
        ),
        (
            "an obsolete folded line",
            format!("{post}X-A: 1\r\n Content-Length: 99\r\nContent-Length: 0\r\n\r\n{HIDDEN}").into_bytes(),
        ),
        (
            "bare LF line ends",
            format!("POST /up/a HTTP/1.1\nHost: relay\nContent-Length: 0\n\n{HIDDEN}").into_bytes(),
        ),
        (
            "a chunk size that overflows",
            format!("{post}Transfer-Encoding: chunked\r\n\r\n10000000000000003\r\nabc\r\n0\r\n\r\n{HIDDEN}").into_bytes(),
        ),
        (
            "pipelined requests of one client",
            format!("GET /up/p1 HTTP/1.1\r\nHost: relay\r\n\r\n{post}Content-Length: 2\r\n\r\nhiGET /up/p3 HTTP/1.1\r\nHost: relay\r\n\r\n")
                .into_bytes(),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_crafted_request_framing_smuggles_a_request_or_mixes_answers() {
    let mut failures = Vec::new();
    for (name, attack) in request_attacks() {
        for pieces in [1, 7] {
            let up = StrictUpstream::start(None).await;
            let relay = up.relay(None);
            if let Err(e) = request_case(&up, &relay, &attack, pieces).await {
                failures.push(format!("{name} (in {pieces} writes): {e}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "desync cases failed:\n{}",
        failures.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_answered_in_order_to_their_client() {
    let up = StrictUpstream::start(None).await;
    let relay = up.relay(None);
    let mut io = TcpStream::connect(relay.addr).await.unwrap();
    io.write_all(
        b"GET /up/p1 HTTP/1.1\r\nHost: relay\r\n\r\nPOST /up/p2 HTTP/1.1\r\nHost: relay\r\n\
          Content-Length: 2\r\n\r\nhiGET /up/p3 HTTP/1.1\r\nHost: relay\r\n\r\n",
    )
    .await
    .unwrap();
    let mut buf = Vec::new();
    for n in 1..=3 {
        match read_response(&mut io, &mut buf).await {
            Read::Answer(a) => assert_eq!(
                String::from_utf8_lossy(&a.body),
                format!("answer:/p{n}"),
                "answer {n}"
            ),
            other => panic!("answer {n}: {other:?}"),
        }
    }
    let seen = up.seen.lock().unwrap();
    let paths: Vec<&str> = seen.requests.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(paths, ["/p1", "/p2", "/p3"]);
    assert_eq!(seen.requests[1].body, b"hi");
}

/// Which of the relay's two doors serves a request: the verbatim path takes a plain `GET`;
/// a chunked request body hands the connection to hyper.
#[derive(Debug, Clone, Copy)]
enum Door {
    Verbatim,
    Hyper,
}

impl Door {
    fn request(self, path: &str) -> String {
        match self {
            Door::Verbatim => format!("GET {path} HTTP/1.1\r\nHost: relay\r\n\r\n"),
            Door::Hyper => format!(
                "POST {path} HTTP/1.1\r\nHost: relay\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
            ),
        }
    }
}

/// The response-side case: a crafted answer, then the next request on the same connection,
/// then victims on fresh ones.
async fn response_case(relay: &Relay, case: &str, door: Door) -> Result<(), String> {
    let mut io = TcpStream::connect(relay.addr).await.unwrap();
    io.write_all(door.request(&format!("/up/resp/{case}")).as_bytes())
        .await
        .unwrap();
    let mut buf = Vec::new();
    match read_response(&mut io, &mut buf).await {
        Read::Answer(a) => {
            let body = String::from_utf8_lossy(&a.body);
            if body.contains("smuggled") {
                return Err(format!(
                    "the client read a hidden response as its body: {body:?}"
                ));
            }
            if let Some(want) = expected_body(case) {
                if a.status != 200 || a.body != want {
                    return Err(format!(
                        "the client read status {} and body {body:?}",
                        a.status
                    ));
                }
            }
        }
        // A body both framings agree on must reach the client.
        Read::Closed if expected_body(case).is_some() => {
            return Err("the connection closed before the answer".into())
        }
        Read::Closed => {}
        Read::Broken(why) => return Err(format!("the crafted answer: {why}")),
    }
    // The next request on the same connection, if the relay kept it.
    if io
        .write_all(door.request("/up/next").as_bytes())
        .await
        .is_ok()
    {
        match read_response(&mut io, &mut buf).await {
            Read::Answer(a) if a.body == b"answer:/next" => {}
            Read::Closed => {}
            Read::Answer(a) => {
                return Err(format!(
                    "the next request on the connection got status {} {:?}",
                    a.status,
                    String::from_utf8_lossy(&a.body)
                ))
            }
            Read::Broken(why) => return Err(format!("the next request on the connection: {why}")),
        }
    }
    for n in 0..VICTIMS {
        victim(relay.addr, n).await?;
    }
    Ok(())
}

const RESPONSE_CASES: [&str; 16] = [
    "conn-cl",
    "conn-keep-cl",
    "conn-te",
    "cl-and-te",
    "204-with-length",
    "204-chunked",
    "304-with-length",
    "bytes-past-the-length",
    "two-lengths",
    "length-plus",
    "chunked-not-last",
    "obs-fold",
    "bad-chunk",
    "te-and-cl-0",
    "te-and-cl-1000",
    "trailer-bare-lf",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_crafted_response_framing_desynchronizes_a_client_or_the_pool() {
    let mut failures = Vec::new();
    for door in [Door::Verbatim, Door::Hyper] {
        for case in RESPONSE_CASES {
            let up = StrictUpstream::start(None).await;
            let relay = up.relay(None);
            if let Err(e) = response_case(&relay, case, door).await {
                failures.push(format!("{case} ({door:?}): {e}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "desync cases failed:\n{}",
        failures.join("\n")
    );
}

/// The users' path: the upstream speaks TLS (as every built-in mount does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tls_upstream_path_neither_smuggles_nor_desynchronizes() {
    let pki = pki();
    let dir = tempfile::tempdir().unwrap();
    let ca = support::write_file(dir.path(), "ca.pem", &pki.ca_pem);
    // A server that picks its protocol by ALPN, as the APIs' front ends do.
    let mut server = (*pki.server).clone();
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    let server = Arc::new(server);
    let mut failures = Vec::new();
    for (name, attack) in request_attacks().into_iter().take(4) {
        let up = StrictUpstream::start(Some(server.clone())).await;
        let relay = up.relay(Some(&ca));
        if let Err(e) = request_case(&up, &relay, &attack, 1).await {
            failures.push(format!("{name}: {e}"));
        }
        let alpn = up.seen.lock().unwrap().alpn.clone();
        if alpn.is_empty() || alpn.iter().any(|a| a.as_deref() != Some(b"http/1.1")) {
            failures.push(format!("{name}: ALPN settled on {alpn:?}, not http/1.1"));
        }
    }
    for case in [
        "conn-cl",
        "204-with-length",
        "bytes-past-the-length",
        "te-and-cl-0",
    ] {
        for door in [Door::Verbatim, Door::Hyper] {
            let up = StrictUpstream::start(Some(pki.server.clone())).await;
            let relay = up.relay(Some(&ca));
            if let Err(e) = response_case(&relay, case, door).await {
                failures.push(format!("{case} ({door:?}): {e}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "desync cases failed over TLS:\n{}",
        failures.join("\n")
    );
}
