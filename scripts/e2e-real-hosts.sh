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
# Environment:
#   E2E_HOLDS       holds (ms) of the terminal event after the tool call item (default "0 1500")
#   E2E_SCENARIOS   subset of scenario names (default: all, see `scenarios` below)
#   E2E_DIRECT_ONLY=1  only the direct runs (checks the hosts and the scripted upstream)
#   CLAUDE_CODE_VERSION, CODEX_VERSION  npm versions to install (default: the ones below)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
E2E=$ROOT/target/e2e
CLAUDE_CODE_VERSION=${CLAUDE_CODE_VERSION:-2.1.332}
CODEX_VERSION=${CODEX_VERSION:-0.171.0}
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
    say "building windowtap and the scripted upstream (release)"
    (cd "$ROOT" && cargo build --release --bin windowtap --example scripted_upstream >&2)
    say "entering a network namespace with loopback only"
    exec unshare -n env WINDOWTAP_E2E_INSIDE=1 bash "${BASH_SOURCE[0]}" "$@"
fi

# ------------------------------------------------------------------ inside the namespace
ip link set lo up
BIN=$E2E/npm/node_modules/.bin
WT=${WINDOWTAP_BIN:-$ROOT/target/release/windowtap}
UPSTREAM=$ROOT/target/release/examples/scripted_upstream
RUNS=$E2E/runs
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
cat >"$E2E/echo_mcp.py" <<'PY'
import json
import sys

SUPPORTED = ["2025-11-25", "2025-06-18", "2025-03-26"]
TOOL = {"name": "echo", "description": "Echoes its text argument back.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}},
                        "required": ["text"]}}


def reply(msg_id, result=None, error=None):
    out = {"jsonrpc": "2.0", "id": msg_id}
    if error is not None:
        out["error"] = error
    else:
        out["result"] = result
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()


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
        text = str((params.get("arguments") or {}).get("text", ""))
        reply(msg_id, {"content": [{"type": "text", "text": "echo: " + text}], "isError": False})
    elif method == "ping":
        reply(msg_id, {})
    else:
        reply(msg_id, error={"code": -32601, "message": "Method not found"})
PY

# The checker: normalizes host output, reads records, looks for canaries.
cat >"$E2E/check.py" <<'PY'
import json
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


def claude_blocks(content):
    if isinstance(content, str):
        return [["text", content]]
    out = []
    for b in content or []:
        t = b.get("type")
        if t == "text":
            out.append(["text", b.get("text")])
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
    """Claude Code stream-json without ids, timings, paths and usage."""
    out = []
    for e in events:
        t, st = e.get("type"), e.get("subtype")
        if t == "system" and st == "init":
            out.append([t, st, e.get("model"),
                        sorted([s.get("name"), s.get("status")] for s in e.get("mcp_servers", [])),
                        sorted(x for x in e.get("tools", []) if x.startswith("mcp__"))])
        elif t in ("assistant", "user"):
            out.append([t, claude_blocks((e.get("message") or {}).get("content"))])
        elif t == "result":
            out.append([t, st, e.get("is_error"), e.get("result"), e.get("num_turns")])
        else:
            out.append([t, st])
    return out


def codex_norm(events):
    """codex exec --json without ids (item ids are synthetic, thread ids random)."""
    out = []
    for e in events:
        t = e.get("type")
        if t and t.startswith("item."):
            item = {k: v for k, v in (e.get("item") or {}).items() if k != "id"}
            out.append([t, item])
        elif t == "turn.completed":
            out.append([t, e.get("usage")])
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
    recs = [r for r in lines(records) if r.get("type") == "attribution"]
    need = ["tool_use_id"] if host == "claude" else ["item_id", "thread"]
    attributed = [r for r in recs if r.get("decision") == "attributed"]
    with_identity = [r for r in attributed
                     if all(n in (r.get("evidence") or []) for n in need)]
    abstained = sorted({r.get("reason") for r in recs if r.get("decision") != "attributed"})
    # How many attributed calls ended before their window's response did (the hold makes the
    # hosts run the call while the response is still streaming, design.md section 3).
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

# ------------------------------------------------------------------ helpers
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
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

# start_upstream DIR HOLD: starts a fresh scripted upstream, sets UP_ADDR and UP_PID.
start_upstream() {
    "$UPSTREAM" --listen 127.0.0.1:0 --alias "$ALIAS" --tool "$TOOL" --input "$TOOL_INPUT" \
        --hold-ms "$2" --log "$1/upstream.log" >"$1/upstream.out" 2>"$1/upstream.err" &
    UP_PID=$!
    PIDS+=("$UP_PID")
    wait_line "$1/upstream.out" '^listening on ' || die "scripted upstream did not start ($1)"
    UP_ADDR=$(sed -n 's/^listening on //p' "$1/upstream.out")
}

