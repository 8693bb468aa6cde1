// Requests Node's HTTP parser refuses (headers too large: 431, a malformed request: 400) never reach
// fastify; the node answers them itself. On /v1/messages they come in Anthropic's error shape with
// `request-id` (when the request line is in the read the parser failed on), elsewhere in OpenAI's.
// A parser error behind an answer in progress (pipelining) closes the connection instead of
// writing into it. Node's own answers (no Host, an unknown Expect, 100 Continue for a body over the
// limit) are the node's too. Raw bytes over a real socket: no HTTP client sends such requests.
import { connect } from 'node:net';
import t from 'tap';
import { startPipelineNode } from './pipeline/pipeline-harness.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { waitFor } from '../fixtures/wait-for.js';

interface RawAnswer {
  status: number;
  headers: Map<string, string>;
  body: unknown;
}

/** Writes `request` in one write and reads the answer until the node closes the connection. */
async function sendRaw(origin: string, request: string): Promise<RawAnswer> {
  const { hostname, port } = new URL(origin);
  const socket = connect(Number(port), hostname);
  const chunks: Buffer[] = [];
  let closed = false;
  socket.on('data', (chunk: Buffer) => chunks.push(chunk));
  socket.on('error', () => undefined); // the node resets after answering
  socket.on('close', () => {
    closed = true;
  });
  socket.write(request);
  await waitFor(() => closed, { what: 'the node to answer and close the connection' });
  const text = Buffer.concat(chunks).toString('utf8');
  const split = text.indexOf('\r\n\r\n');
  const [statusLine, ...headerLines] = text.slice(0, split).split('\r\n');
  const headers = new Map(headerLines.map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]));
  return { status: Number(statusLine?.split(' ')[1]), headers, body: JSON.parse(text.slice(split + 4)) as unknown };
}

/** Well over Node's default 16 KiB limit for a request's headers. */
const OVERSIZED = `x-filler: ${'a'.repeat(20_000)}\r\n`;
const REQUEST_ID = /^req_[0-9A-HJKMNP-TV-Z]{26}$/;

t.test('errors of the HTTP parser', async (t) => {
  const upstream = await startFakeUpstream(t);
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url });
  const head = (target: string, extra: string) => `POST ${target} HTTP/1.1\r\nHost: node\r\nContent-Type: application/json\r\n${extra}\r\n`;

  t.test("oversized headers on /v1/messages get 431 in Anthropic's error shape with request-id", async (t) => {
    for (const target of ['/v1/messages', '/v1/messages?beta=true']) {
      const res = await sendRaw(node.origin, head(target, OVERSIZED));
      t.equal(res.status, 431, target);
      t.match(res.body, { type: 'error', error: { type: 'invalid_request_error', code: 'ZN_ERR_INVALID_REQUEST', details: { error_code: 'ZN_ERR_INVALID_REQUEST' }, message: /headers are too large/ } }, target);
      t.match(res.headers.get('request-id'), REQUEST_ID);
      t.equal(res.headers.get('request-id'), res.headers.get('x-request-id'), 'the same id in both headers');
    }
  });

  t.test("a malformed header line on /v1/messages gets 400 in Anthropic's error shape", async (t) => {
    const res = await sendRaw(node.origin, head('/v1/messages', 'no colon here\r\n'));
    t.equal(res.status, 400);
    t.match(res.body, { type: 'error', error: { type: 'invalid_request_error', code: 'ZN_ERR_INVALID_REQUEST', message: /could not be parsed/ } });
    t.match(res.headers.get('request-id'), REQUEST_ID);
  });

  t.test("the same errors on OpenAI's paths, and requests without a readable request line, keep OpenAI's shape", async (t) => {
    const oversized = await sendRaw(node.origin, head('/v1/chat/completions', OVERSIZED));
    t.equal(oversized.status, 431);
    t.same(oversized.body, { error: { message: 'Invalid request: the request headers are too large.', type: 'invalid_request_error', param: null, code: 'ZN_ERR_INVALID_REQUEST' } });
    t.match(oversized.headers.get('x-request-id'), REQUEST_ID);
    t.notOk(oversized.headers.has('request-id'), "no Anthropic header off Anthropic's paths");
    // Not a request line: no target, so no Anthropic shape (nor a guess at one).
    const garbled = await sendRaw(node.origin, 'GARBLED/v1/messages\r\n\r\n');
    t.equal(garbled.status, 400);
    t.match(garbled.body, { error: { code: 'ZN_ERR_INVALID_REQUEST' } });
    t.notOk(garbled.headers.has('request-id'));
  });

  t.test('each of these answers tells the SDKs not to resend it (x-should-retry: false), as every error answer does', async (t) => {
    for (const raw of [head('/v1/chat/completions', OVERSIZED), head('/v1/messages', 'no colon here\r\n'), 'GARBLED/v1/messages\r\n\r\n']) {
      const res = await sendRaw(node.origin, raw);
      t.equal(res.headers.get('x-should-retry'), 'false', `${res.status}`);
    }
  });
});

