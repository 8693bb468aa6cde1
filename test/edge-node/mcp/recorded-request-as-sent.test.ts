// The record keeps a POST's body as the tool server got it. A body the node had to re-serialise (an
// input mask rewrote it, or it held a duplicate key) is sent with its integers past 2^53 written as
// the numbers they were (a 64-bit JSON-RPC id, an order number); the record must hold that very
// text, not a second serialisation that writes them as strings of their digits.
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

const masked = newCallerKey();
const plain = newCallerKey();
const ANSWER = '{"jsonrpc":"2.0","id":12345678901234567890,"result":{}}';

async function startNode(t: Test): Promise<{ url: string; records: RequestRecord[]; bodies: string[] }> {
  const tool = await rawToolServer(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(ANSWER);
  });
  const records: RequestRecord[] = [];
  const spool: RequestSpool = { open: () => undefined, finalise: async (record) => void records.push(record), keepsBodies: () => true, fullness: () => 0 };
  const rules: GuardrailPolicy['rules'] = [{ detector: 'email', action: 'mask', on: 'input' }];
  const bundle = testBundle({
    nodeId: 'node-mcp', version: 5, upstreamUrl: 'http://127.0.0.1:9/v1',
    keys: [bundleKey('key-masked', masked.sha256, { guardrailPolicyId: 'p' }), bundleKey('key-plain', plain.sha256)],
    node: { surfaces: ['model', 'tools'], spool: { quotaBytes: 1 << 20, fullPolicy: 'reject' } },
    toolServers: [{ name: 'tools', url: tool.url, apiKey: null, timeoutMs: 10_000, callMicros: 0 }],
    guardrailPolicies: [policy('p', rules)],
  });
  const app = await buildApp({ holder: ConfigHolder.ready(fromBundle(bundle)), logger: createLogger({ level: 'silent' }), services: { nodeId: bundle.nodeId, spool } });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  return { url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/mcp/tools`, records, bodies: tool.bodies };
}

t.test('a request an input mask rewrote is recorded as the text sent, its integers past 2^53 as the numbers they were', async (t) => {
  const node = await startNode(t);
  const res = await postRawMcp(node.url, masked, '{"jsonrpc":"2.0","id":12345678901234567890,"method":"tools/call","params":{"name":"mail","arguments":{"to":"zhang.san@example.com","order":98765432109876543210}}}');
  t.equal(res.status, 200);
  await waitFor(() => node.records.length === 1, { what: 'the record' });
  const sent = node.bodies[0]!;
  t.notOk(sent.includes('zhang.san@example.com'), 'the mask rewrote what was sent');
  t.match(sent, /"id":12345678901234567890,.*"order":98765432109876543210/, 'sent with the integers as numbers');
  t.equal(node.records[0]!.bodies?.request, sent, 'the record holds the text sent');
});

t.test('a request with a duplicate key is recorded as the text sent, its integers past 2^53 as the numbers they were', async (t) => {
  const node = await startNode(t);
  const res = await postRawMcp(node.url, plain, '{"jsonrpc":"2.0","id":12345678901234567890,"method":"tools/call","params":{"name":"a","name":"b","arguments":{"order":98765432109876543210}}}');
  t.equal(res.status, 200);
  await waitFor(() => node.records.length === 1, { what: 'the record' });
  const sent = node.bodies[0]!;
  t.equal(sent, '{"jsonrpc":"2.0","id":12345678901234567890,"method":"tools/call","params":{"name":"b","arguments":{"order":98765432109876543210}}}', 're-serialised from what was checked');
  t.equal(node.records[0]!.bodies?.request, sent, 'the record holds the text sent');
});
