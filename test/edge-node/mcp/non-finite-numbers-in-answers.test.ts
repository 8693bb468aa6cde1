// A Python tool server's answers are written by json.dumps, which escapes every character past ASCII
// (`机密` as `\u673a\u5bc6`) and writes a float that is not finite as `NaN`, `Infinity` or
// `-Infinity`, which JSON.parse refuses (MCP's Python client reads them). Such an answer is still a
// message: output rules read its strings decoded, so a keyword rule on non-ASCII text fires, and the
// event answering the call is held until the record is committed. It goes to the caller as written;
// re-serialised by a mask, the non-finite numbers become null. A JSON answer or event data that does
// not parse at all is also read with its JSON escapes decoded; a match only there blocks it.
import type http from 'node:http';
import t from 'tap';
import type { GuardrailPolicy } from '../../../proto/src/index.js';
import { HOLD_FROM_HERE, holdCompletingEvent } from '../../../edge-node/src/providers/mcp/mcp-answer-hold.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { newCallerKey } from '../config-fixtures.js';
import { REPORT_CALL, startGuardedToolNode, toolServerAnswering } from './guarded-tool-node.js';
import { postRawMcp, rawToolServer } from './priced-tool-node.js';

const caller = newCallerKey();
/** What json.dumps writes for {"text": "机密 report"}: the characters past ASCII escaped. */
const SECRET_TEXT = '\\u673a\\u5bc6 report';
/** The answer to REPORT_CALL as json.dumps writes it, holding `extra` in its structuredContent. */
const pythonAnswer = (text: string, extra: string): string => `{"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "${text}"}], "structuredContent": {${extra}}}}`;
/** How long a tool server waits for the node to close its stream before it ends it by itself. */
const GIVE_UP_MS = 5000;

const KEYWORD_BLOCK: GuardrailPolicy['rules'] = [{ detector: 'keywords', keywords: ['机密'], action: 'block', on: 'output' }];

