// An upstream may put the node's own key for it into an error's `code` or `type` (a local vLLM
// started with `--api-key`, whose short key no credential shape matches). The node quotes an
// upstream's code or type in the caller's error and its "upstream call failed" log line, so it must
// know that key to refuse it: on an error status it always did; an error reported in band (a 2xx
// whose body is an error object, a stream's `event: error` or a chunk carrying `error`) used to be
// classified without it, and the key reached the caller and the log.
import t from 'tap';
import type { Test } from 'tap';
import { startRawUpstream } from '../fixtures/raw-upstream.js';
import { waitFor } from '../fixtures/wait-for.js';
import { startPipelineNode } from './pipeline/pipeline-harness.js';
import type { PipelineNode } from './pipeline/pipeline-harness.js';
import { upstreamAnswerError, upstreamStreamError } from '../../edge-node/src/upstream/upstream-failure.js';

/** Short, lower-case letters only: reads as an error code unless the node knows it is its key. */
const SECRET = 'vllmlocalsecret';

type Surface = 'chat' | 'messages' | 'embeddings';

/** A node whose only upstream (OpenAI-compatible `demo`, or Anthropic `claude`) holds SECRET and answers every call 200 with `body`. */
async function nodeBehind(t: Test, surface: Surface, contentType: string, body: string): Promise<PipelineNode> {
  const upstream = await startRawUpstream(t, (socket) => {
    socket.end(`HTTP/1.1 200 OK\r\ncontent-type: ${contentType}\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
  });
  return startPipelineNode(t, {
    upstreamUrl: upstream.url,
    bundle: (base) =>
      surface === 'messages'
        ? {
            upstreams: [{ id: 'up-c', name: 'claude', kind: 'anthropic', baseUrl: upstream.url, apiKey: SECRET, timeoutMs: 10_000 }],
            routes: [...base.routes, { alias: 'claude', targets: [{ upstream: 'claude', model: 'claude-real', weight: 1 }], fallbacks: [], timeoutMs: 10_000, retries: 0 }],
          }
        : { upstreams: base.upstreams.map((u) => ({ ...u, apiKey: SECRET })) },
  });
}

async function call(node: PipelineNode, surface: Surface, stream: boolean): Promise<{ status: number; text: string }> {
  const [path, body] =
    surface === 'chat'
      ? ['/v1/chat/completions', { model: 'echo', stream, messages: [{ role: 'user', content: 'hi' }] }]
      : surface === 'messages'
        ? ['/v1/messages', { model: 'claude', max_tokens: 50, stream, messages: [{ role: 'user', content: 'hi' }] }]
        : ['/v1/embeddings', { model: 'echo', input: 'hi' }];
  const res = await fetch(`${node.origin}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
    body: JSON.stringify(body),
  });
  return { status: res.status, text: await res.text() };
}

/** The node's error as the caller got it: a JSON body's, or the data of its stream's `event: error`. */
function callerError(text: string): { code?: string; message?: string } | undefined {
  const event = /^event: error\ndata: (.*)$/m.exec(text);
  const parsed = JSON.parse(event === null ? text : event[1]!) as { error?: { code?: string; message?: string } };
  return parsed.error;
}

/** The reason of the warn line `msg` ("upstream call failed", "upstream stream failed"), once the node has written it. */
async function loggedReason(node: PipelineNode, msg: string): Promise<string> {
  const line = await waitFor(() => node.logs().find((l) => l.msg === msg), { what: `the "${msg}" log line` });
  return String(line.reason);
}

const sse = (events: Array<[event: string | undefined, data: unknown]>): string => events.map(([event, data]) => `${event === undefined ? '' : `event: ${event}\n`}data: ${JSON.stringify(data)}\n\n`).join('');
const chatChunk = { id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'demo-echo', choices: [{ index: 0, delta: { content: 'he' }, finish_reason: null }] };
const messageStart = { type: 'message_start', message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-real', content: [], stop_reason: null, usage: { input_tokens: 3, output_tokens: 1 } } };

interface Case {
  name: string;
  surface: Surface;
  stream: boolean;
  contentType: string;
  body: string;
  /** The caller's status: 502 for an attempt that failed before anything was sent, 200 for a stream the error ended. */
  status: number;
  message: string;
}

const cases: Case[] = [
  {
    name: 'a chat answer that is only an error object does not quote the key given as its code',
    surface: 'chat',
    stream: false,
    contentType: 'application/json',
    body: JSON.stringify({ error: { code: SECRET, type: 'server_error', message: `bad key ${SECRET}` } }),
    status: 502,
    message: 'Upstream "demo" answered HTTP 2xx with an error object (server_error).',
  },
  {
    name: 'a chat answer that is only an error object does not quote the key given as its type',
    surface: 'chat',
    stream: false,
    contentType: 'application/json',
    body: JSON.stringify({ error: { type: SECRET, message: 'no' } }),
    status: 502,
    message: 'Upstream "demo" answered HTTP 2xx with an error object.',
  },
  {
    name: "an in-band quota error does not quote the key in the node's quota message",
    surface: 'chat',
    stream: false,
    contentType: 'application/json',
    body: JSON.stringify({ error: { code: SECRET, type: 'insufficient_quota', message: 'no' } }),
    status: 502,
    message: 'Upstream "demo" answered HTTP 2xx with an error object (insufficient_quota): the node\'s account with this upstream is out of quota or credit.',
  },
  {
    name: 'an embeddings answer that is only an error object does not quote the key given as its code',
    surface: 'embeddings',
    stream: false,
    contentType: 'application/json',
    body: JSON.stringify({ error: { code: SECRET, message: 'no' } }),
    status: 502,
    message: 'Upstream "demo" answered HTTP 2xx with an error object.',
  },
  {
    name: 'a chat stream request answered with a JSON error object does not quote the key given as its code',
    surface: 'chat',
    stream: true,
    contentType: 'application/json',
    body: JSON.stringify({ error: { code: SECRET, message: 'no' } }),
    status: 502,
    message: 'Upstream "demo" answered HTTP 2xx with an error object.',
  },
  {
    name: "an OpenAI stream's error event does not quote the key given as its code in the caller's stream",
    surface: 'chat',
    stream: true,
    contentType: 'text/event-stream',
    body: sse([[undefined, chatChunk], ['error', { error: { code: SECRET, message: 'x' } }]]),
    status: 200,
    message: 'Upstream "demo" ended the stream with an error.',
  },
  {
    name: "an OpenAI stream's chunk carrying an error does not quote the key given as its type in the caller's stream",
    surface: 'chat',
    stream: true,
    contentType: 'text/event-stream',
    body: sse([[undefined, chatChunk], [undefined, { ...chatChunk, error: { type: SECRET, message: 'x' } }]]),
    status: 200,
    message: 'Upstream "demo" ended the stream with an error.',
  },
  {
    name: "an OpenAI stream's error as its first event does not quote the key in the caller's 502",
    surface: 'chat',
    stream: true,
    contentType: 'text/event-stream',
    body: sse([['error', { error: { code: SECRET, message: 'x' } }]]),
    status: 502,
    message: 'Upstream "demo" ended the stream with an error.',
  },
  {
    name: "an Anthropic stream's error event does not quote the key given as its type in the caller's stream",
    surface: 'messages',
    stream: true,
    contentType: 'text/event-stream',
    body: sse([['message_start', messageStart], ['error', { type: 'error', error: { type: SECRET, message: 'x' } }]]),
    status: 200,
    message: 'Upstream "claude" ended the stream with an error.',
  },
  {
    name: "an Anthropic stream's error event does not quote the key given as its code in the caller's stream",
    surface: 'messages',
    stream: true,
    contentType: 'text/event-stream',
    body: sse([['message_start', messageStart], ['error', { type: 'error', error: { type: 'api_error', code: SECRET, message: 'x' } }]]),
    status: 200,
    message: 'Upstream "claude" ended the stream with an error (api_error).',
  },
  {
    name: 'an Anthropic answer that is only an error does not quote the key given as its type',
    surface: 'messages',
    stream: false,
    contentType: 'application/json',
    body: JSON.stringify({ type: 'error', error: { type: SECRET, message: 'x' } }),
    status: 502,
    message: 'Upstream "claude" answered HTTP 2xx with an error object.',
  },
  {
    name: 'an Anthropic stream request answered with a JSON error does not quote the key given as its type',
    surface: 'messages',
    stream: true,
    contentType: 'application/json',
    body: JSON.stringify({ type: 'error', error: { type: SECRET, message: 'x' } }),
    status: 502,
    message: 'Upstream "claude" answered HTTP 2xx with an error object.',
  },
];

for (const c of cases) {
  t.test(c.name, async (t) => {
    const node = await nodeBehind(t, c.surface, c.contentType, c.body);
    const { status, text } = await call(node, c.surface, c.stream);
    t.equal(status, c.status, 'the status');
    t.notOk(text.includes(SECRET), "the key is nowhere in the caller's answer");
    const error = callerError(text);
    t.equal(error?.code, 'ZN_ERR_UPSTREAM_ERROR', 'still the documented code');
    t.match(error?.message, c.message, 'the message, without the key');
    // A stream the error ended after its first event is logged as such; an attempt that failed before, as an upstream call.
    const logged = await loggedReason(node, c.status === 200 ? 'upstream stream failed' : 'upstream call failed');
    t.match(logged, c.message, 'the log line, without the key');
    t.notOk(node.logText().includes(SECRET), 'the key is nowhere in the log');
  });
}

t.test('an in-band error still quotes an ordinary code, and refuses half of the key as it does on an error status', async (t) => {
  const withCode = (code: string): unknown => ({ error: { code, message: 'no' } });
  t.equal(upstreamAnswerError('up', withCode('model_overloaded'), SECRET).message, 'Upstream "up" answered HTTP 2xx with an error object (model_overloaded).');
  t.equal(upstreamStreamError('up', withCode('model_overloaded'), SECRET).message, 'Upstream "up" ended the stream with an error (model_overloaded).');
  for (const code of [SECRET, SECRET.slice(0, 8), SECRET.slice(-8), `x_${SECRET}_y`]) {
    t.equal(upstreamAnswerError('up', withCode(code), SECRET).message, 'Upstream "up" answered HTTP 2xx with an error object.', code);
    t.equal(upstreamStreamError('up', withCode(code), SECRET).message, 'Upstream "up" ended the stream with an error.', code);
  }
});
