// The `type` of an OpenAI chat tool call that is neither `function` nor `custom`: such a call has
// a shape the node does not know, so every string in it is checked, its own `type` too (no tag the
// node knows: `"type": "to eve@example.org"` is text, and a `type` object or array has strings in
// it). In a JSON answer and in a request's message it is checked like a made-up tool name: a string
// masked without brackets, a non-string as an odd shape (every string and number in it). In a
// stream, where the other strings of such a call block the chunk under output rules, so does its
// `type`. `function` and `custom` calls and the type tags nested inside an unknown call are left
// as they were.
import t from 'tap';
import type { GuardrailRule } from '../../../proto/src/index.js';
import { sdkError } from '../pipeline/pipeline-harness.js';
import { rawChatStream, startGuardedNode } from './guarded-node.js';
import { sseData } from './scripted-upstream.js';
import { chatAnswerWith } from './odd-chat-shape-fixtures.js';

const RULES: GuardrailRule[] = [
  { detector: 'email', action: 'mask', on: 'output' },
  { detector: 'phone', action: 'mask', on: 'output' },
  { detector: 'keywords', keywords: ['aurora'], action: 'block', on: 'output' },
];
const USER = [{ role: 'user' as const, content: 'go' }];
const ASK = { model: 'echo', messages: USER };

function answerWith(toolCalls: unknown[]): { json: unknown } {
  return chatAnswerWith({ tool_calls: toolCalls }, 'tool_calls');
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

const DONE = 'data: [DONE]\n\n';
const chunk = (delta: Record<string, unknown>, finish: string | null = null): string =>
  `data: ${JSON.stringify({ id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model: 'echo', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;

t.test('a streamed tool call of an unknown type whose type carries text ends the stream under output rules, none of it sent; an empty type and function and custom type tags go on, and without output rules it passes byte for byte', async (t) => {
  const { upstream, node, plainSecret } = await startGuardedNode(t, RULES);
  for (const type of ['aurora', 'to eve@example.org', { name: 'aurora' }, ['aurora'], { type: 'aurora' }, 13912345678]) {
    const sse = [chunk({ role: 'assistant', content: 'Looking it up.' }), chunk({ tool_calls: [{ index: 0, id: 'call_0', type }] }), chunk({}, 'tool_calls'), DONE];
    upstream.answer = { sse };
    const { status, body } = await rawChatStream(node, node.secret, ASK);
    t.equal(status, 200, 'the stream had started');
    t.match(sseData(body).at(-1), /ZN_ERR_GUARDRAIL_BLOCKED/, `${JSON.stringify(type)}: ended with the guardrail error event`);
    t.notMatch(body, /aurora|eve@|13912345678|call_0/, 'nothing of the call was sent');
    t.notMatch(body, /\[DONE\]/);

    upstream.answer = { sse };
    const plain = await rawChatStream(node, plainSecret, ASK);
    t.same(sseData(plain.body), sse.map((event) => event.slice('data: '.length, -2)), 'without output rules: as it came');
  }

  upstream.answer = {
    sse: [
      chunk({ tool_calls: [{ index: 0, id: 'call_0', type: '' }] }),
      chunk({ tool_calls: [{ index: 1, id: 'call_1', type: 'function', function: { name: 'lookup', arguments: '{}' } }] }),
      chunk({ tool_calls: [{ index: 2, id: 'call_2', type: 'custom', custom: { name: 'grep', input: 'x' } }] }),
      chunk({}, 'tool_calls'),
      DONE,
    ],
  };
  const { body } = await rawChatStream(node, node.secret, { ...ASK, tools: [{ type: 'function', function: { name: 'lookup' } }, { type: 'custom', custom: { name: 'grep' } }] });
  t.notMatch(body, /ZN_ERR_GUARDRAIL/, 'an empty type carries no text');
  t.match(body, /"type":"function"/);
  t.match(body, /"type":"custom"/);
  t.match(body, /data: \[DONE\]\n\n$/);
});

t.test("the type of a request message's tool call of an unknown type is checked by input rules: a string masked without brackets, a blocked keyword (also inside an object or array) refusing the request before the upstream is called", async (t) => {
  const { upstream, node, plainSecret } = await startGuardedNode(t, [
    { detector: 'email', action: 'mask', on: 'input' },
    { detector: 'phone', action: 'mask', on: 'input' },
    { detector: 'keywords', keywords: ['aurora'], action: 'block', on: 'input' },
  ]);
  const client = node.client();
  upstream.answer = answerWith([]);
  const askWith = (call: Record<string, unknown>): never =>
    ({
      model: 'echo',
      messages: [...USER, { role: 'assistant', content: null, tool_calls: [{ id: 'call_0', ...call }] }, { role: 'tool', tool_call_id: 'call_0', content: 'done' }],
    }) as never;
  const forwardedCall = (): Record<string, unknown> => {
    const body = upstream.requests.at(-1)!.body as { messages: Array<{ tool_calls?: Array<Record<string, unknown>> }> };
    return body.messages[1]!.tool_calls![0]!;
  };

  await client.chat.completions.create(askWith({ type: 'to eve@example.org', lookup: { type: 'query', query: 'weather' } }));
  t.same(forwardedCall(), { id: 'call_0', type: 'to EMAIL', lookup: { type: 'query', query: 'weather' } }, 'masked without brackets, its nested type tag left alone');

  await client.chat.completions.create(askWith({ type: { to: 'eve@example.org', phone: 13912345678 } }));
  t.same(forwardedCall().type, { to: 'EMAIL', phone: 'PHONE' }, 'every string and number of a type object checked');

  for (const type of ['aurora', { name: 'aurora' }, ['aurora'], { type: 'aurora' }]) {
    const sent = upstream.requests.length;
    const err = await sdkError(client.chat.completions.create(askWith({ type, lookup: {} })));
    t.equal(err.code, 'ZN_ERR_GUARDRAIL_BLOCKED', JSON.stringify(type));
    t.equal(upstream.requests.length, sent, 'the upstream was never called');
  }

  const calls = [
    { id: 'call_0', type: 'web_lookup', web_lookup: { type: 'query', query: 'weather' } },
    { id: 'call_1', type: 'function', function: { name: 'lookup', arguments: '{}' } },
  ];
  await client.chat.completions.create({ model: 'echo', messages: [...USER, { role: 'assistant', content: null, tool_calls: calls }] as never });
  t.same((upstream.requests.at(-1)!.body as { messages: Array<{ tool_calls?: unknown }> }).messages[1]!.tool_calls, calls, 'nothing matched: forwarded as it came');

  await node.client({ apiKey: plainSecret }).chat.completions.create(askWith({ type: 'to eve@example.org' }));
  t.equal(forwardedCall().type, 'to eve@example.org', 'without input rules it is forwarded as it came');
});
