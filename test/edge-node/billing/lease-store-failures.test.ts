// A lease-store write that fails (SQLITE_FULL…) changes nothing in memory: a reservation that could
// not be written is not held (the request is refused with ZN_ERR_SPOOL_FULL and one log line), and a
// settlement, release, grant or return that could not be written leaves the lease as it was on disk.
import t from 'tap';
import { CreditChannel } from '../../../edge-node/src/billing/credit-channel.js';
import { DEFAULT_CREDIT_POLICY } from '../../../edge-node/src/billing/credit-policy.js';
import type { LeaseSnapshot } from '../../../edge-node/src/billing/credit-lease.js';
import { LeaseBook } from '../../../edge-node/src/billing/lease-book.js';
import { LeaseCredit } from '../../../edge-node/src/billing/lease-credit.js';
import type { LeaseStore } from '../../../edge-node/src/billing/lease-store.js';
import type { Logger } from '../../../edge-node/src/logger.js';
import type { PipelineContext } from '../../../edge-node/src/pipeline/context.js';

const NOW = 1_700_000_000_000;
const PRICE = { model: 'm', inputMicrosPerToken: 2, outputMicrosPerToken: 60, requestMicros: 0 };

/** A store that keeps the last row per lease, and throws SQLITE_FULL while `failing`. */
function flakyStore(): LeaseStore & { failing: boolean; rows: Map<string, LeaseSnapshot> } {
  const rows = new Map<string, LeaseSnapshot>();
  const store = {
    failing: false,
    rows,
    load: () => [...rows.values()],
    openLeaseOf: () => undefined,
    atomically: <T>(fn: () => T): T => fn(),
    reservations: () => [],
    markForwarded: () => {
      if (store.failing) throw Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' });
    },
    save: (lease: LeaseSnapshot) => {
      if (store.failing) throw Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' });
      rows.set(lease.leaseId, { ...lease });
      return undefined;
    },
    close: () => undefined,
  };
  return store;
}

function capturingLogger(): { logger: Logger; lines: Array<{ level: string; msg: string }> } {
  const lines: Array<{ level: string; msg: string }> = [];
  const at = (level: string) => (_obj: unknown, msg: string) => lines.push({ level, msg });
  const logger = { info: at('info'), warn: at('warn'), error: at('error'), debug: at('debug') } as Record<string, unknown>;
  logger.child = () => logger;
  return { logger: logger as unknown as Logger, lines };
}

function ctx(maxTokens: number): PipelineContext {
  return {
    requestId: `req-${Math.random()}`,
    api: 'chat.completions',
    model: 'm',
    maxOutputTokens: maxTokens,
    estimatedInputTokens: 100,
    forwardBody: { model: 'm', messages: [], max_tokens: maxTokens },
    config: { prices: new Map([['m', PRICE]]), toolServers: new Map() },
    key: { id: 'k', accountId: 'acct-1' },
    clock: { now: () => NOW, monotonic: () => 0 },
    usage: { inputTokens: 0, outputTokens: 0, estimated: false },
    cost: { reservedMicros: 0, costMicros: 0, leaseId: null, priced: false },
    cleanups: [] as Array<() => void>,
  } as unknown as PipelineContext;
}

function setup(): { store: ReturnType<typeof flakyStore>; book: LeaseBook; credit: LeaseCredit; lines: Array<{ level: string; msg: string }> } {
  const store = flakyStore();
  const book = new LeaseBook(store);
  book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 1_000_000, expiresAt: NOW + 60_000 });
  const { logger, lines } = capturingLogger();
  return { store, book, credit: new LeaseCredit(book, DEFAULT_CREDIT_POLICY, logger), lines };
}

t.test('a reservation the lease store cannot write is not held, and the request is refused with ZN_ERR_SPOOL_FULL and one error line', async (t) => {
  const { store, book, credit, lines } = setup();
  store.failing = true;
  for (let i = 0; i < 3; i += 1) {
    const c = ctx(1000);
    const refused = credit.preauthorise(c);
    t.equal(refused?.error.code, 'ZN_ERR_SPOOL_FULL');
    t.equal(refused?.error.status, 503);
    t.match(refused?.error.message, /credit lease store/);
    for (const cleanup of c.cleanups) cleanup();
    credit.settle(c);
    t.equal(c.cost.reservedMicros, 0);
  }
  t.equal(lines.filter((l) => l.level === 'error').length, 3, 'one error line per refused request');
  store.failing = false;
  const lease = book.leaseOf('acct-1')!;
  t.equal(lease.reserved, 0, 'no phantom reservation once the disk recovers');
  t.equal(lease.available, 1_000_000);
  t.equal(store.rows.get('lease-1')!.reserved, 0);
});

