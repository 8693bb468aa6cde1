// Guardrails through the node's HTTP surface with the official openai client and the fake upstream:
// masked input is what the upstream receives, a blocking rule never reaches it, and output rules
// mask JSON and streamed answers (and end a stream with the guardrail code when they block).
import t from 'tap';
import { APIError } from 'openai';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../../edge-node/src/config/runtime-config.js';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import { bundleKey, newCallerKey, testBundle } from '../config-fixtures.js';
import { startNode } from '../node-harness.js';
import { policy } from './guardrail-fixtures.js';

t.test('guardrail policies on a listening node', async (t) => {
  const upstream = await startFakeUpstream(t);
  const guarded = newCallerKey();
  const streamBlocked = newCallerKey();
  const bundle = testBundle({
    nodeId: 'node-1',
    version: 1,
    upstreamUrl: upstream.url,
    keys: [bundleKey('key-guarded', guarded.sha256, { guardrailPolicyId: 'pii' }), bundleKey('key-out-block', streamBlocked.sha256, { guardrailPolicyId: 'no-phones-out' })],
    guardrailPolicies: [
      policy('pii', [
        { detector: 'email', action: 'mask', on: 'input' },
        { detector: 'secret', action: 'block', on: 'input' },
        { detector: 'keywords', keywords: ['demo upstream'], action: 'mask', on: 'output' },
      ]),
      policy('no-phones-out', [{ detector: 'phone', action: 'block', on: 'output' }]),
    ],
  });
  const node = await startNode(t, ConfigHolder.ready(fromBundle(bundle)));
  const client = node.client({ apiKey: guarded.secret });

  await t.test('masked input is what the upstream receives, and output rules mask the answer', async (t) => {
    const before = upstream.requests.length;
    const reply = await client.chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: '请回复 zhang.san@example.com 谢谢' }] });
    const seen = upstream.requests.slice(before);
    t.equal(seen.length, 1);
    const forwarded = seen[0]!.body as { messages: Array<{ content: string }> };
    t.equal(forwarded.messages[0]?.content, '请回复 [EMAIL] 谢谢');
    t.notMatch(JSON.stringify(seen[0]!.body), /example\.com/);
    t.equal(reply.choices[0]?.message.content, '[zenova [REDACTED]] echo: 请回复 [EMAIL] 谢谢');
  });

  await t.test('a blocking input rule refuses the call and nothing reaches the upstream', async (t) => {
    const before = upstream.requests.length;
    let error: unknown;
    try {
      await client.chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'my key is sk-proj-Abc123Def456Ghi789Jkl0' }] });
    } catch (err) {
      error = err;
    }
    t.ok(error instanceof APIError);
    const apiError = error as APIError;
    t.equal(apiError.status, 400);
    t.equal(apiError.code, 'ZN_ERR_GUARDRAIL_BLOCKED');
    t.notMatch(apiError.message, /sk-proj/);
    t.equal(upstream.requests.length, before, 'the upstream was never called');
  });

  await t.test('a streamed answer is masked across chunk boundaries', async (t) => {
    const stream = await client.chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'stream to a@example.com please' }], stream: true });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
    t.equal(text, '[zenova [REDACTED]] echo: stream to [EMAIL] please');
  });

  await t.test('a blocking output rule ends a stream with the guardrail code and never sends the match', async (t) => {
    const response = await fetch(`${node.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${streamBlocked.secret}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'echo', stream: true, messages: [{ role: 'user', content: 'call me on 13800138000 tonight' }] }),
    });
    t.equal(response.status, 200, 'the stream had started');
    const body = await response.text();
    t.match(body, /ZN_ERR_GUARDRAIL_BLOCKED/);
    t.notMatch(body, /13800138000|1380013|0138000/);
    t.notMatch(body, /\[DONE\]/, 'the stream does not end as if complete');
  });

  await t.test('a blocking output rule refuses a JSON answer', async (t) => {
    const response = await fetch(`${node.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${streamBlocked.secret}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'call me on 13800138000 tonight' }] }),
    });
    t.equal(response.status, 400);
    const body = await response.text();
    t.match(body, /ZN_ERR_GUARDRAIL_BLOCKED/);
    t.notMatch(body, /13800138000/);
  });
});
