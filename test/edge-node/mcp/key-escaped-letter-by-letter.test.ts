// A JSON encoder may write any character as a `\uXXXX` escape, letters and digits too (one that
// escapes everything, or a proxy that re-encodes), and JSON.parse reads them back as the node's key
// for the tool server. The quick test before the key is searched for must see the key so written:
// it decodes every `\uXXXX` escape (a second pass, only over an answer holding one), so the key is
// redacted from a JSON answer and from event data however its characters were escaped.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import type { Test } from 'tap';
import type { RequestRecord } from '../../../proto/src/index.js';
import { buildApp } from '../../../edge-node/src/app.js';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import { MIN_SECRET_CHARS, secretPrefilter } from '../../../edge-node/src/providers/mcp/secret-prefilter.js';
import type { RequestSpool } from '../../../edge-node/src/spool/request-spool.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { bundleKey, newCallerKey, testBundle } from '../config-fixtures.js';

const caller = newCallerKey();
/** A key of letters and digits: its blocks are searched for one by one. */
const SHORT_KEY = 'mcpToolServerKeySECRET0042abcdefXYZ';
/** A key of more than 16 blocks, with dashes: its blocks are found by the rolling pass. */
const LONG_KEY = 'tsk-9f8e7d6c5b4a3928-17ab-cdef0123456789-ABCDEFGHIJKLMNOP-qrstuvwxyz-0042';

/** `text` with every UTF-16 unit a `\uXXXX` escape (a surrogate pair as two), its hex digits in `hex` case. */
function escapedEach(text: string, hex: 'lower' | 'upper'): string {
  let out = '';
  for (let i = 0; i < text.length; i += 1) {
    const digits = text.charCodeAt(i).toString(16).padStart(4, '0');
    out += `\\u${hex === 'upper' ? digits.toUpperCase() : digits}`;
  }
  return out;
}

/** `text` as a JSON string's content with every other character a `\uXXXX` escape (as a re-encoding proxy may write it), the others JSON-escaped as needed. */
function escapedAlternately(text: string): string {
  return [...text].map((c, i) => (i % 2 === 0 ? `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}` : JSON.stringify(c).slice(1, -1))).join('');
}

async function startNode(t: Test, apiKey: string, answer: () => { contentType: string; body: string }): Promise<{ url: string; records: RequestRecord[] }> {
  const tool = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const { contentType, body } = answer();
      res.writeHead(200, { 'content-type': contentType });
      res.end(body);
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
    nodeId: 'node-mcp', version: 5, upstreamUrl: 'http://127.0.0.1:9/v1', keys: [bundleKey('key-mcp', caller.sha256)],
    node: { surfaces: ['model', 'tools'], spool: { quotaBytes: 1 << 20, fullPolicy: 'reject' } },
    toolServers: [{ name: 'tools', url: `http://127.0.0.1:${(tool.address() as AddressInfo).port}/mcp`, apiKey, timeoutMs: 10_000, callMicros: 0 }],
  });
  const app = await buildApp({ holder: ConfigHolder.ready(fromBundle(bundle)), logger: createLogger({ level: 'silent' }), services: { nodeId: 'node-mcp', spool } });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  return { url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/mcp/tools`, records };
}

async function callTool(url: string): Promise<string> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { authorization: `Bearer ${caller.secret}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"debug","arguments":{}}}',
  });
  return res.text();
}

/** What a JSON client reads from `text` (a JSON body, or the data of each event): every escape decoded. */
function readAsClient(text: string, mode: 'json' | 'sse'): string {
  if (mode === 'json') return JSON.stringify(JSON.parse(text));
  return text.split('\n').filter((line) => line.startsWith('data:')).map((line) => JSON.stringify(JSON.parse(line.slice(5)))).join('\n');
}

