//! Relay benchmark (not a test): a scripted upstream and a client on loopback, measured
//! direct and through the relay binary (observers on) in the same run, interleaved.
//!
//! - added per-event latency for SSE and WebSocket (p50, p99): the upstream stamps each event
//!   with its send time on CLOCK_MONOTONIC, the client subtracts on receipt;
//! - throughput for one stream of 20,000 1 KiB SSE events;
//! - 200 and 1,000 concurrent SSE streams of small events 10 ms apart: errors, every byte
//!   checked, p99 latency, the relay's peak RSS (VmHWM from /proc, a fresh relay per run).
//!
//! Run: `cargo bench --bench relay` (add `-- --quick` for a shorter run).

#[path = "../tests/support/mod.rs"]
mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::BodyExt;
use support::*;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The text of SSE event `k` of a stream with `pad` bytes of payload, stamped `ts`.
fn delta_event(k: u64, ts: u64, pad: usize) -> String {
    let text: String = (0..pad)
        .map(|i| (b'a' + ((k as usize + i) % 26) as u8) as char)
        .collect();
    format!(
        "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{text}\"}},\"k\":{k},\"ts\":{ts}}}\n\n"
    )
}

const PROLOGUE: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_b\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"m\",\"stop_reason\":null,\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n";
const EPILOGUE: &str = "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":2}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

/// The upstream: `POST .../v1/messages` streams `x-events` deltas of `x-pad` bytes, `x-gap-us`
/// apart (0: as fast as the client takes them); `GET .../v1/responses` is a WebSocket that
/// answers each `response.create` with `x-events` deltas.
async fn upstream() -> Upstream {
    Upstream::start(
        None,
        handler(|mut req| async move {
            let num = |name: &str| -> u64 {
                req.headers()
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0)
            };
            let (events, pad, gap) = (num("x-events"), num("x-pad") as usize, num("x-gap-us"));
            if req.headers().contains_key("upgrade") {
                let res = support::ws::switching(&req, None);
                let upgrade = hyper::upgrade::on(&mut req);
                tokio::spawn(async move {
                    let Ok(up) = upgrade.await else { return };
                    let mut ws = WebSocketStream::from_raw_socket(
                        hyper_util::rt::TokioIo::new(up),
                        Role::Server,
                        None,
                    )
                    .await;
                    while let Some(Ok(Message::Text(_))) = ws.next().await {
                        let created = r#"{"type":"response.created","response":{"id":"resp_b","status":"in_progress","output":[]}}"#;
                        if ws.send(Message::text(created)).await.is_err() {
                            return;
                        }
                        for k in 0..events {
                            tokio::time::sleep(Duration::from_micros(gap)).await;
                            let ev = format!(
                                "{{\"type\":\"response.output_text.delta\",\"item_id\":\"msg_b\",\"output_index\":0,\"content_index\":0,\"delta\":\"x\",\"k\":{k},\"ts\":{}}}",
                                mono_ns()
                            );
                            if ws.send(Message::text(ev)).await.is_err() {
                                return;
                            }
                        }
                        let done = r#"{"type":"response.completed","response":{"id":"resp_b","status":"completed","output":[]}}"#;
                        let _ = ws.send(Message::text(done)).await;
                    }
                });
                return res;
            }
            let _ = read_body(req.into_body()).await;
            let (tx, body) = channel_body();
            tokio::spawn(async move {
                if tx.send(Ok(Bytes::from_static(PROLOGUE.as_bytes()))).await.is_err() {
                    return;
                }
                for k in 0..events {
                    if gap > 0 {
                        tokio::time::sleep(Duration::from_micros(gap)).await;
                    }
                    let ev = delta_event(k, mono_ns(), pad);
                    if tx.send(Ok(Bytes::from(ev))).await.is_err() {
                        return;
                    }
                }
                let _ = tx.send(Ok(Bytes::from_static(EPILOGUE.as_bytes()))).await;
            });
            sse_response(body)
        }),
    )
    .await
}

#[derive(Default)]
struct StreamResult {
    latencies_ns: Vec<u64>,
    bytes: u64,
    error: Option<String>,
}

