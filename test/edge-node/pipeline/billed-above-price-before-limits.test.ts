// A priced request the node refuses for what its body asks (audio, which the upstream bills above
// the node's price) can never succeed, whatever the limits: it is refused with its 400 before the
// rate-limit stage, so it spends none of the key's requests per minute and is never turned into a
// retryable 429. Real app, real limiter (memory store), real lease credit, fake upstream.
import { pino } from 'pino';
import t from 'tap';
import { DEFAULT_CREDIT_POLICY } from '../../../edge-node/src/billing/credit-policy.js';
import { LeaseBook } from '../../../edge-node/src/billing/lease-book.js';
import { LeaseCredit } from '../../../edge-node/src/billing/lease-credit.js';
import { memoryLeaseStore } from '../../../edge-node/src/billing/lease-store.js';
import { MemoryLimitStore } from '../../../edge-node/src/rate-limit/memory-limit-store.js';
import { NodeRateLimiter } from '../../../edge-node/src/rate-limit/node-rate-limiter.js';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import { ACCOUNT_ID } from '../config-fixtures.js';
import { sdkError, startPipelineNode } from './pipeline-harness.js';

t.test("a priced request asking for audio is refused before the rate limits: it never spends the key's requests per minute", async (t) => {
  const upstream = await startFakeUpstream(t);
  const limiter = new NodeRateLimiter(new MemoryLimitStore(), pino({ level: 'silent' }));
  t.teardown(() => limiter.close());
  const book = new LeaseBook(memoryLeaseStore);
  book.grant({ accountId: ACCOUNT_ID, leaseId: 'lease-1', amountMicros: 1_000_000_000, expiresAt: Date.now() + 600_000 });
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    services: { limiter, credit: new LeaseCredit(book, DEFAULT_CREDIT_POLICY, pino({ level: 'silent' })) },
    bundle: (base) => ({
      apiKeys: base.apiKeys.map((k) => ({ ...k, limits: { requestsPerMinute: 2 } })),
      prices: [{ model: 'echo', inputMicrosPerToken: 1, outputMicrosPerToken: 10, requestMicros: 0 }],
    }),
  });
  const client = node.client();
  const messages = [{ role: 'user' as const, content: 'Say hello.' }];
  for (let i = 0; i < 4; i++) {
    const err = await sdkError(client.chat.completions.create({ model: 'echo', messages, audio: { voice: 'alloy', format: 'wav' } }));
    t.equal(err.status, 400, `audio request ${i + 1}: 400`);
    t.equal(err.code, 'ZN_ERR_INVALID_REQUEST');
    t.notOk(err.headers?.get('retry-after'), 'nothing to retry');
    t.notOk(err.headers?.get('x-ratelimit-remaining-requests'), 'no limit was counted');
  }
  const refused = node.finished.filter((f) => f.outcome.errorCode === 'ZN_ERR_INVALID_REQUEST');
  t.equal(refused.length, 4);
  for (const { stages } of refused) t.notOk(stages.includes('rate-limit'), `refused before rate-limit: ${stages.join(',')}`);
  // The key's 2 requests of this minute are whole.
  const first = await client.chat.completions.create({ model: 'echo', messages }).withResponse();
  t.equal(first.response.headers.get('x-ratelimit-remaining-requests'), '1', 'the first text request is the first one counted');
  t.equal((await client.chat.completions.create({ model: 'echo', messages }).withResponse()).response.status, 200);
  t.equal((await sdkError(client.chat.completions.create({ model: 'echo', messages }))).code, 'ZN_ERR_RATE_LIMITED', 'the third is the one the limit refuses');
  t.equal(upstream.requests.length, 2, 'only the two admitted requests were forwarded');
});
