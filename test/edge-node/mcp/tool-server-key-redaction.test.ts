// The node's key for a tool server never reaches a caller through the tool server's answer: a tool
// server (or a proxy's debug page in front of it) whose 400 repeats its request headers would
// otherwise hand `Authorization: Bearer <key>` to anyone holding a Zenova API key. Relayed JSON and
// other non-stream bodies have the key replaced, however they escape it: a key may hold any printable
// ASCII (`"`, `\`, `&`, `<`, `>`), which JSON encoders write as `\"`, `\\`, `\u0026`, `\u003C`…
// Event streams are redacted event by event, their framing kept; a key a stream cuts across two or
// more events (or data lines) loses each piece of about half the key or more where it is
// (minSecretPiece): shorter pieces pass, so that whether an echoed string comes back redacted tells
// a caller nothing it could not guess.
import { createServer } from 'node:http';
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import type { Test } from 'tap';
import { buildApp } from '../../../edge-node/src/app.js';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import { minSecretPiece, withoutSecret, withoutSecretEvents } from '../../../edge-node/src/providers/mcp/mcp-call.js';
import type { RequestSpool } from '../../../edge-node/src/spool/request-spool.js';
import type { RequestRecord } from '../../../proto/src/index.js';
import { bundleKey, newCallerKey, testBundle } from '../config-fixtures.js';

const TOOL_KEY = 'mcp-tool/server-key-SECRET-0042';
const caller = newCallerKey();

/** A notification event carrying `text`. */
const note = (text: string): string => `event: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/message', params: { level: 'debug', data: text } })}\n\n`;
/** The answer event to request 1 carrying `text`. */
const answer = (text: string): string => `event: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', id: 1, result: { content: [{ type: 'text', text }] } })}\n\n`;

/** An event stream of `writes`, each handed to the socket before the next, so the node reads them apart. */
function writeApart(res: ServerResponse, writes: readonly string[]): void {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  const next = (i: number): void => {
    if (i === writes.length) res.end();
    else res.write(writes[i]!, () => next(i + 1));
  };
  next(0);
}

t.test('a tool server answer that repeats the request headers reaches the caller without the node key', async (t) => {
  let answer: { status: number; contentType: string } = { status: 400, contentType: 'application/json' };
  const tool = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(answer.status, { 'content-type': answer.contentType });
      res.end(answer.contentType === 'application/json'
        ? JSON.stringify({ jsonrpc: '2.0', id: 1, error: { code: -32600, message: 'bad request', data: { received_headers: req.headers } } })
        : `bad request; got authorization: ${String(req.headers.authorization)}`);
    });
  });
  await new Promise<void>((resolve) => tool.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => tool.close(() => resolve())));
  const toolUrl = `http://127.0.0.1:${(tool.address() as AddressInfo).port}/mcp`;
  const bundle = testBundle({
    nodeId: 'node-mcp', version: 5, upstreamUrl: 'http://127.0.0.1:9/v1', keys: [bundleKey('key-mcp', caller.sha256)],
    node: { surfaces: ['model', 'tools'], spool: { quotaBytes: 1 << 20, fullPolicy: 'reject' } },
    toolServers: [{ name: 'tools', url: toolUrl, apiKey: TOOL_KEY, timeoutMs: 10_000, callMicros: 0 }],
  });
  const app = await buildApp({ holder: ConfigHolder.ready(fromBundle(bundle)), logger: createLogger({ level: 'silent' }), services: { nodeId: 'node-mcp' } });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  const origin = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  const call = async (): Promise<{ status: number; text: string }> => {
    const res = await fetch(`${origin}/mcp/tools`, {
      method: 'POST',
      headers: { authorization: `Bearer ${caller.secret}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'x', arguments: {} } }),
    });
    return { status: res.status, text: await res.text() };
  };

  for (const [status, contentType] of [[400, 'application/json'], [200, 'application/json'], [400, 'text/plain']] as const) {
    answer = { status, contentType };
    const got = await call();
    t.equal(got.status, status, `${status} ${contentType}: relayed with its status`);
    t.notOk(got.text.includes(TOOL_KEY) || got.text.includes(TOOL_KEY.replaceAll('/', '\\/')), `${status} ${contentType}: the key is not in the body`);
    t.match(got.text, /Bearer \[redacted\]/, `${status} ${contentType}: the rest of the answer is relayed`);
  }
});

/** A node whose tool server `tools` (its key for it `apiKey`) answers each call, once its body is in, with `handle`; the node's base URL. */
async function toolServerNode(t: Test, apiKey: string, handle: (req: IncomingMessage, res: ServerResponse) => void): Promise<string> {
  const tool = createServer((req, res) => {
    req.resume();
    req.on('end', () => handle(req, res));
  });
  await new Promise<void>((resolve) => tool.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => tool.close(() => resolve())));
  const bundle = testBundle({
    nodeId: 'node-mcp', version: 5, upstreamUrl: 'http://127.0.0.1:9/v1', keys: [bundleKey('key-mcp', caller.sha256)],
    node: { surfaces: ['model', 'tools'], spool: { quotaBytes: 1 << 20, fullPolicy: 'reject' } },
    toolServers: [{ name: 'tools', url: `http://127.0.0.1:${(tool.address() as AddressInfo).port}/mcp`, apiKey, timeoutMs: 10_000, callMicros: 0 }],
  });
  const app = await buildApp({ holder: ConfigHolder.ready(fromBundle(bundle)), logger: createLogger({ level: 'silent' }), services: { nodeId: 'node-mcp' } });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  return `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
}

/** A node in front of a tool server that answers every call with `answer(request headers)`; the node's key for it is `apiKey`. */
async function echoingNode(t: Test, apiKey: string, answer: (headers: IncomingHttpHeaders) => { contentType: string; body: string }): Promise<() => Promise<string>> {
  const nodeUrl = await toolServerNode(t, apiKey, (req, res) => {
    const { contentType, body } = answer(req.headers);
    res.writeHead(400, { 'content-type': contentType });
    res.end(body);
  });
  return async () => {
    const res = await fetch(`${nodeUrl}/mcp/tools`, {
      method: 'POST',
      headers: { authorization: `Bearer ${caller.secret}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
    t.equal(res.status, 400, 'the answer is relayed');
    return res.text();
  };
}

