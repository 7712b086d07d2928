//! WebSocket tunnels between two plain TCP sockets, spliced on event loops of their own.
//!
//! A tunnel needs no HTTP and no timers per message: read what one end sent, write it to the
//! other, hand a copy to the tap. On the forwarding cores that step runs through tokio's
//! driver and scheduler: the readiness is dispatched, the task is woken and queued, polled
//! through its futures, and only then reads. Timed by their own system calls on the
//! benchmark's VM (`scripts/forwarding-step.sh`; docs/performance.md, "Plain-TCP tunnels on
//! event loops of their own"), a tokio
//! copy loop reached the read 2.4 µs later after `epoll_wait` returned than a bare mio loop,
//! and went back to `epoll_wait` 1.4 µs later after the write; nginx's loop sat between. So a
//! tunnel whose two ends are plain TCP (the client's always is; the upstream's when it is an
//! `http` one) is spliced here, on a thread that waits in `epoll_wait` and does nothing else
//! between the wake-up and the read. A TLS upstream stays on the tokio splice (`ws::splice`):
//! its records need rustls between the socket and the bytes.
//!
//! What the tokio splice guarantees, this one keeps:
//! - Each read is written out before the next read from the same end. While bytes for an end
//!   wait for room in its socket, the other end is not read: a tunnel holds at most one read
//!   per direction, and a slow reader slows its sender, as directly.
//! - Each read's copy is stamped before its write and handed to the tap right after the write
//!   took what it could. Both directions run on one thread, one step at a time, so copies are
//!   queued in the order they were stamped ([`super::tap::Tap::stamp`]).
//! - The first end to finish cleanly has its end passed on (`shutdown(Write)` on the other
//!   socket, once what was waiting for it is written), and the other direction gets
//!   [`HALF_CLOSE_GRACE`] to finish. A read or write error before that ends the tunnel as a
//!   reset ([`Failure::Reset`]).
//! - The tunnel's task on its core waits for the loop to report the end, so the registry of
//!   tunnels ([`super::tunnels`]) counts it for the drain, and cutting that task closes the
//!   tunnel here.
//! - A panic while handling one tunnel's event closes that tunnel only.
//!
//! Readiness is edge-triggered. A read that returns less than was offered is taken to have
//! drained the socket (as tokio does): bytes that arrive after it raise a new edge. Not so an
//! end that arrives with the last bytes, in the same edge: once the kernel has said the peer
//! closed its side, that end is read until the read returns 0.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::Shutdown;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::{Buf, Bytes, BytesMut};
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};
use tokio::sync::oneshot;

use super::body::Flow;
use super::exchange::ExchangeLog;
use super::failure::Failure;
use super::tap::Tap;

/// After one end has finished cleanly, how long the other may still finish what it is
/// sending.
pub(super) const HALF_CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Bytes offered to each read, on either splice.
pub(super) const READ_CHUNK: usize = 16 * 1024;

/// The loop's own token (commands waiting); tunnels use `id * 2 + end`.
const COMMANDS: Token = Token(usize::MAX);

/// The two ends of a tunnel, by index.
const CLIENT: usize = 0;
const UPSTREAM: usize = 1;

/// Which way the bytes read from each end flow.
const FLOW_FROM: [Flow; 2] = [Flow::Request, Flow::Response];

/// One end of a tunnel as the upgrade left it: the bytes hyper had already read from it,
/// and its socket.
pub(super) struct PlainEnd {
    pub early: Bytes,
    pub socket: tokio::net::TcpStream,
}

/// The splicing loops of a relay, one thread each. Dropping this stops them, closing what
/// they still splice.
pub(super) struct Splicers {
    loops: Vec<LoopHandle>,
    /// The next tunnel's id; tunnels go to the loops round-robin by id.
    next_id: AtomicU64,
}

struct LoopHandle {
    commands: std_mpsc::Sender<Command>,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
}

enum Command {
    Open(u64, Box<Tunnel>),
    /// The tunnel's task was dropped (cut, or its core stopped): close it now.
    Close(u64),
    Stop,
}

