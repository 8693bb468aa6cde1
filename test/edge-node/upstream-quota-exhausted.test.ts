// An upstream account out of quota or credit (OpenAI's 429 insufficient_quota, a router's 402,
// Anthropic's 400 "credit balance is too low") is the node operator's problem, as a refused upstream
// key is: the node goes on to the route's next target, counts it against the target's health, and
// when nothing answers tells the caller a non-retryable 502 saying so — not a 429 rate limit its
// SDK resends three times and its developer reads as their own. An ordinary 429 stays a 429.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import t from 'tap';
import type { Test } from 'tap';
import type { ConfigBundle, RequestRecord } from '../../proto/src/index.js';
import { buildApp } from '../../edge-node/src/app.js';
import { ConfigHolder } from '../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { startFakeAnthropicUpstream } from '../fixtures/fake-anthropic-upstream.js';
import type { FakeAnthropicUpstream } from '../fixtures/fake-anthropic-upstream.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import type { FakeUpstream } from '../fixtures/fake-upstream.js';
import { waitFor } from '../fixtures/wait-for.js';
import { anthropicSdkError, recordsInto } from './anthropic-fixtures.js';
import { UPSTREAM_SECRET, bundleKey, newCallerKey, testBundle } from './config-fixtures.js';
import { listenOnLoopback } from './node-harness.js';
import { sdkError } from './pipeline/pipeline-harness.js';

/** OpenAI's answer for an account with no quota left (HTTP 429). */
const OPENAI_NO_QUOTA = {
  error: { message: 'You exceeded your current quota, please check your plan and billing details.', type: 'insufficient_quota', param: null, code: 'insufficient_quota' },
};
/** OpenRouter's answer for an account with no credits left (HTTP 402). */
const ROUTER_NO_CREDIT = { error: { code: 402, message: 'Insufficient credits. Add more using https://openrouter.ai/settings/credits' } };
/** Anthropic's answer for an account with no credit left (HTTP 400). */
const ANTHROPIC_NO_CREDIT = {
  type: 'error',
  error: { type: 'invalid_request_error', message: 'Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.' },
};

const ask = { messages: [{ role: 'user' as const, content: 'hello' }] };

interface Node {
  baseURL: string;
  origin: string;
  secret: string;
  broke: FakeUpstream;
  good: FakeUpstream;
  claude: FakeAnthropicUpstream;
  records: RequestRecord[];
  logs: () => Array<Record<string, unknown>>;
  openai: () => OpenAI;
}

/**
 * An upstream that answers every chat stream with an in-band insufficient_quota error as its first
 * event (as some routers do under a 200), counting its requests.
 */
async function startInBandQuotaUpstream(t: Test, event = `data: ${JSON.stringify(OPENAI_NO_QUOTA)}\n\n`): Promise<{ url: string; requests: () => number }> {
  let requests = 0;
  const server = http.createServer((req, res) => {
    requests++;
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end(event);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => {
    server.closeAllConnections();
    server.close(() => resolve());
  }));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, requests: () => requests };
}

async function startNode(t: Test, inBandUrl = 'http://127.0.0.1:9/v1', claudeInBandUrl = 'http://127.0.0.1:9'): Promise<Node> {
  const broke = await startFakeUpstream(t);
  const good = await startFakeUpstream(t);
  const claude = await startFakeAnthropicUpstream(t);
  const key = newCallerKey();
  const route = (alias: string, upstream: string, fallbacks: ConfigBundle['routes'][number]['fallbacks'] = []): ConfigBundle['routes'][number] => ({
    alias,
    targets: [{ upstream, model: upstream.startsWith('claude') ? 'claude-real' : 'demo-echo', weight: 1 }],
    fallbacks,
    timeoutMs: 30_000,
    // Retries on the same target would be spent if the node read the refusal as passing.
    retries: 2,
  });
  const bundle = testBundle({
    nodeId: 'node-quota',
    version: 1,
    upstreamUrl: broke.url,
    keys: [bundleKey('key-a', key.sha256)],
    upstreams: [
      { id: 'up-1', name: 'broke', kind: 'openai-compatible', baseUrl: broke.url, apiKey: UPSTREAM_SECRET, timeoutMs: 30_000 },
      { id: 'up-2', name: 'good', kind: 'openai-compatible', baseUrl: good.url, apiKey: UPSTREAM_SECRET, timeoutMs: 30_000 },
      { id: 'up-3', name: 'claude', kind: 'anthropic', baseUrl: claude.url, apiKey: 'sk-ant-upstream-secret-0123456789', timeoutMs: 30_000 },
      { id: 'up-4', name: 'in-band', kind: 'openai-compatible', baseUrl: inBandUrl, apiKey: UPSTREAM_SECRET, timeoutMs: 30_000 },
      { id: 'up-5', name: 'claude-in-band', kind: 'anthropic', baseUrl: claudeInBandUrl, apiKey: 'sk-ant-upstream-secret-0123456789', timeoutMs: 30_000 },
    ],
    routes: [
      route('solo', 'broke'),
      route('pair', 'broke', [{ upstream: 'good', model: 'demo-echo' }]),
      route('claude', 'claude'),
      route('in-band', 'in-band'),
      route('in-band-pair', 'in-band', [{ upstream: 'good', model: 'demo-echo' }]),
      route('claude-in-band', 'claude-in-band'),
    ],
  });
  const records: RequestRecord[] = [];
  const logLines: string[] = [];
  const logger = createLogger({ level: 'debug', destination: { write: (line: string) => void logLines.push(line) } });
  const app = await buildApp({ holder: ConfigHolder.ready(fromBundle(bundle)), logger, services: { nodeId: 'node-quota', spool: recordsInto(records) } });
  const { origin, baseURL } = await listenOnLoopback(t, app);
  return {
    baseURL,
    origin,
    secret: key.secret,
    broke,
    good,
    claude,
    records,
    logs: () => logLines.map((line) => JSON.parse(line) as Record<string, unknown>),
    // The SDK's own retries stay on (2), as a developer's client has them.
    openai: () => new OpenAI({ baseURL, apiKey: key.secret, maxRetries: 2, timeout: 20_000 }),
  };
}

