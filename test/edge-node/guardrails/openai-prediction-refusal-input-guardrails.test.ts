// Input rules over the parts of an OpenAI chat request the model reads besides message text:
// `prediction.content` (a string or text parts) and an assistant message's refusal content parts
// (`{type:'refusal', refusal}`) are checked like content: blocked before anything is forwarded,
// or masked in the body the upstream gets.
import t from 'tap';
import OpenAI from 'openai';
import { startGuardedNode } from './guarded-node.js';

const SECRET = 'sk-proj-Abc123Def456Ghi789Jkl0';
const EMAIL = 'alice.secret@example.com';
const answer = {
  id: 'c',
  object: 'chat.completion',
  created: 1,
  model: 'demo-echo',
  choices: [{ index: 0, finish_reason: 'stop', message: { role: 'assistant', content: 'ok' } }],
  usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
};
type Params = OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming;
const user = { role: 'user' as const, content: 'rewrite the file' };
/** The same text in each of the three places. */
const requests = (text: string): Array<[string, Params]> => [
  ['prediction.content as a string', { model: 'echo', messages: [user], prediction: { type: 'content', content: `API = "${text}"` } }],
  ['prediction.content as text parts', { model: 'echo', messages: [user], prediction: { type: 'content', content: [{ type: 'text', text: `API = "${text}"` }] } }],
  [
    'an assistant message’s refusal part',
    { model: 'echo', messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: [{ type: 'refusal', refusal: `no ${text}` }] }, { role: 'user', content: 'again' }] },
  ],
];

t.test('a blocked secret in the prediction or in a refusal part is refused and never forwarded', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'secret', action: 'block', on: 'input' }]);
  upstream.answer = { json: answer };
  const client = node.client();
  for (const [where, params] of requests(SECRET)) {
    const before = upstream.requests.length;
    const err = await client.chat.completions.create(params).then(
      () => undefined,
      (e: unknown) => e,
    );
    t.ok(err instanceof OpenAI.APIError && err.status === 400 && err.code === 'ZN_ERR_GUARDRAIL_BLOCKED', `${where}: 400 ZN_ERR_GUARDRAIL_BLOCKED`);
    t.equal(upstream.requests.length, before, `${where}: nothing forwarded`);
  }
});

t.test('a masked e-mail in the prediction or in a refusal part reaches the upstream as its placeholder', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'email', action: 'mask', on: 'input' }]);
  upstream.answer = { json: answer };
  const client = node.client();
  for (const [where, params] of requests(EMAIL)) {
    await client.chat.completions.create(params);
    const sent = JSON.stringify(upstream.requests.at(-1)?.body);
    t.notMatch(sent, EMAIL, `${where}: the address is not forwarded`);
    t.match(sent, '[EMAIL]', `${where}: its placeholder is`);
  }
});
