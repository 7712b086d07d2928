//! The observation attacks of issue 13 at full size, against a relay binary (not a test: see
//! `docs/performance.md`, "Observation under attack").
//!
//! A scripted upstream in this process and clients on loopback; the relay is the binary given.
//! Kinds, `N` streams each, all at once, every stream held open for `--hold` seconds after
//! its bytes passed:
//! - `gzip`: an SSE response, gzip, one unterminated 63 MiB event (about 64 KiB on the wire);
//! - `zstd`: the same as zstd (about 2 KiB on the wire);
//! - `upload`: an unfinished zstd request body (63 MiB of zeros, about 2 KiB), never ended;
//! - `valid`: one valid 62 MiB SSE event, identity, terminated, then held.
//!
//! And the data plane's (issue 29), raw sockets, `N` each:
//! - `slow-reader`: asks for a 4 MiB SSE stream of small events and reads nothing for
//!   `--hold`, then reads it all (every byte compared): the relay must neither buffer it
//!   nor stall anyone else meanwhile;
//! - `idle-body`: a request head announcing a 1 MiB body, 1 KiB of it, then nothing for
//!   `--hold`;
//! - `half-head`: half a request head, then nothing for `--hold`.
//!
//! The relay's open descriptors are sampled with its RSS; the harness raises its own (and so
//! the relay's) open-files limit to its hard limit, so the relay's default connection cap is
//! what it would be for a user with that limit.
//!
//! Every byte each client receives (and the upstream receives, for uploads) is compared with
//! what was sent. Meanwhile a normal request (a small GET no observer watches) goes through
//! the relay every 250 ms; its latency is reported quiet (before the attack) and during it,
//! twice: from the harness's main runtime (where the attack's clients and upstream compare
//! every byte, so it also waits behind the harness), and from a prober on a thread and
//! runtime of its own with an upstream of its own (what the relay and the machine cost it).
//! The relay's peak RSS is its VmHWM.
//!
//! Run: `cargo run --release --example attack -- --relay target/release/windowtap [--n 200]
//! [--kinds gzip,zstd,upload,valid,slow-reader,idle-body,half-head] [--hold 5]
//! [-- RELAY_ARGS...]` (default kinds: the first four).

use std::convert::Infallible;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use sha2::{Digest, Sha256};
use tokio::net::TcpStream;

type Body = BoxBody<Bytes, Infallible>;

const MIB: usize = 1 << 20;

struct Payloads {
    /// The slow readers' stream: 4 MiB of small SSE events.
    slow: Bytes,
    gzip: Bytes,
    zstd: Bytes,
    upload: Bytes,
    valid: Bytes,
    hold: Duration,
}

fn unterminated_event(len: usize) -> Vec<u8> {
    let mut v = b"event: response.output_text.done\ndata: ".to_vec();
    v.resize(v.len() + len, b'0');
    v
}

fn payloads(hold: Duration) -> Payloads {
    let plain = unterminated_event(63 * MIB);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&plain).unwrap();
    let gzip = gz.finish().unwrap();
    let zstd = zstd::stream::encode_all(&plain[..], 19).unwrap();
    let upload = zstd::stream::encode_all(&vec![0u8; 63 * MIB][..], 19).unwrap();
    let mut valid = b"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"pad\":\"".to_vec();
    valid.resize(valid.len() + 62 * MIB, b'x');
    valid.extend_from_slice(b"\"}}\n\n");
    let mut slow = Vec::with_capacity(4 * MIB + 256);
    let mut k = 0u64;
    while slow.len() < 4 * MIB {
        slow.extend_from_slice(
            format!("event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"delta\":\"{k:0>200}\"}}\n\n").as_bytes(),
        );
        k += 1;
    }
    Payloads {
        slow: slow.into(),
        gzip: gzip.into(),
        zstd: zstd.into(),
        upload: upload.into(),
        valid: valid.into(),
        hold,
    }
}

fn sha(b: &[u8]) -> [u8; 32] {
    Sha256::digest(b).into()
}

