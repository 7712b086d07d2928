//! The records output, on a thread of its own.
//!
//! Records go to a file or to stdout. A pipe that nobody reads fills up, and a write to it
//! blocks: done by the correlator task, that would stop correlation, the capture, the drain
//! and the stop itself. So the correlator hands each record line to this writer and never
//! waits for it. Lines wait in memory up to [`MAX_PENDING_BYTES`] (a healthy file or reader
//! never gets near it); past that a record is dropped, and every record not written is
//! counted and reported when the run stops, never lost silently. The capture has every
//! event, so `windowtap replay` of it reproduces the records that did not get out.

use correlator::sanitize::Line;
use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

/// Record text that may wait for the writer before records are dropped: about 30,000
/// records.
pub(crate) const MAX_PENDING_BYTES: u64 = 16 << 20;

/// What happened to the records of a run, once the writer has been waited for.
#[derive(Debug, Default)]
pub struct Tail {
    /// Records written out whole.
    pub written: u64,
    /// Records dropped because too many were waiting (the output was not read).
    pub dropped: u64,
    /// Records queued but not written: the writer failed, or was still blocked when the
    /// wait at the stop ended.
    pub unwritten: u64,
    /// The first write error, if any (records after it are counted in `unwritten`).
    pub error: Option<io::Error>,
}

impl Tail {
    /// Records that never reached the output.
    pub fn lost(&self) -> u64 {
        self.dropped + self.unwritten
    }
}

struct Progress {
    /// Bytes handed over and not yet taken by the writer.
    pending: AtomicU64,
    written: AtomicU64,
}

/// The correlator's end of the records writer.
/// `L` is a record line: the door's `Line` in the relay (tests use plain strings).
pub(crate) struct RecordsOut<L = Line> {
    tx: Option<Sender<L>>,
    shared: Arc<Progress>,
    max_pending: u64,
    sent: u64,
    dropped: u64,
    done: Option<oneshot::Receiver<(u64, u64, Option<io::Error>)>>,
}

impl<L: AsRef<[u8]> + Send + 'static> RecordsOut<L> {
    /// Starts the writer thread on `sink`.
    pub(crate) fn start(
        sink: Box<dyn Write + Send>,
        max_pending: u64,
    ) -> io::Result<RecordsOut<L>> {
        let (tx, rx) = mpsc::channel::<L>();
        let (done_tx, done) = oneshot::channel();
        let shared = Arc::new(Progress {
            pending: AtomicU64::new(0),
            written: AtomicU64::new(0),
        });
        let theirs = shared.clone();
        std::thread::Builder::new()
            .name("windowtap-records".into())
            .spawn(move || {
                let _ = done_tx.send(write_lines(sink, rx, &theirs));
            })?;
        Ok(RecordsOut {
            tx: Some(tx),
            shared,
            max_pending,
            sent: 0,
            dropped: 0,
            done: Some(done),
        })
    }

    /// Hands one record line (with its `\n`) to the writer. Never waits.
    pub(crate) fn send(&mut self, line: L) {
        let len = line.as_ref().len() as u64;
        if self.shared.pending.load(Ordering::Acquire) + len > self.max_pending {
            if self.dropped == 0 {
                tracing::warn!(
                    "the records output is not being read: records are dropped from here on \
                     (counted, and reported when the run stops; the capture has every event)"
                );
            }
            self.dropped += 1;
            return;
        }
        let Some(tx) = &self.tx else {
            self.dropped += 1;
            return;
        };
        self.shared.pending.fetch_add(len, Ordering::AcqRel);
        if tx.send(line).is_err() {
            // The writer is gone (it cannot be, short of a panic): count it.
            self.shared.pending.fetch_sub(len, Ordering::AcqRel);
            self.dropped += 1;
            return;
        }
        self.sent += 1;
    }

    /// No more records: waits up to `bound` for the writer to write and flush what is queued,
    /// then says what happened. A writer still blocked then (a pipe nobody reads) is left
    /// behind; what it had not written is counted.
    pub(crate) async fn finish(mut self, bound: Duration) -> Tail {
        drop(self.tx.take());
        let done = self.done.take().expect("finish is called once");
        let mut tail = Tail {
            dropped: self.dropped,
            ..Tail::default()
        };
        match tokio::time::timeout(bound, done).await {
            Ok(Ok((written, unwritten, error))) => {
                tail.written = written;
                tail.unwritten = unwritten;
                tail.error = error;
            }
            // Timed out (or the thread died): whatever it had not written is unwritten.
            _ => {
                tail.written = self.shared.written.load(Ordering::Acquire);
                tail.unwritten = self.sent - tail.written.min(self.sent);
            }
        }
        tail
    }
}

