#!/usr/bin/env python3
"""Writes the seed corpora in fuzz/corpus/<target>/ from the project's test scenarios.

Run from anywhere: `python3 fuzz/make_seeds.py`. It clears and rewrites fuzz/corpus/. The
inputs follow the layouts in fuzz/src/lib.rs (module docs): the bodies, frames and lines are the
ones the observer unit tests, correlator/tests/observe_relay_api.rs, the trace fixtures
(traces/*.jsonl, traces/expected/*.records.jsonl), docs/ingest.md and the JSON-RPC tests use.
Only the standard library is needed; zstd and brotli bodies are produced by the harness itself
(encoded mode), gzip and deflate ones also here for raw mode.
"""

import gzip
import pathlib
import re
import shutil
import struct
import zlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"


def write(target, name, data):
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)


def sse(events, eol="\n"):
    return "".join(f"event: {n}{eol}data: {d}{eol}{eol}" for n, d in events).encode()


# --- Anthropic Messages (observe::anthropic tests, observe_relay_api.rs) ---------------------

FIRST_TURN = b'{"model":"claude-x","stream":true,"messages":[{"role":"user","content":"use the probe"}]}'
CONTINUATION = (
    b'{"model":"claude-x","stream":true,"messages":[{"role":"user","content":"use the probe"},'
    b'{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"mcp__probe__echo","input":{}}]},'
    b'{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"result"},'
    b'{"type":"text","text":"go on"}]}]}'
)


def message(mid, blocks, reason="tool_use"):
    ev = [("message_start", '{"type":"message_start","message":{"id":"%s","type":"message","role":"assistant",'
           '"model":"claude-x","content":[],"stop_reason":null,"usage":{"input_tokens":10,"output_tokens":1}}}' % mid)]
    for i, (kind, bid) in enumerate(blocks):
        if kind == "text":
            ev.append(("content_block_start", '{"type":"content_block_start","index":%d,"content_block":{"type":"text","text":""}}' % i))
            ev.append(("content_block_delta", '{"type":"content_block_delta","index":%d,"delta":{"type":"text_delta","text":"output"}}' % i))
        else:
            ev.append(("content_block_start", '{"type":"content_block_start","index":%d,"content_block":{"type":"%s","id":"%s","name":"mcp__probe__echo","input":{}}}' % (i, kind, bid)))
            ev.append(("content_block_delta", '{"type":"content_block_delta","index":%d,"delta":{"type":"input_json_delta","partial_json":"{\\"text\\":"}}' % i))
            ev.append(("ping", '{"type":"ping"}'))
            ev.append(("content_block_delta", '{"type":"content_block_delta","index":%d,"delta":{"type":"input_json_delta","partial_json":"\\"arg\\"}"}}' % i))
        ev.append(("content_block_stop", '{"type":"content_block_stop","index":%d}' % i))
    ev.append(("message_delta", '{"type":"message_delta","delta":{"stop_reason":"%s","stop_sequence":null},"usage":{"output_tokens":30}}' % reason))
    ev.append(("message_stop", '{"type":"message_stop"}'))
    return ev


ANTHROPIC = {
    "tool_loop": (FIRST_TURN, sse(message("msg_1", [("text", None), ("tool_use", "toolu_1")]))),
    "continuation_crlf": (CONTINUATION, sse(message("msg_2", [("text", None)], "end_turn"), "\r\n")),
    "server_tool": (FIRST_TURN, sse(message("msg_3", [("server_tool_use", "srvtoolu_1"), ("tool_use", "toolu_2")]))),
    "overloaded": (FIRST_TURN, sse(message("msg_4", [("text", None)])[:2] + [
        ("error", '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}')])),
    "cut": (FIRST_TURN, sse(message("msg_6", [("tool_use", "toolu_3")]))[:-40]),
    "bad_index": (FIRST_TURN, sse([message("msg_7", [])[0],
                                  ("content_block_start", '{"type":"content_block_start","index":"zero"}')])),
    "data_only": (FIRST_TURN, b"".join(b"data: %s\n\n" % d.encode() for _, d in message("msg_8", [("tool_use", "toolu_4")]))),
}
ANTHROPIC_JSON = b'''{"id":"msg_5","type":"message","role":"assistant","content":[
    {"type":"text","text":"output"},
    {"type":"tool_use","id":"toolu_C","name":"mcp__probe__echo","input":{"text":"arg"}}],
    "stop_reason":"tool_use"}'''