/// A body that sends `bytes` and then stays open for `hold`.
fn held_body(bytes: Bytes, hold: Duration) -> Body {
    let s = futures_util::stream::unfold(0u8, move |state| {
        let bytes = bytes.clone();
        async move {
            match state {
                0 => Some((Ok::<_, Infallible>(Frame::data(bytes)), 1)),
                1 => {
                    tokio::time::sleep(hold).await;
                    None
                }
                _ => None,
            }
        }
    });
    BodyExt::boxed(StreamBody::new(s))
}

async fn upstream(p: Arc<Payloads>) -> SocketAddr {
    // A backlog like a real API's: the default 128 overflowed with 600 streams opening at
    // once, and the kernel's SYN cookies then reset some of the relay's connections.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1024).unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let p = p.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let p = p.clone();
                    async move { Ok::<_, Infallible>(answer(req, &p).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
            });
        }
    });
    addr
}

async fn answer(req: Request<Incoming>, p: &Payloads) -> Response<Body> {
    let kind = req.uri().query().unwrap_or("").to_string();
    let sse = |bytes: Bytes, encoding: Option<&str>| {
        let mut b = Response::builder()
            .status(200)
            .header("content-type", "text/event-stream");
        if let Some(e) = encoding {
            b = b.header("content-encoding", e);
        }
        b.body(held_body(bytes, p.hold)).unwrap()
    };
    match kind.as_str() {
        "gzip" => sse(p.gzip.clone(), Some("gzip")),
        "zstd" => sse(p.zstd.clone(), Some("zstd")),
        "valid" => sse(p.valid.clone(), None),
        "slow-reader" => {
            // The request body read first, as an API does: a server that answers and then
            // closes with the body unread sends a reset, and a reset discards what the relay
            // had not read yet of the answer (the stream then ends cut, at the relay too).
            let _ = req.into_body().collect().await;
            sse(p.slow.clone(), None)
        }
        "idle-body" => {
            // As an API does: the answer comes once the whole body has.
            let _ = req.into_body().collect().await;
            Response::new(BodyExt::boxed(Full::new(Bytes::from_static(b"{}"))))
        }
        "upload" => {
            // Read what arrives of the unfinished body; answer with its digest once all of it
            // has (the client then holds the body open, unfinished).
            let want = p.upload.len();
            let mut body = req.into_body();
            let mut got = Vec::new();
            while got.len() < want {
                match body.frame().await {
                    Some(Ok(f)) => got.extend_from_slice(f.data_ref().map_or(&[][..], |d| d)),
                    _ => break,
                }
            }
            tokio::spawn(async move { while body.frame().await.is_some() {} });
            Response::new(BodyExt::boxed(Full::new(Bytes::from(sha(&got).to_vec()))))
        }
        _ => Response::new(BodyExt::boxed(Full::new(Bytes::from_static(b"pong")))),
    }
}

async fn connect(addr: SocketAddr) -> hyper::client::conn::http1::SendRequest<Body> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

/// One hostile stream; `Ok` when every byte arrived intact, else what went wrong.
async fn hostile(addr: SocketAddr, kind: &'static str, p: Arc<Payloads>) -> Result<(), String> {
    match kind {
        "slow-reader" => return slow_reader(addr, &p).await,
        "idle-body" | "half-head" => return idle(addr, kind, p.hold).await,
        _ => {}
    }
    let mut s = connect(addr).await;
    let req = Request::post(format!("/a/v1/responses?{kind}")).header("host", "a");
    let (req, expect): (Request<Body>, Vec<u8>) = if kind == "upload" {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
        tx.send(Ok(Frame::data(p.upload.clone()))).await.unwrap();
        let hold = p.hold;
        tokio::spawn(async move {
            tokio::time::sleep(hold).await;
            drop(tx); // the client goes away; the body never ended properly before that
        });
        let body = StreamBody::new(tokio_stream_from(rx));
        (
            req.header("content-type", "application/json")
                .header("content-encoding", "zstd")
                .body(BodyExt::boxed(body))
                .unwrap(),
            sha(&p.upload).to_vec(),
        )
    } else {
        let expect = match kind {
            "gzip" => p.gzip.to_vec(),
            "zstd" => p.zstd.to_vec(),
            _ => p.valid.to_vec(),
        };
        (
            req.header("content-type", "application/json")
                .body(BodyExt::boxed(Full::new(Bytes::from_static(
                    br#"{"model":"m","input":"hi","stream":true}"#,
                ))))
                .unwrap(),
            expect,
        )
    };
    let res = match s.send_request(req).await {
        Ok(r) => r,
        Err(e) => return Err(format!("head: {e}")),
    };
    let status = res.status().as_u16();
    match res.into_body().collect().await {
        Ok(c) => {
            let got = c.to_bytes();
            let same = if kind == "upload" {
                got[..] == expect[..]
            } else {
                sha(&got) == sha(&expect)
            };
            if same {
                Ok(())
            } else {
                Err(format!(
                    "status {status}, {} bytes, not the upstream's",
                    got.len()
                ))
            }
        }
        Err(e) => Err(format!("status {status}, body: {e}")),
    }
}

