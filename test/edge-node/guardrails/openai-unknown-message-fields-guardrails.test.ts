// Text under message and delta keys the node does not read (LiteLLM's `thinking_blocks`, which
// repeat `reasoning_content`, and `provider_specific_fields`; a server's own `thinking`) is checked
// like the rest: masked in a JSON answer and in a request, and in a stream, where it cannot be
// placed in a running text, output rules block the chunk rather than relay it unchecked.
import t from 'tap';
import { rawChatStream, startGuardedNode } from './guarded-node.js';
import { sseData } from './scripted-upstream.js';

const EMAIL = 'zhang.san@example.com';
const THOUGHT = `The user's address is ${EMAIL}, I should not repeat it.`;

function chunk(delta: Record<string, unknown>, finish: string | null = null): string {
  return `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
}

function answer(message: Record<string, unknown>): unknown {
  return {
    id: 'c1',
    object: 'chat.completion',
    created: 1,
    model: 'm',
    choices: [{ index: 0, message: { role: 'assistant', content: 'Done.', ...message }, finish_reason: 'stop' }],
    usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
  };
}

async function chat(baseURL: string, secret: string, messages: unknown[]): Promise<{ status: number; text: string }> {
  const res = await fetch(`${baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${secret}` },
    body: JSON.stringify({ model: 'echo', messages }),
  });
  return { status: res.status, text: await res.text() };
}

const USER = [{ role: 'user', content: 'hi' }];

t.test('a JSON answer’s thinking_blocks and other unknown message fields are masked under an output mask rule', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'email', action: 'mask', on: 'output' }]);
  upstream.answer = {
    json: answer({
      reasoning_content: THOUGHT,
      thinking_blocks: [{ type: 'thinking', thinking: THOUGHT, signature: 'sig-EMAIL-free' }],
      provider_specific_fields: { note: THOUGHT, nested: [{ text: EMAIL }] },
      thinking: THOUGHT,
    }),
  };
  const res = await chat(node.baseURL, node.secret, USER);
  t.equal(res.status, 200);
  t.notOk(res.text.includes(EMAIL), 'no field carries the address');
  const message = (JSON.parse(res.text) as { choices: Array<{ message: Record<string, unknown> }> }).choices[0]!.message;
  t.same(message.thinking_blocks, [{ type: 'thinking', thinking: "The user's address is [EMAIL], I should not repeat it.", signature: 'sig-EMAIL-free' }], 'the signature is left as it was');
  t.same(message.provider_specific_fields, { note: "The user's address is [EMAIL], I should not repeat it.", nested: [{ text: '[EMAIL]' }] });
  t.equal(message.thinking, "The user's address is [EMAIL], I should not repeat it.");
});

t.test('under a block rule such a JSON answer is refused', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'email', action: 'block', on: 'output' }]);
  upstream.answer = { json: answer({ provider_specific_fields: { note: THOUGHT } }) };
  const res = await chat(node.baseURL, node.secret, USER);
  t.equal(res.status, 400);
  t.match(res.text, /ZN_ERR_GUARDRAIL_BLOCKED/);
  t.notOk(res.text.includes(EMAIL));
});

for (const [what, delta] of [
  ['provider_specific_fields', { provider_specific_fields: { note: THOUGHT } }],
  ['a thinking field of its own', { thinking: THOUGHT }],
] as const) {
  t.test(`a streamed delta with ${what} is blocked under an output mask rule, nothing of it relayed`, async (t) => {
    const { upstream, node } = await startGuardedNode(t, [{ detector: 'email', action: 'mask', on: 'output' }]);
    upstream.answer = { sse: [chunk({ role: 'assistant', content: 'Thinking… ' }), chunk(delta), chunk({ content: 'Done.' }), chunk({}, 'stop'), 'data: [DONE]\n\n'] };
    const res = await rawChatStream(node, node.secret, { model: 'echo', messages: USER });
    t.equal(res.status, 200);
    t.notOk(res.body.includes(EMAIL), 'the address never went out');
    const last = sseData(res.body).at(-1) ?? '';
    t.match(last, /ZN_ERR_GUARDRAIL_BLOCKED/, 'the stream ends with the guardrail error');
  });
}

t.test('a streamed delta with LiteLLM thinking_blocks beside reasoning_content is masked in both, not blocked', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'email', action: 'mask', on: 'output' }]);
  const harmless = { reasoning_content: 'Thinking it over. ', thinking_blocks: [{ type: 'thinking', thinking: 'Thinking it over. ', signature: 'sig' }] };
  upstream.answer = {
    sse: [chunk({ role: 'assistant', ...harmless }), chunk({ reasoning_content: THOUGHT, thinking_blocks: [{ type: 'thinking', thinking: THOUGHT }] }), chunk({ content: 'Done.' }), chunk({}, 'stop'), 'data: [DONE]\n\n'],
  };
  const res = await rawChatStream(node, node.secret, { model: 'echo', messages: USER });
  t.notMatch(res.body, /ZN_ERR_GUARDRAIL_BLOCKED/, 'relayed');
  t.notOk(res.body.includes(EMAIL), 'the address never went out');
  const deltas = sseData(res.body).filter((d) => d.startsWith('{')).map((d) => (JSON.parse(d) as { choices: Array<{ delta: Record<string, unknown> }> }).choices[0]?.delta ?? {});
  const thinking = deltas.flatMap((d) => (Array.isArray(d.thinking_blocks) ? (d.thinking_blocks as Array<{ thinking?: string }>).map((b) => b.thinking ?? '') : [])).join('');
  t.match(thinking, /address is \[EMAIL\]/, 'the thinking_blocks copy is masked too');
});

t.test('a stream whose deltas carry only the fields the node reads is not blocked by the check', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'email', action: 'mask', on: 'output' }]);
  upstream.answer = { sse: [chunk({ role: 'assistant', content: `Write to ${EMAIL}`, reasoning_content: 'plain', refusal: null }), chunk({ content: ' today.' }), chunk({}, 'stop'), 'data: [DONE]\n\n'] };
  const res = await rawChatStream(node, node.secret, { model: 'echo', messages: USER });
  t.notMatch(res.body, /ZN_ERR_GUARDRAIL_BLOCKED/);
  t.match(res.body, /\[EMAIL\]/);
  t.notOk(res.body.includes(EMAIL));
});

t.test('a request’s thinking_blocks and other unknown message fields are masked before they go upstream', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'email', action: 'mask', on: 'input' }]);
  upstream.answer = { json: answer({}) };
  const res = await chat(node.baseURL, node.secret, [
    { role: 'user', content: `my mail is ${EMAIL}` },
    { role: 'assistant', content: 'noted', reasoning_content: `user mail ${EMAIL}`, thinking_blocks: [{ type: 'thinking', thinking: `user mail ${EMAIL}`, signature: 's' }], provider_specific_fields: { note: EMAIL } },
    { role: 'user', content: 'thanks' },
  ]);
  t.equal(res.status, 200);
  const forwarded = upstream.requests.at(-1)!.text;
  t.notOk(forwarded.includes(EMAIL), 'nothing unmasked forwarded');
  t.match(forwarded, /"thinking":"user mail \[EMAIL\]"/);
  t.match(forwarded, /"provider_specific_fields":\{"note":"\[EMAIL\]"\}/);
});
