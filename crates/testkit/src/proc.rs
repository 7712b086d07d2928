//! Processes and clocks without `unsafe`: what tests and benches used to reach through `libc`
//! (kill, getuid, clock_gettime, pipe, sysconf, setsockopt, wait4), through rustix or std.

use std::os::fd::{AsFd, OwnedFd};
use std::process::{Child, ExitStatus};
use std::time::Duration;

pub use rustix::process::Signal;

/// Sends `sig` to process `pid` (a child the caller started and has not reaped). A process
/// already gone is no error: there is nothing left to signal.
pub fn signal(pid: u32, sig: Signal) {
    let Some(pid) = rustix::process::Pid::from_raw(pid as i32) else {
        panic!("no process has pid {pid}");
    };
    let _ = rustix::process::kill_process(pid, sig);
}

/// SIGTERM to `pid`.
pub fn terminate(pid: u32) {
    signal(pid, Signal::TERM);
}

/// The real uid of this process.
pub fn uid() -> u32 {
    rustix::process::getuid().as_raw()
}

/// CLOCK_MONOTONIC in nanoseconds: the clock the relay stamps its events with.
pub fn mono_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Clock ticks per second, the unit of /proc/PID/stat's utime and stime.
pub fn clock_ticks_per_second() -> u64 {
    rustix::param::clock_ticks_per_second()
}

/// A new pipe: (read end, write end).
pub fn pipe() -> (OwnedFd, OwnedFd) {
    rustix::pipe::pipe().expect("pipe(2)")
}

/// Sets SO_LINGER on `socket` (`Some(ZERO)`: close with a reset).
pub fn set_linger(socket: impl AsFd, linger: Option<Duration>) {
    rustix::net::sockopt::set_socket_linger(socket, linger).expect("setsockopt(SO_LINGER)");
}

/// Waits for `child` to exit and returns its status with its peak resident set in KiB.
///
/// The peak is the child's own `VmHWM` (/proc/PID/status), read every millisecond while it
/// runs: the kernel's high-water mark, which only grows, so the last reading before the exit
/// is the peak up to what the last millisecond added. It stands in for `wait4`'s
/// `ru_maxrss`, which std and rustix do not give (libc's needs `unsafe`), and unlike
/// `RUSAGE_CHILDREN` it is this child's alone, not mixed with other tests' children.
pub fn wait_with_peak_kib(child: &mut Child) -> (ExitStatus, u64) {
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak = 0;
    loop {
        if let Some(hwm) = std::fs::read_to_string(&status_file)
            .ok()
            .as_deref()
            .and_then(vm_hwm_kib)
        {
            peak = peak.max(hwm);
        }
        if let Some(status) = child.try_wait().expect("waiting for the child") {
            return (status, peak);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// `VmHWM` of a /proc/PID/status text, in KiB (absent once the process has exited).
fn vm_hwm_kib(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}
