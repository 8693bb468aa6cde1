// Tool calls count against requests/min (and concurrency) only, so a JSON-RPC batch counted as one
// request let a key limited to 2 requests a minute run 200 tool calls a minute (100 per batch). An
// MCP POST now counts as many requests as it holds `tools/call` messages (at least one), the same
// number its fee is charged for; Retry-After and the x-ratelimit headers follow that count, and a
// batch holding more calls than the whole per-minute limit is refused at once (no wait lets it in).
import t from 'tap';
import type { PipelineContext } from '../../../edge-node/src/pipeline/context.js';
import type { RateLimits } from '../../../proto/src/index.js';
import { MemoryLimitStore } from '../../../edge-node/src/rate-limit/memory-limit-store.js';
import { NodeRateLimiter } from '../../../edge-node/src/rate-limit/node-rate-limiter.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import { bundleKey } from '../config-fixtures.js';
import { startOneSessionToolServer } from '../mcp-get-stream-fixtures.js';
import { startPipelineNode } from '../pipeline/pipeline-harness.js';
import { ManualClock, callContext, finish, quietLogger } from '../rate-limit/limit-fixtures.js';

const toolCall = (id: number) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'echo', arguments: { text: `call ${id}` } } });
const batchOf = (calls: number) => Array.from({ length: calls }, (_, i) => toolCall(i + 1));

/** An MCP request of key-a (account acct-1) as the limiter sees it. */
function mcpContext(clock: ManualClock, method: string, body: unknown, limits: { keyLimits?: RateLimits; accountLimits?: RateLimits }): PipelineContext {
  const ctx = callContext(clock, { api: 'mcp', ...limits });
  Object.assign(ctx, { body, http: { ...ctx.http, method, path: '/mcp/tools', params: { server: 'tools' } } });
  return ctx;
}

t.test('a batch of k tool calls counts k against requests/min, and Retry-After is the wait for the whole batch', async (t) => {
  const clock = new ManualClock();
  const limiter = new NodeRateLimiter(new MemoryLimitStore(), quietLogger);
  t.teardown(() => limiter.close());
  const keyLimits = { requestsPerMinute: 10 };
  const first = mcpContext(clock, 'POST', batchOf(4), { keyLimits });
  t.equal(limiter.admit(first), undefined, 'four calls fit in ten');
  t.equal(first.responseHeaders['x-ratelimit-remaining-requests'], '6', 'and use four of them');
  finish(first);
  const second = mcpContext(clock, 'POST', batchOf(4), { keyLimits });
  t.equal(limiter.admit(second), undefined);
  t.equal(second.responseHeaders['x-ratelimit-remaining-requests'], '2');
  finish(second);

  const third = mcpContext(clock, 'POST', batchOf(4), { keyLimits });
  const refused = limiter.admit(third);
  t.equal(refused?.error.code, 'ZN_ERR_RATE_LIMITED', 'a third batch of four does not fit in the two left');
  t.match(refused?.error.message, /requests per minute for this key \(limit 10\)/);
  t.equal(third.responseHeaders['x-ratelimit-remaining-requests'], '2', 'nothing charged for the refusal');
  const retryAfterS = Number(third.responseHeaders['retry-after']);
  // Eight counted at the minute's start: four more fit once a quarter of the next minute has passed
  // (8 × 3/4 + 4 = 10), while a single call would fit now.
  t.equal(retryAfterS, 75, 'Retry-After is the wait until four calls fit');

  clock.advance(retryAfterS * 1000 - 1000);
  t.equal(limiter.admit(mcpContext(clock, 'POST', batchOf(4), { keyLimits }))?.error.code, 'ZN_ERR_RATE_LIMITED', 'a second before Retry-After it still does not fit');
  clock.advance(1000);
  const retried = mcpContext(clock, 'POST', batchOf(4), { keyLimits });
  t.equal(limiter.admit(retried), undefined, 'at Retry-After the batch is admitted');
  finish(retried);
});

