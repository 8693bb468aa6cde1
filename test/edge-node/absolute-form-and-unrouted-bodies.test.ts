// A request target in absolute form (`POST http://host:port/v1/messages HTTP/1.1`, RFC 9112
// §3.2.2) is treated as its path: Anthropic's error shape and `request-id` on /v1/messages, the
// Base URL hints on a 404, and its authority (a `user:password@` in it) never in a log line nor an
// answer. A path no route serves gets its 404 and hint whatever its body: compressed or over the
// size limit, it is not read, and the connection then serves the next request. Raw bytes over a
// real socket: HTTP clients (and inject) send the origin form.
import { connect } from 'node:net';
import t from 'tap';
import { recordingMetrics, startPipelineNode } from './pipeline/pipeline-harness.js';
import type { FinishedRequest } from './pipeline/pipeline-harness.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { waitFor } from '../fixtures/wait-for.js';

interface RawAnswer {
  status: number;
  headers: Map<string, string>;
  text: string;
  body: unknown;
}

interface RawConnection {
  write(data: string | Buffer): void;
  /** The next whole answer (with a Content-Length) on this connection. */
  answer(what: string): Promise<RawAnswer>;
  close(): void;
}

/** A keep-alive connection to the node, read answer by answer. */
function openRaw(origin: string): RawConnection {
  const { hostname, port } = new URL(origin);
  const socket = connect(Number(port), hostname);
  let pending = Buffer.alloc(0);
  socket.on('data', (chunk: Buffer) => (pending = Buffer.concat([pending, chunk])));
  socket.on('error', () => undefined);
  const take = (): RawAnswer | undefined => {
    const split = pending.indexOf('\r\n\r\n');
    if (split < 0) return undefined;
    const [statusLine, ...headerLines] = pending.subarray(0, split).toString('latin1').split('\r\n');
    const headers = new Map(headerLines.map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]));
    const length = Number(headers.get('content-length'));
    if (pending.length < split + 4 + length) return undefined;
    const text = pending.subarray(split + 4, split + 4 + length).toString('utf8');
    pending = pending.subarray(split + 4 + length);
    return { status: Number(statusLine?.split(' ')[1]), headers, text, body: JSON.parse(text) as unknown };
  };
  return {
    write: (data) => socket.write(data),
    answer: (what) => waitFor(take, { what }),
    close: () => socket.destroy(),
  };
}

const REQUEST_ID = /^req_[0-9A-HJKMNP-TV-Z]{26}$/;
const ADD_V1 = /No route for POST \/chat\/completions: the node serves it as POST \/v1\/chat\/completions\. Add \/v1 to the client's Base URL\./;
const SECRET = 'PWSECRET';

t.test('absolute-form request targets', async (t) => {
  const upstream = await startFakeUpstream(t);
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url });
  const authority = new URL(node.origin).host;
  const post = (target: string, body: string, extra = ''): string =>
    `POST ${target} HTTP/1.1\r\nHost: ${authority}\r\nAuthorization: Bearer ${node.secret}\r\nContent-Type: application/json\r\n${extra}Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;

  t.test("invalid JSON to http://host/v1/messages gets Anthropic's error shape and request-id", async (t) => {
    const conn = openRaw(node.origin);
    t.teardown(() => conn.close());
    conn.write(post(`http://${authority}/v1/messages`, '{"model": '));
    const res = await conn.answer('the answer to invalid JSON');
    t.equal(res.status, 400);
    t.match(res.body, { type: 'error', error: { type: 'invalid_request_error', code: 'ZN_ERR_INVALID_JSON' } });
    t.match(res.headers.get('request-id'), REQUEST_ID, "Anthropic's SDKs read the id from request-id");
    t.equal(res.headers.get('request-id'), res.headers.get('x-request-id'));
  });

  t.test('a user:password@ in the target is in no answer and no log line; the log line has the path', async (t) => {
    const conn = openRaw(node.origin);
    t.teardown(() => conn.close());
    const chat = JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'hi' }] });
    const answers: RawAnswer[] = [];
    conn.write(post(`http://user:${SECRET}@${authority}/v1/chat/completions?x=1`, chat));
    answers.push(await conn.answer('the served chat call'));
    t.equal(answers[0]?.status, 200, 'the absolute-form target is served');
    conn.write(post(`http://user:${SECRET}@${authority}/chat/completions`, chat));
    const notFound = await conn.answer('the 404');
    answers.push(notFound);
    t.equal(notFound.status, 404);
    t.match(notFound.body, { error: { code: 'ZN_ERR_NOT_FOUND', message: ADD_V1 } }, 'the Base URL hint, naming the path alone');
    conn.write(post(`http://user:${SECRET}@${authority}/v1/%zz`, chat));
    const undecodable = await conn.answer('the undecodable path\'s answer');
    answers.push(undecodable);
    t.equal(undecodable.status, 400);
    t.match(undecodable.body, { error: { code: 'ZN_ERR_INVALID_REQUEST', message: /the URL path "\/v1\/%zz" cannot be decoded/ } });
    // Headers too large: refused by Node's parser, answered by the node itself from the target.
    conn.write(`POST http://user:${SECRET}@${authority}/v1/messages HTTP/1.1\r\nHost: ${authority}\r\nx-filler: ${'a'.repeat(20_000)}\r\n\r\n`);
    const parserError = await conn.answer('the answer to headers too large');
    answers.push(parserError);
    t.equal(parserError.status, 431);
    t.match(parserError.body, { type: 'error', error: { code: 'ZN_ERR_INVALID_REQUEST' } }, "on /v1/messages: Anthropic's shape");
    t.match(parserError.headers.get('request-id'), REQUEST_ID);
    for (const res of answers) t.notMatch(res.text, SECRET, `answer ${res.status} does not quote the userinfo`);
    // The undecodable path is refused before routing, without a "request finished" line.
    const lines = await waitFor(() => {
      const found = node.logs().filter((l) => l.msg === 'request finished' && typeof l.path === 'string' && l.path.includes('chat/completions'));
      return found.length === 2 ? found : undefined;
    }, { what: 'the two routed requests\' log lines' });
    t.same(lines.map((l) => [l.path, l.status]), [['/v1/chat/completions', 200], ['/chat/completions', 404]]);
    t.notMatch(node.logText(), SECRET, 'no log line quotes the userinfo');
  });
});

