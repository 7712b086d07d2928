#!/usr/bin/env bash
# End-to-end run of windowtap with the real hosts (Claude Code, Codex CLI) against a scripted
# model upstream, offline: everything runs inside `unshare -n`, where only loopback exists.
# Not part of CI (it installs ~700 MB of host binaries). See docs/e2e.md.
#
# For every scenario (host x transport x tool mode) and every hold (E2E_HOLDS), the host runs
# twice against a fresh scripted upstream: once pointed straight at it ("direct"), once
# through windowtap. The script then checks that
#   - every MCP call the host made is attributed, with identity evidence (`tool_use_id` for
#     Claude Code; `item_id` and `thread` for Codex), in windowtap's records;
#   - the host's own output (stream-json / exec --json, ids and timings dropped) is the same
#     with and without windowtap;
#   - no canary planted in the prompt, the API key or the tool argument appears in anything
#     windowtap wrote (records, trace, its stderr);
# and prints a summary table. Exit code 0 only when every row passes.
#
# claude-subagent-blocking / -background: the main thread spawns a subagent (`Agent`,
# run_in_background false / true) and the subagent calls the MCP tool (scripted upstream's
# --subagent). claude-subagent-parallel: one response launches two subagents at once, whose
# 3 s calls of the one tool overlap inside each other's windows (issue 25);
# codex-subagent-parallel the same with Codex's spawn_agent (two subagents, then wait_agent).
# sdk-*: programs built on agent SDKs (issue 37), run directly and through `windowtap run --
# PROGRAM`, their MCP server declared in the program as `windowtap wrap --alias probe -- …`
# with no --ingest, started by the SDK with its own small environment: the OpenAI Agents SDK
# in Python (sdk-openai-py: Runner.run_streamed; -json: Runner.run, a JSON answer; -parallel:
# two agents of one process calling the one tool at once, each call 3 s, which must be
# `ambiguous`; -parallel-meta: the same with a tool_meta_resolver putting the model's call id
# in `_meta.callId`, each attributed to its own window) and in JavaScript (sdk-openai-js,
# -json: @openai/agents), and the Claude Agent SDK in Python (sdk-claude-py, which drives the
# Claude Code CLI installed above); and OpenCode (sdk-opencode), a client pointed at a base URL
# that shows the model an MCP tool as `<alias>_<tool>`, which no route names: its calls must be
# `no_window`, never attributed. See scripts/e2e-sdk/ and docs/e2e.md.
# shared-relay: one `windowtap relay` started by hand serves five concurrent
# sessions of both hosts, one SIGKILLed mid-call, and is then stopped with SIGINT; it is checked
# per session (see shared_relay below and docs/e2e.md). shared-relay-hosts-off runs it once
# more with `--hosts off` and checks every session is decided as with hosts on. report-run:
# one relay, five real sessions (parallel Claude Code subagents, one server left unwrapped),
# reported and photographed in headless Chromium (see report_run below).
#
# Environment:
#   E2E_HOLDS       holds (ms) of the terminal event after the tool call item (default "0 1500")
#   E2E_SCENARIOS   subset of scenario names (default: all, see `scenarios` below)
#   E2E_DIRECT_ONLY=1  only the direct runs (checks the hosts and the scripted upstream)
#   E2E_REQUIRE_HOST=1 the scenario rows also need the evidence word `host` (shared-relay
#                   always does)
#   E2E_SHARED_LONG_MS  shared-relay: how long session A's MCP call runs (default 8000)
#   E2E_REPORT_GAP_S    report-run: seconds between the four sessions and the last (default 20)
#   E2E_REPORT_PNG_DIR  report-run: where its two screenshots go (default: its run directory)
#   CLAUDE_CODE_VERSION, CODEX_VERSION  npm versions to install (default: the ones below)
#   OPENAI_AGENTS_VERSION, CLAUDE_AGENT_SDK_VERSION, OPENAI_AGENTS_JS_VERSION  the SDKs' (PyPI,
#                   PyPI, npm) for the sdk-* rows, installed into target/e2e/sdk
#   E2E_PHOENIX     a venv with arize-phoenix (scripts/phoenix-real-claude.sh sets it): Phoenix
#                   runs inside the namespace; each windowtap leg (`windowtap run` only) adds
#                   `--join-host-trace --otlp-endpoint` toward it, and scripts/phoenix-joined.py
#                   checks through Phoenix's API that the host's spans and windowtap's are one
#                   trace; a picture of it goes to DIR/phoenix-trace.png (needs chromium;
#                   with E2E_PHOENIX_NODE_PATH, a node_modules holding playwright-core, the
#                   picture shows the MCP call's attributes, scripts/phoenix-picture.mjs)
#   E2E_PHOENIX_EXPECT  per host, the span the chat spans must hang under, e.g.
#                   "claude=claude_code.llm_request" (a host not named is only reported)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
E2E=$ROOT/target/e2e
CLAUDE_CODE_VERSION=${CLAUDE_CODE_VERSION:-2.1.332}
CODEX_VERSION=${CODEX_VERSION:-0.171.0}
OPENAI_AGENTS_VERSION=${OPENAI_AGENTS_VERSION:-0.25.0}
CLAUDE_AGENT_SDK_VERSION=${CLAUDE_AGENT_SDK_VERSION:-0.2.190}
OPENAI_AGENTS_JS_VERSION=${OPENAI_AGENTS_JS_VERSION:-0.20.0}
OPENCODE_VERSION=${OPENCODE_VERSION:-1.18.33}
ALIAS=probe
TOOL=echo

say() { printf '[e2e] %s\n' "$*" >&2; }
die() { printf '[e2e] error: %s\n' "$*" >&2; exit 1; }

# ------------------------------------------------------------------ outside the namespace
if [ -z "${WINDOWTAP_E2E_INSIDE:-}" ]; then
    for cmd in node npm python3 cargo unshare ip; do
        command -v "$cmd" >/dev/null || die "$cmd is needed"
    done
    mkdir -p "$E2E/npm"
    # Installed once per version pair; reruns reuse target/e2e/npm.
    stamp="$E2E/npm/.installed-$CLAUDE_CODE_VERSION-$CODEX_VERSION"
    if [ ! -f "$stamp" ]; then
        say "installing @anthropic-ai/claude-code@$CLAUDE_CODE_VERSION @openai/codex@$CODEX_VERSION"
        (cd "$E2E/npm" &&
            { [ -f package.json ] || echo '{"name":"windowtap-e2e-hosts","private":true}' >package.json; } &&
            npm install --no-audit --no-fund --loglevel=error \
                "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" "@openai/codex@$CODEX_VERSION" >&2)
        rm -f "$E2E"/npm/.installed-*
        touch "$stamp"
    fi
    # The agent SDKs of the sdk-* rows: a venv and a node_modules of their own.
    sdk_stamp="$E2E/sdk/.installed-$OPENAI_AGENTS_VERSION-$CLAUDE_AGENT_SDK_VERSION-$OPENAI_AGENTS_JS_VERSION"
    if [ ! -f "$sdk_stamp" ]; then
        say "installing openai-agents==$OPENAI_AGENTS_VERSION claude-agent-sdk==$CLAUDE_AGENT_SDK_VERSION @openai/agents@$OPENAI_AGENTS_JS_VERSION"
        mkdir -p "$E2E/sdk/js"
        [ -x "$E2E/sdk/venv/bin/python" ] || python3 -m venv "$E2E/sdk/venv"
        "$E2E/sdk/venv/bin/pip" install -q "openai-agents==$OPENAI_AGENTS_VERSION" \
            "claude-agent-sdk==$CLAUDE_AGENT_SDK_VERSION" >&2
        (cd "$E2E/sdk/js" &&
            { [ -f package.json ] || echo '{"name":"windowtap-e2e-sdk","private":true,"type":"module"}' >package.json; } &&
            npm install --no-audit --no-fund --loglevel=error "@openai/agents@$OPENAI_AGENTS_JS_VERSION" zod >&2)
        rm -f "$E2E"/sdk/.installed-*
        touch "$sdk_stamp"
    fi
    if [ ! -f "$E2E/opencode/.installed-$OPENCODE_VERSION" ]; then
        say "installing opencode-ai@$OPENCODE_VERSION"
        mkdir -p "$E2E/opencode"
        (cd "$E2E/opencode" &&
            { [ -f package.json ] || echo '{"name":"windowtap-e2e-opencode","private":true}' >package.json; } &&
            npm install --no-audit --no-fund --loglevel=error "opencode-ai@$OPENCODE_VERSION" >&2)
        rm -f "$E2E"/opencode/.installed-*
        touch "$E2E/opencode/.installed-$OPENCODE_VERSION"
    fi
    say "building windowtap and the scripted upstream (release)"
    (cd "$ROOT" && cargo build --release --bin windowtap --example scripted_upstream >&2)
    say "entering a network namespace with loopback only (and a mount namespace of its own)"
    exec unshare -n -m --propagation private env WINDOWTAP_E2E_INSIDE=1 bash "${BASH_SOURCE[0]}" "$@"
fi

# ------------------------------------------------------------------ inside the namespace
ip link set lo up
# Fresh /tmp and /run/user, seen only inside: the shared-relay scenario runs the relay and the
# wrappers on their default ingest socket, $XDG_RUNTIME_DIR/windowtap/ingest.sock with
# XDG_RUNTIME_DIR=/run/user/<uid> as a desktop login sets it, and neither may find a socket of
# some other relay on this machine (a Unix socket path reaches across network namespaces).
mkdir -p /run/user
mount -t tmpfs -o mode=0755 tmpfs /run/user
mkdir -m 0700 "/run/user/$(id -u)"
mount -t tmpfs -o mode=1777 tmpfs /tmp
export XDG_RUNTIME_DIR=/run/user/$(id -u)
BIN=$E2E/npm/node_modules/.bin
WT=${WINDOWTAP_BIN:-$ROOT/target/release/windowtap}
UPSTREAM=$ROOT/target/release/examples/scripted_upstream
RUNS=$E2E/runs
# Unlinked before they are written: a target/ hard-linked from another worktree's would
# otherwise share these files' inodes, and a run there would rewrite the scripts of a run here.
rm -f "$E2E/echo_mcp.py" "$E2E/check.py" "$E2E/check_shared.py" "$E2E/summary.txt"
rm -rf "$RUNS"
mkdir -p "$RUNS"
"$BIN/claude" --version >/dev/null 2>&1 || die "claude does not start (npm install incomplete?)"
"$BIN/codex" --version >/dev/null 2>&1 || die "codex does not start (npm install incomplete?)"
CLAUDE_VER=$("$BIN/claude" --version 2>/dev/null | head -1)
CODEX_VER=$("$BIN/codex" --version 2>/dev/null | head -1)