/** `text` with `&`, `<`, `>` (and, with `all`, `"` and `'`) as `\u00XX` escapes in `hex` case, as Go's and .NET's JSON encoders write them. */
function htmlSafeJson(text: string, hex: 'lower' | 'upper', all = false): string {
  const pattern = all ? /[&<>']|\\"/g : /[&<>]/g;
  return text.replace(pattern, (c) => {
    const code = `\\u${(c === '\\"' ? '"' : c).charCodeAt(0).toString(16).padStart(4, '0')}`;
    return hex === 'upper' ? code.toUpperCase().replace('\\U', '\\u') : code;
  });
}

const ESCAPED_KEYS = ['key"with\\quote-0042', 'key&with<go>-0042', "key'with&<>\"all-0042"];

t.test('a key with characters JSON escapes is not handed out in a JSON answer, however the encoder escaped it', async (t) => {
  for (const apiKey of ESCAPED_KEYS) {
    for (const encoder of ['JSON.stringify', 'Go (\\u0026)', '.NET (\\u0022, \\u003C)'] as const) {
      const call = await echoingNode(t, apiKey, (headers) => {
        const json = JSON.stringify({ error: 'bad request', echoed: headers });
        return { contentType: 'application/json', body: encoder === 'JSON.stringify' ? json : htmlSafeJson(json, encoder.startsWith('Go') ? 'lower' : 'upper', encoder.startsWith('.NET')) };
      });
      const text = await call();
      const parsed = JSON.parse(text) as { echoed: { authorization: string } };
      t.equal(parsed.echoed.authorization, 'Bearer [redacted]', `${JSON.stringify(apiKey)} via ${encoder}: the key is redacted`);
      t.notOk(text.includes(apiKey) || text.includes(JSON.stringify(apiKey).slice(1, -1)), `${JSON.stringify(apiKey)} via ${encoder}: in no form`);
    }
  }
});

t.test('a key with characters JSON or HTML escapes is not handed out in a body that is not JSON', async (t) => {
  const apiKey = 'key"with\\quote&<go>-0042';
  const escaped = JSON.stringify(apiKey).slice(1, -1);
  const forms = [apiKey, escaped, htmlSafeJson(escaped, 'lower'), htmlSafeJson(escaped, 'upper', true), apiKey.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;')];
  const call = await echoingNode(t, apiKey, () => ({ contentType: 'text/html', body: `<pre>${forms.map((form) => `authorization: Bearer ${form}`).join('\n')}</pre>` }));
  const text = await call();
  t.equal(text, `<pre>${forms.map(() => 'authorization: Bearer [redacted]').join('\n')}</pre>`, 'every form is redacted, and only the key');
});

t.test('the key is replaced wherever it occurs, and nothing else changes', async (t) => {
  const key = 'abcdefgh/12345678';
  t.equal(withoutSecret(Buffer.from(`x${key}y${key}`), key).toString(), 'x[redacted]y[redacted]');
  t.equal(withoutSecret(Buffer.from('"abcdefgh\\/12345678"'), key).toString(), '"[redacted]"', 'JSON-escaped');
  const plain = Buffer.from('nothing secret here at all');
  t.equal(withoutSecret(plain, key), plain, 'an answer without the key is the same buffer');
  t.equal(withoutSecret(plain, null), plain, 'no key, nothing to replace');
  const quoted = 'key"with\\quote&<>-0042';
  for (const form of ['key\\"with\\\\quote\\u0026\\u003c\\u003e-0042', 'key\\u0022with\\u005Cquote\\u0026\\u003C\\u003E-0042', 'key&quot;with\\quote&amp;&#60;&#x3E;-0042']) {
    t.equal(withoutSecret(Buffer.from(`[${form}]`), quoted).toString(), '[[redacted]]', `escaped as ${form}`);
  }
  const bytes = Buffer.from('caf\u00e9 \u00ff abcdefgh/12345678 \u4e2d');
  t.equal(withoutSecret(bytes, key).toString(), 'caf\u00e9 \u00ff [redacted] \u4e2d', 'bytes that are not ASCII are kept');
});

/** Events echoing the node's key `apiKey` in each form an encoder writes it (in JSON, or in data that is not JSON), as sent and as they should be relayed. */
function keyEvents(apiKey: string): Array<{ sent: string; relayed: string }> {
  const escaped = JSON.stringify(apiKey).slice(1, -1);
  const note = (id: number, text: string): object => ({ jsonrpc: '2.0', method: 'notifications/message', params: { level: 'debug', data: `request ${id}: authorization: Bearer ${text}` } });
  const jsonEvent = (id: number, head: string, json: string, lineEnd = '\n'): { sent: string; relayed: string } => ({
    sent: `${head}${lineEnd}data: ${json}${lineEnd}${lineEnd}`,
    relayed: `${head}${lineEnd}data: ${JSON.stringify(note(id, '[redacted]'))}${lineEnd}${lineEnd}`,
  });
  return [
    jsonEvent(1, 'event: message\nid: 1', JSON.stringify(note(1, apiKey))),
    jsonEvent(2, 'event: message\nid: 2', htmlSafeJson(JSON.stringify(note(2, apiKey)), 'lower')),
    jsonEvent(3, 'event: message\nid: 3', htmlSafeJson(JSON.stringify(note(3, apiKey)), 'upper', true)),
    jsonEvent(4, 'id: 4', JSON.stringify(note(4, apiKey)), '\r\n'),
    // JSON spread over data lines: one line where the first was, the `id:` after them kept.
    { sent: `event: message\ndata: ${JSON.stringify(note(5, apiKey)).replace(',', ',\ndata: ')}\nid: 5\n\n`, relayed: `event: message\ndata: ${JSON.stringify(note(5, '[redacted]'))}\nid: 5\n\n` },
    ...[apiKey, escaped, htmlSafeJson(escaped, 'upper', true), apiKey.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;')].map((form, i) => ({
      sent: `event: log\nid: ${6 + i}\ndata: authorization: Bearer ${form}\n\n`,
      relayed: `event: log\nid: ${6 + i}\ndata: authorization: Bearer [redacted]\n\n`,
    })),
  ];
}