# --- Responses (observe::responses tests) ----------------------------------------------------


def resp_event(kind, rid, lane=None):
    l = f',"stream_id":"{lane}"' if lane else ""
    return (f"response.{kind}", '{"type":"response.%s","sequence_number":0,"response":{"id":"%s","object":"response",'
            '"status":"in_progress","output":[]}%s}' % (kind, rid, l))


def item_events(item, iid, lane=None):
    l = f',"stream_id":"{lane}"' if lane else ""
    return [
        ("response.output_item.added", '{"type":"response.output_item.added","output_index":0,"item":%s%s}' % (item, l)),
        ("response.function_call_arguments.delta", '{"type":"response.function_call_arguments.delta","item_id":"%s","output_index":0,"delta":"{\\"te"%s}' % (iid, l)),
        ("response.output_item.done", '{"type":"response.output_item.done","output_index":0,"item":%s%s}' % (item, l)),
    ]


FUNCTION = '{"type":"function_call","id":"fc_1","call_id":"call_1","name":"mcp__probe__echo","arguments":"{\\"text\\":\\"arg\\"}","status":"completed"}'
NS_FUNCTION = '{"type":"function_call","id":"fc_2","call_id":"call_2","name":"echo","namespace":"mcp__probe__","arguments":"{}","status":"completed"}'
CUSTOM = '{"type":"custom_tool_call","id":"ctc_1","call_id":"call_3","name":"exec","input":"await tools.mcp__probe__echo({text:\'arg\'})"}'
REASONING = '{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"opaque"}'

RESP_FIRST = b'{"model":"gpt-x","stream":true,"input":[{"role":"user","content":"use the probe"}]}'
RESP_NEXT = (b'{"model":"gpt-x","stream":true,"previous_response_id":"resp_1","input":['
             b'{"type":"function_call_output","call_id":"call_1","output":"result"},'
             b'{"type":"custom_tool_call_output","call_id":"call_3","output":"r"},"bare string"]}')

RESPONSES = {
    "function_call": (RESP_FIRST, sse([resp_event("created", "resp_1")] + item_events(FUNCTION, "fc_1")
                                      + [resp_event("completed", "resp_1")])),
    "namespaced_and_custom": (RESP_NEXT, sse([resp_event("created", "resp_2")] + item_events(NS_FUNCTION, "fc_2")
                                             + item_events(CUSTOM, "ctc_1") + item_events(REASONING, "rs_1")
                                             + [resp_event("completed", "resp_2")], "\r\n")),
    "failed": (RESP_FIRST, sse([resp_event("created", "resp_3"), resp_event("in_progress", "resp_3"),
                                resp_event("failed", "resp_3")])),
    "incomplete": (RESP_FIRST, sse([resp_event("created", "resp_4")] + item_events(FUNCTION, "fc_1")
                                   + [resp_event("incomplete", "resp_4")])),
    "error": (RESP_FIRST, sse([resp_event("created", "resp_5"),
                               ("error", '{"type":"error","code":"server_error","message":"x","sequence_number":2}')])),
    "data_only": (RESP_FIRST, b"".join(b"data: %s\n\n" % d.encode() for _, d in
                                       [resp_event("created", "resp_6")] + item_events(FUNCTION, "fc_1")
                                       + [resp_event("completed", "resp_6")]) + b"data: [DONE]\n\n"),
}
RESPONSES_JSON = ('{"id":"resp_7","object":"response","status":"completed","output":[%s,%s]}'
                  % (REASONING, FUNCTION)).encode()


