// The same reasoning under both `reasoning` and `reasoning_content` (vLLM while it renamed the
// field, mlx-vlm) is counted once (billing/reasoning-under-both-names-counted-once), but both copies
// are still checked: a mask lands in each, in a JSON answer, a stream and a request; a secret in
// either blocks.
import t from 'tap';
import type { GuardrailRule } from '../../../proto/src/index.js';
import { sdkError } from '../pipeline/pipeline-harness.js';
import { rawChatStream, startGuardedNode } from './guarded-node.js';

const EMAIL = 'bob@example.com';
const SECRET = 'sk-proj-Abc123Def456Ghi789Jkl0';
const RULES: GuardrailRule[] = [
  { detector: 'email', action: 'mask', on: 'both' },
  { detector: 'secret', action: 'block', on: 'both' },
];
const USER = [{ role: 'user' as const, content: 'hi' }];
const both = (text: string): Record<string, string> => ({ reasoning: text, reasoning_content: text });
const chunk = (delta: Record<string, unknown>, finish: string | null = null): string =>
  `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'echo', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
const answerWith = (message: Record<string, unknown>): { json: unknown } => ({
  json: { id: 'c1', object: 'chat.completion', created: 1, model: 'demo-echo', choices: [{ index: 0, finish_reason: 'stop', message: { role: 'assistant', content: 'ok', ...message } }], usage: { prompt_tokens: 3, completion_tokens: 3, total_tokens: 6 } },
});

t.test('reasoning repeated under both names is checked in both copies', async (t) => {
  const { upstream, node } = await startGuardedNode(t, RULES);
  const client = node.client();

  await t.test('a JSON answer: the e-mail masked in both fields, a secret blocks', async (t) => {
    upstream.answer = answerWith(both(`user is ${EMAIL}`));
    const reply = await client.chat.completions.create({ model: 'echo', messages: USER });
    const message = reply.choices[0]!.message as unknown as Record<string, unknown>;
    t.equal(message.reasoning, 'user is [EMAIL]');
    t.equal(message.reasoning_content, 'user is [EMAIL]');
    upstream.answer = answerWith(both(`key ${SECRET}`));
    const err = await sdkError(client.chat.completions.create({ model: 'echo', messages: USER }));
    t.equal(err.code, 'ZN_ERR_GUARDRAIL_BLOCKED');
  });

  await t.test('a stream: the e-mail split across deltas masked in both running texts', async (t) => {
    upstream.answer = { sse: [chunk(both('user is bob@exa')), chunk(both('mple.com')), chunk({ content: 'done' }), chunk({}, 'stop'), 'data: [DONE]\n\n'] };
    const { status, body } = await rawChatStream(node, node.secret, { model: 'echo', messages: USER });
    t.equal(status, 200);
    t.notMatch(body, /example/);
    let reasoning = '';
    let reasoningContent = '';
    for (const event of body.split('\n\n')) {
      if (!event.startsWith('data: {')) continue;
      const delta = (JSON.parse(event.slice(6)) as { choices?: Array<{ delta?: { reasoning?: string; reasoning_content?: string } }> }).choices?.[0]?.delta;
      reasoning += delta?.reasoning ?? '';
      reasoningContent += delta?.reasoning_content ?? '';
    }
    t.equal(reasoning, 'user is [EMAIL]');
    t.equal(reasoningContent, 'user is [EMAIL]');
  });

  await t.test('a request: an assistant message sent back with both has the e-mail masked in each', async (t) => {
    upstream.answer = answerWith({});
    await client.chat.completions.create({ model: 'echo', messages: [...USER, { role: 'assistant', content: 'ok', ...both(`mail ${EMAIL}`) }, { role: 'user', content: 'go on' }] as never });
    const sent = upstream.requests.at(-1)!.body as { messages: Array<Record<string, unknown>> };
    t.equal(sent.messages[1]!.reasoning, 'mail [EMAIL]');
    t.equal(sent.messages[1]!.reasoning_content, 'mail [EMAIL]');
  });
});
