//! `windowtap ingest` (hidden): listen on an ingest socket and print what wrappers report, as
//! trace v2 lines, for trying a wrapper without the relay.

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use live::ingest::{listen_path, serve};
use sys::clock::Clock;
use tokio::sync::mpsc;

/// `windowtap ingest`: listen and print what arrives as trace v1, for testing wrappers without
/// a relay.
#[derive(clap::Args)]
pub struct IngestArgs {
    /// Socket path [default: $XDG_RUNTIME_DIR/windowtap/ingest.sock or a private temp dir].
    #[arg(long, value_name = "PATH")]
    pub ingest: Option<PathBuf>,
    /// A file holding the 64-hex-digit pseudonymization key (default: a random key per run).
    /// Ids are printed as pseudonyms like everywhere else (docs/design.md §7), never raw.
    #[arg(long, value_name = "FILE")]
    pub id_key_file: Option<PathBuf>,
}

pub fn main(args: IngestArgs) -> anyhow::Result<std::process::ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(harness(args))
}

async fn harness(args: IngestArgs) -> anyhow::Result<std::process::ExitCode> {
    use correlator::sanitize::{Door, Scrub};
    use std::io::Write;
    use tokio::signal::unix::{signal, SignalKind};

    let key = match &args.id_key_file {
        Some(p) => live::service::read_key(p)?,
        None => rand::random::<[u8; correlator::PSEUDONYM_KEY_LEN]>(),
    };
    let scrub = Scrub::new(correlator::Pseudonymizer::new(&key));
    let door = Door::live();
    let path = listen_path(args.ingest)?;
    // Handlers first: whoever reads "listening" may signal at once.
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let clock = Clock::start();
    let (tx, mut rx) = mpsc::channel(1024);
    let handle = serve(path, clock, tx, hostid::Hosts::start()).await?;
    let mut out = sys::stdout::stdout();
    out.write_all(door.meta(correlator::trace::HEADER)?.as_bytes())?;
    out.flush()?;
    eprintln!("windowtap ingest: listening on {}", handle.path().display());
    let mut print = |t, kind| -> anyhow::Result<()> {
        let kind = scrub.event(kind);
        let line = door.event(&correlator::Event { t, kind })?;
        out.write_all(line.as_bytes())?;
        Ok(out.flush()?)
    };
    loop {
        tokio::select! {
            biased;
            Some((t, kind)) = rx.recv() => print(t, kind)?,
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    // Let connections that are still open finish what they were saying (bounded).
    let c = handle.counters();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
    while c.open.load(Ordering::SeqCst) > 0 && tokio::time::Instant::now() < deadline {
        let wait = std::time::Duration::from_millis(20);
        if let Ok(Some((t, kind))) = tokio::time::timeout(wait, rx.recv()).await {
            print(t, kind)?;
        }
    }
    while let Ok((t, kind)) = rx.try_recv() {
        print(t, kind)?;
    }
    eprintln!(
        "windowtap ingest: {} connections, {} reports accepted, {} bad lines, {} lost",
        c.connections.load(Ordering::Relaxed),
        c.accepted.load(Ordering::Relaxed),
        c.bad_lines.load(Ordering::Relaxed),
        c.lost.load(Ordering::Relaxed),
    );
    Ok(std::process::ExitCode::SUCCESS)
}
