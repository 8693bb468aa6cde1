// A JSON-RPC id is any integer the client chose, 64-bit ones too: an id past 2^53 (9007199254740993)
// must be matched as written, since JSON.parse rounds it to another id (9007199254740992). The
// event answering such a request is the one a POST's event stream holds until the record is
// committed, and the JSON-RPC errors the node writes itself (a guardrail block, a stream the tool
// server failed) echo the id as the number the caller sent, digit for digit, not as a string of its
// digits (another id, which the client would never match with its request).
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import type { Test } from 'tap';
import type { GuardrailPolicy, RequestRecord } from '../../../proto/src/index.js';
import { buildApp } from '../../../edge-node/src/app.js';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import { stringifyAsWritten } from '../../../edge-node/src/providers/json-string-slots.js';
import { idAsWritten, parseRelayed } from '../../../edge-node/src/providers/mcp/jsonrpc-message.js';
import { HOLD_FROM_HERE, holdCompletingEvent } from '../../../edge-node/src/providers/mcp/mcp-answer-hold.js';
import type { RequestSpool } from '../../../edge-node/src/spool/request-spool.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { bundleKey, newCallerKey, testBundle } from '../config-fixtures.js';
import { policy } from '../guardrails/guardrail-fixtures.js';
import { postRawMcp, rawToolServer } from './priced-tool-node.js';

const caller = newCallerKey();
/** Past 2^53: JSON.parse reads it as 9007199254740992. */
const LONG_ID = '9007199254740993';
const CALL = `{"jsonrpc":"2.0","id":${LONG_ID},"method":"tools/call","params":{"name":"lookup","arguments":{}}}`;
const PROGRESS = 'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"working"}}\n\n';
const ANSWER = `{"jsonrpc":"2.0","id":${LONG_ID},"result":{"content":[{"type":"text","text":"found"}]}}`;
/** How long a tool server waits for the node to close its stream before it ends it by itself. */
const GIVE_UP_MS = 5000;

async function startNode(t: Test, toolServerUrl: string, rules?: GuardrailPolicy['rules']): Promise<{ url: string; records: RequestRecord[] }> {
  const records: RequestRecord[] = [];
  const spool: RequestSpool = { open: () => undefined, finalise: async (record) => void records.push(record), keepsBodies: () => true, fullness: () => 0 };
  const bundle = testBundle({
    nodeId: 'node-mcp', version: 5, upstreamUrl: 'http://127.0.0.1:9/v1',
    keys: [bundleKey('key-mcp', caller.sha256, rules === undefined ? {} : { guardrailPolicyId: 'p' })],
    node: { surfaces: ['model', 'tools'], spool: { quotaBytes: 1 << 20, fullPolicy: 'reject' } },
    toolServers: [{ name: 'tools', url: toolServerUrl, apiKey: null, timeoutMs: 10_000, callMicros: 0 }],
    ...(rules === undefined ? {} : { guardrailPolicies: [policy('p', rules)] }),
  });
  const app = await buildApp({ holder: ConfigHolder.ready(fromBundle(bundle)), logger: createLogger({ level: 'silent' }), services: { nodeId: bundle.nodeId, spool } });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  return { url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/mcp/tools`, records };
}

function postRawStream(url: string, body: string): Promise<Response> {
  return fetch(url, { method: 'POST', headers: { authorization: `Bearer ${caller.secret}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' }, body });
}

/** Reads the body until `until` is in what was read; the text read so far. */
async function readUntil(reader: ReadableStreamDefaultReader<Uint8Array>, until: string): Promise<string> {
  const decoder = new TextDecoder();
  let text = '';
  while (!text.includes(until)) {
    const { done, value } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
  }
  return text;
}

t.test('the event answering a request whose id is past 2^53 is the one held, and nothing else completes it', async (t) => {
  const pending = new Set([idAsWritten(parseRelayed(CALL).value as Record<string, unknown>)!]);
  const events = [
    PROGRESS,
    // Not the request's id: the rounded one, and a string of its digits.
    'event: message\ndata: {"jsonrpc":"2.0","id":9007199254740992,"result":{}}\n\n',
    `event: message\ndata: {"jsonrpc":"2.0","id":"${LONG_ID}","result":{}}\n\n`,
    `event: message\ndata: ${ANSWER}\n\n`,
  ];
  async function* source(): AsyncGenerator<Uint8Array> {
    for (const event of events) yield Buffer.from(event);
  }
  const out: Array<string | typeof HOLD_FROM_HERE> = [];
  for await (const chunk of holdCompletingEvent(source(), pending, 1 << 20, { graceMs: 1000, maxBytes: 1 << 16, close: () => undefined })) {
    out.push(chunk === HOLD_FROM_HERE ? HOLD_FROM_HERE : Buffer.from(chunk).toString());
  }
  t.same(out, [events[0], events[1], events[2], HOLD_FROM_HERE, events[3]], 'the hold starts at the answer with the id as written, after the events that only look like it');
  t.equal(pending.size, 0, 'the request is answered');
});

for (const guarded of [false, true]) {
  const how = guarded ? ' (output guardrails on)' : '';
  t.test(`an event-stream answer to a request whose id is past 2^53 waits for the record, and goes on as written${how}`, async (t) => {
    const tool = await rawToolServer(t, (_req: http.IncomingMessage, res: http.ServerResponse) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(PROGRESS + `event: message\ndata: ${ANSWER}\n\n`);
      // The stream stays open until the node closes it (its grace after the answer) or GIVE_UP_MS pass.
      const giveUp = setTimeout(() => res.end(), GIVE_UP_MS);
      res.once('close', () => clearTimeout(giveUp));
    });
    const node = await startNode(t, tool.url, guarded ? [{ detector: 'email', action: 'mask', on: 'output' }] : undefined);
    const res = await postRawStream(node.url, CALL);
    t.equal(res.status, 200);
    const reader = res.body!.getReader();
    const text = await readUntil(reader, '"found"');
    t.equal(node.records.length, 1, 'the answer reached the caller only once the record was committed');
    t.equal(text, PROGRESS + `event: message\ndata: ${ANSWER}\n\n`, 'the answer goes on byte for byte, its id as written');
    t.equal(node.records[0]?.status, 'ok', 'the record says the call completed');
    await reader.cancel();
  });
}