/// One SSE stream: checks every byte against what the upstream must have sent.
async fn sse_stream(
    addr: SocketAddr,
    path: &str,
    events: u64,
    pad: usize,
    gap_us: u64,
) -> StreamResult {
    let mut r = StreamResult::default();
    let req = request("POST", addr, path)
        .header("content-type", "application/json")
        .header("x-events", events.to_string())
        .header("x-pad", pad.to_string())
        .header("x-gap-us", gap_us.to_string())
        .header("x-claude-code-session-id", "bench")
        .body(full(r#"{"model":"m","stream":true,"messages":[]}"#))
        .unwrap();
    let res = match send(addr, req).await {
        Ok(r) => r,
        Err(e) => {
            r.error = Some(format!("request: {e}"));
            return r;
        }
    };
    let mut body = res.into_body();
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 16);
    let mut pos = 0usize;
    let mut next_k = 0u64;
    let mut prologue_ok = false;
    loop {
        let frame = match tokio::time::timeout(WAIT, body.frame()).await {
            Err(_) => {
                r.error = Some("stalled".into());
                return r;
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                r.error = Some(format!("body: {e}"));
                return r;
            }
            Ok(Some(Ok(f))) => f,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let now = mono_ns();
        r.bytes += data.len() as u64;
        buf.extend_from_slice(&data);
        if !prologue_ok {
            if buf.len() < PROLOGUE.len() {
                continue;
            }
            if &buf[..PROLOGUE.len()] != PROLOGUE.as_bytes() {
                r.error = Some("prologue differs".into());
                return r;
            }
            pos = PROLOGUE.len();
            prologue_ok = true;
        }
        while next_k < events {
            let Some(end) = memfind(&buf[pos..], b"\n\n") else {
                break;
            };
            let ev = &buf[pos..pos + end + 2];
            let ts = parse_ts(ev);
            let want = delta_event(next_k, ts, pad);
            if ev != want.as_bytes() {
                r.error = Some(format!("event {next_k} differs"));
                return r;
            }
            r.latencies_ns.push(now.saturating_sub(ts));
            pos += end + 2;
            next_k += 1;
        }
        if pos > (1 << 20) {
            buf.drain(..pos);
            pos = 0;
        }
    }
    if next_k != events || &buf[pos..] != EPILOGUE.as_bytes() {
        r.error = Some(format!("ended after {next_k} of {events} events"));
    }
    r
}

fn memfind(h: &[u8], n: &[u8]) -> Option<usize> {
    h.windows(n.len()).position(|w| w == n)
}

fn parse_ts(ev: &[u8]) -> u64 {
    let s = std::str::from_utf8(ev).unwrap_or("");
    s.rsplit("\"ts\":")
        .next()
        .and_then(|t| t.split('}').next())
        .and_then(|t| t.parse().ok())
        .unwrap_or(0)
}

async fn ws_stream(addr: SocketAddr, path: &str, events: u64, gap_us: u64) -> StreamResult {
    let mut r = StreamResult::default();
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (status, _) = support::ws::client_handshake(
        &mut tcp,
        &addr.to_string(),
        path,
        &[
            ("x-events", &events.to_string()),
            ("x-gap-us", &gap_us.to_string()),
            ("thread-id", "bench"),
        ],
    )
    .await;
    if status != 101 {
        r.error = Some(format!("handshake status {status}"));
        return r;
    }
    let mut ws = WebSocketStream::from_raw_socket(tcp, Role::Client, None).await;
    let create = r#"{"type":"response.create","model":"m","input":[]}"#;
    ws.send(Message::text(create)).await.unwrap();
    let mut next_k = 0;
    loop {
        let msg = match tokio::time::timeout(WAIT, ws.next()).await {
            Ok(Some(Ok(m))) => m,
            _ => {
                r.error = Some("ws ended early".into());
                return r;
            }
        };
        let now = mono_ns();
        let Message::Text(t) = msg else { continue };
        r.bytes += t.len() as u64;
        if t.contains("response.completed") {
            break;
        }
        if t.contains("output_text.delta") {
            let ts = parse_ts(t.as_bytes());
            let want = format!(
                "{{\"type\":\"response.output_text.delta\",\"item_id\":\"msg_b\",\"output_index\":0,\"content_index\":0,\"delta\":\"x\",\"k\":{next_k},\"ts\":{ts}}}"
            );
            if t.as_str() != want {
                r.error = Some(format!("ws event {next_k} differs"));
                return r;
            }
            r.latencies_ns.push(now.saturating_sub(ts));
            next_k += 1;
        }
    }
    if next_k != events {
        r.error = Some(format!("ws: {next_k} of {events} events"));
    }
    r
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

struct Lat {
    p50_us: f64,
    p99_us: f64,
}

fn lat(mut all: Vec<u64>) -> Lat {
    all.sort_unstable();
    Lat {
        p50_us: pct(&all, 0.50),
        p99_us: pct(&all, 0.99),
    }
}

fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn relay_for(up: &Upstream) -> Relay {
    Relay::start(&[
        "--upstream".into(),
        up.mount("anthropic", ""),
        "--upstream".into(),
        up.mount("openai", ""),
        "--log".into(),
        "warn".into(),
    ])
}

fn relay_pid(relay: &Relay) -> u32 {
    relay.pid()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let rounds = if quick { 2 } else { 4 };
    let up = upstream().await;
    let relay = relay_for(&up);
    println!("relay bench: {rounds} interleaved rounds of direct and relayed runs");

    // Per-event latency, SSE: 500 small events 1 ms apart per run; the relayed run once on
    // the observed route and once on a path no observer watches (forwarding alone).
    let (mut d, mut v, mut u) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let a = sse_stream(up.addr, "/v1/messages", 500, 64, 1000).await;
        let b = sse_stream(relay.addr, "/anthropic/v1/messages", 500, 64, 1000).await;
        let c = sse_stream(relay.addr, "/anthropic/v1/unobserved", 500, 64, 1000).await;
        for r in [&a, &b, &c] {
            assert!(r.error.is_none(), "{:?}", r.error);
        }
        d.extend(a.latencies_ns);
        v.extend(b.latencies_ns);
        u.extend(c.latencies_ns);
    }
    let (ld, lv, lu) = (lat(d), lat(v), lat(u));
    println!(
        "SSE latency   direct p50 {:.1} us p99 {:.1} us | relay p50 {:.1} us p99 {:.1} us | added p50 {:.1} us p99 {:.1} us (targets 20 / 60)",
        ld.p50_us, ld.p99_us, lv.p50_us, lv.p99_us, lv.p50_us - ld.p50_us, lv.p99_us - ld.p99_us
    );
    println!(
        "              relay on an unobserved path: p50 {:.1} us p99 {:.1} us | added p50 {:.1} us p99 {:.1} us",
        lu.p50_us, lu.p99_us, lu.p50_us - ld.p50_us, lu.p99_us - ld.p99_us
    );

    // Per-event latency, WebSocket.
    let (mut d, mut v) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let a = ws_stream(up.addr, "/v1/responses", 500, 1000).await;
        let b = ws_stream(relay.addr, "/openai/v1/responses", 500, 1000).await;
        assert!(
            a.error.is_none() && b.error.is_none(),
            "{:?} {:?}",
            a.error,
            b.error
        );
        d.extend(a.latencies_ns);
        v.extend(b.latencies_ns);
    }
    let (ld, lv) = (lat(d), lat(v));
    println!(
        "WS latency    direct p50 {:.1} us p99 {:.1} us | relay p50 {:.1} us p99 {:.1} us | added p50 {:.1} us p99 {:.1} us (targets 20 / 60)",
        ld.p50_us, ld.p99_us, lv.p50_us, lv.p99_us, lv.p50_us - ld.p50_us, lv.p99_us - ld.p99_us
    );

    // Throughput: 20,000 1 KiB events, as fast as they are taken.
    let (mut td, mut tv) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        for (addr, path, out) in [
            (up.addr, "/v1/messages", &mut td),
            (relay.addr, "/anthropic/v1/messages", &mut tv),
        ] {
            let t0 = Instant::now();
            let r = sse_stream(addr, path, 20_000, 1024, 0).await;
            let secs = t0.elapsed().as_secs_f64();
            assert!(r.error.is_none(), "{:?}", r.error);
            out.push(r.bytes as f64 / secs / 1e6);
        }
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (md, mv) = (med(&mut td), med(&mut tv));
    println!(
        "throughput    direct {md:.1} MB/s | relay {mv:.1} MB/s | ratio {:.2} (target >= 0.8)",
        mv / md
    );
    drop(relay);

    // Concurrency: fresh relay per run so its peak RSS is that run's.
    for streams in [200usize, 1000] {
        let events = 50;
        let run = |addr: SocketAddr, path: &'static str| async move {
            let errors = Arc::new(AtomicU64::new(0));
            let mut tasks = Vec::new();
            for _ in 0..streams {
                let errors = errors.clone();
                tasks.push(tokio::spawn(async move {
                    let r = sse_stream(addr, path, events, 32, 10_000).await;
                    if r.error.is_some() {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                    r.latencies_ns
                }));
            }
            let mut all = Vec::new();
            for t in tasks {
                all.extend(t.await.unwrap_or_default());
            }
            (errors.load(Ordering::Relaxed), lat(all))
        };
        let (ed, ld) = run(up.addr, "/v1/messages").await;
        let relay = relay_for(&up);
        let (ev, lv) = run(relay.addr, "/anthropic/v1/messages").await;
        let rss = peak_rss_kib(relay_pid(&relay));
        println!(
            "{streams:>4} streams  direct errors {ed} p99 {:.1} us | relay errors {ev} p99 {:.1} us ({:.2}x direct) | relay peak RSS {:.1} MiB",
            ld.p99_us,
            lv.p99_us,
            lv.p99_us / ld.p99_us,
            rss as f64 / 1024.0
        );
    }
}
