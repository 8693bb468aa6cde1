// A pipeline node whose account holds one credit lease and whose `echo` alias has a price: what the
// billing tests that drive the Base URL through the real LeaseCredit need.
import type { Test } from 'tap';
import { pino } from 'pino';
import { DEFAULT_CREDIT_POLICY } from '../../../edge-node/src/billing/credit-policy.js';
import { LeaseBook } from '../../../edge-node/src/billing/lease-book.js';
import { LeaseCredit } from '../../../edge-node/src/billing/lease-credit.js';
import { memoryLeaseStore } from '../../../edge-node/src/billing/lease-store.js';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import type { FakeUpstream } from '../../fixtures/fake-upstream.js';
import { ACCOUNT_ID } from '../config-fixtures.js';
import { startPipelineNode } from '../pipeline/pipeline-harness.js';
import type { PipelineNode } from '../pipeline/pipeline-harness.js';

/** `leaseMicros` on the account's lease; `echo` priced per input and output token (no request fee). */
export async function pricedCreditNode(
  t: Test,
  leaseMicros: number,
  price: { inputMicrosPerToken: number; outputMicrosPerToken: number },
): Promise<{ node: PipelineNode; upstream: FakeUpstream }> {
  const upstream = await startFakeUpstream(t);
  const book = new LeaseBook(memoryLeaseStore);
  book.grant({ accountId: ACCOUNT_ID, leaseId: 'lease-1', amountMicros: leaseMicros, expiresAt: Date.now() + 600_000 });
  const credit = new LeaseCredit(book, DEFAULT_CREDIT_POLICY, pino({ level: 'silent' }));
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    bundle: () => ({ prices: [{ model: 'echo', ...price, requestMicros: 0 }] }),
    services: { credit },
  });
  return { node, upstream };
}