for (const extra of ['"score": NaN', '"high": Infinity, "low": -Infinity']) {
  t.test(`a keyword rule on non-ASCII text blocks a JSON answer whose text Python escaped and which holds ${extra.includes('NaN') ? 'NaN' : 'Infinity and -Infinity'}`, async (t) => {
    const tool = await toolServerAnswering(t, 'application/json', pythonAnswer(SECRET_TEXT, extra));
    const node = await startGuardedToolNode(t, caller, tool.url, KEYWORD_BLOCK);
    const res = await postRawMcp(node.url, caller, REPORT_CALL);
    t.equal(res.status, 400);
    t.equal((JSON.parse(res.text) as { error: { code: string } }).error.code, 'ZN_ERR_GUARDRAIL_BLOCKED');
    t.notOk(res.text.includes('u673a'), 'nothing of the answer reached the caller');
    await waitFor(() => node.records.length === 1, { what: 'the record' });
    t.match(node.records[0], { status: 'rejected', errorCode: 'ZN_ERR_GUARDRAIL_BLOCKED' });
  });

  t.test(`a keyword rule on non-ASCII text blocks an event whose text Python escaped and which holds ${extra.includes('NaN') ? 'NaN' : 'Infinity and -Infinity'}`, async (t) => {
    const tool = await toolServerAnswering(t, 'text/event-stream', `event: message\ndata: ${pythonAnswer(SECRET_TEXT, extra)}\n\n`);
    const node = await startGuardedToolNode(t, caller, tool.url, KEYWORD_BLOCK);
    const res = await postRawMcp(node.url, caller, REPORT_CALL);
    t.equal(res.status, 200, 'the stream had started');
    t.notOk(res.text.includes('u673a'), 'the blocked event was not sent');
    t.match(res.text, /"id":1,"error":\{"code":-32000,.*"data":\{"code":"ZN_ERR_GUARDRAIL_BLOCKED"\}/, 'the call is answered with the block');
    await waitFor(() => node.records.length === 1, { what: 'the record' });
    t.match(node.records[0], { status: 'rejected', errorCode: 'ZN_ERR_GUARDRAIL_BLOCKED' });
  });
}

t.test('an answer holding NaN that no rule matches goes on as written; one a mask rewrote goes re-serialised, NaN as null', async (t) => {
  for (const mode of ['json', 'sse'] as const) {
    const clean = pythonAnswer('\\u62a5\\u544a ok', '"score": NaN, "n": -Infinity');
    const withEmail = pythonAnswer('mail zhang.san@example.com', '"score": NaN');
    for (const [answer, masked] of [[clean, false], [withEmail, true]] as const) {
      const tool = await toolServerAnswering(t, mode === 'json' ? 'application/json' : 'text/event-stream', mode === 'json' ? answer : `event: message\ndata: ${answer}\n\n`);
      const node = await startGuardedToolNode(t, caller, tool.url, [{ detector: 'email', action: 'mask', on: 'output' }]);
      const res = await postRawMcp(node.url, caller, REPORT_CALL);
      t.equal(res.status, 200);
      const data = mode === 'json' ? res.text : res.text.replace(/^event: message\ndata: /, '').replace(/\n\n$/, '');
      if (!masked) {
        t.equal(data, answer, `${mode}: byte for byte, NaN and -Infinity as written`);
        continue;
      }
      const sent = JSON.parse(data) as { result: { content: Array<{ text: string }>; structuredContent: { score: unknown } } };
      t.notOk(data.includes('zhang.san@example.com'), `${mode}: the address is masked`);
      t.not(sent.result.content[0]!.text, 'mail zhang.san@example.com', `${mode}: the text was rewritten`);
      t.equal(sent.result.structuredContent.score, null, `${mode}: re-serialised as JSON, NaN as null`);
    }
  }
});

t.test('the event answering the call is held until the record is committed though it holds NaN', async (t) => {
  const answer = pythonAnswer('done', '"score": NaN');
  const tool = await rawToolServer(t, (_req: http.IncomingMessage, res: http.ServerResponse) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(`event: message\ndata: ${answer}\n\n`);
    // The stream stays open until the node closes it (its grace after the answer) or GIVE_UP_MS pass.
    const giveUp = setTimeout(() => res.end(), GIVE_UP_MS);
    res.once('close', () => clearTimeout(giveUp));
  });
  const node = await startGuardedToolNode(t, caller, tool.url, [{ detector: 'email', action: 'mask', on: 'output' }]);
  const res = await fetch(node.url, { method: 'POST', headers: { authorization: `Bearer ${caller.secret}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' }, body: REPORT_CALL });
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = '';
  while (!text.includes('"done"')) {
    const { value, done } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
  }
  t.equal(node.records.length, 1, 'the answer reached the caller only once the record was committed');
  t.equal(node.records[0]?.status, 'ok');
  await reader.cancel();

  // The hold itself, without a node: the event is the completing one.
  async function* source(): AsyncGenerator<Uint8Array> {
    yield Buffer.from(`event: message\ndata: ${answer}\n\n`);
  }
  const out: unknown[] = [];
  for await (const chunk of holdCompletingEvent(source(), new Set([1]), 1 << 20, { graceMs: 1000, maxBytes: 1 << 16, close: () => undefined })) {
    out.push(chunk === HOLD_FROM_HERE ? 'hold' : Buffer.from(chunk).toString());
  }
  t.same(out, ['hold', `event: message\ndata: ${answer}\n\n`], 'held from the answer on');
});

t.test('a JSON answer or event data that is not JSON at all is checked with its JSON escapes decoded', async (t) => {
  // Cut short (its last brace missing): no parse reads it.
  const cut = pythonAnswer(SECRET_TEXT, '"score": 1').slice(0, -1);
  for (const mode of ['json', 'sse'] as const) {
    const tool = await toolServerAnswering(t, mode === 'json' ? 'application/json' : 'text/event-stream', mode === 'json' ? cut : `event: message\ndata: ${cut}\n\n`);
    const node = await startGuardedToolNode(t, caller, tool.url, KEYWORD_BLOCK);
    const res = await postRawMcp(node.url, caller, REPORT_CALL);
    t.notOk(res.text.includes('u673a'), `${mode}: not relayed`);
    t.ok(res.text.includes('ZN_ERR_GUARDRAIL_BLOCKED'), `${mode}: blocked`);
  }
  // A mask matching only the decoded text blocks (it could only send that text, not the body as it
  // came); an unmatched body goes as it came.
  const masking: GuardrailPolicy['rules'] = [{ detector: 'keywords', keywords: ['机密'], action: 'mask', on: 'output' }];
  const tool = await toolServerAnswering(t, 'application/json', cut);
  const node = await startGuardedToolNode(t, caller, tool.url, masking);
  const res = await postRawMcp(node.url, caller, REPORT_CALL);
  t.equal(res.status, 400);
  t.notOk(res.text.includes('机密') || res.text.includes('u673a'), 'not relayed');
  t.ok(res.text.includes('ZN_ERR_GUARDRAIL_BLOCKED'), 'blocked');
  const plain = pythonAnswer('\\u62a5\\u544a', '"score": 1').slice(0, -1);
  const other = await toolServerAnswering(t, 'application/json', plain);
  const node2 = await startGuardedToolNode(t, caller, other.url, masking);
  t.equal((await postRawMcp(node2.url, caller, REPORT_CALL)).text, plain, 'nothing matched: as it came');
});
