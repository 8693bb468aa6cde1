// Event data or a body labelled JSON that does not parse is checked as written, and masked as
// written; it is read again with its JSON escapes decoded (Python writes `机密` as `\u673a\u5bc6`)
// only to find what hides behind them. Such a match blocks it: masking would have to send the
// decoded text, turning `\n` in `C:\new` into a newline (a second `data:` line in an event).
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import type { Test } from 'tap';
import type { GuardrailPolicy, RequestRecord } from '../../../proto/src/index.js';
import { buildApp } from '../../../edge-node/src/app.js';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import type { RequestSpool } from '../../../edge-node/src/spool/request-spool.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { bundleKey, newCallerKey, testBundle } from '../config-fixtures.js';
import { policy } from '../guardrails/guardrail-fixtures.js';
import { postRawMcp, rawToolServer } from './priced-tool-node.js';

const caller = newCallerKey();
const CALL = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"report","arguments":{}}}';
const EMAIL_MASK: GuardrailPolicy['rules'] = [{ detector: 'email', action: 'mask', on: 'output' }];
const KEYWORD_MASK: GuardrailPolicy['rules'] = [{ detector: 'keywords', keywords: ['机密'], action: 'mask', on: 'output' }];
/** Plain text with backslashes that read as JSON escapes (`\n`, `\t`) though they are a path. */
const WINDOWS_PATH_TEXT = 'report saved to C:\\new\\table.txt by zhang.san@example.com';
const WINDOWS_PATH_MASKED = 'report saved to C:\\new\\table.txt by [EMAIL]';
/** `机密 report` with the keyword as json.dumps escapes it, in text that is not JSON. */
const ESCAPED_SECRET_TEXT = 'result: \\u673a\\u5bc6 report';

async function startNode(t: Test, toolServerUrl: string, rules: GuardrailPolicy['rules']): Promise<{ url: string; records: RequestRecord[] }> {
  const records: RequestRecord[] = [];
  const spool: RequestSpool = { open: () => undefined, finalise: async (record) => void records.push(record), keepsBodies: () => true, fullness: () => 0 };
  const bundle = testBundle({
    nodeId: 'node-mcp', version: 5, upstreamUrl: 'http://127.0.0.1:9/v1',
    keys: [bundleKey('key-mcp', caller.sha256, { guardrailPolicyId: 'p' })],
    node: { surfaces: ['model', 'tools'], spool: { quotaBytes: 1 << 20, fullPolicy: 'reject' } },
    toolServers: [{ name: 'tools', url: toolServerUrl, apiKey: null, timeoutMs: 10_000, callMicros: 0 }],
    guardrailPolicies: [policy('p', rules)],
  });
  const app = await buildApp({ holder: ConfigHolder.ready(fromBundle(bundle)), logger: createLogger({ level: 'silent' }), services: { nodeId: bundle.nodeId, spool } });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  return { url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/mcp/tools`, records };
}

/** A tool server answering every POST with `body` under `contentType`. */
function answering(t: Test, contentType: string, body: string): Promise<{ url: string; bodies: string[] }> {
  return rawToolServer(t, (_req: http.IncomingMessage, res: http.ServerResponse) => {
    res.writeHead(200, { 'content-type': contentType });
    res.end(body);
  });
}

t.test('event data that is not JSON goes out byte for byte with only the email masked, its backslashes kept', async (t) => {
  const tool = await answering(t, 'text/event-stream', `event: message\ndata: ${WINDOWS_PATH_TEXT}\n\n`);
  const node = await startNode(t, tool.url, EMAIL_MASK);
  const res = await postRawMcp(node.url, caller, CALL);
  t.equal(res.status, 200);
  t.equal(res.text, `event: message\ndata: ${WINDOWS_PATH_MASKED}\n\n`);
});

t.test('a body labelled JSON that does not parse goes out byte for byte with only the email masked, its backslashes kept', async (t) => {
  const tool = await answering(t, 'application/json', WINDOWS_PATH_TEXT);
  const node = await startNode(t, tool.url, EMAIL_MASK);
  const res = await postRawMcp(node.url, caller, CALL);
  t.equal(res.status, 200);
  t.equal(res.text, WINDOWS_PATH_MASKED);
  await waitFor(() => node.records.length === 1, { what: 'the record' });
  t.equal(node.records[0]?.status, 'ok');
});

t.test('event data that is not JSON whose keyword a mask rule finds only with its escapes decoded is blocked, not sent decoded', async (t) => {
  const tool = await answering(t, 'text/event-stream', `event: message\ndata: ${ESCAPED_SECRET_TEXT}\n\n`);
  const node = await startNode(t, tool.url, KEYWORD_MASK);
  const res = await postRawMcp(node.url, caller, CALL);
  t.equal(res.status, 200, 'the stream had started');
  t.notOk(res.text.includes('u673a') || res.text.includes('机密') || res.text.includes(' report'), 'nothing of the event was sent');
  t.match(res.text, /"id":1,"error":\{"code":-32000,.*"data":\{"code":"ZN_ERR_GUARDRAIL_BLOCKED"\}/, 'the call is answered with the block');
  await waitFor(() => node.records.length === 1, { what: 'the record' });
  t.match(node.records[0], { status: 'rejected', errorCode: 'ZN_ERR_GUARDRAIL_BLOCKED' });
});

t.test('a body labelled JSON that does not parse whose keyword a mask rule finds only with its escapes decoded is blocked, not sent decoded', async (t) => {
  const tool = await answering(t, 'application/json', ESCAPED_SECRET_TEXT);
  const node = await startNode(t, tool.url, KEYWORD_MASK);
  const res = await postRawMcp(node.url, caller, CALL);
  t.equal(res.status, 400);
  t.equal((JSON.parse(res.text) as { error: { code: string } }).error.code, 'ZN_ERR_GUARDRAIL_BLOCKED');
  t.notOk(res.text.includes('u673a') || res.text.includes('机密') || res.text.includes(' report'), 'nothing of the answer reached the caller');
  await waitFor(() => node.records.length === 1, { what: 'the record' });
  t.match(node.records[0], { status: 'rejected', errorCode: 'ZN_ERR_GUARDRAIL_BLOCKED' });
});
