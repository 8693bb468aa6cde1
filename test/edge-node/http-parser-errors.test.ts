// Requests Node's HTTP parser refuses (headers too large: 431, a malformed request: 400) never reach
// fastify; the node answers them itself. On /v1/messages they come in Anthropic's error shape with
// `request-id` (when the request line is in the read the parser failed on), elsewhere in OpenAI's.
// Raw bytes over a real socket: no HTTP client sends such requests.
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