t.test('a JSON answer to a request whose id is past 2^53 goes on as written', async (t) => {
  const tool = await rawToolServer(t, (_req: http.IncomingMessage, res: http.ServerResponse) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(ANSWER);
  });
  const node = await startNode(t, tool.url);
  const got = await postRawMcp(node.url, caller, CALL);
  t.equal(got.status, 200);
  t.equal(got.text, ANSWER, 'its id as written');
  await waitFor(() => node.records.length === 1, { what: 'the record' });
  t.equal(node.records[0]!.status, 'ok');
});

t.test('an id past 2^53 is read as written in a message whose strings hold U+0000, and no string the caller wrote is taken for one', async (t) => {
  // A string holding U+0000 and digits, as a mark of one with a fixed text would look.
  const text = `{"jsonrpc":"2.0","id":${LONG_ID},"method":"tools/call","params":{"name":"lookup","arguments":{"q":"\\u00009007199254740993","n":12345678901234567890}}}`;
  const message = parseRelayed(text).value as Record<string, unknown>;
  t.equal(idAsWritten(message), BigInt(LONG_ID), 'the id is the integer written, not the string of its digits');
  const args = (message.params as { arguments: Record<string, unknown> }).arguments;
  t.equal(args.q, '\u00009007199254740993', "the caller's string is a string");
  t.equal(stringifyAsWritten(message), text, 'written back as it came: the integers as numbers, the string as a string');
});

t.test('a guardrail block answers a request whose id is past 2^53 with that id as the number the caller sent', async (t) => {
  const tool = await rawToolServer(t, (_req: http.IncomingMessage, res: http.ServerResponse) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.end(`event: message\ndata: {"jsonrpc":"2.0","id":${LONG_ID},"result":{"content":[{"type":"text","text":"mail ops@example.com"}]}}\n\n`);
  });
  const node = await startNode(t, tool.url, [{ detector: 'email', action: 'block', on: 'output' }]);
  // The same digits as a string are another request, answered as its own.
  const batch = `[${CALL},{"jsonrpc":"2.0","id":"${LONG_ID}","method":"tools/call","params":{"name":"lookup","arguments":{}}}]`;
  const withNul = `{"jsonrpc":"2.0","id":${LONG_ID},"method":"tools/call","params":{"name":"lookup","arguments":{"q":"a\\u0000b"}}}`;
  for (const [body, ids] of [[CALL, [LONG_ID]], [batch, [LONG_ID, `"${LONG_ID}"`]], [withNul, [LONG_ID]]] as const) {
    const got = await postRawMcp(node.url, caller, body);
    t.equal(got.status, 200);
    const answered = [...got.text.matchAll(/"id":([^,]*),"error":\{"code":-32000,/g)].map((m) => m[1]);
    t.same(answered, ids, `${body === CALL ? 'one request' : body === batch ? 'a batch' : 'one request holding U+0000'}: each request still unanswered gets its error, its id as the caller wrote it`);
    t.match(got.text, /"data":\{"code":"ZN_ERR_GUARDRAIL_BLOCKED"\}/);
    t.notOk(got.text.includes('9007199254740992'), 'never the rounded id');
  }
});

t.test('a POST whose event stream the tool server fails gets an error for a request whose id is past 2^53, that id as the number the caller sent', async (t) => {
  const tool = await rawToolServer(t, (_req: http.IncomingMessage, res: http.ServerResponse) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(`${PROGRESS}event: message\ndata: {"jsonrpc":"2.0",`, () => res.socket?.resetAndDestroy());
  });
  const node = await startNode(t, tool.url);
  const got = await postRawMcp(node.url, caller, CALL);
  t.equal(got.status, 200, 'the head went out before the failure');
  t.match(got.text, `data: {"jsonrpc":"2.0","id":${LONG_ID},"error":{"code":-32000,`, 'the error answer carries the id as written, a number');
  t.match(got.text, /"data":\{"code":"ZN_ERR_UPSTREAM_UNAVAILABLE"\}/);
  const record = await waitFor(() => node.records[0], { what: 'the record' });
  t.equal(record.errorCode, 'ZN_ERR_UPSTREAM_UNAVAILABLE');
});