stop() { kill -TERM "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

# How windowtap is driven: `windowtap run` once it exists, else relay + wrap by hand.
WT_MODE=manual
if "$WT" run --help >/dev/null 2>&1; then WT_MODE=run; fi
if [ -n "${E2E_WT_MODE:-}" ]; then WT_MODE=$E2E_WT_MODE; fi
RELAY_INGEST_FLAG=
if "$WT" relay --help 2>/dev/null | grep -q -- '--ingest'; then RELAY_INGEST_FLAG=--ingest; fi

# start_relay DIR: `windowtap relay` with both mounts on the scripted upstream; sets
# RELAY_ADDR, RELAY_PID and INGEST (the socket wrappers report to).
start_relay() {
    INGEST="$1/ingest.sock"
    local extra=()
    if [ -n "$RELAY_INGEST_FLAG" ]; then extra=("$RELAY_INGEST_FLAG" "$INGEST"); fi
    "$WT" relay --listen 127.0.0.1:0 \
        --upstream "anthropic=http://$UP_ADDR" --upstream "openai=http://$UP_ADDR" \
        --records "$1/records.jsonl" --capture "$1/trace.jsonl" "${extra[@]}" \
        >"$1/relay.out" 2>"$1/relay.err" &
    RELAY_PID=$!
    PIDS+=("$RELAY_PID")
    wait_line "$1/relay.err" 'listening on http://' || {
        sed 's/^/    relay: /' "$1/relay.err" >&2
        return 1
    }
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
    start_upstream "$dir" "$hold"
    local base="http://$UP_ADDR" wrapped=plain launcher=()
    if [ "$leg" = windowtap ]; then
        if [ "$WT_MODE" = run ]; then
            launcher=("$WT" run --records "$dir/records.jsonl" --capture "$dir/trace.jsonl")
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
        printf '{"mcpServers":{"%s":{"command":%s,"args":%s}}}\n' "$ALIAS" \
            "$(echo "$argv" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)[0]))')" \
            "$(echo "$argv" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)[1:]))')" \
            >"$dir/mcp.json"
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
        (cd "$dir/work" && env "${XENV[@]}" timeout 180 \
            "${launcher[@]}" "$BIN/codex" "${XARGS[@]}" "$PROMPT" </dev/null >"$dir/host.jsonl" 2>"$dir/host.err") || rc=$?
        ;;
    esac
    if [ "$leg" = windowtap ] && [ "$WT_MODE" = manual ]; then stop "$RELAY_PID"; fi
    stop "$UP_PID"
    return $rc
}

scenarios=(claude-toolsearch claude-direct codex-ws-function codex-ws-code codex-http-function codex-http-code)
if [ -n "${E2E_SCENARIOS:-}" ]; then read -r -a scenarios <<<"$E2E_SCENARIOS"; fi
read -r -a holds <<<"${E2E_HOLDS:-0 1500}"

say "$CLAUDE_VER; $CODEX_VER; windowtap driven by: $WT_MODE"
started=$SECONDS
ROWS=()
fail=0
for scenario in "${scenarios[@]}"; do
    for hold in "${holds[@]}"; do
        say "$scenario hold=${hold}ms"
        drc=0
        one_run "$scenario" "$hold" direct || drc=$?
        d="$RUNS/$scenario-h$hold-direct"
        direct_calls=$(python3 "$E2E/check.py" "${scenario%%-*}" "$d/host.jsonl" "$d/host.jsonl" /dev/null /dev/null /dev/null x |
            python3 -c 'import json,sys; print(json.load(sys.stdin)["calls"])')
        answers=$(python3 -c 'import json,sys
print(",".join(json.loads(l).get("answer","") for l in open(sys.argv[1]) if "answer" in l and json.loads(l).get("answer") not in ("websocket","models","hello")))' "$d/upstream.log")
        if [ -n "${E2E_DIRECT_ONLY:-}" ]; then
            status=PASS
            [ "$drc" = 0 ] && [ "$direct_calls" -ge 1 ] || { status=FAIL; fail=1; }
            ROWS+=("$(printf '%-20s %5s  %-5s %3s  %-42s %s' "$scenario" "$hold" "$drc" "$direct_calls" "$answers" "$status")")
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
        result=$(python3 "$E2E/check.py" "${scenario%%-*}" "$d/host.jsonl" "$v/host.jsonl" \
            "$v/records.jsonl" "$v/trace.jsonl" "$v/replayed.jsonl" "$CANARY" "$v/records.jsonl" "$v/trace.jsonl" "$v/relay.err" \
            "$v/relay.out" "$v/host.err")
        # `why` is last, so it takes the rest of the line, spaces and all.
        read -r ok calls recs attributed early evidence same replay why < <(python3 -c 'import json,sys
r=json.loads(sys.argv[1])
print(r["ok"], r["calls"], r["records"], r["attributed"], r["early"], "+".join(r["evidence"]) or "-", "yes" if r["same_output"] else "NO", "yes" if r["replay_same"] else "NO", r["why"] or "-")' "$result")
        status=PASS
        if [ "$checked" != yes ]; then why="windowtap check failed ($v/check.out); $why"; fi
        if [ "$ok" != True ] || [ "$checked" != yes ] || [ "$drc" != 0 ] || [ "$vrc" != 0 ]; then
            status=FAIL
            fail=1
        fi
        ROWS+=("$(printf '%-20s %5s  %-5s %3s  %3s/%-3s %5s  %-4s %-5s %-6s %-42s %s %s' "$scenario" "$hold" "$drc/$vrc" "$calls" "$recs" "$attributed" "$early" "$same" "$checked" "$replay" "$evidence" "$status" "$why")")
    done
done

{
    echo
    echo "windowtap end-to-end with real hosts ($CLAUDE_VER; $CODEX_VER; windowtap: $WT_MODE)"
    if [ -n "${E2E_DIRECT_ONLY:-}" ]; then
        printf '%-20s %5s  %-5s %3s  %-42s %s\n' scenario hold rc mcp "upstream answers" status
    else
        printf '%-20s %5s  %-5s %3s  %-7s %5s  %-4s %-5s %-6s %-42s %s\n' scenario hold rc mcp rec/att early same check replay evidence status
    fi
    printf '%s\n' "${ROWS[@]}"
    echo "runs: $RUNS ($((SECONDS - started)) s)"
} | tee "$E2E/summary.txt"
exit $fail
