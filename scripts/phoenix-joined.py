#!/usr/bin/env python3
"""Checks, through Phoenix's REST API, that a real host's trace and windowtap's are one
(`--join-host-trace`, docs/otlp.md "Joining the host's trace"). Run by scripts/e2e-real-hosts.sh
when E2E_PHOENIX is set (scripts/phoenix-real-claude.sh); standard library only.

    phoenix-joined.py BASE PROJECT RECORDS UPSTREAM_LOG [--expect-parent NAME]

PROJECT is the Phoenix project windowtap exported to (its OTEL_EXPORTER_OTLP_HEADERS); the
host's own spans may be in any project (Codex sends no project header), so parents are looked
up across all of them. The check, for the run's spans:

- every `chat` span has a parent that Phoenix stored, in the same trace, and (with
  --expect-parent) of that name: the host's span the request's `traceparent` named;
- every attributed MCP call (one per `attributed` record) is an `execute_tool` span under a
  `chat` span, in that trace, with the window's attribution (`windowtap.decision` =
  `attributed`, `windowtap.window.*`), and every trace holding a call has exactly one root,
  the host's (Claude Code's interaction, Codex's turn): one trace per interaction;
- every model request the upstream logged carried exactly one `traceparent` of the W3C shape
  (with --expect-parent).

Prints one JSON object: ok, why, counts, the span names seen, the parent names of the chat
spans and each joined span's ancestors, what the upstream saw (header names, trace-context
shapes), and `url`, Phoenix's view of one joined trace with an MCP call's span selected (for
the picture). Exit 0 when ok.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from phoenix_api import get, project_spans  # noqa: E402


def all_spans(base):
    spans = {}
    for p in get(base, "/v1/projects")["data"]:
        for s in project_spans(base, p["name"]):
            s["_project"] = p
            spans[s["context"]["span_id"]] = s
    return spans


def lines(path):
    out = []
    try:
        for line in open(path, encoding="utf-8"):
            line = line.strip()
            if line.startswith("{"):
                out.append(json.loads(line))
    except FileNotFoundError:
        pass
    return out


def main():
    args = sys.argv[1:]
    expect = None
    if "--expect-parent" in args:
        i = args.index("--expect-parent")
        expect = args[i + 1]
        del args[i:i + 2]
    base, project, records_path, upstream_log = args
    attributed = [r for r in lines(records_path)
                  if r.get("type") == "attribution" and r.get("decision") == "attributed"]

    # Ingestion is asynchronous and the host flushes its spans on exit: poll, bounded, until
    # the count has stood still for a few seconds.
    spans, last, still = {}, -1, 0
    for _ in range(120):
        spans = all_spans(base)
        still = still + 1 if len(spans) == last else 0
        last = len(spans)
        if still >= 6 and spans:
            break
        time.sleep(0.5)

    ours = [s for s in spans.values() if s["_project"]["name"] == project
            and s["name"].split(" ")[0] in ("chat", "execute_tool", "invoke_agent")]
    chats = [s for s in ours if s["name"].split(" ")[0] == "chat"]
    calls = [s for s in ours if s["name"].startswith("execute_tool")
             and "windowtap.interval" in (s.get("attributes") or {})]
    why = []

    def parent(s):
        return spans.get(s.get("parent_id") or "")

    chat_parents = {}
    for c in chats:
        p = parent(c)
        key = p["name"] if p else ("<not stored>" if c.get("parent_id") else "<root>")
        chat_parents[key] = chat_parents.get(key, 0) + 1
        if p is None:
            why.append(f"{c['name']} {c['context']['span_id']}: parent "
                       f"{'not stored' if c.get('parent_id') else 'none'}")
        elif p["context"]["trace_id"] != c["context"]["trace_id"]:
            why.append(f"{c['name']}: parent in another trace")
        elif expect and p["name"] != expect:
            why.append(f"{c['name']}: parent is {p['name']!r}, not {expect!r}")

    joined_calls = 0
    for t in calls:
        a = t.get("attributes") or {}
        if a.get("windowtap.decision") != "attributed":
            continue
        c = parent(t)
        if c is None or c["name"].split(" ")[0] != "chat":
            why.append(f"{t['name']}: not under a chat span")
            continue
        if not any(k.startswith("windowtap.window.") for k in a):
            why.append(f"{t['name']}: no window attribution")
        h = parent(c)
        if h is not None and (expect is None or h["name"] == expect):
            joined_calls += 1
    if len(attributed) == 0:
        why.append("no attributed MCP call in the records")
    if joined_calls != len(attributed):
        why.append(f"{joined_calls} of {len(attributed)} attributed calls under a host-joined chat span")

    # One trace per interaction: each trace holding a call has one root, the host's.
    roots = {}
    for tid in {t["context"]["trace_id"] for t in calls}:
        in_trace = [s for s in spans.values() if s["context"]["trace_id"] == tid]
        rs = [s["name"] for s in in_trace if not s.get("parent_id")]
        roots[tid] = rs
        if len(rs) != 1 or rs[0].startswith("invoke_agent"):
            why.append(f"trace with a call: roots {rs}")

    # What the host sent: header names and the shape of its trace context (never values).
    seen = lines(upstream_log)
    model = [e for e in seen if e.get("seen") == "POST"
             and (e.get("path", "").endswith("/v1/messages") or e.get("path", "").endswith("/responses"))]
    upgrades = [e for e in seen if e.get("seen") == "GET" and e.get("path", "").endswith("/responses")]
    frames = [e for e in seen if e.get("frame") == "response.create"]
    shapes = {}
    for e in model:
        k = " + ".join(e.get("traceparent") or []) or "none"
        shapes[k] = shapes.get(k, 0) + 1
    frame_shapes = {}
    for e in frames:
        k = ((e.get("client_metadata") or {}).get("traceparent")) or "none"
        frame_shapes[k] = frame_shapes.get(k, 0) + 1
    if expect:
        bad = [e for e in model if len(e.get("traceparent") or []) != 1
               or not e["traceparent"][0].startswith("00-<32 hex>-<16 hex>-")]
        if bad or not model:
            why.append(f"{len(bad)} of {len(model)} model requests without one W3C traceparent")

    # The run's traces (those its spans are in), their span names, and each chat span's and
    # call's ancestors up to the root, as counted paths.
    run_traces = {s["context"]["trace_id"] for s in ours}
    names = {}
    for s in spans.values():
        if s["context"]["trace_id"] in run_traces:
            names[s["name"]] = names.get(s["name"], 0) + 1

    def path(s):
        out = []
        while s is not None and len(out) < 64:
            out.append(s["name"])
            s = parent(s)
        return " < ".join(out)

    paths = {}
    for s in chats + calls:
        k = path(s)
        paths[k] = paths.get(k, 0) + 1
    url = None
    for t in calls:
        c = parent(t)
        if c is not None and parent(c) is not None:
            url = (f"{base}/projects/{t['_project']['id']}/traces/{t['context']['trace_id']}"
                   f"?selectedSpanNodeId={t['id']}")
            break
    out = {
        "ok": not why, "why": why[:20],
        "run_traces": len(run_traces),
        "run_trace_spans": sum(1 for s in spans.values() if s["context"]["trace_id"] in run_traces),
        "chat_spans": len(chats), "chat_parents": chat_parents,
        "attributed_records": len(attributed), "calls_joined": joined_calls,
        "call_trace_roots": sorted({" | ".join(r) for r in roots.values()}),
        "paths": dict(sorted(paths.items())),
        "span_names": dict(sorted(names.items())),
        "model_requests": len(model), "traceparent_shapes": shapes,
        "model_request_headers": sorted({h for e in model for h in e.get("headers", [])}),
        "turn_metadata_keys": sorted({k for e in model for k in (e.get("turn_metadata_keys") or [])
                                      if isinstance(e.get("turn_metadata_keys"), list)}),
        "ws_upgrades": len(upgrades),
        "ws_upgrade_headers": sorted({h for e in upgrades for h in e.get("headers", [])}),
        "ws_upgrade_traceparent": sorted({" + ".join(e.get("traceparent") or []) or "none"
                                          for e in upgrades}),
        "ws_frames": len(frames), "ws_frame_traceparent": frame_shapes,
        "ws_client_metadata_keys": sorted({k for e in frames
                                           for k in ((e.get("client_metadata") or {}).get("keys") or [])}),
        "url": url,
    }
    print(json.dumps(out))
    sys.exit(0 if out["ok"] else 1)


if __name__ == "__main__":
    main()
