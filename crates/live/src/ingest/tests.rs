use super::server::*;
use super::trust::*;
use super::*;
use correlator::{EventKind, Hints, Millis, Outcome};
use hostid::Hosts;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;
use sys::clock::{mono_ns, Clock};
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::sync::mpsc;

fn hints(tool_use_id: Option<&str>) -> Hints {
    Hints {
        tool_use_id: tool_use_id.map(Into::into),
        ..Hints::default()
    }
}

/// A start report of tool `t` on alias `a`, with a `tool_use_id` hint.
fn start_report(id: &str, start_ns: u64, tool_use_id: &str) -> Report {
    Report::Start {
        id: id.into(),
        alias: "a".into(),
        tool: "t".into(),
        start_ns,
        hints: hints(Some(tool_use_id)),
    }
}

#[test]
fn a_wrapper_without_a_path_looks_where_a_relay_may_listen() {
    let paths = wrapper_candidates();
    assert_eq!(paths[0], default_path());
    let uid = rustix::process::getuid().as_raw();
    assert!(paths.contains(&PathBuf::from(format!(
        "/run/user/{uid}/windowtap/ingest.sock"
    ))));
    assert!(paths.contains(&PathBuf::from(format!("/tmp/windowtap-{uid}/ingest.sock"))));
    let unique: std::collections::HashSet<_> = paths.iter().collect();
    assert_eq!(unique.len(), paths.len());
}

/// A listener on a fresh socket, its events, and its directory (kept alive).
async fn listener() -> (
    IngestHandle,
    mpsc::Receiver<(Millis, EventKind)>,
    tempfile::TempDir,
    Clock,
) {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::start();
    let (tx, rx) = mpsc::channel(64);
    let handle = serve(dir.path().join("ingest.sock"), clock, tx, Hosts::start())
        .await
        .unwrap();
    (handle, rx, dir, clock)
}

async fn next(rx: &mut mpsc::Receiver<(Millis, EventKind)>) -> (Millis, EventKind) {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("an event in time")
        .expect("open")
}

#[tokio::test]
async fn starts_and_ends_become_events_stamped_on_arrival() {
    let (handle, mut rx, _dir, clock) = listener().await;
    let mode = std::fs::metadata(handle.path()).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let mut conn = UnixStream::connect(handle.path()).await.unwrap();
    let s = mono_ns();
    let e = s + 1_000;
    let start = Report::Start {
        id: "i1".into(),
        alias: "a".into(),
        tool: "t".into(),
        start_ns: s,
        hints: hints(None),
    };
    let end = Report::End {
        rounds: None,
        id: "i1".into(),
        alias: "a".into(),
        tool: "t".into(),
        start_ns: s,
        end_ns: e,
        outcome: Outcome::Error,
        hints: hints(Some("toolu_9")),
    };
    // Wait until the end's reading is in the past, so it is not refused as from the future.
    while mono_ns() <= e {
        tokio::task::yield_now().await;
    }
    conn.write_all(format!("{}{}", start.to_line(), end.to_line()).as_bytes())
        .await
        .unwrap();
    let (t1, k1) = next(&mut rx).await;
    assert_eq!(
        k1,
        EventKind::McpStart {
            interval: "i1".into(),
            alias: "a".into(),
            tool: "t".into(),
            start: clock.ms_at(s),
            host: None,
            transport: correlator::McpTransport::Stdio,
        }
    );
    assert!(t1 >= clock.ms_at(s));
    let (t2, k2) = next(&mut rx).await;
    assert_eq!(
        k2,
        EventKind::McpInterval {
            rounds: None,
            interval: "i1".into(),
            alias: "a".into(),
            tool: "t".into(),
            start: clock.ms_at(s),
            end: clock.ms_at(e),
            outcome: Outcome::Error,
            hints: hints(Some("toolu_9")),
            host: None,
            transport: correlator::McpTransport::Stdio,
        }
    );
    assert!(t2 >= t1 && t2 >= clock.ms_at(e));
    assert_eq!(handle.counters().accepted.load(Ordering::Relaxed), 2);
}

