// Embeddings input given as token ids (`number[]`, `number[][]`, what tiktoken gives) is text the
// node cannot read back, so under input rules it is refused (ZN_ERR_GUARDRAIL_UNCHECKABLE, param
// `input`) before anything is forwarded; without input rules it is forwarded and metered as before.
import t from 'tap';
import OpenAI from 'openai';
import { waitFor } from '../../fixtures/wait-for.js';
import { startGuardedNode } from './guarded-node.js';

const IDS = [5094, 79122, 64];
const embedding = { object: 'list', model: 'demo-echo', data: [{ object: 'embedding', index: 0, embedding: [0.1, 0.2] }], usage: { prompt_tokens: 3, total_tokens: 3 } };

t.test('token-id embeddings input under input rules is refused, as text the rules cannot check', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'keywords', keywords: ['aurora'], action: 'block', on: 'input' }]);
  upstream.answer = { json: embedding };
  const client = node.client();
  for (const input of [IDS, [IDS, [1, 2]]]) {
    const before = upstream.requests.length;
    const err = await client.embeddings.create({ model: 'echo', input, encoding_format: 'float' }).then(
      () => undefined,
      (e: unknown) => e,
    );
    t.ok(err instanceof OpenAI.APIError, `${JSON.stringify(input)} is refused`);
    if (!(err instanceof OpenAI.APIError)) continue;
    t.equal(err.status, 400);
    t.equal(err.code, 'ZN_ERR_GUARDRAIL_UNCHECKABLE');
    t.equal(err.param, 'input');
    t.match(err.message, /token ids in `input` cannot be checked/);
    t.equal(upstream.requests.length, before, 'nothing forwarded');
  }
  await t.test('while a text input is still checked as text', async (t) => {
    t.equal(await client.embeddings.create({ model: 'echo', input: 'dawn', encoding_format: 'float' }).then(() => 'forwarded'), 'forwarded');
    const err = await client.embeddings.create({ model: 'echo', input: 'project aurora', encoding_format: 'float' }).catch((e: unknown) => e);
    t.equal((err as InstanceType<typeof OpenAI.APIError>).code, 'ZN_ERR_GUARDRAIL_BLOCKED');
  });
});

t.test('token-id embeddings input passes keys without input rules and is metered as before', async (t) => {
  const { upstream, node, plainSecret } = await startGuardedNode(t, [{ detector: 'keywords', keywords: ['aurora'], action: 'block', on: 'output' }]);
  upstream.answer = { json: embedding };
  for (const client of [node.client(), node.client({ apiKey: plainSecret })]) {
    const before = upstream.requests.length;
    const { response } = await client.embeddings.create({ model: 'echo', input: [IDS], encoding_format: 'float' }).withResponse();
    t.equal(upstream.requests.length, before + 1, 'forwarded');
    t.same((upstream.requests.at(-1)?.body as { input?: unknown }).input, [IDS], 'as sent');
    const requestId = response.headers.get('x-request-id');
    const done = await waitFor(() => node.finished.find((f) => f.requestId === requestId), { what: 'the finished request' });
    t.equal(done.usage.inputTokens, 3, 'metered with the upstream’s usage');
  }
});
