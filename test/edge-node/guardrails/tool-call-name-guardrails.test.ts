// Output guardrails over the names of the tool calls an answer makes (OpenAI
// `tool_calls[].function.name` and the legacy `function_call.name`, in JSON and in a stream's
// `delta`; Anthropic `tool_use.name`, in JSON and in a stream's `content_block_start`): a block
// rule's match blocks, and so does a mask rule's, since a masked name is one the client cannot
// dispatch (fail closed); a flag rule only records; names without a match pass as they came.
import t from 'tap';
import type { GuardrailRule } from '../../../proto/src/index.js';
import { rawChatStream, startGuardedNode } from './guarded-node.js';

const CARD = '4111111111111111';
const NAME = `pay_${CARD}`;
const chunk = (delta: Record<string, unknown>, finish: string | null = null): string =>
  `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'demo-echo', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
const chatAnswer = (message: Record<string, unknown>): { json: unknown } => ({
  json: {
    id: 'c', object: 'chat.completion', created: 1, model: 'demo-echo',
    choices: [{ index: 0, message: { role: 'assistant', content: null, ...message }, finish_reason: 'tool_calls' }],
    usage: { prompt_tokens: 5, completion_tokens: 7, total_tokens: 12 },
  },
});
const toolCall = (name: string): Record<string, unknown> => ({ id: 'call_0', type: 'function', function: { name, arguments: '{"to":"bob"}' } });
const chatStream = (name: string): string[] => [
  chunk({ role: 'assistant', content: null, tool_calls: [{ index: 0, ...toolCall(name), function: { name, arguments: '' } }] }),
  chunk({ tool_calls: [{ index: 0, function: { arguments: '{"to":"bob"}' } }] }),
  chunk({}, 'tool_calls'),
  'data: [DONE]\n\n',
];
const ev = (type: string, data: Record<string, unknown>): string => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
const anthropicMessage = (content: unknown[]): Record<string, unknown> => ({
  id: 'm', type: 'message', role: 'assistant', model: 'claude-real', content, stop_reason: 'tool_use', stop_sequence: null, usage: { input_tokens: 3, output_tokens: 5 },
});
const toolUse = (name: string): Record<string, unknown> => ({ type: 'tool_use', id: 'toolu_1', name, input: {} });
const anthropicStream = (name: string): string[] => [
  ev('message_start', { message: { ...anthropicMessage([]), stop_reason: null, usage: { input_tokens: 3, output_tokens: 1 } } }),
  ev('content_block_start', { index: 0, content_block: toolUse(name) }),
  ev('content_block_delta', { index: 0, delta: { type: 'input_json_delta', partial_json: '{"to":"bob"}' } }),
  ev('content_block_stop', { index: 0 }),
  ev('message_delta', { delta: { stop_reason: 'tool_use', stop_sequence: null }, usage: { output_tokens: 20 } }),
  ev('message_stop', {}),
];

async function chat(node: { baseURL: string }, secret: string): Promise<{ status: number; text: string }> {
  const res = await fetch(`${node.baseURL}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${secret}` }, body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'pay' }] }) });
  return { status: res.status, text: await res.text() };
}

async function messages(node: { origin: string }, secret: string, stream: boolean): Promise<{ status: number; text: string }> {
  const res = await fetch(`${node.origin}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': secret, 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model: 'claude', max_tokens: 100, stream, messages: [{ role: 'user', content: 'pay' }] }),
  });
  return { status: res.status, text: await res.text() };
}

const BLOCKING: Array<[string, GuardrailRule]> = [
  ['a block rule', { detector: 'bank-card', action: 'block', on: 'output' }],
  ['a mask rule (a masked name could not be dispatched)', { detector: 'bank-card', action: 'mask', on: 'output' }],
];

for (const [what, rule] of BLOCKING) {
  t.test(`${what} matching a tool call's name blocks an OpenAI JSON answer, also a legacy function_call's`, async (t) => {
    const { upstream, node } = await startGuardedNode(t, [rule]);
    for (const [field, message] of [['tool_calls', { tool_calls: [toolCall(NAME)] }], ['function_call', { function_call: { name: NAME, arguments: '{}' } }]] as const) {
      upstream.answer = chatAnswer(message);
      const res = await chat(node, node.secret);
      t.equal(res.status, 400, field);
      t.match(res.text, /ZN_ERR_GUARDRAIL_BLOCKED/);
      t.match(res.text, /rule 0 \(bank-card\) on the output/);
      t.notOk(res.text.includes(CARD), 'the name is not sent');
    }
  });

  t.test(`${what} matching a tool call's name ends an OpenAI stream before the name is sent`, async (t) => {
    const { upstream, node } = await startGuardedNode(t, [rule]);
    upstream.answer = { sse: chatStream(NAME) };
    const res = await rawChatStream(node, node.secret, { model: 'echo', messages: [{ role: 'user', content: 'pay' }] });
    t.equal(res.status, 200);
    t.notOk(res.body.includes(CARD), 'the name is not sent');
    t.match(res.body, /ZN_ERR_GUARDRAIL_BLOCKED/);
  });

  t.test(`${what} matching a tool_use block's name blocks an Anthropic JSON answer and stream`, async (t) => {
    const { upstream, node } = await startGuardedNode(t, [rule]);
    upstream.answer = { json: anthropicMessage([toolUse(NAME)]) };
    const json = await messages(node, node.secret, false);
    t.equal(json.status, 400);
    t.match(json.text, /ZN_ERR_GUARDRAIL_BLOCKED/);
    t.notOk(json.text.includes(CARD));
    upstream.answer = { sse: anthropicStream(NAME) };
    const stream = await messages(node, node.secret, true);
    t.equal(stream.status, 200);
    t.notOk(stream.text.includes(CARD), 'the name is not sent');
    t.match(stream.text, /event: error\ndata: .*ZN_ERR_GUARDRAIL_BLOCKED/);
  });
}

t.test('a flag rule matching a tool call name lets the answer through unchanged', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'bank-card', action: 'flag', on: 'output' }]);
  upstream.answer = chatAnswer({ tool_calls: [toolCall(NAME)] });
  const res = await chat(node, node.secret);
  t.equal(res.status, 200);
  t.equal((JSON.parse(res.text) as { choices: Array<{ message: { tool_calls: Array<{ function: { name: string } }> } }> }).choices[0]!.message.tool_calls[0]!.function.name, NAME);
});

t.test('under output rules tool call names without a match pass as they came, in JSON and in streams', async (t) => {
  const { upstream, node } = await startGuardedNode(t, BLOCKING.map(([, rule]) => rule));
  upstream.answer = chatAnswer({ tool_calls: [toolCall('send_mail')] });
  const json = await chat(node, node.secret);
  t.equal(json.status, 200);
  t.same((JSON.parse(json.text) as { choices: Array<{ message: { tool_calls: unknown[] } }> }).choices[0]!.message.tool_calls, [toolCall('send_mail')]);
  upstream.answer = { sse: chatStream('send_mail') };
  const stream = await rawChatStream(node, node.secret, { model: 'echo', messages: [{ role: 'user', content: 'pay' }] });
  t.match(stream.body, /"name":"send_mail"/);
  t.match(stream.body, /data: \[DONE\]/);
  upstream.answer = { sse: anthropicStream('send_mail') };
  const anthropic = await messages(node, node.secret, true);
  t.match(anthropic.text, /"name":"send_mail"/);
  t.match(anthropic.text, /event: message_stop/);
});
