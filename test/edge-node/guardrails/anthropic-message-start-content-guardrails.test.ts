// Output rules over the content an Anthropic stream's `message_start` already carries (Anthropic's
// own is empty; a compatible upstream may fill it, and the SDK builds its final message from it):
// checked like a JSON answer's blocks, whole in that event, masked in place or ending the stream.
import t from 'tap';
import Anthropic from '@anthropic-ai/sdk';
import { startGuardedNode } from './guarded-node.js';

const EMAIL = 'alice.secret@example.com';
const ev = (type: string, data: Record<string, unknown>): string => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
const stream = (content: unknown[]): string[] => [
  ev('message_start', { message: { id: 'm', type: 'message', role: 'assistant', model: 'claude-real', content, stop_reason: null, stop_sequence: null, usage: { input_tokens: 3, output_tokens: 1 } } }),
  ev('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 5 } }),
  ev('message_stop', {}),
];

t.test('an output mask rule masks the text and tool input a message_start carries', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'email', action: 'mask', on: 'output' }]);
  upstream.answer = { sse: stream([{ type: 'text', text: `mail ${EMAIL}` }, { type: 'tool_use', id: 'tu_1', name: 'send', input: { to: EMAIL } }]) };
  const anthropic = new Anthropic({ baseURL: node.origin, apiKey: node.secret, maxRetries: 0 });
  const final = await anthropic.messages.stream({ model: 'claude', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] }).finalMessage();
  t.same(final.content, [{ type: 'text', text: 'mail [EMAIL]' }, { type: 'tool_use', id: 'tu_1', name: 'send', input: { to: '[EMAIL]' } }]);
  t.equal(final.model, 'claude', 'the alias is still shown');
});

t.test('an output block rule ends a stream whose message_start content holds a match, before any of it goes out', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'email', action: 'block', on: 'output' }]);
  upstream.answer = { sse: stream([{ type: 'text', text: `mail ${EMAIL}` }]) };
  const res = await fetch(`${node.origin}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': node.secret, 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model: 'claude', max_tokens: 100, stream: true, messages: [{ role: 'user', content: 'hi' }] }),
  });
  const body = await res.text();
  t.notOk(body.includes(EMAIL));
  t.notOk(body.includes('event: message_start'), 'the blocked event is not sent');
  t.match(body, /event: error\ndata: .*ZN_ERR_GUARDRAIL_BLOCKED/);
});