/// A client that asks for the slow stream, reads nothing for the hold, then reads it all and
/// compares it with what the upstream sent (the head's framing taken off first).
async fn slow_reader(addr: SocketAddr, p: &Payloads) -> Result<(), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = br#"{"model":"m","input":"hi","stream":true}"#;
    let mut tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let head = format!(
        "POST /a/v1/responses?slow-reader HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    tcp.write_all(head.as_bytes())
        .await
        .map_err(|e| format!("write: {e}"))?;
    tcp.write_all(body)
        .await
        .map_err(|e| format!("write: {e}"))?;
    tokio::time::sleep(p.hold).await;
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(120), tcp.read_to_end(&mut got))
        .await
        .map_err(|_| "read: stalled".to_string())?
        .map_err(|e| format!("read: {e}"))?;
    let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Err(format!("no response head in {} bytes", got.len()));
    };
    let (head, rest) = (&got[..end], &got[end + 4..]);
    let chunked = String::from_utf8_lossy(head)
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(rest)?
    } else {
        rest.to_vec()
    };
    if sha(&body) == sha(&p.slow) {
        Ok(())
    } else {
        Err(format!("{} body bytes, not the upstream's", body.len()))
    }
}

/// A chunked body's data (the relay passes the upstream's chunking as it is).
fn dechunk(mut b: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let line = b
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("a chunk-size line without its end")?;
        let size = usize::from_str_radix(std::str::from_utf8(&b[..line]).unwrap_or("").trim(), 16)
            .map_err(|_| "a bad chunk size")?;
        b = &b[line + 2..];
        if size == 0 {
            return Ok(out);
        }
        if b.len() < size + 2 {
            return Err("a chunk cut short".into());
        }
        out.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
}

/// `idle-body`: a head announcing 1 MiB and 1 KiB of it; `half-head`: half a head. Then
/// nothing for the hold. `Ok` unless the relay answered something other than its own refusal
/// or a timeout's close before the hold ended (it may close the connection: that is fine).
async fn idle(addr: SocketAddr, kind: &str, hold: Duration) -> Result<(), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let sent: Vec<u8> = if kind == "idle-body" {
        let mut v = format!(
            "POST /a/v1/responses?idle-body HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: {MIB}\r\n\r\n"
        )
        .into_bytes();
        v.extend(std::iter::repeat_n(b' ', 1024));
        v
    } else {
        b"POST /a/v1/responses?half-head HTTP/1.1\r\nHost: a\r\nContent-Ty".to_vec()
    };
    tcp.write_all(&sent)
        .await
        .map_err(|e| format!("write: {e}"))?;
    let mut answer = Vec::new();
    match tokio::time::timeout(hold, tcp.read_to_end(&mut answer)).await {
        Err(_) => Ok(()),
        Ok(_) if answer.is_empty() || answer.starts_with(b"HTTP/1.1 503") => Ok(()),
        Ok(_) => Err(format!(
            "answered before the hold: {}",
            String::from_utf8_lossy(&answer[..answer.len().min(12)])
        )),
    }
}

