// An upstream that gives no usage (or a stream cut before its final usage) has its output estimated
// from the text delivered (~4 ASCII characters per token), which runs high on text of long tokens.
// The estimate is capped at the output limit the node sent upstream — a priced chat request's
// reserved limit × n, a Messages request's max_tokens, an unpriced request's own limit — so a
// priced request's output stays within its reservation and its lease within its grant. A count the
// upstream reports is billed as given, above the limit or not; the tokens/min true-up counts the
// capped figure too (docs/billing.md, "Stage settle").
import http from 'node:http';
import t from 'tap';
import type { Test } from 'tap';
import { pino } from 'pino';
import type { RequestRecord } from '../../../proto/src/index.js';
import { DEFAULT_CREDIT_POLICY } from '../../../edge-node/src/billing/credit-policy.js';
import { LeaseBook } from '../../../edge-node/src/billing/lease-book.js';
import { LeaseCredit } from '../../../edge-node/src/billing/lease-credit.js';
import { memoryLeaseStore } from '../../../edge-node/src/billing/lease-store.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import type { AdmitOutcome, AdmitQuery, WindowChange } from '../../../edge-node/src/rate-limit/limit-store.js';
import { MemoryLimitStore } from '../../../edge-node/src/rate-limit/memory-limit-store.js';
import { NodeRateLimiter } from '../../../edge-node/src/rate-limit/node-rate-limiter.js';
import { listenForTest } from '../../fixtures/loopback-server.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { recordsInto } from '../anthropic-fixtures.js';
import { ACCOUNT_ID, bundleKey } from '../config-fixtures.js';
import { startPipelineNode, withClaudeRoute } from '../pipeline/pipeline-harness.js';

const PRICE = { inputMicrosPerToken: 1, outputMicrosPerToken: 10, requestMicros: 0 };
const GRANTED = 1_000;
/** One long token: a run of 32 '-' (one token to real tokenizers, 8 to the node's estimate). */
const LONG_TOKEN = '-'.repeat(32);

/** What the upstream received and how it answers: `answer` writes the response to `body`. */
type Answer = (body: Record<string, unknown>, res: http.ServerResponse) => void;

interface Setup {
  /** Aliases priced (default both `echo` and `claude`). */
  priced?: string[];
  /** The node's default output allowance per choice (ZENOVA_DEFAULT_MAX_OUTPUT_TOKENS). */
  defaultMaxOutputTokens?: number;
  /** A tokens/min limit on the key, counted in this store. */
  tokensPerMinute?: { limit: number; store: MemoryLimitStore };
}

interface Node {
  post(path: string, body: unknown): Promise<{ status: number; record: RequestRecord; sent: Record<string, unknown> }>;
  lease(): { granted: number; spent: number; reserved: number };
  /** How many requests have finished (their cleanups, the tokens/min true-up among them, done). */
  finished(): number;
}