# Canaries: none of these may appear in anything windowtap writes.
CANARY=$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')
PROMPT="Call the $TOOL tool once. canary-prompt-$CANARY"
API_KEY="sk-canary-key-$CANARY"
TOOL_INPUT="{\"text\":\"canary-arg-$CANARY\"}"

# A tiny stdio MCP server: one tool, `echo`. It answers `initialize` (both hosts fall back to it
# when `server/discover` is refused, seed 003) and refuses everything else it does not know.
# Calls run concurrently, each on a thread of its own. Two variables, set per session in the
# host's MCP server config, shape its calls:
#   E2E_SLEEP_MS  each tools/call sleeps this long before answering (default 0);
#   E2E_MARKER    a file it appends one line to when a tools/call starts and when it ends:
#                 {"ev":"start"|"end","t":<unix seconds>,"pid":<its pid>,"ppid":<its parent>}
#                 (never the arguments). The shared-relay scenario waits on it and kills by it.
cat >"$E2E/echo_mcp.py" <<'PY'
import json
import os
import sys
import threading
import time

SLEEP_S = int(os.environ.get("E2E_SLEEP_MS") or 0) / 1000.0
MARKER = os.environ.get("E2E_MARKER")

SUPPORTED = ["2025-11-25", "2025-06-18", "2025-03-26"]
TOOL = {"name": "echo", "description": "Echoes its text argument back.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}},
                        "required": ["text"]}}


def mark(ev):
    if MARKER:
        with open(MARKER, "a") as f:
            f.write(json.dumps({"ev": ev, "t": time.time(), "pid": os.getpid(),
                                "ppid": os.getppid()}) + "\n")


WRITE = threading.Lock()


def reply(msg_id, result=None, error=None):
    out = {"jsonrpc": "2.0", "id": msg_id}
    if error is not None:
        out["error"] = error
    else:
        out["result"] = result
    with WRITE:
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


def call(msg_id, text):
    mark("start")
    if SLEEP_S > 0:
        time.sleep(SLEEP_S)
    mark("end")
    reply(msg_id, {"content": [{"type": "text", "text": "echo: " + text}], "isError": False})


for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if not isinstance(msg, dict) or msg.get("id") is None:
        continue  # notifications need no answer
    method, msg_id, params = msg.get("method"), msg["id"], msg.get("params") or {}
    if method == "initialize":
        asked = params.get("protocolVersion")
        reply(msg_id, {"protocolVersion": asked if asked in SUPPORTED else SUPPORTED[0],
                       "capabilities": {"tools": {}},
                       "serverInfo": {"name": "e2e-echo", "version": "0"}})
    elif method == "tools/list":
        reply(msg_id, {"tools": [TOOL]})
    elif method == "tools/call":
        # Each call on a thread of its own: calls that arrive together (parallel subagents
        # of one host share its server) run at once, as an ordinary server's do.
        text = str((params.get("arguments") or {}).get("text", ""))
        threading.Thread(target=call, args=(msg_id, text)).start()
    elif method == "ping":
        reply(msg_id, {})
    else:
        reply(msg_id, error={"code": -32601, "message": "Method not found"})
PY

# The checker: normalizes host output, reads records, looks for canaries.
cat >"$E2E/check.py" <<'PY'
import json
import os
import re
import sys


def lines(path):
    out = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
    except FileNotFoundError:
        pass
    return out


# What differs on every run in texts Claude Code writes itself (a subagent's hand-back in the
# Agent tool_result): the agent id, the session's uuid, the task output file's directory, the
# subagent's duration.
VOLATILE = [
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<uuid>"),
    (re.compile(r"\ba[0-9a-f]{16}\b"), "<agent-id>"),
    (re.compile(r"/\S*/tasks/"), "<tasks>/"),
    (re.compile(r"duration_ms: \d+"), "duration_ms: <ms>"),
]


def stable_text(text):
    if not isinstance(text, str):
        return text
    for pattern, token in VOLATILE:
        text = pattern.sub(token, text)
    return text


def claude_blocks(content):
    if isinstance(content, str):
        return [["text", stable_text(content)]]
    out = []
    for b in content or []:
        t = b.get("type")
        if t == "text":
            out.append(["text", stable_text(b.get("text"))])
        elif t == "tool_use":
            out.append(["tool_use", b.get("name"), b.get("input")])
        elif t == "tool_result":
            out.append(["tool_result", claude_blocks(b.get("content")), bool(b.get("is_error"))])
        elif t == "tool_reference":
            out.append(["tool_reference", b.get("tool_name")])
        else:
            out.append([t])
    return out


def claude_norm(events):
    """Claude Code stream-json without ids, timings, paths and usage. Each thread (the main
    one, and every subagent's, told apart by `parent_tool_use_id`) keeps its own order, but
    how the threads interleave, and where the task progress events fall, is timing: a
    background subagent runs beside the main thread."""
    threads, order, tasks = {}, [], []
    for e in events:
        t, st = e.get("type"), e.get("subtype")
        if t == "system" and st != "init":
            tasks.append([t, st])
            continue
        key = e.get("parent_tool_use_id")
        if key not in threads:
            threads[key] = []
            order.append(key)
        out = threads[key]
        if t == "system":
            out.append([t, st, e.get("model"),
                        sorted([s.get("name"), s.get("status")] for s in e.get("mcp_servers", [])),
                        sorted(x for x in e.get("tools", []) if x.startswith("mcp__"))])
        elif t in ("assistant", "user"):
            out.append([t, claude_blocks((e.get("message") or {}).get("content"))])
        elif t == "result":
            out.append([t, st, e.get("is_error"), e.get("result"), e.get("num_turns")])
        else:
            out.append([t, st])
    return {"main": threads.get(None, []),
            "subagents": [threads[k] for k in order if k is not None],
            "system": sorted(tasks)}


def codex_norm(events):
    """codex exec --json without ids (item ids are synthetic, thread ids random). Multi-agent
    items (`collab_tool_call`) keep their tool, status and how many agents they name with what
    status, not which: the subagents' thread ids are random. How many waits it took to see
    every agent finish is timing (one wait may report both, or one each), so the waits become
    one entry, every agent state they reported, and the turn's usage (one request per wait) is
    left out."""
    out, waited = [], None
    for e in events:
        t = e.get("type")
        if t and t.startswith("item."):
            item = {k: v for k, v in (e.get("item") or {}).items() if k != "id"}
            if item.get("type") == "collab_tool_call":
                states = sorted(json.dumps(v, sort_keys=True)
                                for v in (item.get("agents_states") or {}).values())
                if item.get("tool") == "wait":
                    if waited is None:
                        waited = []
                        out.append(["waits", waited])
                    if t == "item.completed":
                        waited.extend(states)
                        waited.sort()
                    continue
                item = {"type": item["type"], "tool": item.get("tool"), "status": item.get("status"),
                        "prompt": item.get("prompt"), "receivers": len(item.get("receiver_thread_ids") or []),
                        "states": states}
            out.append([t, item])
        elif t == "turn.completed":
            out.append([t, e.get("usage") if waited is None else "usage (waits vary)"])
        elif t == "turn.failed":
            out.append([t, e.get("error")])
        else:
            out.append([t])
    return out


def mcp_calls(host, events):
    if host == "claude":
        return sum(1 for e in events if e.get("type") == "assistant"
                   for b in (e.get("message") or {}).get("content") or []
                   if isinstance(b, dict) and b.get("type") == "tool_use"
                   and str(b.get("name", "")).startswith("mcp__"))
    return sum(1 for e in events if e.get("type") == "item.completed"
               and (e.get("item") or {}).get("type") == "mcp_tool_call")


def main():
    host, direct, via, records, trace, replayed, canary = sys.argv[1:8]
    scanned = sys.argv[8:]
    d, v = lines(direct), lines(via)
    norm = claude_norm if host == "claude" else codex_norm
    same = norm(d) == norm(v) and len(d) > 0
    calls = mcp_calls(host, v)
    # Calls the host's output does not show (Codex subagents'): counted by the MCP server.
    if os.environ.get("E2E_MARKER_CALLS"):
        calls = sum(1 for m in lines(os.environ["E2E_MARKER_CALLS"]) if m.get("ev") == "start")
    recs = [r for r in lines(records) if r.get("type") == "attribution"]
    need = ["tool_use_id"] if host == "claude" else ["item_id", "thread"]
    if os.environ.get("E2E_REQUIRE_HOST"):
        need.append("host")
    attributed = [r for r in recs if r.get("decision") == "attributed"]
    with_identity = [r for r in attributed
                     if all(n in (r.get("evidence") or []) for n in need)]
    abstained = sorted({r.get("reason") for r in recs if r.get("decision") != "attributed"})
    # How many attributed calls ended before their window's response did (the hold makes the
    # hosts run the call while the response is still streaming, docs/design.md section 3).
    ends = {e.get("response"): e.get("t") for e in lines(trace) if e.get("type") == "response_end"}
    early = sum(1 for r in attributed
                if ends.get((r.get("window") or {}).get("response")) is not None
                and r.get("end", 0) < ends[(r.get("window") or {}).get("response")])
    evidence = sorted({x for r in attributed for x in (r.get("evidence") or [])})
    leaks = []
    for path in scanned:
        try:
            with open(path, "rb") as f:
                if canary.encode() in f.read():
                    leaks.append(path.rsplit("/", 1)[-1])
        except FileNotFoundError:
            pass
    # Replaying the captured trace must give the records the live run wrote.
    replay_same = recs == [r for r in lines(replayed) if r.get("type") == "attribution"]
    ok = (same and calls >= 1 and len(recs) == calls and len(with_identity) == calls
          and not leaks and replay_same)
    why = []
    if not same:
        why.append("host output differs")
    if calls < 1:
        why.append("no MCP call made")
    if len(recs) != calls:
        why.append(f"{len(recs)} records for {calls} calls")
    if len(with_identity) != calls:
        why.append(f"{len(with_identity)} attributed with {'+'.join(need)}")
    if abstained:
        why.append("abstained: " + ",".join(str(a) for a in abstained))
    if leaks:
        why.append("canary in " + ",".join(leaks))
    if not replay_same:
        why.append("replay of the trace gives other records")
    print(json.dumps({"ok": ok, "calls": calls, "records": len(recs),
                      "attributed": len(attributed), "evidence": evidence, "early": early,
                      "same_output": same, "replay_same": replay_same, "why": "; ".join(why)}))
    if not same:
        with open(via + ".diff", "w") as f:
            json.dump({"direct": norm(d), "windowtap": norm(v)}, f, indent=1)