/// The writer thread: each line written whole, the sink flushed whenever nothing more is
/// waiting (so every record is out as soon as the output takes it). Returns (written,
/// unwritten, first error).
fn write_lines<L: AsRef<[u8]>>(
    mut sink: Box<dyn Write + Send>,
    rx: Receiver<L>,
    shared: &Progress,
) -> (u64, u64, Option<io::Error>) {
    let (mut written, mut unwritten, mut error) = (0u64, 0u64, None::<io::Error>);
    let mut dirty = false;
    loop {
        let line = match rx.try_recv() {
            Ok(l) => l,
            Err(TryRecvError::Empty) => {
                if dirty && error.is_none() {
                    if let Err(e) = sink.flush() {
                        error = Some(e);
                    }
                    dirty = false;
                }
                match rx.recv() {
                    Ok(l) => l,
                    Err(_) => break,
                }
            }
            Err(TryRecvError::Disconnected) => break,
        };
        if error.is_none() {
            match sink.write_all(line.as_ref()) {
                Ok(()) => {
                    written += 1;
                    shared.written.store(written, Ordering::Release);
                    dirty = true;
                }
                Err(e) => {
                    error = Some(e);
                    unwritten += 1;
                }
            }
        } else {
            unwritten += 1;
        }
        shared
            .pending
            .fetch_sub(line.as_ref().len() as u64, Ordering::AcqRel);
    }
    if dirty && error.is_none() {
        if let Err(e) = sink.flush() {
            error = Some(e);
        }
    }
    (written, unwritten, error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// An output that takes nothing until it is opened (like a pipe nobody reads), then
    /// keeps what it is given.
    #[derive(Clone)]
    struct Gate {
        open: Arc<(Mutex<bool>, std::sync::Condvar)>,
        got: Arc<Mutex<Vec<u8>>>,
    }

    impl Gate {
        fn closed() -> Gate {
            Gate {
                open: Arc::new((Mutex::new(false), std::sync::Condvar::new())),
                got: Arc::default(),
            }
        }
        fn open(&self) {
            *self.open.0.lock().unwrap() = true;
            self.open.1.notify_all();
        }
        fn text(&self) -> String {
            String::from_utf8(self.got.lock().unwrap().clone()).unwrap()
        }
    }

    impl Write for Gate {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            let (lock, cv) = &*self.open;
            let mut open = lock.lock().unwrap();
            while !*open {
                open = cv.wait(open).unwrap();
            }
            self.got.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn line(i: usize) -> String {
        format!("{{\"record\":{i:04}}}\n")
    }

    #[tokio::test]
    async fn an_output_nobody_reads_never_blocks_the_sender_and_every_lost_record_is_counted() {
        let gate = Gate::closed();
        // Room for 3 lines of 16 bytes waiting.
        let mut out = RecordsOut::start(Box::new(gate.clone()), 50).unwrap();
        for i in 0..20 {
            out.send(line(i));
        }
        // The sender got through all 20 although nothing was written.
        let tail = out.finish(Duration::from_millis(50)).await;
        assert_eq!(tail.written, 0);
        assert_eq!(tail.lost(), 20, "{tail:?}");
        assert!(tail.dropped >= 16, "{tail:?}");
        gate.open();
    }

    #[tokio::test]
    async fn a_reader_that_comes_back_gets_every_queued_record_in_order_and_whole() {
        let gate = Gate::closed();
        let mut out = RecordsOut::start(Box::new(gate.clone()), 1 << 20).unwrap();
        for i in 0..100 {
            out.send(line(i));
        }
        gate.open();
        let tail = out.finish(Duration::from_secs(30)).await;
        assert_eq!((tail.written, tail.lost()), (100, 0), "{tail:?}");
        assert_eq!(gate.text(), (0..100).map(line).collect::<String>());
    }

    struct Broken;

    impl Write for Broken {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from(io::ErrorKind::BrokenPipe))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_broken_output_is_an_error_and_its_records_are_counted_unwritten() {
        let mut out = RecordsOut::start(Box::new(Broken), 1 << 20).unwrap();
        for i in 0..5 {
            out.send(line(i));
        }
        let tail = out.finish(Duration::from_secs(30)).await;
        assert_eq!(tail.unwritten, 5);
        assert_eq!(
            tail.error.map(|e| e.kind()),
            Some(io::ErrorKind::BrokenPipe)
        );
    }
}
