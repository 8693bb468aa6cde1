// A stream request whose upstream ignored `stream: true` and answered 200 with a whole JSON answer:
// the caller still gets the 502 (the node does not turn it into a stream), but the upstream did, and
// bills, the work, so the request is charged: the answer's own usage when it gave one, else the
// prompt estimate (as an answer past its bound is), and the target is not sent it again (each route
// here would retry once). A JSON error object stays uncharged (docs/billing.md, "Stage settle").
import type http from 'node:http';
import t from 'tap';
import { PRICE, startScriptedUpstreamNode } from './billing/scripted-upstream-node.js';
import type { Answer } from './billing/scripted-upstream-node.js';

function jsonText(text: string): Answer {
  return (res: http.ServerResponse) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(text);
  };
}

const prompt = 'y'.repeat(400);
const surfaces = {
  chat: {
    path: '/v1/chat/completions',
    body: { model: 'echo', stream: true, messages: [{ role: 'user', content: prompt }] },
    answer: (usage: unknown) => ({ id: 'c1', object: 'chat.completion', created: 1, model: 'demo-echo', choices: [{ index: 0, message: { role: 'assistant', content: 'hello there' }, finish_reason: 'stop' }], ...(usage === undefined ? {} : { usage }) }),
    usage: { prompt_tokens: 700, completion_tokens: 300, total_tokens: 1000 },
    error: { error: { message: 'overloaded', type: 'invalid_request_error', code: 'bad' } },
  },
  messages: {
    path: '/v1/messages',
    body: { model: 'claude', max_tokens: 500, stream: true, messages: [{ role: 'user', content: prompt }] },
    answer: (usage: unknown) => ({ id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-real', content: [{ type: 'text', text: 'hello there' }], stop_reason: 'end_turn', stop_sequence: null, ...(usage === undefined ? {} : { usage }) }),
    usage: { input_tokens: 700, output_tokens: 300 },
    error: { type: 'error', error: { type: 'invalid_request_error', message: 'bad' } },
  },
};

for (const [surface, s] of Object.entries(surfaces)) {
  t.test(`${surface}: a stream request answered with a whole JSON answer and its usage is a 502, not sent again, charged that usage at its price`, async (t) => {
    const node = await startScriptedUpstreamNode(t);
    node.answer(jsonText(JSON.stringify(s.answer(s.usage))));
    const { status, text, record } = await node.post(s.path, s.body);
    t.equal(status, 502);
    t.match(text, /did not answer the stream request with an event stream/);
    t.equal(node.calls(), 1, 'not retried: the upstream did the work and billed it');
    t.match(record, { status: 'failed', httpStatus: 502, errorCode: 'ZN_ERR_UPSTREAM_ERROR' });
    t.ok(record.upstream, 'the record names the upstream that did the work');
    t.same({ inputTokens: record.usage.inputTokens, outputTokens: record.usage.outputTokens, estimated: record.usage.estimated }, { inputTokens: 700, outputTokens: 300, estimated: false }, "the upstream's own counts");
    t.equal(record.cost.costMicros, 700 * PRICE.inputMicrosPerToken + 300 * PRICE.outputMicrosPerToken, 'charged as an answer with that usage would be');
  });

  t.test(`${surface}: a stream request answered with a whole JSON answer without usage is charged the prompt estimate`, async (t) => {
    const node = await startScriptedUpstreamNode(t);
    node.answer(jsonText(JSON.stringify(s.answer(undefined))));
    const { status, record } = await node.post(s.path, s.body);
    t.equal(status, 502);
    t.equal(node.calls(), 1, 'not retried');
    t.match(record, { status: 'failed', errorCode: 'ZN_ERR_UPSTREAM_ERROR' });
    t.equal(record.usage.estimated, true, 'no usage came: estimated');
    t.ok(record.usage.inputTokens >= 100, `the prompt estimate (${record.usage.inputTokens} tokens for 400 characters)`);
    t.equal(record.usage.outputTokens, 0, 'no output was delivered');
    t.equal(record.cost.costMicros, record.usage.inputTokens * PRICE.inputMicrosPerToken, 'charged the input at its price, not 0');
  });

  t.test(`${surface}: a stream request answered with a 200 JSON error object blaming the request is charged nothing`, async (t) => {
    const node = await startScriptedUpstreamNode(t);
    node.answer(jsonText(JSON.stringify(s.error)));
    const { record } = await node.post(s.path, s.body);
    t.equal(record.status, 'failed');
    t.equal(record.cost.costMicros, 0);
  });
}

t.test('a whole JSON chat answer past an error body’s 64 KiB is read whole and charged its usage too', async (t) => {
  const node = await startScriptedUpstreamNode(t);
  const answer = { ...surfaces.chat.answer(surfaces.chat.usage), choices: [{ index: 0, message: { role: 'assistant', content: 'x'.repeat(100_000) }, finish_reason: 'stop' }] };
  node.answer(jsonText(JSON.stringify(answer)));
  const { status, record } = await node.post(surfaces.chat.path, surfaces.chat.body);
  t.equal(status, 502);
  t.equal(node.calls(), 1, 'not retried');
  t.equal(record.cost.costMicros, 700 * PRICE.inputMicrosPerToken + 300 * PRICE.outputMicrosPerToken);
});