impl Splicers {
    /// Starts `n` (at least one) loops.
    pub(super) fn start(n: usize) -> anyhow::Result<Splicers> {
        let mut loops = Vec::new();
        for i in 0..n.max(1) {
            let poll = Poll::new().context("creating a splicing loop")?;
            let waker = Arc::new(
                Waker::new(poll.registry(), COMMANDS).context("creating a splicing loop")?,
            );
            let (commands, inbox) = std_mpsc::channel();
            let thread = std::thread::Builder::new()
                .name(format!("windowtap-splice-{i}"))
                .spawn(move || run(poll, inbox))
                .context("starting a splicing thread")?;
            loops.push(LoopHandle {
                commands,
                waker,
                thread: Some(thread),
            });
        }
        Ok(Splicers {
            loops,
            next_id: AtomicU64::new(0),
        })
    }

    /// Splices `client` and `upstream` until the tunnel ends; dropping the returned future
    /// before then closes the tunnel.
    pub(super) async fn splice(
        &self,
        client: PlainEnd,
        upstream: PlainEnd,
        tap: Option<Tap>,
        log: Arc<ExchangeLog>,
    ) {
        let (ended, end) = oneshot::channel();
        let tunnel = match Tunnel::new(client, upstream, tap, log, ended) {
            Ok(t) => t,
            Err(log) => {
                log.fail(Failure::Reset);
                return;
            }
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let handle = &self.loops[id as usize % self.loops.len()];
        if let Err(std_mpsc::SendError(Command::Open(_, tunnel))) =
            handle.commands.send(Command::Open(id, tunnel))
        {
            // The loop has stopped: the tunnel is closed here, as broken.
            tunnel.log.fail(Failure::Reset);
            return;
        }
        let _ = handle.waker.wake();
        let close = CloseOnDrop { handle, id };
        // Err: the loop dropped the tunnel's sender, which is how it reports the end.
        let _ = end.await;
        std::mem::forget(close);
    }
}

/// Closes a tunnel whose task is dropped before the tunnel ended.
struct CloseOnDrop<'a> {
    handle: &'a LoopHandle,
    id: u64,
}

impl Drop for CloseOnDrop<'_> {
    fn drop(&mut self) {
        if self.handle.commands.send(Command::Close(self.id)).is_ok() {
            let _ = self.handle.waker.wake();
        }
    }
}

impl Drop for Splicers {
    fn drop(&mut self) {
        for handle in &self.loops {
            if handle.commands.send(Command::Stop).is_ok() {
                let _ = handle.waker.wake();
            }
        }
        for handle in &mut self.loops {
            if let Some(thread) = handle.thread.take() {
                let _ = thread.join();
            }
        }
    }
}

/// What one event left a tunnel as.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    Open,
    /// Still open, and one end has just finished: the loop lists it for its grace.
    Graced,
    Ended,
}

struct Tunnel {
    ends: [TcpStream; 2],
    /// Bytes read from the other end that this end's socket has not taken yet.
    waiting: [Bytes; 2],
    /// This end has sent its end (a read returned 0).
    finished: [bool; 2],
    /// The kernel said this end's peer has closed its side (or the socket failed): read it
    /// to the end, past short reads (its end comes with no edge of its own).
    closing: [bool; 2],
    /// This end's write side was shut down, passing the other end's finish on.
    shut: [bool; 2],
    /// Early bytes to pass before anything is read, per destination end.
    early: [Bytes; 2],
    grace_until: Option<Instant>,
    tap: Option<Tap>,
    log: Arc<ExchangeLog>,
    /// Dropped when the tunnel ends: its task on the core then returns.
    _ended: oneshot::Sender<()>,
}

impl Tunnel {
    fn new(
        client: PlainEnd,
        upstream: PlainEnd,
        tap: Option<Tap>,
        log: Arc<ExchangeLog>,
        ended: oneshot::Sender<()>,
    ) -> Result<Box<Tunnel>, Arc<ExchangeLog>> {
        let end = |socket: tokio::net::TcpStream| -> std::io::Result<TcpStream> {
            let socket = socket.into_std()?;
            socket.set_nonblocking(true)?;
            Ok(TcpStream::from_std(socket))
        };
        let (client_socket, upstream_socket) = match (end(client.socket), end(upstream.socket)) {
            (Ok(c), Ok(u)) => (c, u),
            _ => return Err(log),
        };
        Ok(Box::new(Tunnel {
            ends: [client_socket, upstream_socket],
            waiting: [Bytes::new(), Bytes::new()],
            finished: [false; 2],
            closing: [false; 2],
            shut: [false; 2],
            // What the client sent behind its handshake goes to the upstream first, then what
            // the upstream sent behind its 101 to the client (the tokio splice's order).
            early: [upstream.early, client.early],
            grace_until: None,
            tap,
            log,
            _ended: ended,
        }))
    }

