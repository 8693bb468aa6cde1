// An error an Anthropic upstream reports inside its stream, before anything reached the caller, is
// classified as on /v1/chat/completions: a rate limit, a timeout or an overload falls back (a rate
// limit without counting against the target's health) and, with no target left, is answered as
// retryable; an error that blames the request or the node's key is final. The last word is answered
// with the status an upstream HTTP error of its type would get (a 429, the request's 4xx, else 502).
import t from 'tap';
import type { RuntimeTarget } from '../../../edge-node/src/config/runtime-config.js';
import { TargetHealth } from '../../../edge-node/src/routing/target-health.js';
import { startFakeAnthropicUpstream } from '../../fixtures/fake-anthropic-upstream.js';
import type { FakeAnthropicUpstream } from '../../fixtures/fake-anthropic-upstream.js';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { startPipelineNode } from './pipeline-harness.js';
import type { PipelineNode } from './pipeline-harness.js';

interface Setup {
  node: PipelineNode;
  primary: FakeAnthropicUpstream;
  backup: FakeAnthropicUpstream;
  health: TargetHealth;
  primaryTarget: RuntimeTarget;
}

/** Alias `claude`: the primary, then the backup as its fallback; alias `claude-solo`: the primary alone. */
async function setUp(t: { teardown(fn: () => unknown): void }): Promise<Setup> {
  const primary = await startFakeAnthropicUpstream(t);
  const backup = await startFakeAnthropicUpstream(t);
  const demo = await startFakeUpstream(t);
  // Two retryable failures in a row eject a target: few enough for a test to see one count.
  const health = new TargetHealth({ failureThreshold: 2 });
  const primaryUpstream = { id: 'up-p', name: 'claude-primary', kind: 'anthropic' as const, baseUrl: primary.url, apiKey: 'sk-ant-primary-0123456789', timeoutMs: 30_000 };
  const node = await startPipelineNode(t, {
    upstreamUrl: demo.url,
    bundle: (base) => ({
      upstreams: [...base.upstreams, primaryUpstream, { id: 'up-b', name: 'claude-backup', kind: 'anthropic', baseUrl: backup.url, apiKey: 'sk-ant-backup-0123456789', timeoutMs: 30_000 }],
      routes: [
        ...base.routes,
        { alias: 'claude', targets: [{ upstream: 'claude-primary', model: 'claude-real', weight: 1 }], fallbacks: [{ upstream: 'claude-backup', model: 'claude-real' }], timeoutMs: 30_000, retries: 0 },
        { alias: 'claude-solo', targets: [{ upstream: 'claude-primary', model: 'claude-real', weight: 1 }], fallbacks: [], timeoutMs: 30_000, retries: 0 },
      ],
    }),
    services: { targetHealth: health },
  });
  const primaryTarget = { upstream: { name: primaryUpstream.name, kind: 'anthropic' as const, baseUrl: primary.url, apiKey: undefined, timeoutMs: 30_000 }, upstreamModel: 'claude-real', weight: 1 } as RuntimeTarget;
  return { node, primary, backup, health, primaryTarget };
}

