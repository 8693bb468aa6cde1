// Output rules over a streamed OpenAI-compatible answer whose `delta.content` is an array of text
// parts (`[{type:'text', text}]`, as some compatible servers send), through a listening node and a
// scripted upstream: each part's text (and a refusal part's refusal) is checked (masked in place,
// or blocking the stream) as a string content is, and counts as the answer's text for the output
// token estimate.
import t from 'tap';
import { estimateTokens } from '../../../edge-node/src/providers/token-estimate.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { startGuardedNode } from './guarded-node.js';
import { sseData } from './scripted-upstream.js';

const EMAIL = 'alice.secret@example.com';
const chunk = (delta: Record<string, unknown>, finish: string | null = null): string =>
  `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'demo-echo', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
const parts = (...texts: string[]): Array<{ type: string; text: string }> => texts.map((text) => ({ type: 'text', text }));
const DONE = 'data: [DONE]\n\n';

/** The text the caller's chunks carry: string contents and the `text` of content parts, in order. */
function deliveredText(body: string): string {
  let text = '';
  for (const data of sseData(body)) {
    if (!data.startsWith('{')) continue;
    const content = (JSON.parse(data) as { choices?: Array<{ delta?: { content?: unknown } }> }).choices?.[0]?.delta?.content;
    if (typeof content === 'string') text += content;
    else if (Array.isArray(content)) for (const part of content as Array<{ text?: string }>) text += part.text ?? '';
  }
  return text;
}

t.test('output rules over streamed content parts', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [
    { detector: 'email', action: 'mask', on: 'output' },
    { detector: 'keywords', keywords: ['aurora'], action: 'block', on: 'output' },
  ]);
  const streamBody = async (): Promise<{ body: string; requestId: string | null }> => {
    const res = await fetch(`${node.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
      body: JSON.stringify({ model: 'echo', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
    });
    return { body: await res.text(), requestId: res.headers.get('x-request-id') };
  };

  await t.test('an e-mail in a content part is masked, and the parts’ text is the output the usage is estimated from', async (t) => {
    upstream.answer = { sse: [chunk({ role: 'assistant', content: parts('write to ', `${EMAIL} today`) }), chunk({ content: parts(' or later') }), chunk({}, 'stop'), DONE] };
    const { body, requestId } = await streamBody();
    t.notMatch(body, EMAIL);
    const delivered = deliveredText(body);
    t.equal(delivered, 'write to [EMAIL] today or later');
    t.match(body, /"content":\[\{"type":"text","text":"/, 'the parts keep their framing');
    t.match(body, /data: \[DONE\]\n\n$/);
    const done = await waitFor(() => node.finished.find((f) => f.requestId === requestId), { what: 'the finished request' });
    t.same(
      done.usage,
      { inputTokens: done.usage.inputTokens, outputTokens: estimateTokens(`write to ${EMAIL} today or later`), estimated: true },
      'no upstream usage: estimated from the parts’ text as the model wrote it (the e-mail, not its shorter placeholder)',
    );
  });

  await t.test('a blocked keyword in a content part ends the stream with the guardrail code and is never sent', async (t) => {
    upstream.answer = { sse: [chunk({ role: 'assistant', content: parts('the code name is aurora') }), chunk({}, 'stop'), DONE] };
    const { body } = await streamBody();
    t.notMatch(body, /aurora/);
    t.match(body, /"code":"ZN_ERR_GUARDRAIL_BLOCKED"/);
    t.notMatch(body, /\[DONE\]/);
  });

  await t.test('an e-mail in a refusal part is masked, and a blocked keyword there ends the stream', async (t) => {
    upstream.answer = { sse: [chunk({ role: 'assistant', content: [{ type: 'refusal', refusal: `I will not mail ${EMAIL}` }] }), chunk({}, 'stop'), DONE] };
    const masked = (await streamBody()).body;
    t.notMatch(masked, EMAIL);
    t.match(masked, /\[EMAIL\]/);
    t.match(masked, /data: \[DONE\]\n\n$/);
    upstream.answer = { sse: [chunk({ role: 'assistant', content: [{ type: 'refusal', refusal: 'not about aurora' }] }), chunk({}, 'stop'), DONE] };
    const blocked = (await streamBody()).body;
    t.notMatch(blocked, /aurora/);
    t.match(blocked, /"code":"ZN_ERR_GUARDRAIL_BLOCKED"/);
  });
});
