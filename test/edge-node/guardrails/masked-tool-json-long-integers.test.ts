// Tool-call input held as a JSON text (Anthropic's streamed `partial_json`, a tool block's opening
// `input` in its content_block_start, OpenAI's `arguments` streamed or in a JSON answer) and
// re-serialised because a mask rewrote one of its strings keeps its other numbers as numbers: a
// 16-digit microsecond timestamp as the number it was, an integer past 2^53 digit for digit, as a
// JSON answer's tool input does (stringifyAsWritten). Before, every integer of 16 digits or more in
// such a text went on as a string of its digits once anything in it was masked.
import t from 'tap';
import type { Test } from 'tap';
import type { GuardrailRule } from '../../../proto/src/index.js';
import { JsonStringWalk, jsonTextOf } from '../../../edge-node/src/providers/json-string-slots.js';
import { applyPolicy, requestPolicy } from '../../../edge-node/src/guardrails/policy-engine.js';
import { startGuardedNode } from './guarded-node.js';
import type { GuardedNode } from './guarded-node.js';
import { guardContext, policy } from './guardrail-fixtures.js';
import { sseData } from './scripted-upstream.js';

const RULES: GuardrailRule[] = [{ detector: 'keywords', keywords: ['banana'], action: 'mask', on: 'output' }];
/** A 16-digit integer below 2^53 (exact as a double) and one past it, beside a string a mask rewrites. */
const INPUT = '{"ts_us": 1733000000000000, "id": 9007199254740993, "s": "banana"}';
const MASKED = '{"ts_us":1733000000000000,"id":9007199254740993,"s":"[REDACTED]"}';

const ev = (type: string, data: unknown): string => `event: ${type}\ndata: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`;
const messageStart = ev('message_start', { type: 'message_start', message: { id: 'm', type: 'message', role: 'assistant', model: 'claude-real', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 5, output_tokens: 1 } } });
const messageEnd = [
  ev('content_block_stop', { type: 'content_block_stop', index: 0 }),
  ev('message_delta', { type: 'message_delta', delta: { stop_reason: 'tool_use', stop_sequence: null }, usage: { output_tokens: 9 } }),
  ev('message_stop', { type: 'message_stop' }),
];

async function messages(t: Test, node: GuardedNode['node'], stream: boolean): Promise<string> {
  const res = await fetch(`${node.baseURL}/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': node.secret, 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model: 'claude', max_tokens: 10, stream, messages: [{ role: 'user', content: 'hi' }] }),
  });
  t.equal(res.status, 200);
  return res.text();
}

async function chat(t: Test, node: GuardedNode['node'], stream: boolean): Promise<string> {
  const res = await fetch(`${node.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
    body: JSON.stringify({ model: 'echo', stream, messages: [{ role: 'user', content: 'hi' }] }),
  });
  t.equal(res.status, 200);
  return res.text();
}