#[tokio::test]
async fn a_dropped_wrapper_loses_its_running_calls_and_bad_lines_are_skipped() {
    let (handle, mut rx, _dir, clock) = listener().await;
    let mut conn = UnixStream::connect(handle.path()).await.unwrap();
    let s = mono_ns();
    let start = |id: &str| start_report(id, s, "toolu_2");
    let long = "x".repeat(MAX_LINE + 10);
    let future = Report::Start {
        id: "f".into(),
        alias: "a".into(),
        tool: "t".into(),
        start_ns: u64::MAX / 2,
        hints: hints(None),
    };
    let text = format!(
        "{}garbage\n{long}\n{}{}{}",
        start("i2").to_line(),
        start("i2").to_line(),
        future.to_line(),
        start("i3").to_line()
    );
    conn.write_all(text.as_bytes()).await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..2 {
        seen.push(next(&mut rx).await.1);
    }
    assert!(matches!(&seen[1], EventKind::McpStart { interval, .. } if interval == "i3"));
    drop(conn);
    let mut lost = Vec::new();
    for _ in 0..2 {
        let (t, k) = next(&mut rx).await;
        match k {
            EventKind::McpInterval {
                interval,
                outcome,
                hints: h,
                start,
                end,
                ..
            } => {
                assert_eq!(outcome, Outcome::Lost);
                assert_eq!(h, hints(Some("toolu_2")));
                assert_eq!(start, clock.ms_at(s));
                assert!(end >= start && t >= end);
                lost.push(interval);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    lost.sort();
    assert_eq!(lost, vec!["i2".to_string(), "i3".to_string()]);
    let c = handle.counters();
    assert_eq!(
        c.bad_lines.load(Ordering::Relaxed),
        4,
        "garbage, too long, duplicate, future"
    );
    assert_eq!(c.lost.load(Ordering::Relaxed), 2);
}

#[tokio::test]
async fn a_flood_of_bad_lines_makes_a_handful_of_warnings() {
    // Counted where the listener decides to write a warning, not through a tracing
    // subscriber: a thread-local subscriber in a test binary whose other tests reach the
    // same callsite without one misses events now and then (tracing's interest cache).
    let (handle, mut rx, _dir, _clock) = listener().await;
    let mut conn = UnixStream::connect(handle.path()).await.unwrap();
    let started = std::time::Instant::now();
    conn.write_all("not a report\n".repeat(100_000).as_bytes())
        .await
        .unwrap();
    let start = Report::Start {
        id: "after".into(),
        alias: "a".into(),
        tool: "t".into(),
        start_ns: mono_ns(),
        hints: hints(None),
    };
    conn.write_all(start.to_line().as_bytes()).await.unwrap();
    // Lines are taken in order: once this one is in, every bad line has been seen.
    assert!(matches!(next(&mut rx).await.1, EventKind::McpStart { .. }));
    assert!(handle.counters().bad_lines.load(Ordering::Relaxed) >= 100_000);
    let periods = started.elapsed().as_secs() / 5 + 1;
    let written = handle.counters().bad_line_warnings.load(Ordering::Relaxed);
    assert!(
        written <= 10 + periods,
        "{written} warnings for 100,000 bad lines"
    );
    assert!(written >= 1, "the first bad lines are still reported");
}

/// Root can hand files to another user; other users cannot, so these tests need root.
fn root() -> bool {
    if my_uid() == 0 {
        return true;
    }
    eprintln!("SKIPPED: needs root to make files owned by another user");
    false
}

const NOBODY: u32 = 65534;

fn chown(path: &Path, uid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(uid)).unwrap();
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn untrusted(r: Result<std::os::unix::net::UnixStream, ConnectError>) -> Untrusted {
    match r {
        Err(ConnectError::Untrusted(u)) => u,
        Err(ConnectError::Io(e)) => panic!("an I/O error, not a refusal: {e}"),
        Ok(_) => panic!("connected to a socket it must refuse"),
    }
}

#[test]
fn a_wrapper_connects_to_its_own_users_socket_in_a_private_directory() {
    let dir = tempfile::tempdir().unwrap();
    chmod(dir.path(), 0o700);
    let path = dir.path().join("ingest.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    assert!(connect_verified(&path, true).is_ok());
}

#[test]
fn a_wrapper_refuses_a_default_directory_others_may_use_or_own() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ingest.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    chmod(dir.path(), 0o755);
    assert_eq!(
        untrusted(connect_verified(&path, true)),
        Untrusted::DirMode { mode: 0o755 }
    );
    // A path the user gave is not held to the default directory's rules.
    assert!(connect_verified(&path, false).is_ok());
    if !root() {
        return;
    }
    chmod(dir.path(), 0o700);
    chown(dir.path(), NOBODY);
    assert_eq!(
        untrusted(connect_verified(&path, true)),
        Untrusted::DirOwner { owner: NOBODY }
    );
    // The relay explains the squat and how to choose another place.
    let e = prepare_private_dir(dir.path()).unwrap_err().to_string();
    assert!(
        e.contains("owned by uid 65534") && e.contains("--ingest PATH"),
        "{e}"
    );
    assert!(e.contains(ENV), "{e}");
}

#[test]
fn a_wrapper_refuses_a_socket_of_another_user() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ingest.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    chown(&path, NOBODY);
    assert_eq!(
        untrusted(connect_verified(&path, false)),
        Untrusted::SocketOwner { owner: NOBODY }
    );
}

#[test]
fn a_wrapper_refuses_a_listener_running_as_another_user() {
    use std::os::unix::process::CommandExt;
    if !root()
        || std::process::Command::new("python3")
            .arg("-V")
            .output()
            .is_err()
    {
        eprintln!("SKIPPED: needs root and python3");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    chmod(dir.path(), 0o777);
    let path = dir.path().join("ingest.sock");
    // Another user's listener; the socket file is then handed to us, so only the peer's
    // credentials can tell.
    let mut squatter = std::process::Command::new("python3")
        .args([
            "-c",
            "import socket,sys,time\ns=socket.socket(socket.AF_UNIX)\ns.bind(sys.argv[1])\ns.listen()\nprint('listening', flush=True)\ntime.sleep(30)",
        ])
        .arg(&path)
        .uid(NOBODY)
        .gid(NOBODY)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Only once it listens: the socket file exists from bind() on, and a connect between
    // bind() and listen() is refused (an I/O error, not the refusal under test).
    let mut ready = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(squatter.stdout.take().unwrap()),
        &mut ready,
    )
    .unwrap();
    assert_eq!(ready.trim(), "listening", "the listener never bound");
    chown(&path, my_uid());
    let got = connect_verified(&path, false);
    let _ = squatter.kill();
    let _ = squatter.wait();
    assert_eq!(untrusted(got), Untrusted::PeerUid { peer: NOBODY });
}

#[tokio::test]
async fn closing_takes_lines_already_sent_then_ends_running_calls_lost() {
    let (handle, mut rx, _dir, clock) = listener().await;
    let path = handle.path().to_path_buf();
    let mut conn = UnixStream::connect(&path).await.unwrap();
    let s = mono_ns();
    let start = |id: &str| start_report(id, s, "toolu_3");
    conn.write_all(start("i1").to_line().as_bytes())
        .await
        .unwrap();
    assert!(matches!(next(&mut rx).await.1, EventKind::McpStart { .. }));
    // Written before the close and not yet read: still taken.
    let end = Report::End {
        rounds: None,
        id: "i1".into(),
        alias: "a".into(),
        tool: "t".into(),
        start_ns: s,
        end_ns: s + 1,
        outcome: Outcome::Result,
        hints: hints(Some("toolu_3")),
    };
    conn.write_all(format!("{}{}", end.to_line(), start("i2").to_line()).as_bytes())
        .await
        .unwrap();
    let before = clock.now_ms();
    handle.close().await;
    let mut got = Vec::new();
    while let Ok((t, k)) = rx.try_recv() {
        got.push((t, k));
    }
    let outcomes: Vec<(String, Outcome)> = got
        .iter()
        .filter_map(|(_, k)| match k {
            EventKind::McpInterval {
                interval, outcome, ..
            } => Some((interval.clone(), *outcome)),
            _ => None,
        })
        .collect();
    assert_eq!(
        outcomes,
        vec![
            ("i1".to_string(), Outcome::Result),
            ("i2".to_string(), Outcome::Lost)
        ],
        "{got:?}"
    );
    assert!(got.last().unwrap().0 >= before, "lost at the close");
    assert!(!path.exists(), "the socket file is gone");
    // The wrapper's side sees the connection closed.
    let mut buf = [0u8; 1];
    let n = tokio::io::AsyncReadExt::read(&mut conn, &mut buf).await;
    assert!(matches!(n, Ok(0) | Err(_)));
}

#[tokio::test]
async fn a_live_listener_is_not_displaced_and_a_stale_socket_is() {
    let (handle, _rx, dir, clock) = listener().await;
    let (tx, _rx2) = mpsc::channel(1);
    let err = serve(
        handle.path().to_path_buf(),
        clock,
        tx.clone(),
        Hosts::start(),
    )
    .await
    .err()
    .expect("refused");
    assert!(err.to_string().contains("already serving"), "{err}");
    // It says what to do about it.
    assert!(err.to_string().contains("--ingest PATH"), "{err}");
    assert!(err.to_string().contains("WINDOWTAP_INGEST=PATH"), "{err}");
    // A socket file nobody listens on any more.
    let stale = std::os::unix::net::UnixListener::bind(dir.path().join("stale.sock")).unwrap();
    drop(stale);
    let again = serve(
        dir.path().join("stale.sock"),
        clock,
        tx.clone(),
        Hosts::start(),
    )
    .await
    .unwrap();
    assert!(again.path().exists());
    drop(again);
    assert!(
        !dir.path().join("stale.sock").exists(),
        "dropping the handle removes the socket"
    );
    let file = dir.path().join("plain");
    std::fs::write(&file, b"").unwrap();
    assert!(serve(file, clock, tx, Hosts::start()).await.is_err());
    drop(handle);
}