fn tokio_stream_from<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// Latencies (µs) of a small unobserved GET every 250 ms until `stop`.
async fn probe(addr: SocketAddr, path: &'static str, stop: Arc<AtomicU64>) -> Vec<u64> {
    let mut out = Vec::new();
    while stop.load(Ordering::Relaxed) == 0 {
        let t = Instant::now();
        let mut s = connect(addr).await;
        let res = s
            .send_request(
                Request::get(path)
                    .header("host", "a")
                    .body(BodyExt::boxed(Full::new(Bytes::new())))
                    .unwrap(),
            )
            .await;
        if let Ok(res) = res {
            let _ = res.into_body().collect().await;
        }
        out.push(t.elapsed().as_micros() as u64);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    out
}

/// The relay's open descriptors.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// The open-files soft limit raised to the hard one, for this process and the relay it
/// starts (thousands of streams at once need thousands of descriptors on both sides).
fn raise_open_files() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let _ = setrlimit(
        Resource::Nofile,
        Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        },
    );
}

fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let relay_bin = flag("--relay").unwrap_or_else(|| "target/release/windowtap".into());
    let n: usize = flag("--n").map_or(200, |v| v.parse().unwrap());
    let hold = Duration::from_secs(flag("--hold").map_or(5, |v| v.parse().unwrap()));
    let kinds: Vec<&'static str> = flag("--kinds")
        .unwrap_or_else(|| "gzip,zstd,upload,valid".into())
        .split(',')
        .map(|k| match k {
            "gzip" => "gzip",
            "zstd" => "zstd",
            "upload" => "upload",
            "valid" => "valid",
            "slow-reader" => "slow-reader",
            "idle-body" => "idle-body",
            "half-head" => "half-head",
            other => panic!("unknown kind {other}"),
        })
        .collect();
    raise_open_files();
    let relay_args: Vec<String> = match args.iter().position(|a| a == "--") {
        Some(i) => args[i + 1..].to_vec(),
        None => Vec::new(),
    };

    let p = Arc::new(payloads(hold));
    eprintln!(
        "payloads on the wire: gzip {} B, zstd {} B, upload {} B, valid {} B",
        p.gzip.len(),
        p.zstd.len(),
        p.upload.len(),
        p.valid.len()
    );
    let up = upstream(p.clone()).await;
    // The isolated prober: its own thread, runtime and upstream (the relay's mount `p`).
    let probe_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let probe_handle = probe_rt.handle().clone();
    let (probe_stop_tx, probe_stop_rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let _ = probe_rt.block_on(probe_stop_rx);
    });
    let probe_up = probe_handle.spawn(upstream(p.clone())).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(&relay_bin)
        .args(["relay", "--listen", "127.0.0.1:0"])
        // `-- --log info` for every exchange's line (with ATTACK_RELAY_LOG=FILE to keep them).
        .args(if relay_args.iter().any(|a| a == "--log") {
            &[][..]
        } else {
            &["--log", "warn"][..]
        })
        .arg("--ingest")
        .arg(dir.path().join("ingest.sock"))
        .args(["--upstream", &format!("a=http://{up}")])
        .args(["--upstream", &format!("p=http://{probe_up}")])
        .args(&relay_args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the relay");
    let pid = child.id();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let mut keep = std::env::var_os("ATTACK_RELAY_LOG").map(|p| std::fs::File::create(p).unwrap());
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(f) = &mut keep {
                use std::io::Write as _;
                let _ = writeln!(f, "{line}");
            }
            if let Some(rest) = line.split("listening on http://").nth(1) {
                if let Some(tx) = tx.take() {
                    let _ = tx.send(rest.trim().to_string());
                }
            }
        }
    });
    let addr: SocketAddr = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("relay banner")
        .parse()
        .unwrap();

    // Quiet: 20 probes of each kind.
    let stop = Arc::new(AtomicU64::new(0));
    let (quiet, quiet_alone) = {
        let h = tokio::spawn(probe(addr, "/a/ping", stop.clone()));
        let alone = probe_handle.spawn(probe(addr, "/p/ping", stop.clone()));
        tokio::time::sleep(Duration::from_secs(5)).await;
        stop.store(1, Ordering::Relaxed);
        (h.await.unwrap(), alone.await.unwrap())
    };
    let base_rss = status_kib(pid, "VmRSS:");

    let stop = Arc::new(AtomicU64::new(0));
    let prober = tokio::spawn(probe(addr, "/a/ping", stop.clone()));
    let prober_alone = probe_handle.spawn(probe(addr, "/p/ping", stop.clone()));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for &kind in &kinds {
        let count = if kind == "valid" { 1 } else { n };
        for _ in 0..count {
            let p = p.clone();
            tasks.push((kind, tokio::spawn(hostile(addr, kind, p))));
        }
    }
    let mut peak_sampled = 0;
    let mut bad = std::collections::BTreeMap::<&str, usize>::new();
    let mut ok = std::collections::BTreeMap::<&str, usize>::new();
    let sampler = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let (mut peak, mut fds) = (0, 0);
            while stop.load(Ordering::Relaxed) == 0 {
                peak = peak.max(status_kib(pid, "VmRSS:"));
                fds = fds.max(open_fds(pid));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            (peak, fds)
        })
    };
    let mut why = std::collections::BTreeMap::<String, usize>::new();
    for (kind, t) in tasks {
        match t.await {
            Ok(Ok(())) => *ok.entry(kind).or_default() += 1,
            Ok(Err(e)) => {
                *bad.entry(kind).or_default() += 1;
                *why.entry(format!("{kind}: {e}")).or_default() += 1;
            }
            Err(_) => *bad.entry(kind).or_default() += 1,
        }
    }
    let elapsed = started.elapsed();
    stop.store(1, Ordering::Relaxed);
    let during = prober.await.unwrap();
    let during_alone = prober_alone.await.unwrap();
    drop(probe_stop_tx);
    let (peak, peak_fds) = sampler.await.unwrap();
    peak_sampled = peak_sampled.max(peak);
    let hwm = status_kib(pid, "VmHWM:");
    let alive = child.try_wait().unwrap().is_none();
    testkit::proc::signal(pid, testkit::proc::Signal::KILL);
    let _ = child.wait();

    let stats = |v: &[u64]| {
        let mut s = v.to_vec();
        s.sort_unstable();
        let p50 = s.get(s.len() / 2).copied().unwrap_or(0);
        let max = s.last().copied().unwrap_or(0);
        (p50, max, s.len())
    };
    let (qp50, qmax, qn) = stats(&quiet);
    let (dp50, dmax, dn) = stats(&during);
    let (aqp50, aqmax, aqn) = stats(&quiet_alone);
    let (adp50, admax, adn) = stats(&during_alone);
    println!("relay {relay_bin} {}", relay_args.join(" "));
    println!("kinds {kinds:?}, {n} streams each (valid: 1), held {hold:?}; took {elapsed:.1?}");
    println!("intact streams {ok:?}; broken {bad:?}; relay alive at the end: {alive}");
    if !why.is_empty() {
        println!("broken: {why:?}");
    }
    println!(
        "relay RSS: idle {:.1} MiB, peak sampled {:.1} MiB, VmHWM {:.1} MiB; open descriptors at most {peak_fds}",
        base_rss as f64 / 1024.0,
        peak_sampled as f64 / 1024.0,
        hwm as f64 / 1024.0
    );
    println!(
        "normal request latency: quiet p50 {:.2} ms max {:.2} ms ({qn}); during p50 {:.2} ms max {:.2} ms ({dn})",
        qp50 as f64 / 1000.0,
        qmax as f64 / 1000.0,
        dp50 as f64 / 1000.0,
        dmax as f64 / 1000.0
    );
    println!(
        "normal request latency, prober on its own thread: quiet p50 {:.2} ms max {:.2} ms ({aqn}); during p50 {:.2} ms max {:.2} ms ({adn})",
        aqp50 as f64 / 1000.0,
        aqmax as f64 / 1000.0,
        adp50 as f64 / 1000.0,
        admax as f64 / 1000.0
    );
}
