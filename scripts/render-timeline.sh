#!/usr/bin/env bash
# Renders a windowtap timeline to a PNG with headless Chromium, to see what `windowtap report`
# draws.
#
#   scripts/render-timeline.sh                         # a demo run -> docs/timeline.png
#   scripts/render-timeline.sh TRACE [OUT.png]         # replay TRACE, report it, screenshot it
#
# Needs chromium (Debian: apt-get install -y chromium) and python3 for the demo trace. The
# demo is a hand-made but realistic ~23 s run: a Claude Code session with a subagent (HTTP, one
# stream per exchange, a side request, a slow call, lost observation at the end) and a Codex
# thread on one WebSocket, chosen so that every decision appears once or more.
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

trace=${1:-}
png=${2:-docs/timeline.png}
if [[ -z "$trace" ]]; then
  trace="$work/demo.jsonl"
  python3 - "$trace" <<'PY'
import json, sys
ev = []
def e(t, type, **kw):
    ev.append((t, len(ev), dict(type=type, t=t, **kw)))
C, A, X = "sess-4b1e", "sess-4b1e:agent-a7", "019a-th"
def claude(stream, thread, t_open, req, outputs, resp, calls, t_start, t_end, close=True, status="completed"):
    e(t_open, "stream_open", stream=stream, client="claude", transport="http", thread=thread)
    e(t_open + 5, "request", stream=stream, request=req, previous_response=None, outputs=outputs)
    e(t_start, "response_start", stream=stream, response=resp, request=req)
    for t, call, name in calls:
        e(t, "tool_call", stream=stream, response=resp, call=call, item=None, name=name, namespace=None, kind="tool_use")
    if t_end is not None:
        e(t_end, "response_end", stream=stream, response=resp, status=status)
    if close:
        e((t_end or t_start) + 2, "stream_close", stream=stream)
def mcp(i, alias, tool, s, end, tool_use_id=None, item_id=None, call_id=None, thread=None, start_event=False):
    if start_event:
        e(s + 1, "mcp_start", interval=i, alias=alias, tool=tool, start=s)
    e(end + 2, "mcp_interval", interval=i, alias=alias, tool=tool, start=s, end=end, outcome="result",
      tool_use_id=tool_use_id, item_id=item_id, call_id=call_id, thread=thread)

# Claude Code main thread: two parallel calls, then a slow one.
claude("c1", C, 0, "q1", [], "r1", [(1800, "toolu_01", "mcp__probe__echo"), (2300, "toolu_02", "mcp__fs__read_file")], 400, 2500)
mcp("i1", "probe", "echo", 1850, 2100, tool_use_id="toolu_01")
mcp("i2", "fs", "read_file", 2350, 2900, tool_use_id="toolu_02")
claude("c2", C, 2960, "q2", ["toolu_01", "toolu_02"], "r2", [(5200, "toolu_03", "mcp__probe__slow")], 3400, 5400)
claude("cs", C, 4000, "qs1", [], "rs1", [], 4200, 4600)              # side request: no window
mcp("i3", "probe", "slow", 5250, 8800, tool_use_id="toolu_03", start_event=True)
claude("c3", C, 8845, "q3", ["toolu_03"], "r3", [], 9300, 11000)
# A subagent, running while the main thread's slow call is still open: ambiguous.
claude("a1", A, 6000, "qa1", [], "ra1", [(7000, "toolu_a1", "mcp__fs__grep")], 6300, 7100)
mcp("i4", "fs", "grep", 7050, 7600, tool_use_id="toolu_a1")
claude("a2", A, 7695, "qa2", ["toolu_a1"], "ra2", [(9500, "toolu_a2", "mcp__fs__read_file")], 8000, 9600)
mcp("i5", "fs", "read_file", 9550, 9900, tool_use_id="toolu_zz")   # names another call
claude("a3", A, 9995, "qa3", ["toolu_a2"], "ra3", [], 10300, 11500)

# Codex on one WebSocket.
e(500, "stream_open", stream="x1", client="codex", transport="websocket", thread=X)
def codex_turn(req, prev, t_req, resp, t_start, calls, t_end):
    e(t_req, "request", stream="x1", request=req, previous_response=prev, outputs=[])
    e(t_start, "response_start", stream="x1", response=resp, request=req)
    for t, call, item, name, ns in calls:
        e(t, "tool_call", stream="x1", response=resp, call=call, item=item, name=name, namespace=ns, kind="function")
    e(t_end, "response_end", stream="x1", response=resp, status="completed")
codex_turn("qx1", None, 1000, "rx1", 1200, [(3000, "call_x1", "fc_x1", "echo", "mcp__probe")], 3100)
mcp("i6", "probe", "echo", 3150, 3400, item_id="fc_x1", call_id="call_x1", thread=X)
codex_turn("qx2", "rx1", 3450, "rx1b", 3600, [], 4100)
mcp("i7", "probe", "echo", 12500, 12600)                               # no model call: no window
codex_turn("qx3", None, 12900, "rx2", 13000, [(13800, "call_x2", "fc_x2", "echo", "mcp__probe")], 13900)
mcp("i8", "probe", "echo", 13850, 14200, item_id="fc_x2", call_id="call_x2", thread=X)
codex_turn("qx4", "rx2", 16500, "rx3", 16800,                         # continued late: unclosed
           [(17600, "call_x3", "fc_x3", "echo", "mcp__probe"), (17700, "call_x4", "fc_x4", "read_file", "mcp__fs")], 17800)
mcp("i9", "probe", "echo", 17650, 17900, item_id="fc_x3", call_id="call_x3", thread=X)
mcp("i10", "fs", "read_file", 17750, 18300, item_id="fc_x4", call_id="call_x4", thread=X)
codex_turn("qx5", "rx3", 18350, "rx4", 18600, [], 19500)

# Claude again; observation of its stream is lost mid-response.
claude("c4", C, 20500, "q4", [], "r4", [(21400, "toolu_04", "mcp__fs__read_file")], 20800, None, close=False)
e(21800, "observation_lost", stream="c4", reason="decode")
mcp("i11", "fs", "read_file", 21450, 22100, tool_use_id="toolu_04")
e(23000, "stream_close", stream="c4")
e(23500, "stream_close", stream="x1")

ev.sort(key=lambda x: (x[0], x[1]))
with open(sys.argv[1], "w") as f:
    f.write('{"type":"trace","version":1}\n')
    for _, _, d in ev:
        f.write(json.dumps(d, separators=(",", ":")) + "\n")
PY
fi

cargo build --quiet --bin windowtap
bin=$PWD/target/debug/windowtap
trace=$(realpath "$trace")
# Run from the work directory so the page names the files, not temporary paths.
(
  cd "$work"
  "$bin" replay "$trace" -o records.jsonl
  "$bin" check "$trace" records.jsonl
  if [[ "$trace" == "$work/"* ]]; then trace=${trace#"$work/"}; fi
  "$bin" report records.jsonl --trace "$trace" -o timeline.html
)
if [[ -n "${KEEP_HTML:-}" ]]; then cp "$work/timeline.html" "$KEEP_HTML"; fi

mkdir -p "$(dirname "$png")"
chromium --headless --no-sandbox --disable-gpu --disable-background-networking \
  --disable-component-update --disable-sync --no-first-run --user-data-dir="$work/profile" \
  --hide-scrollbars --screenshot="$png" --window-size=1400,900 "file://$work/timeline.html" 2>/dev/null
echo "wrote $png"
