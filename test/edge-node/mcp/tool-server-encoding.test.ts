// A tool server's answer is relayed only as text the node can read as sent. Without an
// Accept-Encoding (any coding acceptable, RFC 9110) a tool server or a proxy in front of it could
// gzip its answer, and the node relayed the compressed bytes unlabelled (Content-Encoding is not
// returned), past the key's redaction and the output guardrails. The node now asks for `identity`
// and refuses an answer compressed anyway; it refuses an answer declared in a charset other than
// UTF-8 too, which it would read as UTF-8 (é as U+FFFD) and relay under the tool server's label,
// and a UTF-16 page, in which it found neither its key nor what the guardrails look for.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import zlib from 'node:zlib';
import t from 'tap';
import type { Test } from 'tap';
import type { RequestRecord } from '../../../proto/src/index.js';
import { buildApp } from '../../../edge-node/src/app.js';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import type { RequestSpool } from '../../../edge-node/src/spool/request-spool.js';
import { bundleKey, newCallerKey, testBundle } from '../config-fixtures.js';
import { policy } from '../guardrails/guardrail-fixtures.js';

const TOOL_KEY = 'mcp-tool-server-key-SECRET-0042';
const EMAIL = 'alice.secret@example.com';
const caller = newCallerKey();

interface ToolAnswer {
  contentType: string;
  /** The body as the tool server writes it, before any coding. */
  body: Buffer;
  /** Gzip it whatever the request's Accept-Encoding allows (an ill-behaved server or proxy). */
  gzipAnyway?: boolean;
  contentEncoding?: string;
  /** 200 unless given. */
  status?: number;
  headers?: Record<string, string>;
}

/**
 * A node whose key blocks e-mail addresses in output, in front of a tool server that answers each
 * POST with `answer(request headers)`, gzipped unless the request's Accept-Encoding rules gzip out
 * (or `gzipAnyway`). Returns the node's /mcp/tools, each Accept-Encoding the tool server got, and the records.
 */
async function startNode(t: Test, answer: (headers: http.IncomingHttpHeaders) => ToolAnswer): Promise<{ url: string; acceptEncodings: Array<string | undefined>; records: RequestRecord[] }> {
  const acceptEncodings: Array<string | undefined> = [];
  const tool = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const asked = req.headers['accept-encoding'];
      acceptEncodings.push(asked);
      const sent = answer(req.headers);
      const gzip = sent.gzipAnyway === true || asked === undefined || /gzip|\*/.test(asked);
      const encoding = sent.contentEncoding ?? (gzip ? 'gzip' : undefined);
      res.writeHead(sent.status ?? 200, { 'content-type': sent.contentType, ...sent.headers, ...(encoding !== undefined ? { 'content-encoding': encoding } : {}) });
      res.end(gzip ? zlib.gzipSync(sent.body) : sent.body);
    });
  });
  await new Promise<void>((resolve) => tool.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    tool.closeAllConnections();
    tool.close();
  });
  const records: RequestRecord[] = [];
  const spool: RequestSpool = { open: () => undefined, finalise: async (record) => void records.push(record), keepsBodies: () => true, fullness: () => 0 };
  const bundle = testBundle({
    nodeId: 'node-mcp', version: 5, upstreamUrl: 'http://127.0.0.1:9/v1',
    keys: [bundleKey('key-guarded', caller.sha256, { guardrailPolicyId: 'p' })],
    node: { surfaces: ['model', 'tools'], spool: { quotaBytes: 1 << 20, fullPolicy: 'reject' } },
    toolServers: [{ name: 'tools', url: `http://127.0.0.1:${(tool.address() as AddressInfo).port}/mcp`, apiKey: TOOL_KEY, timeoutMs: 10_000, callMicros: 0 }],
    guardrailPolicies: [policy('p', [{ detector: 'email', action: 'block', on: 'output' }])],
  });
  const app = await buildApp({ holder: ConfigHolder.ready(fromBundle(bundle)), logger: createLogger({ level: 'silent' }), services: { nodeId: 'node-mcp', spool } });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  return { url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/mcp/tools`, acceptEncodings, records };
}

/** POSTs a tools/call; the status, headers and body bytes as they came (fetch would gunzip a labelled body itself). */
async function callTool(url: string): Promise<{ status: number; headers: Headers; bytes: Buffer }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { authorization: `Bearer ${caller.secret}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'accept-encoding': 'gzip' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'x', arguments: {} } }),
  });
  return { status: res.status, headers: res.headers, bytes: Buffer.from(await res.arrayBuffer()) };
}

/** A tool result repeating the request's Authorization and an e-mail address the key's output rule blocks. */
function echoingResult(headers: http.IncomingHttpHeaders): string {
  return JSON.stringify({ jsonrpc: '2.0', id: 1, result: { content: [{ type: 'text', text: `got authorization=${String(headers.authorization)} contact ${EMAIL}` }] } });
}

