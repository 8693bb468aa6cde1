// Guardrails over OpenAI chat content parts that nest their text (Mistral's reasoning parts,
// `{type:'thinking', thinking:[{type:'text', text}]}`) or have a type the node does not know: in a
// request, a JSON answer and a stream, the nested text is checked; an unknown part's strings are
// checked (requests, JSON) or, streamed, block under output rules. Media parts stay unread.
import t from 'tap';
import { startGuardedNode } from './guarded-node.js';

const EMAIL = 'alice.secret@example.com';
const DONE = 'data: [DONE]\n\n';
const chunk = (delta: Record<string, unknown>, finish: string | null = null): string =>
  `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'demo-echo', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
const completion = (content: unknown): Record<string, unknown> => ({
  id: 'c', object: 'chat.completion', created: 1, model: 'demo-echo',
  choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop', logprobs: null }],
  usage: { prompt_tokens: 3, completion_tokens: 5, total_tokens: 8 },
});
const thinking = (text: string): Record<string, unknown> => ({ type: 'thinking', thinking: [{ type: 'text', text }] });

async function post(node: { baseURL: string; secret: string }, body: Record<string, unknown>): Promise<{ status: number; text: string }> {
  const res = await fetch(`${node.baseURL}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` }, body: JSON.stringify({ model: 'echo', ...body }) });
  return { status: res.status, text: await res.text() };
}

t.test('an input mask rule masks text nested in a reasoning part and the strings of an unknown part, not an image URL', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'email', action: 'mask', on: 'input' }]);
  upstream.answer = { json: completion('ok') };
  const image = { type: 'image_url', image_url: { url: `https://example.com/${EMAIL}.png` } };
  const { status } = await post(node, {
    messages: [
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: [thinking(`the user is ${EMAIL}`), { type: 'text', text: 'Hello.' }] },
      { role: 'user', content: [{ type: 'document_url', document_url: `https://example.com/?to=${EMAIL}`, document_name: EMAIL }, image] },
    ],
  });
  t.equal(status, 200);
  const sent = upstream.requests.at(-1)!.body as { messages: Array<{ content: unknown }> };
  t.same(sent.messages[1]!.content, [thinking('the user is [EMAIL]'), { type: 'text', text: 'Hello.' }]);
  t.same(sent.messages[2]!.content, [{ type: 'document_url', document_url: 'https://example.com/?to=[EMAIL]', document_name: '[EMAIL]' }, image], 'an image part is media, left as sent');
});

t.test('an input block rule refuses a request whose nested reasoning part holds a match, forwarding nothing', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'email', action: 'block', on: 'input' }]);
  upstream.answer = { json: completion('ok') };
  const before = upstream.requests.length;
  const { status, text } = await post(node, { messages: [{ role: 'assistant', content: [thinking(`the user is ${EMAIL}`)] }, { role: 'user', content: 'go on' }] });
  t.equal(status, 400);
  t.match(text, /ZN_ERR_GUARDRAIL_BLOCKED/);
  t.equal(upstream.requests.length, before);
});

t.test('an output mask rule masks text nested in a JSON answer reasoning part', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'email', action: 'mask', on: 'output' }]);
  upstream.answer = { json: completion([thinking(`the user is ${EMAIL}`), { type: 'text', text: 'Hello.' }]) };
  const { status, text } = await post(node, { messages: [{ role: 'user', content: 'hi' }] });
  t.equal(status, 200);
  t.same((JSON.parse(text) as { choices: Array<{ message: { content: unknown } }> }).choices[0]!.message.content, [thinking('the user is [EMAIL]'), { type: 'text', text: 'Hello.' }]);
});

t.test('an output mask rule masks a match split across streamed reasoning parts, keeping it out of the content', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'email', action: 'mask', on: 'output' }]);
  upstream.answer = { sse: [chunk({ role: 'assistant', content: [thinking('the user is alice.sec')] }), chunk({ content: [thinking('ret@example.com.')] }), chunk({ content: [{ type: 'text', text: 'Hello.' }] }), chunk({}, 'stop'), DONE] };
  const { text } = await post(node, { stream: true, messages: [{ role: 'user', content: 'hi' }] });
  t.notOk(text.includes('alice.sec'), 'no piece of the address goes out');
  const thought: string[] = [];
  const said: string[] = [];
  for (const line of text.split('\n')) {
    if (!line.startsWith('data: {')) continue;
    const delta = (JSON.parse(line.slice(6)) as { choices: Array<{ delta: { content?: unknown } }> }).choices[0]?.delta;
    // Held text released in a delta of its own is plain content.
    if (typeof delta?.content === 'string') said.push(delta.content);
    if (!Array.isArray(delta?.content)) continue;
    for (const part of delta.content as Array<Record<string, unknown>>) {
      if (part.type === 'thinking') thought.push(...(part.thinking as Array<{ text: string }>).map((p) => p.text));
      else if (part.type === 'text') said.push(part.text as string);
    }
  }
  t.equal(thought.join(''), 'the user is [EMAIL].');
  t.equal(said.join(''), 'Hello.');
});

t.test('an output block rule ends a stream whose reasoning part holds a match', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'email', action: 'block', on: 'output' }]);
  upstream.answer = { sse: [chunk({ role: 'assistant', content: [thinking(`the user is ${EMAIL}`)] }), chunk({ content: [{ type: 'text', text: 'Hello.' }] }), chunk({}, 'stop'), DONE] };
  const { text } = await post(node, { stream: true, messages: [{ role: 'user', content: 'hi' }] });
  t.notOk(text.includes(EMAIL));
  t.match(text, /event: error\ndata: .*ZN_ERR_GUARDRAIL_BLOCKED/);
});

t.test('output rules end a stream whose content part of an unknown type carries strings, which the stream cannot place', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'email', action: 'mask', on: 'output' }]);
  upstream.answer = { sse: [chunk({ role: 'assistant', content: [{ type: 'note', body: { lines: [`to ${EMAIL}`] } }] }), chunk({}, 'stop'), DONE] };
  const { text } = await post(node, { stream: true, messages: [{ role: 'user', content: 'hi' }] });
  t.notOk(text.includes(EMAIL));
  t.match(text, /event: error\ndata: .*ZN_ERR_GUARDRAIL_BLOCKED/);
});
