// The node's key for a tool server never reaches a caller through the tool server's answer: a tool
// server (or a proxy's debug page in front of it) whose 400 repeats its request headers would
// otherwise hand `Authorization: Bearer <key>` to anyone holding a Zenova API key. Relayed JSON and
// other non-stream bodies have the key replaced, as written and JSON-escaped.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { buildApp } from '../../../edge-node/src/app.js';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import { withoutSecret } from '../../../edge-node/src/providers/mcp/mcp-call.js';
import { bundleKey, newCallerKey, testBundle } from '../config-fixtures.js';

const TOOL_KEY = 'mcp-tool/server-key-SECRET-0042';
const caller = newCallerKey();

t.test('a tool server answer that repeats the request headers reaches the caller without the node key', async (t) => {
  let answer: { status: number; contentType: string } = { status: 400, contentType: 'application/json' };
  const tool = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(answer.status, { 'content-type': answer.contentType });
      res.end(answer.contentType === 'application/json'
        ? JSON.stringify({ jsonrpc: '2.0', id: 1, error: { code: -32600, message: 'bad request', data: { received_headers: req.headers } } })
        : `bad request; got authorization: ${String(req.headers.authorization)}`);
    });
  });
  await new Promise<void>((resolve) => tool.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => tool.close(() => resolve())));
  const toolUrl = `http://127.0.0.1:${(tool.address() as AddressInfo).port}/mcp`;
  const bundle = testBundle({
    nodeId: 'node-mcp', version: 5, upstreamUrl: 'http://127.0.0.1:9/v1', keys: [bundleKey('key-mcp', caller.sha256)],
    node: { surfaces: ['model', 'tools'], spool: { quotaBytes: 1 << 20, fullPolicy: 'reject' } },
    toolServers: [{ name: 'tools', url: toolUrl, apiKey: TOOL_KEY, timeoutMs: 10_000, callMicros: 0 }],
  });
  const app = await buildApp({ holder: ConfigHolder.ready(fromBundle(bundle)), logger: createLogger({ level: 'silent' }), services: { nodeId: 'node-mcp' } });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  const origin = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  const call = async (): Promise<{ status: number; text: string }> => {
    const res = await fetch(`${origin}/mcp/tools`, {
      method: 'POST',
      headers: { authorization: `Bearer ${caller.secret}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'x', arguments: {} } }),
    });
    return { status: res.status, text: await res.text() };
  };

  for (const [status, contentType] of [[400, 'application/json'], [200, 'application/json'], [400, 'text/plain']] as const) {
    answer = { status, contentType };
    const got = await call();
    t.equal(got.status, status, `${status} ${contentType}: relayed with its status`);
    t.notOk(got.text.includes(TOOL_KEY) || got.text.includes(TOOL_KEY.replaceAll('/', '\\/')), `${status} ${contentType}: the key is not in the body`);
    t.match(got.text, /Bearer \[redacted\]/, `${status} ${contentType}: the rest of the answer is relayed`);
  }
});

t.test('the key is replaced wherever it occurs, and nothing else changes', async (t) => {
  const key = 'abcdefgh/12345678';
  t.equal(withoutSecret(Buffer.from(`x${key}y${key}`), key).toString(), 'x[redacted]y[redacted]');
  t.equal(withoutSecret(Buffer.from('"abcdefgh\\/12345678"'), key).toString(), '"[redacted]"', 'JSON-escaped');
  const plain = Buffer.from('nothing secret here at all');
  t.equal(withoutSecret(plain, key), plain, 'an answer without the key is the same buffer');
  t.equal(withoutSecret(plain, null), plain, 'no key, nothing to replace');
});