async function startNode(t: Test, answer: Answer, setup: Setup = {}): Promise<Node> {
  const sent: Array<Record<string, unknown>> = [];
  const server = http.createServer((req, res) => {
    let text = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (text += chunk));
    req.on('end', () => {
      const body = JSON.parse(text) as Record<string, unknown>;
      sent.push(body);
      answer(body, res);
    });
  });
  const upstreamUrl = await listenForTest(t, server);
  const book = new LeaseBook(memoryLeaseStore);
  book.grant({ accountId: ACCOUNT_ID, leaseId: 'lease-1', amountMicros: GRANTED, expiresAt: Date.now() + 600_000 });
  const policy = { ...DEFAULT_CREDIT_POLICY, ...(setup.defaultMaxOutputTokens === undefined ? {} : { defaultMaxOutputTokens: setup.defaultMaxOutputTokens }) };
  const records: RequestRecord[] = [];
  const node = await startPipelineNode(t, {
    upstreamUrl,
    bundle: (base, keyHash) => ({
      ...withClaudeRoute(base, upstreamUrl),
      prices: (setup.priced ?? ['echo', 'claude']).map((model) => ({ model, ...PRICE })),
      ...(setup.tokensPerMinute === undefined ? {} : { apiKeys: [bundleKey('key-a', keyHash, { limits: { tokensPerMinute: setup.tokensPerMinute.limit } })] }),
    }),
    services: {
      credit: new LeaseCredit(book, policy, pino({ level: 'silent' })),
      spool: recordsInto(records),
      ...(setup.tokensPerMinute === undefined ? {} : { limiter: new NodeRateLimiter(setup.tokensPerMinute.store, createLogger({ level: 'silent' })) }),
    },
  });
  const lease = (): { granted: number; spent: number; reserved: number } => book.leaseOf(ACCOUNT_ID)!.snapshot();
  return {
    lease,
    finished: () => node.finished.length,
    async post(path, body) {
      const res = await fetch(`${node.origin}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}`, 'x-api-key': node.secret, 'anthropic-version': '2023-06-01' },
        body: JSON.stringify(body),
      });
      await res.text().catch(() => '');
      const requestId = res.headers.get('x-request-id') ?? res.headers.get('request-id');
      const record = await waitFor(() => records.find((r) => r.requestId === requestId), { what: `the record of ${String(requestId)}` });
      // The lease is charged once the record is committed: nothing stays reserved after.
      await waitFor(() => lease().reserved === 0, { what: 'the reservation to be settled' });
      return { status: res.status, record, sent: sent.at(-1)! };
    },
  };
}

/** The per-choice limit the upstream was sent in whichever field. */
function sentLimit(body: Record<string, unknown>): number {
  return (body.max_tokens ?? body.max_completion_tokens) as number;
}

/** `count` long tokens of text. */
function longTokens(count: number): string {
  return LONG_TOKEN.repeat(count);
}

/** A chat completion obeying the limit it was sent, one choice per `n`, each all long tokens, without usage. */
const chatWithoutUsage: Answer = (body, res) => {
  const limit = sentLimit(body);
  const n = typeof body.n === 'number' ? body.n : 1;
  const choices = Array.from({ length: n }, (_, index) => ({ index, message: { role: 'assistant', content: longTokens(limit) }, finish_reason: 'length' }));
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ id: 'c1', object: 'chat.completion', created: 1, model: 'demo-echo', choices }));
};

/** Output the record's cost spends (input at its own price, from the record's input count). */
function outputMicros(record: RequestRecord): number {
  return record.cost.costMicros - record.usage.inputTokens * PRICE.inputMicrosPerToken;
}

/** The output part of the reservation: the reservation less its input term (the same prompt estimate). */
function reservedOutputMicros(record: RequestRecord): number {
  return record.cost.reservedMicros - record.usage.inputTokens * PRICE.inputMicrosPerToken;
}

t.test('a chat answer without usage is billed at most the reserved output limit', async (t) => {
  const node = await startNode(t, chatWithoutUsage);
  const { status, record, sent } = await node.post('/v1/chat/completions', { model: 'echo', messages: [{ role: 'user', content: 'hi' }], max_tokens: 16 });
  t.equal(status, 200);
  t.equal(sentLimit(sent), 16, 'the upstream was told the reserved limit');
  t.same(record.usage, { inputTokens: record.usage.inputTokens, outputTokens: 16, estimated: true }, 'the estimate (128 from the text) is capped at max_tokens');
  t.equal(outputMicros(record), 16 * PRICE.outputMicrosPerToken);
  t.ok(outputMicros(record) <= reservedOutputMicros(record), 'output cost within what was reserved for output');
  t.ok(record.cost.costMicros <= record.cost.reservedMicros, 'cost within the reservation');
  const lease = node.lease();
  t.ok(lease.spent <= lease.granted, `lease spent ${lease.spent} within granted ${lease.granted}`);
  t.equal(lease.spent, record.cost.costMicros);
});