function recordOf(node: Node, requestId: string | null | undefined): Promise<RequestRecord> {
  return waitFor(() => node.records.find((r) => r.requestId === requestId), { what: `the record of ${String(requestId)}` });
}

t.test("an OpenAI 429 insufficient_quota is answered as the node's non-retryable 502, sent upstream once", async (t) => {
  const node = await startNode(t);
  node.broke.setBehaviour({ failNext: { count: 10, status: 429, body: OPENAI_NO_QUOTA } });
  const err = await sdkError(node.openai().chat.completions.create({ model: 'solo', ...ask }));
  t.equal(err.status, 502);
  t.equal(err.code, 'ZN_ERR_UPSTREAM_ERROR');
  t.equal(err.type, 'server_error');
  t.match(err.message, /out of quota or credit/);
  t.match(err.message, /operator must top it up/);
  t.notMatch(err.message, /exceeded your current quota/, "the upstream's own text is not passed on");
  t.equal(err.headers?.get('x-should-retry'), 'false');
  t.equal(err.headers?.get('retry-after'), null, 'no Retry-After');
  t.equal(node.broke.requests.length, 1, 'neither the SDK nor the route retried it');
  const record = await recordOf(node, err.requestID);
  t.match(record, { status: 'failed', httpStatus: 502, upstream: null, attempts: [{ upstream: 'broke', outcome: 'status', httpStatus: 429 }] });
  t.equal(record.attempts.length, 1);
});

t.test('an upstream 402 (a router out of credits) is answered as the same 502, not the caller\'s 402', async (t) => {
  const node = await startNode(t);
  node.broke.setBehaviour({ failNext: { count: 10, status: 402, body: ROUTER_NO_CREDIT } });
  const err = await sdkError(node.openai().chat.completions.create({ model: 'solo', ...ask }));
  t.equal(err.status, 502);
  t.equal(err.code, 'ZN_ERR_UPSTREAM_ERROR');
  t.match(err.message, /out of quota or credit/);
  t.equal(err.headers?.get('x-should-retry'), 'false');
  t.equal(node.broke.requests.length, 1);
});

t.test('a route whose first target is out of quota is answered by its fallback', async (t) => {
  const node = await startNode(t);
  for (const [status, body] of [[429, OPENAI_NO_QUOTA], [402, ROUTER_NO_CREDIT]] as const) {
    node.broke.setBehaviour({ failNext: { count: 1, status, body } });
    const before = node.broke.requests.length;
    const { data, response } = await node.openai().chat.completions.create({ model: 'pair', ...ask }).withResponse();
    t.ok(data.choices[0]?.message.content, `the fallback answered after an upstream ${status}`);
    t.equal(node.broke.requests.length - before, 1, `the target out of quota was tried once (${status})`);
    const record = await recordOf(node, response.headers.get('x-request-id'));
    t.match(record, { status: 'ok', upstream: 'good', attempts: [{ upstream: 'broke', httpStatus: status }, { upstream: 'good', outcome: 'ok' }] });
  }
});

t.test('a target that keeps answering insufficient_quota is ejected (tried last), as one refusing the node key is', async (t) => {
  const node = await startNode(t);
  node.broke.setBehaviour({ failNext: { count: 100, status: 429, body: OPENAI_NO_QUOTA } });
  // Five failures in a row eject a target (target-health.ts DEFAULT_FAILURE_THRESHOLD).
  for (let i = 0; i < 5; i++) await node.openai().chat.completions.create({ model: 'pair', ...ask });
  await waitFor(() => node.logs().find((l) => l.msg === 'upstream target keeps failing; it is tried last until it answers again' && l.upstream === 'broke'), {
    what: 'the ejection log line',
  });
  await node.openai().chat.completions.create({ model: 'pair', ...ask });
  t.equal(node.broke.requests.length, 5, 'the sixth call went to the fallback first');
  t.equal(node.good.requests.length, 6);
});