if __name__ == "__main__":
    main()
PY

# The shared-relay checker: matches every record to the session whose MCP server ran the call
# (by the call's start and end times: the records' clock is the trace's, whose header has the
# wall-clock epoch; the echo server's marker lines carry wall-clock times), then checks each
# session on its own. Reads a spec written by shared_relay (one line per session).
cat >"$E2E/check_shared.py" <<'PY'
import json
import sys

sys.path.insert(0, sys.argv[1])
from check import claude_norm, codex_norm, lines, mcp_calls  # noqa: E402

TOLERANCE_MS = 250


def marker_calls(path):
    """One entry per tools/call the echo server saw: start and end (unix ms, end None while it
    ran), its pid and its parent's (the wrapper's) pid."""
    calls, running = [], {}
    for m in lines(path):
        if m.get("ev") == "start":
            c = {"start": m["t"] * 1000.0, "end": None, "pid": m.get("pid"), "ppid": m.get("ppid")}
            calls.append(c)
            running[m.get("pid")] = c
        elif m.get("ev") == "end" and m.get("pid") in running:
            running.pop(m.get("pid"))["end"] = m["t"] * 1000.0
    return calls


def main():
    spec = json.load(open(sys.argv[2]))
    live = spec["mode"] != "direct"
    # `--hosts off`: no host anywhere, and every session decided as in the hosts-on leg.
    hosts_off = spec["mode"] == "hosts-off"
    hosts_on = {}
    if spec.get("hosts_on_result"):
        try:
            hosts_on = {x["name"]: x for x in json.load(open(spec["hosts_on_result"]))["rows"]}
        except (OSError, ValueError, KeyError):
            hosts_on = {}
    trace = lines(spec.get("trace", ""))
    epoch = next((e.get("epoch_unix_ms") for e in trace if e.get("type") == "trace"), None)
    outcome = {e.get("interval"): e.get("outcome") for e in trace if e.get("type") == "mcp_interval"}
    # The host field of trace v2's mcp_interval (absent in v1: reported as unknown).
    host_of = {e.get("interval"): e.get("host") for e in trace if e.get("type") == "mcp_interval"}
    recs = [r for r in lines(spec.get("records", "")) if r.get("type") == "attribution"]
    sessions = spec["sessions"]
    calls = []  # (session index, marker call)
    for i, s in enumerate(sessions):
        s["calls"] = marker_calls(s["marker"])
        calls += [(i, c) for c in s["calls"]]
        s["recs"] = []

    def match(offset):
        """Records to calls with the trace's epoch at `offset` (unix ms): closest first, each
        call and record at most once. Returns [(distance, record index, call index)]."""
        pairs = []
        for ri, r in enumerate(recs):
            start, end = offset + r.get("start", 0), offset + r.get("end", 0)
            for ci, (_, c) in enumerate(calls):
                d = abs(start - c["start"])
                if c["end"] is not None:
                    d = max(d, abs(end - c["end"]))
                if d <= TOLERANCE_MS:
                    pairs.append((d, ri, ci))
        pairs.sort()
        used_r, used_c, out = set(), set(), []
        for d, ri, ci in pairs:
            if ri not in used_r and ci not in used_c:
                used_r.add(ri)
                used_c.add(ci)
                out.append((d, ri, ci))
        return out

    # The epoch from the trace header; should a header not carry it, the offset that matches
    # the most records (then the closest) among those that put some record on some call.
    offsets = [epoch] if epoch is not None else [
        c["start"] - r.get("start", 0) for r in recs for _, c in calls]
    best = max((match(o) for o in offsets), default=[],
               key=lambda m: (len(m), -sum(d for d, _, _ in m)))
    used_r = {ri for _, ri, _ in best}
    for _, ri, ci in sorted(best, key=lambda x: x[1]):
        sessions[calls[ci][0]]["recs"].append(recs[ri])
    by_name = {s["name"]: s for s in sessions}
    rows, all_ok = [], True
    for s in sessions:
        made = mcp_calls(s["host"], lines(s["output"]))
        started = len(s["calls"])
        recs_s = s["recs"]
        # Each record as decision-or-reason/candidates, e.g. `attributed/1`, `ambiguous/2`.
        decisions = sorted("%s/%s" % (r.get("decision") if r.get("decision") == "attributed"
                                      else r.get("reason"), r.get("candidates")) for r in recs_s)
        need = "tool_use_id" if s["host"] == "claude" else "item_id"
        attributed = [r for r in recs_s if r.get("decision") == "attributed"]
        identity = [r for r in attributed if need in (r.get("evidence") or [])]
        with_host = [r for r in attributed if "host" in (r.get("evidence") or [])]
        outcomes = sorted({str(outcome.get(r.get("interval"))) for r in recs_s})
        host_known = [r for r in recs_s if host_of.get(r.get("interval"))]
        nested = "-"
        if s.get("nest_in"):
            outer = by_name[s["nest_in"]]["calls"]
            inside = [c for c in s["calls"] if c["end"] is not None and any(
                o["start"] <= c["start"] and o["end"] is not None and c["end"] <= o["end"]
                for o in outer)]
            nested = "yes" if s["calls"] and len(inside) == len(s["calls"]) else "NO"
        same = "-"
        if s.get("direct_output") and not s["killed"]:
            norm = claude_norm if s["host"] == "claude" else codex_norm
            d = lines(s["direct_output"])
            same = "yes" if d and norm(d) == norm(lines(s["output"])) else "NO"
        why = []
        if same == "NO":
            why.append("host output differs from the direct leg")
        if s["killed"]:
            # Killed mid-call: the host is gone; its call must still have a record.
            if s["rc"] == 0:
                why.append("host was not killed")
            if started < 1:
                why.append("no call started")
            if live and len(recs_s) < started:
                why.append(f"{len(recs_s)} records for {started} started calls")
        else:
            if s["rc"] != 0:
                why.append(f"host exit {s['rc']}")
            if made < 1:
                why.append("no MCP call made")
            if started != made:
                why.append(f"{started} calls reached the server, host says {made}")
            if live:
                if len(recs_s) != made:
                    why.append(f"{len(recs_s)} records for {made} calls")
                if len(identity) != made:
                    why.append(f"{len(identity)} attributed with {need}")
                if not hosts_off and len(with_host) != made:
                    why.append(f"{len(with_host)} with host evidence")
        if nested == "NO":
            why.append(f"call not inside {s['nest_in']}'s call")
        # Evidence of the attributed records, without `host` (what hosts-off is compared on).
        evidence = sorted({x for r in attributed for x in (r.get("evidence") or []) if x != "host"})
        if hosts_off:
            if host_known or with_host:
                why.append(f"{len(host_known)} calls with a host although hosts are off")
            on = hosts_on.get(s["name"])
            if on is None:
                why.append("no hosts-on leg to compare with")
            elif on["decisions"] != (",".join(decisions) or "-") or on["evidence"] != evidence:
                why.append("decided otherwise than with hosts on (%s %s)" % (
                    on["decisions"], "+".join(on["evidence"]) or "-"))
        ok = not why
        all_ok = all_ok and ok
        rows.append({
            "name": s["name"], "kind": s["kind"], "sleep_ms": s["sleep_ms"], "rc": s["rc"],
            "mcp": started if s["killed"] else made, "recs": len(recs_s),
            "decisions": ",".join(decisions) or "-",
            # (For the killed session only shown when something was attributed: not required.)
            "identity": ("yes" if attributed and len(identity) == len(recs_s) else "NO")
            if live and recs_s and (attributed or not s["killed"]) else "-",
            "host": "off" if hosts_off else ("yes" if attributed and len(with_host) == len(recs_s) else "NO")
            if live and recs_s and (attributed or not s["killed"]) else "-",
            "evidence": evidence,
            "hostid": f"{len(host_known)}/{len(recs_s)}" if live else "-",
            "outcome": ",".join(outcomes) if live and recs_s else "-",
            "nested": nested, "same": same, "ok": ok, "why": "; ".join(why)})
    # Whole-run checks.
    leaks = []
    for path in spec.get("scanned", []):
        try:
            with open(path, "rb") as f:
                if spec["canary"].encode() in f.read():
                    leaks.append(path.rsplit("/", 2)[-2] + "/" + path.rsplit("/", 1)[-1])
        except FileNotFoundError:
            pass
    replay_same = recs == [r for r in lines(spec.get("replayed", "")) if r.get("type") == "attribution"]
    unmatched = len(recs) - len(used_r)
    run = {"records": len(recs), "unmatched": unmatched, "leaks": leaks,
           "replay_same": replay_same}
    if live:
        all_ok = all_ok and not leaks and replay_same and unmatched == 0
    print(json.dumps({"ok": all_ok, "rows": rows, "run": run}))


if __name__ == "__main__":
    main()
PY

# ------------------------------------------------------------------ helpers
PIDS=()
ORPHAN_MARKERS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    # A killed host's MCP server outlives it (shared-relay); end_orphans checks what it ends.
    for m in "${ORPHAN_MARKERS[@]}"; do end_orphans "$m"; done
}
trap cleanup EXIT

