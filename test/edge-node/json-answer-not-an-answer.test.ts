// A JSON request whose upstream answered 2xx JSON that is neither an error object nor an answer of
// the API asked (`{}`, `{"ok":true}`, an OpenAI completion from an "anthropic" upstream behind a
// misconfigured proxy) gets no answer from it: a 502 ZN_ERR_UPSTREAM_ERROR, tried again as a 5xx
// is (each route here retries once), recorded failed and charged nothing — as its stream twin is
// (stream-answered-json-charge) — never passed on as a billable 200 with no content.
import t from 'tap';
import { json, startScriptedUpstreamNode } from './billing/scripted-upstream-node.js';

const prompt = 'hello there, how are you doing today?';
const openAiCompletion = { id: 'c1', object: 'chat.completion', created: 1, model: 'x', choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }], usage: { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6 } };
const anthropicMessage = { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-real', content: [{ type: 'text', text: 'hi' }], stop_reason: 'end_turn', stop_sequence: null, usage: { input_tokens: 5, output_tokens: 1 } };

const surfaces = [
  { surface: 'messages', path: '/v1/messages', body: { model: 'claude', max_tokens: 50, messages: [{ role: 'user', content: prompt }] }, what: 'a message', others: [{}, { ok: true }, openAiCompletion], answer: anthropicMessage },
  { surface: 'chat', path: '/v1/chat/completions', body: { model: 'echo', messages: [{ role: 'user', content: prompt }] }, what: 'a chat completion', others: [{}, { ok: true }, anthropicMessage], answer: openAiCompletion },
];

for (const s of surfaces) {
  t.test(`${s.surface}: a 200 JSON body that is not ${s.what} is a 502, retried, recorded failed and charged nothing`, async (t) => {
    const node = await startScriptedUpstreamNode(t);
    for (const other of s.others) {
      node.answer(json(other));
      const { status, text, record } = await node.post(s.path, s.body);
      const what = JSON.stringify(other).slice(0, 40);
      t.equal(status, 502, `${what}: ${text}`);
      t.match(text, `JSON that is not ${s.what}`, what);
      t.equal(node.calls(), 2, `${what}: tried again, as a 5xx is`);
      t.match(record, { status: 'failed', errorCode: 'ZN_ERR_UPSTREAM_ERROR' }, what);
      t.equal(record.cost.costMicros, 0, `${what}: charged nothing`);
    }
  });

  t.test(`${s.surface}: one such body then ${s.what} on the retry answers the caller`, async (t) => {
    const node = await startScriptedUpstreamNode(t);
    node.answer(json({}), json(s.answer));
    const { status, record } = await node.post(s.path, s.body);
    t.equal(status, 200);
    t.equal(record.status, 'ok');
    t.ok(record.cost.costMicros > 0, 'charged the answer');
  });
}
