#!/usr/bin/env bash
# Real-backend check of windowtap's OTLP trace tree (not run in CI; CI runs the same checks
# against a test receiver in tests/otlp_replay.rs).
#
#   scripts/phoenix-check.sh [CAPTURE.jsonl ...]
#
# 1. installs Arize Phoenix into a venv under a scratch directory (reused across runs);
# 2. replays the bundled traces (traces/), a built-in demo trace with models and token usage,
#    and the given captures (e.g. a real-host capture under target/e2e/) into a small OTLP
#    sink of its own, which keeps every span windowtap sent (the expectation);
# 3. starts `phoenix serve` on loopback, replays the same files into it, and checks through
#    Phoenix's REST API that every exported span was stored, each with the same trace, parent,
#    name, status and attributes;
# 4. renders Phoenix's trace view of one Claude Code turn and one Codex turn to PNG with
#    headless Chromium (into $WINDOWTAP_PHOENIX_PNG_DIR, default the run's scratch directory).
#
# Span and trace ids are derived from each file's name and content, so both replays export the
# same ids (only the times differ: files without `epoch_unix_ms` are placed at "now"). For the
# same reason a capture given must not be a file of traces/ itself: its spans would be the
# bundled file's, stored once.
#
# Environment: WINDOWTAP_PHOENIX_DIR (scratch dir, default $TMPDIR/windowtap-phoenix),
# WINDOWTAP (a built binary; default: cargo build, debug), WINDOWTAP_PHOENIX_PNG_DIR.
# Needs python3 (and PyPI once) and chromium (Debian: apt-get install -y chromium).
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
echo "phoenix-check: arize-phoenix $("$venv/bin/pip" show arize-phoenix 2>/dev/null | sed -n 's/^Version: //p')" >&2
chromium="$(command -v chromium || command -v chromium-browser || true)"

if [ -z "${WINDOWTAP:-}" ]; then
    build_log="$scratch/build.log"
    (cd "$here" && cargo build -q --bin windowtap) 2>"$build_log" || {
        cat "$build_log" >&2; exit 1; }
    WINDOWTAP="$here/target/debug/windowtap"
fi

free_port() { "$venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
work="$(mktemp -d "$scratch/run.XXXXXX")"
png_dir="${WINDOWTAP_PHOENIX_PNG_DIR:-$work}"
mkdir -p "$png_dir"
project="windowtap-check-$(date +%s)"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

# A demo session with what a capture of real hosts holds: models, token usage and stop reasons.
# A Claude Code turn (two MCP calls in parallel, then a final answer) and a Codex turn on a
# WebSocket (one MCP call, then the answer). Ids are already pseudonyms, as in a capture; a
# completed Responses response reports no stop reason.
demo="$work/demo-session.jsonl"
"$venv/bin/python" - "$demo" <<'PY'
import json, sys, time
epoch = int(time.time() * 1000) - 120_000
C, X = "9f1c0d2e7a4b8c61", "3e5a77b90c1d2f48"
ev = [{"type": "trace", "version": 2, "epoch_unix_ms": epoch}]
def e(t, type, **kw): ev.append(dict(type=type, t=t, **kw))
u = lambda i, o, cr, cc: {"input": i, "output": o, "cache_read": cr, "cache_creation": cc}
# Claude Code: r1 asks for two MCP calls, r2 answers.
e(0, "stream_open", stream="c1", client="claude", transport="http", thread=C, host="h1")
e(4, "request", stream="c1", request="q1", previous_response=None, outputs=[])
e(900, "response_start", stream="c1", response="r1", request="q1", model="claude-sonnet-4-5")
e(2100, "tool_call", stream="c1", response="r1", call="tu1", item=None, name="mcp__probe__echo", namespace=None, kind="tool_use")
e(2400, "tool_call", stream="c1", response="r1", call="tu2", item=None, name="mcp__fs__read_file", namespace=None, kind="tool_use")
e(2450, "response_end", stream="c1", response="r1", status="completed", usage=u(12, 161, 18310, 1204), stop_reason="tool_use")
e(2451, "stream_close", stream="c1")
e(2160, "mcp_start", interval="m1", alias="probe", tool="echo", start=2150, host="h1")
e(2420, "mcp_start", interval="m2", alias="fs", tool="read_file", start=2410, host="h1")
e(2702, "mcp_interval", interval="m1", alias="probe", tool="echo", start=2150, end=2700, outcome="result", tool_use_id="tu1", item_id=None, call_id=None, thread=None, host="h1")
e(3302, "mcp_interval", interval="m2", alias="fs", tool="read_file", start=2410, end=3300, outcome="result", tool_use_id="tu2", item_id=None, call_id=None, thread=None, host="h1")
e(3360, "stream_open", stream="c2", client="claude", transport="http", thread=C, host="h1")
e(3362, "request", stream="c2", request="q2", previous_response=None, outputs=["tu1", "tu2"])
e(4100, "response_start", stream="c2", response="r2", request="q2", model="claude-sonnet-4-5")
e(6900, "response_end", stream="c2", response="r2", status="completed", usage=u(9, 412, 19514, 390), stop_reason="end_turn")
e(6901, "stream_close", stream="c2")
# Codex over one WebSocket.
e(8000, "stream_open", stream="x1", client="codex", transport="websocket", thread=X, host="h2")
e(8010, "request", stream="x1", request="q3", previous_response=None, outputs=[])
e(8500, "response_start", stream="x1", response="r3", request="q3", model="gpt-5-codex")
e(9700, "tool_call", stream="x1", response="r3", call="call1", item="fc1", name="lookup", namespace="mcp__probe", kind="function")
e(9760, "response_end", stream="x1", response="r3", status="completed", usage=u(8123, 96, 6912, None))
e(10602, "mcp_interval", interval="m3", alias="probe", tool="lookup", start=9800, end=10600, outcome="result", tool_use_id=None, item_id="fc1", call_id="call1", thread=X, host="h2")
e(10640, "request", stream="x1", request="q4", previous_response="r3", outputs=[])
e(10900, "response_start", stream="x1", response="r4", request="q4", model="gpt-5-codex")
e(12400, "response_end", stream="x1", response="r4", status="completed", usage=u(8390, 233, 8064, None))
e(12500, "stream_close", stream="x1")
head, body = ev[0], sorted(ev[1:], key=lambda d: d["t"])
for d in body:
    if d.get("usage") and d["usage"].get("cache_creation") is None:
        d["usage"].pop("cache_creation")
with open(sys.argv[1], "w") as f:
    for d in [head] + body:
        f.write(json.dumps(d) + "\n")
PY

inputs=("$here/traces" "$demo" "$@")
for f in "$@"; do echo "phoenix-check: also replaying $f" >&2; done

# 1. The expectation: every span windowtap sends, as a small OTLP/HTTP sink decodes it.
sink_port="$(free_port)"
"$venv/bin/python" - "$sink_port" "$work/expected.jsonl" >"$work/sink.log" 2>&1 <<'PY' &
import gzip, json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest, ExportTraceServiceResponse)
from google.protobuf.json_format import MessageToDict
port, out = int(sys.argv[1]), sys.argv[2]
class H(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        if self.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        req = ExportTraceServiceRequest.FromString(body)
        with open(out, "a") as f:
            for rs in req.resource_spans:
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        f.write(json.dumps({
                            "trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(),
                            "parent_id": s.parent_span_id.hex() or None, "name": s.name,
                            "status": s.status.code,
                            "attributes": {kv.key: MessageToDict(kv.value) for kv in s.attributes},
                            "links": [l.span_id.hex() for l in s.links],
                        }) + "\n")
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)
    def log_message(self, *a):
        pass
