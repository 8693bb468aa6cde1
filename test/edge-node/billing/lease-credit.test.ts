// The node's pre-authorisation and settlement against its credit leases (billing/lease-credit.ts),
// lease persistence across a restart, and the lease control channel's messages.
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { pino } from 'pino';
import type { ControlMessage, NodeMessage } from '../../../proto/src/index.js';
import { CreditChannel } from '../../../edge-node/src/billing/credit-channel.js';
import { DEFAULT_CREDIT_POLICY } from '../../../edge-node/src/billing/credit-policy.js';
import { LeaseBook } from '../../../edge-node/src/billing/lease-book.js';
import { LeaseCredit } from '../../../edge-node/src/billing/lease-credit.js';
import { memoryLeaseStore, openLeaseStore } from '../../../edge-node/src/billing/lease-store.js';
import type { PipelineContext } from '../../../edge-node/src/pipeline/context.js';
import { AbortSwitch } from '../../../edge-node/src/pipeline/abort-switch.js';
import { newPipelineContext } from '../../../edge-node/src/pipeline/new-context.js';
import { spoolStage } from '../../../edge-node/src/pipeline/stages/spool.js';

const logger = pino({ level: 'silent' });
const NOW = 1_700_000_000_000;
const PRICE = { model: 'gpt-x', inputMicrosPerToken: 2, outputMicrosPerToken: 5, requestMicros: 100 };

function ctx(overrides: Partial<PipelineContext> & { accountId?: string | null } = {}): PipelineContext {
  const { accountId = 'acct-1', ...rest } = overrides;
  const base = {
    requestId: `req-${Math.random()}`,
    api: 'chat.completions',
    model: 'gpt-x',
    maxOutputTokens: 100,
    estimatedInputTokens: 50,
    config: { prices: new Map([['gpt-x', PRICE]]), toolServers: new Map([['tools-a', { name: 'tools-a', callMicros: 70 }]]) },
    key: { id: 'key-1', accountId },
    clock: { now: () => NOW, monotonic: () => 0 },
    attempts: [],
    usage: { inputTokens: 0, outputTokens: 0, estimated: false },
    cost: { reservedMicros: 0, costMicros: 0, leaseId: null, priced: false },
    cleanups: [] as Array<() => void>,
    ...rest,
  };
  return base as unknown as PipelineContext;
}

function setup(granted: number): { book: LeaseBook; credit: LeaseCredit } {
  const book = new LeaseBook(memoryLeaseStore);
  book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: granted, expiresAt: NOW + 60_000 });
  return { book, credit: new LeaseCredit(book, DEFAULT_CREDIT_POLICY, logger) };
}

t.test('preauthorise reserves the worst case: prompt estimate + max_tokens at the price, plus the request fee', async (t) => {
  const { book, credit } = setup(10_000);
  const c = ctx();
  t.equal(credit.preauthorise(c), undefined);
  t.same(c.cost, { reservedMicros: 50 * 2 + 100 * 5 + 100, costMicros: 0, leaseId: 'lease-1', priced: true });
  t.equal(book.leaseOf('acct-1')!.reserved, 700);
});

t.test('without max_tokens the policy default output allowance is reserved', async (t) => {
  const { credit } = setup(1_000_000);
  const c = ctx({ maxOutputTokens: null });
  credit.preauthorise(c);
  t.equal(c.cost.reservedMicros, 50 * 2 + DEFAULT_CREDIT_POLICY.defaultMaxOutputTokens * 5 + 100);
});

t.test('a lease that cannot cover the worst case refuses with ZN_ERR_CREDIT_EXHAUSTED and holds nothing', async (t) => {
  const { book, credit } = setup(699);
  const c = ctx();
  const refused = credit.preauthorise(c);
  t.equal(refused?.error.code, 'ZN_ERR_CREDIT_EXHAUSTED');
  t.equal(refused?.error.status, 402);
  t.equal(book.leaseOf('acct-1')!.reserved, 0);
  const noLease = ctx({ accountId: 'acct-without-lease' });
  t.equal(credit.preauthorise(noLease)?.error.code, 'ZN_ERR_CREDIT_EXHAUSTED');
});

t.test("a request its lease cannot cover is told that one request's worst case is bounded by the lease share and cap, and what helps", async (t) => {
  const { credit } = setup(699);
  const message = credit.preauthorise(ctx())?.error.message ?? '';
  t.match(message, 'ZENOVA_LEASE_SHARE', 'the share of the free balance a lease holds');
  t.match(message, 'ZENOVA_LEASE_CAP_MICROS', 'the cap on a lease');
  t.match(message, 'lower max_tokens', 'what the caller can do');
  t.match(message, 'raise the balance', 'what the account owner can do');
  const embedding = credit.preauthorise(ctx({ api: 'embeddings', maxOutputTokens: null, estimatedInputTokens: 400 }))?.error.message ?? '';
  t.match(embedding, 'send fewer or shorter inputs', 'an embedding has no max_tokens: its input is what can be lowered');
  t.notMatch(embedding, 'max_tokens');
});

