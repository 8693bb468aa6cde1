// A priced request whose worst case comes to 0 (an input-only price and empty message contents) is
// still billed what the upstream counts: it must hold part of a standing lease
// like any priced request. It once skipped the lease check and was served, and charged, for an
// account with no credit on the node at all. Only a request that cannot cost anything skips it.
import t from 'tap';
import { pino } from 'pino';
import type { RequestRecord } from '../../../proto/src/index.js';
import { DEFAULT_CREDIT_POLICY } from '../../../edge-node/src/billing/credit-policy.js';
import { LeaseBook } from '../../../edge-node/src/billing/lease-book.js';
import { LeaseCredit, MIN_RESERVATION_MICROS } from '../../../edge-node/src/billing/lease-credit.js';
import { memoryLeaseStore } from '../../../edge-node/src/billing/lease-store.js';
import type { PipelineContext } from '../../../edge-node/src/pipeline/context.js';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { recordsInto } from '../anthropic-fixtures.js';
import { ACCOUNT_ID } from '../config-fixtures.js';
import { startPipelineNode } from '../pipeline/pipeline-harness.js';

const logger = pino({ level: 'silent' });
const NOW = 1_700_000_000_000;
/** Input-only: a request estimated at 0 prompt tokens has a worst case of 0. */
const INPUT_ONLY = { model: 'in-only', inputMicrosPerToken: 1, outputMicrosPerToken: 0, requestMicros: 0 };
const FREE = { model: 'free', inputMicrosPerToken: 0, outputMicrosPerToken: 0, requestMicros: 0 };

/** A chat request of `model` for acct-1 whose prompt is estimated at 0 tokens. */
function zeroEstimateCtx(model: string): PipelineContext {
  return {
    requestId: `req-${Math.random()}`,
    api: 'chat.completions',
    model,
    maxOutputTokens: 1,
    estimatedInputTokens: 0,
    config: { prices: new Map([[INPUT_ONLY.model, INPUT_ONLY], [FREE.model, FREE]]), toolServers: new Map() },
    key: { id: 'key-1', accountId: 'acct-1' },
    clock: { now: () => NOW, monotonic: () => 0 },
    attempts: [],
    usage: { inputTokens: 0, outputTokens: 0, estimated: false },
    cost: { reservedMicros: 0, costMicros: 0, leaseId: null, priced: false },
    cleanups: [] as Array<() => void>,
  } as unknown as PipelineContext;
}

/** A LeaseCredit over a book holding `granted` µ for acct-1 (no lease at all when undefined), expiring at `expiresAt`. */
function creditWith(granted: number | undefined, expiresAt = NOW + 60_000): { book: LeaseBook; credit: LeaseCredit } {
  const book = new LeaseBook(memoryLeaseStore);
  if (granted !== undefined) book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: granted, expiresAt });
  return { book, credit: new LeaseCredit(book, DEFAULT_CREDIT_POLICY, logger) };
}

t.test('a priced request whose worst case comes to 0 is refused with ZN_ERR_CREDIT_EXHAUSTED without a standing lease, while a model priced zero for everything needs none', async (t) => {
  const cases: Array<[string, number | undefined, number?]> = [
    ['no lease', undefined],
    ['an exhausted lease', 0],
    ['an expired lease', 1_000, NOW - 1],
  ];
  for (const [what, granted, expiresAt] of cases) {
    const { credit } = creditWith(granted, expiresAt);
    const c = zeroEstimateCtx(INPUT_ONLY.model);
    const refused = credit.preauthorise(c);
    t.equal(refused?.error.code, 'ZN_ERR_CREDIT_EXHAUSTED', `refused with ${what}`);
    t.equal(refused?.error.status, 402);
    t.equal(c.cost.leaseId, null);
  }
  const { credit } = creditWith(undefined);
  const free = zeroEstimateCtx(FREE.model);
  t.equal(credit.preauthorise(free), undefined, 'a model priced 0 for input, output and fee cannot cost anything: no lease needed');
  t.same(free.cost, { reservedMicros: 0, costMicros: 0, leaseId: null, priced: true });
});

t.test('a priced request whose worst case comes to 0 holds one micro-unit of the lease and is charged what the upstream billed', async (t) => {
  const { book, credit } = creditWith(1_000);
  const c = zeroEstimateCtx(INPUT_ONLY.model);
  t.equal(credit.preauthorise(c), undefined);
  t.same(c.cost, { reservedMicros: MIN_RESERVATION_MICROS, costMicros: 0, leaseId: 'lease-1', priced: true });
  const lease = book.leaseOf('acct-1')!;
  t.equal(lease.reserved, MIN_RESERVATION_MICROS, 'tied to the lease like any priced request');
  c.served = { upstream: 'u', model: 'm' };
  c.usage = { inputTokens: 300, outputTokens: 0, estimated: false };
  credit.settle(c);
  for (const cleanup of c.cleanups) cleanup();
  t.equal(c.cost.costMicros, 300);
  t.same({ reserved: lease.reserved, spent: lease.spent }, { reserved: 0, spent: 300 }, 'the upstream count is charged to the lease in full');
});

t.test('a chat request of empty contents at an input-only price is refused with 402 when the account holds no credit on the node', async (t) => {
  const upstream = await startFakeUpstream(t);
  const records: RequestRecord[] = [];
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    bundle: () => ({ prices: [{ model: 'echo', inputMicrosPerToken: 1, outputMicrosPerToken: 0, requestMicros: 0 }] }),
    // The account holds no lease here.
    services: { credit: new LeaseCredit(new LeaseBook(memoryLeaseStore), DEFAULT_CREDIT_POLICY, logger), spool: recordsInto(records) },
  });
  const res = await fetch(`${node.origin}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
    body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: '' }] }),
  });
  t.equal(res.status, 402);
  t.equal(((await res.json()) as { error: { code: string } }).error.code, 'ZN_ERR_CREDIT_EXHAUSTED');
  t.equal(upstream.requests.length, 0, 'nothing forwarded');
  const record = await waitFor(() => records[0], { what: 'the record' });
  t.equal(record.accountId, ACCOUNT_ID);
  t.same(record.cost, { reservedMicros: 0, costMicros: 0, leaseId: null, priced: true });
});
