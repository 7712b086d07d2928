// An agent on the OpenAI Agents SDK for JavaScript (@openai/agents), for
// scripts/e2e-real-hosts.sh:  node openai_agent.mjs MODE PROMPT  (MODE: streamed | json).
//
// The MCP server is an MCPServerStdio whose command line is E2E_MCP_ARGV (a JSON array); it is
// given only E2E_SLEEP_MS and E2E_MARKER in `env`, so the MCP TypeScript SDK starts it with its default
// environment (HOME, LOGNAME, PATH, SHELL, TERM, USER) plus that. The model client reads
// OPENAI_BASE_URL and OPENAI_API_KEY. Prints the final output.
import { Agent, MCPServerStdio, run, setTracingDisabled } from '@openai/agents';

const [mode, prompt] = process.argv.slice(2);
setTracingDisabled(true);
const argv = JSON.parse(process.env.E2E_MCP_ARGV);
const server = new MCPServerStdio({
  name: 'probe',
  command: argv[0],
  args: argv.slice(1),
  env: { E2E_SLEEP_MS: process.env.E2E_SLEEP_MS || '0', E2E_MARKER: process.env.E2E_MARKER },
  cacheToolsList: true,
});
await server.connect();
try {
  const agent = new Agent({ name: 'e2e', instructions: 'Use the tools.', model: 'gpt-4.1', mcpServers: [server] });
  let output;
  if (mode === 'streamed') {
    const result = await run(agent, prompt, { stream: true });
    for await (const _ of result) { /* drain */ }
    await result.completed;
    output = result.finalOutput;
  } else {
    output = (await run(agent, prompt)).finalOutput;
  }
  console.log(JSON.stringify({ final_output: output }));
} finally {
  await server.close();
}
