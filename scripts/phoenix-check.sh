#!/usr/bin/env bash
# Real-backend check of windowtap's OTLP export (not run in CI): installs Arize Phoenix into a
# venv under a scratch directory, starts `phoenix serve` on loopback, replays traces with
# `--otlp-endpoint`, then asks Phoenix's REST API for the spans and checks that every record
# arrived as an `execute_tool` span with the GenAI / MCP / windowtap attribute names.
#
#   scripts/phoenix-check.sh [TRACE.jsonl ...]     (default: a built-in two-call Codex trace)
#
# Environment: WINDOWTAP_PHOENIX_DIR (scratch dir, default $TMPDIR/windowtap-phoenix; the venv
# is reused across runs), WINDOWTAP (a built binary; default: cargo build, debug).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
scratch="${WINDOWTAP_PHOENIX_DIR:-${TMPDIR:-/tmp}/windowtap-phoenix}"
mkdir -p "$scratch"
venv="$scratch/venv"

if [ ! -x "$venv/bin/phoenix" ]; then
    echo "phoenix-check: installing arize-phoenix into $venv" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check arize-phoenix
fi
echo "phoenix-check: $("$venv/bin/pip" show arize-phoenix 2>/dev/null | grep -m1 '^Version:' || echo 'arize-phoenix ?')" >&2

if [ -z "${WINDOWTAP:-}" ]; then
    build_log="$scratch/build.log"
    (cd "$here" && cargo build -q --bin windowtap) 2>"$build_log" || {
        cat "$build_log" >&2; exit 1; }
    WINDOWTAP="$here/target/debug/windowtap"
fi

