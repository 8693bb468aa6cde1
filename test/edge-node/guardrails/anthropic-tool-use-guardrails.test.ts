// Guardrails over Anthropic tool use and thinking, through a listening node with the official
// @anthropic-ai/sdk and a scripted upstream: tool_use input, tool_result content and thinking in
// requests, JSON answers and streams are checked like text; a tool_use block's streamed
// partial_json is held whole until the block ends, so a match split across fragments or written
// with JSON escapes is still found, and without output rules the fragments pass unchanged. What a
// content_block_start already carries (Anthropic's own are empty, compatible upstreams' may not
// be) is checked too: a tool block's input whole, a text or thinking block's opening text as the
// start of its text.
import Anthropic from '@anthropic-ai/sdk';
import t from 'tap';
import type { GuardrailRule } from '../../../proto/src/index.js';
import { anthropicSdkError } from '../anthropic-fixtures.js';
import { startGuardedNode } from './guarded-node.js';
import { sseData } from './scripted-upstream.js';

const SECRET = 'sk-proj-Abc123Def456Ghi789Jkl0';
const RULES: GuardrailRule[] = [
  { detector: 'email', action: 'mask', on: 'both' },
  { detector: 'secret', action: 'block', on: 'both' },
];
const TOOLS = [{ name: 'send_mail', input_schema: { type: 'object' as const, properties: { to: { type: 'string' } } } }];
const USER = [{ role: 'user' as const, content: 'mail the report' }];

const event = (type: string, body: Record<string, unknown>): string => `event: ${type}\ndata: ${JSON.stringify({ type, ...body })}\n\n`;
const delta = (index: number, d: Record<string, unknown>): string => event('content_block_delta', { index, delta: d });
const MESSAGE_START = event('message_start', {
  message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 5, output_tokens: 1 } },
});
const MESSAGE_END = [event('message_delta', { delta: { stop_reason: 'tool_use', stop_sequence: null }, usage: { output_tokens: 20 } }), event('message_stop', {})];
const toolUseBlock = (index: number, fragments: string[]): string[] => [
  event('content_block_start', { index, content_block: { type: 'tool_use', id: `toolu_${index}`, name: 'send_mail', input: {} } }),
  ...fragments.map((partial_json) => delta(index, { type: 'input_json_delta', partial_json })),
  event('content_block_stop', { index }),
];

const SPLIT_STREAM = [
  MESSAGE_START,
  event('content_block_start', { index: 0, content_block: { type: 'thinking', thinking: '', signature: '' } }),
  delta(0, { type: 'thinking_delta', thinking: 'the user is dave@exa' }),
  delta(0, { type: 'thinking_delta', thinking: 'mple.com indeed' }),
  delta(0, { type: 'signature_delta', signature: 'c2lnbmF0dXJl' }),
  event('content_block_stop', { index: 0 }),
  ...toolUseBlock(1, ['', '{"to":"bob@exa', 'mple.com","body":"hi"}']),
  ...toolUseBlock(2, ['{"to":"car', 'ol\\u00', '40example.com"}']),
  ...MESSAGE_END,
];

