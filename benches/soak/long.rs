//! The long soak, "a week in an hour" (`cargo bench --bench soak -- --long`): one relay with
//! capture rotation on carries sessions that come and go for an hour (by default), and the
//! harness checks that what it holds stays flat and that the pieces replay to the live records.
//!
//! - Each worker runs **sessions** one after another: a session is one `windowtap wrap`
//!   process (with its MCP server) started for it, `--session` conversations, and the
//!   wrapper closed (the server exits, the wrapper sends its last reports and exits 0). One
//!   session in `--kill-every` is **killed** instead: its last conversation's last tool call
//!   is `hang` (never answered), its wrapper is SIGKILLed during the call, and the host never
//!   continues (no continuation request; a WebSocket is dropped without a close frame). The
//!   relay ends that call `lost` when the wrapper's connection closes (docs/ingest.md).
//! - The relay runs with `--rotate-size` and `--rotate-keep` on capture and records, in
//!   `DIR/rot/`. Every second the harness hard-links each new piece into `DIR/all/`, so that
//!   once the relay has deleted a piece (beyond `--rotate-keep`) the harness still has it to
//!   compare with. The links hold the deleted pieces' blocks on the file system, but not in
//!   `rot/`, whose size is what is sampled and held to the limit.
//! - Sampled: relay RSS and descriptors every 5 s; bytes in `rot/` every second. From the
//!   records: each call's decision delay (`decided_at − end`), by the minute its call ended.
//! - Checked: no forwarding error, no mismatched byte; one record per call started (killed
//!   ones included); every completed call `attributed` with its identity evidence; `rot/`
//!   never above `2 × keep × size`; every piece, replayed in order, = every live record
//!   byte for byte; the pieces still kept at the end, replayed alone, give the live record of
//!   every call that started within them on a stream not already open at their start; RSS, descriptors and p99
//!   decision delay flat from the tenth minute to the last (see `FLAT`); a clean stop.
//!
//! Writes `DIR/samples.csv` and `DIR/minutes.csv` (scripts/soak-plot.py draws them). Results
//! and the week-equivalence argument: docs/soak.md, "A week in an hour".

use super::*;

use std::time::{SystemTime, UNIX_EPOCH};

/// Flat means: the median over the last ten minutes is at most this fraction above the
/// median over minutes 10–20 (RSS and descriptors per 5-s sample, p99 decision delay per
/// minute). One-sided: what a relay that runs for weeks must not do is grow or slow down; a
/// measure that falls (the machine's other load went away) is no decay.
const FLAT: [(&str, f64); 3] = [
    ("RSS", 0.10),
    ("descriptors", 0.10),
    ("p99 decision delay", 0.25),
];

/// A run shorter than this many minutes has no "minutes 10–20" and "last ten" apart: its
/// flatness is printed, not judged.
const JUDGED_FROM_MIN: u64 = 30;

#[derive(Default)]
struct Sessions {
    started: AtomicU64,
    killed: AtomicU64,
    /// Closed sessions whose wrapper did not exit 0 (or not within the wait bound).
    unclean: AtomicU64,
}

async fn session_worker(
    ctx: Arc<Ctx>,
    sessions: Arc<Sessions>,
    ingest: PathBuf,
    id: usize,
    until: Instant,
    per_session: u64,
    kill_every: u64,
) {
    let mut n = 0u64;
    let mut s = 0u64;
    while Instant::now() < until {
        let pool = Pool {
            wrappers: vec![Wrapper::start(&ingest).await],
            next: AtomicUsize::new(0),
        };
        sessions.started.fetch_add(1, Ordering::Relaxed);
        // Staggered by worker, so kills are spread over the run.
        let kill = (s + id as u64) % kill_every == kill_every - 1;
        let mut killed = false;
        for k in 0..per_session {
            if Instant::now() >= until {
                break;
            }
            killed = kill && k + 1 == per_session;
            let c = Conv {
                worker: id,
                n,
                kill: killed,
            };
            conversation(&ctx, &pool, c).await;
            n += 1;
        }
        if killed {
            sessions.killed.fetch_add(1, Ordering::Relaxed);
        } else if !pool.wrappers[0].close().await.is_some_and(|e| e.success()) {
            sessions.unclean.fetch_add(1, Ordering::Relaxed);
        }
        s += 1;
    }
}

