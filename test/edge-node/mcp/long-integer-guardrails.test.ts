// /mcp relays JSON as written, so guardrails must check the digits that are relayed: JSON.parse
// rounds an integer past 2^53 (a 19-digit card to one that fails Luhn, an 18-digit resident ID to
// one whose check digit is wrong), and a check of the rounded value would let the exact digits
// through to the tool server, the caller and the record. Such integers are checked as their digits;
// a masked one goes out as the placeholder string, and a body no mask rewrote still goes as written.
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import type { Test } from 'tap';
import type { RequestRecord } from '../../../proto/src/index.js';
import { buildApp } from '../../../edge-node/src/app.js';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import type { RequestSpool } from '../../../edge-node/src/spool/request-spool.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { bundleKey, newCallerKey, testBundle } from '../config-fixtures.js';
import { policy } from '../guardrails/guardrail-fixtures.js';
import { postRawMcp, rawToolServer } from './priced-tool-node.js';

/** A Luhn-valid Visa number; JSON.parse makes it 4111111111111111000, which fails Luhn. */
const VISA_19 = '4111111111111111110';
/** A Luhn-valid 19-digit UnionPay-style number; JSON.parse makes it 6212345678901235000. */
const UNIONPAY_19 = '6212345678901234569';
/** A PRC resident ID with a valid check digit; JSON.parse makes it 440304199001011260. */
const RESIDENT_ID = '440304199001011233';
const LONG_NUMBERS = [VISA_19, UNIONPAY_19, RESIDENT_ID];

const plain = newCallerKey();
const guarded = newCallerKey();

/** A tools/call whose arguments hold the numbers as JSON numbers, under a 16-digit (safe) JSON-RPC id. */
const CALL = `{"jsonrpc":"2.0","id":1234567890123456,"method":"tools/call","params":{"name":"pay","arguments":{"card":${VISA_19},"unionPay":${UNIONPAY_19},"residentId":${RESIDENT_ID}}}}`;
/** The tool server's answer, with the same numbers as JSON numbers. */
const RESULT = `{"jsonrpc":"2.0","id":1234567890123456,"result":{"content":[{"type":"text","text":"ok"}],"structuredContent":{"card":${VISA_19},"unionPay":${UNIONPAY_19},"residentId":${RESIDENT_ID}}}}`;