t.test('a chat answer without usage for n choices is capped at the reserved limit times n', async (t) => {
  const node = await startNode(t, chatWithoutUsage);
  const { record } = await node.post('/v1/chat/completions', { model: 'echo', messages: [{ role: 'user', content: 'hi' }], max_tokens: 10, n: 3 });
  t.same(record.usage, { inputTokens: record.usage.inputTokens, outputTokens: 30, estimated: true });
  t.ok(record.cost.costMicros <= record.cost.reservedMicros, 'cost within the reservation');
});

t.test('a chat request without a limit is capped at the default allowance it was reserved and sent', async (t) => {
  const node = await startNode(t, chatWithoutUsage, { defaultMaxOutputTokens: 20 });
  const { record, sent } = await node.post('/v1/chat/completions', { model: 'echo', messages: [{ role: 'user', content: 'hi' }] });
  t.equal(sentLimit(sent), 20, 'the default allowance went upstream');
  t.same(record.usage, { inputTokens: record.usage.inputTokens, outputTokens: 20, estimated: true });
  t.ok(record.cost.costMicros <= record.cost.reservedMicros, 'cost within the reservation');
});

t.test('a chat stream cut before its usage is billed at most the reserved output limit', async (t) => {
  const node = await startNode(t, (body, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    const base = { id: 'c', object: 'chat.completion.chunk', created: 1, model: 'demo-echo' };
    for (let i = 0; i < sentLimit(body); i++) res.write(`data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta: { content: LONG_TOKEN }, finish_reason: null }] })}\n\n`);
    // The body ends before any finish_reason, [DONE] or usage chunk: a stream cut short.
    res.end();
  });
  const { record } = await node.post('/v1/chat/completions', { model: 'echo', messages: [{ role: 'user', content: 'hi' }], max_tokens: 16, stream: true });
  t.equal(record.upstream !== null, true, 'the upstream answered (the request is charged)');
  t.same(record.usage, { inputTokens: record.usage.inputTokens, outputTokens: 16, estimated: true }, 'the estimate (128 from the text) is capped at max_tokens');
  t.ok(outputMicros(record) <= reservedOutputMicros(record), 'output cost within what was reserved for output');
  const lease = node.lease();
  t.ok(lease.spent <= lease.granted, `lease spent ${lease.spent} within granted ${lease.granted}`);
});

t.test('a cut stream keeps a running upstream count above the limit', async (t) => {
  const node = await startNode(t, (body, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    const base = { id: 'c', object: 'chat.completion.chunk', created: 1, model: 'demo-echo' };
    res.write(`data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta: { content: longTokens(sentLimit(body)) }, finish_reason: null }], usage: { prompt_tokens: 5, completion_tokens: 40, total_tokens: 45 } })}\n\n`);
    res.end();
  });
  const { record } = await node.post('/v1/chat/completions', { model: 'echo', messages: [{ role: 'user', content: 'hi' }], max_tokens: 16, stream: true });
  t.same(record.usage, { inputTokens: 5, outputTokens: 40, estimated: true }, "the upstream's own partial count is billed as given");
});

t.test('an upstream usage above max_tokens is billed as reported', async (t) => {
  const node = await startNode(t, (_body, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({
      id: 'c1', object: 'chat.completion', created: 1, model: 'demo-echo',
      choices: [{ index: 0, message: { role: 'assistant', content: 'short' }, finish_reason: 'stop' }],
      usage: { prompt_tokens: 5, completion_tokens: 500, total_tokens: 505 },
    }));
  });
  const { record } = await node.post('/v1/chat/completions', { model: 'echo', messages: [{ role: 'user', content: 'hi' }], max_tokens: 16 });
  t.same(record.usage, { inputTokens: 5, outputTokens: 500, estimated: false }, "the upstream's count, not capped");
  t.equal(record.cost.costMicros, 5 * PRICE.inputMicrosPerToken + 500 * PRICE.outputMicrosPerToken, 'charged in full, above the reservation');
});

