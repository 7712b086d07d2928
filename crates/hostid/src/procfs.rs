//! What the process table says (Linux `/proc`, read through the `procfs` crate): which
//! socket inode is the client end of an accepted loopback connection, which process holds
//! an inode, and a process's start time and ancestors.
//!
//! Every function answers `None` (or nothing) when the table cannot tell: a file that is gone
//! (the process exited), one we may not read (another user's process), a row not there (a
//! remote client, another network namespace). Nothing here blocks on anything but `/proc`.

use std::collections::HashSet;
use std::net::SocketAddr;

use procfs::net::TcpNetEntry;
use procfs::process::{FDTarget, Process};

use crate::identity::ProcId;

/// Most ancestors walked from a wrapper up (a process tree is rarely 10 deep).
pub(crate) const MAX_DEPTH: usize = 64;

/// A TCP socket table of this process's network namespace: IPv4 (`/proc/net/tcp`) or IPv6
/// (`tcp6`). Each read costs about a millisecond whatever the number of sockets: the kernel
/// walks its whole established-connections hash table (262,144 buckets here).
pub(crate) fn tcp_table(v6: bool) -> Vec<TcpNetEntry> {
    let rows = if v6 {
        procfs::net::tcp6()
    } else {
        procfs::net::tcp()
    };
    rows.unwrap_or_default()
}

/// An address as one family sees it: an IPv4-mapped IPv6 address is the IPv4 one (a dual
/// stack listener reports an IPv4 client that way).
pub(crate) fn canonical(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(a.ip().to_canonical(), a.port())
}

/// The inode of the client end of the connection the relay accepted from `peer` on `local`,
/// and its owner's uid: the row whose local address is the peer's and whose remote address
/// is ours. `None` when there is no such row or its socket has no inode any more (the client
/// closed it).
pub(crate) fn client_inode(
    rows: &[TcpNetEntry],
    peer: SocketAddr,
    local: SocketAddr,
) -> Option<(u64, u32)> {
    let inode = inode_of(
        rows.iter()
            .map(|r| (r.local_address, r.remote_address, r.inode)),
        peer,
        local,
    )?;
    let uid = rows.iter().find(|r| r.inode == inode)?.uid;
    Some((inode, uid))
}

/// [`client_inode`] over `(local, remote, inode)` rows. A closed connection of the same
/// four-tuple may still be in the table (TIME_WAIT, inode 0): loopback reuses such ports
/// (`tcp_tw_reuse` 2), so only a row with an inode counts.
fn inode_of(
    mut rows: impl Iterator<Item = (SocketAddr, SocketAddr, u64)>,
    peer: SocketAddr,
    local: SocketAddr,
) -> Option<u64> {
    let (peer, local) = (canonical(peer), canonical(local));
    rows.find(|&(l, r, inode)| inode != 0 && canonical(l) == peer && canonical(r) == local)
        .map(|(_, _, inode)| inode)
}

/// The socket inodes `pid` holds, among `wanted`. Descriptors are read from the highest
/// number down, and the reading stops once every wanted inode is found: a process that
/// holds thousands of connections (a benchmark's client, a busy host) has just opened the
/// one being resolved, usually on its highest descriptor; reading every link of its table
/// for every batch of new connections cost the resolver 50 ms of CPU per 1,000 connections
/// from the benchmark's client.
pub(crate) fn held_among(pid: i32, wanted: &HashSet<u64>) -> Vec<u64> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    let mut fds: Vec<u32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    fds.sort_unstable_by(|a, b| b.cmp(a));
    let mut found = Vec::new();
    for fd in fds {
        if found.len() == wanted.len() {
            break;
        }
        let Ok(target) = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")) else {
            continue;
        };
        if let Some(inode) = socket_inode(target.as_os_str().as_encoded_bytes()) {
            if wanted.contains(&inode) && !found.contains(&inode) {
                found.push(inode);
            }
        }
    }
    found
}

/// The inode of a descriptor's link target `socket:[N]` (procfs's own reading of the link).
fn socket_inode(target: &[u8]) -> Option<u64> {
    match std::str::from_utf8(target).ok()?.parse::<FDTarget>() {
        Ok(FDTarget::Socket(inode)) => Some(inode),
        _ => None,
    }
}

/// Ids of the processes in the table, newest first (descending pids, which is the order
/// they started in until pids wrap around), at most `max`. Only the directory is read: who
/// runs each one is asked per process by [`run_by`], as the walk reaches it.
pub(crate) fn pids_newest_first(max: usize) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<i32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable_by(|a, b| b.cmp(a));
    pids.truncate(max);
    pids
}

/// Whether `pid` is run by one of `uids` (the owner of its `/proc` directory). Only a
/// socket's owner can hold it (the socket lookup says whose it is), and leaving other users'
/// processes alone spares reading fd tables that cannot hold it.
pub(crate) fn run_by(pid: i32, uids: &HashSet<u32>) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}")).is_ok_and(|m| uids.contains(&m.uid()))
}

/// Every process id in the table (for the measurement).
#[cfg(test)]
pub(crate) fn all_pids() -> Vec<i32> {
    procfs::process::all_processes()
        .map(|all| all.filter_map(|p| p.ok().map(|p| p.pid)).collect())
        .unwrap_or_default()
}

/// `pid` with its start time and its parent's pid, if it is still there.
pub(crate) fn stat(pid: i32) -> Option<(ProcId, i32)> {
    let s = Process::new(pid).ok()?.stat().ok()?;
    Some((
        ProcId {
            pid: u32::try_from(s.pid).ok()?,
            start: s.starttime,
        },
        s.ppid,
    ))
}