/** A raw connection: what arrived so far as text, and whether the node closed it. */
function openRaw(origin: string): { write(data: string): void; text(): string; closed(): boolean; close(): void } {
  const { hostname, port } = new URL(origin);
  const socket = connect(Number(port), hostname);
  let text = '';
  let closed = false;
  socket.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
  socket.on('error', () => undefined);
  socket.on('close', () => (closed = true));
  return { write: (data) => socket.write(data), text: () => text, closed: () => closed, close: () => socket.destroy() };
}

/** The first whole answer in `text` with a Content-Length (a 1xx before it skipped), or undefined while it is still arriving. */
function firstAnswer(text: string): (RawAnswer & { interim: string[] }) | undefined {
  const interim: string[] = [];
  let rest = text;
  while (/^HTTP\/1\.1 1\d\d /.test(rest)) {
    const end = rest.indexOf('\r\n\r\n');
    if (end < 0) return undefined;
    interim.push(rest.slice(0, rest.indexOf('\r\n')));
    rest = rest.slice(end + 4);
  }
  const split = rest.indexOf('\r\n\r\n');
  if (split < 0) return undefined;
  const [statusLine, ...headerLines] = rest.slice(0, split).split('\r\n');
  const headers = new Map(headerLines.map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]));
  const body = rest.slice(split + 4);
  if (Buffer.byteLength(body) < Number(headers.get('content-length'))) return undefined;
  return { status: Number(statusLine?.split(' ')[1]), headers, body: JSON.parse(body) as unknown, interim };
}