def http_input(flags, shape, seed, req, resp):
    return bytes([flags, shape]) + struct.pack("<QI", seed, len(req)) + req + resp


def http_seeds(target, scenarios, whole_json):
    # flags: bits 0-2 request encoding, 3-5 response encoding (0 none, 1 gzip, 2 deflate, 3 br,
    # 4 zstd, 5 unknown), bit 6 raw. shape: bits 0-2 content type, 3+ status script.
    for i, (name, (req, resp)) in enumerate(sorted(scenarios.items())):
        write(target, f"{name}", http_input(0, 0, 0x1234_5678 + i, req, resp))
        enc = 1 + i % 4
        write(target, f"{name}_enc{enc}", http_input(enc | (((enc % 4) + 1) << 3), 1 | (1 << 3), 7 + i, req, resp))
    name, (req, resp) = sorted(scenarios.items())[0]
    write(target, "raw_gzip", http_input(0x40 | (1 << 3) | 2, 0, 99, zlib.compress(req), gzip.compress(resp, mtime=0)))
    write(target, "raw_identity", http_input(0x40, 0, 5, req, resp))
    write(target, "raw_deflate_raw", http_input(0x40 | (2 << 3), 0, 5, req, zlib.compress(resp)[2:-4]))
    write(target, "json_whole", http_input(0, 2, 3, req, whole_json))
    write(target, "error_status", http_input(0, 3 << 3, 3, req, resp))


# --- WebSocket (observe::exchange and observe::ws_frames tests) -------------------------------

WS_CLIENT = [
    b'{"type":"response.create","model":"gpt-x","input":[{"role":"user","content":"go"}]}',
    b'{"type":"response.create","previous_response_id":"resp_1","input":[{"type":"function_call_output","call_id":"call_1","output":"r"}]}',
    b'{"type":"response.create","stream_id":"a","previous_response_id":"r","input":[]}',
    b'{"type":"response.append","input":[{"type":"custom_tool_call_output","call_id":"call_3","output":"r"}]}',
    b'{"type":"response.processed"}',
]
WS_SERVER = [
    b'{"type":"response.created","response":{"id":"resp_1"}}',
    ('{"type":"response.output_item.done","output_index":0,"item":%s}' % FUNCTION).encode(),
    b'{"type":"response.completed","response":{"id":"resp_1"}}',
    b'{"type":"response.created","response":{"id":"resp_2"},"stream_id":"a"}',
    ('{"type":"response.output_item.done","item":%s,"stream_id":"a"}' % CUSTOM).encode(),
    b'{"type":"response.failed","response":{"id":"resp_2"},"stream_id":"a"}',
    b'{"type":"error","status":400,"error":{"type":"invalid_request_error"}}',
]


def ws_built(ext, messages, seed=0x77):
    # messages: (to_server, opcode index, fragments-1, compress, ping_inside, payload)
    out = bytearray([ext, 0]) + struct.pack("<Q", seed)
    for to_server, op, frags, compress, ping, payload in messages:
        flags = int(to_server) | (frags << 1) | (int(compress) << 3) | (int(ping) << 4) | (op << 5)
        out += bytes([flags]) + struct.pack("<H", len(payload)) + payload
    return bytes(out)


def ws_frame(fin, rsv1, opcode, payload, mask=None):
    f = bytearray([(fin << 7) | (rsv1 << 6) | opcode])
    m = 0x80 if mask else 0
    n = len(payload)
    if n < 126:
        f.append(m | n)
    elif n <= 0xFFFF:
        f += bytes([m | 126]) + struct.pack(">H", n)
    else:
        f += bytes([m | 127]) + struct.pack(">Q", n)
    if mask:
        f += mask + bytes(b ^ mask[i & 3] for i, b in enumerate(payload))
    else:
        f += payload
    return bytes(f)


