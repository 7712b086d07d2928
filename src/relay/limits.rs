//! Process limits the relay needs.

/// Each relayed stream holds two sockets; the usual soft limit of 1024 descriptors would cap
/// the relay near 500 streams, so the soft limit is raised to the hard one.
pub fn raise_open_files_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                tracing::debug!("could not raise the open files limit");
            }
        }
    }
}
