// A request whose head was read but whose body failed to arrive (cut short until the request
// timeout: 408; a malformed chunk: 400) is answered by the node itself, outside fastify. That answer
// is the request's own: the x-request-id its "request finished" line logs, and on /v1/messages
// Anthropic's shape with `request-id`, whatever the read the parser failed on held.
import t from 'tap';
import type { Test } from 'tap';
import { rawSocket } from '../fixtures/raw-socket.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { waitFor } from '../fixtures/wait-for.js';
import { startPipelineNode } from './pipeline/pipeline-harness.js';
import type { PipelineNode } from './pipeline/pipeline-harness.js';

const REQUEST_ID = /^req_[0-9A-HJKMNP-TV-Z]{26}$/;

interface Answer {
  status: number;
  headers: Map<string, string>;
  body: unknown;
}

function parse(text: string): Answer {
  // A 100 Continue before the answer is skipped.
  const rest = text.replace(/^HTTP\/1\.1 100 Continue\r\n\r\n/, '');
  const split = rest.indexOf('\r\n\r\n');
  const [statusLine, ...headerLines] = rest.slice(0, split).split('\r\n');
  const headers = new Map(headerLines.map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]));
  return { status: Number(statusLine?.split(' ')[1]), headers, body: JSON.parse(rest.slice(split + 4)) as unknown };
}

/** The one "request finished" line of the node (each test starts its own node). */
async function finishedLine(node: PipelineNode): Promise<Record<string, unknown>> {
  return waitFor(() => node.logs().find((l) => l.msg === 'request finished'), { what: 'the request finished line' });
}

/** A body promised by Content-Length and never all sent: 408 once the request timeout passes. */
async function bodyCutShort(t: Test, node: PipelineNode, head: string): Promise<Answer> {
  const { socket, answer, closed } = rawSocket(t, node.origin);
  socket.write(`${head}Content-Type: application/json\r\nContent-Length: 4000\r\n\r\n{"model":"echo"`);
  await waitFor(() => closed(), { what: 'the node to answer 408 and close the connection', timeoutMs: 30_000 });
  return parse(answer());
}

/**
 * A chunked body whose first chunk size is not hex: 400. The bad chunk goes in a read of its own,
 * after the head was parsed (the node's 100 Continue says so), as a client streaming a body sends it.
 */
async function badChunk(t: Test, node: PipelineNode, head: string): Promise<Answer> {
  const { socket, answer, closed } = rawSocket(t, node.origin);
  socket.write(`${head}Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n`);
  await waitFor(() => answer().startsWith('HTTP/1.1 100 Continue\r\n\r\n'), { what: 'the head to be read (100 Continue)' });
  socket.write('zz\r\n{}\r\n0\r\n\r\n');
  await waitFor(() => closed(), { what: 'the node to answer 400 and close the connection' });
  return parse(answer());
}

const cases: Array<[string, number, (t: Test, node: PipelineNode, head: string) => Promise<Answer>]> = [
  ['a body cut short until the request timeout', 408, bodyCutShort],
  ['a malformed chunked body', 400, badChunk],
];

for (const [what, status, send] of cases) {
  t.test(`${what} on /v1/messages: Anthropic's shape, request-id, and the id of the request's log line`, async (t) => {
    const upstream = await startFakeUpstream(t);
    const node = await startPipelineNode(t, { upstreamUrl: upstream.url, requestTimeoutMs: 1000 });
    const res = await send(t, node, `POST /v1/messages HTTP/1.1\r\nHost: node\r\nx-api-key: ${node.secret}\r\nanthropic-version: 2023-06-01\r\n`);
    t.equal(res.status, status);
    t.match(res.body, { type: 'error', error: { type: 'invalid_request_error', code: 'ZN_ERR_INVALID_REQUEST', details: { error_code: 'ZN_ERR_INVALID_REQUEST' } } }, "Anthropic's error shape");
    const id = res.headers.get('x-request-id');
    t.match(id, REQUEST_ID);
    t.equal(res.headers.get('request-id'), id, 'request-id is the same id');
    const line = await finishedLine(node);
    t.match(line, { path: '/v1/messages', status, errorCode: 'ZN_ERR_INVALID_REQUEST' });
    t.equal(line.requestId, id, 'the answer carries the id its log line has');
    t.equal(upstream.requests.length, 0, 'nothing was forwarded');
  });

  t.test(`${what} on /v1/chat/completions: OpenAI's shape and the id of the request's log line, its own id beside it`, async (t) => {
    const upstream = await startFakeUpstream(t);
    const node = await startPipelineNode(t, { upstreamUrl: upstream.url, requestTimeoutMs: 1000 });
    const res = await send(t, node, `POST /v1/chat/completions HTTP/1.1\r\nHost: node\r\nAuthorization: Bearer ${node.secret}\r\nx-client-request-id: trace-42\r\n`);
    t.equal(res.status, status);
    t.match(res.body, { error: { type: 'invalid_request_error', code: 'ZN_ERR_INVALID_REQUEST' } }, "OpenAI's error shape");
    t.notOk(res.headers.has('request-id'), "no Anthropic header off Anthropic's paths");
    t.equal(res.headers.get('x-client-request-id'), 'trace-42', "the caller's own id is echoed, as on every answer");
    const line = await finishedLine(node);
    t.match(line, { path: '/v1/chat/completions', status, clientRequestId: 'trace-42' });
    t.equal(line.requestId, res.headers.get('x-request-id'), 'the answer carries the id its log line has');
  });
}
