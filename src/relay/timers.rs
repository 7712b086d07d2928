//! The relay's timers, kept off the forwarding cores.
//!
//! A tokio runtime with a timer pending parks with a timeout, and `epoll_wait` with a timeout
//! arms a kernel timer each time the thread sleeps and cancels it each time an event wakes it
//! first. A forwarding core sleeps and wakes once per relayed event, so that pair is paid per
//! event. Measured with the bench's bare copy loop, the same loop with one idle timer pending
//! on each of its runtimes added about 4 µs to the SSE p50 and 10 µs to the WebSocket p50 on
//! the benchmark's VM (docs/performance.md, "Timers off the forwarding cores"). A relay's
//! cores nearly always have a timer
//! pending: an idle keep-alive connection waits for its next request under the header
//! timeout, an exchange waits for its response head under the response timeout, the upstream
//! pool reaps idle connections on an interval.
//!
//! So the timers the relay sets for its connections run on another runtime (the main one):
//! a core waits for one through its task's `JoinHandle`, and a core with nothing else
//! pending parks with no timeout. Setting a timer costs a cross-thread hand-off (a task
//! spawned there, aborted when the wait ends), once per request rather than once per event.
//! A library timer the relay does not set (a connect timeout inside the connector) still
//! runs on the core's own driver, for as long as the connect.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::task::JoinHandle;

/// Sets timers on the runtime they run on. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Timers {
    runtime: Handle,
}

/// The wait has run out.
#[derive(Debug, PartialEq, Eq)]
pub struct Elapsed;

impl Timers {
    /// Timers kept on `runtime`, which must have its time driver enabled.
    pub fn new(runtime: Handle) -> Timers {
        Timers { runtime }
    }

    /// Resolves at `deadline`.
    pub fn sleep_until(&self, deadline: Instant) -> Sleep {
        // The sleep is made inside the task: made here, it would be the calling core's.
        let timer = self.runtime.spawn(async move {
            tokio::time::sleep_until(deadline.into()).await;
        });
        Sleep { timer }
    }

    /// Resolves after `wait`.
    pub fn sleep(&self, wait: Duration) -> Sleep {
        self.sleep_until(Instant::now() + wait)
    }

    /// `work`'s output, or [`Elapsed`] if it takes longer than `wait` (then `work` is
    /// dropped unfinished).
    pub async fn timeout<F: Future>(&self, wait: Duration, work: F) -> Result<F::Output, Elapsed> {
        let sleep = self.sleep(wait);
        tokio::select! {
            biased;
            out = work => Ok(out),
            () = sleep => Err(Elapsed),
        }
    }
}

impl Timers {
    /// [`Timers::timeout`], with the timer set only if `work` does not finish at its first
    /// poll. For a write to a client: one that the socket takes at once (nearly every write)
    /// costs no timer, and a client that stops reading is still bounded.
    pub async fn timeout_if_waits<F: Future>(
        &self,
        wait: Duration,
        work: F,
    ) -> Result<F::Output, Elapsed> {
        let mut work = std::pin::pin!(work);
        if let Poll::Ready(out) =
            std::future::poll_fn(|cx| Poll::Ready(work.as_mut().poll(cx))).await
        {
            return Ok(out);
        }
        self.timeout(wait, work).await
    }
}

/// How long a write to a client may wait for the client to take bytes before the exchange
/// (or tunnel) is ended, as nginx's `send_timeout` (60 s). A client that stops reading holds
/// only its own exchange, its upstream connection and one read's bytes, and only this long.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(60);

/// A bound on how long a body may go without progress (`--body-timeout`, 5 minutes: a model
/// that thinks may be quiet that long, and what people put in front of model APIs, nginx's
/// `proxy_read_timeout`, is set to minutes for that reason; `--client-body-timeout`, 60 s, as
/// nginx's `client_body_timeout`), with one timer for the whole body rather than one per read: [`IdleTimer::progress`] only notes the time, and the timer, when
/// it fires, is set again for what is left since the last progress.
#[derive(Debug)]
pub struct IdleTimer {
    timers: Timers,
    wait: Duration,
    last: Instant,
    sleep: Option<Sleep>,
}

impl IdleTimer {
    /// Starts counting now.
    pub fn new(timers: &Timers, wait: Duration) -> IdleTimer {
        IdleTimer {
            timers: timers.clone(),
            wait,
            last: Instant::now(),
            sleep: None,
        }
    }

    /// The body moved.
    pub fn progress(&mut self) {
        self.last = Instant::now();
    }

