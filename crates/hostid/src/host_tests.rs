use super::*;
use std::time::Duration;

#[cfg(target_os = "linux")]
mod linux {
    use super::*;
    use crate::procfs;
    use crate::resolver::{decide, own_address, Decision, Pending, Resolver};
    use std::net::{TcpListener, TcpStream};
    use std::process::{Child, Command, Stdio};
    use std::time::Instant;

    /// A process of its own holding a connection to `listener` (bash opens it, then becomes
    /// `sleep`, which inherits it); the relay's side of it and the peer address.
    fn client(listener: &TcpListener) -> (Child, TcpStream, SocketAddr) {
        let port = listener.local_addr().unwrap().port();
        let child = Command::new("bash")
            .arg("-c")
            .arg(format!("exec 3<>/dev/tcp/127.0.0.1/{port}; exec sleep 60"))
            .stdin(Stdio::null())
            .spawn()
            .expect("bash");
        let (server, peer) = listener.accept().unwrap();
        // Until the exec, bash holds the socket; wait for sleep to.
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::read_to_string(format!("/proc/{}/comm", child.id()))
            .map(|c| c.trim() != "sleep")
            .unwrap_or(true)
        {
            assert!(Instant::now() < deadline, "the client never became sleep");
            std::thread::sleep(Duration::from_millis(2));
        }
        (child, server, peer)
    }

    fn end(mut child: Child) {
        let _ = child.kill();
        let _ = child.wait();
    }

    fn resolver() -> Resolver {
        resolver_of(relay_uid())
    }

    /// A resolver that takes `me` for the relay's user.
    fn resolver_of(me: u32) -> Resolver {
        Resolver::new(
            Arc::new(Mutex::new(HashSet::new())),
            Some(std::process::id() as i32),
            me,
        )
    }

    fn resolve(r: &mut Resolver, peer: SocketAddr, local: SocketAddr) -> Option<Host> {
        let mut c = [Pending {
            peer,
            local,
            owner_only: false,
            host: None,
        }];
        r.resolve(&mut c);
        c[0].host
    }

    #[test]
    fn a_connection_is_resolved_to_the_process_holding_its_client_end() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let local = listener.local_addr().unwrap();
        let (child, _server, peer) = client(&listener);
        let want = Host::Proc(procfs::stat(child.id() as i32).unwrap().0);
        let mut r = resolver();
        assert_eq!(
            resolve(&mut r, peer, local),
            Some(want),
            "by walking the table"
        );
        assert_eq!(
            resolve(&mut r, peer, local),
            Some(want),
            "by the host seen before"
        );
        // Our own connections are never a host's. Another test's child holds a copy of every
        // fd of this process between its fork and its exec, and may be found holding this
        // one (seen in full test runs, the same child on five tries in a row under load);
        // a process that holds it for good, or this one if it were not skipped, is found on
        // every try until the deadline.
        let mine = TcpStream::connect(local).unwrap();
        let (_s, my_peer) = listener.accept().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut found = Vec::new();
        loop {
            match resolve(&mut r, my_peer, local) {
                None => break,
                Some(holder) => found.push(holder),
            }
            assert!(Instant::now() < deadline, "held all along by {found:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
        drop(mine);
        end(child);
        // Gone: its row has no inode any more (or no row at all).
        assert_eq!(resolve(&mut resolver(), peer, local), None);
    }

    #[test]
    fn a_new_host_is_looked_for_among_the_newest_processes_first() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let local = listener.local_addr().unwrap();
        let older: Vec<Child> = (0..200)
            .map(|_| Command::new("sleep").arg("60").spawn().unwrap())
            .collect();
        let (child, _server, peer) = client(&listener);
        let want = Host::Proc(procfs::stat(child.id() as i32).unwrap().0);
        let mut r = resolver();
        assert_eq!(resolve(&mut r, peer, local), Some(want));
        // Pids only say which process is newer until they wrap around.
        if older.iter().all(|o| o.id() < child.id()) {
            assert!(
                r.fd_tables_read < 200,
                "{} fd tables read before the newest process's",
                r.fd_tables_read
            );
        }
        for o in older {
            end(o);
        }
        end(child);
    }