# wait_line FILE PATTERN: waits (bounded) until FILE has a line matching PATTERN.
wait_line() {
    for _ in $(seq 100); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

# start_upstream DIR HOLD [FLAGS...]: starts a fresh scripted upstream, sets UP_ADDR and
# UP_PID. FLAGS go to the upstream as they are (e.g. --subagent blocking).
start_upstream() {
    local dir=$1 hold=$2
    shift 2
    "$UPSTREAM" --listen 127.0.0.1:0 --alias "$ALIAS" --tool "$TOOL" --input "$TOOL_INPUT" \
        --hold-ms "$hold" --log "$dir/upstream.log" "$@" >"$dir/upstream.out" 2>"$dir/upstream.err" &
    UP_PID=$!
    PIDS+=("$UP_PID")
    wait_line "$dir/upstream.out" '^listening on ' || die "scripted upstream did not start ($dir)"
    UP_ADDR=$(sed -n 's/^listening on //p' "$dir/upstream.out")
}

stop() { kill -TERM "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

# Phoenix (E2E_PHOENIX): started once, inside the namespace, with its working directory in
# the runs directory; each windowtap leg exports to a project of its own.
PHOENIX_BASE=
if [ -n "${E2E_PHOENIX:-}" ]; then
    mkdir -p "$RUNS/phoenix"
    PHOENIX_HOST=127.0.0.1 PHOENIX_PORT=6006 PHOENIX_GRPC_PORT=4317 \
    PHOENIX_WORKING_DIR="$RUNS/phoenix" PHOENIX_TELEMETRY_ENABLED=false \
        "$E2E_PHOENIX/bin/phoenix" serve >"$RUNS/phoenix/phoenix.log" 2>&1 &
    PIDS+=("$!")
    for _ in $(seq 240); do
        curl -fsS http://127.0.0.1:6006/healthz >/dev/null 2>&1 && break
        sleep 0.5
    done
    curl -fsS http://127.0.0.1:6006/healthz >/dev/null 2>&1 || die "phoenix did not start ($RUNS/phoenix/phoenix.log)"
    PHOENIX_BASE=http://127.0.0.1:6006
    say "phoenix serving on $PHOENIX_BASE"
fi
PHOENIX_ROWS=()

# phoenix_check SCENARIO DIR: the joined-trace check of one windowtap leg and its picture.
# Returns 1 when the check fails.
phoenix_check() {
    local host=${1%%-*} dir=$2 expect=() result rc=0
    local want
    want=$(tr ' ' '\n' <<<"${E2E_PHOENIX_EXPECT:-}" | sed -n "s/^$host=//p")
    [ -n "$want" ] && expect=(--expect-parent "$want")
    result=$(python3 "$ROOT/scripts/phoenix-joined.py" "$PHOENIX_BASE" "$(basename "$dir")" \
        "$dir/records.jsonl" "$dir/upstream.log" "${expect[@]}") || rc=$?
    echo "$result" >"$dir/phoenix.json"
    local url
    url=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1]).get("url") or "")' "$result" 2>/dev/null)
    if [ -n "$url" ] && [ -n "${E2E_PHOENIX_NODE_PATH:-}" ]; then
        # The call's span with windowtap's attributes open (playwright-core drives chromium).
        NODE_PATH=$E2E_PHOENIX_NODE_PATH timeout 300 node "$ROOT/scripts/phoenix-picture.mjs" \
            "$url" "$dir/phoenix-trace.png" windowtap >/dev/null 2>&1 || say "could not render $url"
    elif [ -n "$url" ] && command -v chromium >/dev/null; then
        timeout 120 chromium --headless=new --no-sandbox --disable-gpu --no-first-run \
            --disable-background-networking --hide-scrollbars --window-size=1400,900 \
            --virtual-time-budget=15000 --screenshot="$dir/phoenix-trace.png" "$url" \
            >/dev/null 2>&1 || say "chromium could not render $url"
    fi
    PHOENIX_ROWS+=("$(python3 -c 'import json,sys
r = json.loads(sys.argv[1])
print("%-26s %-4s chat %d (parents %s), calls joined %d/%d, model requests %d (traceparent %s), ws frames %d (client_metadata traceparent %s)%s" % (
    sys.argv[2], "PASS" if r["ok"] else "FAIL", r["chat_spans"], r["chat_parents"], r["calls_joined"],
    r["attributed_records"], r["model_requests"], r["traceparent_shapes"], r["ws_frames"],
    r["ws_frame_traceparent"], ("; " + "; ".join(r["why"])) if r["why"] else ""))' "$result" "$(basename "$dir")")")
    return $rc
}

# How windowtap is driven: `windowtap run` once it exists, else relay + wrap by hand.
WT_MODE=manual
if "$WT" run --help >/dev/null 2>&1; then WT_MODE=run; fi
if [ -n "${E2E_WT_MODE:-}" ]; then WT_MODE=$E2E_WT_MODE; fi
RELAY_INGEST_FLAG=
if "$WT" relay --help 2>/dev/null | grep -q -- '--ingest'; then RELAY_INGEST_FLAG=--ingest; fi

# launch_relay DIR ARGS...: `windowtap relay ARGS` with records and capture in DIR (and its
# output there), in the background; sets LAUNCHED_PID, and returns once it listens.
launch_relay() {
    local dir=$1
    shift
    "$WT" relay "$@" --records "$dir/records.jsonl" --capture "$dir/trace.jsonl" \
        >"$dir/relay.out" 2>"$dir/relay.err" &
    LAUNCHED_PID=$!
    PIDS+=("$LAUNCHED_PID")
    wait_line "$dir/relay.err" 'listening on http://' || {
        sed 's/^/    relay: /' "$dir/relay.err" >&2
        return 1
    }
}

# start_relay DIR: `windowtap relay` with both mounts on the scripted upstream; sets
# RELAY_ADDR, RELAY_PID and INGEST (the socket wrappers report to).
start_relay() {
    INGEST="$1/ingest.sock"
    local extra=()
    if [ -n "$RELAY_INGEST_FLAG" ]; then extra=("$RELAY_INGEST_FLAG" "$INGEST"); fi
    launch_relay "$1" --listen 127.0.0.1:0 \
        --upstream "anthropic=http://$UP_ADDR" --upstream "openai=http://$UP_ADDR" "${extra[@]}" ||
        return 1
    RELAY_PID=$LAUNCHED_PID
    RELAY_ADDR=$(sed -n 's/.*listening on http:\/\/\([^ ]*\).*/\1/p' "$1/relay.err" | head -1)
}

# The MCP server's command line (JSON array) for the host, wrapped or not.
mcp_argv() {
    if [ "$1" = wrapped ]; then
        printf '["%s","wrap","--alias","%s","--ingest","%s","--","python3","%s"]' \
            "$WT" "$ALIAS" "$INGEST" "$E2E/echo_mcp.py"
    else
        printf '["python3","%s"]' "$E2E/echo_mcp.py"
    fi
}

# claude_args DIR: Claude Code's -p command line (protocols.md §6), MCP config in DIR.
claude_args() {
    CARGS=(-p "$PROMPT" --output-format stream-json --verbose --mcp-config "$1/mcp.json"
        --strict-mcp-config --allowedTools "mcp__${ALIAS}__${TOOL}")
}

# codex_args TRANSPORT MODE BASE: `codex exec` with the built-in provider (WebSocket) or a
# custom provider (HTTP SSE), function mode (-m gpt-5: fallback metadata, MCP tools as a
# namespace) or the default catalog model (code mode: MCP reachable only from `exec`).
codex_args() {
    XARGS=(exec --skip-git-repo-check --json -c analytics.enabled=false --disable plugins)
    if [ "$1" = ws ]; then
        XARGS+=(-c "openai_base_url=\"$3/v1\"")
    else
        XARGS+=(-c model_provider=e2e -c "model_providers.e2e={name=\"e2e\",base_url=\"$3/v1\",wire_api=\"responses\",env_key=\"E2E_KEY\"}")
    fi
    if [ "$2" = function ]; then XARGS+=(-m gpt-5); fi
    XARGS+=(-c "mcp_servers.$ALIAS.default_tools_approval_mode=\"approve\"")
}

claude_env() {
    CENV=(HOME="$1/home" ANTHROPIC_API_KEY="$API_KEY" CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1
        DISABLE_TELEMETRY=1 DISABLE_AUTOUPDATER=1 DISABLE_ERROR_REPORTING=1)
    if [ "$2" = direct-tools ]; then CENV+=(ENABLE_TOOL_SEARCH=false); fi
}

codex_env() {
    XENV=(HOME="$1/home" CODEX_HOME="$1/codex-home" OPENAI_API_KEY="$API_KEY" E2E_KEY="$API_KEY")
}

