// A body sent with `Transfer-Encoding: gzip, chunked` (or deflate, br, …) is compressed as one with
// `Content-Encoding: gzip` is: the node decodes neither, so it refuses both with 415
// ZN_ERR_UNSUPPORTED_ENCODING (its message naming Transfer-Encoding), on both surfaces in their own
// error shape, rather than reading the compressed bytes as a body that is not valid UTF-8.
import { gzipSync, deflateSync } from 'node:zlib';
import t from 'tap';
import { rawSocket } from '../fixtures/raw-socket.js';
import { startFakeAnthropicUpstream } from '../fixtures/fake-anthropic-upstream.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { waitFor } from '../fixtures/wait-for.js';
import { startPipelineNode, withClaudeRoute } from './pipeline/pipeline-harness.js';

const REQUEST_ID = /^req_[0-9A-HJKMNP-TV-Z]{26}$/;

interface Answer {
  status: number;
  headers: Map<string, string>;
  body: unknown;
}

/** The first whole answer in `text` (its body as long as its Content-Length), or undefined while it is still arriving. */
function wholeAnswer(text: string): Answer | undefined {
  const split = text.indexOf('\r\n\r\n');
  if (split < 0) return undefined;
  const [statusLine, ...headerLines] = text.slice(0, split).split('\r\n');
  const headers = new Map(headerLines.map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]));
  const body = text.slice(split + 4);
  const length = Number(headers.get('content-length'));
  if (!(Buffer.byteLength(body) >= length)) return undefined;
  return { status: Number(statusLine?.split(' ')[1]), headers, body: JSON.parse(body.slice(0, length)) as unknown };
}

t.test('transfer codings other than chunked', async (t) => {
  const upstream = await startFakeUpstream(t);
  const anthropic = await startFakeAnthropicUpstream(t);
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url, bundle: (base) => withClaudeRoute(base, anthropic.url) });
  const chatBody = JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'hi' }] });
  const messagesBody = JSON.stringify({ model: 'claude', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] });

  /** One request over a raw socket, its body in one chunk: what the node answered. */
  async function send(path: string, auth: string, transferEncoding: string, body: Buffer): Promise<Answer> {
    const { socket, answer } = rawSocket(t, node.origin);
    socket.write(`POST ${path} HTTP/1.1\r\nHost: node\r\n${auth}Content-Type: application/json\r\nTransfer-Encoding: ${transferEncoding}\r\n\r\n`);
    socket.write(`${body.length.toString(16)}\r\n`);
    socket.write(body);
    socket.write('\r\n0\r\n\r\n');
    return waitFor(() => wholeAnswer(answer()), { what: `the answer to ${transferEncoding}` });
  }
  const chat = (te: string, body: Buffer) => send('/v1/chat/completions', `Authorization: Bearer ${node.secret}\r\n`, te, body);
  const messages = (te: string, body: Buffer) => send('/v1/messages', `x-api-key: ${node.secret}\r\nanthropic-version: 2023-06-01\r\n`, te, body);
  const codings: Array<[string, (text: string) => Buffer]> = [
    ['gzip, chunked', (text) => gzipSync(text)],
    ['deflate, chunked', (text) => deflateSync(text)],
    ['GZip ,chunked', (text) => gzipSync(text)],
  ];

  t.test("on /v1/chat/completions: 415 ZN_ERR_UNSUPPORTED_ENCODING in OpenAI's shape, naming Transfer-Encoding", async (t) => {
    const before = upstream.requests.length;
    for (const [te, encode] of codings) {
      const res = await chat(te, encode(chatBody));
      t.equal(res.status, 415, te);
      t.match(res.body, { error: { type: 'invalid_request_error', code: 'ZN_ERR_UNSUPPORTED_ENCODING', message: /^Transfer-Encoding ".*" is not supported/ } }, te);
      t.match(res.headers.get('x-request-id'), REQUEST_ID, `${te}: x-request-id`);
      t.equal(res.headers.get('x-should-retry'), 'false', `${te}: not to be resent`);
      t.notOk(res.headers.has('request-id'), `${te}: no Anthropic header off Anthropic's paths`);
    }
    t.equal(upstream.requests.length, before, 'nothing was forwarded');
  });

  t.test("on /v1/messages: 415 ZN_ERR_UNSUPPORTED_ENCODING in Anthropic's shape with request-id", async (t) => {
    const before = anthropic.requests.length;
    for (const [te, encode] of codings) {
      const res = await messages(te, encode(messagesBody));
      t.equal(res.status, 415, te);
      t.match(res.body, { type: 'error', error: { type: 'invalid_request_error', code: 'ZN_ERR_UNSUPPORTED_ENCODING', details: { error_code: 'ZN_ERR_UNSUPPORTED_ENCODING' }, message: /^Transfer-Encoding ".*" is not supported/ } }, te);
      t.match(res.headers.get('request-id'), REQUEST_ID, `${te}: request-id`);
      t.equal(res.headers.get('request-id'), res.headers.get('x-request-id'), `${te}: the same id in both headers`);
    }
    t.equal(anthropic.requests.length, before, 'nothing was forwarded');
  });

  t.test('a plain chunked body is still served on both surfaces', async (t) => {
    const chatAnswer = await chat('chunked', Buffer.from(chatBody));
    t.equal(chatAnswer.status, 200);
    const messagesAnswer = await messages('chunked', Buffer.from(messagesBody));
    t.equal(messagesAnswer.status, 200);
    t.match(messagesAnswer.body, { type: 'message' });
  });
});
