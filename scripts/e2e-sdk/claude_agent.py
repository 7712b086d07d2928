"""An agent on the Claude Agent SDK (Python), for scripts/e2e-real-hosts.sh.

    python claude_agent.py PROMPT

The SDK drives the Claude Code CLI (E2E_CLAUDE_CLI), which reads ANTHROPIC_BASE_URL and
ANTHROPIC_API_KEY from the environment the SDK passes on. The MCP server is a stdio server
declared in `mcp_servers` with E2E_MCP_ARGV as its command line. Prints each message's type.
"""
import asyncio
import json
import os
import sys

from claude_agent_sdk import ClaudeAgentOptions, query


async def main():
    argv = json.loads(os.environ["E2E_MCP_ARGV"])
    options = ClaudeAgentOptions(
        mcp_servers={"probe": {"type": "stdio", "command": argv[0], "args": argv[1:],
                               "env": {"E2E_SLEEP_MS": os.environ.get("E2E_SLEEP_MS", "0"),
                      "E2E_MARKER": os.environ["E2E_MARKER"]}}},
        allowed_tools=["mcp__probe__echo"],
        cli_path=os.environ["E2E_CLAUDE_CLI"],
        strict_mcp_config=True,
    )
    async for message in query(prompt=sys.argv[1], options=options):
        print(json.dumps({"type": type(message).__name__}))


asyncio.run(main())