# one_run SCENARIO HOLD LEG: runs the host once; LEG is direct or windowtap. Writes
# DIR/host.jsonl and, through windowtap, DIR/records.jsonl. Returns the host's exit code.
one_run() {
    local scenario=$1 hold=$2 leg=$3
    local host=${scenario%%-*} dir="$RUNS/$scenario-h$hold-$leg"
    mkdir -p "$dir/home" "$dir/codex-home" "$dir/work"
    local upstream_flags=()
    case $scenario in
    claude-subagent-blocking) upstream_flags=(--subagent blocking) ;;
    claude-subagent-background) upstream_flags=(--subagent background) ;;
    claude-subagent-parallel | codex-subagent-parallel) upstream_flags=(--subagent parallel) ;;
    esac
    start_upstream "$dir" "$hold" "${upstream_flags[@]}"
    local base="http://$UP_ADDR" wrapped=plain launcher=()
    if [ "$leg" = windowtap ]; then
        if [ "$WT_MODE" = run ]; then
            launcher=("$WT" run --records "$dir/records.jsonl" --capture "$dir/trace.jsonl")
            if [ -n "$PHOENIX_BASE" ]; then
                # Windowtap's spans (and Claude Code's, which inherits the variable) go to a
                # Phoenix project named after the run's directory.
                launcher=(env "OTEL_EXPORTER_OTLP_HEADERS=x-project-name=$(basename "$dir")"
                    "${launcher[@]}" --join-host-trace --otlp-endpoint "$PHOENIX_BASE")
            fi
        else
            start_relay "$dir" || { stop "$UP_PID"; return 97; }
            wrapped=wrapped
        fi
    fi
    local rc=0
    case $scenario in
    claude-*)
        local tools=deferred
        [ "$scenario" = claude-direct ] && tools=direct-tools
        local argv
        argv=$(mcp_argv "$wrapped")
        # Parallel subagents: each call takes 3 s, so the two subagents' calls overlap.
        local sleep_ms=0
        [ "$scenario" = claude-subagent-parallel ] && sleep_ms=3000
        printf '{"mcpServers":{"%s":{"command":%s,"args":%s,"env":{"E2E_SLEEP_MS":"%s"}}}}\n' "$ALIAS" \
            "$(echo "$argv" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)[0]))')" \
            "$(echo "$argv" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)[1:]))')" \
            "$sleep_ms" >"$dir/mcp.json"
        claude_env "$dir" "$tools"
        claude_args "$dir"
        if [ "$leg" = windowtap ] && [ "$WT_MODE" = manual ]; then
            base="http://$RELAY_ADDR/anthropic"
        fi
        [ ${#launcher[@]} -gt 0 ] && launcher+=(--)
        (cd "$dir/work" && env "${CENV[@]}" ANTHROPIC_BASE_URL="$base" timeout 180 \
            "${launcher[@]}" "$BIN/claude" "${CARGS[@]}" </dev/null >"$dir/host.jsonl" 2>"$dir/host.err") || rc=$?
        ;;
    codex-*)
        local transport mode
        transport=$(echo "$scenario" | cut -d- -f2)
        mode=$(echo "$scenario" | cut -d- -f3)
        # Parallel subagents: HTTP (the scripted main thread reads the agent ids from the whole
        # input), function mode; the MCP server's calls take 3 s each, and its marker counts
        # them (`codex exec --json` shows the subagents' spawns and waits, not their calls).
        [ "$scenario" = codex-subagent-parallel ] && transport=http mode=function
        if [ "$leg" = windowtap ] && [ "$WT_MODE" = manual ]; then
            base="http://$RELAY_ADDR/openai"
        fi
        if [ "$leg" = windowtap ] && [ "$WT_MODE" = run ] && [ "$transport" = ws ]; then
            # The built-in provider's upstream is the relay's openai mount.
            launcher+=(--upstream "openai=http://$UP_ADDR")
        fi
        [ ${#launcher[@]} -gt 0 ] && launcher+=(--)
        codex_env "$dir"
        codex_args "$transport" "$mode" "$base"
        local argv
        argv=$(mcp_argv "$wrapped")
        XARGS+=(-c "mcp_servers.$ALIAS.command=$(echo "$argv" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)[0]))')")
        XARGS+=(-c "mcp_servers.$ALIAS.args=$(echo "$argv" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)[1:]))')")
        if [ "$scenario" = codex-subagent-parallel ]; then
            XARGS+=(-c "mcp_servers.$ALIAS.env={E2E_SLEEP_MS=\"3000\",E2E_MARKER=\"$dir/marker.jsonl\"}")
        fi
        (cd "$dir/work" && env "${XENV[@]}" timeout 180 \
            "${launcher[@]}" "$BIN/codex" "${XARGS[@]}" "$PROMPT" </dev/null >"$dir/host.jsonl" 2>"$dir/host.err") || rc=$?
        ;;
    esac
    if [ "$leg" = windowtap ] && [ "$WT_MODE" = manual ]; then stop "$RELAY_PID"; fi
    stop "$UP_PID"
    return $rc
}

# ------------------------------------------------------------------ shared-relay
# One `windowtap relay` started by hand as the README tells a user (default listen address,
# default ingest socket, the overrides it prints), serving several sessions of both hosts at
# once, their MCP servers declared as `windowtap wrap --alias probe -- python3 echo_mcp.py`
# (no --ingest: the wrapper finds the default socket). The sessions (name kind sleep):
#   A  claude-toolsearch   E2E_SHARED_LONG_MS (8000): its call holds A's window open (Codex
#                          needs 2.1-4.1 s here to start and reach its call; 8 s leaves room);
#   B  codex-ws-function   300 ms, started once A's call runs: nested inside A's call;
#   C  codex-http-code     700 ms, likewise;
#   K  codex-ws-function   600 s, started with B and C, SIGKILLed (the codex process itself)
#                          once its call reached the MCP server (its marker says so);
#   D  claude-direct       300 ms, started after K was killed (K's window is still open) and
#                          A's call ended.
# Then SIGINT stops the relay. The direct leg runs the same choreography without windowtap
# (hosts on the upstream, servers unwrapped), for the hosts-unchanged comparison.
SHARED_LONG_MS=${E2E_SHARED_LONG_MS:-8000}
declare -A SESSION_PID SESSION_RC SESSION_KIND SESSION_SLEEP SESSION_NEST

# wait_marker FILE SECONDS [EV]: waits until FILE has a call's start (or EV) line.
wait_marker() {
    local i
    for i in $(seq $(($2 * 10))); do
        grep -q "\"ev\": \"${3:-start}\"" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

# descendant PID COMM: PID or its first descendant (breadth first) whose comm is COMM.
descendant() {
    local queue=("$1") p c
    while [ ${#queue[@]} -gt 0 ]; do
        p=${queue[0]}
        queue=("${queue[@]:1}")
        if [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "$2" ]; then
            echo "$p"
            return 0
        fi
        for c in $(cat /proc/"$p"/task/*/children 2>/dev/null); do queue+=("$c"); done
    done
    return 1
}

# shared_session LEG DIR NAME KIND SLEEP_MS [NESTED_IN]: starts one host session in the
# background; NESTED_IN names the session whose call this one's must lie inside.
shared_session() {
    local leg=$1 sdir="$2/$3" name=$3 kind=$4 sleep_ms=$5
    SESSION_KIND[$name]=$kind
    SESSION_SLEEP[$name]=$sleep_ms
    SESSION_NEST[$name]=${6:--}
    mkdir -p "$sdir/home" "$sdir/codex-home" "$sdir/work"
    local marker="$sdir/marker.jsonl" cmd=python3 args
    args=$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "$E2E/echo_mcp.py")
    if [ "$leg" != direct ]; then
        cmd=$WT
        args=$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1:]))' \
            wrap --alias "$ALIAS" -- python3 "$E2E/echo_mcp.py")
    fi
    case $kind in
    claude-*)
        python3 -c 'import json,sys
a, cmd, args, sleep_ms, marker = sys.argv[1:6]
print(json.dumps({"mcpServers": {a: {"command": cmd, "args": json.loads(args),
      "env": {"E2E_SLEEP_MS": sleep_ms, "E2E_MARKER": marker}}}}))' \
            "$ALIAS" "$cmd" "$args" "$sleep_ms" "$marker" >"$sdir/mcp.json"
        local tools=deferred
        [ "$kind" = claude-direct ] && tools=direct-tools
        claude_env "$sdir" "$tools"
        claude_args "$sdir"
        (cd "$sdir/work" && exec env "${CENV[@]}" ANTHROPIC_BASE_URL="$SHARED_ANTHROPIC" \
            timeout 180 "$BIN/claude" "${CARGS[@]}" </dev/null >"$sdir/host.jsonl" 2>"$sdir/host.err") &
        ;;
    codex-*)
        local transport mode
        transport=$(echo "$kind" | cut -d- -f2)
        mode=$(echo "$kind" | cut -d- -f3)
        codex_env "$sdir"
        codex_args "$transport" "$mode" "$SHARED_OPENAI"
        XARGS+=(-c "mcp_servers.$ALIAS.command=$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$cmd")")
        XARGS+=(-c "mcp_servers.$ALIAS.args=$args")
        XARGS+=(-c "mcp_servers.$ALIAS.env={E2E_SLEEP_MS=\"$sleep_ms\",E2E_MARKER=\"$marker\"}")
        (cd "$sdir/work" && exec env "${XENV[@]}" timeout 180 \
            "$BIN/codex" "${XARGS[@]}" "$PROMPT" </dev/null >"$sdir/host.jsonl" 2>"$sdir/host.err") &
        ;;
    esac
    SESSION_PID[$name]=$!
    PIDS+=("$!")
}

# end_orphans MARKER: ends the MCP server (and its wrapper) a killed host left running, by
# the pids its marker names, each checked to be ours (its command line) first.
end_orphans() {
    local pid ppid
    read -r pid ppid < <(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    m = json.loads(l)
    if m.get("ev") == "start":
        print(m["pid"], m["ppid"]); break' "$1" 2>/dev/null) || return 0
    if { tr '\0' ' ' <"/proc/$ppid/cmdline"; } 2>/dev/null | grep -q " wrap --alias $ALIAS "; then
        kill -TERM "$ppid" 2>/dev/null || true
    fi
    if { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -q 'echo_mcp.py'; then
        kill -TERM "$pid" 2>/dev/null || true
    fi
}

# start_user_relay DIR ANTHROPIC_UPSTREAM OPENAI_UPSTREAM [FLAGS...]: one `windowtap relay` started as a
# user would (default listen address, default ingest socket), upstreams overridden (the defaults
# are the real APIs), records and capture to DIR. Sets SHARED_ANTHROPIC and SHARED_OPENAI (the
# overrides it printed, as a user copies them), SHARED_INGEST and SHARED_RELAY_PID.
start_user_relay() {
    local dir=$1
    launch_relay "$dir" --upstream "anthropic=$2" --upstream "openai=$3" "${@:4}" || return 1
    SHARED_RELAY_PID=$LAUNCHED_PID
    SHARED_ANTHROPIC=$(sed -n 's/.*ANTHROPIC_BASE_URL=\([^ ]*\) claude.*/\1/p' "$dir/relay.err" | head -1)
    SHARED_OPENAI=$(sed -n "s/^Codex (API key): *codex -c 'openai_base_url=\"\\([^\"]*\\)\"'.*/\\1/p" "$dir/relay.err" | head -1)
    SHARED_INGEST=$(sed -n 's/.* report to \([^ ]*\) .*/\1/p' "$dir/relay.err" | head -1)
    if [ -z "$SHARED_ANTHROPIC" ] || [ -z "$SHARED_OPENAI" ]; then
        say "could not read the relay's overrides ($dir/relay.err)"
        stop "$SHARED_RELAY_PID"
        return 1
    fi
    say "shared relay: $SHARED_ANTHROPIC $SHARED_OPENAI ingest ${SHARED_INGEST:-?}"
}

# stop_user_relay: SIGINT to the relay of start_user_relay (a second one if it still drains
# after 30 s); sets SHARED_RELAY_RC to its exit code.
stop_user_relay() {
    kill -INT "$SHARED_RELAY_PID" 2>/dev/null || true
    local i
    for i in $(seq 300); do
        kill -0 "$SHARED_RELAY_PID" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$SHARED_RELAY_PID" 2>/dev/null; then
        say "relay still draining after 30 s: second SIGINT"
        kill -INT "$SHARED_RELAY_PID" 2>/dev/null || true
    fi
    SHARED_RELAY_RC=0
    wait "$SHARED_RELAY_PID" || SHARED_RELAY_RC=$?
}

# shared_relay LEG: the choreography above; writes DIR/spec.json for check_shared.py. LEG is
# direct (no windowtap), windowtap, or hosts-off (windowtap with `--hosts off`: no host is
# resolved, as on a system without the process and socket tables or for a client in a
# container; the hints alone must keep the sessions apart, design §4).
shared_relay() {
    local leg=$1 dir="$RUNS/shared-relay-$1"
    mkdir -p "$dir"
    start_upstream "$dir" 0
    SHARED_RELAY_RC=-
    SHARED_INGEST=
    local relay_flags=()
    [ "$leg" = hosts-off ] && relay_flags=(--hosts off)
    if [ "$leg" != direct ]; then
        start_user_relay "$dir" "http://$UP_ADDR" "http://$UP_ADDR" "${relay_flags[@]}" || {
            stop "$UP_PID"
            return 1
        }
    else
        SHARED_ANTHROPIC="http://$UP_ADDR"
        SHARED_OPENAI="http://$UP_ADDR/v1"
    fi
    local t0=$SECONDS
    shared_session "$leg" "$dir" A claude-toolsearch "$SHARED_LONG_MS"
    wait_marker "$dir/A/marker.jsonl" 90 || say "A's call never started"
    shared_session "$leg" "$dir" B codex-ws-function 300 A
    shared_session "$leg" "$dir" C codex-http-code 700 A
    shared_session "$leg" "$dir" K codex-ws-function 600000
    ORPHAN_MARKERS+=("$dir/K/marker.jsonl")
    if wait_marker "$dir/K/marker.jsonl" 90; then
        local victim
        victim=$(descendant "${SESSION_PID[K]}" codex) || victim=
        if [ -n "$victim" ]; then
            kill -KILL "$victim"
            say "K: SIGKILL to codex (pid $victim) during its MCP call"
        else
            say "K: no codex process found under ${SESSION_PID[K]}"
        fi
    else
        say "K's call never started"
    fi
    # D only once A's call is over, so that what stands beside D's window is the dead one.
    wait_marker "$dir/A/marker.jsonl" 90 end || say "A's call never ended"
    shared_session "$leg" "$dir" D claude-direct 300
    local n
    for n in A B C K D; do
        SESSION_RC[$n]=0
        # (2>/dev/null: bash would announce the killed job with its whole command line)
        wait "${SESSION_PID[$n]}" 2>/dev/null || SESSION_RC[$n]=$?
    done
    say "shared-relay $leg: sessions done in $((SECONDS - t0)) s"
    if [ "$leg" != direct ]; then stop_user_relay; fi
    end_orphans "$dir/K/marker.jsonl"
    stop "$UP_PID"
    for n in A B C K D; do
        echo "$n ${SESSION_KIND[$n]} ${SESSION_SLEEP[$n]} ${SESSION_NEST[$n]} ${SESSION_RC[$n]}"
    done >"$dir/sessions.txt"
    python3 - "$dir" "$leg" "$CANARY" "$RUNS/shared-relay-direct" K "$RUNS/shared-relay-windowtap" <<'PY' >"$dir/spec.json"
import json, sys
d, leg, canary, direct, killed, hosts_on = sys.argv[1:7]
sessions = []
for line in open(f"{d}/sessions.txt"):
    n, kind, sleep_ms, nest_in, rc = line.split()
    sessions.append({"name": n, "kind": kind, "host": kind.split("-")[0], "sleep_ms": int(sleep_ms),
                     "rc": int(rc), "killed": n == killed,
                     "nest_in": None if nest_in == "-" else nest_in,
                     "marker": f"{d}/{n}/marker.jsonl", "output": f"{d}/{n}/host.jsonl",
                     "direct_output": f"{direct}/{n}/host.jsonl" if leg != "direct" else None})
scanned = [f"{d}/{f}" for f in ("records.jsonl", "trace.jsonl", "replayed.jsonl", "relay.err", "relay.out")]
scanned += [f"{d}/{s['name']}/host.err" for s in sessions]
print(json.dumps({"mode": leg, "canary": canary, "records": f"{d}/records.jsonl",
                  "trace": f"{d}/trace.jsonl", "replayed": f"{d}/replayed.jsonl",
                  # hosts-off: the hosts-on leg's result, which every session must match.
                  "hosts_on_result": f"{hosts_on}/result.json" if leg == "hosts-off" else None,
                  "scanned": scanned, "sessions": sessions}))
PY
}

# ------------------------------------------------------------------ report-run
# The report of one real run, drawn and photographed (docs/report-real-run.png): one relay as
# start_user_relay starts it, its anthropic mount on an upstream with `--subagent parallel`, its
# openai mount on a plain one, and four sessions at once (name kind sleep):
#   A  claude-toolsearch  3000 ms: its own call, then one response launching two `Agent`
#                         subagents whose calls run at the same time (nested under A);
#   B  codex-ws-function  1500 ms, started once A's first call runs;
#   C  codex-http-function 1500 ms, likewise (function mode: code mode's `exec` names no tool,
#                         so its report would take one off the unreported count, by design);
#   U  codex-ws-function   300 ms, likewise, its MCP server NOT under `windowtap wrap`: the
#                         call the relay's stop and the report count as never reported;
#   D  claude-direct       300 ms, E2E_REPORT_GAP_S (20) s after the others ended, as a user
#                         comes back to a relay left running (its two subagents too), so that
#                         the run is long and one turn is a small part of it.
# Then `windowtap check`, `replay`, `report --trace` and two screenshots with headless Chromium:
# the whole page, and the page zoomed (its `#t=FROM,TO` fragment, seconds) to A's turn.
# E2E_REPORT_PNG_DIR: where the PNGs go (default: the run's directory).
chromium_shot() { # HTML PNG HEIGHT [FRAGMENT]
    chromium --headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking \
        --hide-scrollbars --user-data-dir="$(dirname "$2")/.chromium" --window-size="1400,$3" \
        --screenshot="$2" "file://$1${4:+#$4}" >/dev/null 2>&1
    rm -rf "$(dirname "$2")/.chromium"
    [ -s "$2" ]
}

report_run() {
    local dir="$RUNS/report-run" png_dir
    mkdir -p "$dir/up-claude" "$dir/up-codex"
    start_upstream "$dir/up-claude" 0 --subagent parallel
    local claude_up=$UP_PID claude_addr=$UP_ADDR
    start_upstream "$dir/up-codex" 0
    local codex_up=$UP_PID
    start_user_relay "$dir" "http://$claude_addr" "http://$UP_ADDR" || {
        stop "$claude_up"
        stop "$codex_up"
        return 1
    }
    local t0=$SECONDS n
    shared_session windowtap "$dir" A claude-toolsearch 3000
    wait_marker "$dir/A/marker.jsonl" 90 || say "A's call never started"
    shared_session windowtap "$dir" B codex-ws-function 1500
    shared_session windowtap "$dir" C codex-http-function 1500
    # `direct`: the server as the host would start it, unwrapped.
    shared_session direct "$dir" U codex-ws-function 300
    for n in A B C U; do
        SESSION_RC[$n]=0
        wait "${SESSION_PID[$n]}" 2>/dev/null || SESSION_RC[$n]=$?
    done
    sleep "${E2E_REPORT_GAP_S:-20}"
    # Wall-clock ms when D starts: A's turn is what Claude Code did before it.
    local d_at
    d_at=$(date +%s%3N)
    shared_session windowtap "$dir" D claude-direct 300
    SESSION_RC[D]=0
    wait "${SESSION_PID[D]}" 2>/dev/null || SESSION_RC[D]=$?
    say "report-run: sessions done in $((SECONDS - t0)) s"
    stop_user_relay
    stop "$claude_up"
    stop "$codex_up"
    REPORT_CHECK=yes
    "$WT" check "$dir/trace.jsonl" "$dir/records.jsonl" >"$dir/check.out" 2>&1 || REPORT_CHECK=NO
    "$WT" replay "$dir/trace.jsonl" -o "$dir/replayed.jsonl" >/dev/null 2>"$dir/replay.err" || true
    # From the run's directory, so that the page names its files as a user's would.
    (cd "$dir" && "$WT" report records.jsonl --trace trace.jsonl -o report.html) 2>"$dir/report.err" || {
        sed 's/^/    report: /' "$dir/report.err" >&2
        return 1
    }
    png_dir=${E2E_REPORT_PNG_DIR:-$dir}
    mkdir -p "$png_dir"
    # A's turn: from its first call to the end of its subagents' calls (Claude Code's records).
    local zoom
    zoom=$(python3 - "$dir/trace.jsonl" "$dir/records.jsonl" "$d_at" <<'PY'
import json, sys
claude, epoch = set(), None
for l in open(sys.argv[1]):
    e = json.loads(l)
    if e.get("type") == "trace":
        epoch = e["epoch_unix_ms"]
    if e.get("type") == "stream_open" and e.get("client") == "claude":
        claude.add(e["stream"])
d_at = int(sys.argv[3]) - epoch
spans = [(r["start"], r["end"]) for r in map(json.loads, open(sys.argv[2]))
         if (r.get("window") or {}).get("stream") in claude and r["start"] < d_at]
a, b = min(s for s, _ in spans), max(e for _, e in spans)
pad = (b - a) * 0.08
print("%.3f,%.3f" % ((a - pad) / 1000, (b + pad) / 1000))
PY
    ) || zoom=
    chromium_shot "$dir/report.html" "$png_dir/report-real-run.png" 1100 || say "no screenshot (chromium)"
    [ -n "$zoom" ] && { chromium_shot "$dir/report.html" "$png_dir/report-real-run-turn.png" 1100 "t=$zoom" ||
        say "no zoomed screenshot (chromium)"; }
    for n in A B C U D; do
        echo "$n ${SESSION_KIND[$n]} ${SESSION_SLEEP[$n]} ${SESSION_RC[$n]}"
    done >"$dir/sessions.txt"
    say "report-run: $dir/report.html, $png_dir/report-real-run.png, $png_dir/report-real-run-turn.png (#t=$zoom)"
}

# run_report: report-run, checked: every host exits 0, the relay exits 0 on SIGINT, check and
# replay agree with the live records, A's and D's three calls each and B's and C's are
# attributed (A's and D's subagents' lanes nested under them), U's call has no record, and the
# relay's stop and the page both count it as the one call no wrapper reported.
REPORT_ROW=
run_report() {
    say "report-run"
    local dir="$RUNS/report-run"
    report_run || { fail=1; REPORT_ROW="report-run: did not run"; return; }
    REPORT_ROW=$(python3 - "$dir" "$SHARED_RELAY_RC" "$REPORT_CHECK" "$CANARY" <<'PY'
import json, re, sys
d, relay_rc, checked, canary = sys.argv[1:5]
rcs = {l.split()[0]: int(l.split()[3]) for l in open(f"{d}/sessions.txt")}
# The live records start with the run header (records v1); the replay's are the same records.
recs = [r for r in map(json.loads, open(f"{d}/records.jsonl")) if r.get("type") == "attribution"]
same = recs == [r for r in map(json.loads, open(f"{d}/replayed.jsonl"))
                if r.get("type") == "attribution"]
html = open(f"{d}/report.html").read()
page = re.search(r'data-unreported="([^"]*)"', html)
page = page.group(1) if page else "-"
stop = re.search(r"warning: (\d+) model tool calls? to MCP tools", open(f"{d}/relay.err").read())
stop = stop.group(1) if stop else "0"
decisions = {}
for r in recs:
    decisions[r["decision"] if r["decision"] != "abstained" else r["reason"]] = \
        decisions.get(r["decision"] if r["decision"] != "abstained" else r["reason"], 0) + 1
nested = html.count('data-depth="1"')
leaks = [f for f in ("records.jsonl", "trace.jsonl", "relay.err", "report.html")
         if canary in open(f"{d}/{f}").read()]
why = []
if any(rcs.values()): why.append("host rc %s" % rcs)
if relay_rc != "0": why.append("relay rc " + relay_rc)
if checked != "yes": why.append("check failed")
if not same: why.append("replay differs")
if decisions != {"attributed": 8}: why.append("decisions %s" % decisions)
if page != "1" or stop != "1": why.append("unreported: page %s, stop %s" % (page, stop))
if nested != 4: why.append("subagent lanes nested: %d" % nested)
if leaks: why.append("canary in " + ",".join(leaks))
print("report-run: 5 sessions (A, D claude + 2 subagents each, B, C codex, U codex unwrapped), hosts rc %s, relay rc %s, "
      "%d records %s, check %s, replay %s, unreported: stop %s page %s, nested lanes %d, canary %s: %s%s" % (
      ",".join("%s=%d" % kv for kv in rcs.items()), relay_rc, len(recs),
      "/".join("%s %d" % kv for kv in sorted(decisions.items())), checked, "same" if same else "DIFFERS",
      stop, page, nested, ("in " + ",".join(leaks)) if leaks else "nowhere",
      "FAIL " if why else "PASS", "; ".join(why)))
PY
    )
    case $REPORT_ROW in *": PASS"*) ;; *) fail=1 ;; esac
}

# ------------------------------------------------------------------ sdk-*
SDK=$E2E/sdk
SDK_ROWS=()

# sdk_leg SCENARIO HOLD LEG: runs the scenario's program once, directly or through
# `windowtap run` (LEG direct or windowtap), against a fresh scripted upstream. Both legs have
# the same environment: the SDKs' base URLs point at the upstream (through windowtap, run makes
# each the upstream of the mount it points the program at). Returns the program's exit code.
sdk_leg() {
    local scenario=$1 hold=$2 leg=$3
    local dir="$RUNS/$scenario-h$hold-$leg" argv sleep_ms=0 program=() launcher=() rc=0
    mkdir -p "$dir/home" "$dir/work"
    start_upstream "$dir" "$hold"
    if [ "$leg" = windowtap ]; then
        # As a user declares it for any relay: no --ingest (the SDK passes the wrapper none of
        # run's environment; it finds run's socket in the program's).
        argv=$(printf '["%s","wrap","--alias","%s","--","python3","%s"]' "$WT" "$ALIAS" "$E2E/echo_mcp.py")
        launcher=("$WT" run --records "$dir/records.jsonl" --capture "$dir/trace.jsonl" --)
    else
        argv=$(printf '["python3","%s"]' "$E2E/echo_mcp.py")
    fi
    local py=$SDK/venv/bin/python
    case $scenario in
    sdk-openai-py) program=("$py" "$ROOT/scripts/e2e-sdk/openai_agent.py" streamed) ;;
    sdk-openai-py-json) program=("$py" "$ROOT/scripts/e2e-sdk/openai_agent.py" json) ;;
    sdk-openai-py-parallel) program=("$py" "$ROOT/scripts/e2e-sdk/openai_agent.py" parallel) sleep_ms=3000 ;;
    sdk-openai-py-parallel-meta)
        program=("$py" "$ROOT/scripts/e2e-sdk/openai_agent.py" parallel-meta) sleep_ms=3000 ;;
    sdk-openai-js) program=(node "$SDK/js/openai_agent.mjs" streamed) ;;
    sdk-openai-js-json) program=(node "$SDK/js/openai_agent.mjs" json) ;;
    sdk-claude-py) program=("$py" "$ROOT/scripts/e2e-sdk/claude_agent.py") ;;
    sdk-opencode)
        # OpenCode reads its provider and MCP servers from opencode.json in its working
        # directory; the base URL and key from the environment, as the SDKs' are.
        printf '{"provider":{"openai":{"options":{"baseURL":"{env:OPENAI_BASE_URL}","apiKey":"{env:OPENAI_API_KEY}"}}},"model":"openai/gpt-4.1","autoupdate":false,"share":"disabled","mcp":{"%s":{"type":"local","command":%s,"enabled":true,"environment":{"E2E_MARKER":"%s","E2E_SLEEP_MS":"0"}}}}\n' \
            "$ALIAS" "$argv" "$dir/marker.jsonl" >"$dir/work/opencode.json"
        program=("$E2E/opencode/node_modules/.bin/opencode" run)
        ;;
    *) die "unknown scenario $scenario" ;;
    esac
    (cd "$dir/work" && env HOME="$dir/home" \
        OPENAI_BASE_URL="http://$UP_ADDR/v1" OPENAI_API_KEY="$API_KEY" \
        ANTHROPIC_BASE_URL="http://$UP_ADDR" ANTHROPIC_API_KEY="$API_KEY" \
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_TELEMETRY=1 DISABLE_AUTOUPDATER=1 \
        DISABLE_ERROR_REPORTING=1 E2E_CLAUDE_CLI="$BIN/claude" E2E_MCP_ARGV="$argv" \
        E2E_SLEEP_MS="$sleep_ms" E2E_MARKER="$dir/marker.jsonl" timeout 180 \
        "${launcher[@]}" "${program[@]}" "$PROMPT" </dev/null >"$dir/host.jsonl" 2>"$dir/host.err") || rc=$?
    stop "$UP_PID"
    return $rc
}