free_port() { "$venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port="$(free_port)"
grpc_port="$(free_port)"
work="$(mktemp -d "$scratch/run.XXXXXX")"
project="windowtap-check-$(date +%s)"

# Offline, loopback only, its own SQLite database under the scratch directory.
PHOENIX_HOST=127.0.0.1 PHOENIX_PORT="$port" PHOENIX_GRPC_PORT="$grpc_port" \
PHOENIX_WORKING_DIR="$work" PHOENIX_TELEMETRY_ENABLED=false \
    "$venv/bin/phoenix" serve >"$work/phoenix.log" 2>&1 &
phoenix_pid=$!
trap 'kill "$phoenix_pid" 2>/dev/null || true; wait "$phoenix_pid" 2>/dev/null || true' EXIT

base="http://127.0.0.1:$port"
for _ in $(seq 1 240); do
    if curl -fsS "$base/healthz" >/dev/null 2>&1; then break; fi
    if ! kill -0 "$phoenix_pid" 2>/dev/null; then
        echo "phoenix-check: phoenix serve exited; log:" >&2; cat "$work/phoenix.log" >&2; exit 1
    fi
    sleep 0.5
done
curl -fsS "$base/healthz" >/dev/null || { echo "phoenix-check: phoenix did not come up" >&2; exit 1; }
echo "phoenix-check: phoenix serving on $base (OTLP HTTP at $base/v1/traces)" >&2

if [ "$#" -eq 0 ]; then
    epoch_ms="$(( $(date +%s) * 1000 - 60000 ))"
    trace="$work/two-calls.jsonl"
    cat >"$trace" <<JSONL
{"type":"trace","version":1,"epoch_unix_ms":$epoch_ms}
{"type":"stream_open","t":0,"stream":"s1","client":"codex","transport":"websocket","thread":"th1"}
{"type":"request","t":6000,"stream":"s1","request":"q1","previous_response":null,"outputs":[]}
{"type":"response_start","t":6100,"stream":"s1","response":"r1","request":"q1"}
{"type":"tool_call","t":6905,"stream":"s1","response":"r1","call":"c1","item":"fc1","name":"echo","namespace":"mcp__probe","kind":"function"}
{"type":"response_end","t":6957,"stream":"s1","response":"r1","status":"completed"}
{"type":"mcp_interval","t":7265,"interval":"i1","alias":"probe","tool":"echo","start":7187,"end":7264,"outcome":"result","tool_use_id":null,"item_id":"fc1","call_id":"c1","thread":"th1"}
{"type":"request","t":7278,"stream":"s1","request":"q2","previous_response":"r1","outputs":[]}
{"type":"mcp_interval","t":20101,"interval":"i2","alias":"probe","tool":"slow","start":20000,"end":20100,"outcome":"error","tool_use_id":null,"item_id":null,"call_id":null,"thread":null}
JSONL
    set -- "$trace"
fi

# Phoenix files spans under the project named by the x-project-name header.
OTEL_EXPORTER_OTLP_HEADERS="x-project-name=$project" \
    "$WINDOWTAP" replay "$@" --otlp-endpoint "$base" -o "$work/records.jsonl" 2>"$work/replay.err"
cat "$work/replay.err" >&2
grep -q "^otlp: .* spans exported to $base/v1/traces$" "$work/replay.err" || {
    echo "phoenix-check: FAIL: the export did not report success" >&2; exit 1; }
records="$(wc -l <"$work/records.jsonl")"

"$venv/bin/python" - "$base" "$project" "$work/records.jsonl" <<'PY'
import json, sys, time, urllib.parse, urllib.request
base, project, records_file = sys.argv[1:4]
records = [json.loads(l) for l in open(records_file) if l.strip()]

def all_spans():
    """Every span of the project, following the REST API's cursor (1000 a page at most)."""
    out, cursor = [], None
    while True:
        q = {"limit": "1000"}
        if cursor:
            q["cursor"] = cursor
        url = f"{base}/v1/projects/{urllib.parse.quote(project)}/spans?" + urllib.parse.urlencode(q)
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                page = json.load(r)
        except urllib.error.HTTPError as e:
            if e.code == 404:  # the project appears with its first span
                return []
            raise
        out += page["data"]
        cursor = page.get("next_cursor")
        if not cursor:
            return out

# Ingestion is asynchronous: poll, bounded, until every record is a span.
spans = []
for _ in range(120):
    spans = all_spans()
    if len(spans) >= len(records):
        break
    time.sleep(0.5)
by_interval = {}
for s in spans:
    attrs = s.get("attributes") or {}
    by_interval[attrs.get("windowtap.interval")] = s
problems = []
if len(spans) != len(records):
    problems.append(f"{len(records)} records but {len(spans)} spans in Phoenix")
always = ["gen_ai.operation.name", "gen_ai.tool.name", "gen_ai.tool.call.id", "mcp.method.name",
          "mcp.server.name", "windowtap.decision", "windowtap.evidence", "windowtap.candidates",
          "windowtap.interval"]
for r in records:
    s = by_interval.get(r["interval"])
    if s is None:
        problems.append(f"no span for interval {r['interval']}"); continue
    a = s.get("attributes") or {}
    if s.get("name") != f"execute_tool {r['tool']}":
        problems.append(f"{r['interval']}: span name {s.get('name')!r}")
    for k in always:
        if k not in a:
            problems.append(f"{r['interval']}: attribute {k} missing")
    if a.get("gen_ai.operation.name") != "execute_tool":
        problems.append(f"{r['interval']}: gen_ai.operation.name {a.get('gen_ai.operation.name')!r}")
    if a.get("windowtap.decision") != r["decision"]:
        problems.append(f"{r['interval']}: decision {a.get('windowtap.decision')!r}")
    if list(a.get("windowtap.evidence") or []) != r["evidence"]:
        problems.append(f"{r['interval']}: evidence {a.get('windowtap.evidence')!r}")
    if r["window"] is not None and a.get("gen_ai.response.id") != r["window"]["response"]:
        problems.append(f"{r['interval']}: gen_ai.response.id {a.get('gen_ai.response.id')!r}")
    if r["reason"] is not None and a.get("windowtap.reason") != r["reason"]:
        problems.append(f"{r['interval']}: windowtap.reason {a.get('windowtap.reason')!r}")
for s in spans[:5]:
    a = s.get("attributes") or {}
    print(f"phoenix-check: span {s.get('name')!r} kind={s.get('span_kind')} "
          f"{s.get('start_time')} .. {s.get('end_time')} "
          f"trace={s.get('context', {}).get('trace_id')} span={s.get('context', {}).get('span_id')}",
          file=sys.stderr)
    print("    " + ", ".join(f"{k}={a[k]!r}" for k in sorted(a)), file=sys.stderr)
if problems:
    print("phoenix-check: FAIL", *problems, sep="\n  ", file=sys.stderr)
    sys.exit(1)
print(f"phoenix-check: OK: {len(records)} records arrived in Phoenix as execute_tool spans "
      f"with the GenAI, MCP and windowtap attributes", file=sys.stderr)
PY
