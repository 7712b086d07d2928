#!/usr/bin/env bash
# The report of a run of three short sessions with subagents, as docs/report.png shows it.
#
#   scripts/report-demo.sh [OUT_DIR]     # default: docs/ (report.html, report.png,
#                                        #   report-zoomed.png)
#
# The run is three bundled traces laid end to end over about 70 s, as one capture of one relay
# would hold them: a Claude Code session whose two parallel subagents call the same tool
# (traces/claude_parallel_agents_same_tool.jsonl), a Claude Code session with a subagent
# (claude_subagent_nested.jsonl) and a Codex thread with two parallel subagents
# (codex_parallel_subagents.jsonl). Each session's ids get a prefix so that they stay apart.
# Then `windowtap replay` and `windowtap report --trace`, as a user runs them, and a
# screenshot with headless Chromium (Debian: apt-get install -y chromium).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bin=${WINDOWTAP:-target/debug/windowtap}

python3 - "$work/run.jsonl" <<'PY'
import json, sys
IDS = {"stream", "request", "response", "call", "item", "thread", "host", "interval",
       "previous_response", "tool_use_id", "item_id", "call_id"}
TIMES = {"t", "start", "end"}
sessions = [("traces/claude_parallel_agents_same_tool.jsonl", "a-", 2_000),
            ("traces/claude_subagent_nested.jsonl", "b-", 24_000),
            ("traces/codex_parallel_subagents.jsonl", "c-", 61_000)]
events = []
for path, prefix, at in sessions:
    lines = [json.loads(l) for l in open(path) if l.strip()]
    t0 = min(e["t"] for e in lines[1:])
    for e in lines[1:]:
        for k in list(e):
            if k in IDS and isinstance(e[k], str):
                e[k] = prefix + e[k]
            elif k in TIMES and isinstance(e[k], (int, float)):
                e[k] = e[k] - t0 + at
        if "outputs" in e:
            e["outputs"] = [prefix + o for o in e["outputs"]]
        events.append(e)
events.sort(key=lambda e: e["t"])
with open(sys.argv[1], "w") as f:
    f.write(json.dumps({"type": "trace", "version": 2}) + "\n")
    for e in events:
        f.write(json.dumps(e, separators=(",", ":")) + "\n")
PY
bin=$(realpath "$bin")
# From the run's directory, so that the page names its files as a user's would.
(cd "$work" && "$bin" replay run.jsonl -o records.jsonl &&
  "$bin" report records.jsonl --trace run.jsonl -o "$out/report.html")
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,900 \
  --screenshot="$out/report.png" "file://$out/report.html" 2>/dev/null
# The same page zoomed: the turn of Claude Code's first subagent clicked, as a person would.
sed 's#</body>#<script>document.querySelectorAll("g.turn")[1].dispatchEvent(new MouseEvent("click",{bubbles:true}));</script></body>#' \
  "$out/report.html" > "$work/zoomed.html"
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,900 \
  --screenshot="$out/report-zoomed.png" "file://$work/zoomed.html" 2>/dev/null
echo "$out/report.html $out/report.png $out/report-zoomed.png"
