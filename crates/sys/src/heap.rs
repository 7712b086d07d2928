//! The heap: freed read blocks stay with the process for the next burst instead of going back
//! to the kernel after each one.
//!
//! Every relayed read lands in a block of its own once the previous one is shared: the tap's
//! copy keeps the block alive until an observer thread has parsed it, so blocks are freed
//! there, a few MiB at a time after a burst (up to the tap's `MAX_QUEUED_BYTES` per
//! stream). glibc hands the free top of a heap back to the kernel as soon as it exceeds the
//! trim threshold (128 KiB, raised only when large mapped blocks are freed), and the next
//! burst's reads touch those pages again: one page fault per 4 KiB, taken on a forwarding
//! thread inside `recv`. Measured (issue 13; docs/performance.md, "The heap"): 10,400 to
//! 18,000 minor faults a run of the benchmark's throughput rows (`--only
//! ws-throughput,throughput --rounds 6`) before, 2,300 to 2,700 after (start-up's own are
//! ~1,900). The CPU per MB of those rows did not move beyond their spread; the peak memory of
//! the attack example went from 115 to 99 MiB (likely the fixed mmap threshold below, which
//! keeps the observers' large decoder blocks out of the heap; not isolated).
//!
//! So the relay keeps up to [`KEEP_FREED`] of free heap per glibc arena. Setting it turns
//! off glibc's sliding mmap threshold, so that is fixed too, at [`MAP_ABOVE`]: blocks above
//! it (a budgeted observer buffer of a huge event) are still mapped and unmapped on their
//! own and go back to the kernel when freed. Memory held is never above the peak the relay
//! already reached (freed memory is kept, not taken), and the peak under attack is bounded by
//! the observer budget as before.

/// Free heap an arena keeps before trimming: above the few MiB a burst's copies hold.
pub const KEEP_FREED: usize = 16 << 20;

/// Blocks from this size up are mapped on their own (glibc's sliding default would go up to
/// 32 MiB once such blocks have been freed, fixed now that [`KEEP_FREED`] is set).
pub const MAP_ABOVE: usize = 1 << 20;

/// Applies [`KEEP_FREED`] and [`MAP_ABOVE`] to the process's allocator (glibc only; other C
/// libraries keep their defaults). Process-wide; called once at start-up.
pub fn keep_freed_blocks() {
    if !crate::libc_calls::set_malloc_thresholds(KEEP_FREED, MAP_ABOVE) {
        tracing::debug!("could not set the allocator's trim and mmap thresholds");
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use std::process::Command;

    /// Read blocks in flight in one burst, and their size (the WebSocket tunnel's).
    const BLOCKS: usize = 512;
    const BLOCK: usize = 16 * 1024;

    const CHILD: &str = "WINDOWTAP_HEAP_TEST_CHILD";

    /// This thread's minor page faults so far: `minflt`, the tenth field of
    /// `/proc/thread-self/stat` (proc(5)), counted after the parenthesised command name.
    fn faults() -> i64 {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        let after_name = &stat[stat.rfind(')').unwrap() + 2..];
        after_name.split(' ').nth(7).unwrap().parse().unwrap()
    }

    /// One burst: blocks allocated and written as reads fill them, all freed after.
    fn burst() -> i64 {
        let before = faults();
        let blocks: Vec<Vec<u8>> = (0..BLOCKS).map(|i| vec![i as u8; BLOCK]).collect();
        std::hint::black_box(&blocks);
        drop(blocks);
        faults() - before
    }

    /// Run in a process of its own by [`a_second_burst_reuses_the_first_bursts_pages`]: the
    /// thresholds are process-wide, and other tests' large frees move glibc's sliding ones.
    /// With glibc's defaults the freed 8 MiB go back to the kernel and come back as faults;
    /// kept, the second burst writes into pages it already has.
    #[test]
    #[ignore = "run in a child process by a_second_burst_reuses_the_first_bursts_pages"]
    fn heap_child() {
        let Ok(mode) = std::env::var(CHILD) else {
            return;
        };
        let kept = mode == "kept";
        if kept {
            super::keep_freed_blocks();
        }
        // On a thread of its own: its own arena, and its own fault count.
        let second = std::thread::spawn(|| {
            burst();
            burst()
        })
        .join()
        .unwrap();
        let pages = (BLOCKS * BLOCK / 4096) as i64;
        if kept {
            assert!(
                second < pages / 10,
                "kept: {second} faults of {pages} pages"
            );
        } else {
            assert!(
                second > pages / 2,
                "defaults: {second} faults of {pages} pages"
            );
        }
    }

    /// Runs [`heap_child`] in a fresh process; `Err` with its output if it failed.
    fn child(mode: &str) -> Result<(), String> {
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "heap::tests::heap_child", "--ignored"])
            .args(["--test-threads", "1"])
            .env(CHILD, mode)
            .output()
            .unwrap();
        // The harness says "1 passed" only if the filter found the child and it passed.
        let stdout = String::from_utf8_lossy(&out.stdout);
        if out.status.success() && stdout.contains("1 passed") {
            Ok(())
        } else {
            Err(format!("{stdout}{}", String::from_utf8_lossy(&out.stderr)))
        }
    }

    #[test]
    fn a_second_burst_reuses_the_first_bursts_pages() {
        // Both sides: the defaults do fault (so the test can fail), kept blocks do not.
        if let Err(out) = child("default") {
            panic!("with glibc's defaults: {out}");
        }
        if let Err(out) = child("kept") {
            panic!("with freed blocks kept: {out}");
        }
    }
}
