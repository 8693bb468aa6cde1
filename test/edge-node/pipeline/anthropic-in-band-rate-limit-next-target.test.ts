// A rate limit an Anthropic upstream reports in band — an `event: error` of type rate_limit_error as
// its stream's first event, or a 2xx JSON answer that is that error object — goes on to the next
// target as the same upstream's HTTP 429 does, without spending the route's retries on the limited
// target first. Nothing reached the caller before the next target answered: the caller gets the
// backup's answer alone. (An overloaded_error stays retried on the same target, as an HTTP 529 is:
// anthropic-stream-first-event-error-status.test.ts.)
import http from 'node:http';
import t from 'tap';
import { listenForTest } from '../../fixtures/loopback-server.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { startPipelineNode } from './pipeline-harness.js';
import type { PipelineNode } from './pipeline-harness.js';

type Answer = { status: number; headers?: Record<string, string>; body: string };

interface Scripted {
  url: string;
  answer: Answer;
  calls: number;
}

/** An upstream that gives every request the answer set last, counting the requests. */
async function scriptedUpstream(t: { teardown(fn: () => unknown): void }, answer: Answer): Promise<Scripted> {
  const state: Scripted = { url: '', answer, calls: 0 };
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      state.calls += 1;
      res.writeHead(state.answer.status, state.answer.headers ?? {});
      res.end(state.answer.body);
    });
  });
  state.url = await listenForTest(t, server);
  return state;
}

const rateLimitBody = JSON.stringify({ type: 'error', error: { type: 'rate_limit_error', message: 'slow down' } });
const sse = (type: string, body: Record<string, unknown>): string => `event: ${type}\ndata: ${JSON.stringify({ type, ...body })}\n\n`;

const ANSWERS = {
  inBandStream: { status: 200, headers: { 'content-type': 'text/event-stream' }, body: `event: error\ndata: ${rateLimitBody}\n\n` },
  inBandJson: { status: 200, headers: { 'content-type': 'application/json' }, body: rateLimitBody },
  http429: { status: 429, headers: { 'content-type': 'application/json' }, body: rateLimitBody },
} satisfies Record<string, Answer>;

const BACKUP_STREAM: Answer = {
  status: 200,
  headers: { 'content-type': 'text/event-stream' },
  body: [
    sse('message_start', { message: { id: 'msg_b', type: 'message', role: 'assistant', model: 'claude-real', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 3, output_tokens: 1 } } }),
    sse('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }),
    sse('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'from the backup' } }),
    sse('content_block_stop', { index: 0 }),
    sse('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 3 } }),
    sse('message_stop', {}),
  ].join(''),
};

const BACKUP_JSON: Answer = {
  status: 200,
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({
    id: 'msg_b', type: 'message', role: 'assistant', model: 'claude-real', content: [{ type: 'text', text: 'from the backup' }],
    stop_reason: 'end_turn', stop_sequence: null, usage: { input_tokens: 3, output_tokens: 3 },
  }),
};

/** Alias `claude`: the primary (two retries) then the backup as its fallback. */
async function setUp(t: { teardown(fn: () => unknown): void }) {
  const primary = await scriptedUpstream(t, ANSWERS.inBandStream);
  const backup = await scriptedUpstream(t, BACKUP_STREAM);
  const node = await startPipelineNode(t, {
    upstreamUrl: primary.url,
    bundle: (base) => ({
      upstreams: [
        ...base.upstreams,
        { id: 'up-p', name: 'claude-primary', kind: 'anthropic', baseUrl: primary.url, apiKey: 'sk-ant-primary-0123456789', timeoutMs: 30_000 },
        { id: 'up-b', name: 'claude-backup', kind: 'anthropic', baseUrl: backup.url, apiKey: 'sk-ant-backup-0123456789', timeoutMs: 30_000 },
      ],
      routes: [
        ...base.routes,
        { alias: 'claude', targets: [{ upstream: 'claude-primary', model: 'claude-real', weight: 1 }], fallbacks: [{ upstream: 'claude-backup', model: 'claude-real' }], timeoutMs: 30_000, retries: 2 },
      ],
    }),
  });
  return { primary, backup, node };
}

async function ask(node: PipelineNode, stream: boolean) {
  const res = await fetch(`${node.origin}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': node.secret, 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model: 'claude', max_tokens: 10, stream, messages: [{ role: 'user', content: 'hi' }] }),
    signal: AbortSignal.timeout(15_000),
  });
  const body = await res.text();
  const requestId = res.headers.get('x-request-id');
  const finished = await waitFor(() => node.finished.find((f) => f.requestId === requestId), { what: `the finished request ${String(requestId)}` });
  return { status: res.status, body, finished };
}

t.test('a rate_limit_error as a stream’s first event goes on to the next target at once, as an upstream HTTP 429 does', async (t) => {
  const { primary, backup, node } = await setUp(t);

  primary.answer = ANSWERS.http429;
  const viaHttp = await ask(node, true);
  t.equal(viaHttp.status, 200);
  t.equal(primary.calls, 1, 'an HTTP 429: the primary asked once, its retries not spent');

  primary.answer = ANSWERS.inBandStream;
  primary.calls = 0;
  backup.calls = 0;
  const inBand = await ask(node, true);
  t.equal(inBand.status, 200, 'answered by the backup');
  t.equal(primary.calls, 1, 'the rate-limited primary was asked once, not again for each of its two retries');
  t.equal(primary.calls, viaHttp.finished.attempts.filter((a) => a.upstream === 'claude-primary').length, 'as often as for an HTTP 429');
  t.equal(backup.calls, 1, 'the backup was asked next');
  t.same(inBand.finished.attempts.map((a) => [a.upstream, a.outcome]), [['claude-primary', 'error'], ['claude-backup', 'ok']]);
  t.equal(inBand.body.split('event: message_start').length - 1, 1, 'the caller got one message: nothing of the failed attempt');
  t.match(inBand.body, /from the backup/);
  t.notMatch(inBand.body, /event: error|rate_limit_error/, 'no error reached the caller');
});

t.test('a 2xx JSON answer that is a rate_limit_error goes on to the next target at once, as an upstream HTTP 429 does', async (t) => {
  const { primary, backup, node } = await setUp(t);
  backup.answer = BACKUP_JSON;
  primary.answer = ANSWERS.inBandJson;
  const inBand = await ask(node, false);
  t.equal(inBand.status, 200, 'answered by the backup');
  t.equal(primary.calls, 1, 'the rate-limited primary was asked once');
  t.equal(backup.calls, 1);
  t.same(inBand.finished.attempts.map((a) => [a.upstream, a.outcome]), [['claude-primary', 'error'], ['claude-backup', 'ok']]);
  t.match(JSON.parse(inBand.body), { content: [{ type: 'text', text: 'from the backup' }] });
});
