// The credit reservation of an Anthropic request whose history holds a tool call: the tool_use
// input is billed as the JSON the upstream reads, so a caller cannot hide hundreds of KB of input
// in numbers (or true, false, null), which the estimate once skipped, and reserve almost nothing.
import t from 'tap';
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

t.test('a tool_use input of numbers reserves credit for its JSON length, and a small one only a little', async (t) => {
  const upstream = await startFakeAnthropicUpstream(t);
  const book = new LeaseBook(memoryLeaseStore);
  book.grant({ accountId: ACCOUNT_ID, leaseId: 'lease-1', amountMicros: 10_000_000, expiresAt: Date.now() + 600_000 });
  const records: RequestRecord[] = [];
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    bundle: (base) => ({
      ...withClaudeRoute(base, upstream.url, 'claude-up'),
      // 1 µ per input token and nothing for output: the reservation is the prompt estimate.
      prices: [{ model: 'claude', inputMicrosPerToken: 1, outputMicrosPerToken: 0, requestMicros: 0 }],
    }),
    services: { credit: new LeaseCredit(book, DEFAULT_CREDIT_POLICY, pino({ level: 'silent' })), spool: recordsInto(records) },
  });

  /** The micro-units reserved for a request whose assistant turn called a tool with `input`. */
  const reservedFor = async (input: unknown): Promise<number> => {
    const res = await fetch(`${node.origin}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': node.secret, 'anthropic-version': '2023-06-01' },
      body: JSON.stringify({
        model: 'claude',
        max_tokens: 1,
        messages: [
          { role: 'user', content: 'go' },
          { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'f', input }] },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'ok' }] },
        ],
      }),
    });
    t.equal(res.status, 200);
    const requestId = res.headers.get('x-request-id');
    await res.arrayBuffer();
    const record = await waitFor(() => records.find((r) => r.requestId === requestId), { what: `the record of ${String(requestId)}` });
    return record.cost.reservedMicros;
  };

  const big = { data: new Array<number>(200_000).fill(0) };
  const bigJson = JSON.stringify(big).length;
  const reservedBig = await reservedFor(big);
  t.ok(reservedBig >= bigJson / 4, `400 KB of zeros reserved ${reservedBig} µ: at least a token per 4 of its ${bigJson} characters`);
  t.ok(reservedBig <= bigJson / 4 + 100, `and about that (the rest is the messages' few words): ${reservedBig} µ`);

  const half = { data: new Array<number>(100_000).fill(0) };
  const reservedHalf = await reservedFor(half);
  t.ok(Math.abs(reservedHalf - reservedBig / 2) <= 100, `half the zeros reserve half as much: ${reservedHalf} µ against ${reservedBig} µ`);

  const reservedSmall = await reservedFor({ data: [0, 1, 2] });
  // About 35 of them are the template's tokens of the three messages and two blocks (prompt-sections.ts), counted since; the input is a few.
  t.ok(reservedSmall <= 50, `a small input reserves a few tokens: ${reservedSmall} µ`);
  t.equal(upstream.requests.length, 3, 'each request was forwarded');
});