def ws_raw(ext, pieces, seed=0x99):
    out = bytearray([ext, 1]) + struct.pack("<Q", seed)
    for to_server, data in pieces:
        out += bytes([int(to_server)]) + struct.pack("<H", len(data)) + data
    return bytes(out)


def ws_seeds():
    conversation = [(True, 0, 0, True, False, WS_CLIENT[0])] + [
        (False, 0, i % 3, True, i == 1, m) for i, m in enumerate(WS_SERVER[:3])] + [
        (True, 0, 2, True, True, WS_CLIENT[1]), (True, 6, 0, False, False, b"hi"),
        (False, 7, 0, False, False, b"hi")]
    lanes = [(True, 0, 0, False, False, WS_CLIENT[2]), (True, 0, 1, True, False, WS_CLIENT[3]),
             (True, 0, 0, True, False, WS_CLIENT[4])] + [
        (False, 0, 1, True, False, m) for m in WS_SERVER[3:]] + [
        (False, 4, 0, True, False, b"\x00\x01binary"), (True, 5, 0, False, False, b"\x03\xe8bye")]
    for ext in range(7):
        write("ws_frames", f"built_conversation_ext{ext}", ws_built(ext, conversation, 0x77 + ext))
        write("ws_frames", f"built_lanes_ext{ext}", ws_built(ext, lanes, 0x1234 + ext))
    # Raw bytes as the relay copies them: masked client frames, a fragmented server message with
    # a ping inside, and a permessage-deflate connection whose messages share one window.
    mask = b"\x37\xfa\x21\x3d"
    client = ws_frame(1, 0, 1, WS_CLIENT[0], mask)
    half = len(WS_SERVER[1]) // 2
    server = (ws_frame(1, 0, 1, WS_SERVER[0]) + ws_frame(0, 0, 1, WS_SERVER[1][:half])
              + ws_frame(1, 0, 9, b"") + ws_frame(1, 0, 0, WS_SERVER[1][half:]) + ws_frame(1, 0, 1, WS_SERVER[2]))
    write("ws_frames", "raw_plain", ws_raw(0, [(True, client), (False, server), (False, ws_frame(1, 0, 8, b"\x03\xe8"))]))
    comp = zlib.compressobj(1, zlib.DEFLATED, -15)
    deflated = b""
    for m in WS_SERVER[:3]:
        d = comp.compress(m) + comp.flush(zlib.Z_SYNC_FLUSH)
        assert d.endswith(b"\x00\x00\xff\xff")
        deflated += ws_frame(1, 1, 1, d[:-4])
    ccomp = zlib.compressobj(1, zlib.DEFLATED, -15)
    d = ccomp.compress(WS_CLIENT[1]) + ccomp.flush(zlib.Z_SYNC_FLUSH)
    write("ws_frames", "raw_deflate", ws_raw(1, [(True, ws_frame(1, 1, 1, d[:-4], mask)), (False, deflated)]))
    write("ws_frames", "raw_long_lengths", ws_raw(0, [(False, ws_frame(1, 0, 1, WS_SERVER[1] + b" " * 300)),
                                                      (False, b"\x81\x7f" + struct.pack(">Q", 1 << 40))]))


# --- Request bodies (observe::body tests) ------------------------------------------------------

BODIES = [
    FIRST_TURN, CONTINUATION, RESP_FIRST, RESP_NEXT,
    b'{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"a"}]},{"role":"assistant","content":"x"},{"role":"user","content":[{"type":"tool_result","tool_use_id":"b"},{"type":"tool_result"}]}]}',
    b'{"messages":"not an array"}',
    b'{"input":"just a prompt","previous_response_id":null}',
    b'{"type":"response.create","stream_id":"lane-1","input":[1,true,null,[2],{"type":"function_call_output","call_id":"c"}]}',
    b'{"messages":[],"input":[]}',
    b'[]',
    b'{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t\\u00e9"}]}]}',
]


