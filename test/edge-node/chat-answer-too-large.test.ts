// A chat or messages JSON answer past the 32 MiB bound is refused with a 502 after the upstream
// did (and billed) the work: it is not sent again (each route here would retry once) and it is
// charged the prompt estimate, marked estimated, rather than nothing (docs/billing.md). Its output
// was never read, so none is charged.
import type http from 'node:http';
import t from 'tap';
import { MAX_UPSTREAM_JSON_BYTES } from '../../edge-node/src/providers/upstream-call.js';
import { PRICE, startScriptedUpstreamNode } from './billing/scripted-upstream-node.js';
import type { Answer } from './billing/scripted-upstream-node.js';

function jsonText(text: string): Answer {
  return (res: http.ServerResponse) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(text);
  };
}

const huge = 'z'.repeat(MAX_UPSTREAM_JSON_BYTES);
const cases: Array<[string, string, unknown, string]> = [
  ['a chat completion', '/v1/chat/completions', { model: 'echo', messages: [{ role: 'user', content: 'y'.repeat(400) }] },
    JSON.stringify({ id: 'c1', object: 'chat.completion', created: 1, model: 'demo-echo', choices: [{ index: 0, message: { role: 'assistant', content: huge }, finish_reason: 'stop' }], usage: { prompt_tokens: 100, completion_tokens: 9_000_000, total_tokens: 9_000_100 } })],
  ['an Anthropic message', '/v1/messages', { model: 'claude', max_tokens: 100, messages: [{ role: 'user', content: 'y'.repeat(400) }] },
    JSON.stringify({ id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-real', content: [{ type: 'text', text: huge }], stop_reason: 'end_turn', stop_sequence: null, usage: { input_tokens: 100, output_tokens: 9_000_000 } })],
];

for (const [what, path, body, answer] of cases) {
  t.test(`${what} whose JSON answer is past the bound is refused, not sent again, and charged the prompt estimate`, async (t) => {
    const node = await startScriptedUpstreamNode(t);
    node.answer(jsonText(answer));
    const { status, text, record } = await node.post(path, body);
    t.equal(status, 502);
    t.match(text, /ZN_ERR_UPSTREAM_ERROR|api_error/);
    t.notMatch(text, /zzzz/, 'nothing of the answer is quoted');
    t.equal(node.calls(), 1, 'not retried: the upstream did the work and answered');
    t.match(record, { status: 'failed', httpStatus: 502, errorCode: 'ZN_ERR_UPSTREAM_ERROR' });
    t.ok(record.upstream, 'the record names the upstream that did the work');
    t.equal(record.usage.estimated, true, 'no usage was read: estimated');
    t.ok(record.usage.inputTokens >= 100, `the prompt estimate (${record.usage.inputTokens} tokens for 400 characters)`);
    t.equal(record.usage.outputTokens, 0, 'no output was read or delivered');
    t.equal(record.cost.costMicros, record.usage.inputTokens * PRICE.inputMicrosPerToken, 'charged the input at its price, not 0');
  });
}