t.test('local keys and unpriced models reserve nothing and cost nothing', async (t) => {
  const { credit } = setup(0);
  for (const c of [ctx({ accountId: null }), ctx({ model: 'unpriced' })]) {
    t.equal(credit.preauthorise(c), undefined);
    c.served = { upstream: 'u', model: 'm' };
    c.usage = { inputTokens: 10, outputTokens: 10, estimated: false };
    credit.settle(c);
    t.same(c.cost, { reservedMicros: 0, costMicros: 0, leaseId: null, priced: false });
  }
});

t.test('settle works out the cost for the record; the end of the request charges it and releases the rest of the reservation', async (t) => {
  const { book, credit } = setup(10_000);
  const c = ctx();
  credit.preauthorise(c);
  c.served = { upstream: 'u', model: 'm' };
  c.usage = { inputTokens: 40, outputTokens: 7, estimated: true };
  credit.settle(c);
  t.equal(c.cost.costMicros, 40 * 2 + 7 * 5 + 100);
  const lease = book.leaseOf('acct-1')!;
  t.same({ reserved: lease.reserved, spent: lease.spent }, { reserved: 700, spent: 0 }, 'held until the record is committed');
  for (const cleanup of c.cleanups) cleanup();
  t.equal(lease.reserved, 0);
  t.equal(lease.spent, 215);
  t.equal(lease.available, 10_000 - 215);
  for (const cleanup of c.cleanups) cleanup();
  t.equal(lease.available, 10_000 - 215, 'a second run of the cleanup charges nothing again');
});

t.test('a request that never reached an upstream costs nothing and gives its reservation back', async (t) => {
  const { book, credit } = setup(10_000);
  const c = ctx();
  credit.preauthorise(c);
  c.usage = { inputTokens: 40, outputTokens: 0, estimated: true };
  credit.settle(c);
  t.equal(c.cost.costMicros, 0);
  for (const cleanup of c.cleanups) cleanup();
  t.equal(book.leaseOf('acct-1')!.available, 10_000);
});

t.test('a reservation whose settle never ran is released by the cleanup', async (t) => {
  const { book, credit } = setup(10_000);
  const c = ctx();
  credit.preauthorise(c);
  for (const cleanup of c.cleanups) cleanup();
  t.equal(book.leaseOf('acct-1')!.available, 10_000);
});

t.test('a tool call reserves and costs the tool server fee', async (t) => {
  const { book, credit } = setup(1_000);
  const body = { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'search', arguments: {} } };
  const c = ctx({ api: 'mcp', model: 'tools-a', maxOutputTokens: null, body, http: { method: 'POST', path: '/mcp/tools-a', headers: {}, rawHeaders: [], params: {} } });
  credit.preauthorise(c);
  t.equal(c.cost.reservedMicros, 70);
  c.served = { upstream: 'tools-a', model: 'tools-a' };
  credit.settle(c);
  t.equal(c.cost.costMicros, 70);
  for (const cleanup of c.cleanups) cleanup();
  t.equal(book.leaseOf('acct-1')!.spent, 70);
});

t.test('a restarted node remembers its leases: spent, and in-flight reservations counted as spent', async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'zn-lease-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const store = openLeaseStore(dir, { nodeId: 'node-1' });
  const book = new LeaseBook(store);
  book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 10_000, expiresAt: NOW + 60_000 });
  const credit = new LeaseCredit(book, DEFAULT_CREDIT_POLICY, logger);
  const done = ctx();
  credit.preauthorise(done);
  done.served = { upstream: 'u', model: 'm' };
  done.usage = { inputTokens: 10, outputTokens: 10, estimated: false };
  credit.settle(done); // 20 + 50 + 100 = 170
  for (const cleanup of done.cleanups) cleanup(); // the request's end
  const inFlight = ctx();
  credit.preauthorise(inFlight); // 700 held when the process "dies"
  store.close();

  const reopened = openLeaseStore(dir, { nodeId: 'node-1' });
  t.teardown(() => reopened.close());
  const lease = new LeaseBook(reopened).leaseOf('acct-1')!;
  t.equal(lease.granted, 10_000);
  t.equal(lease.spent, 170 + 700);
  t.equal(lease.reserved, 0);
});

