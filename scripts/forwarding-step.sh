#!/usr/bin/env bash
# The forwarding step of each proxy in the relay bench, timed by its own system calls.
#
# Runs `cargo bench --bench relay -- --only ws` (or what ARGS say) under `perf record` with
# only the system-call tracepoints of `epoll_wait`, `recvfrom` and `sendto`, then, for every
# thread that forwards, takes each message relayed as
#
#     epoll_wait returns -> recvfrom enters -> recvfrom returns -> sendto enters -> returns
#     -> the next epoll_wait enters
#
# and prints per process the medians of each stretch in µs:
#
#   wake>recv  from the wake-up to the read: the event loop's dispatch and the task's poll
#   recv       the read, in the kernel
#   recv>send  from the read to the write: the proxy's own work on the message
#   send       the write, in the kernel (the wake-up of the reader included)
#   send>wait  from the write to the next wait (often includes the woken reader's run: it
#              is scheduled on the same vCPU and may preempt the proxy)
#   wake>send  wake>recv + recv + recv>send: the thread's time before the message leaves
#
# Tracing adds the same cost to every system call of every proxy (each stretch that spans a
# tracepoint is longer than untraced); compare proxies within a run, not with latency rows.
#
# Usage: scripts/forwarding-step.sh [bench args...]
#   default: --only ws --rounds 4 --proxies windowtap,nginx,floor
# Needs perf (tracepoints only: works on a VM without hardware counters), python3, root.
set -euo pipefail
cd "$(dirname "$0")/.."

bench=${RELAY_BENCH:-$(cargo bench --bench relay --no-run 2>&1 | sed -n "s/.*Executable .*(\(.*\))$/\1/p" | tail -1)}
[ -x "$bench" ] || { echo "could not build the relay bench" >&2; exit 1; }
cargo build --release --quiet

args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--only ws --rounds 4 --proxies windowtap,nginx,floor)

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# 232 epoll_wait, 45 recvfrom, 44 sendto (x86_64): the calls of a tunnel's step, and few
# enough events that perf keeps up.
perf record -q -m 2048 -e raw_syscalls:sys_enter -e raw_syscalls:sys_exit \
    --filter 'id == 232 || id == 45 || id == 44' -a -o "$out/perf.data" -- \
    "$bench" "${args[@]}" >"$out/bench.txt" 2>&1
awk '/^(SSE|WebSocket) +p50/ {p = 1} /^$/ {p = 0} p && !/NaN/' "$out/bench.txt"
echo
perf script -i "$out/perf.data" --ns --show-mmap-events -F comm,pid,tid,time,event,trace \
    2>/dev/null >"$out/script.txt"

python3 - "$out/script.txt" <<'EOF'
import collections, re, statistics, sys

exe = {}          # pid -> executable (from its mappings)
comm = {}         # pid -> a thread name seen doing the step
stretches = collections.defaultdict(lambda: collections.defaultdict(list))
at = {}           # tid -> times of the step so far
event = re.compile(r'\s*(\S+)\s+(\d+)/(\d+)\s+(\d+\.\d+):\s+raw_syscalls:sys_(enter|exit):\s+NR\s+(\d+)')
for line in open(sys.argv[1]):
    if 'PERF_RECORD_MMAP' in line:
        m = re.search(r'\s(\d+)/\d+', line)
        path = line.split()[-1]
        # The last program mapped (after an exec), not its libraries.
        if m and 'r-xp' in line and '.so' not in path and path.startswith('/'):
            exe[m.group(1)] = path.rsplit('/', 1)[-1]
        continue
    m = event.match(line)
    if not m:
        continue
    name, pid, tid, t, kind, nr = m.groups()
    t = float(t) * 1e9
    s = at.setdefault(tid, {})
    if kind == 'exit' and nr == '232':
        s.clear(); s['wake'] = t
    elif kind == 'enter' and nr == '45' and 'wake' in s and 'recv_in' not in s:
        s['recv_in'] = t
    elif kind == 'exit' and nr == '45' and 'recv_in' in s and 'recv_out' not in s:
        s['recv_out'] = t
    elif kind == 'enter' and nr == '44' and 'recv_out' in s and 'send_in' not in s:
        s['send_in'] = t
    elif kind == 'exit' and nr == '44' and 'send_in' in s and 'send_out' not in s:
        s['send_out'] = t
    elif kind == 'enter' and nr == '232':
        if 'send_out' in s:
            r = stretches[pid]
            r['wake>recv'].append(s['recv_in'] - s['wake'])
            r['recv'].append(s['recv_out'] - s['recv_in'])
            r['recv>send'].append(s['send_in'] - s['recv_out'])
            r['send'].append(s['send_out'] - s['send_in'])
            r['send>wait'].append(t - s['send_out'])
            r['wake>send'].append(s['send_in'] - s['wake'])
            comm.setdefault(pid, name)
        s.clear()

rows = [(pid, r) for pid, r in stretches.items() if len(r['recv']) >= 200]
keys = ['wake>recv', 'recv', 'recv>send', 'send', 'send>wait', 'wake>send']
print(f"{'process (pid)':36} {'steps':>6} " + ' '.join(f'{k:>10}' for k in keys))
for pid, r in sorted(rows, key=lambda x: statistics.median(x[1]['wake>send'])):
    label = f"{exe.get(pid, '?')} {comm.get(pid, '')} ({pid})"
    print(f"{label[:36]:36} {len(r['recv']):6} " +
          ' '.join(f"{statistics.median(r[k]) / 1000:10.2f}" for k in keys))
print("\nmedians in µs; a process's threads together; steps: messages relayed in one "
      "read and one write between two waits")
EOF
