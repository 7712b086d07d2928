//! The calls into the C library that `rustix` does not cover, each behind a safe function.
//!
//! This is the only module of the workspace allowed `unsafe` (the crate denies it everywhere
//! else, and every other crate forbids it). What belongs here: a call with no safe wrapper in
//! `rustix` or `std`, made safe by an argument that holds for every caller. What does not:
//! anything `rustix` offers (`getuid`, `kill`, `clock_gettime`, `waitid`, socket options,
//! priorities), which the callers use directly, except where its types cannot hold what the
//! kernel may say (see [`peer_credentials`]).

/// Sets glibc's trim and mmap thresholds (`mallopt(M_TRIM_THRESHOLD)`,
/// `mallopt(M_MMAP_THRESHOLD)`); `false` if either was refused. Other C libraries have no
/// such knobs: there it does nothing and says `true`.
pub fn set_malloc_thresholds(trim: usize, mmap: usize) -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let (Ok(trim), Ok(mmap)) = (libc::c_int::try_from(trim), libc::c_int::try_from(mmap))
        else {
            return false;
        };
        // SAFETY: mallopt only sets the allocator's tuning parameters; it takes the arena
        // locks itself and may be called from any thread at any time.
        unsafe {
            libc::mallopt(libc::M_TRIM_THRESHOLD, trim) == 1
                && libc::mallopt(libc::M_MMAP_THRESHOLD, mmap) == 1
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        let _ = (trim, mmap);
        true
    }
}

/// A set of signals, to block in a thread and wait for with [`SignalSet::wait`].
pub struct SignalSet {
    set: libc::sigset_t,
    signals: Vec<libc::c_int>,
}

impl SignalSet {
    /// The set holding exactly `signals` (signal numbers; an invalid one is left out).
    pub fn of(signals: &[libc::c_int]) -> SignalSet {
        // SAFETY: sigemptyset and sigaddset only write into the set we own, which sigemptyset
        // initialises before sigaddset reads it.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for &s in signals {
                libc::sigaddset(&mut set, s);
            }
            SignalSet {
                set,
                signals: signals.to_vec(),
            }
        }
    }

    /// Blocks the set in the calling thread (threads started after inherit the mask), then
    /// sets each signal's action to the default: an ignored signal is discarded before
    /// `sigwait` could see it, and while blocked the default action cannot run.
    pub fn block_with_default_action(&self) {
        // SAFETY: the set is initialised; the old mask is not needed; SIG_DFL is a valid
        // action for every signal that can be blocked.
        unsafe {
            libc::pthread_sigmask(libc::SIG_BLOCK, &self.set, std::ptr::null_mut());
            for &s in &self.signals {
                libc::signal(s, libc::SIG_DFL);
            }
        }
    }

    /// Waits for one of the set's signals (blocked in every thread by then) and takes it;
    /// `None` if the wait failed.
    pub fn wait(&self) -> Option<libc::c_int> {
        let mut sig: libc::c_int = 0;
        // SAFETY: the set is initialised; `sig` is ours to write.
        (unsafe { libc::sigwait(&self.set, &mut sig) } == 0).then_some(sig)
    }
}

/// The peer of a connected Unix socket as the kernel saw it when it connected
/// (`SO_PEERCRED`): its pid and uid. The pid is 0 when the peer is in a pid namespace this
/// process cannot see, which `rustix`'s `UCred` (a non-zero `Pid`) cannot hold, so the call is
/// made here.
pub fn peer_credentials(socket: std::os::fd::BorrowedFd<'_>) -> std::io::Result<(i32, u32)> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED writes at most `len` bytes into `cred`, which we own, on the open
    // descriptor `socket` borrows for the call's duration.
    let r = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((cred.pid, cred.uid))
}
