// /mcp/{server} relays MCP without changing the protocol: a tool call's arguments reach the tool
// server as the caller wrote them, and a JSON answer reaches the caller as the tool server wrote it
// (64-bit ids are not rounded, 1.10 stays 1.10), as event streams always were. Only what the node
// had to rewrite — a guardrail mask, or a duplicate key whose dropped value nothing checked or
// counted — goes out re-serialised from what was checked.
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
import { CALL_MICROS, postRawMcp, rawToolServer, startPricedToolNode } from './priced-tool-node.js';

const EMAIL = 'zhang.san@example.com';
const plain = newCallerKey();
const guarded = newCallerKey();

/** A tools/call whose arguments hold an integer past 2^53 and a decimal written with a trailing zero. */
const CALL = '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"lookup","arguments":{"orderId":9007199254740993,"amount":1.10}}}';
/** The tool server's answer, with a 64-bit id and numbers JSON.stringify would write otherwise. */
const RESULT = '{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"found"}],"structuredContent":{"orderId":1234567890123456789,"price":1.10,"ratio":1.0}}}';

/** A node whose key `guarded` masks e-mail addresses both ways and whose key `plain` has no policy. */
async function startNode(t: Test, toolServerUrl: string): Promise<{ url: string; records: RequestRecord[] }> {
  const records: RequestRecord[] = [];
  const spool: RequestSpool = { open: () => undefined, finalise: async (record) => void records.push(record), keepsBodies: () => true, fullness: () => 0 };
  const rules: GuardrailPolicy['rules'] = [{ detector: 'email', action: 'mask', on: 'both' }];
  const bundle = testBundle({
    nodeId: 'node-mcp', version: 5, upstreamUrl: 'http://127.0.0.1:9/v1',
    keys: [bundleKey('key-plain', plain.sha256), bundleKey('key-guarded', guarded.sha256, { guardrailPolicyId: 'p' })],
    node: { surfaces: ['model', 'tools'], spool: { quotaBytes: 1 << 20, fullPolicy: 'reject' } },
    toolServers: [{ name: 'tools', url: toolServerUrl, apiKey: 'mcp-tool-server-key-for-tests-0042', timeoutMs: 10_000, callMicros: 0 }],
    guardrailPolicies: [policy('p', rules)],
  });
  const app = await buildApp({ holder: ConfigHolder.ready(fromBundle(bundle)), logger: createLogger({ level: 'silent' }), services: { nodeId: bundle.nodeId, spool } });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  return { url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/mcp/tools`, records };
}

/** A tool server that answers every POST with `answer` as JSON or as one event. */
async function answeringToolServer(t: Test, mode: 'json' | 'sse', answer: string): Promise<{ url: string; bodies: string[] }> {
  return rawToolServer(t, (_req: http.IncomingMessage, res: http.ServerResponse) => {
    if (mode === 'json') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(answer);
    } else {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end(`event: message\ndata: ${answer}\n\n`);
    }
  });
}


for (const mode of ['json', 'sse'] as const) {
  t.test(`a tool call's 64-bit integers and number forms reach the tool server, and its answer's the caller, as written (${mode} answer)`, async (t) => {
    const tool = await answeringToolServer(t, mode, RESULT);
    const node = await startNode(t, tool.url);
    const got = await postRawMcp(node.url, plain, CALL);
    t.equal(got.status, 200);
    t.equal(tool.bodies[0], CALL, 'the tool server got the caller\'s bytes: orderId 9007199254740993, not 9007199254740992');
    if (mode === 'json') t.equal(got.text, RESULT, 'the caller got the tool server\'s bytes');
    else t.equal(got.text, `event: message\ndata: ${RESULT}\n\n`, 'the caller got the tool server\'s event');
    await waitFor(() => node.records.length === 1, { what: 'the record' });
    t.equal(node.records[0]!.bodies?.request, CALL, 'the record keeps the request as it was sent');
  });

  t.test(`a key whose guardrails check the call but mask nothing still relays it as written (${mode} answer)`, async (t) => {
    const tool = await answeringToolServer(t, mode, RESULT);
    const node = await startNode(t, tool.url);
    const got = await postRawMcp(node.url, guarded, CALL);
    t.equal(tool.bodies[0], CALL);
    t.ok(got.text.includes('"structuredContent":{"orderId":1234567890123456789,"price":1.10,"ratio":1.0}'), 'the answer is as written');
  });
}

t.test('a request or answer a mask rewrote goes out re-serialised, with the masked text only', async (t) => {
  const answer = `{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"mail ${EMAIL}"}],"structuredContent":{"price":1.10}}}`;
  const tool = await answeringToolServer(t, 'json', answer);
  const node = await startNode(t, tool.url);
  const call = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"send","arguments":{"to":"${EMAIL}","amount":1.10}}}`;
  const got = await postRawMcp(node.url, guarded, call);
  t.equal(got.status, 200);
  const sent = tool.bodies[0]!;
  t.notOk(sent.includes(EMAIL), 'the tool server never sees the masked address');
  t.equal(sent, JSON.stringify(JSON.parse(sent)), 'the masked request is the checked payload re-serialised');
  t.notOk(got.text.includes(EMAIL), 'the caller never sees the masked address');
  t.equal(got.text, JSON.stringify(JSON.parse(got.text)), 'the masked answer is re-serialised');
  await waitFor(() => node.records.length === 1, { what: 'the record' });
  t.notOk(JSON.stringify(node.records[0]).includes(EMAIL), 'nor does the record keep it');
});

t.test('a request with a duplicate key goes out re-serialised from what was checked and charged, not as written', async (t) => {
  const tool = await rawToolServer(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('{"jsonrpc":"2.0","id":1,"result":{"content":[],"note":"first","note":"last"}}');
  });
  const node = await startPricedToolNode(t, tool.url);
  // JSON.parse keeps the last `method`; a tool server that kept the first would run an uncharged call.
  const res = await fetch(node.url, {
    method: 'POST',
    headers: { ...node.auth, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: '{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call","params":{"name":"echo","arguments":{}}}',
  });
  t.equal(res.status, 200);
  t.equal(await res.text(), '{"jsonrpc":"2.0","id":1,"result":{"content":[],"note":"last"}}', 'an answer with a duplicate key goes out as checked, too');
  const sent = tool.bodies[0]!;
  t.equal(sent.match(/"method"/g)?.length, 1, 'the tool server gets one method');
  t.same(JSON.parse(sent), { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'echo', arguments: {} } }, 'the one the node counted');
  await waitFor(() => node.records.length === 1 && node.lease().reserved === 0, { what: 'the record and the reservation settled' });
  t.match(node.records[0], { upstreamModel: 'tools/call', cost: { costMicros: CALL_MICROS } }, 'charged for the call that was sent');
});