    /// Ready once `wait` has passed since the last progress; registers `cx` until then. The
    /// timer is set at the first poll, not at `new`: a body that never waits costs none.
    pub fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            let deadline = self.last + self.wait;
            let sleep = self
                .sleep
                .get_or_insert_with(|| self.timers.sleep_until(deadline));
            if Pin::new(sleep).poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.sleep = None;
            if Instant::now() >= self.last + self.wait {
                return Poll::Ready(());
            }
        }
    }
}

/// A timer set with [`Timers`]; dropping it cancels the timer.
#[derive(Debug)]
pub struct Sleep {
    /// The timer's task on its runtime: it ends when the time is up.
    timer: JoinHandle<()>,
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // A timer runtime that has shut down (the task cancelled) counts as the time being
        // up: a wait never hangs on a timer nobody can fire.
        Pin::new(&mut self.timer).poll(cx).map(|_| ())
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        self.timer.abort();
    }
}

impl hyper::rt::Sleep for Sleep {}

impl hyper::rt::Timer for Timers {
    fn sleep(&self, wait: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(Timers::sleep(self, wait))
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(Timers::sleep_until(self, deadline))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A current-thread runtime without a time driver, as a core would be if it had none:
    /// a timer set there through `Timers` still fires, so it does not use the core's own.
    fn core_without_time() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_timer_fires_on_its_own_runtime_and_a_timeout_runs_out() {
        let timers = Timers::new(Handle::current());
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let core = core_without_time();
            let out = core.block_on(async move {
                let start = Instant::now();
                timers.sleep(Duration::from_millis(20)).await;
                let slept = start.elapsed();
                let quick = timers.timeout(Duration::from_secs(60), async { 7 }).await;
                let slow = timers
                    .timeout(Duration::from_millis(20), std::future::pending::<()>())
                    .await;
                (slept, quick, slow)
            });
            let _ = done_tx.send(out);
        });
        let (slept, quick, slow) = done_rx.await.unwrap();
        assert!(slept >= Duration::from_millis(20), "fired early: {slept:?}");
        assert_eq!(quick, Ok(7));
        assert_eq!(slow, Err(Elapsed));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_dropped_timer_is_cancelled_where_it_runs() {
        let timers = Timers::new(Handle::current());
        let before = Handle::current().metrics().num_alive_tasks();
        let sleep = timers.sleep(Duration::from_secs(3600));
        assert_eq!(Handle::current().metrics().num_alive_tasks(), before + 1);
        drop(sleep);
        for _ in 0..1000 {
            if Handle::current().metrics().num_alive_tasks() == before {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("the hour-long timer still runs after its Sleep was dropped");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_timeout_if_waits_sets_no_timer_for_work_done_at_once_and_bounds_the_rest() {
        let timers = Timers::new(Handle::current());
        let before = Handle::current().metrics().num_alive_tasks();
        let quick = timers.timeout_if_waits(Duration::from_secs(3600), async { 7 });
        let mut quick = std::pin::pin!(quick);
        // Done at its first poll, and no timer task was ever spawned for it.
        assert_eq!(futures_util::poll!(quick.as_mut()), Poll::Ready(Ok(7)));
        assert_eq!(Handle::current().metrics().num_alive_tasks(), before);
        // Work that waits is bounded like any timeout.
        let slow = timers
            .timeout_if_waits(Duration::from_millis(20), std::future::pending::<()>())
            .await;
        assert_eq!(slow, Err(Elapsed));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn an_idle_timer_fires_only_after_a_whole_wait_without_progress() {
        let timers = Timers::new(Handle::current());
        let wait = Duration::from_millis(60);
        let mut idle = IdleTimer::new(&timers, wait);
        let start = Instant::now();
        // Progress every 20 ms for 200 ms: never a whole wait without it.
        while start.elapsed() < Duration::from_millis(200) {
            let tick = tokio::time::sleep(Duration::from_millis(20));
            tokio::pin!(tick);
            let fired = std::future::poll_fn(|cx| {
                if idle.poll_expired(cx).is_ready() {
                    return Poll::Ready(true);
                }
                tick.as_mut().poll(cx).map(|()| false)
            })
            .await;
            assert!(!fired, "fired with progress {:?} ago", idle.last.elapsed());
            idle.progress();
        }
        // Then none: it fires, a whole wait after the last.
        let last = idle.last;
        std::future::poll_fn(|cx| idle.poll_expired(cx)).await;
        assert!(last.elapsed() >= wait);
    }

    #[test]
    fn a_wait_on_a_timer_runtime_that_is_gone_ends() {
        let main = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let timers = Timers::new(main.handle().clone());
        let sleep = timers.sleep(Duration::from_secs(3600));
        drop(main);
        core_without_time().block_on(sleep);
    }
}