t.test('a path no route serves gets its 404 whatever its body', async (t) => {
  const upstream = await startFakeUpstream(t);
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url });
  const head = (path: string, extra: string) => `POST ${path} HTTP/1.1\r\nHost: n\r\nAuthorization: Bearer ${node.secret}\r\nContent-Type: application/json\r\n${extra}\r\n`;
  const healthz = 'GET /healthz HTTP/1.1\r\nHost: n\r\n\r\n';

  t.test('a gzip body gets the 404 with its hint, not 415, and the connection serves the next request', async (t) => {
    const conn = openRaw(node.origin);
    t.teardown(() => conn.close());
    const body = Buffer.from([0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03]);
    conn.write(Buffer.concat([Buffer.from(head('/chat/completions', `Content-Encoding: gzip\r\nContent-Length: ${body.length}\r\n`)), body]));
    const res = await conn.answer('the 404 to a gzip body');
    t.equal(res.status, 404);
    t.match(res.body, { error: { code: 'ZN_ERR_NOT_FOUND', message: ADD_V1 } });
    conn.write(healthz);
    t.equal((await conn.answer('the next request\'s answer')).status, 200, 'the same connection answers the next request');
  });

  t.test('a 5 MiB body (over the 4 MiB limit) gets the 404 with its hint, not 413, and the connection serves the next request', async (t) => {
    const body = Buffer.alloc(5 * 1024 * 1024, 0x20);
    // Declared up front (fastify refuses it unread) and chunked (fastify reads up to the limit).
    for (const [what, framing, payload] of [
      ['Content-Length', `Content-Length: ${body.length}\r\n`, body],
      ['chunked', 'Transfer-Encoding: chunked\r\n', Buffer.concat([Buffer.from(`${body.length.toString(16)}\r\n`), body, Buffer.from('\r\n0\r\n\r\n')])],
    ] as const) {
      const conn = openRaw(node.origin);
      t.teardown(() => conn.close());
      conn.write(Buffer.concat([Buffer.from(head('/chat/completions', framing)), payload]));
      const res = await conn.answer(`${what}: the 404 to a 5 MiB body`);
      t.equal(res.status, 404, what);
      t.match(res.body, { error: { code: 'ZN_ERR_NOT_FOUND', message: ADD_V1 } }, what);
      conn.write(healthz);
      t.equal((await conn.answer(`${what}: the next request's answer`)).status, 200, `${what}: the same connection answers the next request`);
    }
  });
});

t.test('a body left unread behind an early 404 that then breaks (a bad chunk, too slow) closes the connection: no second answer, no second count', async (t) => {
  const upstream = await startFakeUpstream(t);
  const ended: string[] = [];
  const finished: FinishedRequest[] = [];
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    requestTimeoutMs: 1000,
    services: { metrics: { ...recordingMetrics(finished), requestEndedBeforePipeline: (outcome, code) => void ended.push(`${outcome}:${code}`) } },
  });
  for (const [what, framing, rest] of [
    ['a bad chunk', 'Transfer-Encoding: chunked\r\n', 'zz\r\nhello\r\n'],
    ['a body too slow', 'Content-Length: 100000\r\n', 'x'],
  ] as const) {
    ended.length = 0;
    const { hostname, port } = new URL(node.origin);
    const socket = connect(Number(port), hostname);
    let received = '';
    let closed = false;
    socket.on('data', (chunk: Buffer) => (received += chunk.toString('latin1')));
    socket.on('error', () => undefined);
    socket.on('close', () => (closed = true));
    t.teardown(() => socket.destroy());
    socket.write(`POST /nope HTTP/1.1\r\nHost: n\r\nContent-Type: application/json\r\n${framing}\r\n`);
    await waitFor(() => received.includes('\r\n\r\n') || undefined, { what: `${what}: the 404` });
    socket.write(rest);
    await waitFor(() => closed || undefined, { what: `${what}: the connection closed`, timeoutMs: 15_000 });
    t.equal(received.match(/HTTP\/1\.1 /g)?.length, 1, `${what}: one answer only`);
    t.match(received, /^HTTP\/1\.1 404 /, `${what}: the 404`);
    t.same(ended, ['rejected:ZN_ERR_NOT_FOUND'], `${what}: counted once`);
  }
});
