// A priced chat request without an output limit reserves the default allowance per choice, and that
// allowance is sent upstream as the request's limit (the field the upstream kind takes), so the
// upstream cannot produce more than was reserved; a caller's own limit is sent in the field the
// upstream kind reads; a request setting both fields is reserved for the smaller and forwarded with
// both set to it; output limits of other names (n_predict…) are refused on priced requests; unpriced
// requests go as sent (docs/billing.md, "Output limit").
import t from 'tap';
import type { Test } from 'tap';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { pino } from 'pino';
import { DEFAULT_CREDIT_POLICY } from '../../../edge-node/src/billing/credit-policy.js';
import { LeaseBook } from '../../../edge-node/src/billing/lease-book.js';
import { LeaseCredit } from '../../../edge-node/src/billing/lease-credit.js';
import { memoryLeaseStore } from '../../../edge-node/src/billing/lease-store.js';
import type { UpstreamKind } from '../../../edge-node/src/config/runtime-config.js';
import type { PipelineContext } from '../../../edge-node/src/pipeline/context.js';
import { upstreamChatBody } from '../../../edge-node/src/providers/openai/chat-request.js';
import type { ConfigBundle } from '../../../proto/src/index.js';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import type { FakeUpstream } from '../../fixtures/fake-upstream.js';
import { ACCOUNT_ID } from '../config-fixtures.js';
import { startPipelineNode } from '../pipeline/pipeline-harness.js';
import type { PipelineNode } from '../pipeline/pipeline-harness.js';

const PER_CHOICE = DEFAULT_CREDIT_POLICY.defaultMaxOutputTokens;

async function creditNode(t: Test, opts: { kind?: UpstreamKind; priced?: boolean } = {}): Promise<{ node: PipelineNode; upstream: FakeUpstream; book: LeaseBook }> {
  const upstream = await startFakeUpstream(t);
  const book = new LeaseBook(memoryLeaseStore);
  book.grant({ accountId: ACCOUNT_ID, leaseId: 'lease-1', amountMicros: 100_000_000, expiresAt: Date.now() + 600_000 });
  const credit = new LeaseCredit(book, DEFAULT_CREDIT_POLICY, pino({ level: 'silent' }));
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    bundle: (base): Partial<ConfigBundle> => ({
      upstreams: base.upstreams.map((u) => ({ ...u, kind: opts.kind ?? u.kind })),
      prices: opts.priced === false ? [] : [{ model: 'echo', inputMicrosPerToken: 1, outputMicrosPerToken: 10, requestMicros: 0 }],
    }),
    services: { credit },
  });
  return { node, upstream, book };
}

