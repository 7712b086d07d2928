#!/usr/bin/env bash
# The real Claude Code's trace and windowtap's as one trace in Phoenix (--join-host-trace;
# docs/otlp.md "Joining the host's trace"). Not in CI: it needs the real hosts
# (scripts/e2e-real-hosts.sh installs them) and PyPI once.
#
#   scripts/phoenix-real-claude.sh
#
# Installs arize-phoenix into a venv (as scripts/phoenix-check.sh does),
# then runs scripts/e2e-real-hosts.sh with E2E_PHOENIX: inside its network namespace Phoenix
# serves on loopback, and each windowtap leg is `windowtap run --join-host-trace
# --otlp-endpoint <Phoenix>` around the real host with a wrapped MCP server. After each leg
# scripts/phoenix-joined.py checks through Phoenix's REST API that every chat span windowtap
# exported hangs under Claude Code's `claude_code.llm_request` span (the one whose
# `traceparent` the request carried), that every attributed MCP call's execute_tool span is
# under its chat span with the window's attribution, and that each such trace has one root,
# Claude Code's interaction; it fails the row otherwise. Pictures (Phoenix's view of the MCP
# call's span in its trace, windowtap's attributes open; scripts/phoenix-picture.mjs with
# playwright-core from npm): target/e2e/runs/<run>/phoenix-trace.png.
#
# Environment: E2E_SCENARIOS (default "claude-toolsearch claude-subagent-blocking"; Codex
# scenarios are reported, not required: see docs/otlp.md for what Codex sends), E2E_HOLDS
# (default 0), WINDOWTAP_PHOENIX_DIR (venv and playwright-core; default target/phoenix, not
# under /tmp).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Not under /tmp: the namespace mounts a fresh one, where the venv would not be seen.
scratch="${WINDOWTAP_PHOENIX_DIR:-$here/target/phoenix}"
venv="$scratch/venv"
if [ ! -x "$venv/bin/phoenix" ]; then
    echo "phoenix-real-claude: installing arize-phoenix into $venv" >&2
    mkdir -p "$scratch"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check arize-phoenix
fi
# playwright-core (npm, once) drives chromium for the pictures; without it, plain chromium.
pw="$scratch/playwright"
if [ ! -d "$pw/node_modules/playwright-core" ]; then
    mkdir -p "$pw"
    [ -f "$pw/package.json" ] || echo '{"private":true}' >"$pw/package.json"
    (cd "$pw" && npm install --no-audit --no-fund --loglevel=error playwright-core >&2) ||
        echo "phoenix-real-claude: no playwright-core: plain chromium pictures" >&2
fi
[ -d "$pw/node_modules/playwright-core" ] && export E2E_PHOENIX_NODE_PATH="$(realpath "$pw/node_modules")"
# The namespace gets a fresh /tmp: the venv must live elsewhere to be seen from inside.
case "$(realpath "$venv")" in
/tmp/*) echo "phoenix-real-claude: WINDOWTAP_PHOENIX_DIR must not be under /tmp (the namespace mounts its own)" >&2; exit 2 ;;
esac
E2E_PHOENIX="$(realpath "$venv")" \
E2E_PHOENIX_EXPECT="${E2E_PHOENIX_EXPECT:-claude=claude_code.llm_request}" \
E2E_SCENARIOS="${E2E_SCENARIOS:-claude-toolsearch claude-subagent-blocking}" \
E2E_HOLDS="${E2E_HOLDS:-0}" \
    exec bash "$here/scripts/e2e-real-hosts.sh"
