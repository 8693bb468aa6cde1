// A tool named `login` called with secrets in its arguments, for the tests of JSON keys that name
// a secret: the model's call in an OpenAI chat answer (whole or streamed) and the caller's own MCP
// tools/call through a node under a guardrail policy, to a tool server that answers with one
// JSON-RPC answer (what the tool server was sent and what the caller got back).
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { ConfigBundle, GuardrailPolicy } from '../../../proto/src/index.js';
import { buildApp } from '../../../edge-node/src/app.js';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import { bundleKey, newCallerKey, testBundle } from '../config-fixtures.js';
import { policy } from './guardrail-fixtures.js';

type Teardown = { teardown(fn: () => unknown): void };

/** A scripted upstream's OpenAI chat answer: one call of tool `login` with `toolArguments` (a JSON text). */
export const loginCallAnswer = (toolArguments: string) => ({
  json: {
    id: 'x', object: 'chat.completion', model: 'm',
    choices: [{ index: 0, message: { role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'login', arguments: toolArguments } }] }, finish_reason: 'tool_calls' }],
    usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
  },
});

/** One SSE event of an OpenAI chat stream with `delta`. */
export const chatChunk = (delta: Record<string, unknown>, finish: string | null = null) =>
  `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', model: 'm', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;

/** Asks `node` to log the user in (alias `echo`); the answer's text, throwing on any status but 200. */
export async function askToLogIn(node: { baseURL: string; secret: string }, stream = false): Promise<string> {
  const res = await fetch(`${node.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
    body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'log me in' }], ...(stream ? { stream: true } : {}) }),
  });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`status ${res.status}: ${text}`);
  return text;
}

/** The tool-call arguments an OpenAI chat stream carried, its pieces joined. */
export function streamedToolArguments(sse: string): string {
  let args = '';
  for (const line of sse.split('\n')) {
    if (!line.startsWith('data: {')) continue;
    const event = JSON.parse(line.slice(6)) as { choices: { delta: { tool_calls?: { function?: { arguments?: string } }[] } }[] };
    for (const call of event.choices[0]?.delta.tool_calls ?? []) args += call.function?.arguments ?? '';
  }
  return args;
}

export interface GuardedToolCall {
  status: number;
  /** The body the caller got back. */
  text: string;
  /** The bodies the tool server was sent. */
  received: string[];
}

/** Calls tool `login` (JSON-RPC id 7) with `toolArguments`; the tool server answers 200 with `answer` (a JSON text). */
export async function guardedToolCall(t: Teardown, rules: GuardrailPolicy['rules'], answer: string, toolArguments: Record<string, unknown>): Promise<GuardedToolCall> {
  const caller = newCallerKey();
  const received: string[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      received.push(Buffer.concat(chunks).toString('utf8'));
      res.writeHead(200, { 'content-type': 'application/json' }).end(answer);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const bundle: ConfigBundle = testBundle({
    nodeId: 'node-mcp', version: 5, upstreamUrl: 'http://127.0.0.1:9/v1',
    keys: [bundleKey('key-guarded', caller.sha256, { guardrailPolicyId: 'p' })],
    node: { surfaces: ['model', 'tools'], spool: { quotaBytes: 1 << 20, fullPolicy: 'reject' } },
    toolServers: [{ name: 'tools', url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`, apiKey: 'tool-key-0123456789abcdef', timeoutMs: 10_000, callMicros: 0 }],
    guardrailPolicies: [policy('p', rules)],
  });
  const spool = { open: () => undefined, finalise: async () => undefined, keepsBodies: () => true, fullness: () => 0 };
  const app = await buildApp({ holder: ConfigHolder.ready(fromBundle(bundle)), logger: createLogger({ level: 'silent' }), services: { nodeId: bundle.nodeId, spool } });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  const res = await fetch(`http://127.0.0.1:${(app.server.address() as AddressInfo).port}/mcp/tools`, {
    method: 'POST',
    headers: { authorization: `Bearer ${caller.secret}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'login', arguments: toolArguments } }),
  });
  return { status: res.status, text: await res.text(), received };
}