# --- Trace, records, ingest and JSON-RPC lines --------------------------------------------------

INGEST = [
    b'{"v":1,"type":"start","id":"w4242-9f1c2a7e-1","alias":"probe","tool":"echo","start_ns":81234567890,"tool_use_id":"toolu_01","item_id":null,"call_id":null,"thread":null}',
    b'{"v":1,"type":"end","id":"w4242-9f1c2a7e-1","alias":"probe","tool":"echo","start_ns":81234567890,"end_ns":81299999999,"outcome":"result","tool_use_id":"toolu_01","item_id":null,"call_id":null,"thread":null}',
    b'{"v":1,"type":"end","id":"w1-ab-1","alias":"probe","tool":"echo \\"quoted\\"","start_ns":5,"end_ns":9,"outcome":"cancelled","item_id":"fc_1","call_id":"call_1","thread":"th"}',
    b'{"v":1,"type":"start","id":"i","alias":"a","tool":"t","start_ns":1,"thread":7}',
    b'{"v":1,"type":"end","id":"i","alias":"a","tool":"t","start_ns":3,"end_ns":2,"outcome":"result"}',
    b'{"v":2,"type":"start"}',
]


# An MCP 2026-07-28 session with a Multi Round-Trip call: input_required with a state (written
# with escapes the retry echoes plainly), the retry with inputResponses and the state, a
# second call whose round is never retried. Directions: bit set = server to client.
MRTR = [
    b'{"jsonrpc":"2.0","id":"d","method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}',
    b'{"jsonrpc":"2.0","id":"d","result":{"resultType":"complete","supportedVersions":["2026-07-28"]}}',
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ask","arguments":{"q":1},"_meta":{"claudecode/toolUseId":"toolu_1"}}}',
    b'{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","inputRequests":{"c":{"method":"elicitation/create","params":{"message":"m"}}},"requestState":"st\\/\\u0041"}}',
    b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ask","arguments":{"q":1},"_meta":{"claudecode/toolUseId":"toolu_1"},"inputResponses":{"c":{"action":"accept","content":{"a":"b"}}},"requestState":"st/A"}}',
    b'{"jsonrpc":"2.0","id":2,"result":{"resultType":"complete","content":[],"isError":false}}',
    b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"ask","_meta":{"itemId":"fc_1"}}}',
    b'{"jsonrpc":"2.0","id":3,"result":{"resultType":"input_required","requestState":"x"}}',
]
MRTR_DIRS = 0b10101010


def jsonrpc_lines():
    src = (ROOT / "correlator/src/observe/jsonrpc.rs").read_text()
    lines = []
    for lit in re.findall(r'r#"(.*?)"#', src, re.S):
        if "{{" in lit or "\n" in lit or "jsonrpc" not in lit:
            continue
        lines.append(lit.encode())
    return lines


# --- MCP mount (observe::mcp_http tests) -------------------------------------------------------

def mcp_call(i, tool="echo"):
    return (b'{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"%s","arguments":{"q":1},'
            b'"_meta":{"claudecode/toolUseId":"toolu_%s","progressToken":2}}}' % (i, tool.encode(), i.strip(b'"')))


def mcp_result(i, extra=b""):
    return b'{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"r"}],"isError":false%s}}' % (i, extra)


MCP_PROGRESS = b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":2,"progress":1}}'


def mcp_seed(name, flags, seed, request, response):
    write("mcp_mount", name, struct.pack("<BQI", flags, seed, len(request)) + request + response)


