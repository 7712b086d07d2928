//! The canary suite (docs/design.md §7): nothing sensitive leaves windowtap.
//!
//! A unique canary is planted in every sensitive place a Claude Code or Codex session carries
//! (credentials, cookies, custom header values, query strings, system text, every role's
//! text, model text and thinking, tool arguments and results, MCP arguments, results and
//! non-id `_meta` values), in plain, gzip-compressed and permessage-deflate-compressed
//! traffic. The relay (at trace level, exporting OTLP) and a wrapper around a real stdio MCP
//! server run one Claude loop over HTTP SSE and one Codex loop over a WebSocket, and then
//! every output is searched for every canary in every encoding a leak could take: raw,
//! base64 (standard and URL-safe, each of the three alignments), hex (lower and upper) and
//! URL-encoded. The raw ids (tool use, response, call, item, thread, session) must not appear
//! in what is written either, only their pseudonyms.

mod support;
#[path = "wrap_support/mod.rs"]
mod wrap_support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use correlator::Pseudonymizer;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message;
use serde_json::{json, Value};
use support::ws::{client_handshake, frame, switching, Deflater};
use support::{collect, event_per_frame, full, handler, request, send, Upstream, WAIT};
use testkit::sse;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener, UnixStream};
use wrap_support::{call, fixture, init_request, Wrapped};

/// The relay's pseudonymization key, so the test can tell which pseudonyms must appear.
const KEY: [u8; 32] = [0x3c; 32];

fn pseudo(raw: &str) -> String {
    Pseudonymizer::new(&KEY).id(raw)
}

// ---------------------------------------------------------------------------------------
// Canaries and the forms a leak could take
// ---------------------------------------------------------------------------------------

/// Every planted secret by the place it was planted in. The `:` makes the URL-encoded form
/// differ from the raw one.
struct Canaries {
    by_place: BTreeMap<&'static str, String>,
}

impl Canaries {
    fn new() -> Canaries {
        Canaries {
            by_place: BTreeMap::new(),
        }
    }

    /// A fresh canary for `place`: `CANARY:<place>:<random>`.
    fn plant(&mut self, place: &'static str) -> String {
        let c = format!("CANARY:{place}:{:016x}", rand::random::<u64>());
        assert!(
            self.by_place.insert(place, c.clone()).is_none(),
            "one canary per place: {place}"
        );
        c
    }
}

const STD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Unpadded base64 of `data`.
fn base64(data: &[u8], alphabet: &[u8; 64]) -> String {
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(alphabet[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

/// The base64 characters that depend only on `secret` when it starts at byte offset `k`
/// (mod 3) of whatever was encoded: a leak shows one of these three, whatever surrounds it.
fn base64_alignments(secret: &[u8], alphabet: &[u8; 64]) -> Vec<String> {
    (0..3)
        .map(|k| {
            let mut buf = vec![0u8; k];
            buf.extend_from_slice(secret);
            let enc = base64(&buf, alphabet);
            let skip = [0, 2, 3][k];
            let whole = buf.len() * 8 / 6;
            enc[skip..whole].to_string()
        })
        .collect()
}

fn percent_encode(s: &str, upper: bool) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else if upper {
                format!("%{b:02X}")
            } else {
                format!("%{b:02x}")
            }
        })
        .collect()
}