t.test('a malformed request pipelined behind a stream being answered closes the connection without writing into that answer, and the stream\'s line says why', async (t) => {
  const upstream = await startFakeUpstream(t, { chunkDelayMs: 150 });
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url, requestTimeoutMs: 1000 });
  const content = Array.from({ length: 30 }, (_, i) => `word${i}`).join(' ');
  const body = JSON.stringify({ model: 'echo', stream: true, messages: [{ role: 'user', content }] });
  const streamRequest = `POST /v1/chat/completions HTTP/1.1\r\nHost: n\r\nAuthorization: Bearer ${node.secret}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
  const cases: Array<[string, string]> = [
    ['headers too large (431)', `GET /v1/models HTTP/1.1\r\nHost: n\r\n${OVERSIZED}\r\n`],
    ['half a request head, past the request timeout (408)', 'GET /v1/models HTTP/1.1\r\nHost: n\r\n'],
  ];
  for (const [what, next] of cases) {
    const conn = openRaw(node.origin);
    t.teardown(() => conn.close());
    conn.write(streamRequest);
    await waitFor(() => conn.text().includes('data: '), { what: `${what}: the stream to start` });
    conn.write(next);
    await waitFor(() => conn.closed(), { what: `${what}: the node to close the connection`, timeoutMs: 20_000 });
    t.equal(conn.text().match(/HTTP\/1\.1 \d{3} /g)?.length, 1, `${what}: no second answer written into the stream`);
    t.notOk(conn.text().includes('[DONE]'), `${what}: the stream was cut (the connection closed)`);
  }
  const lines = await waitFor(() => {
    const found = node.logs().filter((l) => l.msg === 'request finished');
    return found.length === 2 ? found : undefined;
  }, { what: 'both streams\' lines' });
  for (const line of lines) t.equal(line.closedByNode, 'malformed pipelined request', 'the line says the node closed it, and why');
});

t.test('what Node would answer itself comes in the node\'s shape with x-request-id: no Host, an unknown Expect, and 100-continue for a body over the limit', async (t) => {
  const upstream = await startFakeUpstream(t);
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url, maxBodyBytes: 64 * 1024 });
  const body = JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'hi' }] });
  const post = (target: string, headers: string, payload = body) =>
    `POST ${target} HTTP/1.1\r\n${headers}Authorization: Bearer ${node.secret}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}`;
  const answerTo = async (request: string) => {
    const conn = openRaw(node.origin);
    t.teardown(() => conn.close());
    conn.write(request);
    return waitFor(() => firstAnswer(conn.text()), { what: 'an answer' });
  };

  const noHost = await answerTo(post('/v1/chat/completions', ''));
  t.equal(noHost.status, 400, 'an HTTP/1.1 request without Host');
  t.match(noHost.body, { error: { code: 'ZN_ERR_INVALID_REQUEST', message: /must have a Host header/ } });
  t.match(noHost.headers.get('x-request-id'), REQUEST_ID);
  const noHostAnthropic = await answerTo(post('/v1/messages', ''));
  t.match(noHostAnthropic.body, { type: 'error', error: { code: 'ZN_ERR_INVALID_REQUEST' } }, "Anthropic's shape on /v1/messages");
  t.match(noHostAnthropic.headers.get('request-id'), REQUEST_ID);
  const http10 = await answerTo('GET /v1/models HTTP/1.0\r\nAuthorization: Bearer ' + node.secret + '\r\n\r\n');
  t.equal(http10.status, 200, 'HTTP/1.0 needs no Host');

  const bogus = await answerTo(post('/v1/chat/completions', 'Host: n\r\nExpect: bogus\r\n'));
  t.equal(bogus.status, 417, 'an Expect other than 100-continue');
  t.match(bogus.body, { error: { code: 'ZN_ERR_INVALID_REQUEST', message: /Expect "bogus" is not supported/ } });
  t.match(bogus.headers.get('x-request-id'), REQUEST_ID);
  t.equal(bogus.headers.get('x-should-retry'), 'false');

  // The head alone: a client that asked for 100-continue waits for it before sending the body.
  const tooLarge = await answerTo('POST /v1/chat/completions HTTP/1.1\r\nHost: n\r\nExpect: 100-continue\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n');
  t.same(tooLarge.interim, [], 'no 100 Continue for a body the node refuses');
  t.equal(tooLarge.status, 413);
  t.match(tooLarge.body, { error: { code: 'ZN_ERR_BODY_TOO_LARGE' } });
  t.match(tooLarge.headers.get('x-request-id'), REQUEST_ID);

  const conn = openRaw(node.origin);
  t.teardown(() => conn.close());
  conn.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: n\r\nExpect: 100-continue\r\nAuthorization: Bearer ${node.secret}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n`);
  await waitFor(() => conn.text().startsWith('HTTP/1.1 100 Continue\r\n\r\n'), { what: '100 Continue for a body within the limit' });
  conn.write(body);
  const served = await waitFor(() => firstAnswer(conn.text()), { what: 'the answer after the body' });
  t.equal(served.status, 200, 'the request is then served');
});

t.test('requests the parser refused are counted once each in the metrics of requests that ended before the pipeline', async (t) => {
  const upstream = await startFakeUpstream(t);
  const ended: string[] = [];
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    requestTimeoutMs: 500,
    services: {
      metrics: {
        requestFinished: () => undefined,
        requestEndedBeforePipeline: (status, code) => ended.push(`${status} ${code ?? 'none'}`),
      },
    },
  });
  await sendRaw(node.origin, `GET /v1/models HTTP/1.1\r\nHost: n\r\n${OVERSIZED}\r\n`);
  await waitFor(() => ended.length === 1, { what: 'the 431 counted' });
  await sendRaw(node.origin, 'GARBLED/v1/messages\r\n\r\n');
  await waitFor(() => ended.length === 2, { what: 'the malformed request counted' });
  // Its head was parsed, so it is a request the node saw: counted when its response closes, not twice.
  const stalled = openRaw(node.origin);
  t.teardown(() => stalled.close());
  stalled.write('POST /v1/chat/completions HTTP/1.1\r\nHost: n\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"mo');
  await waitFor(() => stalled.closed(), { what: 'the node to give up on the body', timeoutMs: 20_000 });
  t.match(stalled.text(), /^HTTP\/1\.1 408 /);
  await waitFor(() => ended.length >= 3, { what: 'the 408 counted' });
  // A request that is served after all this: if the 408 were counted twice it would show by now.
  const res = await fetch(`${node.origin}/v1/models`, { headers: { authorization: `Bearer ${node.secret}` } });
  t.equal(res.status, 200);
  t.same(ended, ['rejected ZN_ERR_INVALID_REQUEST', 'rejected ZN_ERR_INVALID_REQUEST', 'rejected ZN_ERR_INVALID_REQUEST']);
});
