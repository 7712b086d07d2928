//! Where the ingest socket is, and whether to trust it: a private directory of this user's,
//! a socket this user owns, a peer that runs as this user (SO_PEERCRED), never a path or a
//! process taken on its word.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

/// The environment variable naming the socket for wrappers.
pub const ENV: &str = "WINDOWTAP_INGEST";

/// Where the relay listens and wrappers look when not told: `$XDG_RUNTIME_DIR/windowtap/
/// ingest.sock`, else `<tmp>/windowtap-<uid>/ingest.sock`. The directory is private (0700).
pub fn default_path() -> PathBuf {
    let dir = match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("windowtap"),
        _ => {
            let uid = my_uid();
            std::env::temp_dir().join(format!("windowtap-{uid}"))
        }
    };
    dir.join("ingest.sock")
}

/// Where a wrapper that was given no path looks, in order. Hosts may not pass the user's
/// environment on to MCP servers (Codex forwards only a short list of variables unless told
/// otherwise), so besides [`default_path`] the wrapper also tries where `$XDG_RUNTIME_DIR`
/// usually points and the temp-dir fallback, whatever its own environment says.
pub fn wrapper_candidates() -> Vec<PathBuf> {
    let uid = my_uid();
    let mut paths = vec![
        default_path(),
        PathBuf::from(format!("/run/user/{uid}/windowtap/ingest.sock")),
        std::env::temp_dir()
            .join(format!("windowtap-{uid}"))
            .join("ingest.sock"),
        PathBuf::from(format!("/tmp/windowtap-{uid}/ingest.sock")),
    ];
    let mut seen = std::collections::HashSet::new();
    paths.retain(|p| seen.insert(p.clone()));
    paths
}

/// Creates the default path's directory (0700) if needed and checks nobody else can use it.
pub fn prepare_private_dir(dir: &Path) -> anyhow::Result<()> {
    match std::fs::create_dir(dir) {
        Ok(()) => {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .with_context(|| format!("setting mode 0700 on {}", dir.display()))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("creating {}", dir.display())),
    }
    if let Err(why) = private_dir(dir) {
        bail!(
            "refusing to put the ingest socket in {}: {why}. Another user may have created it \
             first to receive the wrappers' reports. Choose another place with --ingest PATH \
             (or {ENV}=PATH, for the wrappers too) in a directory only you can use, or remove \
             it if it is yours",
            dir.display()
        );
    }
    Ok(())
}

/// Why an ingest socket is not trusted: someone other than this user could be listening on
/// it. Says which check failed, never anything read from the socket.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Untrusted {
    #[error("it is not a directory")]
    NotDir,
    #[error("it is owned by uid {owner}, not by this user")]
    DirOwner { owner: u32 },
    #[error("other users may use it (mode {mode:04o}; it must be 0700)")]
    DirMode { mode: u32 },
    #[error("it is not a socket")]
    NotSocket,
    #[error("the socket is owned by uid {owner}, not by this user")]
    SocketOwner { owner: u32 },
    #[error("the process listening on it runs as uid {peer}, not as this user")]
    PeerUid { peer: u32 },
}

pub(super) fn my_uid() -> u32 {
    rustix::process::getuid().as_raw()
}

/// Checks that `dir` is a directory of this user's that nobody else may use (0700).
fn private_dir(dir: &Path) -> Result<(), Untrusted> {
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return Err(Untrusted::NotDir);
    };
    if !meta.is_dir() {
        return Err(Untrusted::NotDir);
    }
    if meta.uid() != my_uid() {
        return Err(Untrusted::DirOwner { owner: meta.uid() });
    }
    if meta.mode() & 0o077 != 0 {
        return Err(Untrusted::DirMode {
            mode: meta.mode() & 0o7777,
        });
    }
    Ok(())
}

/// Why a wrapper could not use an ingest socket.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Untrusted(Untrusted),
}

/// Connects a wrapper to the ingest socket at `path` once it is sure only this user can be
/// listening there: the socket is owned by this user and, once connected, the listening
/// process runs as this user (`SO_PEERCRED`, which no file trick can fake). `check_dir` also
/// holds the socket's directory to what the relay makes for its default path (this user's,
/// 0700): for the places a wrapper looks on its own, where another user may have been first.
pub fn connect_verified(
    path: &Path,
    check_dir: bool,
) -> Result<std::os::unix::net::UnixStream, ConnectError> {
    let untrusted = ConnectError::Untrusted;
    let meta = std::fs::symlink_metadata(path)?;
    if check_dir {
        if let Some(dir) = path.parent() {
            private_dir(dir).map_err(untrusted)?;
        }
    }
    if !meta.file_type().is_socket() {
        return Err(untrusted(Untrusted::NotSocket));
    }
    if meta.uid() != my_uid() {
        return Err(untrusted(Untrusted::SocketOwner { owner: meta.uid() }));
    }
    let stream = std::os::unix::net::UnixStream::connect(path)?;
    let peer = peer_uid(&stream)?;
    if peer != my_uid() {
        return Err(untrusted(Untrusted::PeerUid { peer }));
    }
    Ok(stream)
}

/// The uid of the process at the other end of a connected Unix socket.
fn peer_uid(s: &std::os::unix::net::UnixStream) -> std::io::Result<u32> {
    peer_cred(s).map(|(_, uid)| uid)
}

/// The pid of the process at the other end of a connected Unix socket (the relay, for a
/// wrapper), as the kernel says.
pub fn peer_pid(s: &std::os::unix::net::UnixStream) -> Option<u32> {
    peer_cred(s).ok().map(|(pid, _)| pid as u32)
}

/// The peer credentials (`SO_PEERCRED`) of a connected Unix socket: pid and uid.
fn peer_cred(s: &std::os::unix::net::UnixStream) -> std::io::Result<(i32, u32)> {
    use std::os::fd::AsFd;
    sys::libc_calls::peer_credentials(s.as_fd())
}

/// The path to listen on: `explicit` as given, else [`default_path`] with its private
/// directory created and checked. For the relay's `--ingest` option.
pub fn listen_path(explicit: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(p) = explicit {
        return Ok(p);
    }
    let p = default_path();
    if let Some(dir) = p.parent() {
        prepare_private_dir(dir)?;
    }
    Ok(p)
}