t.test('a tool server is asked for an uncompressed answer, not with the caller\'s accept-encoding, so its answer is checked as sent', async (t) => {
  const node = await startNode(t, (headers) => ({ contentType: 'application/json', body: Buffer.from(echoingResult(headers)) }));
  const got = await callTool(node.url);
  const text = got.bytes.toString('utf8');
  t.equal(got.status, 400, text);
  t.match(JSON.parse(text), { error: { code: 'ZN_ERR_GUARDRAIL_BLOCKED' } }, 'the output rule saw the answer');
  t.notOk(text.includes(TOOL_KEY) || text.includes(EMAIL));
  t.same(node.acceptEncodings, ['identity']);
});

t.test('a tool server answer compressed anyway is a 502 naming its Content-Encoding, nothing of it relayed', async (t) => {
  for (const contentType of ['application/json', 'text/event-stream', 'text/plain']) {
    const node = await startNode(t, (headers) => {
      const result = echoingResult(headers);
      return { contentType, gzipAnyway: true, body: Buffer.from(contentType === 'text/event-stream' ? `event: message\ndata: ${result}\n\n` : result) };
    });
    const got = await callTool(node.url);
    const text = got.bytes.toString('utf8');
    t.equal(got.status, 502, `${contentType}: ${text}`);
    t.equal(got.headers.get('content-encoding'), null, `${contentType}: the node's own error, uncompressed`);
    t.match(JSON.parse(text), { error: { code: 'ZN_ERR_UPSTREAM_ERROR', message: 'Upstream "tools" answered with Content-Encoding "gzip" although the node asked for identity.' } }, contentType);
    t.notOk(text.includes(TOOL_KEY) || text.includes(EMAIL), `${contentType}: neither the key nor the blocked text`);
    t.match(node.records[0], { status: 'failed', httpStatus: 502, errorCode: 'ZN_ERR_UPSTREAM_ERROR', upstream: 'tools', attempts: [{ outcome: 'error', httpStatus: 200 }] }, `${contentType}: recorded, the call served (it ran)`);
  }
});

t.test('an answer labelled Content-Encoding: identity is relayed as any other', async (t) => {
  const node = await startNode(t, () => ({ contentType: 'application/json', contentEncoding: 'identity', body: Buffer.from('{"jsonrpc":"2.0","id":1,"result":{"content":[]}}') }));
  const got = await callTool(node.url);
  t.equal(got.status, 200);
  t.equal(got.bytes.toString('utf8'), '{"jsonrpc":"2.0","id":1,"result":{"content":[]}}');
});

t.test('a JSON answer declared in a charset other than UTF-8 is a 502 naming it; UTF-8 and US-ASCII ones are relayed byte for byte', async (t) => {
  const result = (text: string): string => JSON.stringify({ jsonrpc: '2.0', id: 1, result: { content: [{ type: 'text', text }] } });
  for (const charset of ['iso-8859-1', '"windows-1252"', 'UTF-16']) {
    const node = await startNode(t, () => ({ contentType: `application/json; charset=${charset}`, body: Buffer.from(result('caf\u00e9'), 'latin1') }));
    const got = await callTool(node.url);
    const text = got.bytes.toString('utf8');
    t.equal(got.status, 502, `${charset}: ${text}`);
    t.match(JSON.parse(text), { error: { code: 'ZN_ERR_UPSTREAM_ERROR', message: `Tool server "tools" answered in charset "${charset.replaceAll('"', '').toLowerCase()}"; the node reads answers as UTF-8 only (charset=utf-8, us-ascii, or no charset).` } }, charset);
    t.match(node.records[0], { status: 'failed', errorCode: 'ZN_ERR_UPSTREAM_ERROR', attempts: [{ outcome: 'error', httpStatus: 200 }] }, `${charset}: recorded`);
  }
  for (const [charset, text] of [['utf-8', 'caf\u00e9'], ['UTF8', 'caf\u00e9'], ['us-ascii', 'cafe']] as const) {
    const sent = Buffer.from(result(text), 'utf8');
    const node = await startNode(t, () => ({ contentType: `application/json; charset=${charset}`, body: sent }));
    const got = await callTool(node.url);
    t.equal(got.status, 200, charset);
    t.ok(got.bytes.equals(sent), `${charset}: byte for byte`);
  }
});

