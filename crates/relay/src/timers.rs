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
pub(crate) struct Timers {
    runtime: Handle,
}

/// The wait has run out.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Elapsed;

impl Timers {
    /// Timers kept on `runtime`, which must have its time driver enabled.
    pub(crate) fn new(runtime: Handle) -> Timers {
        Timers { runtime }
    }

    /// Resolves at `deadline`.
    pub(crate) fn sleep_until(&self, deadline: Instant) -> Sleep {
        // The sleep is made inside the task: made here, it would be the calling core's.
        let timer = self.runtime.spawn(async move {
            tokio::time::sleep_until(deadline.into()).await;
        });
        Sleep { timer }
    }

    /// Resolves after `wait`.
    pub(crate) fn sleep(&self, wait: Duration) -> Sleep {
        self.sleep_until(Instant::now() + wait)
    }

    /// `work`'s output, or [`Elapsed`] if it takes longer than `wait` (then `work` is
    /// dropped unfinished).
    pub(crate) async fn timeout<F: Future>(
        &self,
        wait: Duration,
        work: F,
    ) -> Result<F::Output, Elapsed> {
        let sleep = self.sleep(wait);
        tokio::select! {
            biased;
            out = work => Ok(out),
            () = sleep => Err(Elapsed),
        }
    }
}

/// How long a write to a client may wait for the client to take bytes before the exchange
/// (or tunnel) is ended, as nginx's `send_timeout` (60 s). A client that stops reading holds
/// only its own exchange, its upstream connection and one read's bytes, and only this long.
pub(crate) const SEND_TIMEOUT: Duration = Duration::from_secs(60);

/// The one timer of a sans-IO machine ([`h1::Exchange`], [`h1::Tunnel`]): set for its next
/// deadline (its `poll_timeout`) at the first poll, not before (an exchange that never waits
/// costs none), and set again only when that deadline comes earlier. A deadline that moves
/// later (a body that made progress) leaves the timer as it is: when it fires, the machine's
/// `handle_timeout` finds nothing expired, and the next poll sets it for the new deadline.
/// So a whole body costs one timer however many reads it takes.
#[derive(Debug)]
pub(crate) struct Deadline {
    timers: Timers,
    armed: Option<(Instant, Sleep)>,
}

impl Deadline {
    pub(crate) fn new(timers: &Timers) -> Deadline {
        Deadline {
            timers: timers.clone(),
            armed: None,
        }
    }

    /// Ready with the time now once the timer set for `at` (or an earlier deadline) fires;
    /// registers `cx` until then. `None`: no deadline, no timer.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>, at: Option<Instant>) -> Poll<Instant> {
        let Some(at) = at else {
            self.armed = None;
            return Poll::Pending;
        };
        if self.armed.as_ref().is_some_and(|(set, _)| *set > at) {
            self.armed = None;
        }
        let (_, sleep) = self
            .armed
            .get_or_insert_with(|| (at, self.timers.sleep_until(at)));
        if Pin::new(sleep).poll(cx).is_pending() {
            return Poll::Pending;
        }
        self.armed = None;
        Poll::Ready(Instant::now())
    }
}

/// A timer set with [`Timers`]; dropping it cancels the timer.
#[derive(Debug)]
pub(crate) struct Sleep {
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

    #[tokio::test]
    async fn a_deadline_timer_follows_the_earliest_deadline_and_leaves_later_ones_to_the_machine() {
        let timers = Timers::new(Handle::current());
        let mut deadline = Deadline::new(&timers);
        let far = Instant::now() + Duration::from_secs(3600);
        // Set for an hour at the first poll, then asked for a nearer deadline: set again.
        let mut first = true;
        let near = Instant::now() + Duration::from_millis(30);
        let fired = std::future::poll_fn(|cx| {
            let at = if std::mem::take(&mut first) {
                far
            } else {
                near
            };
            let poll = deadline.poll(cx, Some(at));
            if at == far {
                assert!(poll.is_pending());
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            poll
        })
        .await;
        assert!(fired >= near && fired < far);
        // Set for a near deadline, then told of a later one: it fires at the one it was set
        // for, and the time it says lets the machine see that nothing has expired.
        let near = Instant::now() + Duration::from_millis(30);
        let mut first = true;
        let fired = std::future::poll_fn(|cx| {
            let at = if std::mem::take(&mut first) {
                near
            } else {
                far
            };
            deadline.poll(cx, Some(at))
        })
        .await;
        assert!(fired >= near && fired < far);
        // No deadline: no timer.
        let none = std::future::poll_fn(|cx| Poll::Ready(deadline.poll(cx, None))).await;
        assert!(none.is_pending() && deadline.armed.is_none());
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
