"""An agent on the OpenAI Agents SDK (Python), as a user writes one, for scripts/e2e-real-hosts.sh.

    python openai_agent.py MODE PROMPT

MODE: `streamed` (Runner.run_streamed), `json` (Runner.run: a non-streaming create, the answer
one JSON body), `parallel` (two agents of this one process, Runner.run at once, each calling
the one tool), `parallel-meta` (the same, with a `tool_meta_resolver` that puts the model's
call id in the request's `_meta.callId`, which windowtap's wrapper reads).

The MCP server is an `MCPServerStdio` whose command line is E2E_MCP_ARGV (a JSON array: the
server under `windowtap wrap`, or the plain server); it is given only E2E_SLEEP_MS and E2E_MARKER in `env`,
so the MCP SDK starts it with its small default environment (HOME, LOGNAME, PATH, SHELL, TERM,
USER) plus that: nothing of windowtap's. The model client reads OPENAI_BASE_URL and
OPENAI_API_KEY as any program's does. Prints the final output of each run.
"""
import asyncio
import json
import os
import sys

from agents import Agent, Runner, set_tracing_disabled
from agents.mcp import MCPServerStdio


def call_id_meta(context):
    # The model's call id of the function call being run (a ToolContext's tool_call_id).
    return {"callId": context.run_context.tool_call_id}


async def main():
    mode, prompt = sys.argv[1], sys.argv[2]
    set_tracing_disabled(True)  # no trace export to api.openai.com
    argv = json.loads(os.environ["E2E_MCP_ARGV"])
    params = {"command": argv[0], "args": argv[1:],
              "env": {"E2E_SLEEP_MS": os.environ.get("E2E_SLEEP_MS", "0"),
                      "E2E_MARKER": os.environ["E2E_MARKER"]}}
    resolver = call_id_meta if mode == "parallel-meta" else None
    async with MCPServerStdio(name="probe", params=params, cache_tools_list=True,
                              client_session_timeout_seconds=30,
                              tool_meta_resolver=resolver) as server:
        def agent(n):
            return Agent(name="e2e-%d" % n, instructions="Use the tools.", model="gpt-4.1",
                         mcp_servers=[server])
        if mode == "streamed":
            result = Runner.run_streamed(agent(0), prompt)
            async for _ in result.stream_events():
                pass
            outputs = [result.final_output]
        elif mode == "json":
            outputs = [(await Runner.run(agent(0), prompt)).final_output]
        else:
            results = await asyncio.gather(Runner.run(agent(1), prompt),
                                           Runner.run(agent(2), prompt))
            outputs = [r.final_output for r in results]
    for o in outputs:
        print(json.dumps({"final_output": o}))


asyncio.run(main())