/** Events without the key, as no encoder writes them (integers past 2^53, spacing, CRLF, a comment): relayed byte for byte. */
const PLAIN_EVENTS = [
  ': keep-alive\n\n',
  'event: message\nid: 20\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":9007199254740993,"progress": 1.10}}\n\n',
  'id: 21\r\ndata: {"jsonrpc":"2.0","method":"notifications/message","params":{"data":"nothing secret"}}\r\n\r\n',
];

t.test('an event-stream answer echoing the key reaches the caller and the record redacted in every form, its framing kept', async (t) => {
  const apiKey = 'key"with\\quote&<go>-0042';
  const events = keyEvents(apiKey);
  const answer = (status: number): { sent: string; relayed: string } => {
    const last = { jsonrpc: '2.0', id: 1, ...(status === 200 ? { result: { content: [{ type: 'text', text: `done for Bearer ${apiKey}` }] } } : { error: { code: -32600, message: `refused Bearer ${apiKey}` } }) };
    const redacted = JSON.parse(JSON.stringify(last).replace(JSON.stringify(apiKey).slice(1, -1), '[redacted]')) as unknown;
    return { sent: `event: message\ndata: ${JSON.stringify(last)}\n\n`, relayed: `event: message\ndata: ${JSON.stringify(redacted)}\n\n` };
  };
  let status = 200;
  const tool = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(status, { 'content-type': 'text/event-stream' });
      // Sent in pieces cut inside events and inside the key.
      const text = [PLAIN_EVENTS[0]!, ...events.map((e) => e.sent), PLAIN_EVENTS[1]!, PLAIN_EVENTS[2]!, answer(status).sent].join('');
      for (let at = 0; at < text.length; at += 37) res.write(text.slice(at, at + 37));
      res.end();
    });
  });
  await new Promise<void>((resolve) => tool.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => tool.close(() => resolve())));
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
  const escaped = JSON.stringify(apiKey).slice(1, -1);
  const keyForms = [apiKey, escaped, htmlSafeJson(escaped, 'lower'), htmlSafeJson(escaped, 'upper', true), apiKey.replace(/&/g, '&amp;')];
  for (const code of [200, 400]) {
    status = code;
    const res = await fetch(`http://127.0.0.1:${(app.server.address() as AddressInfo).port}/mcp/tools`, {
      method: 'POST',
      headers: { authorization: `Bearer ${caller.secret}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'x', arguments: {} } }),
    });
    const text = await res.text();
    t.equal(res.status, code, `${code}: relayed with its status`);
    t.equal(text, [PLAIN_EVENTS[0]!, ...events.map((e) => e.relayed), PLAIN_EVENTS[1]!, PLAIN_EVENTS[2]!, answer(code).relayed].join(''), `${code}: each event redacted, its lines and line ends kept; events without the key byte for byte`);
    // The record is durable before the answer's last byte.
    const response = records.at(-1)?.bodies?.response ?? '';
    t.match(response, /Bearer \[redacted\]/, `${code}: the record keeps the answer's text`);
    t.same(keyForms.filter((form) => response.includes(form)), [], `${code}: the record holds the key in no form`);
  }
});

t.test('an event stream goes on in whole events as they come, as it comes when the tool server has no key, and fails on an event past the bound', async (t) => {
  async function* chunks(parts: string[]): AsyncGenerator<Uint8Array> {
    for (const part of parts) yield Buffer.from(part);
  }
  const relayed = async (parts: string[], secret: string | null): Promise<string[]> => {
    const out: string[] = [];
    for await (const chunk of withoutSecretEvents(chunks(parts), secret, 1024)) out.push(Buffer.from(chunk).toString());
    return out;
  };
  const parts = [PLAIN_EVENTS.join(''), 'data: {"a":', '1}\n', '\ndata: last'];
  t.same(await relayed(parts, 'abcdefgh/12345678'), [PLAIN_EVENTS.join(''), 'data: {"a":1}\n\n', 'data: last'], 'whole events as they come; an unfinished one at its blank line (or the end)');
  t.same(await relayed(parts, null), parts, 'no key: the stream as it comes');
  await t.rejects(relayed(['data: ', 'x'.repeat(2048)], 'abcdefgh/12345678'), { code: 'ZN_ERR_UPSTREAM_ERROR' }, 'an event past the bound fails the stream');
});

t.test('an event the key is redacted from keeps an integer past 2^53 as written', async (t) => {
  const secret = 'mcp-tool-server-key-for-tests-0042';
  const data = `{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"auth was Bearer ${secret}"}],"structuredContent":{"orderId":9007199254740993}}}`;
  async function* source(): AsyncGenerator<Uint8Array> {
    yield Buffer.from(`event: message\ndata: ${data}\n\n`);
  }
  let out = '';
  for await (const chunk of withoutSecretEvents(source(), secret, 32 << 20)) out += Buffer.from(chunk).toString();
  t.notOk(out.includes(secret), 'the key is gone');
  // Rewritten, as a JSON answer the key is redacted from: past 2^53 an integer still goes as the number it was.
  t.ok(out.includes('"orderId":9007199254740993}'), 'the order id keeps its digits, and stays a number');
  t.notOk(out.includes('9007199254740992'), 'not the double JSON.parse rounds it to');
});

/** The pieces of `key` of half its length or more in `text` (any such piece holds one of its runs of that length). */
function keyPieces(text: string, key: string): string[] {
  const pieces: string[] = [];
  const min = minSecretPiece(key);
  for (let at = 0; at + min <= key.length; at += 1) if (text.includes(key.slice(at, at + min))) pieces.push(key.slice(at, at + min));
  return pieces;
}

t.test('a key the tool server cuts across two events, two data lines or two writes reaches the caller in no piece of half the key or more', async (t) => {
  const apiKey = 'zt-tool-key-7f3a9c1e5b2d4a6f8e0c';
  // Each answer as the tool server writes it, one write per element.
  const answers = (cut: number): Record<string, string[]> => {
    const [head, tail] = [apiKey.slice(0, cut), apiKey.slice(cut)];
    const whole = answer(`authorization: Bearer ${apiKey} was sent`);
    return {
      'two events': [note(`authorization: Bearer ${head}`), answer(`${tail} was sent`)],
      'two data lines of one event': [`event: log\ndata: authorization: Bearer ${head}\ndata: ${tail} was sent\n\n`, answer('done')],
      'two writes of one event': [whole.slice(0, whole.indexOf(apiKey) + cut), whole.slice(whole.indexOf(apiKey) + cut)],
    };
  };
  let writes: string[] = [];
  const nodeUrl = await toolServerNode(t, apiKey, (_req, res) => writeApart(res, writes));
  // Cut after 4 characters (that piece may pass), after 8, in the middle, 8 before the end (the tail passes).
  for (const cut of [4, 8, 16, apiKey.length - 8]) {
    for (const [how, sent] of Object.entries(answers(cut))) {
      writes = sent;
      const { res, text } = await callTool(nodeUrl);
      t.equal(res.status, 200, `cut at ${cut}, ${how}: relayed`);
      t.same(keyPieces(text, apiKey), [], `cut at ${cut}, ${how}: no piece of half the key or more reaches the caller`);
      // The longer piece is redacted: the tail, or (cut late) the head.
      t.match(text, cut <= apiKey.length / 2 ? /\[redacted\] was sent/ : /Bearer \[redacted\]/, `cut at ${cut}, ${how}: the longer piece redacted where it is`);
      t.match(text, /was sent/, `cut at ${cut}, ${how}: the rest of the answer is relayed`);
    }
  }
});

/** A tools/call (id 1) through the node, as the caller gets it. */
async function callTool(nodeUrl: string): Promise<{ res: Response; text: string }> {
  const res = await fetch(`${nodeUrl}/mcp/tools`, {
    method: 'POST',
    headers: { authorization: `Bearer ${caller.secret}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'x', arguments: {} } }),
  });
  return { res, text: await res.text() };
}

/** The pieces of `key` cut at `sizes` (their sum is its length). */
function cutInto(key: string, sizes: readonly number[]): string[] {
  let at = 0;
  return sizes.map((size) => key.slice(at, (at += size)));
}

t.test('a key the tool server cuts into three or four events or data lines loses each piece of half the key or more where it is; shorter ones pass', async (t) => {
  const apiKey = 'zt-tool-key-7f3a9c1e5b2d4a6f8e0c91b7d2e4';
  t.equal(apiKey.length, 40);
  const streams = (pieces: string[]): Record<string, string[]> => {
    const first = pieces[0]!;
    const middle = pieces.slice(1, -1);
    const last = pieces.at(-1)!;
    return {
      'events': [note(`authorization: Bearer ${first}`), ...middle.map(note), answer(`${last} was sent`)],
      'data lines of one event': [`event: log\ndata: authorization: Bearer ${first}\n${middle.map((piece) => `data: ${piece}\n`).join('')}data: ${last} was sent\n\n`, answer('done')],
      'events whose data is not JSON': [`event: log\ndata: authorization: Bearer ${first}\n\n`, ...middle.map((piece) => `event: log\ndata: ${piece}\n\n`), answer(`${last} was sent`)],
    };
  };
  let writes: string[] = [];
  const nodeUrl = await toolServerNode(t, apiKey, (_req, res) => writeApart(res, writes));
  // Three and four ways; a short first piece (which may pass) before a long middle one.
  const min = minSecretPiece(apiKey);
  for (const sizes of [[15, 10, 15], [4, 28, 8], [10, 10, 10, 10], [8, 12, 9, 11], [4, 9, 19, 8], [20, 12, 8], [6, 14, 20]]) {
    const pieces = cutInto(apiKey, sizes);
    for (const [how, sent] of Object.entries(streams(pieces))) {
      writes = sent;
      const { res, text } = await callTool(nodeUrl);
      t.equal(res.status, 200, `cut ${sizes.join('+')}, ${how}: relayed`);
      t.same(keyPieces(text, apiKey), [], `cut ${sizes.join('+')}, ${how}: no piece of half the key or more reaches the caller`);
      t.equal(text.split('\n\n').length, sent.join('').split('\n\n').length, `cut ${sizes.join('+')}, ${how}: as many events as were sent`);
      for (const piece of pieces) {
        if (piece.length < min) t.ok(text.includes(piece), `cut ${sizes.join('+')}, ${how}: ${piece.length} characters pass as they are`);
      }
      t.equal(text.split('[redacted]').length - 1, pieces.filter((piece) => piece.length >= min).length, `cut ${sizes.join('+')}, ${how}: each long piece redacted`);
      t.match(text, /was sent/, `cut ${sizes.join('+')}, ${how}: the rest of the answer is relayed`);
    }
  }
});

t.test('a key cut into the items of a JSON answer reaches the caller in no piece of half the key or more', async (t) => {
  const apiKey = 'zt-tool-key-7f3a9c1e5b2d4a6f8e0c91b7d2e4';
  const [first, ...rest] = cutInto(apiKey, [20, 20]);
  const items = [`Bearer ${first}`, ...rest.slice(0, -1), `${rest.at(-1)!} was sent`].map((text) => ({ type: 'text', text }));
  const nodeUrl = await toolServerNode(t, apiKey, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ jsonrpc: '2.0', id: 1, result: { content: items } }));
  });
  const res = await fetch(`${nodeUrl}/mcp/tools`, {
    method: 'POST',
    headers: { authorization: `Bearer ${caller.secret}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'x', arguments: {} } }),
  });
  const text = await res.text();
  t.same(keyPieces(text, apiKey), [], 'no piece of half the key or more');
  t.same((JSON.parse(text) as { result: { content: Array<{ text: string }> } }).result.content.map((item) => item.text), ['Bearer [redacted]', '[redacted] was sent']);
});