/** One streamed /v1/messages call over fetch: status, the retry hint, the body and the request id. */
async function stream(node: PipelineNode, model: string, prompt: string) {
  const res = await fetch(`${node.origin}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': node.secret },
    body: JSON.stringify({ model, max_tokens: 50, stream: true, messages: [{ role: 'user', content: prompt }] }),
    signal: AbortSignal.timeout(15_000),
  });
  return { status: res.status, shouldRetry: res.headers.get('x-should-retry'), retryAfter: res.headers.get('retry-after'), body: await res.text(), requestId: res.headers.get('x-request-id') };
}

function finishedRequest(node: PipelineNode, requestId: string | null) {
  return waitFor(() => node.finished.find((f) => f.requestId === requestId), { what: `the finished request ${String(requestId)}` });
}

/**
 * Error types that blame the caller's request or the node's own upstream key (another target would
 * say the same), with the status each is answered with: the request's 4xx as an HTTP status would
 * be, the node's key a 502.
 */
const FINAL_TYPES: ReadonlyArray<readonly [string, number]> = [
  ['invalid_request_error', 400],
  ['authentication_error', 502],
  ['permission_error', 502],
  ['not_found_error', 404],
];

t.test('an error an Anthropic upstream reports in its stream before the first event falls back unless it blames the request or the node’s key, and a rate limit does not count against the target', async (t) => {
  const { node, primary, backup, health, primaryTarget } = await setUp(t);
  const ask = async (type: string) => {
    primary.setBehaviour({ errorEventAfterEvents: 0, errorEventType: type });
    const backupBefore = backup.requests.length;
    const answer = await stream(node, 'claude', `after ${type}`);
    return { answer, backupAsked: backup.requests.length - backupBefore, finished: await finishedRequest(node, answer.requestId) };
  };
  for (let i = 0; i < 3; i++) {
    const { answer, backupAsked, finished } = await ask('rate_limit_error');
    t.equal(answer.status, 200, 'rate_limit_error: answered');
    t.match(answer.body, /event: message_stop\ndata: [^\n]*\n\n$/, "rate_limit_error: the backup's complete answer");
    t.equal(backupAsked, 1, 'rate_limit_error: the backup was asked');
    t.match(finished.attempts, [{ upstream: 'claude-primary', outcome: 'error' }, { upstream: 'claude-backup', outcome: 'ok' }]);
  }
  t.notOk(health.isEjected(primaryTarget), 'three rate limits in a row are no failure of the target');
  for (const [type, status] of FINAL_TYPES) {
    const { answer, backupAsked, finished } = await ask(type);
    t.equal(answer.status, status, type);
    t.equal(answer.shouldRetry, 'false', `${type}: not retryable`);
    t.equal(backupAsked, 0, `${type}: no fallback`);
    t.match(finished.attempts, [{ upstream: 'claude-primary', outcome: 'error' }], type);
    t.equal(finished.attempts.length, 1, type);
  }
  for (const type of ['timeout_error', 'overloaded_error']) {
    const { answer, backupAsked } = await ask(type);
    t.equal(answer.status, 200, `${type}: answered`);
    t.equal(backupAsked, 1, `${type}: the backup was asked`);
  }
  t.ok(health.isEjected(primaryTarget), 'a timeout and an overload in a row are failures of the target: it is tried last');
});

t.test('with no target left, a rate limit an Anthropic upstream reports in its stream is answered as retryable, an error that blames the request or the node’s key as final', async (t) => {
  const { node, primary } = await setUp(t);
  primary.setBehaviour({ errorEventAfterEvents: 0, errorEventType: 'rate_limit_error' });
  const limited = await stream(node, 'claude-solo', 'rate limit me');
  t.equal(limited.status, 429, 'answered as an upstream HTTP 429 is');
  t.equal(limited.retryAfter, '1', 'with the default Retry-After: the event stream gave none');
  t.equal(limited.shouldRetry, 'true', 'the SDKs may retry it, as an upstream HTTP 429');
  t.match(JSON.parse(limited.body), { type: 'error', error: { type: 'rate_limit_error', code: 'ZN_ERR_UPSTREAM_ERROR' } });
  t.match(limited.body, /rate_limit_error/, 'the message names the upstream error type');
  t.notMatch(limited.body, /fake rate_limit_error/, "never the upstream's text");
  for (const [type, status] of FINAL_TYPES) {
    primary.setBehaviour({ errorEventAfterEvents: 0, errorEventType: type });
    const refused = await stream(node, 'claude-solo', `final ${type}`);
    t.equal(refused.status, status, type);
    t.equal(refused.shouldRetry, 'false', `${type}: the SDKs must not resend it`);
    t.match(JSON.parse(refused.body), { type: 'error', error: { code: 'ZN_ERR_UPSTREAM_ERROR' } }, type);
  }
});
