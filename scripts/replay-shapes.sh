#!/usr/bin/env bash
# Replay CPU per trace shape, two builds alternating (docs/performance.md, "Correlator replay").
#
#   scripts/replay-shapes.sh BEFORE AFTER [RUNS]
#
# BEFORE and AFTER are `windowtap` binaries (a copy of the build before, and
# target/release/windowtap). For each shape the trace is written once by the replay bench's
# generator (seeded: the same bytes every time), then replayed RUNS times (default 5) by each
# build in turn with `-o FILE`, and CPU (user + sys) read by /usr/bin/time. Prints every run and
# the median per shape and build in M events per CPU-second, and whether the two builds'
# records are byte-identical.
#
# Environment: SHAPES (default "busy bursts multihost"), EVENTS (default 1000000), DIR (traces
# and records, default target/replay-shapes), BENCH (the replay bench binary; default: built
# with `cargo bench -p correlator --bench replay --no-run`).
set -euo pipefail

before=${1:?usage: scripts/replay-shapes.sh BEFORE AFTER [RUNS]}
after=${2:?usage: scripts/replay-shapes.sh BEFORE AFTER [RUNS]}
runs=${3:-5}
shapes=${SHAPES:-busy bursts multihost}
events=${EVENTS:-1000000}
dir=${DIR:-target/replay-shapes}
mkdir -p "$dir"

if [ -z "${BENCH:-}" ]; then
    BENCH=$(cargo bench -p correlator --bench replay --no-run --message-format=json 2>/dev/null |
        sed -n 's/.*"executable":"\([^"]*\/replay-[^"]*\)".*/\1/p' | tail -n 1)
fi

for shape in $shapes; do
    trace=$dir/$shape-$events.jsonl
    if [ ! -f "$trace" ]; then
        REPLAY_BENCH_SHAPE=$shape REPLAY_BENCH_WRITE=$events REPLAY_BENCH_WRITE_TO=$trace \
            "$BENCH" >/dev/null
    fi
    for run in $(seq "$runs"); do
        for which in before after; do
            bin=${!which}
            /usr/bin/time -o "$dir/time" -f '%U %S %M' \
                "$bin" replay "$trace" -o "$dir/$shape.$which.records" 2>/dev/null
            read -r user sys rss <"$dir/time"
            awk -v s="$shape" -v r="$run" -v w="$which" -v u="$user" -v y="$sys" -v m="$rss" \
                -v n="$events" 'BEGIN { printf "%s run %d %s: %.2f s CPU, %.2f M events per CPU-second, max RSS %.1f MB\n", s, r, w, u + y, n / (u + y) / 1e6, m / 1024 }'
        done
    done
    if cmp -s "$dir/$shape.before.records" "$dir/$shape.after.records"; then
        echo "$shape: records byte-identical"
    else
        echo "$shape: RECORDS DIFFER"
    fi
done | tee "$dir/runs.txt"

# Medians per shape and build.
for shape in $shapes; do
    for which in before after; do
        grep "^$shape run [0-9]* $which:" "$dir/runs.txt" | awk '{ print $5 }' | sort -n |
            awk -v k="$shape $which" -v n="$events" '{ a[NR] = $1 }
                END { m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2;
                      printf "%s: median %.2f s CPU over %d runs, %.2f M events per CPU-second\n", k, m, NR, n / m / 1e6 }'
    done
done
