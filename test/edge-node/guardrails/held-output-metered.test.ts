// Text an output guardrail takes out of an answer is still output the model wrote and the upstream
// bills: when no usage comes (a stream stopped by a block before its usage chunk, a caller that
// leaves while a rule holds text back, a JSON answer without usage that a rule blocks), the output
// estimate counts all the text the rules saw, not only what reached the caller.
import t from 'tap';
import { estimateTokens } from '../../../edge-node/src/providers/token-estimate.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { startGuardedNode } from './guarded-node.js';
import { sseData } from './scripted-upstream.js';

const chunk = (content: string): string =>
  `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'demo-echo', choices: [{ index: 0, delta: { content }, finish_reason: null }] })}\n\n`;
/** The `delta.content` text of a chat stream's chunks. */
function sseContent(body: string): string {
  let text = '';
  for (const data of sseData(body)) {
    if (!data.startsWith('{')) continue;
    const content = (JSON.parse(data) as { choices?: Array<{ delta?: { content?: unknown } }> }).choices?.[0]?.delta?.content;
    if (typeof content === 'string') text += content;
  }
  return text;
}

const LONG = 'All of this paragraph is ordinary answer text the model wrote before it named the project. '.repeat(6);

t.test('a stream a block rule stops before its usage is charged the output the model wrote, held and blocked text included', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'keywords', keywords: ['aurora'], action: 'block', on: 'output' }]);
  const written = [LONG, 'and its code name is aurora, ', 'which the rest of this text goes on to describe at length.'];
  upstream.answer = { sse: written.map(chunk) };
  const res = await fetch(`${node.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
    body: JSON.stringify({ model: 'echo', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
  });
  const body = await res.text();
  t.match(body, /ZN_ERR_GUARDRAIL_BLOCKED/);
  t.notMatch(body, /aurora/);
  const requestId = res.headers.get('x-request-id');
  const done = await waitFor(() => node.finished.find((f) => f.requestId === requestId), { what: 'the finished request' });
  t.equal(done.usage.estimated, true, 'no usage came');
  const delivered = sseContent(body);
  t.ok(delivered.length < written[0]!.length, 'the rule held text back when it blocked');
  // The rules scan once enough text is held: the block comes with the chunk that names it or a later one.
  t.ok(done.usage.outputTokens >= estimateTokens(written[0]! + written[1]!), `estimated from all the text the rules saw (${done.usage.outputTokens} tokens)`);
  t.ok(done.usage.outputTokens <= estimateTokens(written.join('')), 'and no more than the upstream sent');
  t.ok(done.usage.outputTokens > estimateTokens(delivered), 'more than what was delivered');
});

t.test('a JSON answer without usage that a block rule refuses is charged the output it held', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'keywords', keywords: ['aurora'], action: 'block', on: 'output' }]);
  const content = `${LONG} The code name is aurora.`;
  upstream.answer = { json: { id: 'c', object: 'chat.completion', created: 1, model: 'm', choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }] } };
  const res = await fetch(`${node.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
    body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'hi' }] }),
  });
  t.equal(res.status, 400);
  t.match(await res.text(), /ZN_ERR_GUARDRAIL_BLOCKED/);
  const requestId = res.headers.get('x-request-id');
  const done = await waitFor(() => node.finished.find((f) => f.requestId === requestId), { what: 'the finished request' });
  t.same(done.usage, { inputTokens: done.usage.inputTokens, outputTokens: estimateTokens(content), estimated: true });
});