t.test('the channel applies grants, reports every open lease, and returns leases on shutdown', async (t) => {
  const book = new LeaseBook(memoryLeaseStore);
  const channel = new CreditChannel(book, { reportIntervalMs: 60_000, logger, now: () => NOW });
  t.teardown(() => channel.stop());
  const sent: NodeMessage[] = [];
  const grant = (amount: bigint): ControlMessage => ({ leaseGrant: { accountId: 'acct-1', leaseId: 'lease-1', amountMicros: amount, expiresAt: BigInt(NOW + 60_000) } });
  channel.onEstablished((m) => {
    sent.push(m);
    return true;
  }, { sessionId: 's1' });
  t.equal(channel.onMessage({ recordBatchAck: { batchId: 'b', lastSequence: 1n, acceptedCount: 1, duplicateCount: 0, rejectedCount: 0 } }), false);
  t.equal(channel.onMessage(grant(1_000n)), true);
  t.equal(channel.onMessage(grant(1_000n)), true);
  t.equal(book.leaseOf('acct-1')!.granted, 1_000, 'the amount is the cumulative total: a repeat adds nothing');
  const r = book.leaseOf('acct-1')!.reserve(300, NOW, 'req-1')!;
  book.leaseOf('acct-1')!.settle(r, 200);
  channel.onMessage({ leaseGrant: { accountId: 'acct-1', leaseId: 'lease-1', amountMicros: -5n, expiresAt: 0n } });
  t.equal(book.leaseOf('acct-1')!.granted, 1_000, 'a malformed grant is ignored');
  channel.reportAll();
  t.same(sent.at(-1), { leaseReport: { accountId: 'acct-1', leaseId: 'lease-1', spentMicros: 200n, reservedMicros: 0n, remainingMicros: 800n, reportedAt: BigInt(NOW) } });
  // A request still in flight at shutdown: its reservation is counted as spent, and named.
  book.leaseOf('acct-1')!.reserve(100, NOW, 'req-2');
  const returning = channel.returnAll();
  const returned = { accountId: 'acct-1', leaseId: 'lease-1', spentMicros: 300n, returnedMicros: 700n, reservedMicros: 100n, returnedAt: BigInt(NOW), nodeStopping: true };
  t.same(sent.at(-1), { leaseReturn: returned }, 'the return names what in-flight requests still hold, and when, and that the node is stopping');
  t.equal(book.leaseOf('acct-1'), undefined, 'nothing more is reserved from it');
  t.equal(channel.onMessage({ leaseReturnAck: { leaseId: 'lease-1' } }), true, 'the confirmation is the channel\'s');
  await returning;
  const before = sent.length;
  channel.onMessage(grant(2_000n));
  t.same(sent.at(-1), { leaseReturn: returned }, 'a grant of a returned lease gets the return again');
  t.equal(sent.length, before + 1);
  channel.onEnded();
});

t.test('offline, shutting down keeps the leases for the restarted node', async (t) => {
  const book = new LeaseBook(memoryLeaseStore);
  const channel = new CreditChannel(book, { reportIntervalMs: 60_000, logger });
  t.teardown(() => channel.stop());
  channel.onMessage({ leaseGrant: { accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 500n, expiresAt: BigInt(NOW + 60_000) } });
  await channel.returnAll();
  t.equal(book.leaseOf('acct-1')?.state, 'open');
});

t.test('the spool stage charges the lease as soon as the record is committed, before delivery and cleanups; a commit that fails charges nothing there', async (t) => {
  const { book, credit } = setup(10_000);
  const lease = book.leaseOf('acct-1')!;
  let commit!: { resolve: () => void; reject: (err: Error) => void };
  const spool = {
    open: () => undefined,
    keepsBodies: () => false,
    fullness: () => 0,
    finalise: () => new Promise<void>((resolve, reject) => (commit = { resolve, reject })),
  };
  // A whole pipeline context (the record builder reads every field), answered and settled.
  const settled = (): PipelineContext => {
    const base = ctx();
    const c = newPipelineContext({
      requestId: base.requestId, api: 'chat.completions', surface: 'model', http: { method: 'POST', path: '/v1/chat/completions', headers: {}, rawHeaders: [], params: {} },
      body: undefined, deps: { nodeId: 'node-1', spool, credit } as unknown as PipelineContext['deps'], clock: base.clock, callerGone: new AbortSwitch(),
    });
    Object.assign(c, { model: 'gpt-x', maxOutputTokens: 100, estimatedInputTokens: 50, config: base.config, key: base.key });
    t.equal(credit.preauthorise(c), undefined);
    c.served = { upstream: 'u', model: 'm' };
    c.usage = { inputTokens: 40, outputTokens: 7, estimated: false };
    credit.settle(c);
    return c;
  };
  const committed = settled();
  const running = spoolStage.run(committed) as Promise<unknown>;
  t.same({ reserved: lease.reserved, spent: lease.spent }, { reserved: 700, spent: 0 }, 'held while the commit is pending');
  commit.resolve();
  await running;
  t.same({ reserved: lease.reserved, spent: lease.spent }, { reserved: 0, spent: 215 }, 'charged once committed, no cleanup run yet');
  for (const cleanup of committed.cleanups) cleanup();
  t.equal(lease.spent, 215, 'the cleanup charges nothing again');

  const failed = settled();
  const failing = (spoolStage.run(failed) as Promise<unknown>).catch((err: unknown) => err);
  commit.reject(new Error('the spool is closed'));
  t.match(await failing, { message: 'the spool is closed' });
  t.same({ reserved: lease.reserved, spent: lease.spent }, { reserved: 700, spent: 215 }, 'not charged at the stage: held until the request ends');
});