t.test('an MCP request without tool calls counts one request, as before', async (t) => {
  const clock = new ManualClock();
  const limiter = new NodeRateLimiter(new MemoryLimitStore(), quietLogger);
  t.teardown(() => limiter.close());
  const keyLimits = { requestsPerMinute: 10 };
  const plumbing = [
    mcpContext(clock, 'POST', { jsonrpc: '2.0', id: 1, method: 'initialize', params: {} }, { keyLimits }),
    mcpContext(clock, 'POST', [{ jsonrpc: '2.0', id: 2, method: 'ping' }, { jsonrpc: '2.0', method: 'notifications/initialized' }], { keyLimits }),
    mcpContext(clock, 'GET', undefined, { keyLimits }),
    mcpContext(clock, 'DELETE', undefined, { keyLimits }),
  ];
  let remaining = 10;
  for (const ctx of plumbing) {
    t.equal(limiter.admit(ctx), undefined);
    remaining -= 1;
    t.equal(ctx.responseHeaders['x-ratelimit-remaining-requests'], String(remaining), `${ctx.http.method} counts one`);
    finish(ctx);
  }
});

t.test('a batch holding more tool calls than the whole per-minute limit is refused at once, charging nothing and with no Retry-After', async (t) => {
  const clock = new ManualClock();
  const limiter = new NodeRateLimiter(new MemoryLimitStore(), quietLogger);
  t.teardown(() => limiter.close());
  const keyLimits = { requestsPerMinute: 3 };
  const big = mcpContext(clock, 'POST', batchOf(4), { keyLimits });
  const refused = limiter.admit(big);
  t.equal(refused?.error.code, 'ZN_ERR_RATE_LIMITED');
  t.equal(refused?.error.status, 429);
  t.equal(refused?.error.retryable, false, 'the SDKs are told not to retry: no wait lets it in');
  t.match(refused?.error.message, /Batch too large for the requests per minute limit of this key: limit 3, the batch holds 4 tools\/call messages/);
  t.notOk(big.responseHeaders['retry-after'], 'no Retry-After');
  const small = mcpContext(clock, 'POST', batchOf(3), { keyLimits });
  t.equal(limiter.admit(small), undefined, 'a batch of exactly the limit fits an empty window: the refused one charged nothing');
  t.equal(small.responseHeaders['x-ratelimit-remaining-requests'], '0');
  finish(small);

  const accountLimited = mcpContext(clock, 'POST', batchOf(6), { accountLimits: { requestsPerMinute: 5 } });
  t.match(limiter.admit(accountLimited)?.error.message, /of this account: limit 5, the batch holds 6/, "the account's limit applies the same way");
});

t.test('through the node: a key allowed 2 requests a minute runs 2 tool calls a minute, not 200', async (t) => {
  const toolServerUrl = await startOneSessionToolServer(t, 'session-batch', () => undefined);
  const node = await startPipelineNode(t, {
    upstreamUrl: 'http://127.0.0.1:9/v1',
    bundle: (base, keyHash) => ({
      apiKeys: [bundleKey('key-a', keyHash, { limits: { requestsPerMinute: 2 } })],
      node: { ...base.node, surfaces: ['model', 'tools'] },
      toolServers: [{ name: 'tools', url: toolServerUrl, apiKey: null, timeoutMs: 10_000, callMicros: 0 }],
    }),
    services: { limiter: new NodeRateLimiter(new MemoryLimitStore(), createLogger({ level: 'silent' })) },
  });
  const post = (body: unknown): Promise<Response> => fetch(`${node.origin}/mcp/tools`, {
    method: 'POST',
    headers: { authorization: `Bearer ${node.secret}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify(body),
  });

  const hundred = await post(batchOf(100));
  t.equal(hundred.status, 429, 'a batch of 100 tool calls is refused');
  t.equal(hundred.headers.get('x-should-retry'), 'false');
  t.equal(hundred.headers.get('retry-after'), null);
  t.match(await hundred.json(), { error: { code: 'ZN_ERR_RATE_LIMITED', message: /Batch too large .* limit 2, the batch holds 100 tools\/call messages/ } });

  const two = await post(batchOf(2));
  t.equal(two.status, 200, 'a batch of two fits');
  t.equal(two.headers.get('x-ratelimit-remaining-requests'), '0', 'and uses the whole minute');
  await two.text();
  const one = await post(toolCall(3));
  t.equal(one.status, 429, 'so the next tool call waits');
  t.ok(Number(one.headers.get('retry-after')) >= 1, 'with a Retry-After');
  await one.text();
});