HTTPServer(("127.0.0.1", port), H).serve_forever()
PY
pids+=($!)
for _ in $(seq 1 100); do
    curl -s -o /dev/null "http://127.0.0.1:$sink_port/" 2>/dev/null && break
    sleep 0.1
done
: >"$work/expected.jsonl"
"$WINDOWTAP" replay "${inputs[@]}" --otlp-endpoint "http://127.0.0.1:$sink_port" \
    -o "$work/records-sink.jsonl" 2>"$work/replay-sink.err" || {
    cat "$work/replay-sink.err" >&2; exit 1; }

# 2. Phoenix: offline, loopback only, its own SQLite database under the scratch directory.
port="$(free_port)"
grpc_port="$(free_port)"
PHOENIX_HOST=127.0.0.1 PHOENIX_PORT="$port" PHOENIX_GRPC_PORT="$grpc_port" \
PHOENIX_WORKING_DIR="$work" PHOENIX_TELEMETRY_ENABLED=false \
    "$venv/bin/phoenix" serve >"$work/phoenix.log" 2>&1 &
phoenix_pid=$!
pids+=("$phoenix_pid")
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

# Phoenix files spans under the project named by the x-project-name header.
OTEL_EXPORTER_OTLP_HEADERS="x-project-name=$project" \
    "$WINDOWTAP" replay "${inputs[@]}" --otlp-endpoint "$base" -o "$work/records.jsonl" \
    2>"$work/replay.err"
cat "$work/replay.err" >&2
exported="$(sed -n "s|^otlp: \([0-9]*\) spans exported to $base/v1/traces\$|\1|p" "$work/replay.err")"
[ -n "$exported" ] || { echo "phoenix-check: FAIL: the export did not report success" >&2; exit 1; }

# 3. Compare what Phoenix stored with what was sent; pick the turns to render.
"$venv/bin/python" - "$base" "$project" "$work/expected.jsonl" "$exported" "$work/render.tsv" "$here/scripts" <<'PY'
import json, sys, time
base, project, expected_file, exported, render_out = sys.argv[1:6]
exported = int(exported)
expected = [json.loads(l) for l in open(expected_file) if l.strip()]