fn hex_lower(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

/// Every form of `secret` to search for, named.
fn forms(secret: &str) -> Vec<(String, Vec<u8>)> {
    let mut v = vec![
        ("raw".to_string(), secret.as_bytes().to_vec()),
        // The random part alone catches truncated or re-framed copies.
        (
            "random part".to_string(),
            secret.rsplit(':').next().unwrap().as_bytes().to_vec(),
        ),
        ("hex".to_string(), hex_lower(secret).into_bytes()),
        (
            "HEX".to_string(),
            hex_lower(secret).to_uppercase().into_bytes(),
        ),
        (
            "url-encoded".to_string(),
            percent_encode(secret, true).into_bytes(),
        ),
        (
            "url-encoded (lower)".to_string(),
            percent_encode(secret, false).into_bytes(),
        ),
    ];
    for (name, alphabet) in [("base64", STD), ("base64url", URL)] {
        for (k, a) in base64_alignments(secret.as_bytes(), alphabet)
            .into_iter()
            .enumerate()
        {
            v.push((format!("{name} at offset {k}"), a.into_bytes()));
        }
    }
    v
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

/// Every (output, place, form) where a canary was found. Only names are reported, never the
/// output's content.
fn leaks(outputs: &[(&str, Vec<u8>)], canaries: &Canaries) -> Vec<String> {
    let mut found = Vec::new();
    for (place, secret) in &canaries.by_place {
        for (form, needle) in forms(secret) {
            for (output, bytes) in outputs {
                if contains(bytes, &needle) {
                    found.push(format!("{place} ({form}) in {output}"));
                }
            }
        }
    }
    found
}

#[test]
fn the_leak_search_finds_each_form_it_claims_to() {
    let secret = "CANARY:probe:0123456789abcdef";
    let mut c = Canaries::new();
    c.by_place.insert("probe", secret.to_string());
    let prefixed = |p: &[u8]| {
        let mut v = p.to_vec();
        v.extend_from_slice(secret.as_bytes());
        v.extend_from_slice(b"tail");
        v
    };
    for (prefix, alphabet) in [
        (&b""[..], STD),
        (&b"a"[..], STD),
        (&b"ab"[..], URL),
        (&b"abc"[..], URL),
    ] {
        let enc = base64(&prefixed(prefix), alphabet);
        assert!(
            !leaks(&[("out", enc.into_bytes())], &c).is_empty(),
            "base64 after {prefix:?}"
        );
    }
    for text in [
        hex_lower(secret),
        hex_lower(secret).to_uppercase(),
        percent_encode(secret, true),
        format!("x=1&q={}", percent_encode(secret, false)),
        "id 0123456789abcdef".to_string(),
    ] {
        assert!(
            !leaks(&[("out", text.clone().into_bytes())], &c).is_empty(),
            "{text}"
        );
    }
    assert!(leaks(&[("out", b"CANARY:probe:0123".to_vec())], &c).is_empty());
    // The known base64 of "Man" checks the encoder itself.
    assert_eq!(base64(b"Man", STD), "TWFu");
    assert_eq!(base64(b"\xfb\xff", URL), "-_8");
}

// ---------------------------------------------------------------------------------------
// The relay at trace level, an OTLP receiver keeping raw bodies, an ingest tee
// ---------------------------------------------------------------------------------------

struct TraceRelay {
    child: Option<Child>,
    addr: SocketAddr,
    ingest: PathBuf,
    stderr: Arc<Mutex<Vec<u8>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl TraceRelay {
    /// `windowtap relay --log trace` with `RUST_LOG=trace`, its stderr kept byte for byte.
    fn start(dir: &Path, args: &[String]) -> TraceRelay {
        let ingest = dir.join("relay-ingest.sock");
        let mut child = Command::new(env!("CARGO_BIN_EXE_windowtap"))
            .arg("relay")
            .args(["--listen", "127.0.0.1:0", "--log", "trace"])
            .arg("--ingest")
            .arg(&ingest)
            .args(args)
            .env("RUST_LOG", "trace")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting windowtap relay");
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let keep = stderr.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let reader = std::thread::spawn(move || {
            let mut tx = Some(tx);
            let mut addr = None;
            let mut line = Vec::new();
            loop {
                line.clear();
                match err.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                keep.lock().unwrap().extend_from_slice(&line);
                let text = String::from_utf8_lossy(&line);
                if let Some(rest) = text.split("listening on http://").nth(1) {
                    addr = Some(rest.trim().to_string());
                }
                if text.contains("ChatGPT login") {
                    if let (Some(tx), Some(a)) = (tx.take(), addr.take()) {
                        let _ = tx.send(a);
                    }
                }
            }
        });
        let addr = match rx.recv_timeout(WAIT) {
            Ok(a) => a.parse().expect("banner address"),
            Err(_) => {
                let _ = child.kill();
                panic!("the relay did not start");
            }
        };
        TraceRelay {
            child: Some(child),
            addr,
            ingest,
            stderr,
            reader: Some(reader),
        }
    }

    /// SIGTERM, a bounded wait for a clean exit, then all of stderr.
    fn stop(&mut self) -> (std::process::ExitStatus, Vec<u8>) {
        let mut child = self.child.take().expect("running");
        testkit::proc::terminate(child.id());
        let deadline = Instant::now() + WAIT;
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("the relay did not stop on SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        self.reader.take().unwrap().join().unwrap();
        (status, std::mem::take(&mut *self.stderr.lock().unwrap()))
    }
}

impl Drop for TraceRelay {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A loopback OTLP/HTTP receiver keeping each request body exactly as received.
async fn otlp_receiver() -> (SocketAddr, Arc<Mutex<Vec<Vec<u8>>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let bodies: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let keep = bodies.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let keep = keep.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                    let keep = keep.clone();
                    async move {
                        let body = req.into_body().collect().await?.to_bytes();
                        keep.lock().unwrap().push(body.to_vec());
                        let answer = ExportTraceServiceResponse::default().encode_to_vec();
                        Ok::<_, hyper::Error>(hyper::Response::new(Full::new(Bytes::from(answer))))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    (addr, bodies)
}

/// A Unix socket standing between the wrapper and the relay's ingest socket, keeping a copy
/// of every byte the wrapper sent.
async fn ingest_tee(at: PathBuf, relay: PathBuf) -> Arc<Mutex<Vec<u8>>> {
    let listener = UnixListener::bind(&at).unwrap();
    let seen: Arc<Mutex<Vec<u8>>> = Arc::default();
    let keep = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut from, _)) = listener.accept().await {
            let keep = keep.clone();
            let relay = relay.clone();
            tokio::spawn(async move {
                let Ok(mut to) = UnixStream::connect(&relay).await else {
                    return;
                };
                let mut buf = vec![0u8; 8192];
                while let Ok(n) = from.read(&mut buf).await {
                    if n == 0 {
                        return;
                    }
                    keep.lock().unwrap().extend_from_slice(&buf[..n]);
                    if to.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    seen
}

/// Waits (bounded) until the tee has carried the wrapper's `end` report for `hint`, then a
/// little for the relay to take it in, as a host's continuation comes after its tool result.
async fn reported(tee: &Arc<Mutex<Vec<u8>>>, hint: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let text = String::from_utf8_lossy(&tee.lock().unwrap()).into_owned();
        if text
            .lines()
            .any(|l| l.contains("\"type\":\"end\"") && l.contains(hint))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the wrapper never reported its call"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
}

// ---------------------------------------------------------------------------------------
// The scripted upstreams
// ---------------------------------------------------------------------------------------

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn gunzip(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(data), &mut out).unwrap();
    out
}

/// The Claude turns: thinking, text and a tool_use, then (for the continuation) text only,
/// gzip-compressed on the wire.
struct ClaudeScript {
    tool_turn: String,
    text_turn: String,
}

fn claude_script(c: &mut Canaries, tool_use_id: &str) -> ClaudeScript {
    // A model name and a second tool name that the API would never send: free text in
    // them is written as a pseudonym (docs/design.md §7), never as is.
    let model = c.plant("model name (Claude)");
    let odd_tool = c.plant("tool name (Claude tool_use)");
    let thinking = c.plant("model thinking");
    let signature = c.plant("thinking signature");
    let text = c.plant("model text (SSE)");
    let input = json!({"note":c.plant("tool arguments (SSE)")}).to_string();
    let tool_turn = sse::body(
        &sse::message("msg_c1", &model)
            .block(
                json!({"type":"thinking","thinking":"","signature":""}),
                &[
                    json!({"type":"thinking_delta","thinking":thinking}),
                    json!({"type":"signature_delta","signature":signature}),
                ],
            )
            .text(&text)
            .tool_use(tool_use_id, "mcp__probe__echo", Some(&input))
            .tool_use("toolu_odd", &odd_tool, None)
            .end("tool_use", 5),
    );
    let text_turn = sse::body(
        &sse::message("msg_c2", "claude")
            .text(&c.plant("model text (gzip SSE)"))
            .end("end_turn", 2),
    );
    ClaudeScript {
        tool_turn,
        text_turn,
    }
}

/// Answers a request without a tool_result with the tool turn (plain, one frame per event),
/// one with it with the text turn (gzip).
async fn anthropic_upstream(script: Arc<ClaudeScript>) -> Upstream {
    Upstream::start(
        None,
        handler(move |req| {
            let script = script.clone();
            async move {
                let gz = req
                    .headers()
                    .get("content-encoding")
                    .is_some_and(|v| v == "gzip");
                let body = support::read_body(req.into_body()).await;
                let body = if gz { gunzip(&body) } else { body };
                if String::from_utf8_lossy(&body).contains("tool_result") {
                    return hyper::Response::builder()
                        .status(200)
                        .header("content-type", "text/event-stream")
                        .header("content-encoding", "gzip")
                        .body(full(gzip(script.text_turn.as_bytes())))
                        .unwrap();
                }
                event_per_frame(script.tool_turn.clone())
            }
        }),
    )
    .await
}

/// A WebSocket upstream with permessage-deflate: for each step it reads exactly the client
/// frames it expects, then writes its own (compressed) frames.
async fn responses_ws_upstream(steps: Vec<(Vec<u8>, Vec<u8>)>) -> Upstream {
    let steps = Arc::new(steps);
    Upstream::start(
        None,
        handler(move |mut req| {
            let steps = steps.clone();
            async move {
                let res = switching(&req, Some("permessage-deflate"));
                let upgrade = hyper::upgrade::on(&mut req);
                tokio::spawn(async move {
                    let Ok(up) = upgrade.await else { return };
                    let mut io = hyper_util::rt::TokioIo::new(up);
                    for (expect, reply) in steps.iter() {
                        let mut got = vec![0u8; expect.len()];
                        if io.read_exact(&mut got).await.is_err() || &got != expect {
                            return;
                        }
                        if io.write_all(reply).await.is_err() {
                            return;
                        }
                        let _ = io.flush().await;
                    }
                    let mut rest = Vec::new();
                    let _ = io.read_to_end(&mut rest).await;
                });
                res
            }
        }),
    )
    .await
}

/// A Responses HTTP upstream (the ChatGPT-login route) taking zstd request bodies and
/// answering with a text-only SSE turn.
async fn responses_http_upstream(sse: Arc<String>) -> Upstream {
    Upstream::start(
        None,
        handler(move |req| {
            let sse = sse.clone();
            async move {
                let zstd_body = req
                    .headers()
                    .get("content-encoding")
                    .is_some_and(|v| v == "zstd");
                let body = support::read_body(req.into_body()).await;
                let ok = zstd_body && zstd::decode_all(&body[..]).is_ok();
                hyper::Response::builder()
                    .status(if ok { 200 } else { 400 })
                    .header("content-type", "text/event-stream")
                    .body(full(sse.to_string()))
                    .unwrap()
            }
        }),
    )
    .await
}

/// Reads whole server frames (unmasked, FIN set, short enough for a 16-bit length) until
/// `n` have arrived.
async fn read_frames(tcp: &mut tokio::net::TcpStream, n: usize) {
    for _ in 0..n {
        let mut head = [0u8; 2];
        tokio::time::timeout(WAIT, tcp.read_exact(&mut head))
            .await
            .expect("a frame within the wait bound")
            .unwrap();
        let len = match head[1] & 0x7f {
            126 => {
                let mut l = [0u8; 2];
                tcp.read_exact(&mut l).await.unwrap();
                u16::from_be_bytes(l) as usize
            }
            127 => panic!("the scripted frames are short"),
            l => l as usize,
        };
        let mut payload = vec![0u8; len];
        tcp.read_exact(&mut payload).await.unwrap();
    }
}

// ---------------------------------------------------------------------------------------
// The suite
// ---------------------------------------------------------------------------------------

fn python() -> bool {
    let ok = wrap_support::have("python3");
    if !ok {
        eprintln!("skipped: no python3 for the stdio MCP server");
    }
    ok
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_canary_and_no_raw_id_reaches_any_output_of_a_claude_and_a_codex_loop() {
    if !python() {
        return;
    }
    let mut c = Canaries::new();
    let r = || format!("{:012x}", rand::random::<u64>() >> 16);
    let tool_use_id = format!("toolu_{}", r());
    let session_id = format!("5e55{}-0000-4000-8000-{}", &r()[..4], r());
    let thread_id = format!("7d0c{}-1111-4000-8000-{}", &r()[..4], r());
    let resp_turn = format!("resp_{}", r());
    let resp_cont = format!("resp_{}", r());
    let call_id = format!("call_{}", r());
    let item_id = format!("fc_{}", r());
    let http_resp = format!("resp_{}", r());
    let raw_ids = [
        ("tool_use_id", tool_use_id.clone()),
        ("session id", session_id.clone()),
        ("thread id", thread_id.clone()),
        ("response id (turn)", resp_turn.clone()),
        ("response id (continuation)", resp_cont.clone()),
        ("response id (zstd HTTP)", http_resp.clone()),
        ("call_id", call_id.clone()),
        ("item id", item_id.clone()),
    ];

    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("id.key");
    std::fs::write(&key_file, hex_lower_bytes(&KEY)).unwrap();
    let records = dir.path().join("records.jsonl");
    let capture = dir.path().join("capture.jsonl");

    let claude = Arc::new(claude_script(&mut c, &tool_use_id));
    let anthropic = anthropic_upstream(claude.clone()).await;

    // The Codex WebSocket turns, compressed with context takeover in both directions.
    let mut client_deflate = Deflater::default();
    let mut server_deflate = Deflater::default();
    let codex_turn = json!({"type":"response.create","model":"gpt-5",
        "instructions":c.plant("system text (Codex instructions)"),
        "input":[
            {"type":"message","role":"developer","content":[{"type":"input_text","text":c.plant("developer text")}]},
            {"type":"message","role":"user","content":[{"type":"input_text","text":c.plant("user text (Codex)")}]}],
        "client_metadata":{"thread_id":thread_id}});
    let fc_args = json!({"note":c.plant("tool arguments (WS)")}).to_string();
    let item = sse::function_call(&item_id, &call_id, "mcp__probe", "echo", &fc_args);
    // A second call whose namespace no API would send.
    let odd_namespace = c.plant("tool namespace (Codex)");
    let odd_item = sse::function_call("fc_odd", "call_odd", &odd_namespace, "echo", "{}");
    let mut created = sse::response_created(&resp_turn);
    created["response"]["model"] = json!(c.plant("model name (Codex)"));
    let turn_events = [
        created,
        json!({"type":"response.reasoning_summary_text.delta","item_id":"rs_1","delta":c.plant("model reasoning (WS)")}),
        json!({"type":"response.output_text.delta","item_id":"msg_1","delta":c.plant("model text (WS)")}),
        sse::item_added(0, &item),
        sse::item_done(0, &item),
        sse::item_done(1, &odd_item),
        sse::response_completed(&resp_turn, json!([item, odd_item])),
    ];
    let codex_result = c.plant("MCP result (Codex)");
    let codex_cont = json!({"type":"response.create","model":"gpt-5","previous_response_id":resp_turn,
        "input":[{"type":"function_call_output","call_id":call_id,"output":codex_result}],
        "client_metadata":{"thread_id":thread_id}});
    let cont_events = [
        sse::response_created(&resp_cont),
        json!({"type":"response.output_text.delta","item_id":"msg_2","delta":c.plant("model text after the tool (WS)")}),
        sse::response_completed(&resp_cont, json!([])),
    ];
    let mut steps = Vec::new();
    for (i, (req, events)) in [
        (&codex_turn, &turn_events[..]),
        (&codex_cont, &cont_events[..]),
    ]
    .into_iter()
    .enumerate()
    {
        let mask = Some([0x5a ^ i as u8, 0x17, 0x66, 0x0f]);
        let client = frame(1, &client_deflate.message(req.to_string()), true, mask);
        let server: Vec<u8> = events
            .iter()
            .flat_map(|ev| frame(1, &server_deflate.message(ev.to_string()), true, None))
            .collect();
        steps.push((client, server, events.len()));
    }
    let openai = responses_ws_upstream(
        steps
            .iter()
            .map(|(c, s, _)| (c.clone(), s.clone()))
            .collect(),
    )
    .await;

    let http_sse = Arc::new(
        [
            sse::response_created(&http_resp),
            json!({"type":"response.output_text.delta","item_id":"msg_h","delta":c.plant("model text (zstd HTTP)")}),
            sse::response_completed(&http_resp, json!([])),
        ]
        .into_iter()
        .zip(0..)
        .map(|(ev, n)| sse::record(&sse::numbered(ev, n)))
        .collect::<String>(),
    );
    let chatgpt = responses_http_upstream(http_sse.clone()).await;

    let (collector, otlp_bodies) = otlp_receiver().await;
    let mut relay = TraceRelay::start(
        dir.path(),
        &[
            "--upstream".into(),
            anthropic.mount("anthropic", ""),
            "--upstream".into(),
            openai.mount("openai", ""),
            "--upstream".into(),
            chatgpt.mount("chatgpt", ""),
            "--records".into(),
            records.display().to_string(),
            "--capture".into(),
            capture.display().to_string(),
            "--otlp-endpoint".into(),
            format!("http://{collector}"),
            "--id-key-file".into(),
            key_file.display().to_string(),
            "--close-wait".into(),
            "200".into(),
        ],
    );
    let tee_path = dir.path().join("tee.sock");
    let tee = ingest_tee(tee_path.clone(), relay.ingest.clone()).await;

    // The wrapper around a real stdio MCP server, reporting through the tee.
    let server = fixture("tiny_server.py");
    let mut wrapped = Wrapped::start_env(
        "probe",
        Some(&tee_path),
        &["python3", server.to_str().unwrap()],
        &[("RUST_LOG", Path::new("trace"))],
    );
    wrapped.send_json(&init_request(json!(0)));
    wrapped.response(json!(0));

    // ---- Claude Code over HTTP SSE, gzip request bodies ----
    let claude_user = c.plant("user text (Claude)");
    let claude_body = |with_result: Option<(&str, &str)>| {
        let mut messages =
            vec![json!({"role":"user","content":[{"type":"text","text":claude_user}]})];
        if let Some((args, result)) = with_result {
            messages.push(json!({"role":"assistant","content":[
                {"type":"text","text":"calling"},
                {"type":"tool_use","id":tool_use_id,"name":"mcp__probe__echo","input":{"text":args}}]}));
            messages.push(json!({"role":"user","content":[
                {"type":"tool_result","tool_use_id":tool_use_id,"content":[{"type":"text","text":result}]}]}));
        }
        messages
    };
    let system = c.plant("system text (Claude)");
    let assistant_history = c.plant("assistant text (history)");
    let headers = [
        (
            "authorization",
            format!("Bearer {}", c.plant("Authorization")),
        ),
        ("x-api-key", c.plant("x-api-key")),
        ("cookie", format!("session={}", c.plant("cookie"))),
        ("x-custom-secret", c.plant("custom header value")),
        ("x-claude-code-session-id", session_id.clone()),
        ("anthropic-version", "2023-06-01".to_string()),
    ];
    let query = format!(
        "/anthropic/v1/messages?beta=true&token={}",
        percent_encode(&c.plant("query string"), true)
    );
    let claude_post = |messages: Vec<Value>| {
        let mut all = vec![
            json!({"role":"user","content":"hi"}),
            json!({"role":"assistant","content":assistant_history}),
        ];
        all.extend(messages);
        let body = json!({"model":"claude","stream":true,
            "system":[{"type":"text","text":system}],
            "messages":all});
        let mut req = request("POST", relay.addr, &query)
            .header("content-type", "application/json")
            .header("content-encoding", "gzip");
        for (n, v) in &headers {
            req = req.header(*n, v);
        }
        req.body(full(gzip(body.to_string().as_bytes()))).unwrap()
    };
    let res = send(relay.addr, claude_post(claude_body(None)))
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let got = collect(res.into_body()).await.unwrap();
    assert_eq!(
        got,
        claude.tool_turn.as_bytes(),
        "the SSE came back untouched"
    );

    // The host runs the tool through the wrapper.
    let mcp_args = c.plant("MCP arguments (Claude)");
    let claude_result = c.plant("MCP result (Claude)");
    wrapped.send_json(&call(
        json!(1),
        "echo",
        json!({"text":claude_result,"other":mcp_args}),
        json!({"claudecode/toolUseId":tool_use_id,"progressToken":c.plant("progressToken (Claude)")}),
    ));
    let answer = wrapped.response(json!(1));
    assert_eq!(answer["result"]["content"][0]["text"], json!(claude_result));
    reported(&tee, &tool_use_id).await;
    // A call of a tool whose name is free text: the wrapper reports it like any other.
    let odd_tool_use = format!("toolu_{}", r());
    wrapped.send_json(&call(
        json!(10),
        &c.plant("MCP tool name"),
        json!({}),
        json!({"claudecode/toolUseId":odd_tool_use}),
    ));
    let answer = wrapped.response(json!(10));
    assert!(answer["error"].is_object(), "{answer}");
    reported(&tee, &odd_tool_use).await;
    let res = send(
        relay.addr,
        claude_post(claude_body(Some((&mcp_args, &claude_result)))),
    )
    .await
    .unwrap();
    assert_eq!(res.status(), 200);
    let got = collect(res.into_body()).await.unwrap();
    assert_eq!(gunzip(&got), claude.text_turn.as_bytes());

    // ---- Codex over HTTP with a zstd request body (the ChatGPT-login route) ----
    let http_body = json!({"model":"gpt-5","stream":true,"store":false,
        "instructions":c.plant("system text (zstd HTTP)"),
        "input":[{"type":"message","role":"user","content":[{"type":"input_text","text":c.plant("user text (zstd HTTP)")}]}]});
    let req = request("POST", relay.addr, "/chatgpt/responses")
        .header("content-type", "application/json")
        .header("content-encoding", "zstd")
        .header("originator", "codex_cli_rs")
        .header("session_id", &session_id)
        .header(
            "authorization",
            format!("Bearer {}", c.plant("Authorization (zstd HTTP)")),
        )
        .body(full(
            zstd::encode_all(http_body.to_string().as_bytes(), 3).unwrap(),
        ))
        .unwrap();
    let res = send(relay.addr, req).await.unwrap();
    assert_eq!(res.status(), 200, "the upstream got a zstd body");
    assert_eq!(collect(res.into_body()).await.unwrap(), http_sse.as_bytes());

    // ---- Codex over a permessage-deflate WebSocket ----
    let mut tcp = tokio::net::TcpStream::connect(relay.addr).await.unwrap();
    let authorization = format!("Bearer {}", c.plant("Authorization (Codex)"));
    let cookie = format!("__cf_bm={}", c.plant("cookie (Codex)"));
    let account = c.plant("chatgpt-account-id");
    let turn_header = json!({"turn_id":c.plant("x-codex-turn-metadata header")}).to_string();
    let ws_path = format!(
        "/openai/v1/responses?key={}",
        percent_encode(&c.plant("query string (Codex)"), true)
    );
    let (status, _) = client_handshake(
        &mut tcp,
        &relay.addr.to_string(),
        &ws_path,
        &[
            (
                "sec-websocket-extensions",
                "permessage-deflate; client_max_window_bits",
            ),
            ("originator", "codex_cli_rs"),
            ("thread-id", &thread_id),
            ("session_id", &thread_id),
            ("authorization", &authorization),
            ("cookie", &cookie),
            ("chatgpt-account-id", &account),
            ("x-codex-turn-metadata", &turn_header),
        ],
    )
    .await;
    assert_eq!(status, 101);
    tcp.write_all(&steps[0].0).await.unwrap();
    read_frames(&mut tcp, steps[0].2).await;

    let codex_args = c.plant("MCP arguments (Codex)");
    wrapped.send_json(&call(
        json!(2),
        "echo",
        json!({"text":codex_result,"other":codex_args}),
        json!({"callId":call_id,"itemId":item_id,"threadId":thread_id,
            "x-codex-turn-metadata":{"turn_id":c.plant("x-codex-turn-metadata _meta"),"nested":{"deep":[c.plant("x-codex-turn-metadata nested")]}},
            "progressToken":c.plant("progressToken (Codex)")}),
    ));
    let answer = wrapped.response(json!(2));
    assert_eq!(answer["result"]["content"][0]["text"], json!(codex_result));
    reported(&tee, &call_id).await;

    tcp.write_all(&steps[1].0).await.unwrap();
    read_frames(&mut tcp, steps[1].2).await;
    drop(tcp); // no close frame, like Codex
    tokio::time::sleep(Duration::from_millis(200)).await;

    // A server whose alias is free text (a config key the user wrote): its calls are reported
    // under it, and it is written as a pseudonym. Started last, so that its start-up delays
    // no continuation past the close-wait.
    let mut odd_server = Wrapped::start_env(
        &c.plant("MCP alias"),
        Some(&tee_path),
        &["python3", server.to_str().unwrap()],
        &[("RUST_LOG", Path::new("trace"))],
    );
    odd_server.send_json(&init_request(json!(0)));
    odd_server.response(json!(0));
    let odd_alias_use = format!("toolu_{}", r());
    odd_server.send_json(&call(
        json!(1),
        "echo",
        json!({"text":"x"}),
        json!({"claudecode/toolUseId":odd_alias_use}),
    ));
    odd_server.response(json!(1));
    reported(&tee, &odd_alias_use).await;
    // An MCP 2026-07-28 server that asks for input: the state it issues carries a canary
    // (base64 inside JSON, as a real one might), and so does the client's answer. The call of
    // two rounds is reported once; neither canary reaches any output.
    let mut mrtr = Wrapped::start_env(
        "mrtr",
        Some(&tee_path),
        &["python3", fixture("mrtr_server.py").to_str().unwrap()],
        &[("RUST_LOG", Path::new("trace"))],
    );
    let meta26 = |mut meta: Value| {
        meta["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
        meta["io.modelcontextprotocol/clientCapabilities"] = json!({"elicitation":{}});
        meta
    };
    mrtr.send_json(&json!({"jsonrpc":"2.0","id":"d","method":"server/discover",
        "params":{"_meta":meta26(json!({}))}}));
    mrtr.response(json!("d"));
    let mrtr_use = format!("toolu_{}", r());
    let mrtr_args = json!({"token":c.plant("MRTR requestState")});
    let mrtr_meta = meta26(json!({"claudecode/toolUseId":mrtr_use}));
    mrtr.send_json(&json!({"jsonrpc":"2.0","id":1,"method":"tools/call",
        "params":{"name":"ask","arguments":mrtr_args,"_meta":mrtr_meta}}));
    let asked = mrtr.response(json!(1));
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    mrtr.send_json(&json!({"jsonrpc":"2.0","id":2,"method":"tools/call",
        "params":{"name":"ask","arguments":mrtr_args,"_meta":mrtr_meta,
            "inputResponses":{"confirm":{"action":"accept","content":{"answer":c.plant("MRTR input answer")}}},
            "requestState":asked["result"]["requestState"]}}));
    let done = mrtr.response(json!(2));
    assert!(done["result"]["content"].is_array(), "{done}");
    reported(&tee, &mrtr_use).await;
    let (mrtr_status, _, mrtr_stderr) = mrtr.wait();
    assert!(
        mrtr_status.success(),
        "the MRTR wrapper failed: {mrtr_status}"
    );

    let (odd_status, _, odd_stderr) = odd_server.wait();
    assert!(
        odd_status.success(),
        "the second wrapper failed: {odd_status}"
    );

    let (wrap_status, _, wrap_stderr) = wrapped.wait();
    assert!(wrap_status.success(), "the wrapper failed: {wrap_status}");
    let (status, relay_stderr) = tokio::task::spawn_blocking(move || relay.stop())
        .await
        .unwrap();
    assert!(status.success(), "the relay failed: {status}");

    // ---- The outputs ----
    let records_text = std::fs::read(&records).unwrap();
    let capture_text = std::fs::read(&capture).unwrap();
    let otlp_raw: Vec<u8> = otlp_bodies.lock().unwrap().concat();
    let otlp_decoded: Vec<u8> = otlp_bodies
        .lock()
        .unwrap()
        .iter()
        .map(|b| {
            let req = ExportTraceServiceRequest::decode(&b[..]).expect("OTLP protobuf");
            format!("{req:?}").into_bytes()
        })
        .collect::<Vec<_>>()
        .concat();
    let ingest_payload = tee.lock().unwrap().clone();

    // The run did what it is for, so the search is over real outputs.
    let recs: Vec<Value> = String::from_utf8_lossy(&records_text)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["type"] == "attribution")
        .collect();
    assert_eq!(
        recs.len(),
        5,
        "one record per MCP call (the call of two rounds is one)"
    );
    let (mrtr_recs, calls): (Vec<&Value>, Vec<&Value>) =
        recs.iter().partition(|r| r["alias"] == "mrtr");
    assert_eq!(mrtr_recs.len(), 1, "{mrtr_recs:?}");
    let (echo, odd): (Vec<&Value>, Vec<&Value>) = calls
        .into_iter()
        .partition(|r| r["tool"] == "echo" && r["alias"] == "probe");
    assert_eq!(echo.len(), 2, "{recs:?}");
    for r in &echo {
        assert_eq!(r["decision"], "attributed", "{r}");
    }

    assert!(!otlp_raw.is_empty(), "the records were exported");
    // Whatever the relay logs at trace level is searched below; its summary shows the log
    // is the whole run's.
    let log = String::from_utf8_lossy(&relay_stderr);
    assert!(
        log.contains(" spans exported to ") && !log.contains("not delivered"),
        "the relay's log covers the run ({} bytes)",
        relay_stderr.len()
    );
    let capture_str = String::from_utf8_lossy(&capture_text);
    // Every stream was observed (the zstd body and the deflated frames decoded), and its
    // ids written as pseudonyms.
    for raw in [
        &tool_use_id,
        &thread_id,
        &resp_turn,
        &resp_cont,
        &http_resp,
        &call_id,
        &item_id,
    ] {
        assert!(
            capture_str.contains(&pseudo(raw)),
            "the capture names {raw}'s pseudonym"
        );
    }
    assert!(
        String::from_utf8_lossy(&ingest_payload).contains(&tool_use_id),
        "the tee saw the wrapper's reports"
    );

    let written = [
        ("records", records_text),
        ("capture", capture_text),
        ("OTLP request bodies (raw)", otlp_raw),
        ("OTLP requests (decoded)", otlp_decoded),
        ("relay stderr at trace level", relay_stderr),
        ("wrapper stderr", wrap_stderr.into_bytes()),
        ("second wrapper stderr", odd_stderr.clone().into_bytes()),
        ("MRTR wrapper stderr", mrtr_stderr.into_bytes()),
    ];
    let mut found = leaks(&written, &c);
    // The ingest socket carries raw hint ids and the tool name as the host called it by
    // design (it stays on the machine, between the wrapper and the relay, which scrubs
    // them), but never arguments, results or other `_meta` values.
    let mut on_socket = Canaries {
        by_place: c.by_place.clone(),
    };
    on_socket.by_place.remove("MCP tool name");
    on_socket.by_place.remove("MCP alias");
    found.extend(leaks(
        &[("ingest socket payload", ingest_payload)],
        &on_socket,
    ));
    assert!(found.is_empty(), "canaries leaked:\n{}", found.join("\n"));
    assert!(
        odd_stderr.contains("--alias is not a name as the model APIs allow one"),
        "the wrapper warned: {odd_stderr}"
    );
    // The free-text tool name and alias are there (checked after the leak search, which
    // names every leak), as their pseudonyms.
    let pseudonym = |v: &Value| {
        v.as_str()
            .is_some_and(|s| s.starts_with('~') && s.len() == 33)
    };
    assert_eq!(odd.len(), 2, "{odd:?}");
    assert!(odd
        .iter()
        .any(|r| pseudonym(&r["tool"]) && r["alias"] == "probe"));
    assert!(odd
        .iter()
        .any(|r| pseudonym(&r["alias"]) && r["tool"] == "echo"));

    let mut raw_found = Vec::new();
    for (what, raw) in &raw_ids {
        for (output, bytes) in &written {
            if contains(bytes, raw.as_bytes()) {
                raw_found.push(format!("raw {what} in {output}"));
            }
        }
    }
    assert!(
        raw_found.is_empty(),
        "raw ids leaked:\n{}",
        raw_found.join("\n")
    );
    assert!(
        c.by_place.len() >= 30,
        "every place has its canary ({})",
        c.by_place.len()
    );
}

fn hex_lower_bytes(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Error messages never echo input: `windowtap check`, `replay` and `report` on files with a
/// canary in every field a reader complains about (a trace's `version`, an interval id that
/// disagrees with its start, an unknown type, a bad count, broken JSON, a record's version,
/// decision, reason and evidence) say what is wrong without it, in any form.
#[test]
fn no_canary_reaches_a_readers_error_message() {
    let mut c = Canaries::new();
    let dir = tempfile::tempdir().unwrap();
    let header = correlator::trace::HEADER;
    let open = r#"{"type":"stream_open","t":0,"stream":"s1","client":"claude","transport":"http","thread":null,"host":null}"#;
    let start = |interval: &str| {
        json!({"type":"mcp_start","t":1,"interval":interval,"alias":"a","tool":"t","start":1,"host":null}).to_string()
    };
    let end = |interval: &str| {
        json!({"type":"mcp_interval","t":9,"interval":interval,"alias":"a","tool":"other","start":1,"end":4,"outcome":"result","host":null}).to_string()
    };
    let record = |k: &str, v: &str| {
        let mut r = json!({"type":"attribution","version":1,"interval":"i1","alias":"a","tool":"t","start":1,"end":2,"decision":"abstained","reason":"no_window","evidence":[],"candidates":0,"window":null,"decided_at":3});
        r[k] = if k == "evidence" {
            json!([v])
        } else {
            json!(v)
        };
        r.to_string()
    };
    let interval = c.plant("interval id");
    let files: Vec<(&str, String)> = vec![
        (
            "version.jsonl",
            json!({"type":"trace","version": c.plant("trace version")}).to_string(),
        ),
        (
            "window_open.jsonl",
            json!({"type":"trace","version":2,"window_open": c.plant("window_open")}).to_string(),
        ),
        (
            "interval.jsonl",
            [header.to_string(), start(&interval), end(&interval)].join("\n"),
        ),
        (
            "type.jsonl",
            format!(
                "{header}\n{}",
                json!({"type": c.plant("event type"), "t": 1})
            ),
        ),
        (
            "header.jsonl",
            json!({"type": c.plant("header type"), "version": 2}).to_string(),
        ),
        (
            "usage.jsonl",
            format!(
                "{header}\n{open}\n{}",
                json!({"type":"response_end","t":1,"stream":"s1","response":"r","status":"completed","usage":{"input": c.plant("usage count")}})
            ),
        ),
        (
            "json.jsonl",
            format!(
                "{header}\n{{\"type\":\"stream_open\",\"t\":0,\"stream\":{}}}",
                c.plant("broken json")
            ),
        ),
        (
            "time.jsonl",
            format!(
                "{header}\n{}",
                json!({"type":"stream_close","t": c.plant("time")})
            ),
        ),
        ("records_version.jsonl", {
            let mut r: Value = serde_json::from_str(&record("reason", "no_window")).unwrap();
            r["version"] = json!(c.plant("records version"));
            r.to_string()
        }),
        ("decision.jsonl", record("decision", &c.plant("decision"))),
        ("reason.jsonl", record("reason", &c.plant("reason"))),
        ("evidence.jsonl", record("evidence", &c.plant("evidence"))),
    ];
    let mut outputs: Vec<(String, Vec<u8>)> = Vec::new();
    for (name, text) in &files {
        let path = dir.path().join(name);
        std::fs::write(&path, format!("{text}\n")).unwrap();
        let p = path.to_str().unwrap();
        let mut refused = false;
        for args in [
            vec!["check", p],
            vec!["replay", p],
            vec!["report", p, "-o", "/dev/null"],
        ] {
            let out = Command::new(env!("CARGO_BIN_EXE_windowtap"))
                .args(&args)
                .output()
                .unwrap();
            let mut both = out.stdout.clone();
            both.extend_from_slice(&out.stderr);
            refused |= !out.status.success();
            outputs.push((format!("{} {name}", args[0]), both));
        }
        assert!(refused, "{name} is bad, and some reader says so");
    }
    let outputs: Vec<(&str, Vec<u8>)> = outputs
        .iter()
        .map(|(n, b)| (n.as_str(), b.clone()))
        .collect();
    let found = leaks(&outputs, &c);
    assert!(found.is_empty(), "leaked: {found:?}");
}
