#!/usr/bin/env bash
# Two relays of one user side by side, with the real Codex (issue 27, item 2): relay A on the
# default ingest socket, relay B on a socket of its own, Codex pointed at B with the lines of
# `windowtap env codex` for B's socket and examples/mcp/codex.config.toml as written (the
# server swapped for the e2e echo server), once with its `env_vars` and once without. Prints
# where the call's record went and what B says at its stop.
#
# Needs what scripts/e2e-real-hosts.sh installs (target/e2e: Codex, echo_mcp.py), the debug
# build (cargo build --bin windowtap --example scripted_upstream) and root, for:
#   unshare -n -m --propagation private bash scripts/two-relays-real-codex.sh
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
E2E=$ROOT/target/e2e
WT=$ROOT/target/debug/windowtap
UP=$ROOT/target/debug/examples/scripted_upstream
ip link set lo up
mount -t tmpfs -o mode=1777 tmpfs /tmp
unset XDG_RUNTIME_DIR TMPDIR WINDOWTAP_INGEST
W=/tmp/w; mkdir -p $W
wait_line() { for _ in $(seq 200); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done; return 1; }
for leg in with-env-vars without; do
  D=$W/$leg; mkdir -p $D/home $D/codex-home $D/b
  $UP --listen 127.0.0.1:0 --alias probe --tool echo --input '{"text":"x"}' --hold-ms 0 --log $D/up.log >$D/up.out 2>$D/up.err &
  UPP=$!; wait_line $D/up.out '^listening on '; UPA=$(sed -n 's/^listening on //p' $D/up.out)
  $WT relay --listen 127.0.0.1:0 >$D/a.out 2>$D/a.err & AP=$!
  wait_line $D/a.err 'ChatGPT login'
  $WT relay --listen 127.0.0.1:0 --ingest $D/b/ingest.sock --upstream openai=http://$UPA --records $D/b/records.jsonl >$D/b.out 2>$D/b.err & BP=$!
  wait_line $D/b.err 'ChatGPT login'
  BADDR=$(sed -n 's/.*listening on http:\/\/\([^ ]*\).*/\1/p' $D/b.err | head -1)
  python3 - "$ROOT/examples/mcp/codex.config.toml" "$E2E/echo_mcp.py" "$leg" > $D/codex-home/config.toml <<'PY'
import sys, tomllib, json
c = tomllib.load(open(sys.argv[1], "rb"))
s = c["mcp_servers"].pop("everything")
s["args"] = ["wrap", "--alias", "probe", "--", "python3", sys.argv[2]]
if sys.argv[3] == "without": s.pop("env_vars")
s["default_tools_approval_mode"] = "approve"
print("[mcp_servers.probe]")
for k, v in s.items(): print(k, "=", json.dumps(v))
PY
  # As after eval "$(windowtap env codex)" with B's socket.
  eval "$(WINDOWTAP_INGEST=$D/b/ingest.sock $WT env codex --codex-auth api)"
  echo "[$leg] env: $(declare -f codex | tr -s ' \n' ' ')"
  (cd $D && PATH=$ROOT/target/debug:$PATH HOME=$D/home CODEX_HOME=$D/codex-home OPENAI_API_KEY=sk-dummy \
     timeout 120 $E2E/npm/node_modules/.bin/codex exec --skip-git-repo-check --json -c analytics.enabled=false --disable plugins \
     -c "openai_base_url=\"http://$BADDR/openai/v1\"" -m gpt-5 "Call the echo tool once." </dev/null >$D/host.jsonl 2>$D/host.err)
  echo "[$leg] codex rc=$?"
  unset -f codex; unset WINDOWTAP_INGEST
  kill -TERM $BP; wait $BP; kill -TERM $AP; wait $AP; kill $UPP; wait $UPP 2>/dev/null
  echo "[$leg] B records: $(grep -c attribution $D/b/records.jsonl 2>/dev/null)"
  grep -h "relay stopped\|relay: warning\|not the default" $D/b.err | sed "s/^/[$leg] B: /"
  grep -h "relay stopped" $D/a.err | sed "s/^/[$leg] A: /"
  grep -h "windowtap wrap" $D/host.err $D/codex-home/log/* 2>/dev/null | head -3 | sed "s/^/[$leg] wrap: /"
done