# run_sdk SCENARIO HOLD: both legs, then the row: every call decided as the rule allows
# (attributed; both `ambiguous` for -parallel; attributed with call_id for -parallel-meta),
# with what the capture says the client sent (client label, call names, hints, thread).
run_sdk() {
    local scenario=$1 hold=$2 expect=attributed drc=0 vrc=0 checked=yes result
    case $scenario in
    *-parallel) expect=ambiguous ;;
    *-parallel-meta) expect=attributed+call_id ;;
    sdk-opencode) expect=no_window ;;
    esac
    # An ES module resolves its imports from its own directory: it runs beside the SDK.
    rm -f "$SDK/js/openai_agent.mjs"
    cp "$ROOT/scripts/e2e-sdk/openai_agent.mjs" "$SDK/js/openai_agent.mjs"
    say "$scenario hold=${hold}ms"
    sdk_leg "$scenario" "$hold" direct || drc=$?
    [ -n "${E2E_DIRECT_ONLY:-}" ] || sdk_leg "$scenario" "$hold" windowtap || vrc=$?
    local d="$RUNS/$scenario-h$hold-direct" v="$RUNS/$scenario-h$hold-windowtap"
    "$WT" check "$v/trace.jsonl" "$v/records.jsonl" >"$v/check.out" 2>&1 || checked=NO
    "$WT" replay "$v/trace.jsonl" -o "$v/replayed.jsonl" >/dev/null 2>"$v/replay.err" || true
    result=$(python3 "$ROOT/scripts/e2e-sdk/check_sdk.py" "$expect" "$d" "$v" "$CANARY")
    echo "$result" >"$v/result.json"
    local ok
    ok=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["ok"])' "$result")
    local status=PASS
    if [ "$ok" != True ] || [ "$checked" != yes ] || [ "$drc" != 0 ] || [ "$vrc" != 0 ]; then
        status=FAIL
        fail=1
    fi
    SDK_ROWS+=("$(python3 -c 'import json,sys
r = json.loads(sys.argv[1])
scenario, hold, rc, checked, status = sys.argv[2:7]
print("%-28s %5s %-5s %3s %3s  %-22s %-6s %-16s %-8s %-6s %-28s %-4s %-5s %-6s %s %s" % (
    scenario, hold, rc, r["calls"], r["records"], ",".join(r["decisions"]) or "-",
    ",".join(r["clients"]) or "-", ",".join(r["names"]) or "-", ",".join(r["hints"]) or "none",
    "yes" if r["threads"] else "none", " ".join(r["evidence"]) or "-",
    "yes" if r["same_output"] else "NO", checked, "yes" if r["replay_same"] else "NO",
    status, r["why"] or ""))' "$result" "$scenario" "$hold" "$drc/$vrc" "$checked" "$status")")
}