t.test('a non-empty answer other than JSON in another charset, or starting with a UTF-16 or UTF-32 byte order mark, is a 502: a UTF-16 page echoing the key is not relayed', async (t) => {
  const page = (headers: http.IncomingHttpHeaders): string => `Bad request. You sent: Authorization: ${String(headers.authorization)}; contact ${EMAIL}`;
  const utf16be = (text: string): Buffer => Buffer.from(text, 'utf16le').swap16();
  const cases: Array<[string, (headers: http.IncomingHttpHeaders) => ToolAnswer, string]> = [
    ['utf-16le declared', (h) => ({ contentType: 'text/plain; charset=utf-16le', body: Buffer.from(page(h), 'utf16le') }), 'charset "utf-16le"'],
    ['utf-16 declared, with its mark', (h) => ({ contentType: 'text/html; charset=UTF-16', body: Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(page(h), 'utf16le')]) }), 'byte order mark'],
    ['an event stream declared utf-16', (h) => ({ contentType: 'text/event-stream; charset=utf-16', body: Buffer.from(`data: ${page(h)}\n\n`, 'utf16le') }), 'charset "utf-16"'],
    ['no charset, a UTF-16LE mark', (h) => ({ contentType: 'text/plain', body: Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(page(h), 'utf16le')]) }), 'byte order mark'],
    ['no charset, a UTF-16BE mark', (h) => ({ contentType: 'text/plain', body: Buffer.concat([Buffer.from([0xfe, 0xff]), utf16be(page(h))]) }), 'byte order mark'],
    ['JSON without charset, a UTF-16LE mark', (h) => ({ contentType: 'application/json', body: Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(echoingResult(h), 'utf16le')]) }), 'byte order mark'],
  ];
  for (const [what, answer, named] of cases) {
    const node = await startNode(t, (headers) => ({ ...answer(headers), contentEncoding: 'identity' }));
    const got = await callTool(node.url);
    const text = got.bytes.toString('utf8');
    t.equal(got.status, 502, `${what}: ${text}`);
    t.match(JSON.parse(text), { error: { code: 'ZN_ERR_UPSTREAM_ERROR', message: new RegExp(named.replace(/[()]/g, '\\$&')) } }, `${what}: says why`);
    const asUtf16 = got.bytes.toString('utf16le');
    t.notOk(text.includes(TOOL_KEY) || asUtf16.includes(TOOL_KEY) || asUtf16.includes(EMAIL), `${what}: neither the key nor the blocked text`);
    t.match(node.records[0], { status: 'failed', errorCode: 'ZN_ERR_UPSTREAM_ERROR', attempts: [{ outcome: 'error', httpStatus: 200 }] }, `${what}: recorded`);
  }
  // Latin-1 text that is not UTF-8, labelled so, is no better read as UTF-8; a plain UTF-8 page passes,
  // and so does ASCII labelled ISO-8859-1 (a servlet's default error page), which reads the same.
  const latin = await startNode(t, () => ({ contentType: 'text/plain; charset=iso-8859-1', contentEncoding: 'identity', body: Buffer.from('caf\u00e9', 'latin1') }));
  t.equal((await callTool(latin.url)).status, 502, 'iso-8859-1 text');
  const plain = await startNode(t, () => ({ contentType: 'text/plain; charset=utf-8', contentEncoding: 'identity', body: Buffer.from('caf\u00e9 ok') }));
  const relayed = await callTool(plain.url);
  t.equal(relayed.status, 200, 'UTF-8 text is relayed');
  t.equal(relayed.bytes.toString('utf8'), 'caf\u00e9 ok');
  const asciiLatin = await startNode(t, () => ({ contentType: 'text/html; charset=iso-8859-1', contentEncoding: 'identity', body: Buffer.from('<h1>OK</h1>') }));
  t.equal((await callTool(asciiLatin.url)).status, 200, 'ASCII labelled iso-8859-1');
});

t.test("a tool server's 4xx whose body the node cannot read keeps its status (404: the session is gone; 429 with Retry-After), without that body", async (t) => {
  const cases: Array<[number, Record<string, string>]> = [[404, {}], [400, {}], [429, { 'retry-after': '7' }]];
  for (const [status, extra] of cases) {
    const node = await startNode(t, (headers) => ({
      status, headers: extra, contentType: 'text/html; charset=iso-8859-1', contentEncoding: 'identity',
      body: Buffer.from(`<h1>Fehler f\u00fcr ${String(headers.authorization)}</h1>`, 'latin1'),
    }));
    const got = await callTool(node.url);
    t.equal(got.status, status, `${status} kept`);
    t.equal(got.bytes.length, 0, `${status}: the body the node cannot read is not relayed`);
    t.notOk(got.bytes.toString('latin1').includes(TOOL_KEY));
    if (status === 429) t.equal(got.headers.get('retry-after'), '7', 'Retry-After kept');
  }
  const utf16 = await startNode(t, () => ({ status: 404, contentType: 'text/plain; charset=utf-16le', contentEncoding: 'identity', body: Buffer.from(`no session; key ${TOOL_KEY}`, 'utf16le') }));
  const got = await callTool(utf16.url);
  t.equal(got.status, 404, 'a UTF-16 404 too');
  t.notOk(got.bytes.toString('utf16le').includes(TOOL_KEY));
});
