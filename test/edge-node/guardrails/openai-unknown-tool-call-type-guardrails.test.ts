// The `type` of an OpenAI chat answer's tool call that is neither `function` nor `custom`: such a
// call has a shape the node does not know, so every string in it is checked — and before, its
// `type` was skipped as a type tag whatever it held: a made-up type (`"type": "to eve@example.org"`)
// went out unmasked, and a `type` that is no string at all (an object or an array, never a type
// tag) had none of the strings in it checked. In a JSON answer the call's `type` is now checked
// like its other strings: a string as a name-like text (masked without brackets, as a tool name),
// a non-string as an odd shape (every string and number in it). `function` and `custom` calls and
// the type tags nested inside an unknown call are left as they were. (A stream still passes such a
// call's `type` unchecked: that is chat-stream.ts's to fix.)
import t from 'tap';
import type { GuardrailRule } from '../../../proto/src/index.js';
import { sdkError } from '../pipeline/pipeline-harness.js';
import { startGuardedNode } from './guarded-node.js';

const RULES: GuardrailRule[] = [
  { detector: 'email', action: 'mask', on: 'output' },
  { detector: 'phone', action: 'mask', on: 'output' },
  { detector: 'keywords', keywords: ['aurora'], action: 'block', on: 'output' },
];
const USER = [{ role: 'user' as const, content: 'go' }];
const ASK = { model: 'echo', messages: USER };

function answerWith(toolCalls: unknown[]): { json: unknown } {
  return {
    json: {
      id: 'chatcmpl-1',
      object: 'chat.completion',
      created: 1,
      model: 'demo-echo',
      choices: [{ index: 0, message: { role: 'assistant', content: null, tool_calls: toolCalls }, finish_reason: 'tool_calls' }],
      usage: { prompt_tokens: 5, completion_tokens: 7, total_tokens: 12 },
    },
  };
}

t.test('the type of an OpenAI tool call of an unknown type in a JSON answer', async (t) => {
  const { upstream, node, plainSecret } = await startGuardedNode(t, RULES);
  const client = node.client();
  const rawAnswer = async (secret: string): Promise<{ status: number; text: string }> => {
    const res = await fetch(`${node.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${secret}` },
      body: JSON.stringify(ASK),
    });
    return { status: res.status, text: await res.text() };
  };
  const toolCalls = (text: string): Array<Record<string, unknown>> =>
    (JSON.parse(text) as { choices: Array<{ message: { tool_calls: Array<Record<string, unknown>> } }> }).choices[0]!.message.tool_calls;

  await t.test('a made-up type holding an e-mail address is masked without brackets; a type the rules do not match, the type tags inside such a call, and function and custom calls go out as they came', async (t) => {
    upstream.answer = answerWith([{ id: 'call_0', type: 'to eve@example.org', lookup: { query: 'weather' } }]);
    const { status, text } = await rawAnswer(node.secret);
    t.equal(status, 200);
    t.notMatch(text, /eve@/);
    t.same(toolCalls(text)[0], { id: 'call_0', type: 'to EMAIL', lookup: { query: 'weather' } }, 'as a made-up tool name is masked');

    const calls = [
      { id: 'call_0', type: 'web_lookup', web_lookup: { type: 'query', query: 'weather' } },
      { id: 'call_1', type: 'function', function: { name: 'lookup', arguments: '{}' } },
      { id: 'call_2', type: 'custom', custom: { name: 'grep', input: 'x' } },
    ];
    upstream.answer = answerWith(calls);
    t.same(toolCalls((await rawAnswer(node.secret)).text), calls, 'nothing matched: unchanged');

    upstream.answer = answerWith([{ id: 'call_0', type: 'to eve@example.org', lookup: {} }]);
    t.equal(toolCalls((await rawAnswer(plainSecret)).text)[0]!.type, 'to eve@example.org', 'without output rules it passes as it came');
  });

  await t.test('a made-up type that is a blocked keyword blocks the answer, none of it sent', async (t) => {
    upstream.answer = answerWith([{ id: 'call_0', type: 'aurora', aurora: {} }]);
    const err = await sdkError(client.chat.completions.create(ASK));
    t.equal(err.code, 'ZN_ERR_GUARDRAIL_BLOCKED');
    t.notMatch(JSON.stringify(err.error), /aurora/);
  });

  await t.test('a type that is an object or an array has every string and number in it checked, type keys included', async (t) => {
    for (const type of [{ name: 'aurora' }, ['aurora'], { type: 'aurora' }]) {
      upstream.answer = answerWith([{ id: 'call_0', type, lookup: { query: 'weather' } }]);
      const err = await sdkError(client.chat.completions.create(ASK));
      t.equal(err.code, 'ZN_ERR_GUARDRAIL_BLOCKED', JSON.stringify(type));
    }
    upstream.answer = answerWith([{ id: 'call_0', type: { to: 'eve@example.org', phone: 13912345678 } }]);
    const { text } = await rawAnswer(node.secret);
    t.notMatch(text, /eve@|13912345678/);
    t.same(toolCalls(text)[0]!.type, { to: 'EMAIL', phone: 'PHONE' });
  });
});
