// Guardrails over an OpenAI chat message's `name` and a file part's `filename` (given to the model:
// checked as input, a mask writing a placeholder without brackets, as OpenAI's name pattern takes) and over `content` in shapes OpenAI does
// not define (one part object, a text part whose `text` is not a string): refused in a request
// with ZN_ERR_INVALID_REQUEST naming the field, every string checked in a JSON answer, a stream
// chunk carrying one blocked under output rules.
import t from 'tap';
import type { RequestRecord } from '../../../proto/src/index.js';
import { startGuardedNode } from './guarded-node.js';

const EMAIL = 'alice.secret@example.com';
const CARD = '4111111111111111';
const SECRET = 'sk-proj-Abc123Def456Ghi789Jkl0';
const completion = (content: unknown): Record<string, unknown> => ({
  id: 'c', object: 'chat.completion', created: 1, model: 'demo-echo',
  choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop', logprobs: null }],
  usage: { prompt_tokens: 3, completion_tokens: 5, total_tokens: 8 },
});
const chunk = (delta: Record<string, unknown>, finish: string | null = null): string =>
  `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'demo-echo', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;

async function post(node: { baseURL: string; secret: string }, body: Record<string, unknown>): Promise<{ status: number; text: string; requestId: string | null }> {
  const res = await fetch(`${node.baseURL}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` }, body: JSON.stringify({ model: 'echo', ...body }) });
  return { status: res.status, text: await res.text(), requestId: res.headers.get('x-request-id') };
}

/** A spool that keeps the records it is given, and a wait for one of them. */
function recordingSpool(): { spool: Record<string, unknown>; record: (id: string | null) => Promise<RequestRecord> } {
  const records: RequestRecord[] = [];
  const spool = { open: () => undefined, finalise: async (record: RequestRecord) => void records.push(record), keepsBodies: () => true, fullness: () => 0 };
  const record = async (id: string | null): Promise<RequestRecord> => {
    const deadline = Date.now() + 5_000;
    for (;;) {
      const found = records.find((r) => r.requestId === id);
      if (found !== undefined) return found;
      if (Date.now() > deadline) throw new Error(`no record of ${String(id)}`);
      await new Promise((resolve) => setImmediate(resolve));
    }
  };
  return { spool, record };
}

t.test('an input mask rule masks a message name with a placeholder OpenAI name pattern takes, upstream and in the record', async (t) => {
  const { spool, record } = recordingSpool();
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'bank-card', action: 'mask', on: 'input' }, { detector: 'email', action: 'mask', on: 'input' }], { spool } as never);
  upstream.answer = { json: completion('ok') };
  const res = await post(node, { messages: [{ role: 'user', name: CARD, content: 'who am I?' }, { role: 'user', name: EMAIL, content: 'and now?' }] });
  t.equal(res.status, 200);
  const sent = upstream.requests.at(-1)!.body as { messages: Array<{ name: string }> };
  t.same(sent.messages.map((m) => m.name), ['BANK_CARD', 'EMAIL']);
  for (const message of sent.messages) t.match(message.name, /^[a-zA-Z0-9_-]{1,64}$/);
  const kept = (await record(res.requestId)).bodies?.request ?? '';
  t.notOk(kept.includes(CARD) || kept.includes(EMAIL), 'the record keeps the masked name');
  t.match(kept, /"name":"BANK_CARD"/);
});

t.test("an input mask rule masks a file part's filename with a placeholder without brackets, leaving its data as sent", async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'bank-card', action: 'mask', on: 'input' }]);
  upstream.answer = { json: completion('ok') };
  const file = (filename: string): Record<string, unknown> => ({ type: 'file', file: { filename, file_data: 'data:application/pdf;base64,JVBERi0=' } });
  const res = await post(node, { messages: [{ role: 'user', content: [{ type: 'text', text: 'summarise' }, file(`statement-${CARD}.pdf`)] }] });
  t.equal(res.status, 200);
  const sent = upstream.requests.at(-1)!.body as { messages: Array<{ content: unknown[] }> };
  t.same(sent.messages[0]!.content[1], file('statement-BANK_CARD.pdf'));
});

t.test("an input block rule refuses a request whose file part's filename holds a secret, forwarding nothing", async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'secret', action: 'block', on: 'input' }]);
  const before = upstream.requests.length;
  const res = await post(node, { messages: [{ role: 'user', content: [{ type: 'file', file: { filename: `${SECRET}.txt`, file_data: 'data:application/pdf;base64,JVBERi0=' } }] }] });
  t.equal(res.status, 400);
  t.match(res.text, /ZN_ERR_GUARDRAIL_BLOCKED/);
  t.notOk(res.text.includes(SECRET));
  t.equal(upstream.requests.length, before);
});

t.test('an input block rule refuses a request whose message name holds a secret, forwarding nothing', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'secret', action: 'block', on: 'input' }]);
  const before = upstream.requests.length;
  const res = await post(node, { messages: [{ role: 'user', name: SECRET, content: 'who am I?' }] });
  t.equal(res.status, 400);
  t.match(res.text, /ZN_ERR_GUARDRAIL_BLOCKED/);
  t.notOk(res.text.includes(SECRET));
  t.equal(upstream.requests.length, before);
});

t.test('a request whose content is one part object, or a text part without string text, is refused naming the field', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'email', action: 'mask', on: 'input' }]);
  const before = upstream.requests.length;
  const cases: Array<[unknown, string]> = [
    [{ type: 'text', text: `mail ${EMAIL}` }, 'messages[0].content'],
    [[{ type: 'text', text: { value: `mail ${EMAIL}` } }], 'messages[0].content[0].text'],
    [[[{ type: 'text', text: `mail ${EMAIL}` }]], 'messages[0].content[0]'],
  ];
  for (const [content, param] of cases) {
    const res = await post(node, { messages: [{ role: 'user', content }] });
    t.equal(res.status, 400, param);
    const error = (JSON.parse(res.text) as { error: { code: string; param: string } }).error;
    t.equal(error.code, 'ZN_ERR_INVALID_REQUEST');
    t.equal(error.param, param);
  }
  const prediction = await post(node, { messages: [{ role: 'user', content: 'hi' }], prediction: { type: 'content', content: { type: 'text', text: EMAIL } } });
  t.equal((JSON.parse(prediction.text) as { error: { param: string } }).error.param, 'prediction.content');
  t.equal(upstream.requests.length, before, 'nothing forwarded');
});

t.test('an output mask rule masks a JSON answer whose content is one part object, or a text part whose text is not a string', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'email', action: 'mask', on: 'output' }]);
  const answers: Array<[unknown, unknown]> = [
    [{ type: 'text', text: `mail ${EMAIL}` }, { type: 'text', text: 'mail [EMAIL]' }],
    [[{ type: 'text', text: { value: `mail ${EMAIL}` } }], [{ type: 'text', text: { value: 'mail [EMAIL]' } }]],
  ];
  for (const [content, masked] of answers) {
    upstream.answer = { json: completion(content) };
    const res = await post(node, { messages: [{ role: 'user', content: 'hi' }] });
    t.equal(res.status, 200);
    t.same((JSON.parse(res.text) as { choices: Array<{ message: { content: unknown } }> }).choices[0]!.message.content, masked);
  }
});

t.test('under output rules a stream chunk whose content is one part object ends the stream', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'email', action: 'mask', on: 'output' }]);
  upstream.answer = { sse: [chunk({ role: 'assistant', content: '' }), chunk({ content: { type: 'text', text: `mail ${EMAIL}` } }), chunk({}, 'stop'), 'data: [DONE]\n\n'] };
  const res = await post(node, { stream: true, messages: [{ role: 'user', content: 'hi' }] });
  t.equal(res.status, 200);
  t.notOk(res.text.includes(EMAIL));
  t.match(res.text, /ZN_ERR_GUARDRAIL_BLOCKED/);
});