t.test('ordinary text in many events, sharing short runs with the key, goes on byte for byte', async (t) => {
  const key = 'zt-tool-key-7f3a9c1e5b2d4a6f8e0c91b7d2e4';
  const texts = [
    'the tool is ready', 'key', '7f3a9c1', 'zt-tool', '-key-7f', 'e5b2d4a', 'f8e0c91', 'zt-tool-key in the middle of a text',
    'a text ending in zt-too', 'b7d2e4 starts this one', 'the key-7f3a9c1e5b2 sits in the middle here', 'done',
  ];
  const events = texts.map((text, i) => `event: message\nid: ${i}\ndata: ${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: text } })}\n\n`);
  const lines = texts.map((text) => `event: log\ndata: ${text}\n\n`);
  for (const [how, sent] of [['JSON data', events], ['data that is not JSON', lines]] as const) {
    async function* source(): AsyncGenerator<Uint8Array> {
      for (const event of sent) yield Buffer.from(event);
    }
    const out: string[] = [];
    for await (const chunk of withoutSecretEvents(source(), key, 1 << 20)) out.push(Buffer.from(chunk).toString());
    t.same(out, sent, `${how}: each event as it came`);
  }
});

t.test('a text loses the key\'s pieces of 8 characters or more at its ends, and only those', async (t) => {
  const key = 'abcdefgh/12345678';
  const redacted = async (data: string): Promise<string> => {
    async function* source(): AsyncGenerator<Uint8Array> {
      yield Buffer.from(`data: ${data}\n\n`);
    }
    let out = '';
    for await (const chunk of withoutSecretEvents(source(), key, 1 << 20)) out += Buffer.from(chunk).toString();
    return out;
  };
  t.equal(await redacted('{"text":"Bearer abcdefgh/1"}'), 'data: {"text":"Bearer [redacted]"}\n\n', 'the key\'s start at a string\'s end');
  t.equal(await redacted('{"text":"h/12345678 was sent"}'), 'data: {"text":"[redacted] was sent"}\n\n', 'the key\'s end at a string\'s start');
  t.equal(await redacted('Bearer abcdefgh/1'), 'data: Bearer [redacted]\n\n', 'at a data line\'s end, data that is not JSON');
  const kept = ['{"text":"Bearer abcdefg"}', '{"text":"abcdefgh/1 in the middle"}', '{"text":"the end: 2345678"}'];
  for (const data of kept) t.equal(await redacted(data), `data: ${data}\n\n`, `${data}: byte for byte`);
});

