// Guardrails over OpenRouter-style `reasoning_details` (sent beside `reasoning`, and sent back by
// clients), through a listening node with the official openai client and a scripted upstream:
// a `reasoning.text` item's `text` and a `reasoning.summary` item's `summary` are checked like
// reasoning in requests, JSON answers and streams (a running text per item index, so a match split
// across chunks is still found and masks keep the chunks valid); signatures and encrypted data,
// opaque to the rules, are not read.
import t from 'tap';
import type { GuardrailRule } from '../../../proto/src/index.js';
import { sdkError } from '../pipeline/pipeline-harness.js';
import { rawChatStream, startGuardedNode } from './guarded-node.js';
import { sseData } from './scripted-upstream.js';

const EMAIL = 'bob@example.com';
const SECRET = 'sk-proj-Abc123Def456Ghi789Jkl0';
/** Opaque data that happens to hold an address: not text the rules read, so it must come back as it was. */
const OPAQUE = 'enc:carol@example.org';
const RULES: GuardrailRule[] = [
  { detector: 'email', action: 'mask', on: 'both' },
  { detector: 'secret', action: 'block', on: 'both' },
];
const USER = [{ role: 'user' as const, content: 'hi' }];
const DONE = 'data: [DONE]\n\n';

const chunk = (delta: Record<string, unknown>, finish: string | null = null): string =>
  `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'echo', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
const textDetail = (text: string, index = 0): Record<string, unknown> => ({ type: 'reasoning.text', text, format: 'unknown', index });
const summaryDetail = (summary: string, index: number): Record<string, unknown> => ({ type: 'reasoning.summary', summary, format: 'unknown', index });

function answerWith(message: Record<string, unknown>): { json: unknown } {
  return {
    json: {
      id: 'c1',
      object: 'chat.completion',
      created: 1,
      model: 'demo-echo',
      choices: [{ index: 0, finish_reason: 'stop', message: { role: 'assistant', content: 'ok', ...message } }],
      usage: { prompt_tokens: 3, completion_tokens: 3, total_tokens: 6 },
    },
  };
}

type Detail = { type: string; text?: string; summary?: string; signature?: string; data?: string; index?: number };

t.test('guardrails over reasoning_details', async (t) => {
  const { upstream, node, plainSecret } = await startGuardedNode(t, RULES);
  const client = node.client();
  const streamBody = (secret: string): Promise<{ status: number; body: string }> => rawChatStream(node, secret, { model: 'echo', messages: USER });

  await t.test("a JSON answer's reasoning_details text and summary are masked, its signature and encrypted data left as they came; a secret there blocks the answer", async (t) => {
    upstream.answer = answerWith({
      reasoning: `user is ${EMAIL}`,
      reasoning_details: [
        { ...textDetail(`user is ${EMAIL}`), signature: OPAQUE },
        summaryDetail(`asked about ${EMAIL}`, 1),
        { type: 'reasoning.encrypted', data: OPAQUE, index: 2 },
      ],
    });
    const reply = await client.chat.completions.create({ model: 'echo', messages: USER });
    const message = reply.choices[0]!.message as typeof reply.choices[0]['message'] & { reasoning?: string; reasoning_details?: Detail[] };
    t.equal(message.reasoning, 'user is [EMAIL]');
    t.same(message.reasoning_details, [
      { ...textDetail('user is [EMAIL]'), signature: OPAQUE },
      summaryDetail('asked about [EMAIL]', 1),
      { type: 'reasoning.encrypted', data: OPAQUE, index: 2 },
    ]);

    for (const detail of [textDetail(`key ${SECRET}`), summaryDetail(`key ${SECRET}`, 0)]) {
      upstream.answer = answerWith({ reasoning_details: [detail] });
      const err = await sdkError(client.chat.completions.create({ model: 'echo', messages: USER }));
      t.equal(err.status, 400);
      t.equal(err.code, 'ZN_ERR_GUARDRAIL_BLOCKED');
      t.notMatch(JSON.stringify(err.error), /sk-proj/);
    }
  });

  await t.test('reasoning_details sent back in a request are checked: an e-mail masked in what the upstream receives, a secret refused before anything reaches it', async (t) => {
    upstream.answer = answerWith({});
    const history = (details: Detail[]): never => [...USER, { role: 'assistant', content: 'ok', reasoning_details: details }, { role: 'user', content: 'go on' }] as never;
    await client.chat.completions.create({ model: 'echo', messages: history([{ type: 'reasoning.text', text: `mail ${EMAIL}`, signature: OPAQUE }, { type: 'reasoning.summary', summary: `for ${EMAIL}` }]) });
    const sent = upstream.requests.at(-1)!.body as { messages: Array<{ reasoning_details?: Detail[] }> };
    t.same(sent.messages[1]!.reasoning_details, [
      { type: 'reasoning.text', text: 'mail [EMAIL]', signature: OPAQUE },
      { type: 'reasoning.summary', summary: 'for [EMAIL]' },
    ]);

    const before = upstream.requests.length;
    const err = await sdkError(client.chat.completions.create({ model: 'echo', messages: history([{ type: 'reasoning.text', text: `key ${SECRET}` }]) }));
    t.equal(err.code, 'ZN_ERR_GUARDRAIL_BLOCKED');
    t.equal(upstream.requests.length, before, 'the upstream was never called');
  });

  await t.test('streamed reasoning_details are masked across chunks, each item its own text, in chunks that stay valid', async (t) => {
    upstream.answer = {
      sse: [
        chunk({ role: 'assistant', content: '' }),
        chunk({ reasoning: 'user is bob@exa', reasoning_details: [textDetail('user is bob@exa')] }),
        chunk({ reasoning: 'mple.com', reasoning_details: [textDetail('mple.com')] }),
        chunk({ reasoning_details: [summaryDetail('about carol@exa', 1)] }),
        chunk({ reasoning_details: [summaryDetail('mple.org', 1), { type: 'reasoning.encrypted', data: OPAQUE, index: 2 }] }),
        chunk({ content: 'done' }),
        chunk({}, 'stop'),
        DONE,
      ],
    };
    const stream = await client.chat.completions.create({ model: 'echo', stream: true, messages: USER });
    const texts: string[] = [];
    let reasoning = '';
    let data = '';
    for await (const part of stream) {
      const delta = part.choices[0]?.delta as { reasoning?: string; reasoning_details?: Detail[] } | undefined;
      reasoning += delta?.reasoning ?? '';
      for (const detail of delta?.reasoning_details ?? []) {
        const text = detail.text ?? detail.summary;
        if (text !== undefined) texts[detail.index ?? 0] = (texts[detail.index ?? 0] ?? '') + text;
        data += detail.data ?? '';
      }
    }
    t.equal(reasoning, 'user is [EMAIL]');
    t.same(texts, ['user is [EMAIL]', 'about [EMAIL]']);
    t.equal(data, OPAQUE, 'encrypted data goes out as it came');

    upstream.answer = { sse: [chunk({ reasoning_details: [textDetail('user is bob@exa')] }), chunk({ reasoning_details: [textDetail('mple.com')] }), chunk({}, 'stop'), DONE] };
    const { body } = await streamBody(node.secret);
    t.notMatch(body, /example/);
    t.match(body, /data: \[DONE\]\n\n$/);
  });

  await t.test('a secret split across streamed reasoning_details chunks ends the stream with the guardrail code, none of it sent', async (t) => {
    upstream.answer = { sse: [chunk({ reasoning_details: [textDetail('key sk-pr')] }), chunk({ reasoning_details: [textDetail('oj-Abc123Def456Ghi789Jkl0 ')] }), chunk({}, 'stop'), DONE] };
    const { status, body } = await streamBody(node.secret);
    t.equal(status, 200, 'the stream had started');
    t.match(body, /ZN_ERR_GUARDRAIL_BLOCKED/);
    t.notMatch(body, /sk-pr|Abc123/);
    t.notMatch(body, /\[DONE\]/);
  });

  await t.test('without output rules, streamed reasoning_details pass byte for byte', async (t) => {
    const sse = [chunk({ reasoning_details: [textDetail('user is bob@exa')] }), chunk({ reasoning_details: [textDetail('mple.com')] }), chunk({}, 'stop'), DONE];
    upstream.answer = { sse };
    const { body } = await streamBody(plainSecret);
    t.same(sseData(body), sse.map((event) => event.slice('data: '.length, -2)));
  });
});