function answerWith(content: unknown[]): { json: unknown } {
  return {
    json: { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-real', content, stop_reason: 'tool_use', stop_sequence: null, usage: { input_tokens: 5, output_tokens: 7 } },
  };
}

t.test('guardrails over Anthropic tool use and thinking', async (t) => {
  const { upstream, node, plainSecret } = await startGuardedNode(t, RULES);
  const client = new Anthropic({ baseURL: node.origin, apiKey: node.secret, maxRetries: 0, timeout: 20_000 });
  const streamBody = async (apiKey: string): Promise<{ status: number; body: string }> => {
    const res = await fetch(`${node.origin}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': apiKey },
      body: JSON.stringify({ model: 'claude', max_tokens: 100, stream: true, messages: USER, tools: TOOLS }),
    });
    return { status: res.status, body: await res.text() };
  };

  await t.test("an e-mail in a JSON answer's tool_use input and thinking is masked, and the input is still an object", async (t) => {
    upstream.answer = answerWith([
      { type: 'thinking', thinking: 'the user is bob@example.com', signature: 'c2ln' },
      { type: 'text', text: 'sending' },
      { type: 'tool_use', id: 'toolu_1', name: 'send_mail', input: { to: 'bob@example.com', cc: ['x', { who: 'eve@example.org' }], n: 3 } },
    ]);
    const message = await client.messages.create({ model: 'claude', max_tokens: 100, messages: USER, tools: TOOLS });
    t.match(message.content[0], { type: 'thinking', thinking: 'the user is [EMAIL]' });
    t.same(message.content[2], { type: 'tool_use', id: 'toolu_1', name: 'send_mail', input: { to: '[EMAIL]', cc: ['x', { who: '[EMAIL]' }], n: 3 } });
  });

  await t.test("a secret in a JSON answer's tool_use input blocks the answer", async (t) => {
    upstream.answer = answerWith([{ type: 'tool_use', id: 'toolu_1', name: 'send_mail', input: { body: { deep: [`key ${SECRET}`] } } }]);
    const err = await anthropicSdkError(client.messages.create({ model: 'claude', max_tokens: 100, messages: USER, tools: TOOLS }));
    t.equal(err.status, 400);
    t.equal(err.errorCode, 'ZN_ERR_GUARDRAIL_BLOCKED');
    t.notMatch(JSON.stringify(err.error), /sk-proj/);
  });

  await t.test('a secret in a request\'s tool_use input, tool_result content or thinking is refused before anything reaches the upstream', async (t) => {
    upstream.answer = answerWith([{ type: 'text', text: 'ok' }]);
    const cases: Record<string, Anthropic.MessageParam[]> = {
      'tool_use input': [
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'send_mail', input: { body: SECRET } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'sent' }] },
      ],
      'tool_result string': [
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'send_mail', input: {} }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: `the key is ${SECRET}` }] },
      ],
      'tool_result text blocks': [
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'send_mail', input: {} }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'text', text: `the key is ${SECRET}` }] }] },
      ],
      thinking: [
        { role: 'assistant', content: [{ type: 'thinking', thinking: `I will use ${SECRET}`, signature: 'c2ln' }, { type: 'text', text: 'done' }] },
        { role: 'user', content: 'thanks' },
      ],
    };
    for (const [what, history] of Object.entries(cases)) {
      const before = upstream.requests.length;
      const err = await anthropicSdkError(client.messages.create({ model: 'claude', max_tokens: 100, tools: TOOLS, messages: [...USER, ...history] }));
      t.equal(err.errorCode, 'ZN_ERR_GUARDRAIL_BLOCKED', what);
      t.equal(upstream.requests.length, before, `${what}: the upstream was never called`);
    }
  });

  await t.test("an e-mail in a request's tool_use input is masked in what the upstream receives", async (t) => {
    upstream.answer = answerWith([{ type: 'text', text: 'ok' }]);
    const before = upstream.requests.length;
    await client.messages.create({
      model: 'claude',
      max_tokens: 100,
      tools: TOOLS,
      messages: [
        ...USER,
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'send_mail', input: { to: 'bob@example.com', n: 1 } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'ok' }] },
      ],
    });
    const sent = upstream.requests.slice(before);
    t.equal(sent.length, 1);
    t.same((sent[0]!.body as { messages: Array<{ content: unknown }> }).messages[1]!.content, [{ type: 'tool_use', id: 'toolu_1', name: 'send_mail', input: { to: '[EMAIL]', n: 1 } }]);
  });

  await t.test('streamed tool input is masked across fragment boundaries and JSON escapes, thinking too, and the SDK assembles the input objects', async (t) => {
    upstream.answer = { sse: SPLIT_STREAM };
    const message = await client.messages.stream({ model: 'claude', max_tokens: 100, messages: USER, tools: TOOLS }).finalMessage();
    t.match(message.content[0], { type: 'thinking', thinking: 'the user is [EMAIL] indeed', signature: 'c2lnbmF0dXJl' });
    t.same(message.content.slice(1), [
      { type: 'tool_use', id: 'toolu_1', name: 'send_mail', input: { to: '[EMAIL]', body: 'hi' } },
      { type: 'tool_use', id: 'toolu_2', name: 'send_mail', input: { to: '[EMAIL]' } },
    ]);
  });

  await t.test('each tool input goes out as one fragment just before its block ends, and no part of a match goes out', async (t) => {
    upstream.answer = { sse: SPLIT_STREAM };
    const { body } = await streamBody(node.secret);
    t.notMatch(body, /example|\\u0040/);
    const events = sseData(body).map((data) => JSON.parse(data) as { type: string; index?: number; delta?: { type: string; partial_json?: string } });
    for (const index of [1, 2]) {
      const own = events.filter((e) => e.index === index);
      const fragments = own.filter((e) => e.delta?.type === 'input_json_delta').map((e) => e.delta!.partial_json);
      t.equal(fragments.filter((f) => f !== '').length, 1, `block ${index}: one non-empty fragment`);
      t.equal(own.at(-1)?.type, 'content_block_stop', `block ${index}: the stop comes after it`);
    }
  });

  await t.test('a secret in streamed tool input ends the stream with the guardrail code, none of it sent', async (t) => {
    upstream.answer = { sse: [MESSAGE_START, ...toolUseBlock(0, ['{"body":"key sk-pr', 'oj-Abc123Def456Ghi789Jkl0"}']), ...MESSAGE_END] };
    const { status, body } = await streamBody(node.secret);
    t.equal(status, 200, 'the stream had started');
    t.match(body, /event: error/);
    t.match(body, /ZN_ERR_GUARDRAIL_BLOCKED/);
    t.notMatch(body, /sk-pr|Abc123/);
    t.notMatch(body, /message_stop/);
    const err = await anthropicSdkError(client.messages.stream({ model: 'claude', max_tokens: 100, messages: USER, tools: TOOLS }).finalMessage());
    t.equal(err.errorCode, 'ZN_ERR_GUARDRAIL_BLOCKED', 'the SDK raises the stream error with our code');
  });

  // Blocks whose content_block_start already carries their content, as compatible upstreams may send.
  const FILLED_STARTS = [
    MESSAGE_START,
    event('content_block_start', { index: 0, content_block: { type: 'thinking', thinking: 'the user is dave@exa', signature: '' } }),
    delta(0, { type: 'thinking_delta', thinking: 'mple.com indeed' }),
    delta(0, { type: 'signature_delta', signature: 'c2lnbmF0dXJl' }),
    event('content_block_stop', { index: 0 }),
    event('content_block_start', { index: 1, content_block: { type: 'text', text: 'writing to eve@example.org' } }),
    event('content_block_stop', { index: 1 }),
    event('content_block_start', { index: 2, content_block: { type: 'tool_use', id: 'toolu_2', name: 'send_mail', input: { to: 'bob@example.com', n: 1 } } }),
    event('content_block_stop', { index: 2 }),
    event('content_block_start', { index: 3, content_block: { type: 'tool_use', id: 'toolu_3', name: 'send_mail', input: { to: 'nobody' } } }),
    event('content_block_stop', { index: 3 }),
    ...MESSAGE_END,
  ];

  await t.test("a content_block_start's opening text, thinking and tool input are masked (a match split between the opening text and the first delta too), and the SDK assembles them", async (t) => {
    upstream.answer = { sse: FILLED_STARTS };
    const message = await client.messages.stream({ model: 'claude', max_tokens: 100, messages: USER, tools: TOOLS }).finalMessage();
    t.match(message.content[0], { type: 'thinking', thinking: 'the user is [EMAIL] indeed', signature: 'c2lnbmF0dXJl' });
    t.match(message.content[1], { type: 'text', text: 'writing to [EMAIL]' });
    t.same(message.content.slice(2), [
      { type: 'tool_use', id: 'toolu_2', name: 'send_mail', input: { to: '[EMAIL]', n: 1 } },
      { type: 'tool_use', id: 'toolu_3', name: 'send_mail', input: { to: 'nobody' } },
    ]);
    const { body } = await streamBody(node.secret);
    t.notMatch(body, /example/, 'no part of an address goes out');
    const starts = sseData(body).map((data) => JSON.parse(data) as { type: string; index?: number; content_block?: Record<string, unknown> }).filter((e) => e.type === 'content_block_start');
    t.same(starts.map((e) => e.content_block?.input), [undefined, undefined, { to: '[EMAIL]', n: 1 }, { to: 'nobody' }], 'the masked input stays in its start event');
  });

  for (const type of ['tool_use', 'server_tool_use', 'mcp_tool_use']) {
    await t.test(`a secret in a content_block_start's ${type} input ends the stream with the guardrail code, none of it sent`, async (t) => {
      upstream.answer = {
        sse: [MESSAGE_START, event('content_block_start', { index: 0, content_block: { type, id: 'toolu_0', name: 'send_mail', input: { q: [`key ${SECRET}`] } } }), event('content_block_stop', { index: 0 }), ...MESSAGE_END],
      };
      const { status, body } = await streamBody(node.secret);
      t.equal(status, 200, 'the stream had started');
      t.match(body, /ZN_ERR_GUARDRAIL_BLOCKED/);
      t.notMatch(body, /sk-proj|Abc123/);
      t.notMatch(body, /message_stop/);
    });
  }

  await t.test('without output rules, filled content_block_start events pass byte for byte', async (t) => {
    upstream.answer = { sse: FILLED_STARTS };
    const { body } = await streamBody(plainSecret);
    t.equal(body, FILLED_STARTS.join(''));
  });

  await t.test('without output rules, streamed tool input fragments pass byte for byte', async (t) => {
    upstream.answer = { sse: SPLIT_STREAM };
    const { body } = await streamBody(plainSecret);
    t.equal(body, SPLIT_STREAM.join(''));
  });
});
