// Output rules over an OpenAI chat answer's `annotations` (url_citation title and URL), in a JSON
// answer and in a stream's `delta.annotations`: checked like an Anthropic citation, masked or
// blocking, each whole in its chunk, without ending the choice's running content.
import t from 'tap';
import { startGuardedNode } from './guarded-node.js';

const EMAIL = 'alice.secret@example.com';
const DONE = 'data: [DONE]\n\n';
const chunk = (delta: Record<string, unknown>, finish: string | null = null): string =>
  `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'demo-echo', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
const completion = (message: Record<string, unknown>): Record<string, unknown> => ({
  id: 'c', object: 'chat.completion', created: 1, model: 'demo-echo',
  choices: [{ index: 0, message: { role: 'assistant', ...message }, finish_reason: 'stop', logprobs: null }],
  usage: { prompt_tokens: 3, completion_tokens: 5, total_tokens: 8 },
});
const annotation = (): Record<string, unknown> => ({ type: 'url_citation', url_citation: { start_index: 0, end_index: 4, title: `Contact ${EMAIL}`, url: `https://example.com/?who=${EMAIL}` } });
const masked = { type: 'url_citation', url_citation: { start_index: 0, end_index: 4, title: 'Contact [EMAIL]', url: 'https://example.com/?who=[EMAIL]' } };
const messages = [{ role: 'user' as const, content: 'hi' }];

t.test('an output mask rule masks the title and URL of a JSON answer annotation', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'email', action: 'mask', on: 'output' }]);
  upstream.answer = { json: completion({ content: 'See this.', annotations: [annotation()] }) };
  const answer = await node.client().chat.completions.create({ model: 'echo', messages });
  t.same(answer.choices[0]?.message.annotations, [masked]);
  t.equal(answer.choices[0]?.message.content, 'See this.');
});

t.test('an output block rule blocks a JSON answer whose annotation holds a match', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'email', action: 'block', on: 'output' }]);
  upstream.answer = { json: completion({ content: 'See this.', annotations: [annotation()] }) };
  const res = await fetch(`${node.baseURL}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` }, body: JSON.stringify({ model: 'echo', messages }) });
  const body = await res.text();
  t.equal(res.status, 400);
  t.match(body, /ZN_ERR_GUARDRAIL_BLOCKED/);
  t.notOk(body.includes(EMAIL));
});

t.test('an output mask rule masks a streamed annotation whole in its chunk, and content split around it stays one text', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'email', action: 'mask', on: 'output' }]);
  upstream.answer = { sse: [chunk({ role: 'assistant', content: 'mail alice.sec' }), chunk({ annotations: [annotation()] }), chunk({ content: 'ret@example.com' }), chunk({}, 'stop'), DONE] };
  const stream = node.client().chat.completions.stream({ model: 'echo', messages });
  const message = (await stream.finalChatCompletion()).choices[0]?.message;
  t.same(message?.annotations, [masked]);
  t.equal(message?.content, 'mail [EMAIL]', 'the content match split around the annotation chunk is masked as one');
});

t.test('an output block rule ends a stream whose annotation holds a match', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'email', action: 'block', on: 'output' }]);
  upstream.answer = { sse: [chunk({ role: 'assistant', content: 'See this.' }), chunk({ annotations: [annotation()] }), chunk({}, 'stop'), DONE] };
  const res = await fetch(`${node.baseURL}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` }, body: JSON.stringify({ model: 'echo', stream: true, messages }) });
  const body = await res.text();
  t.notOk(body.includes(EMAIL));
  t.match(body, /event: error\ndata: .*ZN_ERR_GUARDRAIL_BLOCKED/);
});
