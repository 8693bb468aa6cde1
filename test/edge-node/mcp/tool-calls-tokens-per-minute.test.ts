// Tool calls are priced per call, not per token: what a tool server relays (an event stream's
// framing, hours of a GET stream's notifications) is no model output. MCP traffic is recorded
// with no token usage and counts against no tokens/min window, so a push channel that ends does
// not rate-limit the key's next model calls; requests/min still applies.
import t from 'tap';
import type { RateLimits, RequestRecord } from '../../../proto/src/index.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import { MemoryLimitStore } from '../../../edge-node/src/rate-limit/memory-limit-store.js';
import { NodeRateLimiter } from '../../../edge-node/src/rate-limit/node-rate-limiter.js';
import { bundleKey } from '../config-fixtures.js';
import { postInitialize, startOneSessionToolServer } from '../mcp-get-stream-fixtures.js';
import { startPipelineNode } from '../pipeline/pipeline-harness.js';
import { waitFor } from '../../fixtures/wait-for.js';

const SESSION = 'session-tpm';
const TOKENS_PER_MINUTE = 2000;

async function startLimitedNode(t: Parameters<typeof startPipelineNode>[0], toolServerUrl: string, limits: RateLimits) {
  const records: RequestRecord[] = [];
  const node = await startPipelineNode(t, {
    upstreamUrl: 'http://127.0.0.1:9/v1',
    bundle: (base, keyHash) => ({
      apiKeys: [bundleKey('key-a', keyHash, { limits })],
      node: { ...base.node, surfaces: ['model', 'tools'] },
      toolServers: [{ name: 'tools', url: toolServerUrl, apiKey: null, timeoutMs: 10_000, callMicros: 0 }],
    }),
    services: {
      limiter: new NodeRateLimiter(new MemoryLimitStore(), createLogger({ level: 'silent' })),
      spool: { open: () => undefined, finalise: async (record) => void records.push(record), keepsBodies: () => true, fullness: () => 0 },
    },
  });
  const auth = { authorization: `Bearer ${node.secret}` };
  const chat = async (): Promise<{ status: number; code: string | undefined }> => {
    const res = await fetch(`${node.origin}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'echo', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] }),
    });
    const body = (await res.json()) as { error?: { code?: string } };
    return { status: res.status, code: body.error?.code };
  };
  return { url: `${node.origin}/mcp/tools`, auth, records, chat };
}

t.test('a GET stream that relayed many notifications is recorded with no token usage and leaves the key tokens/min for its model calls', async (t) => {
  const toolServerUrl = await startOneSessionToolServer(t, SESSION, (res) => {
    // About 40 KB of log notifications (some 10 000 tokens if its bytes were counted), then the end.
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    for (let i = 0; i < 200; i += 1) {
      const message = { jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: `log line ${i} ${'x'.repeat(150)}` } };
      res.write(`event: message\ndata: ${JSON.stringify(message)}\n\n`);
    }
    res.end();
  });
  const node = await startLimitedNode(t, toolServerUrl, { tokensPerMinute: TOKENS_PER_MINUTE });
  await (await postInitialize(node.url, node.auth)).text();
  const get = await fetch(node.url, { headers: { ...node.auth, accept: 'text/event-stream', 'mcp-session-id': SESSION } });
  t.equal(get.status, 200);
  t.ok((await get.text()).length > 30_000, 'the stream relayed its notifications');
  const record = await waitFor(() => node.records.find((r) => r.upstreamModel === 'GET'), { what: "the GET stream's record" });
  t.match(record, { status: 'ok', usage: { inputTokens: 0, outputTokens: 0, estimated: false } });
  const after = await node.chat();
  t.not(after.code, 'ZN_ERR_RATE_LIMITED', 'a push channel that ended does not use up the key tokens/min');
  t.not(after.status, 429);
});

t.test('a tools/call whose arguments are larger than tokens/min is admitted, while requests/min still applies', async (t) => {
  const toolServerUrl = await startOneSessionToolServer(t, SESSION, (res) => void res.writeHead(405).end());
  const node = await startLimitedNode(t, toolServerUrl, { tokensPerMinute: 100, requestsPerMinute: 2 });
  const call = (): Promise<Response> => fetch(node.url, {
    method: 'POST',
    headers: { ...node.auth, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    // Some 5 000 tokens by the prompt estimate: over the key's tokens/min on its own.
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'echo', arguments: { text: 'x'.repeat(20_000) } } }),
  });
  const first = await call();
  t.equal(first.status, 200, 'tokens/min does not apply to a tool call');
  await first.text();
  const second = await call();
  t.equal(second.status, 200);
  await second.text();
  const third = await call();
  t.equal(third.status, 429, 'requests/min does');
  t.match(await third.json(), { error: { code: 'ZN_ERR_RATE_LIMITED', message: /requests per minute/ } });
  await waitFor(() => node.records.length === 3, { what: 'the three records' });
  for (const record of node.records.filter((r) => r.status === 'ok')) t.match(record.usage, { inputTokens: 0, outputTokens: 0, estimated: false });
});
