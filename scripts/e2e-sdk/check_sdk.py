"""Checks one SDK row of scripts/e2e-real-hosts.sh: a program on an agent SDK, run once directly
and once through `windowtap run`.

    python3 check_sdk.py EXPECT DIRECT_DIR WINDOWTAP_DIR CANARY

EXPECT: `attributed` (every call attributed), `ambiguous` (every call abstained as ambiguous:
two agents of one process calling one tool at once, nothing to tell them apart) or
`attributed+call_id` (every call attributed with the call_id evidence) or `no_window` (a client
whose names the rule does not route: every call abstained as no_window, never attributed).
Prints one JSON object:
what each leg did, what the records and the capture say, and `ok` with `why`. Reads the
records, the capture (`trace.jsonl`), the replayed records, the program's output and the MCP
server's marker (one line per call start and end); never prints a value read from a record
but decisions, reasons, evidence words and client labels.
"""
import json
import os
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


def text(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def calls(d):
    return sum(1 for m in lines(os.path.join(d, "marker.jsonl")) if m.get("ev") == "start")


def output(d):
    """What the program printed, its ids and timings being none of it (final outputs or
    message types only)."""
    return [l for l in lines(os.path.join(d, "host.jsonl"))]


def main():
    expect, direct, via, canary = sys.argv[1:5]
    why = []
    recs = [r for r in lines(os.path.join(via, "records.jsonl")) if r.get("type") == "attribution"]
    trace = lines(os.path.join(via, "trace.jsonl"))
    replayed = lines(os.path.join(via, "replayed.jsonl"))
    n_direct, n_via = calls(direct), calls(via)
    if n_direct < 1:
        why.append("the direct run made no MCP call")
    if n_via != n_direct:
        why.append("%d MCP calls through windowtap, %d directly" % (n_via, n_direct))
    if len(recs) != n_via:
        why.append("%d records for %d MCP calls" % (len(recs), n_via))
    decisions = sorted((r.get("reason") or "attributed") for r in recs)
    evidence = sorted({"+".join(r.get("evidence") or []) for r in recs if r.get("decision") == "attributed"})
    want_reason = {"ambiguous": "ambiguous", "no_window": "no_window"}.get(expect, "attributed")
    if any(d != want_reason for d in decisions):
        why.append("decisions %s, expected every one %s" % (",".join(decisions), want_reason))
    if expect == "attributed+call_id" and any("call_id" not in (r.get("evidence") or []) for r in recs):
        why.append("an attributed call without call_id evidence")
    clients = sorted({e.get("client") for e in trace if e.get("type") == "stream_open"})
    names = sorted({(e.get("namespace") + "." if e.get("namespace") else "") + e.get("name", "")
                    for e in trace if e.get("type") == "tool_call"})
    hints = sorted({k for e in trace if e.get("type") == "mcp_interval"
                    for k in ("tool_use_id", "item_id", "call_id", "thread") if e.get(k)})
    threads = any(e.get("thread") for e in trace if e.get("type") == "stream_open")
    same = output(direct) == output(via)
    if not same:
        why.append("the program's output differs with windowtap")
    # The live records start with the run header (records v1); the replay's are the same
    # attributions.
    replay_same = recs == [r for r in replayed if r.get("type") == "attribution"]
    if not replay_same:
        why.append("replaying the capture gives other records")
    # What windowtap wrote (its stderr is shared with the program's, so it is not searched).
    leaks = [f for f in ("records.jsonl", "trace.jsonl", "records.log")
             if canary in text(os.path.join(via, f))]
    if leaks:
        why.append("canary in " + ",".join(leaks))
    print(json.dumps({
        "ok": not why, "why": "; ".join(why), "calls": n_via, "records": len(recs),
        "decisions": decisions, "evidence": evidence, "clients": clients, "names": names,
        "hints": hints, "threads": threads, "same_output": same, "replay_same": replay_same,
    }))


main()
