//! Standard output for the commands whose output is their result (`check`, `replay`,
//! `report`, `env`, `ingest`): a reader that went away (`| head -1`) ends the command quietly,
//! like any Unix tool.
//!
//! SIGPIPE stays ignored (Rust's default) for the whole process: the relay and the wrapper
//! write to sockets and pipes that may close under them, and a signal must never kill them
//! there. Instead every write to stdout goes through [`Stdout`], which turns `EPIPE` into
//! [`Closed`]; `main` sees it in the error chain and exits 141 (128 + SIGPIPE, what a shell
//! shows for a tool killed by it) without a message. A broken pipe anywhere else (a socket, a
//! file) is still an error with its message.

use std::io::{self, Write};

/// The marker: stdout's reader has gone.
#[derive(Debug, thiserror::Error)]
#[error("standard output closed")]
pub struct Closed;

/// The exit code of a command whose stdout was closed.
pub const CLOSED_EXIT: u8 = 128 + libc::SIGPIPE as u8;

/// Standard output, locked, with `EPIPE` reported as [`Closed`].
pub struct Stdout(io::StdoutLock<'static>);

/// Standard output for a command's result.
pub fn stdout() -> Stdout {
    Stdout(io::stdout().lock())
}

fn mark(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::BrokenPipe {
        io::Error::new(io::ErrorKind::BrokenPipe, Closed)
    } else {
        e
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf).map_err(mark)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush().map_err(mark)
    }
}

/// Whether `e` is, or was caused by, stdout being closed.
pub fn is_closed(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause.is::<Closed>()
            || cause
                .downcast_ref::<io::Error>()
                .and_then(|io| io.get_ref())
                .is_some_and(|inner| inner.is::<Closed>())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn only_a_marked_broken_pipe_counts_as_closed_stdout() {
        let marked: anyhow::Error = Err::<(), _>(mark(io::ErrorKind::BrokenPipe.into()))
            .context("writing records")
            .unwrap_err();
        assert!(is_closed(&marked));
        // A socket's broken pipe is an error like any other.
        let socket = anyhow::Error::new(io::Error::from(io::ErrorKind::BrokenPipe));
        assert!(!is_closed(&socket));
        let other = anyhow::Error::new(mark(io::ErrorKind::PermissionDenied.into()));
        assert!(!is_closed(&other));
    }
}
