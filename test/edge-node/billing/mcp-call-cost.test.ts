// A tool server's callMicros is a price per tool call: a POST reserves and is charged callMicros once
// per `tools/call` it holds (a batch of 100 calls costs 100 calls), and the session's plumbing —
// initialize, notifications, tools/list, responses, GET and DELETE — costs nothing.
import t from 'tap';
import { pino } from 'pino';
import { DEFAULT_CREDIT_POLICY } from '../../../edge-node/src/billing/credit-policy.js';
import { LeaseBook } from '../../../edge-node/src/billing/lease-book.js';
import { LeaseCredit } from '../../../edge-node/src/billing/lease-credit.js';
import { memoryLeaseStore } from '../../../edge-node/src/billing/lease-store.js';
import { feeCount, priceOf, worstCaseMicros } from '../../../edge-node/src/billing/request-cost.js';
import type { PipelineContext } from '../../../edge-node/src/pipeline/context.js';
import { MAX_BATCH_MESSAGES } from '../../../edge-node/src/providers/mcp/jsonrpc-message.js';

const NOW = 1_700_000_000_000;
const CALL_MICROS = 50_000;

function toolCall(id: number): Record<string, unknown> {
  return { jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'search', arguments: { q: `q${id}` } } };
}

function mcpCtx(method: string, body: unknown): PipelineContext {
  return {
    requestId: `req-${Math.random()}`,
    api: 'mcp',
    model: 'tools',
    http: { method, path: '/mcp/tools', headers: {}, params: { server: 'tools' } },
    body,
    maxOutputTokens: null,
    estimatedInputTokens: 5_000,
    config: { prices: new Map(), toolServers: new Map([['tools', { name: 'tools', callMicros: CALL_MICROS }]]) },
    key: { id: 'k', accountId: 'acct-1' },
    clock: { now: () => NOW, monotonic: () => 0 },
    usage: { inputTokens: 0, outputTokens: 0, estimated: false },
    cost: { reservedMicros: 0, costMicros: 0, leaseId: null, priced: false },
    cleanups: [] as Array<() => void>,
  } as unknown as PipelineContext;
}

t.test('a batch of 100 tools/call is reserved and charged 100 times the call price', async (t) => {
  const book = new LeaseBook(memoryLeaseStore);
  book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 100 * CALL_MICROS, expiresAt: NOW + 60_000 });
  const credit = new LeaseCredit(book, DEFAULT_CREDIT_POLICY, pino({ level: 'silent' }));
  const batch = Array.from({ length: MAX_BATCH_MESSAGES }, (_, i) => toolCall(i));
  const c = mcpCtx('POST', batch);
  t.equal(worstCaseMicros(c, priceOf(c)!, 4096), 100 * CALL_MICROS);
  t.equal(credit.preauthorise(c), undefined);
  t.equal(c.cost.reservedMicros, 100 * CALL_MICROS);
  c.served = { upstream: 'tools', model: 'batch' };
  credit.settle(c);
  t.equal(c.cost.costMicros, 100 * CALL_MICROS);
  for (const cleanup of c.cleanups) cleanup(); // the request's end charges the lease
  t.equal(book.leaseOf('acct-1')!.spent, 100 * CALL_MICROS);
  const more = mcpCtx('POST', [toolCall(1), toolCall(2)]);
  t.equal(credit.preauthorise(more)?.error.code, 'ZN_ERR_CREDIT_EXHAUSTED', 'the lease is spent: the next calls are refused');
});

t.test('a batch mixing tools/call with other methods costs only its tools/call messages', async (t) => {
  const batch = [
    toolCall(1),
    { jsonrpc: '2.0', id: 2, method: 'tools/list' },
    { jsonrpc: '2.0', method: 'notifications/progress', params: {} },
    { jsonrpc: '2.0', method: 'tools/call', params: { name: 'fire-and-forget' } },
    { jsonrpc: '2.0', id: 9, result: {} },
  ];
  t.equal(feeCount(mcpCtx('POST', batch)), 2, 'the call with an id and the one sent as a notification');
});

t.test('initialize, notifications, tools/list, GET and DELETE reserve and cost nothing', async (t) => {
  const book = new LeaseBook(memoryLeaseStore);
  book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 1, expiresAt: NOW + 60_000 });
  const credit = new LeaseCredit(book, DEFAULT_CREDIT_POLICY, pino({ level: 'silent' }));
  const free = [
    mcpCtx('POST', { jsonrpc: '2.0', id: 1, method: 'initialize', params: {} }),
    mcpCtx('POST', { jsonrpc: '2.0', method: 'notifications/initialized' }),
    mcpCtx('POST', { jsonrpc: '2.0', id: 2, method: 'tools/list' }),
    mcpCtx('GET', undefined),
    mcpCtx('DELETE', undefined),
  ];
  for (const c of free) {
    t.equal(credit.preauthorise(c), undefined);
    t.equal(c.cost.reservedMicros, 0);
    c.served = { upstream: 'tools', model: 'x' };
    credit.settle(c);
    t.equal(c.cost.costMicros, 0);
    for (const cleanup of c.cleanups) cleanup();
  }
  t.equal(book.leaseOf('acct-1')!.spent, 0);
});

t.test('one tools/call costs the call price once', async (t) => {
  const c = mcpCtx('POST', toolCall(1));
  t.equal(worstCaseMicros(c, priceOf(c)!, 4096), CALL_MICROS);
});
