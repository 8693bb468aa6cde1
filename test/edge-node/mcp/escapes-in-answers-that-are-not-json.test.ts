// Event data or a body labelled JSON that does not parse is checked as written, and masked as
// written; it is read again with its JSON escapes decoded (Python writes `机密` as `\u673a\u5bc6`)
// only to find what hides behind them. Such a match blocks it: masking would have to send the
// decoded text, turning `\n` in `C:\new` into a newline (a second `data:` line in an event).
import t from 'tap';
import type { GuardrailPolicy } from '../../../proto/src/index.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { newCallerKey } from '../config-fixtures.js';
import { REPORT_CALL, startGuardedToolNode, toolServerAnswering } from './guarded-tool-node.js';
import { postRawMcp } from './priced-tool-node.js';

const caller = newCallerKey();
const EMAIL_MASK: GuardrailPolicy['rules'] = [{ detector: 'email', action: 'mask', on: 'output' }];
const KEYWORD_MASK: GuardrailPolicy['rules'] = [{ detector: 'keywords', keywords: ['机密'], action: 'mask', on: 'output' }];
/** Plain text with backslashes that read as JSON escapes (`\n`, `\t`) though they are a path. */
const WINDOWS_PATH_TEXT = 'report saved to C:\\new\\table.txt by zhang.san@example.com';
const WINDOWS_PATH_MASKED = 'report saved to C:\\new\\table.txt by [EMAIL]';
/** `机密 report` with the keyword as json.dumps escapes it, in text that is not JSON. */
const ESCAPED_SECRET_TEXT = 'result: \\u673a\\u5bc6 report';

t.test('event data that is not JSON goes out byte for byte with only the email masked, its backslashes kept', async (t) => {
  const tool = await toolServerAnswering(t, 'text/event-stream', `event: message\ndata: ${WINDOWS_PATH_TEXT}\n\n`);
  const node = await startGuardedToolNode(t, caller, tool.url, EMAIL_MASK);
  const res = await postRawMcp(node.url, caller, REPORT_CALL);
  t.equal(res.status, 200);
  t.equal(res.text, `event: message\ndata: ${WINDOWS_PATH_MASKED}\n\n`);
});

t.test('a body labelled JSON that does not parse goes out byte for byte with only the email masked, its backslashes kept', async (t) => {
  const tool = await toolServerAnswering(t, 'application/json', WINDOWS_PATH_TEXT);
  const node = await startGuardedToolNode(t, caller, tool.url, EMAIL_MASK);
  const res = await postRawMcp(node.url, caller, REPORT_CALL);
  t.equal(res.status, 200);
  t.equal(res.text, WINDOWS_PATH_MASKED);
  await waitFor(() => node.records.length === 1, { what: 'the record' });
  t.equal(node.records[0]?.status, 'ok');
});

t.test('event data that is not JSON whose keyword a mask rule finds only with its escapes decoded is blocked, not sent decoded', async (t) => {
  const tool = await toolServerAnswering(t, 'text/event-stream', `event: message\ndata: ${ESCAPED_SECRET_TEXT}\n\n`);
  const node = await startGuardedToolNode(t, caller, tool.url, KEYWORD_MASK);
  const res = await postRawMcp(node.url, caller, REPORT_CALL);
  t.equal(res.status, 200, 'the stream had started');
  t.notOk(res.text.includes('u673a') || res.text.includes('机密') || res.text.includes(' report'), 'nothing of the event was sent');
  t.match(res.text, /"id":1,"error":\{"code":-32000,.*"data":\{"code":"ZN_ERR_GUARDRAIL_BLOCKED"\}/, 'the call is answered with the block');
  await waitFor(() => node.records.length === 1, { what: 'the record' });
  t.match(node.records[0], { status: 'rejected', errorCode: 'ZN_ERR_GUARDRAIL_BLOCKED' });
});

t.test('a body labelled JSON that does not parse whose keyword a mask rule finds only with its escapes decoded is blocked, not sent decoded', async (t) => {
  const tool = await toolServerAnswering(t, 'application/json', ESCAPED_SECRET_TEXT);
  const node = await startGuardedToolNode(t, caller, tool.url, KEYWORD_MASK);
  const res = await postRawMcp(node.url, caller, REPORT_CALL);
  t.equal(res.status, 400);
  t.equal((JSON.parse(res.text) as { error: { code: string } }).error.code, 'ZN_ERR_GUARDRAIL_BLOCKED');
  t.notOk(res.text.includes('u673a') || res.text.includes('机密') || res.text.includes(' report'), 'nothing of the answer reached the caller');
  await waitFor(() => node.records.length === 1, { what: 'the record' });
  t.match(node.records[0], { status: 'rejected', errorCode: 'ZN_ERR_GUARDRAIL_BLOCKED' });
});