def mcp_mount_seeds():
    """Layout (fuzz/src/lib.rs): flags u8, seed u64, request len u32, request, response."""
    sse_ok = b"event: message\ndata: " + MCP_PROGRESS + b"\n\nid: 1\ndata: " + mcp_result(b"1") + b"\n\n"
    mcp_seed("sse_answer", 0, 0x5EED, mcp_call(b"1"), sse_ok)
    mcp_seed("json_answer", 1, 7, mcp_call(b"1"), mcp_result(b"1"))
    batch = b"[" + mcp_call(b"1") + b"," + mcp_call(b'"b"', "other") + b"]"
    mcp_seed("batch_json", 1, 9, batch, b"[" + mcp_result(b'"b"') + b"," + mcp_result(b"1") + b"]")
    mcp_seed("batch_sse_crlf", 0, 11, batch,
             b"\xef\xbb\xbf: hi\r\ndata: " + mcp_result(b'"b"') + b"\r\n\r\nid: 2\rdata:" + mcp_result(b"1") + b"\r\r")
    mcp_seed("id_null_error_4xx", 1 | 32, 3, batch,
             b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"m"}}')
    # An event id, then the stream breaks: under 2025 the call runs on and the GET answers it.
    mcp_seed("resumed_2025", 2 | 8, 5, mcp_call(b"7"), b"id: ev-1\ndata: " + MCP_PROGRESS + b"\n\n")
    mcp_seed("closed_2026", 4 | 16, 5, mcp_call(b"7"), b"data: " + MCP_PROGRESS + b"\n\n")
    mrtr = (b'{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","inputRequests":{},'
            b'"requestState":"st\\/A"}}')
    mcp_seed("input_required", 1 | 4, 13, mcp_call(b"1", "ask"), mrtr)
    retry = (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ask","inputResponses":{},'
             b'"requestState":"st/A","_meta":{"claudecode/toolUseId":"toolu_1"}}}')
    mcp_seed("retry_and_cancel", 0 | 4, 17,
             b"[" + retry + b',{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}]',
             b"data: " + mrtr + b"\n\ndata: " + mcp_result(b"1") + b"\n\n")
    mcp_seed("cut_event", 0 | 8, 19, mcp_call(b"1"), b"data: " + mcp_result(b"1")[:30])
    mcp_seed("gzip_is_not_decoded_here", 1, 21, mcp_call(b"1"), gzip.compress(mcp_result(b"1")))


def main():
    if CORPUS.exists():
        shutil.rmtree(CORPUS)
    http_seeds("sse", ANTHROPIC, ANTHROPIC_JSON)
    http_seeds("responses", RESPONSES, RESPONSES_JSON)
    ws_seeds()
    for i, b in enumerate(BODIES):
        write("body", f"body{i:02}", b)
    for f in sorted((ROOT / "traces").glob("*.jsonl")):
        write("trace_reader", f.stem, f.read_bytes())
    # Every fixture's records: the v2 ones carry the host evidence word and host abstentions.
    for f in sorted((ROOT / "traces" / "expected").glob("*.jsonl")):
        write("trace_reader", f.name.split(".")[0] + "_records", f.read_bytes())
    for i, l in enumerate(INGEST):
        write("ingest", f"line{i}", l)
    lines = jsonrpc_lines()
    # Directions: requests (with "method") client to server, the rest server to client.
    for start in range(0, len(lines), 8):
        group = lines[start:start + 8]
        dirs = sum(1 << i for i, l in enumerate(group) if b'"method"' not in l or b'"id"' not in l and b"cancelled" not in l)
        write("jsonrpc", f"session{start // 8:02}", struct.pack("<QQ", dirs, 0x5EED + start) + b"\n".join(group) + b"\n")
    write("jsonrpc", "mrtr_session", struct.pack("<QQ", MRTR_DIRS, 7) + b"\n".join(MRTR) + b"\n")
    mcp_mount_seeds()
    write("jsonrpc", "batch_and_cut", struct.pack("<QQ", 0b10, 3) + b"[" + lines[0] + b"," + lines[1] + b"]\n" + lines[2][:20])


if __name__ == "__main__":
    main()
