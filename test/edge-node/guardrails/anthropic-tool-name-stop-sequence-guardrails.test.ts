// Output rules over the two fields of an Anthropic answer that repeat what the caller chose: a
// tool_use block's `name` and the answer's `stop_sequence`. A name of one of the caller's tools and
// the caller's own stop sequence are left alone (a mask would rename the tool the client dispatches
// on, and hide nothing the caller did not send). Any other value is text the model (or a compatible
// upstream) wrote — a model can be told to "call" a tool named after what it should not say — and is
// checked like the rest, in JSON answers and streams; before, both fields went out unchecked.
import Anthropic from '@anthropic-ai/sdk';
import t from 'tap';
import type { GuardrailRule } from '../../../proto/src/index.js';
import { anthropicSdkError } from '../anthropic-fixtures.js';
import { startGuardedNode } from './guarded-node.js';
import { sseData } from './scripted-upstream.js';

const SECRET = 'sk-proj-Abc123Def456Ghi789Jkl0';
const RULES: GuardrailRule[] = [
  { detector: 'email', action: 'mask', on: 'output' },
  { detector: 'secret', action: 'block', on: 'output' },
];
/** A caller whose own tool name and stop sequence hold an e-mail address (the rules never check what the caller chose). */
const OWN_TOOL = 'mail_bob@example.com';
const OWN_STOP = 'cc: bob@example.com';
const TOOLS = [{ name: OWN_TOOL, input_schema: { type: 'object' as const, properties: {} } }];
const USER = [{ role: 'user' as const, content: 'go' }];

