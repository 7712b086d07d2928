#!/bin/sh
# Runs the relay bench's floor (a bare tokio copy loop) in the bench's `windowtap-before`
# slot, with a read size of its own, so two floors that differ only in their read size run
# interleaved in one bench run:
#
#   BEFORE_FLOOR_READ=4096 target/release/deps/relay-HASH --proxies windowtap-before,nginx,floor \
#       --windowtap-before scripts/floor-as-before.sh --only ws-throughput --rounds 24
#
# The bench starts this script as it starts windowtap: `relay --listen ADDR --ingest PATH
# --upstream anthropic=http://UPSTREAM ...`; the floor is the bench binary itself, this
# script's parent. BEFORE_FLOOR_READ (bytes, default 4096) becomes this floor's FLOOR_READ;
# the bench's own `floor` keeps its 16 KiB unless FLOOR_READ is set for the whole bench.
set -eu
[ "$1" = relay ] && [ "$2" = --listen ] || { echo "floor-as-before.sh: unexpected arguments" >&2; exit 2; }
listen=$3
upstream=${7#anthropic=http://}
FLOOR_READ=${BEFORE_FLOOR_READ:-4096} exec "/proc/$PPID/exe" --floor-proxy "$listen" "$upstream"