t.test('a Messages answer without output usage is billed at most its max_tokens', async (t) => {
  const node = await startNode(t, (body, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({
      id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-real', content: [{ type: 'text', text: longTokens(body.max_tokens as number) }],
      stop_reason: 'max_tokens', stop_sequence: null, usage: { input_tokens: 5 },
    }));
  });
  const { status, record, sent } = await node.post('/v1/messages', { model: 'claude', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] });
  t.equal(status, 200);
  t.equal(sent.max_tokens, 16);
  t.same(record.usage, { inputTokens: 5, outputTokens: 16, estimated: true });
  t.ok(record.cost.costMicros <= record.cost.reservedMicros, 'cost within the reservation');
});

t.test('an unpriced chat request is capped at its own limit, and uncapped without one', async (t) => {
  const node = await startNode(t, (_body, res) => {
    // 16 long tokens whatever the limit (none may have been sent).
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ id: 'c1', object: 'chat.completion', created: 1, model: 'demo-echo', choices: [{ index: 0, message: { role: 'assistant', content: longTokens(16) }, finish_reason: 'stop' }] }));
  }, { priced: ['claude'] });
  const limited = await node.post('/v1/chat/completions', { model: 'echo', messages: [{ role: 'user', content: 'hi' }], max_tokens: 12, n: 1 });
  t.equal(limited.record.cost.priced, false);
  t.same(limited.record.usage, { inputTokens: limited.record.usage.inputTokens, outputTokens: 12, estimated: true }, "capped at the caller's limit it forwarded");
  const unlimited = await node.post('/v1/chat/completions', { model: 'echo', messages: [{ role: 'user', content: 'hi' }] });
  t.equal(sentLimit(unlimited.sent), undefined, 'no limit went upstream');
  t.same(unlimited.record.usage, { inputTokens: unlimited.record.usage.inputTokens, outputTokens: 128, estimated: true }, 'the estimate from the text, nothing to cap it');
  // A limit of another name, which llama.cpp or Ollama read before max_tokens: the upstream may
  // have written past max_tokens, so no cap is known.
  for (const other of [{ n_predict: 200 }, { num_predict: 200 }, { max_new_tokens: 200 }, { options: { num_predict: 200 } }]) {
    const both = await node.post('/v1/chat/completions', { model: 'echo', messages: [{ role: 'user', content: 'hi' }], max_tokens: 12, ...other });
    t.same(both.record.usage, { inputTokens: both.record.usage.inputTokens, outputTokens: 128, estimated: true }, `max_tokens 12 beside ${JSON.stringify(other)}: not capped at 12`);
  }
});

/** A limit store that keeps what each request was charged on admission and trued up by, in tokens. */
class CountingLimitStore extends MemoryLimitStore {
  tokens = 0;

  override admit(query: AdmitQuery): AdmitOutcome {
    const outcome = super.admit(query);
    if (outcome.failedRate < 0 && outcome.failedSlot < 0) for (const rate of query.rates) if (rate.metric === 'tokens') this.tokens += rate.charge;
    return outcome;
  }

  override change(changes: readonly WindowChange[]): void {
    super.change(changes);
    for (const change of changes) if (change.metric === 'tokens') this.tokens += change.delta;
  }
}

t.test('the tokens per minute true-up counts the capped output estimate', async (t) => {
  const store = new CountingLimitStore();
  const node = await startNode(t, chatWithoutUsage, { tokensPerMinute: { limit: 1_000_000, store } });
  const { record } = await node.post('/v1/chat/completions', { model: 'echo', messages: [{ role: 'user', content: 'hi' }], max_tokens: 16 });
  await waitFor(() => node.finished() === 1, { what: 'the request to finish' });
  t.equal(record.usage.outputTokens, 16);
  t.equal(store.tokens, record.usage.inputTokens + 16, 'the key is counted the prompt and 16 output tokens, not the 128 of the text');
});