/** A node whose key `guarded` masks bank cards and resident IDs both ways and whose key `plain` has no policy. */
async function startNode(t: Test, toolServerUrl: string): Promise<{ url: string; records: RequestRecord[] }> {
  const records: RequestRecord[] = [];
  const spool: RequestSpool = { open: () => undefined, finalise: async (record) => void records.push(record), keepsBodies: () => true, fullness: () => 0 };
  const bundle = testBundle({
    nodeId: 'node-mcp', version: 5, upstreamUrl: 'http://127.0.0.1:9/v1',
    keys: [bundleKey('key-plain', plain.sha256), bundleKey('key-guarded', guarded.sha256, { guardrailPolicyId: 'p' })],
    node: { surfaces: ['model', 'tools'], spool: { quotaBytes: 1 << 20, fullPolicy: 'reject' } },
    toolServers: [{ name: 'tools', url: toolServerUrl, apiKey: 'mcp-tool-server-key-for-tests-0042', timeoutMs: 10_000, callMicros: 0 }],
    guardrailPolicies: [policy('p', [{ detector: 'bank-card', action: 'mask', on: 'both' }, { detector: 'prc-resident-id', action: 'mask', on: 'both' }])],
  });
  const app = await buildApp({ holder: ConfigHolder.ready(fromBundle(bundle)), logger: createLogger({ level: 'silent' }), services: { nodeId: bundle.nodeId, spool } });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  return { url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/mcp/tools`, records };
}

/** A tool server that answers every POST with RESULT as JSON or as one event. */
async function answeringToolServer(t: Test, mode: 'json' | 'sse'): Promise<{ url: string; bodies: string[] }> {
  return rawToolServer(t, (_req: http.IncomingMessage, res: http.ServerResponse) => {
    res.writeHead(200, { 'content-type': mode === 'json' ? 'application/json' : 'text/event-stream' });
    res.end(mode === 'json' ? RESULT : `event: message\ndata: ${RESULT}\n\n`);
  });
}


function leaked(text: string): string[] {
  return LONG_NUMBERS.filter((digits) => text.includes(digits));
}

for (const mode of ['json', 'sse'] as const) {
  t.test(`cards and resident IDs written as JSON numbers past 2^53 are masked to the tool server, to the caller and in the record (${mode} answer)`, async (t) => {
    const tool = await answeringToolServer(t, mode);
    const node = await startNode(t, tool.url);
    const got = await postRawMcp(node.url, guarded, CALL);
    t.equal(got.status, 200);
    const sent = tool.bodies[0]!;
    t.same(leaked(sent), [], 'the tool server gets none of the numbers');
    t.same(JSON.parse(sent).params.arguments, { card: '[BANK_CARD]', unionPay: '[BANK_CARD]', residentId: '[PRC_ID]' }, 'each is masked as the placeholder string');
    t.equal(JSON.parse(sent).id, 1234567890123456, 'the JSON-RPC id stays a number');
    t.same(leaked(got.text), [], 'the caller gets none of the numbers');
    const data = mode === 'json' ? got.text : /^data: (.*)$/m.exec(got.text)![1]!;
    t.same(JSON.parse(data).result.structuredContent, { card: '[BANK_CARD]', unionPay: '[BANK_CARD]', residentId: '[PRC_ID]' });
    t.equal(JSON.parse(data).id, 1234567890123456, 'the answer\'s id stays a number, so the client matches it');
    await waitFor(() => node.records.length === 1, { what: 'the record' });
    t.same(leaked(JSON.stringify(node.records[0])), [], 'the record keeps none of them');
  });

  t.test(`without a policy such numbers still go both ways as written (${mode} answer)`, async (t) => {
    const tool = await answeringToolServer(t, mode);
    const node = await startNode(t, tool.url);
    const got = await postRawMcp(node.url, plain, CALL);
    t.equal(got.status, 200);
    t.equal(tool.bodies[0], CALL);
    t.equal(got.text, mode === 'json' ? RESULT : `event: message\ndata: ${RESULT}\n\n`);
  });
}

t.test('a long integer no rule matches leaves the body as written under a policy', async (t) => {
  const tool = await answeringToolServer(t, 'json');
  const node = await startNode(t, tool.url);
  const call = '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"lookup","arguments":{"orderId":9007199254740993}}}';
  const got = await postRawMcp(node.url, guarded, call);
  t.equal(got.status, 200);
  t.equal(tool.bodies[0], call, 'orderId 9007199254740993 goes on, not 9007199254740992');
});

/** A card in a string, which the mask rewrites, beside exact 16-digit integers (a microsecond timestamp, an amount). */
const SAFE_CALL = '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"pay","arguments":{"card":"4111111111111111","sinceUs":1733130000000000,"visa":4111111111111111}}}';
const SAFE_RESULT = '{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"card 4111111111111111"}],"structuredContent":{"createdUs":1733130000000000,"amountMicros":1234567890123456}}}';

for (const mode of ['json', 'sse'] as const) {
  t.test(`exact 16-digit integers stay numbers when a mask rewrites the message, and one that is a card is still masked (${mode} answer)`, async (t) => {
    const tool = await rawToolServer(t, (_req: http.IncomingMessage, res: http.ServerResponse) => {
      res.writeHead(200, { 'content-type': mode === 'json' ? 'application/json' : 'text/event-stream' });
      res.end(mode === 'json' ? SAFE_RESULT : `event: message\ndata: ${SAFE_RESULT}\n\n`);
    });
    const node = await startNode(t, tool.url);
    const got = await postRawMcp(node.url, guarded, SAFE_CALL);
    t.equal(got.status, 200);
    t.strictSame(JSON.parse(tool.bodies[0]!).params.arguments, { card: '[BANK_CARD]', sinceUs: 1733130000000000, visa: '[BANK_CARD]' }, 'the timestamp keeps its type; the card written as a number is masked');
    const data = mode === 'json' ? got.text : /^data: (.*)$/m.exec(got.text)![1]!;
    t.strictSame(JSON.parse(data).result.structuredContent, { createdUs: 1733130000000000, amountMicros: 1234567890123456 });
  });
}

/** A 64-bit JSON-RPC id and a negative argument past 2^53 beside a card in a string, which the mask rewrites. */
const WIDE_CALL = '{"jsonrpc":"2.0","id":12345678901234567890,"method":"tools/call","params":{"name":"pay","arguments":{"card":"4111111111111111","orderId":-9007199254740993}}}';
const WIDE_RESULT = '{"jsonrpc":"2.0","id":12345678901234567890,"result":{"content":[{"type":"text","text":"paid with 4111111111111111"}],"structuredContent":{"orderId":-9007199254740993}}}';

for (const mode of ['json', 'sse'] as const) {
  t.test(`a JSON-RPC id and an argument past 2^53 go out as written when a mask rewrites the message (${mode} answer)`, async (t) => {
    const tool = await rawToolServer(t, (_req: http.IncomingMessage, res: http.ServerResponse) => {
      res.writeHead(200, { 'content-type': mode === 'json' ? 'application/json' : 'text/event-stream' });
      res.end(mode === 'json' ? WIDE_RESULT : `event: message\ndata: ${WIDE_RESULT}\n\n`);
    });
    const node = await startNode(t, tool.url);
    const got = await postRawMcp(node.url, guarded, WIDE_CALL);
    t.equal(got.status, 200);
    t.equal(tool.bodies[0], WIDE_CALL.replace('"4111111111111111"', '"[BANK_CARD]"'), 'the tool server gets the masked call, its id and order id byte for byte');
    const masked = WIDE_RESULT.replace('4111111111111111', '[BANK_CARD]');
    t.equal(got.text, mode === 'json' ? masked : `event: message\ndata: ${masked}\n\n`, 'the caller gets the masked answer, its id and order id byte for byte');
    await waitFor(() => node.records.length === 1, { what: 'the record' });
    t.equal(node.records[0]!.status, 'ok', 'the answer completed the call');
  });
}
