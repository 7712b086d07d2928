//! One single-threaded runtime per core for client connections.
//!
//! On tokio's multi-threaded runtime every wake-up a task gives itself or a neighbour (the
//! tap waking its observer, hyper's body channel waking the connection) is followed by a
//! wake-up of an idle worker in case it wants to steal work: a futex or eventfd write and a
//! context switch per relayed event. A connection whose tasks all live on one
//! single-threaded runtime never crosses threads: its client socket, its upstream
//! connection and its observer are registered with and run on the same thread.
//! Accepted connections are handed to the cores round-robin.
//!
//! Observers run on runtimes of the same kind, threads of their own at a lower priority
//! ([`Cores::start_observers`]): decoding and parsing copies never delays a forwarding step.

use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use anyhow::Context as _;
use tokio::runtime::Handle;
use tokio::sync::oneshot;

thread_local! {
    /// Which core runtime this thread runs, from 1 (`0` on any other thread).
    static CORE: Cell<usize> = const { Cell::new(0) };
}

/// The core the calling thread belongs to (`0` off the cores), for per-core state.
pub(crate) fn current() -> usize {
    CORE.with(Cell::get)
}

/// The running cores. Dropping this stops them: what still runs on them is dropped.
pub(crate) struct Cores {
    spawner: Spawner,
    _stop: Vec<oneshot::Sender<()>>,
}

/// Hands futures to the cores, round-robin. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Spawner {
    handles: Arc<[Handle]>,
    next: Arc<AtomicUsize>,
}

impl Cores {
    /// Starts `n` (at least one) cores, each a thread running a current-thread runtime.
    pub(crate) fn start(n: usize) -> anyhow::Result<Cores> {
        Cores::start_with(n, "windowtap-core", |i| CORE.with(|c| c.set(i + 1)))
    }

    /// Starts `n` (at least one) observation threads: runtimes like the cores' that run the
    /// observers, so that decoding and parsing a copy never runs between forwarding steps.
    /// Their threads run at a lower priority (nice +10): when observation and forwarding want
    /// the same CPU, forwarding gets it, and a hostile stream's cost lands on observation.
    pub(crate) fn start_observers(n: usize) -> anyhow::Result<Cores> {
        Cores::start_with(n, "windowtap-observe", |_| lower_thread_priority())
    }

    /// The number of observation threads for this machine: half the cores, 1 to 4.
    pub(crate) fn default_observers() -> usize {
        (Cores::default_count() / 2).clamp(1, 4)
    }

    fn start_with(n: usize, name: &str, on_start: fn(usize)) -> anyhow::Result<Cores> {
        let mut handles = Vec::new();
        let mut stop = Vec::new();
        for i in 0..n.max(1) {
            // Sockets and timers only: with `enable_all` every park also polled the signal
            // and child-process drivers, which nothing on these threads uses.
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .enable_time()
                .build()
                .context("starting a core runtime")?;
            handles.push(rt.handle().clone());
            let (tx, rx) = oneshot::channel::<()>();
            stop.push(tx);
            std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || {
                    on_start(i);
                    // Runs until the stop sender is dropped; the runtime and whatever is
                    // still on it go with this thread.
                    let _ = rt.block_on(rx);
                })
                .context("starting a core thread")?;
        }
        Ok(Cores {
            spawner: Spawner {
                handles: handles.into(),
                next: Arc::new(AtomicUsize::new(0)),
            },
            _stop: stop,
        })
    }

    pub(crate) fn spawner(&self) -> Spawner {
        self.spawner.clone()
    }

    /// The number of cores for this machine.
    pub(crate) fn default_count() -> usize {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    }
}

impl Spawner {
    /// Runs `f()` on the next core. `f` is called there, so that the sockets its future
    /// registers belong to that core's reactor.
    pub(crate) fn spawn<F, Fut>(&self, f: F)
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.handles.len();
        // A core that has stopped drops the task unrun.
        drop(self.handles[i].spawn(async move { f().await }));
    }
}

/// Lowers the calling thread's scheduling priority by 10 nice levels below the process's
/// (at most 19), relative so that a relay started under `nice` keeps the difference
/// (best effort).
fn lower_thread_priority() {
    use rustix::process::{getpriority_process, setpriority_process};
    // On Linux the "process" priority calls given a thread id read and change only that
    // thread's nice value.
    let tid = Some(rustix::thread::gettid());
    let lowered = getpriority_process(tid)
        .and_then(|current| setpriority_process(tid, (current + 10).min(19)));
    if lowered.is_err() {
        tracing::debug!("could not lower the observation thread's priority");
    }
}