sys.path.insert(0, sys.argv[6])
import phoenix_api  # noqa: E402
get = lambda path, **q: phoenix_api.get(base, path, **q)
all_spans = lambda: phoenix_api.project_spans(base, project)

# Ingestion is asynchronous: poll, bounded, until every exported span is there.
stored = []
for _ in range(240):
    stored = all_spans()
    if len(stored) >= exported:
        break
    time.sleep(0.5)
time.sleep(1.0)
stored = all_spans()

def value(v):
    """An OTLP AnyValue (as JSON) in the form Phoenix's REST API returns attributes."""
    if "stringValue" in v: return v["stringValue"]
    if "intValue" in v: return int(v["intValue"])
    if "doubleValue" in v: return float(v["doubleValue"])
    if "boolValue" in v: return v["boolValue"]
    if "arrayValue" in v: return [value(x) for x in v["arrayValue"].get("values", [])]
    return v

problems = []
if not (len(expected) == exported == len(stored)):
    problems.append(f"sent {len(expected)} spans to the sink, {exported} exported to Phoenix, "
                    f"{len(stored)} stored")
by_id = {s["context"]["span_id"]: s for s in stored}
if len(by_id) != len(stored):
    problems.append(f"{len(stored) - len(by_id)} span ids stored twice")
for x in expected:
    s = by_id.get(x["span_id"])
    where = f"{x['name']} {x['span_id']}"
    if s is None:
        problems.append(f"{where}: not stored"); continue
    if s["context"]["trace_id"] != x["trace_id"]:
        problems.append(f"{where}: trace {s['context']['trace_id']} != {x['trace_id']}")
    if (s.get("parent_id") or None) != x["parent_id"]:
        problems.append(f"{where}: parent {s.get('parent_id')} != {x['parent_id']}")
    if s["name"] != x["name"]:
        problems.append(f"{where}: name {s['name']!r}")
    if (s["status_code"] == "ERROR") != (x["status"] == 2):
        problems.append(f"{where}: status {s['status_code']}")
    a = s.get("attributes") or {}
    for k, v in x["attributes"].items():
        want, got = value(v), a.get(k)
        if isinstance(want, float) and isinstance(got, (int, float)):
            ok = abs(want - got) < 1e-6
        else:
            ok = got == want or (isinstance(want, list) and list(got or []) == want)
        if not ok:
            problems.append(f"{where}: {k} = {got!r}, sent {want!r}")
kinds = {}
for s in stored:
    kinds[s.get("span_kind")] = kinds.get(s.get("span_kind"), 0) + 1
traces = {s["context"]["trace_id"] for s in stored}
print(f"phoenix-check: {len(stored)} spans stored in {len(traces)} traces "
      f"({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))}); {exported} exported",
      file=sys.stderr)
if problems:
    print("phoenix-check: FAIL", *problems[:40], sep="\n  ", file=sys.stderr)
    sys.exit(1)

# One Claude Code turn and one Codex turn to render: a root whose trace holds a chat span
# with a model and an MCP call under a chat span; the last such (the demo or a capture) wins.
project_id = next(p["id"] for p in get("/v1/projects")["data"] if p["name"] == project)
children = {}
for x in expected:
    children.setdefault(x["parent_id"], []).append(x)
picked = {}
for root in (x for x in expected if x["parent_id"] is None):
    agent = root["name"].removeprefix("invoke_agent ").strip()
    chats = [c for c in children.get(root["span_id"], []) if c["name"].startswith("chat ")]
    calls = [t for c in chats for t in children.get(c["span_id"], [])
             if "windowtap.interval" in t["attributes"]]
    if agent in ("Claude Code", "Codex") and chats and calls:
        picked[agent] = (root["trace_id"], by_id[chats[0]["span_id"]]["id"])
with open(render_out, "w") as f:
    for agent, (trace, node) in sorted(picked.items()):
        slug = agent.lower().replace(" ", "-")
        f.write(f"{slug}\t{base}/projects/{project_id}/traces/{trace}?selectedSpanNodeId={node}\n")
print(f"phoenix-check: OK: every exported span stored with its trace, parent, name, status "
      f"and attributes", file=sys.stderr)
PY

# 4. Phoenix's own trace view of each picked turn, as a user opens it.
if [ -z "$chromium" ]; then
    echo "phoenix-check: no chromium: skipping the pictures (apt-get install -y chromium)" >&2
    exit 0
fi
while IFS=$'\t' read -r slug url; do
    png="$png_dir/phoenix-$slug-turn.png"
    timeout 120 "$chromium" --headless=new --no-sandbox --disable-gpu --hide-scrollbars \
        --window-size=1600,1000 --virtual-time-budget=15000 --screenshot="$png" "$url" \
        >/dev/null 2>&1 || { echo "phoenix-check: FAIL: chromium could not render $url" >&2; exit 1; }
    echo "phoenix-check: $slug turn: $png" >&2
done <"$work/render.tsv"