t.test('an ordinary upstream 429 (a rate limit) is still passed on as a retryable 429 with its Retry-After', async (t) => {
  const node = await startNode(t);
  node.broke.setBehaviour({ failNext: { count: 10, status: 429, body: { error: { message: 'Rate limit reached', type: 'requests', code: 'rate_limit_exceeded' } } } });
  const client = new OpenAI({ baseURL: node.baseURL, apiKey: node.secret, maxRetries: 0, timeout: 20_000 });
  const err = await sdkError(client.chat.completions.create({ model: 'solo', ...ask }));
  t.equal(err.status, 429);
  t.equal(err.type, 'rate_limit_error');
  t.equal(err.headers?.get('retry-after'), '1');
  t.equal(err.headers?.get('x-should-retry'), 'true');
});

t.test("Anthropic's 400 \"credit balance is too low\" is answered as the node's 502, sent once", async (t) => {
  const node = await startNode(t);
  node.claude.setBehaviour({ failNext: { count: 10, status: 400, body: ANTHROPIC_NO_CREDIT } });
  const client = new Anthropic({ baseURL: node.origin, apiKey: node.secret, maxRetries: 2, timeout: 20_000 });
  const err = await anthropicSdkError(client.messages.create({ model: 'claude', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] }));
  t.equal(err.status, 502);
  t.equal(err.errorCode, 'ZN_ERR_UPSTREAM_ERROR');
  t.match(err.message, /out of quota or credit/);
  t.notMatch(err.message, /credit balance is too low/, "the upstream's own text is not passed on");
  t.equal(err.headers?.get('x-should-retry'), 'false');
  t.equal(node.claude.requests.length, 1);
});

t.test('an insufficient_quota error as a stream\'s first event is not retried on the target, falls back, and charges nothing', async (t) => {
  const inBand = await startInBandQuotaUpstream(t);
  const node = await startNode(t, inBand.url);
  const err = await sdkError(node.openai().chat.completions.create({ model: 'in-band', ...ask, stream: true }));
  t.equal(err.status, 502);
  t.equal(err.code, 'ZN_ERR_UPSTREAM_ERROR');
  t.match(err.message, /out of quota or credit/);
  t.equal(err.headers?.get('x-should-retry'), 'false');
  t.equal(inBand.requests(), 1, 'neither the SDK nor the route retried it');
  const record = await recordOf(node, err.requestID);
  t.match(record, { status: 'failed', upstream: null });
  t.equal(record.attempts.length, 1);

  const stream = await node.openai().chat.completions.create({ model: 'in-band-pair', ...ask, stream: true });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
  t.ok(text, 'the fallback streamed the answer');
  t.equal(inBand.requests(), 2, 'the target out of quota was tried once more, for the second call only');
});

t.test("an Anthropic billing_error as a stream's first event is the node's 502, not the caller's 402", async (t) => {
  const billing = { type: 'error', error: { type: 'billing_error', message: 'Your credit balance is too low.' } };
  const inBand = await startInBandQuotaUpstream(t, `event: error\ndata: ${JSON.stringify(billing)}\n\n`);
  const node = await startNode(t, undefined, inBand.url);
  const client = new Anthropic({ baseURL: node.origin, apiKey: node.secret, maxRetries: 2, timeout: 20_000 });
  const err = await anthropicSdkError(client.messages.create({ model: 'claude-in-band', max_tokens: 5, stream: true, messages: [{ role: 'user', content: 'x' }] }));
  t.equal(err.status, 502);
  t.equal(err.errorCode, 'ZN_ERR_UPSTREAM_ERROR');
  t.match(err.message, /out of quota or credit/);
  t.equal(err.headers?.get('x-should-retry'), 'false');
  t.equal(inBand.requests(), 1, 'neither the SDK nor the route retried it');
});

t.test('an insufficient_quota error object as a 2xx JSON answer is the same 502, not retried on the target, and the fallback answers', async (t) => {
  let requests = 0;
  const server = http.createServer((req, res) => {
    requests++;
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(OPENAI_NO_QUOTA)));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => {
    server.closeAllConnections();
    server.close(() => resolve());
  }));
  const node = await startNode(t, `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`);
  const err = await sdkError(node.openai().chat.completions.create({ model: 'in-band', ...ask }));
  t.equal(err.status, 502);
  t.equal(err.code, 'ZN_ERR_UPSTREAM_ERROR');
  t.match(err.message, /out of quota or credit/);
  t.equal(err.headers?.get('x-should-retry'), 'false');
  t.equal(requests, 1, 'neither the SDK nor the route retried it');
  const record = await recordOf(node, err.requestID);
  t.match(record, { status: 'failed', upstream: null, attempts: [{ upstream: 'in-band', outcome: 'error', httpStatus: 200 }] });
  t.equal(record.attempts.length, 1);

  const { data } = await node.openai().chat.completions.create({ model: 'in-band-pair', ...ask }).withResponse();
  t.ok(data.choices[0]?.message.content, 'the fallback answered');
  t.equal(requests, 2, 'the target out of quota was tried once more, for the second call only');
});
