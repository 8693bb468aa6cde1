// The prompt-cache tokens of a streamed Anthropic answer are input: message_start counts them, and
// a message_delta that repeats input_tokens without them (left out, or null) keeps them, as the
// official SDK does, in the record and in the charge; one that gives a counter again replaces it.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import Anthropic from '@anthropic-ai/sdk';
import t from 'tap';
import { pino } from 'pino';
import type { RequestRecord } from '../../../proto/src/index.js';
import { DEFAULT_CREDIT_POLICY } from '../../../edge-node/src/billing/credit-policy.js';
import { LeaseBook } from '../../../edge-node/src/billing/lease-book.js';
import { LeaseCredit } from '../../../edge-node/src/billing/lease-credit.js';
import { memoryLeaseStore } from '../../../edge-node/src/billing/lease-store.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { recordsInto } from '../anthropic-fixtures.js';
import { ACCOUNT_ID } from '../config-fixtures.js';
import { startPipelineNode, withClaudeRoute } from '../pipeline/pipeline-harness.js';

const PRICE = { inputMicrosPerToken: 3, outputMicrosPerToken: 15 };
const START_USAGE = { input_tokens: 10, cache_creation_input_tokens: 1000, cache_read_input_tokens: 5000, output_tokens: 1 };

/** An Anthropic upstream whose every stream starts with START_USAGE and ends with a message_delta carrying `deltaUsage()`. */
async function cachingUpstream(t: { teardown(fn: () => unknown): void }, deltaUsage: () => Record<string, unknown>): Promise<string> {
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const events: Array<Record<string, unknown>> = [
        { type: 'message_start', message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-real', content: [], stop_reason: null, stop_sequence: null, usage: START_USAGE } },
        { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
        { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'hello there' } },
        { type: 'content_block_stop', index: 0 },
        { type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: deltaUsage() },
        { type: 'message_stop' },
      ];
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end(events.map((e) => `event: ${String(e.type)}\ndata: ${JSON.stringify(e)}\n\n`).join(''));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
}

t.test('a streamed answer keeps its prompt-cache tokens in the record and the charge when message_delta repeats input_tokens without them', async (t) => {
  let deltaUsage: Record<string, unknown> = {};
  const upstreamUrl = await cachingUpstream(t, () => deltaUsage);
  const book = new LeaseBook(memoryLeaseStore);
  book.grant({ accountId: ACCOUNT_ID, leaseId: 'lease-1', amountMicros: 1_000_000_000, expiresAt: Date.now() + 600_000 });
  const records: RequestRecord[] = [];
  const node = await startPipelineNode(t, {
    upstreamUrl,
    bundle: (base) => ({ ...withClaudeRoute(base, upstreamUrl), prices: [{ model: 'claude', ...PRICE, requestMicros: 0 }] }),
    services: { credit: new LeaseCredit(book, DEFAULT_CREDIT_POLICY, pino({ level: 'silent' })), spool: recordsInto(records) },
  });
  const client = new Anthropic({ baseURL: node.origin, apiKey: node.secret, maxRetries: 0, timeout: 20_000 });

  const cases: Array<[string, Record<string, unknown>, number]> = [
    ['the cache counters left out', { input_tokens: 10, output_tokens: 7 }, 6010],
    ['the cache counters null', { input_tokens: 10, cache_creation_input_tokens: null, cache_read_input_tokens: null, output_tokens: 7 }, 6010],
    ['only output_tokens', { output_tokens: 7 }, 6010],
    ['a cache counter given again, which replaces the first', { input_tokens: 10, cache_read_input_tokens: 6000, output_tokens: 7 }, 7010],
  ];
  for (const [what, usage, inputTokens] of cases) {
    deltaUsage = usage;
    const stream = client.messages.stream({ model: 'claude', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] });
    const final = await stream.finalMessage();
    const sdkInput = final.usage.input_tokens + (final.usage.cache_creation_input_tokens ?? 0) + (final.usage.cache_read_input_tokens ?? 0);
    t.equal(sdkInput, inputTokens, `${what}: the SDK's own final message counts this input`);
    const record = await waitFor(() => records.find((r) => r.requestId === stream.request_id), { what: `the record of ${String(stream.request_id)}` });
    t.same(record.usage, { inputTokens, outputTokens: 7, estimated: false }, `${what}: the record counts it too`);
    // The 1000 cache-write tokens (five-minute: no ttl asked) are billed 1.25×: a quarter of the input price on top.
    const writePremium = (START_USAGE.cache_creation_input_tokens * PRICE.inputMicrosPerToken) / 4;
    t.equal(record.cost.costMicros, inputTokens * PRICE.inputMicrosPerToken + writePremium + 7 * PRICE.outputMicrosPerToken, `${what}: and so does the charge`);
  }
});