    /// Registers both ends and passes the early bytes.
    fn open(&mut self, id: u64, poll: &Poll) -> Step {
        for (end, socket) in self.ends.iter_mut().enumerate() {
            let token = Token(id as usize * 2 + end);
            let interest = Interest::READABLE | Interest::WRITABLE;
            if poll.registry().register(socket, token, interest).is_err() {
                self.log.fail(Failure::Reset);
                return Step::Ended;
            }
        }
        for to in [UPSTREAM, CLIENT] {
            let early = std::mem::take(&mut self.early[to]);
            if !early.is_empty() && !self.pass(1 - to, early) {
                return self.broken();
            }
        }
        // What already waits in either socket is reported by the registration, as an event.
        Step::Open
    }

    /// Handles readiness of end `end` (`closing`: its peer has closed its side).
    fn on_event(
        &mut self,
        end: usize,
        readable: bool,
        writable: bool,
        closing: bool,
        buf: &mut BytesMut,
    ) -> Step {
        let other = 1 - end;
        self.closing[end] |= closing;
        if writable && !self.waiting[end].is_empty() {
            if !self.flush(end) {
                return self.broken();
            }
            // The other end was not read while these bytes waited.
            if self.waiting[end].is_empty() && !self.pump(other, buf) {
                return self.broken();
            }
        }
        if readable && !self.pump(end, buf) {
            return self.broken();
        }
        self.settle()
    }

    /// Reads `from` and passes each read on until `from` has nothing more for now, its
    /// destination cannot take more, or it finished; `false` if either socket failed.
    fn pump(&mut self, from: usize, buf: &mut BytesMut) -> bool {
        let to = 1 - from;
        while self.waiting[to].is_empty() && !self.finished[from] {
            if buf.len() < READ_CHUNK / 4 {
                buf.clear();
                buf.reserve(READ_CHUNK);
                buf.resize(READ_CHUNK, 0);
            }
            let offered = buf.len();
            let n = match (&self.ends[from]).read(&mut buf[..offered]) {
                Ok(0) => {
                    self.finished[from] = true;
                    return true;
                }
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return false,
            };
            if !self.pass(from, buf.split_to(n).freeze()) {
                return false;
            }
            if n < offered && !self.closing[from] {
                return true;
            }
        }
        true
    }

    /// Writes one read from `from` to the other end, as much as its socket takes now (the
    /// rest waits), with its copy to the tap; `false` if the write failed.
    fn pass(&mut self, from: usize, chunk: Bytes) -> bool {
        let to = 1 - from;
        let flow = FLOW_FROM[from];
        self.log
            .bytes(flow)
            .fetch_add(chunk.len() as u64, Ordering::Relaxed);
        let stamp = self.tap.as_ref().and_then(Tap::stamp);
        let written = write_some(&self.ends[to], &chunk);
        if let Some(n) = written.filter(|n| *n < chunk.len()) {
            self.waiting[to] = chunk.slice(n..);
        }
        if let Some(stamp) = stamp {
            stamp.send(flow.websocket_copy(chunk));
        }
        written.is_some()
    }

    /// Writes what waits for end `to`; `false` if the write failed.
    fn flush(&mut self, to: usize) -> bool {
        let Some(n) = write_some(&self.ends[to], &self.waiting[to]) else {
            return false;
        };
        self.waiting[to].advance(n);
        true
    }

    /// Passes finished ends on and says whether the tunnel is over or has just entered its
    /// grace.
    fn settle(&mut self) -> Step {
        let in_grace = self.grace_until.is_some();
        for from in [CLIENT, UPSTREAM] {
            let to = 1 - from;
            if self.finished[from] && !self.shut[to] && self.waiting[to].is_empty() {
                self.shut[to] = true;
                let _ = self.ends[to].shutdown(Shutdown::Write);
                if self.grace_until.is_none() {
                    self.grace_until = Some(Instant::now() + HALF_CLOSE_GRACE);
                }
            }
        }
        if self.shut[CLIENT] && self.shut[UPSTREAM] {
            Step::Ended
        } else if !in_grace && self.grace_until.is_some() {
            Step::Graced
        } else {
            Step::Open
        }
    }