/// The ancestors of `pid`, nearest first (its parent, then the parent's parent…), up to
/// the root of the tree (pid 1 included: in a container the host may be it) or
/// [`MAX_DEPTH`].
pub(crate) fn ancestors(pid: i32) -> Vec<ProcId> {
    let mut out = Vec::new();
    let Some((_, mut parent)) = stat(pid) else {
        return out;
    };
    while parent > 0 && out.len() < MAX_DEPTH {
        let Some((id, next)) = stat(parent) else {
            break;
        };
        out.push(id);
        parent = next;
    }
    out
}

/// The nearest ancestor of this process, run by this user, whose environment (as it was when
/// that process started) has `name`: its pid and that variable's value. Read so that a
/// wrapper finds the socket `windowtap run` gave its program when the program started the
/// wrapper with an environment of its own choosing (the MCP SDKs give a server only a few
/// variables unless told otherwise). Only that one variable is kept; every other value read
/// (the environment holds credentials) is dropped here, unlooked at.
pub(crate) fn ancestor_env(name: &str) -> Option<(u32, std::ffi::OsString)> {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::getuid().as_raw();
    let wanted: &std::ffi::OsStr = name.as_ref();
    ancestors(std::process::id() as i32)
        .into_iter()
        .filter(|p| std::fs::metadata(format!("/proc/{}", p.pid)).is_ok_and(|m| m.uid() == me))
        .find_map(|p| {
            let env = Process::new(p.pid as i32).ok()?.environ().ok()?;
            env.into_iter()
                .find(|(k, _)| k == wanted)
                .map(|(_, v)| (p.pid, v))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn me() -> i32 {
        std::process::id() as i32
    }

    #[test]
    fn every_wanted_socket_among_many_descriptors_is_found_oldest_and_newest() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let local = listener.local_addr().unwrap();
        let pairs: Vec<_> = (0..50)
            .map(|_| {
                let c = std::net::TcpStream::connect(local).unwrap();
                let (s, peer) = listener.accept().unwrap();
                (c, s, peer)
            })
            .collect();
        let rows = tcp_table(false);
        let inode = |peer| client_inode(&rows, peer, local).unwrap().0;
        let (oldest, newest) = (inode(pairs[0].2), inode(pairs[49].2));
        let mut got = held_among(me(), &HashSet::from([oldest, newest]));
        got.sort_unstable();
        let mut want = vec![oldest, newest];
        want.sort_unstable();
        assert_eq!(got, want);
        // One that is nowhere here: the rest are still found.
        assert_eq!(
            held_among(me(), &HashSet::from([oldest, u64::MAX])),
            vec![oldest]
        );
        assert_eq!(socket_inode(b"socket:[12345]"), Some(12345));
        assert_eq!(socket_inode(b"pipe:[12345]"), None);
        drop(pairs);
    }

    #[test]
    fn the_client_end_of_a_loopback_connection_is_found_and_held_by_its_process() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_server, peer) = listener.accept().unwrap();
        let local = listener.local_addr().unwrap();
        let rows = tcp_table(false);
        let (inode, uid) = client_inode(&rows, peer, local).expect("the client row");
        // SAFETY: getuid cannot fail.
        assert_eq!(uid, rustix::process::getuid().as_raw());
        assert!(pids_newest_first(usize::MAX).contains(&me()));
        assert!(run_by(me(), &HashSet::from([uid])));
        assert!(!run_by(me(), &HashSet::from([uid.wrapping_add(1)])));
        // The server end is another row, with another inode.
        assert_ne!(client_inode(&rows, local, peer).map(|r| r.0), Some(inode));
        let wanted = HashSet::from([inode]);
        assert_eq!(held_among(me(), &wanted), vec![inode]);
        // A mapped address finds the same row.
        let mapped = |a: SocketAddr| match a {
            SocketAddr::V4(v4) => SocketAddr::new(v4.ip().to_ipv6_mapped().into(), v4.port()),
            v6 => v6,
        };
        assert_eq!(
            client_inode(&rows, mapped(peer), mapped(local)),
            Some((inode, uid))
        );
        drop(client);
    }

    #[test]
    fn a_closed_connection_of_the_same_ports_is_passed_over() {
        let a: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:8787".parse().unwrap();
        // TIME_WAIT first, as the kernel may list it, then the live one.
        let rows = [(a, b, 0), (b, a, 7), (a, b, 9)];
        assert_eq!(inode_of(rows.into_iter(), a, b), Some(9));
        assert_eq!(inode_of(rows[..1].iter().copied(), a, b), None);
    }

    #[test]
    fn a_connection_that_is_not_in_the_table_has_no_inode() {
        let mut rows = tcp_table(false);
        rows.extend(tcp_table(true));
        let nowhere: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_eq!(client_inode(&rows, nowhere, nowhere), None);
    }

    #[test]
    fn a_process_has_a_start_time_and_its_ancestors_lead_up_the_tree() {
        let (id, ppid) = stat(me()).expect("this process");
        assert_eq!(id.pid, std::process::id());
        assert!(id.start > 0);
        let up = ancestors(me());
        if ppid > 1 {
            assert_eq!(up[0].pid as i32, ppid, "the parent first");
            assert_eq!(Some(up[0]), stat(ppid).map(|s| s.0));
        }
        assert!(up.iter().all(|a| a.pid > 0));
        let child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let of_child = ancestors(child.id() as i32);
        assert_eq!(
            of_child.first(),
            Some(&id),
            "a child's nearest ancestor is us"
        );
        let mut child = child;
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(stat(child.id() as i32), None, "gone once reaped");
    }
}
