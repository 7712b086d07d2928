#!/usr/bin/env python3
"""CPU time and context switches of each proxy's threads over a bench run.

The relay bench reads a proxy's CPU for the whole process. To see which threads it went to
(windowtap's cores, its observers, its main runtime; nginx's workers), this runs a
command (the bench) and samples /proc every 0.2 s for processes whose name is one of
--names, and prints, per process, its threads grouped by name (a trailing index dropped):
CPU in clock ticks (utime + stime, 10 ms each here) and context switches (voluntary and
not), as last seen before the process ended. Numbers cover the process's whole life, its
idle time between the bench's runs included.

Usage: scripts/thread-cpu.py [--names windowtap,nginx] -- COMMAND...
e.g.   scripts/thread-cpu.py -- target/release/deps/relay-HASH --only ws-throughput --rounds 24
"""
import argparse
import os
import re
import subprocess
import sys
import time
from collections import Counter


def sample(names):
    seen = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            comm = open(f"/proc/{pid}/comm").read().strip()
            if comm not in names:
                continue
            threads = Counter()
            for tid in os.listdir(f"/proc/{pid}/task"):
                task = f"/proc/{pid}/task/{tid}"
                name = re.sub(r"-?\d+$", "", open(f"{task}/comm").read().strip())
                # Fields after the command name: utime and stime are the 12th and 13th.
                stat = open(f"{task}/stat").read().rsplit(")", 1)[1].split()
                threads[name, "cpu"] += int(stat[11]) + int(stat[12])
                for line in open(f"{task}/status"):
                    if "ctxt_switches" in line:
                        threads[name, "switches"] += int(line.split()[1])
            seen[int(pid)] = (comm, threads)
        except (OSError, IndexError, ValueError):
            pass  # the process or thread ended while being read
    return seen


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--names", default="windowtap,nginx,haproxy")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("a command to run is needed")
    names = set(args.names.split(","))
    last = {}
    child = subprocess.Popen(command)
    while child.poll() is None:
        last.update(sample(names))
        time.sleep(0.2)
    for pid, (comm, threads) in sorted(last.items()):
        print(f"{pid} {comm}")
        for name in sorted({n for n, _ in threads}):
            print(f"    {name:<20} cpu {threads[name, 'cpu']:>6} ticks"
                  f"  switches {threads[name, 'switches']:>8}")
    sys.exit(child.returncode)


if __name__ == "__main__":
    main()
