// Output rules and what an OpenAI chat answer carries besides its text fields: `logprobs` (the
// answer's text again, token by token) and audio (speech, with its transcript). Under output rules
// a request asking for either is refused with ZN_ERR_GUARDRAIL_UNCHECKABLE before anything is
// forwarded; an upstream that sends logprobs anyway has them dropped (JSON and streams), and one
// that sends audio anyway is blocked, as is one that puts text beside a choice's message or delta.
// Keys without output rules get them as the upstream sent them.
import t from 'tap';
import OpenAI from 'openai';
import type { PipelineNode } from '../pipeline/pipeline-harness.js';
import { startGuardedNode } from './guarded-node.js';
import { sseData } from './scripted-upstream.js';

const PHONE = '13812345678';
const TOKENS = ['Call ', '138', '1234', '5678'];
const logprobsOf = (tokens: string[]): Record<string, unknown> => ({
  content: tokens.map((token) => ({ token, logprob: -0.1, bytes: [...Buffer.from(token)], top_logprobs: [{ token, logprob: -0.1, bytes: [...Buffer.from(token)] }] })),
});
const jsonAnswer = (message: Record<string, unknown>, logprobs: unknown = null): Record<string, unknown> => ({
  id: 'chatcmpl-1',
  object: 'chat.completion',
  created: 1,
  model: 'demo-echo',
  choices: [{ index: 0, finish_reason: 'stop', message: { role: 'assistant', ...message }, logprobs }],
  usage: { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 },
});
const chunk = (delta: Record<string, unknown>, logprobs: unknown, finish: string | null = null): string =>
  `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'demo-echo', choices: [{ index: 0, delta, logprobs, finish_reason: finish }] })}\n\n`;