scenarios=(claude-toolsearch claude-direct codex-ws-function codex-ws-code codex-http-function codex-http-code
    claude-subagent-blocking claude-subagent-background claude-subagent-parallel codex-subagent-parallel
    sdk-openai-py sdk-openai-py-json sdk-openai-py-parallel sdk-openai-py-parallel-meta sdk-openai-js
    sdk-openai-js-json sdk-claude-py sdk-opencode
    shared-relay shared-relay-hosts-off report-run)
if [ -n "${E2E_SCENARIOS:-}" ]; then read -r -a scenarios <<<"$E2E_SCENARIOS"; fi
read -r -a holds <<<"${E2E_HOLDS:-0 1500}"

say "$CLAUDE_VER; $CODEX_VER; windowtap driven by: $WT_MODE"
started=$SECONDS
ROWS=()
fail=0
SHARED_ROWS=()
SHARED_RUN=
# run_shared [hosts-off]: the shared-relay scenario (holds do not apply): the direct leg, then
# (unless E2E_DIRECT_ONLY) the windowtap leg, each checked per session; with hosts-off also
# the leg with `--hosts off`, checked against the windowtap leg. A leg already run (both
# scenarios asked for) is not run again.
run_shared() {
    local legs=() leg dir result checked
    [ -f "$RUNS/shared-relay-direct/result.json" ] || legs+=(direct)
    if [ -z "${E2E_DIRECT_ONLY:-}" ]; then
        [ -f "$RUNS/shared-relay-windowtap/result.json" ] || legs+=(windowtap)
        [ "${1:-}" = hosts-off ] && legs+=(hosts-off)
    fi
    for leg in "${legs[@]}"; do
        say "shared-relay ($leg)"
        dir="$RUNS/shared-relay-$leg"
        shared_relay "$leg" || { fail=1; SHARED_RUN+="$leg: did not run; "; continue; }
        checked=-
        if [ "$leg" != direct ]; then
            checked=yes
            "$WT" check "$dir/trace.jsonl" "$dir/records.jsonl" >"$dir/check.out" 2>&1 || checked=NO
            "$WT" replay "$dir/trace.jsonl" -o "$dir/replayed.jsonl" >/dev/null 2>"$dir/replay.err" || true
        fi
        result=$(python3 "$E2E/check_shared.py" "$E2E" "$dir/spec.json")
        echo "$result" >"$dir/result.json"
        while IFS= read -r row; do SHARED_ROWS+=("$row"); done < <(python3 -c 'import json,sys
r = json.loads(sys.argv[1])
for x in r["rows"]:
    print("%-9s %-3s %-18s %6s %4s %3s %3s  %-22s %-8s %-4s %-6s %-8s %-6s %-4s %s %s" % (
        sys.argv[2], x["name"], x["kind"], x["sleep_ms"], x["rc"], x["mcp"], x["recs"], x["decisions"],
        x["identity"], x["host"], x["hostid"], x["outcome"], x["nested"], x["same"],
        "PASS" if x["ok"] else "FAIL", x["why"] or "-"))' "$result" "$leg")
        SHARED_RUN+=$(python3 -c 'import json,sys
r = json.loads(sys.argv[1]); run = r["run"]
leg, rc, checked = sys.argv[2:5]
if leg == "direct":
    print("direct: %s; " % ("PASS" if r["ok"] else "FAIL"), end="")
else:
    print("%s: relay exit %s (SIGINT), %d records (%d not matched to a call), check %s, replay %s, canary %s; " % (
        leg, rc, run["records"], run["unmatched"], checked, "yes" if run["replay_same"] else "NO",
        ("in " + ",".join(run["leaks"])) if run["leaks"] else "nowhere"), end="")' "$result" "$leg" "$SHARED_RELAY_RC" "$checked")
        if [ "$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["ok"])' "$result")" != True ] ||
            { [ "$leg" != direct ] && { [ "$checked" != yes ] || [ "$SHARED_RELAY_RC" != 0 ]; }; }; then
            fail=1
        fi
    done
}

for scenario in "${scenarios[@]}"; do
    if [ "$scenario" = shared-relay ]; then
        run_shared
        continue
    fi
    if [ "$scenario" = shared-relay-hosts-off ]; then
        run_shared hosts-off
        continue
    fi
    if [ "$scenario" = report-run ]; then
        [ -z "${E2E_DIRECT_ONLY:-}" ] && run_report
        continue
    fi
    if [ "${scenario#sdk-}" != "$scenario" ]; then
        for hold in "${holds[@]}"; do run_sdk "$scenario" "$hold"; done
        continue
    fi
    for hold in "${holds[@]}"; do
        say "$scenario hold=${hold}ms"
        drc=0
        one_run "$scenario" "$hold" direct || drc=$?
        d="$RUNS/$scenario-h$hold-direct"
        marker_calls=
        [ "$scenario" = codex-subagent-parallel ] && marker_calls=$RUNS/$scenario-h$hold-direct/marker.jsonl
        direct_calls=$(E2E_MARKER_CALLS=$marker_calls python3 "$E2E/check.py" "${scenario%%-*}" "$d/host.jsonl" "$d/host.jsonl" /dev/null /dev/null /dev/null x |
            python3 -c 'import json,sys; print(json.load(sys.stdin)["calls"])')
        answers=$(python3 -c 'import json,sys
print(",".join(json.loads(l).get("answer","") for l in open(sys.argv[1]) if "answer" in l and json.loads(l).get("answer") not in ("websocket","models","hello")))' "$d/upstream.log")
        if [ -n "${E2E_DIRECT_ONLY:-}" ]; then
            status=PASS
            [ "$drc" = 0 ] && [ "$direct_calls" -ge 1 ] || { status=FAIL; fail=1; }
            ROWS+=("$(printf '%-26s %5s  %-5s %3s  %-84s %s' "$scenario" "$hold" "$drc" "$direct_calls" "$answers" "$status")")
            continue
        fi
        vrc=0
        one_run "$scenario" "$hold" windowtap || vrc=$?
        v="$RUNS/$scenario-h$hold-windowtap"
        # The capture and the records must be valid, and replaying the capture offline must
        # give the records the live run wrote.
        checked=yes
        "$WT" check "$v/trace.jsonl" "$v/records.jsonl" >"$v/check.out" 2>&1 || checked=NO
        "$WT" replay "$v/trace.jsonl" -o "$v/replayed.jsonl" >/dev/null 2>"$v/replay.err" || true
        [ -n "$marker_calls" ] && marker_calls=$v/marker.jsonl
        result=$(E2E_MARKER_CALLS=$marker_calls python3 "$E2E/check.py" "${scenario%%-*}" "$d/host.jsonl" "$v/host.jsonl" \
            "$v/records.jsonl" "$v/trace.jsonl" "$v/replayed.jsonl" "$CANARY" "$v/records.jsonl" "$v/trace.jsonl" "$v/relay.err" \
            "$v/relay.out" "$v/host.err")
        # `why` is last, so it takes the rest of the line, spaces and all.
        read -r ok calls recs attributed early evidence same replay why < <(python3 -c 'import json,sys
r=json.loads(sys.argv[1])
print(r["ok"], r["calls"], r["records"], r["attributed"], r["early"], "+".join(r["evidence"]) or "-", "yes" if r["same_output"] else "NO", "yes" if r["replay_same"] else "NO", r["why"] or "-")' "$result")
        status=PASS
        if [ "$checked" != yes ]; then why="windowtap check failed ($v/check.out); $why"; fi
        if [ -n "$PHOENIX_BASE" ] && [ "$WT_MODE" = run ]; then
            phoenix_check "$scenario" "$v" || { ok=False; why="phoenix: joined trace check failed; $why"; }
        fi
        if [ "$ok" != True ] || [ "$checked" != yes ] || [ "$drc" != 0 ] || [ "$vrc" != 0 ]; then
            status=FAIL
            fail=1
        fi
        ROWS+=("$(printf '%-26s %5s  %-5s %3s  %3s/%-3s %5s  %-4s %-5s %-6s %-48s %s %s' "$scenario" "$hold" "$drc/$vrc" "$calls" "$recs" "$attributed" "$early" "$same" "$checked" "$replay" "$evidence" "$status" "$why")")
    done
done

{
    echo
    echo "windowtap end-to-end with real hosts ($CLAUDE_VER; $CODEX_VER; windowtap: $WT_MODE)"
    if [ ${#ROWS[@]} -gt 0 ]; then
        if [ -n "${E2E_DIRECT_ONLY:-}" ]; then
            printf '%-26s %5s  %-5s %3s  %-84s %s\n' scenario hold rc mcp "upstream answers" status
        else
            printf '%-26s %5s  %-5s %3s  %-7s %5s  %-4s %-5s %-6s %-48s %s\n' scenario hold rc mcp rec/att early same check replay evidence status
        fi
        printf '%s\n' "${ROWS[@]}"
    fi
    if [ ${#SDK_ROWS[@]} -gt 0 ]; then
        echo
        echo "sdk: programs on agent SDKs, directly and through \`windowtap run -- PROGRAM\` (what the capture shows each client sent)"
        printf '%-28s %5s %-5s %3s %3s  %-22s %-6s %-16s %-8s %-6s %-28s %-4s %-5s %-6s %s\n' \
            scenario hold rc mcp rec decisions client "call names" hints thread evidence same check replay status
        printf '%s\n' "${SDK_ROWS[@]}"
    fi
    if [ ${#SHARED_ROWS[@]} -gt 0 ]; then
        echo
        echo "shared-relay: one windowtap relay (ingest socket: ${SHARED_INGEST:-none, direct only}), five sessions at once"
        printf '%-9s %-3s %-18s %6s %4s %3s %3s  %-22s %-8s %-4s %-6s %-8s %-6s %-4s %s\n' leg ses kind sleep rc mcp rec decisions identity host hostid outcome nested same status
        printf '%s\n' "${SHARED_ROWS[@]}"
        echo "${SHARED_RUN%; }"
    fi
    if [ ${#PHOENIX_ROWS[@]} -gt 0 ]; then
        echo
        echo "phoenix: the host's trace and windowtap's, one trace (--join-host-trace; DIR/phoenix.json, DIR/phoenix-trace.png)"
        printf '%s\n' "${PHOENIX_ROWS[@]}"
    fi
    if [ -n "$REPORT_ROW" ]; then
        echo
        echo "$REPORT_ROW"
    fi
    echo "runs: $RUNS ($((SECONDS - started)) s)"
} | tee "$E2E/summary.txt"
exit $fail