const event = (type: string, body: Record<string, unknown>): string => `event: ${type}\ndata: ${JSON.stringify({ type, ...body })}\n\n`;
const MESSAGE_START = event('message_start', {
  message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 5, output_tokens: 1 } },
});
const toolStart = (index: number, name: string): string[] => [
  event('content_block_start', { index, content_block: { type: 'tool_use', id: `toolu_${index}`, name, input: {} } }),
  event('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: '{}' } }),
  event('content_block_stop', { index }),
];
const end = (stopReason: string, stopSequence: string | null): string[] => [
  event('message_delta', { delta: { stop_reason: stopReason, stop_sequence: stopSequence }, usage: { output_tokens: 9 } }),
  event('message_stop', {}),
];

function answerWith(content: unknown[], stopReason: string, stopSequence: string | null): { json: unknown } {
  return { json: { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-real', content, stop_reason: stopReason, stop_sequence: stopSequence, usage: { input_tokens: 5, output_tokens: 7 } } };
}

t.test('output rules over an Anthropic tool_use name and stop_sequence', async (t) => {
  const { upstream, node } = await startGuardedNode(t, RULES);
  const client = new Anthropic({ baseURL: node.origin, apiKey: node.secret, maxRetries: 0, timeout: 20_000 });
  const ask = { model: 'claude', max_tokens: 100, messages: USER, tools: TOOLS, stop_sequences: [OWN_STOP] };
  const rawStream = async (): Promise<string> => {
    const res = await fetch(`${node.origin}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': node.secret },
      body: JSON.stringify({ ...ask, stream: true }),
    });
    return res.text();
  };

  await t.test('in a JSON answer, a tool name none of the caller’s tools has is masked, the caller’s own is left as it is', async (t) => {
    upstream.answer = answerWith(
      [
        { type: 'tool_use', id: 'toolu_1', name: 'to eve@example.org', input: {} },
        { type: 'tool_use', id: 'toolu_2', name: OWN_TOOL, input: {} },
      ],
      'tool_use',
      null,
    );
    const message = await client.messages.create(ask);
    t.match(message.content, [{ type: 'tool_use', name: 'to [EMAIL]' }, { type: 'tool_use', name: OWN_TOOL }]);
  });

  await t.test('in a JSON answer, a secret as an invented tool name blocks the answer', async (t) => {
    upstream.answer = answerWith([{ type: 'tool_use', id: 'toolu_1', name: SECRET, input: {} }], 'tool_use', null);
    const err = await anthropicSdkError(client.messages.create(ask));
    t.equal(err.errorCode, 'ZN_ERR_GUARDRAIL_BLOCKED');
    t.notMatch(JSON.stringify(err.error), /sk-proj/);
  });

  await t.test('in a JSON answer, a stop_sequence the caller did not send is masked, the caller’s own is left as it is', async (t) => {
    upstream.answer = answerWith([{ type: 'text', text: 'done' }], 'stop_sequence', 'to eve@example.org');
    const foreign = await client.messages.create(ask);
    t.equal(foreign.stop_sequence, 'to [EMAIL]');
    upstream.answer = answerWith([{ type: 'text', text: 'done' }], 'stop_sequence', OWN_STOP);
    const own = await client.messages.create(ask);
    t.equal(own.stop_sequence, OWN_STOP, 'the caller compares it with what it sent');
  });

  await t.test('in a stream, a tool name none of the caller’s tools has is masked in its content_block_start, the caller’s own is left as it is', async (t) => {
    upstream.answer = { sse: [MESSAGE_START, ...toolStart(0, 'to eve@example.org'), ...toolStart(1, OWN_TOOL), ...end('tool_use', null)] };
    const message = await client.messages.stream(ask).finalMessage();
    t.match(message.content, [{ type: 'tool_use', name: 'to [EMAIL]', input: {} }, { type: 'tool_use', name: OWN_TOOL, input: {} }]);
    const body = await rawStream();
    t.notMatch(body, /eve@/, 'no part of the address goes out');
    const starts = sseData(body).map((data) => JSON.parse(data) as { type: string; content_block?: { name?: string } }).filter((e) => e.type === 'content_block_start');
    t.same(starts.map((e) => e.content_block?.name), ['to [EMAIL]', OWN_TOOL]);
  });

  await t.test('in a stream, an invented tool name is checked beside the input its content_block_start carries, both masked in that event', async (t) => {
    upstream.answer = {
      sse: [
        MESSAGE_START,
        event('content_block_start', { index: 0, content_block: { type: 'tool_use', id: 'toolu_0', name: 'to eve@example.org', input: { cc: 'dan@example.net', n: 1 } } }),
        event('content_block_stop', { index: 0 }),
        ...end('tool_use', null),
      ],
    };
    const message = await client.messages.stream(ask).finalMessage();
    t.same(message.content, [{ type: 'tool_use', id: 'toolu_0', name: 'to [EMAIL]', input: { cc: '[EMAIL]', n: 1 } }]);
    t.notMatch(await rawStream(), /eve@|dan@/);
  });

  await t.test('in a stream, a secret as an invented tool name ends the stream with the guardrail code, none of it sent', async (t) => {
    upstream.answer = { sse: [MESSAGE_START, ...toolStart(0, SECRET), ...end('tool_use', null)] };
    const body = await rawStream();
    t.match(body, /event: error/);
    t.match(body, /ZN_ERR_GUARDRAIL_BLOCKED/);
    t.notMatch(body, /sk-proj|Abc123/);
  });

  await t.test('in a stream, a stop_sequence the caller did not send is masked in the message_delta, the caller’s own is left as it is', async (t) => {
    const text = [event('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }), event('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'done' } }), event('content_block_stop', { index: 0 })];
    upstream.answer = { sse: [MESSAGE_START, ...text, ...end('stop_sequence', 'to eve@example.org')] };
    const foreign = await client.messages.stream(ask).finalMessage();
    t.equal(foreign.stop_sequence, 'to [EMAIL]');
    t.notMatch(await rawStream(), /eve@/);
    upstream.answer = { sse: [MESSAGE_START, ...text, ...end('stop_sequence', OWN_STOP)] };
    const own = await client.messages.stream(ask).finalMessage();
    t.equal(own.stop_sequence, OWN_STOP);
  });
});