for (const [what, apiKey] of [['a key of letters and digits', SHORT_KEY], ['a long key with dashes', LONG_KEY]] as const) {
  t.test(`${what}, written with its letters and digits escaped, is redacted from a JSON answer and from event data`, async (t) => {
    const forms = { 'every character, lower-case hex': escapedEach(apiKey, 'lower'), 'every character, upper-case hex': escapedEach(apiKey, 'upper'), 'every other character': escapedAlternately(apiKey) };
    let answer = { contentType: 'application/json', body: '' };
    const node = await startNode(t, apiKey, () => answer);
    for (const [form, written] of Object.entries(forms)) {
      for (const mode of ['json', 'sse'] as const) {
        const message = `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"auth: Bearer ${written}"}]}}`;
        answer = mode === 'json' ? { contentType: 'application/json', body: message } : { contentType: 'text/event-stream', body: `event: message\ndata: ${message}\n\n` };
        const before = node.records.length;
        const read = readAsClient(await callTool(node.url), mode);
        t.notOk(read.includes(apiKey), `${form}, ${mode}: the caller reads no key`);
        t.ok(read.includes('Bearer [redacted]'), `${form}, ${mode}: redacted where it was`);
        await waitFor(() => node.records.length === before + 1, { what: 'the record' });
        t.notOk(JSON.stringify(node.records.at(-1)).includes(apiKey), `${form}, ${mode}: nor does the record hold it`);
      }
    }
  });
}

t.test('the key escaped letter by letter in an event that also holds NaN is redacted', async (t) => {
  const message = `{"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "auth: Bearer ${escapedEach(SHORT_KEY, 'lower')}"}], "structuredContent": {"score": NaN}}}`;
  const node = await startNode(t, SHORT_KEY, () => ({ contentType: 'text/event-stream', body: `event: message\ndata: ${message}\n\n` }));
  const text = await callTool(node.url);
  const data = text.split('\n').find((line) => line.startsWith('data:'))!.slice(5);
  const read = JSON.parse(data) as { result: { content: Array<{ text: string }>; structuredContent: { score: unknown } } };
  t.equal(read.result.content[0]!.text, 'auth: Bearer [redacted]');
  t.equal(read.result.structuredContent.score, null, 're-serialised: NaN as null');
});

t.test(`every piece of ${MIN_SECRET_CHARS} characters of a key, its characters \\u-escaped, is flagged; ordinary escaped text is not`, async (t) => {
  for (const key of [SHORT_KEY, LONG_KEY, 'key"with\\quote&<go>-0042']) {
    const prefilter = secretPrefilter(key);
    let missed = 0;
    let tried = 0;
    for (let at = 0; at + MIN_SECRET_CHARS <= key.length; at += 1) {
      const piece = key.slice(at, at + MIN_SECRET_CHARS);
      for (const written of [escapedEach(piece, 'lower'), escapedEach(piece, 'upper'), escapedAlternately(piece)]) {
        tried += 1;
        if (!prefilter.mayHold(Buffer.from(`{"log":"header was ${written} then"}`, 'latin1'))) missed += 1;
      }
    }
    t.equal(missed, 0, `${key}: none of the ${tried} missed`);
  }
  // Python's json.dumps of Chinese text, an emoji as a surrogate pair, and an escaped backslash before u0041.
  const ordinary = Buffer.from(JSON.stringify({ text: '机密报告：一切正常 😀 '.repeat(2000), path: 'C:\\u0041' }).replace(/[^\x20-\x7e]/gu, (c) => escapedEach(c, 'lower')));
  t.ok(ordinary.includes('\\u673a'), 'the text is escaped');
  for (const key of [SHORT_KEY, LONG_KEY]) t.notOk(secretPrefilter(key).mayHold(ordinary), `${key.slice(0, 8)}…: passed`);
  // An escaped backslash before `u0041…` starts no escape: text that reads as the key only so is not flagged.
  const notEscapes = Buffer.from(`{"text":"${[...SHORT_KEY].map((c) => `\\\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`).join('')}"}`);
  t.notOk(secretPrefilter(SHORT_KEY).mayHold(notEscapes), 'an escaped backslash starts no escape');
});