t.test('a masked Anthropic tool_use input streamed as partial_json keeps its long integers as numbers, as the JSON answer does', async (t) => {
  const { upstream, node } = await startGuardedNode(t, RULES);
  upstream.answer = {
    jsonText: `{"id":"m","type":"message","role":"assistant","model":"claude-real","content":[{"type":"tool_use","id":"t1","name":"f","input":${INPUT}}],"stop_reason":"tool_use","usage":{"input_tokens":3,"output_tokens":4}}`,
  };
  const json = await messages(t, node, false);
  t.match(json, `"input":${MASKED}`, 'the JSON answer: numbers stay numbers');

  // Fragments cut inside both numbers, as a model's deltas may cut them.
  const cuts = [0, 20, 45, INPUT.length];
  const deltas = cuts.slice(1).map((end, i) => ev('content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: INPUT.slice(cuts[i], end) } }));
  upstream.answer = { sse: [messageStart, ev('content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'tool_use', id: 't1', name: 'f', input: {} } }), ...deltas, ...messageEnd] };
  const streamed = sseData(await messages(t, node, true))
    .map((data) => JSON.parse(data) as { delta?: { type?: string; partial_json?: string } })
    .filter((event) => event.delta?.type === 'input_json_delta')
    .map((event) => event.delta!.partial_json)
    .join('');
  t.equal(streamed, MASKED, 'the stream: the same input, numbers as numbers');
});

t.test('a masked tool_use input a content_block_start carries whole keeps its long integers as numbers', async (t) => {
  const { upstream, node } = await startGuardedNode(t, RULES);
  upstream.answer = {
    sse: [messageStart, ev('content_block_start', `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t1","name":"f","input":${INPUT}}}`), ...messageEnd],
  };
  const body = await messages(t, node, true);
  t.match(body, `"input":${MASKED}`, 'the event re-serialised with the numbers as numbers');
  t.notMatch(body, 'banana');
});

t.test('masked OpenAI tool-call arguments keep their long integers as numbers, streamed and in a JSON answer', async (t) => {
  const { upstream, node } = await startGuardedNode(t, RULES);
  const chunk = (delta: Record<string, unknown>, finish: string | null = null): string =>
    `data: ${JSON.stringify({ id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model: 'echo', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
  upstream.answer = {
    sse: [
      chunk({ role: 'assistant', tool_calls: [{ index: 0, id: 'call_0', type: 'function', function: { name: 'f', arguments: INPUT.slice(0, 20) } }] }),
      chunk({ tool_calls: [{ index: 0, function: { arguments: INPUT.slice(20, 45) } }] }),
      chunk({ tool_calls: [{ index: 0, function: { arguments: INPUT.slice(45) } }] }),
      chunk({}, 'tool_calls'),
      'data: [DONE]\n\n',
    ],
  };
  const streamed = sseData(await chat(t, node, true))
    .filter((data) => data !== '[DONE]')
    .flatMap((data) => (JSON.parse(data) as { choices: Array<{ delta: { tool_calls?: Array<{ function?: { arguments?: string } }> } }> }).choices)
    .flatMap((choice) => choice.delta.tool_calls ?? [])
    .map((call) => call.function?.arguments ?? '')
    .join('');
  t.equal(streamed, MASKED, 'streamed arguments');

  upstream.answer = {
    json: {
      id: 'chatcmpl-1',
      object: 'chat.completion',
      created: 1,
      model: 'echo',
      choices: [{ index: 0, message: { role: 'assistant', content: null, tool_calls: [{ id: 'call_0', type: 'function', function: { name: 'f', arguments: INPUT } }] }, finish_reason: 'tool_calls' }],
      usage: { prompt_tokens: 5, completion_tokens: 7, total_tokens: 12 },
    },
  };
  const answer = JSON.parse(await chat(t, node, false)) as { choices: Array<{ message: { tool_calls: Array<{ function: { arguments: string } }> } }> };
  t.equal(answer.choices[0]!.message.tool_calls[0]!.function.arguments, MASKED, 'arguments in a JSON answer');
});

t.test('in one masked arguments text, a card past 2^53 becomes the placeholder while the integers no rule matched stay the numbers they were', (t) => {
  const holder: Record<string, unknown> = { arguments: '{"card":6212345678901234569,"id":9007199254740993,"ts":[1733000000000000,-12345678901234567890],"s":"banana"}' };
  const walk = new JsonStringWalk();
  walk.addJsonText(holder, 'arguments');
  const rules: GuardrailRule[] = [...RULES, { detector: 'bank-card', action: 'mask', on: 'output' }];
  const { ctx } = guardContext({ policies: [policy('p', rules)], policyId: 'p' });
  t.equal(applyPolicy(ctx, requestPolicy(ctx)!, 'output', walk.finish()), undefined);
  t.equal(jsonTextOf(holder, 'arguments'), '{"card":"[BANK_CARD]","id":9007199254740993,"ts":[1733000000000000,-12345678901234567890],"s":"[REDACTED]"}');
  t.end();
});
