// A chat request's `n` choices are each generated (and billed) in full: the worst case the node
// charges against tokens per minute on admission and reserves from the credit lease counts the
// per-choice output allowance once per choice, with max_tokens and with the default; `n` is bounded.
import t from 'tap';
import type { Test } from 'tap';
import { DEFAULT_CREDIT_POLICY } from '../../edge-node/src/billing/credit-policy.js';
import { worstCaseOutputTokens } from '../../edge-node/src/billing/request-cost.js';
import { createLogger } from '../../edge-node/src/logger.js';
import type { PipelineContext } from '../../edge-node/src/pipeline/context.js';
import { createNodeRateLimiter } from '../../edge-node/src/rate-limit/create-node-rate-limiter.js';
import { DEFAULT_OUTPUT_TOKEN_ESTIMATE } from '../../edge-node/src/rate-limit/node-rate-limiter.js';
import type { RateLimits } from '../../proto/src/index.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import type { FakeUpstream } from '../fixtures/fake-upstream.js';
import { bundleKey } from './config-fixtures.js';
import { pricedCreditNode } from './billing/priced-credit-node.js';
import { startPipelineNode } from './pipeline/pipeline-harness.js';
import type { PipelineNode } from './pipeline/pipeline-harness.js';

const TOKENS_PER_MINUTE = 100_000;

async function limitedNode(t: Test): Promise<{ node: PipelineNode; upstream: FakeUpstream }> {
  const upstream = await startFakeUpstream(t);
  const limiter = await createNodeRateLimiter({ stateDir: undefined, logger: createLogger({ level: 'silent' }), env: {} });
  t.teardown(() => limiter.close());
  const limits: RateLimits = { tokensPerMinute: TOKENS_PER_MINUTE };
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    bundle: (_base, keyHash) => ({ apiKeys: [bundleKey('key-a', keyHash, { limits })] }),
    services: { limiter },
  });
  return { node, upstream };
}

/** A node whose account holds a lease of `leaseMicros`, with `echo` priced at 1 µ per output token only. */
const creditNode = (t: Test, leaseMicros: number) => pricedCreditNode(t, leaseMicros, { inputMicrosPerToken: 0, outputMicrosPerToken: 1 });

function chat(node: PipelineNode, body: Record<string, unknown>): Promise<Response> {
  return fetch(`${node.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
    body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'x' }], ...body }),
  });
}

/** Tokens charged on admission, read off the answer's x-ratelimit-remaining-tokens. */
async function chargedTokens(res: Response): Promise<number> {
  await res.arrayBuffer();
  return TOKENS_PER_MINUTE - Number(res.headers.get('x-ratelimit-remaining-tokens'));
}

t.test('a chat request for n choices is charged n times its max_tokens against tokens per minute on admission', async (t) => {
  const { node } = await limitedNode(t);
  const res = await chat(node, { n: 8, max_tokens: 100 });
  t.equal(res.status, 200);
  const charged = await chargedTokens(res);
  t.ok(charged >= 800 && charged < 850, `charged ${charged} tokens: the prompt plus 8 × 100`);
});

t.test('a chat request for n choices without max_tokens is charged the default output estimate once per choice', async (t) => {
  const { node } = await limitedNode(t);
  const res = await chat(node, { n: 3 });
  t.equal(res.status, 200);
  const charged = await chargedTokens(res);
  const output = 3 * DEFAULT_OUTPUT_TOKEN_ESTIMATE;
  t.ok(charged >= output && charged < output + 50, `charged ${charged} tokens: the prompt plus 3 × ${DEFAULT_OUTPUT_TOKEN_ESTIMATE}`);
});

t.test('a chat request whose n choices of max_tokens the lease cannot cover is refused with 402 and not forwarded', async (t) => {
  const { node, upstream } = await creditNode(t, 500);
  const before = upstream.requests.length;
  const refused = await chat(node, { n: 8, max_tokens: 100 });
  t.equal(refused.status, 402);
  t.equal(((await refused.json()) as { error: { code: string } }).error.code, 'ZN_ERR_CREDIT_EXHAUSTED');
  t.equal(upstream.requests.length, before, 'nothing was forwarded');
  const covered = await chat(node, { n: 4, max_tokens: 100 });
  t.equal(covered.status, 200, '4 × 100 fits in the lease');
  await covered.arrayBuffer();
});

t.test('a chat request for n choices without max_tokens reserves the default output allowance once per choice', async (t) => {
  const perChoice = DEFAULT_CREDIT_POLICY.defaultMaxOutputTokens;
  const { node, upstream } = await creditNode(t, perChoice + perChoice / 2);
  const refused = await chat(node, { n: 2 });
  t.equal(refused.status, 402, `2 × ${perChoice} is more than the lease holds`);
  await refused.arrayBuffer();
  t.equal(upstream.requests.length, 0);
  const covered = await chat(node, { n: 1 });
  t.equal(covered.status, 200, `1 × ${perChoice} fits`);
  await covered.arrayBuffer();
});

t.test('n outside 1 to 128 is refused with ZN_ERR_INVALID_REQUEST naming n, and nothing is forwarded', async (t) => {
  const { node, upstream } = await creditNode(t, 10_000_000);
  for (const n of [0, 129, 1000, 1.5]) {
    const res = await chat(node, { n, max_tokens: 10 });
    t.equal(res.status, 400, `n: ${n}`);
    const body = (await res.json()) as { error: { code: string; message: string } };
    t.equal(body.error.code, 'ZN_ERR_INVALID_REQUEST');
    t.match(body.error.message, /\bn: /);
  }
  t.equal(upstream.requests.length, 0);
  const most = await chat(node, { n: 128, max_tokens: 10 });
  t.equal(most.status, 200, 'n: 128 is allowed');
  await most.arrayBuffer();
});

t.test("an Anthropic request's worst-case output is its max_tokens once: Messages have no n", async (t) => {
  const ctx = { api: 'messages', maxOutputTokens: 64, forwardBody: { n: 8 } } as unknown as PipelineContext;
  t.equal(worstCaseOutputTokens(ctx, 4096), 64);
  const chatCtx = { api: 'chat.completions', maxOutputTokens: 64, forwardBody: { n: 8 } } as unknown as PipelineContext;
  t.equal(worstCaseOutputTokens(chatCtx, 4096), 512);
  const embeddings = { api: 'embeddings', maxOutputTokens: null, forwardBody: {} } as unknown as PipelineContext;
  t.equal(worstCaseOutputTokens(embeddings, 4096), 0, 'embeddings produce no output tokens');
});