t.test('a settlement the lease store cannot write keeps the reservation held in memory as on disk, with one error line', async (t) => {
  const { store, book, credit, lines } = setup();
  const c = ctx(1000);
  t.equal(credit.preauthorise(c), undefined);
  const held = c.cost.reservedMicros;
  c.served = { upstream: 'u', model: 'm' };
  c.usage = { inputTokens: 100, outputTokens: 10, estimated: false };
  credit.settle(c);
  t.equal(c.cost.costMicros, 100 * 2 + 10 * 60, 'the record carries the cost');
  store.failing = true;
  for (const cleanup of c.cleanups) cleanup();
  const lease = book.leaseOf('acct-1')!;
  t.equal(lease.reserved, held, 'still held in memory, as on disk');
  t.equal(lease.spent, 0);
  t.same({ reserved: store.rows.get('lease-1')!.reserved, spent: store.rows.get('lease-1')!.spent }, { reserved: held, spent: 0 });
  t.equal(lines.filter((l) => l.level === 'error').length, 1);
  store.failing = false;
  for (const cleanup of c.cleanups) cleanup();
  t.equal(lease.reserved, 0);
  t.equal(lease.spent, 800, 'a later end of the request (cleanups run once in the pipeline) charges it, not releases it');
});

t.test('a release the lease store cannot write keeps the reservation held in memory as on disk', async (t) => {
  const { store, book, credit } = setup();
  const c = ctx(1000);
  credit.preauthorise(c);
  store.failing = true;
  for (const cleanup of c.cleanups) cleanup();
  const lease = book.leaseOf('acct-1')!;
  t.equal(lease.reserved, c.cost.reservedMicros);
  t.equal(store.rows.get('lease-1')!.reserved, c.cost.reservedMicros);
});

t.test('a request whose reservation cannot be marked forwarded is refused with ZN_ERR_SPOOL_FULL before it goes upstream, and its reservation released', async (t) => {
  const { store, book, credit, lines } = setup();
  const c = ctx(1000);
  t.equal(credit.preauthorise(c), undefined);
  store.failing = true;
  const refused = credit.beforeForward(c);
  t.equal(refused?.error.code, 'ZN_ERR_SPOOL_FULL', 'unmarked, a restart could release a reservation whose request was charged');
  t.match(refused?.error.message, /credit lease store/);
  t.equal(lines.filter((l) => l.level === 'error').length, 1);
  store.failing = false;
  credit.settle(c);
  for (const cleanup of c.cleanups) cleanup();
  t.equal(book.leaseOf('acct-1')!.reserved, 0, 'the refused request gives its reservation back');
  t.equal(book.leaseOf('acct-1')!.spent, 0);
});

t.test('a grant or a return the lease store cannot write changes nothing', async (t) => {
  const { store, book } = setup();
  store.failing = true;
  t.throws(() => book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 2_000_000, expiresAt: NOW + 120_000 }));
  t.equal(book.leaseOf('acct-1')!.granted, 1_000_000, 'a top-up not written is not served from');
  t.throws(() => book.grant({ accountId: 'acct-2', leaseId: 'lease-2', amountMicros: 500, expiresAt: NOW + 60_000 }));
  t.equal(book.leaseOf('acct-2'), undefined, 'a new lease not written is not adopted');
  t.equal(book.lease('lease-2'), undefined);
  t.throws(() => book.markReturned(book.leaseOf('acct-1')!));
  t.equal(book.leaseOf('acct-1')?.state, 'open', 'a return not written leaves the lease open');

  const { logger, lines } = capturingLogger();
  const channel = new CreditChannel(book, { reportIntervalMs: 60_000, logger, now: () => NOW });
  t.teardown(() => channel.stop());
  const sent: unknown[] = [];
  channel.onEstablished((m) => {
    sent.push(m);
    return true;
  }, { sessionId: 's1' });
  sent.length = 0;
  await channel.returnAll();
  t.same(sent, [], 'no LeaseReturn is sent for a return that was not recorded');
  t.equal(lines.filter((l) => l.level === 'error').length, 1);
  t.equal(book.leaseOf('acct-1')?.state, 'open');
});
