// A node app whose `claude` alias (an Anthropic upstream the test starts) costs 1 µ per input token
// and nothing else, with a 10 000 000 µ lease for the account: a request's reservation is then its
// prompt estimate, and `records` gets every record the spool stage writes. `claudeRequestRecord`
// sends it a request and waits for that record.
import { pino } from 'pino';
import type { RequestRecord } from '../../../proto/src/index.js';
import { DEFAULT_CREDIT_POLICY } from '../../../edge-node/src/billing/credit-policy.js';
import { LeaseBook } from '../../../edge-node/src/billing/lease-book.js';
import { LeaseCredit } from '../../../edge-node/src/billing/lease-credit.js';
import { memoryLeaseStore } from '../../../edge-node/src/billing/lease-store.js';
import { startFakeAnthropicUpstream } from '../../fixtures/fake-anthropic-upstream.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { recordsInto } from '../anthropic-fixtures.js';
import { ACCOUNT_ID } from '../config-fixtures.js';
import { startPipelineNode, withClaudeRoute } from '../pipeline/pipeline-harness.js';
import type { PipelineNode } from '../pipeline/pipeline-harness.js';

export interface PricedClaudeNode {
  upstream: Awaited<ReturnType<typeof startFakeAnthropicUpstream>>;
  book: LeaseBook;
  records: RequestRecord[];
  node: PipelineNode;
}

export async function startPricedClaudeNode(t: { teardown(fn: () => unknown): void }): Promise<PricedClaudeNode> {
  const upstream = await startFakeAnthropicUpstream(t);
  const book = new LeaseBook(memoryLeaseStore);
  book.grant({ accountId: ACCOUNT_ID, leaseId: 'lease-1', amountMicros: 10_000_000, expiresAt: Date.now() + 600_000 });
  const records: RequestRecord[] = [];
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    bundle: (base) => ({
      ...withClaudeRoute(base, upstream.url, 'claude-up'),
      prices: [{ model: 'claude', inputMicrosPerToken: 1, outputMicrosPerToken: 0, requestMicros: 0 }],
    }),
    services: { credit: new LeaseCredit(book, DEFAULT_CREDIT_POLICY, pino({ level: 'silent' })), spool: recordsInto(records) },
  });
  return { upstream, book, records, node };
}

/** Posts `claude` (max_tokens 1) these `messages`, checks it is served (200), and returns its record once written. */
export async function claudeRequestRecord(
  t: { equal(found: unknown, wanted: unknown): unknown },
  { node, records }: Pick<PricedClaudeNode, 'node' | 'records'>,
  messages: unknown[],
): Promise<RequestRecord> {
  const res = await fetch(`${node.origin}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': node.secret, 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model: 'claude', max_tokens: 1, messages }),
  });
  t.equal(res.status, 200);
  const requestId = res.headers.get('x-request-id');
  await res.arrayBuffer();
  return waitFor(() => records.find((r) => r.requestId === requestId), { what: `the record of ${String(requestId)}` });
}