const DONE = 'data: [DONE]\n\n';
/** A stream that spells the phone number in content and logprobs; one chunk carries logprobs and no text. */
const phoneStream = (): string[] => [
  chunk({ role: 'assistant', content: '' }, null),
  ...TOKENS.map((token) => chunk({ content: token }, logprobsOf([token]))),
  chunk({}, logprobsOf([PHONE])),
  chunk({}, null, 'stop'),
  DONE,
];
/** The whole text of a streamed `echo` chat answer to key-a, sent without the SDK (which would parse it). */
async function streamedChatText(node: PipelineNode, messages: Array<{ role: 'user'; content: string }>): Promise<string> {
  const res = await fetch(`${node.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
    body: JSON.stringify({ model: 'echo', stream: true, messages }),
  });
  return res.text();
}
const outcome = (p: Promise<unknown>): Promise<string> =>
  p.then(
    () => 'forwarded',
    (err: unknown) => (err instanceof OpenAI.APIError ? `${err.status} ${String(err.code)} ${String(err.param)}` : String(err)),
  );

t.test('a key whose policy has output rules', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'phone', action: 'mask', on: 'output' }]);
  const client = node.client();
  const messages = [{ role: 'user' as const, content: 'number?' }];

  await t.test('is refused logprobs, top_logprobs and audio output with the unchecked-output code, and nothing is forwarded', async (t) => {
    upstream.answer = { json: jsonAnswer({ content: 'ok' }) };
    const before = upstream.requests.length;
    t.equal(await outcome(client.chat.completions.create({ model: 'echo', messages, logprobs: true })), '400 ZN_ERR_GUARDRAIL_UNCHECKABLE logprobs');
    t.equal(await outcome(client.chat.completions.create({ model: 'echo', messages, top_logprobs: 3 })), '400 ZN_ERR_GUARDRAIL_UNCHECKABLE top_logprobs');
    t.equal(await outcome(client.chat.completions.create({ model: 'echo', messages, stream: true, logprobs: true })), '400 ZN_ERR_GUARDRAIL_UNCHECKABLE logprobs');
    t.equal(
      await outcome(client.chat.completions.create({ model: 'echo', messages, modalities: ['text', 'audio'], audio: { voice: 'alloy', format: 'wav' } })),
      '400 ZN_ERR_GUARDRAIL_UNCHECKABLE modalities',
    );
    t.equal(await outcome(client.chat.completions.create({ model: 'echo', messages, audio: { voice: 'alloy', format: 'wav' } })), '400 ZN_ERR_GUARDRAIL_UNCHECKABLE audio');
    t.equal(upstream.requests.length, before, 'none of them reached the upstream');
    const err = await client.chat.completions.create({ model: 'echo', messages, logprobs: true }).catch((e: unknown) => e);
    t.match((err as Error).message, /Guardrail policy "p" checks the output, and `logprobs` asks for log probabilities/);
  });

  await t.test('may still send logprobs: false, top_logprobs: 0 and text-only modalities', async (t) => {
    upstream.answer = { json: jsonAnswer({ content: 'ok' }) };
    t.equal(await outcome(client.chat.completions.create({ model: 'echo', messages, logprobs: false, top_logprobs: 0, modalities: ['text'] })), 'forwarded');
  });

  await t.test('never gets the logprobs of a JSON answer whose upstream sent them unasked, while its content is masked', async (t) => {
    upstream.answer = { json: jsonAnswer({ content: `Call ${PHONE}` }, logprobsOf(TOKENS)) };
    const res = await client.chat.completions.create({ model: 'echo', messages });
    t.equal(res.choices[0]!.message.content, 'Call [PHONE]');
    t.equal(res.choices[0]!.logprobs, null, 'logprobs dropped');
    t.notMatch(JSON.stringify(res), PHONE);
  });

  await t.test('never gets the logprobs of a streamed answer, with or without text in their chunk', async (t) => {
    upstream.answer = { sse: phoneStream() };
    const body = await streamedChatText(node, messages);
    t.notMatch(body, PHONE);
    t.notMatch(body, /"token"/, 'no logprobs entry went out');
    t.match(body, /\[PHONE\]/, 'the content is masked as usual');
    t.match(body, /data: \[DONE\]\n\n$/);
  });

  await t.test('is blocked from a JSON answer carrying audio, whose speech the rules cannot read', async (t) => {
    upstream.answer = { json: jsonAnswer({ content: null, audio: { id: 'audio_1', data: 'UklGRg==', expires_at: 2, transcript: 'Hello there' } }) };
    t.equal(await outcome(client.chat.completions.create({ model: 'echo', messages })), '400 ZN_ERR_GUARDRAIL_BLOCKED null');
  });

  await t.test('gets an audio answer’s transcript checked when it comes without audio data', async (t) => {
    upstream.answer = { json: jsonAnswer({ content: null, audio: { id: 'audio_1', transcript: `Call ${PHONE}` } }) };
    const res = await client.chat.completions.create({ model: 'echo', messages });
    t.equal((res.choices[0]!.message.audio as { transcript?: string } | undefined)?.transcript, 'Call [PHONE]');
  });

  await t.test('has a stream carrying audio ended with the guardrail code before the audio goes out', async (t) => {
    upstream.answer = { sse: [chunk({ role: 'assistant', content: '' }, null), chunk({ audio: { id: 'audio_1', data: 'UklGRg==', transcript: `Call ${PHONE}` } }, null), chunk({}, null, 'stop'), DONE] };
    const body = await streamedChatText(node, messages);
    t.notMatch(body, PHONE);
    t.notMatch(body, /UklGRg/);
    t.match(body, /"code":"ZN_ERR_GUARDRAIL_BLOCKED"/);
  });
});

t.test('a key whose policy blocks on output never gets the blocked text through a stream’s logprobs', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'phone', action: 'block', on: 'output' }]);
  upstream.answer = { sse: phoneStream() };
  const body = await streamedChatText(node, [{ role: 'user', content: 'number?' }]);
  t.notMatch(body, /"token"/);
  t.notMatch(sseData(body).join(''), /138/, 'not even the first pieces of the number');
  t.match(body, /"code":"ZN_ERR_GUARDRAIL_BLOCKED"/);
});

t.test('keys without output rules get logprobs and audio as the upstream sent them', async (t) => {
  const { upstream, node, plainSecret } = await startGuardedNode(t, [{ detector: 'phone', action: 'block', on: 'input' }]);
  const messages = [{ role: 'user' as const, content: 'number?' }];
  for (const [name, client] of [
    ['a key with only input rules', node.client()],
    ['a key without a policy', node.client({ apiKey: plainSecret })],
  ] as const) {
    await t.test(name, async (t) => {
      upstream.answer = { json: jsonAnswer({ content: `Call ${PHONE}` }, logprobsOf(TOKENS)) };
      const res = await client.chat.completions.create({ model: 'echo', messages, logprobs: true, top_logprobs: 1 });
      t.equal((res.choices[0]!.logprobs?.content ?? []).map((entry) => entry.token).join(''), `Call ${PHONE}`);
      upstream.answer = { json: jsonAnswer({ content: null, audio: { id: 'audio_1', data: 'UklGRg==', expires_at: 2, transcript: `Call ${PHONE}` } }) };
      const spoken = await client.chat.completions.create({ model: 'echo', messages, modalities: ['text', 'audio'], audio: { voice: 'alloy', format: 'wav' } });
      t.equal(spoken.choices[0]!.message.audio?.transcript, `Call ${PHONE}`);
      upstream.answer = { sse: phoneStream() };
      const stream = await client.chat.completions.create({ model: 'echo', messages, stream: true, logprobs: true });
      let tokens = '';
      for await (const part of stream) tokens += (part.choices[0]?.logprobs?.content ?? []).map((entry) => entry.token).join('');
      t.equal(tokens, `Call ${TOKENS.slice(1).join('')}${PHONE}`);
    });
  }
});

t.test("text a compatible upstream puts beside a choice's message or delta is blocked under output rules, never relayed unchecked", async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'phone', action: 'mask', on: 'output' }]);
  const messages = [{ role: 'user' as const, content: 'number?' }];
  const beside = { index: 0, delta: {}, message: { role: 'assistant', content: `Call ${PHONE}` }, text: `Call ${PHONE}`, finish_reason: 'stop' };
  upstream.answer = { sse: [`data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'demo-echo', choices: [beside] })}\n\n`, DONE] };
  const streamed = await streamedChatText(node, messages);
  t.notMatch(streamed, PHONE, 'the number never reaches the caller');
  t.match(streamed, /ZN_ERR_GUARDRAIL_BLOCKED/);

  upstream.answer = { json: { ...jsonAnswer({ content: 'ok' }), choices: [{ index: 0, finish_reason: 'stop', message: { role: 'assistant', content: 'ok' }, text: `Call ${PHONE}` }] } };
  t.equal(await outcome(node.client().chat.completions.create({ model: 'echo', messages })), '400 ZN_ERR_GUARDRAIL_BLOCKED null', 'nor from a JSON answer');

  // What carries none of the answer's text passes: Azure's filter verdicts, vLLM's stop_reason.
  upstream.answer = { json: { ...jsonAnswer({ content: `Call ${PHONE}` }), choices: [{ index: 0, finish_reason: 'stop', stop_reason: 'END', content_filter_results: { hate: { filtered: false, severity: 'safe' } }, message: { role: 'assistant', content: `Call ${PHONE}` } }] } };
  const res = await node.client().chat.completions.create({ model: 'echo', messages });
  t.equal(res.choices[0]!.message.content, 'Call [PHONE]');
});
