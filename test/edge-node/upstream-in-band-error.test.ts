// An HTTP 200 whose JSON body is an error object (`{"error":{…}}` on chat completions and
// embeddings, `{"type":"error","error":{…}}` on messages) is a failed attempt, not an answer: retried
// or fallen back from like an upstream 5xx unless it blames the request, and when it is the last
// word the caller gets ZN_ERR_UPSTREAM_ERROR (502) in its surface's error shape, recorded failed and
// charged nothing (docs/node-api.md, "Upstream failures").
import t from 'tap';
import { json, startScriptedUpstreamNode } from './billing/scripted-upstream-node.js';

const chatBody = { model: 'echo', max_tokens: 50, messages: [{ role: 'user', content: 'y'.repeat(400) }] };
const claudeBody = { model: 'claude', max_tokens: 50, messages: [{ role: 'user', content: 'y'.repeat(400) }] };
const embeddingsBody = { model: 'echo', input: 'y'.repeat(400) };

const chatAnswer = json({
  id: 'c1', object: 'chat.completion', created: 1, model: 'demo-echo',
  choices: [{ index: 0, message: { role: 'assistant', content: 'hello' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 100, completion_tokens: 2, total_tokens: 102 },
});
const claudeAnswer = json({
  id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-real', content: [{ type: 'text', text: 'hello' }],
  stop_reason: 'end_turn', stop_sequence: null, usage: { input_tokens: 100, output_tokens: 2 },
});
const openAiError = (type: string, code: string | null) => json({ error: { message: 'The server had an error', type, param: null, code } });
const anthropicError = (type: string) => json({ type: 'error', error: { type, message: 'Something went wrong' } });

t.test('a 200 whose body is an error object is a failed attempt, charged nothing', async (t) => {
  const node = await startScriptedUpstreamNode(t);

  await t.test('a chat completion that is an error object reaches the caller as a 502 in the OpenAI shape', async (t) => {
    node.answer(openAiError('server_error', 'internal_error'));
    const { status, text, record } = await node.post('/v1/chat/completions', chatBody);
    t.equal(status, 502);
    t.match(JSON.parse(text), { error: { code: 'ZN_ERR_UPSTREAM_ERROR', type: 'server_error' } });
    t.notMatch(text, /The server had an error/, 'the upstream text is not quoted');
    t.equal(node.calls(), 2, 'retried like a 5xx');
    t.match(record, { status: 'failed', errorCode: 'ZN_ERR_UPSTREAM_ERROR', httpStatus: 502 });
    t.equal(record.cost.costMicros, 0);
    t.same(record.attempts.map((a) => [a.outcome, a.httpStatus]), [['error', 200], ['error', 200]]);
  });

  await t.test('a retried chat completion that answers the second time is served', async (t) => {
    node.answer(openAiError('server_error', null), chatAnswer);
    const { status, text, record } = await node.post('/v1/chat/completions', chatBody);
    t.equal(status, 200);
    t.match(JSON.parse(text), { choices: [{ message: { content: 'hello' } }] });
    t.equal(record.status, 'ok');
    t.same(record.usage, { inputTokens: 100, outputTokens: 2, estimated: false });
  });

  await t.test('an error object that blames the request is final: not retried', async (t) => {
    node.answer(openAiError('invalid_request_error', 'context_length_exceeded'), chatAnswer);
    const { status, record } = await node.post('/v1/chat/completions', chatBody);
    t.equal(status, 502);
    t.equal(node.calls(), 1);
    t.match(record, { status: 'failed', errorCode: 'ZN_ERR_UPSTREAM_ERROR' });
    t.equal(record.cost.costMicros, 0);
  });

  await t.test('an embeddings answer that is an error object fails the same way', async (t) => {
    node.answer(openAiError('server_error', null));
    const { status, text, record } = await node.post('/v1/embeddings', embeddingsBody);
    t.equal(status, 502);
    t.match(JSON.parse(text), { error: { code: 'ZN_ERR_UPSTREAM_ERROR' } });
    t.equal(node.calls(), 2);
    t.match(record, { status: 'failed', errorCode: 'ZN_ERR_UPSTREAM_ERROR' });
    t.equal(record.cost.costMicros, 0);
  });

  await t.test('a messages answer that is an Anthropic error object reaches the caller in the Anthropic shape', async (t) => {
    node.answer(anthropicError('overloaded_error'));
    const { status, text, record } = await node.post('/v1/messages', claudeBody);
    t.equal(status, 502);
    t.match(JSON.parse(text), { type: 'error', error: { type: 'api_error', code: 'ZN_ERR_UPSTREAM_ERROR' } });
    t.equal(node.calls(), 2, 'overloaded_error is retried');
    t.match(record, { status: 'failed', errorCode: 'ZN_ERR_UPSTREAM_ERROR' });
    t.equal(record.cost.costMicros, 0);

    node.answer(anthropicError('overloaded_error'), claudeAnswer);
    const served = await node.post('/v1/messages', claudeBody);
    t.equal(served.status, 200, 'the retry answers');
    t.equal(served.record.status, 'ok');

    node.answer(anthropicError('invalid_request_error'), claudeAnswer);
    const refused = await node.post('/v1/messages', claudeBody);
    t.equal(refused.status, 502);
    t.equal(node.calls(), 1, 'invalid_request_error is final');
    t.equal(refused.record.cost.costMicros, 0);
  });
});
