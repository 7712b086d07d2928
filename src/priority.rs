//! Thread priorities. The observers, which can take CPU in bulk (decoding and parsing a
//! hostile stream), run on threads of their own below the forwarding threads: when both want
//! the same CPU, forwarding gets it, and observation catches up after (its work is queued and
//! bounded, never waited for by the data path).

/// Lowers the calling thread's scheduling priority by 10 nice levels below the process's
/// (at most 19), relative so that a relay started under `nice` keeps the difference
/// (best effort).
pub fn lower_this_thread() {
    // SAFETY: gettid has no preconditions; getpriority and setpriority with PRIO_PROCESS and
    // a thread id read and change only that thread's nice value on Linux.
    unsafe {
        let tid = libc::gettid() as libc::id_t;
        *libc::__errno_location() = 0;
        let current = libc::getpriority(libc::PRIO_PROCESS, tid);
        if *libc::__errno_location() != 0
            || libc::setpriority(libc::PRIO_PROCESS, tid, (current + 10).min(19)) != 0
        {
            tracing::debug!("could not lower an observation thread's priority");
        }
    }
}
