// One MCP client of the official TypeScript SDK, driven by bench_service.py over this process's stdin.
//
//   node client.mjs COMMAND [ARGS...]   starts the server COMMAND over stdio and connects to it
//
// Prints {"ready": ...} once connected; then, for each line {"query": ...} read on stdin, calls
// retrieve_skill_bundle and prints {"ms": ..., "chars": ...}: the call's own time, measured here with
// performance.now() from callTool to its resolved result, so the stdin/stdout hop to the benchmark is not in it.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import readline from "node:readline";

const [command, ...args] = process.argv.slice(2);
const client = new Client({ name: "segos-bench-ts-client", version: "0" });
const transport = new StdioClientTransport({ command, args, stderr: "ignore" });
let protocol = null; // the client hands the negotiated version to transports that take it (HTTP ones)
transport.setProtocolVersion = (version) => {
  protocol = version;
};
await client.connect(transport);
const tools = await client.listTools();
const say = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");
say({ ready: true, tools: tools.tools.length, server: client.getServerVersion(), protocol });

for await (const line of readline.createInterface({ input: process.stdin })) {
  const { query } = JSON.parse(line);
  const t = performance.now();
  const res = await client.callTool({ name: "retrieve_skill_bundle", arguments: { query } });
  const ms = performance.now() - t;
  if (res.isError) {
    say({ error: res.content?.[0]?.text ?? "tool error" });
    continue;
  }
  say({ ms, chars: res.content[0].text.length });
}
await client.close();