t.test('the key, or a piece of it, escaped inside a JSON string (an HTML page or a JSON text carried as one) reaches the caller in no form', async (t) => {
  const key = TOOL_KEY;
  // Each character other than a letter or digit escaped, as an HTML page or a JSON encoder writes it.
  const html = (text: string): string => text.replace(/[^A-Za-z0-9]/g, (c) => `&#x${c.charCodeAt(0).toString(16).toUpperCase()};`);
  const json = (text: string): string => text.replace(/[^A-Za-z0-9]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
  const untouched = 'a &lt;b&gt; &#x2F; c:\\n mcp-tool and \\/ & \\ alone';

  const call = await echoingNode(t, key, () => ({
    contentType: 'application/json',
    body: JSON.stringify({ page: `<p>Bearer ${html(key)}</p>`, carried: JSON.stringify({ auth: key }).replaceAll('/', '\\/'), other: untouched }),
  }));
  t.same(JSON.parse(await call()), { page: '<p>Bearer [redacted]</p>', carried: '{"auth":"[redacted]"}', other: untouched }, 'a JSON answer: the key redacted in each form, the other string as it was');

  // Cut across two events (or two data lines), each piece escaped.
  let writes: string[] = [];
  const nodeUrl = await toolServerNode(t, key, (_req, res) => writeApart(res, writes));
  const [head, tail] = [key.slice(0, 16), key.slice(16)];
  const streams: Record<string, string[]> = {
    'HTML-escaped pieces in JSON data': [note(`Bearer ${html(head)}`), answer(`${html(tail)} was sent`)],
    'JSON-escaped pieces in JSON data': [note(`Bearer ${json(head)}`), answer(`${json(tail)} was sent`)],
    'HTML-escaped pieces in data that is not JSON': [`event: log\ndata: Bearer ${html(head)}\n\n`, `event: log\ndata: ${html(tail)} was sent\n\n`, answer('done')],
  };
  for (const [how, sent] of Object.entries(streams)) {
    writes = sent;
    const { res, text } = await callTool(nodeUrl);
    t.equal(res.status, 200, `${how}: relayed`);
    const data = text.split('\n').filter((line) => line.startsWith('data: ')).map((line) => line.slice(6));
    const texts = data.map((line) => {
      if (!line.startsWith('{')) return line;
      const message = JSON.parse(line) as { params?: { data: string }; result?: { content: Array<{ text: string }> } };
      return message.params?.data ?? message.result!.content[0]!.text;
    });
    t.same(texts.slice(0, 2), ['Bearer [redacted]', '[redacted] was sent'], `${how}: each piece redacted`);
  }
});

t.test('the key written with HTML5 names (&sol;) or as HTML escapes whose & is JSON-escaped (\\u0026#47;) reaches the caller in no form', async (t) => {
  const key = TOOL_KEY;
  // PHP's htmlentities(…, ENT_HTML5) names '/' (`&sol;`); '-' has no name.
  const php = (text: string): string => text.replaceAll('/', '&sol;').replaceAll('-', '&#45;');
  // Go's html/template escapes, then encoding/json writes each & as \u0026.
  const go = (text: string): string => text.replace(/[^A-Za-z0-9]/g, (c) => `\\u0026#${c.charCodeAt(0)};`);
  const json = await echoingNode(t, key, () => ({ contentType: 'application/json', body: `{"page":"<p>Bearer ${php(key)}</p>","go":"Bearer ${go(key)}"}` }));
  t.same(JSON.parse(await json()), { page: '<p>Bearer [redacted]</p>', go: 'Bearer [redacted]' }, 'a JSON answer');
  const page = await echoingNode(t, key, () => ({ contentType: 'text/html', body: `<p>Bearer ${php(key)}</p><p>Bearer ${go(key)}</p>` }));
  t.equal(await page(), '<p>Bearer [redacted]</p><p>Bearer [redacted]</p>', 'a body that is not JSON');
});

t.test('the key in a JSON text that PHP\'s json_encode carried in a JSON string (\\\\\\/ for /) reaches the caller in no form', async (t) => {
  const key = TOOL_KEY;
  // json_encode writes '/' as '\/'; twice, '\/' becomes '\\\/'.
  const phpJson = (value: unknown): string => JSON.stringify(value).replaceAll('/', '\\/');
  const inner = phpJson({ auth: `Bearer ${key}` });
  const json = await echoingNode(t, key, () => ({ contentType: 'application/json', body: phpJson({ log: inner }) }));
  t.same(JSON.parse(await json()), { log: '{"auth":"Bearer [redacted]"}' }, 'a JSON answer');
  const text = await echoingNode(t, key, () => ({ contentType: 'text/plain', body: `log: ${phpJson(inner)}` }));
  t.equal(await text(), 'log: "{\\"auth\\":\\"Bearer [redacted]\\"}"', 'a body that is not JSON');
});

t.test('a key whose escaped form the tool server cuts inside an escape (&#x2 | F;, \\u00 | 2F) reaches the caller in no piece of half the key or more', async (t) => {
  const key = TOOL_KEY;
  const forms: Record<string, (text: string) => string> = {
    'HTML-escaped': (text) => text.replace(/[^A-Za-z0-9]/g, (c) => `&#x${c.charCodeAt(0).toString(16).toUpperCase()};`),
    'JSON-escaped': (text) => text.replace(/[^A-Za-z0-9]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`),
    'HTML5 names': (text) => text.replaceAll('/', '&sol;').replaceAll('-', '&#45;'),
  };
  // What the caller reads once it joins the strings and reads their escapes.
  const unescaped = (text: string): string =>
    text.replace(/&#x([0-9A-Fa-f]+);/g, (_m, hex: string) => String.fromCharCode(parseInt(hex, 16))).replace(/&#(\d+);/g, (_m, dec: string) => String.fromCharCode(Number(dec)))
      .replaceAll('&sol;', '/').replace(/\\u([0-9a-f]{4})/g, (_m, hex: string) => String.fromCharCode(parseInt(hex, 16)));
  let writes: string[] = [];
  const nodeUrl = await toolServerNode(t, key, (_req, res) => writeApart(res, writes));
  for (const [how, escape] of Object.entries(forms)) {
    const escaped = escape(key);
    // Inside each escape: after its first character, in its middle, before its last.
    const escapes = [...escaped.matchAll(/&[^;]+;|\\u[0-9a-f]{4}/g)];
    const inside = (m: RegExpExecArray): number[] => [m.index + 1, m.index + Math.floor(m[0].length / 2), m.index + m[0].length - 1];
    for (const [i, m] of escapes.entries()) {
      for (const cut of inside(m)) {
        // Two events, and three: the middle one a whole string cut inside escapes at both ends, two
        // escapes apart. Two pieces: one is half the key less one or more, so the two joined hold
        // no such piece. Three: each string on its own holds none.
        const later = escapes[i + 2];
        const second = later === undefined ? undefined : inside(later)[1]!;
        const streams = [[note(`Bearer ${escaped.slice(0, cut)}`), answer(`${escaped.slice(cut)} was sent`)]];
        if (second !== undefined) streams.push([note(`Bearer ${escaped.slice(0, cut)}`), note(escaped.slice(cut, second)), answer(`${escaped.slice(second)} was sent`)]);
        for (const sent of streams) {
          writes = sent;
          const { text } = await callTool(nodeUrl);
          const strings = text.split('\n').filter((line) => line.startsWith('data: ')).map((line) => {
            const message = JSON.parse(line.slice(6)) as { params?: { data: string }; result?: { content: Array<{ text: string }> } };
            return message.params?.data ?? message.result!.content[0]!.text;
          });
          const seen = sent.length === 2 ? [strings.join('')] : strings;
          t.same(seen.flatMap((text) => keyPieces(unescaped(text), key)), [], `${how}, cut at ${cut} in ${sent.length} events: no piece of half the key or more`);
        }
      }
    }
  }
});

t.test('a key that holds what reads as an escape is redacted inside a string however its escapes are read: a stray & before a key starting sol;, a \\u0026 the key needs before #35;', async (t) => {
  const token = 'Xy7kP2mQ9vR4sT8wZ1bC5dF3gH6jK0nL2pV8xA4eU7iO9qW1rY3tE5uI';
  const solKey = `sol;a/bcd${token}`;
  const solText = `x &${solKey.replaceAll('/', '&#x2F;')} y`;
  const solCall = await echoingNode(t, solKey, () => ({ contentType: 'application/json', body: JSON.stringify({ t: solText }) }));
  t.same(JSON.parse(await solCall()), { t: 'x &[redacted] y' }, 'a JSON answer: the stray & stays, the key goes');
  const nodeUrl = await toolServerNode(t, solKey, (_req, res) => writeApart(res, [note(solText), answer('done')]));
  const { text } = await callTool(nodeUrl);
  t.match(text, /"data":"x &\[redacted\] y"/, 'an event stream: the stray & stays, the key goes');
  const ampKey = 'Zq9&#35;Rw7_Ab3&xyz';
  // A JSON text carried in a string, its & written \u0026 (as Go's encoding/json writes it).
  const carried = JSON.stringify({ auth: ampKey }).replaceAll('&', '\\u0026');
  const ampCall = await echoingNode(t, ampKey, () => ({ contentType: 'application/json', body: JSON.stringify({ log: carried }) }));
  t.same(JSON.parse(await ampCall()), { log: '{"auth":"[redacted]"}' }, 'the \\u0026 read as the key\'s &');
});

t.test('an echo tool cannot confirm a guess at the key: a piece shorter than half the key comes back as sent, whatever the caller knows of its start', async (t) => {
  const key = `tsk_${'c9b71ffea2696bce9130e0e2394ff8d7'}`;
  const min = minSecretPiece(key);
  t.equal(min, 17);
  const echoed = async (text: string): Promise<string> => {
    async function* source(): AsyncGenerator<Uint8Array> {
      yield Buffer.from(`data: ${JSON.stringify({ content: [{ type: 'text', text: `no results for ${text}` }] })}\n\n`);
    }
    let out = '';
    for await (const chunk of withoutSecretEvents(source(), key, 1 << 20)) out += Buffer.from(chunk).toString();
    return out;
  };
  // Right and wrong guesses of every length short of half the key, at the start (after the known
  // prefix) and at the end: each comes back unchanged, so a right one looks like a wrong one.
  for (let n = 8; n < min; n += 1) {
    for (const guess of [key.slice(0, n), `${key.slice(0, n - 1)}x`, key.slice(-n), `x${key.slice(1 - n)}`]) {
      t.equal(await echoed(guess), `data: ${JSON.stringify({ content: [{ type: 'text', text: `no results for ${guess}` }] })}\n\n`, `${n} characters: as sent`);
    }
  }
  t.match(await echoed(key.slice(0, min)), /no results for \[redacted\]/, 'half the key is redacted (a guess that long is as hard as half the key)');
});

t.test("the key in an event's id, event name or comment line beside JSON data is redacted there, the data left as it came", async (t) => {
  const key = TOOL_KEY;
  const data = `data: ${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: 'ok' } })}`;
  const redacted = async (event: string): Promise<string> => {
    async function* source(): AsyncGenerator<Uint8Array> {
      yield Buffer.from(event);
    }
    let out = '';
    for await (const chunk of withoutSecretEvents(source(), key, 1 << 20)) out += Buffer.from(chunk).toString();
    return out;
  };
  t.equal(await redacted(`id: ${key}\n${data}\n\n`), `id: [redacted]\n${data}\n\n`, 'an id line');
  t.equal(await redacted(`event: ${key}\n${data}\n\n`), `event: [redacted]\n${data}\n\n`, 'an event line');
  t.equal(await redacted(`: proxy debug authorization=Bearer ${key}\n${data}\n\n`), `: proxy debug authorization=Bearer [redacted]\n${data}\n\n`, 'a comment line');
  t.equal(await redacted(`id: 7\n${data}\n\n`), `id: 7\n${data}\n\n`, 'an event without it: byte for byte');
});

t.test('a relayed header holding the key, or a piece of half of it or more, is not relayed; the others are', async (t) => {
  const apiKey = 'hdr-key/for-tools-SECRET-7731';
  const half = apiKey.slice(3, 3 + minSecretPiece(apiKey));
  const short = apiKey.slice(0, minSecretPiece(apiKey) - 1);
  let returned: Record<string, string> = {};
  const nodeUrl = await toolServerNode(t, apiKey, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json', ...returned });
    res.end(JSON.stringify({ jsonrpc: '2.0', id: 1, result: { tools: [] } }));
  });
  const call = async (): Promise<Headers> => {
    const res = await fetch(`${nodeUrl}/mcp/tools`, {
      method: 'POST',
      headers: { authorization: `Bearer ${caller.secret}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
    t.equal(res.status, 200, 'the answer is relayed');
    await res.text();
    return res.headers;
  };
  returned = { 'cache-control': `no-store, debug=${apiKey}`, 'retry-after': '7' };
  let got = await call();
  t.equal(got.get('cache-control'), null, 'the header holding the key is dropped');
  t.equal(got.get('retry-after'), '7', 'a header without it is relayed');
  returned = { 'cache-control': 'private', 'mcp-protocol-version': `v-${half}` };
  got = await call();
  t.equal(got.get('mcp-protocol-version'), null, 'a header holding half the key is dropped');
  t.equal(got.get('cache-control'), 'private', 'the others are relayed');
  returned = { 'cache-control': `private, x=${short}` };
  got = await call();
  t.equal(got.get('cache-control'), `private, x=${short}`, 'a piece shorter than half the key is relayed as it came');
});