async function chat(node: PipelineNode, body: Record<string, unknown>): Promise<number> {
  const res = await fetch(`${node.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
    body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'write a long essay' }], ...body }),
  });
  await res.arrayBuffer();
  return res.status;
}

function forwarded(upstream: FakeUpstream): Record<string, unknown> {
  return upstream.requests.at(-1)!.body as Record<string, unknown>;
}

t.test('a priced chat request without an output limit is forwarded with the reserved per-choice limit as max_tokens to an OpenAI-compatible upstream', async (t) => {
  const { node, upstream } = await creditNode(t);
  t.equal(await chat(node, {}), 200);
  t.equal(forwarded(upstream).max_tokens, PER_CHOICE);
  t.notOk('max_completion_tokens' in forwarded(upstream));
  t.equal(await chat(node, { n: 3, stream: true }), 200);
  t.equal(forwarded(upstream).max_tokens, PER_CHOICE, 'the limit is per choice, as the reservation (n × limit)');
});

t.test('a priced chat request without an output limit is forwarded with max_completion_tokens to an OpenAI upstream', async (t) => {
  const { node, upstream } = await creditNode(t, { kind: 'openai' });
  t.equal(await chat(node, { max_tokens: null }), 200);
  t.equal(forwarded(upstream).max_completion_tokens, PER_CHOICE);
  t.notOk('max_tokens' in forwarded(upstream), 'an explicit null of the other name is dropped');
});

t.test("a priced request's own output limit is forwarded to an OpenAI upstream in the caller's own field, which OpenAI reads", async (t) => {
  const { node, upstream } = await creditNode(t, { kind: 'openai' });
  t.equal(await chat(node, { max_tokens: 50_000 }), 200);
  t.equal(forwarded(upstream).max_tokens, 50_000, 'the caller chose the field its model takes');
  t.notOk('max_completion_tokens' in forwarded(upstream));
  t.equal(await chat(node, { max_completion_tokens: 7 }), 200);
  t.equal(forwarded(upstream).max_completion_tokens, 7);
  t.notOk('max_tokens' in forwarded(upstream));
});

t.test("an unpriced request's own output limit is forwarded unchanged", async (t) => {
  const { node, upstream } = await creditNode(t, { priced: false });
  t.equal(await chat(node, { max_completion_tokens: 7 }), 200);
  t.equal(forwarded(upstream).max_completion_tokens, 7);
  t.notOk('max_tokens' in forwarded(upstream));
});

t.test('an unpriced chat request is forwarded without an added output limit', async (t) => {
  const { node, upstream } = await creditNode(t, { priced: false });
  t.equal(await chat(node, {}), 200);
  t.notOk('max_tokens' in forwarded(upstream));
  t.notOk('max_completion_tokens' in forwarded(upstream));
});

t.test("upstreamChatBody sends a priced request's limit in the field its upstream kind reads, and not the other", async (t) => {
  const request = { model: 'm', messages: [] };
  t.same(upstreamChatBody(request, 'up', false), { model: 'up', messages: [] }, 'no limit given: unchanged');
  t.same(upstreamChatBody(request, 'up', false, { tokens: 100, kind: 'openai-compatible' }), { model: 'up', messages: [], max_tokens: 100 });
  t.same(upstreamChatBody({ ...request, max_completion_tokens: 5 }, 'up', false, { tokens: 5, kind: 'openai-compatible' }), { model: 'up', messages: [], max_tokens: 5 });
  t.same(upstreamChatBody({ ...request, max_tokens: 5 }, 'up', false, { tokens: 5, kind: 'openai' }), { model: 'up', messages: [], max_tokens: 5 });
  t.same(upstreamChatBody({ ...request, max_tokens: null }, 'up', false, { tokens: 100, kind: 'openai' }), { model: 'up', messages: [], max_completion_tokens: 100 });
  t.same(upstreamChatBody({ ...request, max_completion_tokens: 5 }, 'up', false), { model: 'up', messages: [], max_completion_tokens: 5 }, 'unpriced: as sent');
});

/**
 * An OpenAI-compatible server that reads only `max_tokens` (as Ollama's /v1 does): it writes that
 * many output tokens and reports them; every body it received is kept.
 */
async function maxTokensOnlyUpstream(t: Test): Promise<{ url: string; bodies: Record<string, unknown>[] }> {
  const bodies: Record<string, unknown>[] = [];
  const server = http.createServer((req, res) => {
    let raw = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (raw += chunk));
    req.on('end', () => {
      const body = JSON.parse(raw) as Record<string, unknown>;
      bodies.push(body);
      const out = typeof body.max_tokens === 'number' ? body.max_tokens : 16;
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({
        id: 'x', object: 'chat.completion', created: 1, model: body.model,
        choices: [{ index: 0, message: { role: 'assistant', content: 'word '.repeat(10) }, finish_reason: 'length' }],
        usage: { prompt_tokens: 5, completion_tokens: out, total_tokens: 5 + out },
      }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, bodies };
}

/** A node pricing `echo` (10 µ per output token) with a 1 000 µ lease, in front of maxTokensOnlyUpstream; each request's cost as finished. */
async function maxTokensOnlyNode(t: Test): Promise<{ upstream: { url: string; bodies: Record<string, unknown>[] }; book: LeaseBook; costs: PipelineContext['cost'][]; node: PipelineNode }> {
  const upstream = await maxTokensOnlyUpstream(t);
  const book = new LeaseBook(memoryLeaseStore);
  book.grant({ accountId: ACCOUNT_ID, leaseId: 'lease-1', amountMicros: 1_000, expiresAt: Date.now() + 600_000 });
  const credit = new LeaseCredit(book, DEFAULT_CREDIT_POLICY, pino({ level: 'silent' }));
  const costs: PipelineContext['cost'][] = [];
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    bundle: () => ({ prices: [{ model: 'echo', inputMicrosPerToken: 1, outputMicrosPerToken: 10, requestMicros: 0 }] }),
    services: { credit, metrics: { requestFinished: (ctx: PipelineContext) => void costs.push({ ...ctx.cost }) } },
  });
  return { upstream, book, costs, node };
}

t.test('a chat request with both max_completion_tokens and max_tokens is reserved for the smaller and forwarded with both set to it', async (t) => {
  const { upstream, book, costs, node } = await maxTokensOnlyNode(t);
  t.equal(await chat(node, { max_completion_tokens: 1, max_tokens: 100_000 }), 200);
  const body = upstream.bodies.at(-1)!;
  t.equal(body.max_tokens, 1, 'the upstream reading max_tokens is told the smaller limit');
  t.equal(body.max_completion_tokens, 1, 'and so is one reading max_completion_tokens');
  const cost = costs.at(-1)!;
  t.ok(cost.costMicros > 0 && cost.costMicros <= cost.reservedMicros, `charged ${cost.costMicros} of the ${cost.reservedMicros} reserved`);
  t.ok(book.leaseOf(ACCOUNT_ID)!.available >= 0, 'the lease is not overdrawn');
});

t.test('an unpriced chat request with both output limits is forwarded with both set to the smaller', async (t) => {
  const { node, upstream } = await creditNode(t, { priced: false });
  t.equal(await chat(node, { max_tokens: 3, max_completion_tokens: 900 }), 200);
  t.equal(forwarded(upstream).max_tokens, 3);
  t.equal(forwarded(upstream).max_completion_tokens, 3);
});

t.test('upstreamChatBody sets both output limits to the smaller when the caller set both, whatever limit it is given', async (t) => {
  const request = { model: 'm', messages: [], max_completion_tokens: 1, max_tokens: 100_000 };
  t.same(upstreamChatBody(request, 'up', false), { model: 'up', messages: [], max_completion_tokens: 1, max_tokens: 1 });
  t.same(upstreamChatBody(request, 'up', false, { tokens: 4096, kind: 'openai' }), { model: 'up', messages: [], max_completion_tokens: 1, max_tokens: 1 });
  t.same(upstreamChatBody({ ...request, max_tokens: null }, 'up', false), { model: 'up', messages: [], max_completion_tokens: 1, max_tokens: null }, 'one set, one null: unchanged');
});

t.test('a priced chat request with only max_completion_tokens is forwarded with that limit as max_tokens to an OpenAI-compatible upstream, and the lease is not overdrawn', async (t) => {
  const { upstream, book, costs, node } = await maxTokensOnlyNode(t);
  t.equal(await chat(node, { max_completion_tokens: 1 }), 200);
  const body = upstream.bodies.at(-1)!;
  t.equal(body.max_tokens, 1, 'the upstream reading only max_tokens is told the reserved limit');
  t.notOk('max_completion_tokens' in body, 'one field only: some servers refuse both');
  const cost = costs.at(-1)!;
  t.ok(cost.costMicros > 0 && cost.costMicros <= cost.reservedMicros, `charged ${cost.costMicros} of the ${cost.reservedMicros} reserved`);
  t.ok(book.leaseOf(ACCOUNT_ID)!.available >= 0, 'the lease is not overdrawn');
});

t.test('a priced chat request carrying an output limit of another name (n_predict, max_new_tokens, num_predict) is refused 400 naming it', async (t) => {
  const { node, upstream } = await creditNode(t);
  for (const extra of [{ n_predict: 100_000 }, { max_new_tokens: 100_000 }, { num_predict: 100_000 }, { options: { num_predict: 100_000 } }]) {
    const res = await fetch(`${node.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
      body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'hi' }], max_tokens: 1, ...extra }),
    });
    const text = await res.text();
    const name = Object.keys(extra)[0] === 'options' ? 'options.num_predict' : Object.keys(extra)[0]!;
    t.equal(res.status, 400, name);
    t.match(text, 'ZN_ERR_INVALID_REQUEST');
    t.match(text, name);
  }
  t.equal(upstream.requests.length, 0, 'nothing was forwarded');
});

t.test('an unpriced chat request carrying n_predict is forwarded as sent', async (t) => {
  const { node, upstream } = await creditNode(t, { priced: false });
  t.equal(await chat(node, { n_predict: 50 }), 200);
  t.equal(forwarded(upstream).n_predict, 50);
});