    #[test]
    fn without_sock_diag_the_tcp_table_finds_the_same_host() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let local = listener.local_addr().unwrap();
        let (child, _server, peer) = client(&listener);
        let want = Host::Proc(procfs::stat(child.id() as i32).unwrap().0);
        let mut r = resolver();
        assert!(r.diag.is_some(), "sock_diag is there on this machine");
        r.diag = None;
        assert_eq!(resolve(&mut r, peer, local), Some(want));
        end(child);
        let mut r = resolver();
        r.diag = None;
        assert_eq!(resolve(&mut r, peer, local), None, "gone");
    }

    #[tokio::test]
    async fn a_wrapper_belongs_to_its_nearest_ancestor_that_made_a_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let local = listener.local_addr().unwrap();
        let port = local.port();
        // The "host": holds a relay connection and has a child (the "wrapper").
        let mut host = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "exec 3<>/dev/tcp/127.0.0.1/{port}; sleep 60 & echo $!; wait"
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let (_server, peer) = listener.accept().unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(host.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let wrapper: u32 = line.trim().parse().unwrap();
        let host_id = procfs::stat(host.id() as i32).unwrap().0;

        let hosts = Hosts::start();
        let chain = hosts.ancestors(wrapper).await;
        assert_eq!(chain.first(), Some(&host_id));
        assert_eq!(
            hosts.host_among(&chain).await,
            None,
            "no connection seen yet"
        );
        assert_eq!(
            hosts.connection(peer, local).wait().await,
            Some(Host::Proc(host_id))
        );
        assert_eq!(
            hosts.call_host(&chain).await,
            Some(Host::Proc(host_id)),
            "a call's host: its wrapper's nearest ancestor with a connection"
        );
        assert_eq!(hosts.host_among(&chain).await, Some(host_id));
        // The same pid with another start time is another process.
        let reused = ProcId {
            start: host_id.start + 1,
            ..host_id
        };
        assert_eq!(hosts.host_among(&[reused]).await, None);
        assert_eq!(host_id.raw(), format!("{}:{}", host_id.pid, host_id.start));
        end(host);
        let _ = Command::new("kill").arg(wrapper.to_string()).status();
    }

    #[tokio::test]
    async fn with_one_host_every_connection_is_the_adopted_host_even_one_accepted_before() {
        let hosts = Hosts::start_sole();
        let local: SocketAddr = "127.0.0.1:8787".parse().unwrap();
        // Accepted before run adopted its host, from a port nobody holds: still the host's.
        let early = hosts.connection("127.0.0.1:40001".parse().unwrap(), local);
        let child = Command::new("sleep").arg("60").spawn().unwrap();
        let id = hosts.adopt(child.id()).await.expect("alive");
        assert_eq!(early.wait().await, Some(Host::Proc(id)));
        let late = hosts.connection("127.0.0.1:40002".parse().unwrap(), local);
        assert_eq!(late.wait().await, Some(Host::Proc(id)));
        assert_eq!(hosts.host_among(&[id]).await, Some(id));
        end(child);
    }

    #[tokio::test]
    async fn with_one_host_only_our_user_s_connections_are_the_adopted_host() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let local = listener.local_addr().unwrap();
        let (client, _server, peer) = client(&listener);
        let host = Command::new("sleep").arg("60").spawn().unwrap();
        let me = relay_uid();
        // run's relay: the client's connection is the adopted host's, not the client's
        // own process (nothing is looked for in the process table).
        let ours = Hosts::start_sole_as(me);
        let id = Host::Proc(ours.adopt(host.id()).await.expect("alive"));
        assert_eq!(ours.connection(peer, local).wait().await, Some(id));
        // The same client to a run of another user: that user's is not its host.
        let theirs = Hosts::start_sole_as(me.wrapping_add(1));
        let their_id = Host::Proc(theirs.adopt(host.id()).await.expect("alive"));
        assert_eq!(
            theirs.connection(peer, local).wait().await,
            Some(Host::User(me))
        );
        let remote: SocketAddr = "192.0.2.1:40000".parse().unwrap();
        assert_eq!(
            theirs.connection(remote, local).wait().await,
            Some(Host::Remote)
        );
        let gone: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_eq!(
            theirs.connection(gone, local).wait().await,
            Some(their_id),
            "no socket to ask about: the adopted host's, as before"
        );
        end(client);
        end(host);
    }

    #[tokio::test]
    async fn a_host_adopted_by_pid_is_found_by_its_wrappers_and_a_remote_peer_is_remote() {
        let hosts = Hosts::start();
        let child = Command::new("sleep").arg("60").spawn().unwrap();
        let id = hosts.adopt(child.id()).await.expect("alive");
        assert_eq!(hosts.host_among(&[id]).await, Some(id));
        // TEST-NET-1 (RFC 5737): never an address of this machine.
        let remote: SocketAddr = "192.0.2.1:40000".parse().unwrap();
        let local: SocketAddr = "127.0.0.1:8787".parse().unwrap();
        assert_eq!(
            hosts.connection(remote, local).wait().await,
            Some(Host::Remote)
        );
        // A loopback peer with no socket any more: gone, nothing known.
        let gone: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_eq!(hosts.connection(gone, local).wait().await, None);
        end(child);
    }

    #[test]
    fn the_socket_table_decides_another_user_remote_or_a_process_to_find() {
        let me = 1000;
        let never = || -> bool { panic!("the address is only asked about without a socket") };
        assert_eq!(decide(Some((7, me)), me, never), Decision::Find(7));
        assert_eq!(
            decide(Some((7, 65534)), me, never),
            Decision::Known(Some(Host::User(65534)))
        );
        assert_eq!(
            decide(Some((7, 0)), me, never),
            Decision::Known(Some(Host::User(0))),
            "root is another user too, for a relay that is not root"
        );
        assert_eq!(decide(None, me, || true), Decision::Known(None));
        assert_eq!(
            decide(None, me, || false),
            Decision::Known(Some(Host::Remote))
        );
        assert_eq!(Host::User(65534).raw(), "uid:65534");
        assert_eq!(Host::Remote.raw(), "remote");
        let p = ProcId {
            pid: 65534,
            start: 1,
        };
        assert_ne!(Host::Proc(p).raw(), Host::User(65534).raw());
    }

    #[test]
    fn this_machine_s_addresses_are_told_from_others() {
        for ours in ["127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"] {
            assert!(own_address(ours.parse().unwrap()), "{ours}");
        }
        for other in ["192.0.2.1", "2001:db8::1", "::ffff:192.0.2.1"] {
            assert!(!own_address(other.parse().unwrap()), "{other}");
        }
    }

    #[test]
    fn a_socket_of_another_user_is_that_user_s_and_no_process_is_looked_for() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let local = listener.local_addr().unwrap();
        let (child, _server, peer) = client(&listener);
        // The client is ours; to a relay of another user it is another user's.
        let other = relay_uid().wrapping_add(1);
        let mut r = resolver_of(other);
        assert_eq!(resolve(&mut r, peer, local), Some(Host::User(relay_uid())));
        assert_eq!(r.fd_tables_read, 0, "no process table walked");
        r.diag = None;
        assert_eq!(
            resolve(&mut r, peer, local),
            Some(Host::User(relay_uid())),
            "the TCP table says the same"
        );
        end(child);
    }

    #[test]
    fn a_client_run_by_another_uid_is_that_uid_s_host() {
        use std::os::unix::process::CommandExt;
        if !rustix::process::geteuid().is_root() {
            eprintln!("SKIPPED: not root; starting a client as uid 65534 needs it");
            return;
        }
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let local = listener.local_addr().unwrap();
        let mut child = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "exec 3<>/dev/tcp/127.0.0.1/{}; exec sleep 60",
                local.port()
            ))
            .uid(65534)
            .gid(65534)
            .stdin(Stdio::null())
            .spawn()
            .expect("bash as uid 65534");
        let (_server, peer) = listener.accept().unwrap();
        assert_eq!(
            resolve(&mut resolver(), peer, local),
            Some(Host::User(65534))
        );
        let _ = child.kill();
        let _ = child.wait();
    }

    #[tokio::test]
    async fn a_connection_s_principal_is_its_socket_s_owner_else_its_address_else_itself() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let local = listener.local_addr().unwrap();
        let (child, _server, peer) = client(&listener);
        let hosts = Hosts::start();
        let a = hosts.connection(peer, local);
        assert_eq!(a.principal().await, Principal::User(relay_uid()));
        let remote: SocketAddr = "192.0.2.1:40000".parse().unwrap();
        assert_eq!(
            hosts.connection(remote, local).principal().await,
            Principal::Remote(remote.ip())
        );
        // A local port nobody holds: unknown, so each such connection is a principal alone.
        let gone: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let (x, y) = (hosts.connection(gone, local), hosts.connection(gone, local));
        let (px, py) = (x.principal().await, y.principal().await);
        assert!(matches!(px, Principal::Connection(_)), "{px:?}");
        assert_ne!(px, py, "two unknown connections share nothing");
        assert_eq!(
            px,
            x.principal().await,
            "one connection keeps its principal"
        );
        // Resolution off: nothing is known, nothing is shared.
        let off = Hosts::off();
        let (x, y) = (off.connection(peer, local), off.connection(peer, local));
        assert_ne!(x.principal().await, y.principal().await);
        end(child);
    }

    #[tokio::test]
    async fn with_resolution_off_every_host_is_null() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let local = listener.local_addr().unwrap();
        let (child, _server, peer) = client(&listener);
        let id = procfs::stat(child.id() as i32).unwrap().0;
        let hosts = Hosts::off();
        assert_eq!(hosts.connection(peer, local).wait().await, None);
        let remote: SocketAddr = "192.0.2.1:40000".parse().unwrap();
        assert_eq!(hosts.connection(remote, local).wait().await, None);
        assert_eq!(hosts.adopt(child.id()).await, None, "nothing is adopted");
        assert!(hosts.ancestors(child.id()).await.is_empty());
        assert_eq!(hosts.call_host(&[id]).await, None);
        // The same connection and call with resolution on have their host: the answers
        // above are the switch's, not the machine's.
        let on = Hosts::start();
        assert_eq!(
            on.connection(peer, local).wait().await,
            Some(Host::Proc(id))
        );
        assert_eq!(on.call_host(&[id]).await, Some(Host::Proc(id)));
        end(child);
    }

    /// CPU time this thread has used (the cost, whatever else the machine is doing).
    fn cpu() -> Duration {
        let ts = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    }

    /// Wall and CPU time of `f`.
    fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration, Duration) {
        let (w, c) = (Instant::now(), cpu());
        let out = f();
        (out, w.elapsed(), cpu() - c)
    }

    /// The cost of resolution, for docs/hosts.md: `cargo test --release --bin windowtap
    /// host::tests::linux::resolution_cost -- --ignored --nocapture` (it starts 1,000
    /// `sleep` processes for the second half, and ends them).
    #[test]
    #[ignore]
    fn resolution_cost() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let local = listener.local_addr().unwrap();
        let ms = |d: Duration| format!("{:.2}", d.as_secs_f64() * 1e3);
        let measure = |label: &str| {
            let procs = procfs::all_pids().len();
            let rows = procfs::tcp_table(false).len() + procfs::tcp_table(true).len();
            let runs = 50;
            // (wall, cpu) per run, for: a new host, a known host, a wrapper's ancestors.
            let mut costs = [Vec::new(), Vec::new(), Vec::new()];
            for _ in 0..runs {
                let (child, _server, peer) = client(&listener);
                let mut r = resolver();
                let (got, w, c) = timed(|| resolve(&mut r, peer, local));
                assert!(got.is_some());
                costs[0].push((w, c));
                let (got, w, c) = timed(|| resolve(&mut r, peer, local));
                assert!(got.is_some());
                costs[1].push((w, c));
                let (up, w, c) = timed(|| procfs::ancestors(child.id() as i32));
                assert!(!up.is_empty());
                costs[2].push((w, c));
                end(child);
            }
            println!("{label}: {procs} processes, {rows} TCP table rows, {runs} runs");
            for (what, v) in ["new host", "known host", "wrapper ancestors"]
                .iter()
                .zip(costs.iter_mut())
            {
                let mut wall: Vec<Duration> = v.iter().map(|x| x.0).collect();
                let mut cpu: Vec<Duration> = v.iter().map(|x| x.1).collect();
                wall.sort();
                cpu.sort();
                let n = wall.len();
                println!(
                    "  {what}: cpu median {} ms, p90 {} ms; wall median {} ms, p90 {} ms",
                    ms(cpu[n / 2]),
                    ms(cpu[n * 9 / 10]),
                    ms(wall[n / 2]),
                    ms(wall[n * 9 / 10]),
                );
            }
        };
        measure("as is");
        let mut extra: Vec<Child> = (0..1000)
            .map(|_| Command::new("sleep").arg("300").spawn().unwrap())
            .collect();
        measure("with 1,000 extra sleep processes");
        for c in &mut extra {
            let _ = c.kill();
        }
        for c in &mut extra {
            let _ = c.wait();
        }
    }
}