/// The pieces of `base` (`capture` or `records`) in `dir`, in piece order, with their numbers.
fn pieces(dir: &Path, base: &str) -> Vec<(u64, PathBuf)> {
    let mut v: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().to_string();
                    let seq = name
                        .strip_prefix(base)?
                        .strip_prefix('.')?
                        .strip_suffix(".jsonl")?
                        .parse()
                        .ok()?;
                    Some((seq, e.path()))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Hard-links every file of `rot` not yet in `all` (see the module docs); returns the bytes
/// in `rot`.
fn link_new(rot: &Path, all: &Path) -> u64 {
    let mut bytes = 0;
    for e in std::fs::read_dir(rot).into_iter().flatten().flatten() {
        let Ok(m) = e.metadata() else { continue };
        bytes += m.len();
        let to = all.join(e.file_name());
        if !to.exists() {
            let _ = std::fs::hard_link(e.path(), to);
        }
    }
    bytes
}

#[derive(Clone, Copy)]
struct LongSample {
    at: Sample,
    disk: u64,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// The `q` quantile (nearest rank) of `v`.
fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1]
}

fn unix_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        * 1000.0
}

fn lines_of(paths: &[(u64, PathBuf)]) -> Vec<String> {
    paths
        .iter()
        .flat_map(|(_, p)| {
            std::fs::read_to_string(p)
                .unwrap_or_default()
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

fn contiguous(p: &[(u64, PathBuf)]) -> bool {
    p.iter().enumerate().all(|(i, (seq, _))| *seq == i as u64)
}

pub(super) async fn run(o: Opts) -> bool {
    let dir = o
        .dir
        .clone()
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/soak-long"));
    let rot = dir.join("rot");
    let all = dir.join("all");
    for d in [&rot, &all] {
        let _ = std::fs::remove_dir_all(d);
        std::fs::create_dir_all(d).unwrap();
    }
    let ingest = dir.join("ingest.sock");
    let _ = std::fs::remove_file(&ingest);
    let limit = 2 * o.rotate_keep as u64 * (o.rotate_size_kib << 10);

    let stats = Arc::new(Stats::default());
    let gate = Arc::new(Gate::new());
    let up = upstream(stats.clone(), gate.clone()).await;
    let extra = [
        "--rotate-size".to_string(),
        format!("{}K", o.rotate_size_kib),
        "--rotate-keep".to_string(),
        o.rotate_keep.to_string(),
    ];
    let mut relay = start_relay(&up, &rot, &ingest, &extra);
    let pid = relay.child.id();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle_fds = fds(pid);
    let idle_rss = proc_kib(pid, "VmRSS:");
    println!(
        "soak --long: {} workers for {} s through the relay (pid {pid}) at {}; sessions of {} \
         conversations, one in {} killed; --rotate-size {}K --rotate-keep {} (rot/ limit {:.0} MiB); files in {}",
        o.streams,
        o.secs,
        relay.addr,
        o.session,
        o.kill_every,
        o.rotate_size_kib,
        o.rotate_keep,
        limit as f64 / (1 << 20) as f64,
        dir.display()
    );
    println!(
        "soak --long: idle before: RSS {:.1} MiB, {idle_fds} fds",
        mib(idle_rss)
    );

    let t0 = Instant::now();
    let t0_unix_ms = unix_ms();
    let until = t0 + Duration::from_secs(o.secs);
    let ctx = Arc::new(Ctx {
        relay: relay.addr,
        stats: stats.clone(),
        gate: gate.clone(),
        pool: Arc::new(Pool {
            wrappers: Vec::new(),
            next: AtomicUsize::new(0),
        }),
    });
    let sessions = Arc::new(Sessions::default());

    let disk_max = Arc::new(AtomicU64::new(0));
    let linker = {
        let (rot, all, disk_max) = (rot.clone(), all.clone(), disk_max.clone());
        tokio::spawn(async move {
            loop {
                disk_max.fetch_max(link_new(&rot, &all), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    };
    let samples = Arc::new(Mutex::new(Vec::<LongSample>::new()));
    let sampler = {
        let (samples, stats, sessions, rot) = (
            samples.clone(),
            stats.clone(),
            sessions.clone(),
            rot.clone(),
        );
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(5));
            tick.tick().await;
            loop {
                tick.tick().await;
                let disk = std::fs::read_dir(&rot)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .filter_map(|e| e.metadata().ok())
                    .map(|m| m.len())
                    .sum();
                let s = LongSample {
                    at: Sample {
                        secs: t0.elapsed().as_secs_f64(),
                        rss_kib: proc_kib(pid, "VmRSS:"),
                        fds: fds(pid),
                    },
                    disk,
                };
                samples.lock().unwrap().push(s);
                println!(
                    "soak: {:>6.0} s  RSS {:>6.1} MiB  fds {:>4}  rot {:>5.1} MiB  sessions {:>5} (killed {:>3})  conversations {:>7}  MCP calls {:>7}  errors {}  mismatched {}/{}",
                    s.at.secs,
                    mib(s.at.rss_kib),
                    s.at.fds,
                    s.disk as f64 / (1 << 20) as f64,
                    sessions.started.load(Ordering::Relaxed),
                    sessions.killed.load(Ordering::Relaxed),
                    stats.conversations.load(Ordering::Relaxed),
                    stats.mcp_calls.load(Ordering::Relaxed),
                    stats.errors.load(Ordering::Relaxed),
                    stats.mismatched_down.load(Ordering::Relaxed),
                    stats.mismatched_up.load(Ordering::Relaxed),
                );
            }
        })
    };
    let mut tasks = Vec::new();
    for i in 0..o.streams {
        tasks.push(tokio::spawn(session_worker(
            ctx.clone(),
            sessions.clone(),
            ingest.clone(),
            i,
            until,
            o.session,
            o.kill_every,
        )));
    }
    for t in tasks {
        if let Err(e) = t.await {
            stats.error("panic", format!("a worker panicked: {e}"));
        }
    }
    let ran = t0.elapsed().as_secs_f64();
    sampler.abort();

    // Every call started (completed or killed) becomes a record.
    let calls = stats.mcp_calls.load(Ordering::Relaxed);
    let killed = stats.killed_calls.load(Ordering::Relaxed);
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        link_new(&rot, &all);
        if (lines_of(&pieces(&all, "records")).len() as u64) >= calls + killed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let idle_after = fds_back_to(pid, idle_fds, o.idle_wait).await;
    let hwm = proc_kib(pid, "VmHWM:");
    let (exit, stop_ms) = stop_relay(&mut relay).await;
    linker.abort();
    disk_max.fetch_max(link_new(&rot, &all), Ordering::Relaxed);
    let disk_max = disk_max.load(Ordering::Relaxed);

    // Every piece, in order, replayed = every live record, byte for byte.
    let all_caps = pieces(&all, "capture");
    let all_recs = pieces(&all, "records");
    // The run header (docs/records-v1.md) opens the first piece; replay writes none.
    let live: Vec<String> = lines_of(&all_recs)
        .into_iter()
        .filter(|l| !l.starts_with(r#"{"type":"run""#))
        .collect();
    let mut live_text = live.join("\n");
    if !live_text.is_empty() {
        live_text.push('\n');
    }
    let records: Vec<Value> = live
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let caps: Vec<PathBuf> = all_caps.iter().map(|(_, p)| p.clone()).collect();
    let (all_ok, all_summary) = replay(&caps, &dir.join("replayed-all.jsonl"));
    let all_equal = all_ok
        && std::fs::read(dir.join("replayed-all.jsonl")).unwrap_or_default()
            == live_text.as_bytes();
    let archive_whole = contiguous(&all_caps) && contiguous(&all_recs);
    let capture_lines = lines_of(&all_caps);
    let events = capture_lines.len().saturating_sub(all_caps.len()) as u64;
    let epoch_unix_ms = capture_lines
        .first()
        .and_then(|h| serde_json::from_str::<Value>(h).ok())
        .and_then(|h| h["epoch_unix_ms"].as_f64())
        .unwrap_or(t0_unix_ms);

    // The kept pieces alone: a call that started at or after the first event of the first
    // kept piece, in a window whose stream was not already open there (the piece header's
    // `open.streams`: the correlator starts empty, so a response begun before the piece is
    // unknown to it), comes out as it did live.
    let kept: Vec<(u64, PathBuf)> = pieces(&rot, "capture");
    let first_kept = kept
        .first()
        .and_then(|(_, p)| std::fs::read_to_string(p).ok())
        .unwrap_or_default();
    let mut first_lines = first_kept
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_default());
    let header = first_lines.next().unwrap_or_default();
    let open_before: std::collections::HashSet<String> = header["open"]["streams"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s[0].as_str().map(str::to_string))
        .collect();
    let kept_from = first_lines
        .next()
        .and_then(|e| e["t"].as_f64())
        .unwrap_or(f64::INFINITY);
    let kept_paths: Vec<PathBuf> = kept.iter().map(|(_, p)| p.clone()).collect();
    let (kept_ok, kept_summary) = replay(&kept_paths, &dir.join("replayed-kept.jsonl"));
    let replayed_kept: HashMap<String, String> =
        std::fs::read_to_string(dir.join("replayed-kept.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let v: Value = serde_json::from_str(l).ok()?;
                Some((v["interval"].as_str()?.to_string(), l.to_string()))
            })
            .collect();
    let (mut covered, mut covered_equal) = (0u64, 0u64);
    let mut differ = Vec::new();
    for (line, r) in live.iter().zip(&records) {
        let start = r["start"].as_f64().unwrap_or(f64::NEG_INFINITY);
        let stream = r["window"]["stream"].as_str().unwrap_or("");
        // A record that had a candidate but names no window (`unclosed`: a killed call's)
        // does not say which stream it was on, so whether it was open before is unknown.
        let unnamed = r["window"].is_null() && r["candidates"].as_u64().unwrap_or(0) > 0;
        if start < kept_from || open_before.contains(stream) || unnamed {
            continue;
        }
        covered += 1;
        match replayed_kept.get(r["interval"].as_str().unwrap_or("")) {
            Some(l) if l == line => covered_equal += 1,
            other => differ.push((line.clone(), other.cloned())),
        }
    }

    // Decisions: the completed calls, and the killed ones.
    let (hang, echo): (Vec<&Value>, Vec<&Value>) =
        records.iter().partition(|r| r["tool"] == json!("hang"));
    let echo_tally = tally(echo.iter().copied());
    let hang_tally = tally(hang.iter().copied());
    let attributed = echo_tally.decisions.get("attributed").copied().unwrap_or(0);

    // Per minute: samples, and the completed calls' decision delays by the minute the call
    // ended (a killed call's window is given up `close_wait` after the kill, by design: its
    // delay is that wait, and a minute with more kills would have a higher p99 for it).
    let samples = samples.lock().unwrap().clone();
    let minutes = (ran / 60.0).floor() as usize;
    let mut delays: Vec<Vec<f64>> = vec![Vec::new(); minutes];
    for r in &echo {
        let (Some(end), Some(decided)) = (r["end"].as_f64(), r["decided_at"].as_f64()) else {
            continue;
        };
        let at = (epoch_unix_ms + end - t0_unix_ms) / 1000.0;
        if at >= 0.0 && ((at / 60.0) as usize) < minutes {
            delays[(at / 60.0) as usize].push(decided - end);
        }
    }
    let in_minute = |m: usize| {
        samples
            .iter()
            .filter(move |s| s.at.secs >= m as f64 * 60.0 && s.at.secs < (m + 1) as f64 * 60.0)
    };
    let mut csv = String::from("secs,rss_kib,fds,disk_bytes\n");
    for s in &samples {
        csv += &format!(
            "{:.1},{},{},{}\n",
            s.at.secs, s.at.rss_kib, s.at.fds, s.disk
        );
    }
    std::fs::write(dir.join("samples.csv"), csv).unwrap();
    let mut csv = String::from(
        "minute,rss_mib_median,fds_median,disk_mib_max,calls_ended,p50_delay_ms,p99_delay_ms\n",
    );
    let mut p99 = Vec::new();
    for (m, d) in delays.iter_mut().enumerate() {
        let rss = median(in_minute(m).map(|s| mib(s.at.rss_kib)).collect());
        let f = median(in_minute(m).map(|s| s.at.fds as f64).collect());
        let disk = in_minute(m).map(|s| s.disk).max().unwrap_or(0);
        let n = d.len();
        let p50 = quantile(d, 0.5);
        let q99 = quantile(d, 0.99);
        p99.push(q99);
        csv += &format!(
            "{m},{rss:.2},{f},{:.3},{n},{p50:.1},{q99:.1}\n",
            disk as f64 / (1 << 20) as f64
        );
    }
    std::fs::write(dir.join("minutes.csv"), csv).unwrap();

    // Flatness: minutes 10–20 against the last ten.
    let judged = minutes as u64 >= JUDGED_FROM_MIN;
    let (a, b) = if judged {
        ((10, 20), (minutes - 10, minutes))
    } else {
        ((minutes / 3, 2 * minutes / 3), (2 * minutes / 3, minutes))
    };
    let over = |(from, to): (usize, usize), f: &dyn Fn(&LongSample) -> f64| {
        median(
            samples
                .iter()
                .filter(|s| s.at.secs >= from as f64 * 60.0 && s.at.secs < to as f64 * 60.0)
                .map(f)
                .collect(),
        )
    };
    let p99_over = |(from, to): (usize, usize)| {
        median(
            p99[from.min(p99.len())..to.min(p99.len())]
                .iter()
                .copied()
                .filter(|x| x.is_finite())
                .collect(),
        )
    };
    let measures = [
        (
            over(a, &|s| mib(s.at.rss_kib)),
            over(b, &|s| mib(s.at.rss_kib)),
            "MiB",
        ),
        (
            over(a, &|s| s.at.fds as f64),
            over(b, &|s| s.at.fds as f64),
            "",
        ),
        (p99_over(a), p99_over(b), "ms"),
    ];
    let mut flat_ok = true;

    let s = &stats;
    let errors = s.errors.load(Ordering::Relaxed);
    let mm_down = s.mismatched_down.load(Ordering::Relaxed);
    let mm_up = s.mismatched_up.load(Ordering::Relaxed);
    let turns: u64 = s.turns.iter().map(|t| t.load(Ordering::Relaxed)).sum();
    // A killed host's WebSocket is reset (it had not read everything): the relay logs the
    // tunnel's end as a warning, rightly. Those are counted apart; any other warning fails.
    let (resets, relay_warnings): (Vec<String>, Vec<String>) = relay
        .warnings()
        .into_iter()
        .partition(|l| l.contains("status=101") && l.contains("failure=reset"));
    println!("\n=== long soak result ===");
    println!(
        "ran {ran:.0} s with {} workers: {} sessions ({} killed, {} closed uncleanly), {} conversations, {turns} turns",
        o.streams,
        sessions.started.load(Ordering::Relaxed),
        sessions.killed.load(Ordering::Relaxed),
        sessions.unclean.load(Ordering::Relaxed),
        s.conversations.load(Ordering::Relaxed),
    );
    println!(
        "capture: {events} events in {} pieces ({:.1} events per turn); {:.0} events/hour, {:.0} turns/hour, {:.0} MCP calls/hour",
        all_caps.len(),
        events as f64 / turns.max(1) as f64,
        events as f64 * 3600.0 / ran,
        turns as f64 * 3600.0 / ran,
        (calls + killed) as f64 * 3600.0 / ran,
    );
    println!("forwarding errors: {errors}; mismatched: {mm_down} responses, {mm_up} requests");
    for (class, (n, sample)) in s.samples.lock().unwrap().iter() {
        println!("  error {class}: {n} (e.g. {sample})");
    }
    println!(
        "MCP calls: {calls} completed + {killed} killed; records: {} in {} pieces (archive whole: {archive_whole})",
        records.len(),
        all_recs.len()
    );
    let sorted = |m: &HashMap<String, u64>| {
        let mut v: Vec<_> = m.iter().map(|(k, v)| (k.clone(), *v)).collect();
        v.sort();
        v
    };
    println!(
        "completed calls: {:?}; without identity evidence: {}",
        sorted(&echo_tally.decisions),
        echo_tally.without_identity
    );
    println!(
        "killed calls: {:?}; evidence {:?}",
        sorted(&hang_tally.decisions),
        sorted(&hang_tally.evidence)
    );
    println!(
        "replay of all {} pieces: {} [{all_summary}]",
        all_caps.len(),
        if all_equal {
            "equal to the live records, byte for byte"
        } else {
            "DIFFERS from the live records"
        }
    );
    println!(
        "replay of the {} kept pieces ({}..): {} of {covered} calls that started at or after t = {kept_from:.0} ms in a stream not open before ({} open) equal to their live record, {} differ; {} records replayed in all [exit ok: {kept_ok}; {kept_summary}]",
        kept.len(),
        kept.first().map(|k| k.0).unwrap_or(0),
        covered_equal,
        open_before.len(),
        differ.len(),
        replayed_kept.len(),
    );
    for (live, got) in differ.iter().take(3) {
        println!(
            "  live:     {live}\n  replayed: {}",
            got.as_deref().unwrap_or("(none)")
        );
    }
    println!(
        "rot/ on disk: max {:.2} MiB (sampled every second) against the limit {:.0} MiB",
        disk_max as f64 / (1 << 20) as f64,
        limit as f64 / (1 << 20) as f64
    );
    println!(
        "flat: minutes {}-{} against {}-{}{}",
        a.0,
        a.1,
        b.0,
        b.1,
        if judged {
            ""
        } else {
            " (not judged: the run is shorter than 30 minutes)"
        }
    );
    for ((name, tol), (first, last, unit)) in FLAT.iter().zip(measures) {
        let ok = last - first <= tol * first;
        flat_ok &= ok || !judged;
        println!(
            "  {name}: median {first:.1} {unit} -> {last:.1} {unit} ({:+.1} %, at most +{:.0} %: {})",
            (last / first - 1.0) * 100.0,
            tol * 100.0,
            match (judged, ok) {
                (false, _) => "not judged",
                (true, true) => "flat",
                (true, false) => "NOT FLAT",
            }
        );
    }
    println!(
        "relay: RSS idle {:.1} MiB, peak (VmHWM) {:.1} MiB; fds idle before {idle_fds}, after {idle_after}",
        mib(idle_rss),
        mib(hwm)
    );
    println!(
        "stop: SIGTERM -> {} in {stop_ms} ms; relay warnings: {} (and {} WebSocket tunnels reset, of {} killed sessions)",
        match exit {
            Some(s) => format!("{s}"),
            None => "NO EXIT (killed)".into(),
        },
        relay_warnings.len(),
        resets.len(),
        sessions.killed.load(Ordering::Relaxed),
    );
    for w in relay_warnings.iter().take(10) {
        println!("  {w}");
    }
    println!(
        "samples: {} and {}",
        dir.join("samples.csv").display(),
        dir.join("minutes.csv").display()
    );

    let checks = [
        ("no forwarding errors", errors == 0),
        ("no mismatched bytes", mm_down == 0 && mm_up == 0),
        (
            "records = MCP calls started (killed ones included), no piece missing",
            records.len() as u64 == calls + killed && archive_whole,
        ),
        (
            "every completed call attributed with identity evidence",
            attributed == calls && echo_tally.without_identity == 0,
        ),
        ("replay of all pieces equals the live records", all_equal),
        (
            "replay of the kept pieces equals the live records it covers",
            kept_ok && covered > 0 && differ.is_empty(),
        ),
        ("rot/ under the rotation limit", disk_max <= limit),
        (
            "RSS, descriptors, p99 decision delay flat from the tenth minute (runs of 30 min or more)",
            flat_ok,
        ),
        ("fds back to idle", idle_after <= idle_fds),
        (
            "clean stop",
            exit.is_some_and(|s| s.success()) && relay_warnings.is_empty(),
        ),
        (
            "sessions' wrappers exited cleanly",
            sessions.unclean.load(Ordering::Relaxed) == 0,
        ),
    ];
    let mut ok = true;
    for (name, pass) in checks {
        println!("check: {name}: {}", if pass { "ok" } else { "FAILED" });
        ok &= pass;
    }
    ok
}