    /// A socket failed: a reset, unless an end had already finished cleanly (then the
    /// other direction's end within the grace is not a failure, as on the tokio splice).
    fn broken(&mut self) -> Step {
        if self.grace_until.is_none() {
            self.log.fail(Failure::Reset);
        }
        Step::Ended
    }
}

/// Writes `bytes` to `socket` until all are written or the socket has no room for more:
/// how many were written, or `None` if the socket failed.
fn write_some(mut socket: &TcpStream, bytes: &[u8]) -> Option<usize> {
    let mut written = 0;
    while written < bytes.len() {
        match socket.write(&bytes[written..]) {
            Ok(0) => return None,
            Ok(n) => written += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    Some(written)
}

/// The loop: waits for readiness and commands, and handles them, until told to stop.
fn run(mut poll: Poll, inbox: std_mpsc::Receiver<Command>) {
    let mut tunnels: HashMap<u64, Box<Tunnel>> = HashMap::new();
    // Tunnels in their grace, the only ones with a deadline: a wait with a timeout arms a
    // kernel timer, so the loop waits without one whenever this is empty.
    let mut graced: Vec<u64> = Vec::new();
    let mut events = Events::with_capacity(1024);
    let mut buf = BytesMut::new();
    loop {
        let timeout = graced
            .iter()
            .filter_map(|id| tunnels.get(id).and_then(|t| t.grace_until))
            .min()
            .map(|until| until.saturating_duration_since(Instant::now()));
        if let Err(e) = poll.poll(&mut events, timeout) {
            if e.kind() != ErrorKind::Interrupted {
                tracing::warn!(
                    "a splicing loop could not wait for its sockets; its tunnels are closed"
                );
                for tunnel in tunnels.values() {
                    tunnel.log.fail(Failure::Reset);
                }
                return;
            }
        }
        for event in events.iter() {
            if event.token() == COMMANDS {
                continue;
            }
            let id = (event.token().0 / 2) as u64;
            let end = event.token().0 % 2;
            let Some(tunnel) = tunnels.get_mut(&id) else {
                continue;
            };
            let closing = event.is_read_closed() || event.is_error();
            let readable = event.is_readable() || closing;
            let writable = event.is_writable() || event.is_write_closed() || event.is_error();
            let step = catch_unwind(AssertUnwindSafe(|| {
                tunnel.on_event(end, readable, writable, closing, &mut buf)
            }));
            after_step(&mut tunnels, &mut graced, id, step, &mut buf);
        }
        // Commands after events: a tunnel opened here is registered before the next wait.
        loop {
            match inbox.try_recv() {
                Ok(Command::Open(id, mut tunnel)) => {
                    let step = catch_unwind(AssertUnwindSafe(|| tunnel.open(id, &poll)));
                    tunnels.insert(id, tunnel);
                    after_step(&mut tunnels, &mut graced, id, step, &mut buf);
                }
                Ok(Command::Close(id)) => {
                    tunnels.remove(&id);
                }
                Ok(Command::Stop) | Err(std_mpsc::TryRecvError::Disconnected) => return,
                Err(std_mpsc::TryRecvError::Empty) => break,
            }
        }
        if !graced.is_empty() {
            let now = Instant::now();
            graced.retain(|id| match tunnels.get(id).and_then(|t| t.grace_until) {
                Some(until) if until <= now => {
                    // The grace is over: the tunnel is closed as it stands.
                    tunnels.remove(id);
                    false
                }
                Some(_) => true,
                None => false,
            });
        }
    }
}

/// Applies what handling tunnel `id` came to: closes it if it ended or panicked, lists it
/// if it entered its grace.
fn after_step(
    tunnels: &mut HashMap<u64, Box<Tunnel>>,
    graced: &mut Vec<u64>,
    id: u64,
    step: std::thread::Result<Step>,
    buf: &mut BytesMut,
) {
    match step {
        Ok(Step::Open) => {}
        Ok(Step::Graced) => graced.push(id),
        Ok(Step::Ended) => {
            tunnels.remove(&id);
        }
        Err(_) => {
            tracing::warn!("a WebSocket tunnel failed in the relay and was closed");
            if let Some(t) = tunnels.remove(&id) {
                t.log.fail(Failure::Reset);
            }
            // The step may have left the read buffer half-split.
            *buf = BytesMut::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Two connected loopback sockets.
    async fn pair() -> (tokio::net::TcpStream, tokio::net::TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let near = tokio::net::TcpStream::connect(listener.local_addr().unwrap());
        let (near, far) = tokio::join!(near, listener.accept());
        (near.unwrap(), far.unwrap().0)
    }

    const WAIT: Duration = Duration::from_secs(10);

    async fn read_exactly(end: &mut tokio::net::TcpStream, n: usize) -> Vec<u8> {
        let mut got = vec![0u8; n];
        tokio::time::timeout(WAIT, end.read_exact(&mut got))
            .await
            .expect("the bytes within the wait bound")
            .unwrap();
        got
    }

    /// An end that finishes gives the other [`HALF_CLOSE_GRACE`] and no more: a tunnel whose
    /// upstream never finishes is closed once the grace is over, and not before.
    #[tokio::test]
    async fn a_tunnel_in_its_grace_is_closed_when_the_grace_is_over() {
        let (mut host, client_end) = pair().await;
        let (upstream_end, mut upstream) = pair().await;
        let splicers = Splicers::start(1).unwrap();
        let log = ExchangeLog::new("t", &http::Method::GET, "/");
        let client = PlainEnd {
            early: Bytes::new(),
            socket: client_end,
        };
        let upstream_plain = PlainEnd {
            early: Bytes::new(),
            socket: upstream_end,
        };
        let started = Instant::now();
        let spliced = splicers.splice(client, upstream_plain, None, log.clone());
        let host_side = async {
            host.write_all(b"bye").await.unwrap();
            host.shutdown().await.unwrap();
            // The upstream sees the bytes and the end, and keeps its own side open.
            assert_eq!(read_exactly(&mut upstream, 3).await, b"bye");
            let mut rest = Vec::new();
            upstream.read_to_end(&mut rest).await.unwrap();
            assert!(rest.is_empty());
        };
        let bound = HALF_CLOSE_GRACE + WAIT;
        tokio::time::timeout(bound, async { tokio::join!(spliced, host_side) })
            .await
            .expect("the tunnel ends once its grace is over");
        assert!(started.elapsed() >= HALF_CLOSE_GRACE);
        // Closed at the end of the grace: the host's side reads the end.
        let mut rest = Vec::new();
        let read = tokio::time::timeout(WAIT, host.read_to_end(&mut rest))
            .await
            .expect("the close reaches the host");
        assert!(read.is_err() || rest.is_empty(), "{rest:?}");
        drop(upstream);
    }

    #[tokio::test]
    async fn a_tunnel_whose_task_is_dropped_is_closed_at_both_ends() {
        let (mut host, client_end) = pair().await;
        let (upstream_end, mut upstream) = pair().await;
        let splicers = Arc::new(Splicers::start(1).unwrap());
        let log = ExchangeLog::new("t", &http::Method::GET, "/");
        let task = tokio::spawn({
            let splicers = splicers.clone();
            async move {
                let client = PlainEnd {
                    early: Bytes::from_static(b"early|"),
                    socket: client_end,
                };
                let upstream = PlainEnd {
                    early: Bytes::new(),
                    socket: upstream_end,
                };
                splicers.splice(client, upstream, None, log).await;
            }
        });
        host.write_all(b"ping").await.unwrap();
        assert_eq!(read_exactly(&mut upstream, 10).await, b"early|ping");
        upstream.write_all(b"pong").await.unwrap();
        assert_eq!(read_exactly(&mut host, 4).await, b"pong");

        // As the registry's cut does.
        task.abort();
        let _ = task.await;
        for end in [&mut host, &mut upstream] {
            let mut rest = Vec::new();
            let read = tokio::time::timeout(WAIT, end.read_to_end(&mut rest))
                .await
                .expect("the close reaches both ends within the wait bound");
            assert!(read.is_err() || rest.is_empty(), "{rest:?}");
        }
    }
}
