// OpenAI bills audio tokens at several times its text price, while the node charges a model's one
// per-token price: a priced chat request asking for audio output (`modalities` naming anything but
// text, or `audio`) or carrying `input_audio` or (vLLM's) `audio_url` parts is refused with ZN_ERR_INVALID_REQUEST before
// anything is reserved or forwarded, as `service_tier: "priority"` is. An unpriced request (a model
// without a price) bills nothing, so it may ask for audio (docs/billing.md).
import t from 'tap';
import { json, startScriptedUpstreamNode } from './scripted-upstream-node.js';

const answer = json({
  id: 'c1', object: 'chat.completion', created: 1, model: 'demo-echo',
  choices: [{ index: 0, finish_reason: 'stop', message: { role: 'assistant', content: 'hello' } }],
  usage: { prompt_tokens: 20, completion_tokens: 5, total_tokens: 25 },
});
const text = [{ role: 'user', content: 'Say hello.' }];
const spokenInput = [{ role: 'user', content: [{ type: 'text', text: 'Transcribe:' }, { type: 'input_audio', input_audio: { data: 'UklGRg==', format: 'wav' } }] }];
// vLLM's audio parts: a URL (often a base64 data URL) instead of input_audio's data.
const audioUrlInput = [{ role: 'user', content: [{ type: 'text', text: 'Transcribe:' }, { type: 'audio_url', audio_url: { url: 'data:audio/wav;base64,UklGRg==' } }] }];
const AUDIO_REQUESTS: Array<[string, Record<string, unknown>, string]> = [
  ['audio output in modalities', { messages: text, modalities: ['text', 'audio'], audio: { voice: 'alloy', format: 'wav' } }, 'modalities'],
  ['an audio parameter alone', { messages: text, audio: { voice: 'alloy', format: 'wav' } }, 'audio'],
  ['an input_audio part', { messages: spokenInput }, 'messages[0].content[1]'],
  ['an audio_url part', { messages: [...text, { role: 'assistant', content: 'Send it.' }, ...audioUrlInput] }, 'messages[2].content[1]'],
];

t.test('a priced chat request asking for audio is refused before anything is reserved or forwarded', async (t) => {
  const node = await startScriptedUpstreamNode(t);
  node.answer(answer);
  for (const [what, request, param] of AUDIO_REQUESTS) {
    const { status, text: body, record } = await node.post('/v1/chat/completions', { model: 'echo', ...request });
    t.equal(status, 400, `${what}: refused`);
    t.match(JSON.parse(body), { error: { code: 'ZN_ERR_INVALID_REQUEST', param, message: new RegExp(`^Invalid request: ${param.replace(/[[\]]/g, '\\$&')}: .*above the price this node charges$`) } }, `${what}: names ${param}`);
    t.equal(record.cost.reservedMicros, 0, `${what}: nothing reserved`);
  }
  t.equal(node.calls(), 0, 'nothing forwarded');
  t.equal((await node.post('/v1/chat/completions', { model: 'echo', messages: text, modalities: ['text'], audio: null })).status, 200, 'text-only modalities and a null audio pass');
});

t.test('an unpriced chat request may ask for audio: it bills nothing', async (t) => {
  const node = await startScriptedUpstreamNode(t);
  node.answer(answer);
  for (const [what, request] of AUDIO_REQUESTS) {
    const { status, record } = await node.post('/v1/chat/completions', { model: 'echo-2', ...request });
    t.equal(status, 200, `${what}: forwarded`);
    t.equal(record.cost.priced, false, `${what}: unpriced`);
  }
  t.equal(node.calls(), AUDIO_REQUESTS.length);
});
