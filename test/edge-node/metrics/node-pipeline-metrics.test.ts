// The node's metrics move with finished requests: counts by API, outcome and code, request and
// per-stage latency, upstream attempts, rate-limit and guardrail rejections, tokens, in-flight
// requests, the spool figures read at scrape time, upstream targets ejected for failing (read at
// scrape time too), and requests that ended before the pipeline.
import t from 'tap';
import type { RuntimeTarget } from '../../../edge-node/src/config/runtime-config.js';
import { createNodePipelineMetrics } from '../../../edge-node/src/metrics/node-pipeline-metrics.js';
import { MemoryLimitStore } from '../../../edge-node/src/rate-limit/memory-limit-store.js';
import { NodeRateLimiter } from '../../../edge-node/src/rate-limit/node-rate-limiter.js';
import { TargetHealth } from '../../../edge-node/src/routing/target-health.js';
import { ManualClock, callContext, quietLogger } from '../rate-limit/limit-fixtures.js';
import { parsePrometheusText, sampleValue } from './prometheus-text.js';

const figures: { spoolBytes: number; backfillBacklog: number; backfillRejected?: number } = { spoolBytes: 0, backfillBacklog: 0 };

function setup(): { clock: ManualClock; metrics: ReturnType<typeof createNodePipelineMetrics>; scrape: () => ReturnType<typeof parsePrometheusText> } {
  const clock = new ManualClock();
  const metrics = createNodePipelineMetrics(() => figures);
  return { clock, metrics, scrape: () => parsePrometheusText(metrics.render()) };
}

t.test('every metric family is declared before any request', async (t) => {
  const { scrape } = setup();
  const parsed = scrape();
  for (const name of [
    'zenova_node_requests_total',
    'zenova_node_request_duration_seconds',
    'zenova_node_stage_duration_seconds',
    'zenova_node_upstream_duration_seconds',
    'zenova_node_inflight_requests',
    'zenova_node_spool_bytes',
    'zenova_node_backfill_backlog',
    'zenova_node_rate_limit_rejections_total',
    'zenova_node_rate_limit_store_failures_total',
    'zenova_node_guardrail_rejections_total',
    'zenova_node_guardrail_verdicts_total',
    'zenova_node_tokens_total',
    'zenova_node_upstream_target_ejected',
    'zenova_node_upstream_ejections_total',
  ]) {
    t.ok(parsed.types.has(name), name);
  }
  t.equal(sampleValue(parsed, 'zenova_node_requests_total'), undefined, 'no request counted yet');
});

t.test('requests are counted by API, status and error code, with their duration', async (t) => {
  const { clock, metrics, scrape } = setup();
  for (let i = 0; i < 3; i++) {
    const ctx = callContext(clock);
    clock.advance(40);
    metrics.requestFinished(ctx);
  }
  const failed = callContext(clock, { api: 'embeddings' });
  failed.outcome = { status: 'failed', httpStatus: 502, errorCode: 'ZN_ERR_UPSTREAM_ERROR' };
  clock.advance(2_000);
  metrics.requestFinished(failed);

  const parsed = scrape();
  t.equal(sampleValue(parsed, 'zenova_node_requests_total', { api: 'chat.completions', status: 'ok', code: 'none' }), 3);
  t.equal(sampleValue(parsed, 'zenova_node_requests_total', { api: 'embeddings', status: 'failed', code: 'ZN_ERR_UPSTREAM_ERROR' }), 1);
  t.equal(sampleValue(parsed, 'zenova_node_request_duration_seconds_count', { api: 'chat.completions' }), 3);
  t.equal(sampleValue(parsed, 'zenova_node_request_duration_seconds_bucket', { api: 'chat.completions', le: '0.025' }), 0);
  t.equal(sampleValue(parsed, 'zenova_node_request_duration_seconds_bucket', { api: 'chat.completions', le: '0.05' }), 3);
  t.equal(sampleValue(parsed, 'zenova_node_request_duration_seconds_bucket', { api: 'embeddings', le: '1' }), 0);
  t.equal(sampleValue(parsed, 'zenova_node_request_duration_seconds_bucket', { api: 'embeddings', le: '2.5' }), 1);
});

t.test('stage times, upstream attempts and tokens come from what the request recorded', async (t) => {
  const { clock, metrics, scrape } = setup();
  const ctx = callContext(clock);
  ctx.stagesUs = { identify: 12, authenticate: 3, forward: 250_000, spool: 40 };
  ctx.attempts = [
    { upstream: 'primary', model: 'm', outcome: 'timeout', httpStatus: null, durationMs: 30_000 },
    { upstream: 'backup', model: 'm', outcome: 'ok', httpStatus: 200, durationMs: 180 },
  ];
  ctx.usage = { inputTokens: 11, outputTokens: 7, estimated: false };
  metrics.requestFinished(ctx);

  const parsed = scrape();
  t.equal(sampleValue(parsed, 'zenova_node_stage_duration_seconds_count', { stage: 'identify' }), 1);
  t.equal(sampleValue(parsed, 'zenova_node_stage_duration_seconds_sum', { stage: 'forward' }), 0.25);
  t.equal(sampleValue(parsed, 'zenova_node_stage_duration_seconds_count', { stage: 'route' }), 0, 'a stage that did not run is not observed');
  t.equal(sampleValue(parsed, 'zenova_node_upstream_duration_seconds_count', { upstream: 'primary', outcome: 'timeout' }), 1);
  t.equal(sampleValue(parsed, 'zenova_node_upstream_duration_seconds_sum', { upstream: 'backup', outcome: 'ok' }), 0.18);
  t.equal(sampleValue(parsed, 'zenova_node_tokens_total', { api: 'chat.completions', kind: 'input' }), 11);
  t.equal(sampleValue(parsed, 'zenova_node_tokens_total', { api: 'chat.completions', kind: 'output' }), 7);
});

t.test("the answering attempt is observed to the end of its answer (a stream's last event); failed attempts with their own duration", async (t) => {
  const { clock, metrics, scrape } = setup();
  const ctx = callContext(clock);
  ctx.attempts = [
    { upstream: 'primary', model: 'm', outcome: 'status', httpStatus: 503, durationMs: 40 },
    // Fixed when the stream's first event came; the provider moved upstreamMs on to its end.
    { upstream: 'backup', model: 'm', outcome: 'ok', httpStatus: 200, durationMs: 120 },
  ];
  ctx.upstreamFirstByteMs = 120;
  ctx.upstreamMs = 4_500;
  metrics.requestFinished(ctx);

  const parsed = scrape();
  t.equal(sampleValue(parsed, 'zenova_node_upstream_duration_seconds_sum', { upstream: 'backup', outcome: 'ok' }), 4.5);
  t.equal(sampleValue(parsed, 'zenova_node_upstream_duration_seconds_bucket', { upstream: 'backup', outcome: 'ok', le: '2.5' }), 0);
  t.equal(sampleValue(parsed, 'zenova_node_upstream_duration_seconds_sum', { upstream: 'primary', outcome: 'status' }), 0.04);
});

t.test('requests that ended before the pipeline are counted with api "none", by outcome and code', async (t) => {
  const { metrics, scrape } = setup();
  metrics.requestEndedBeforePipeline('rejected', 'ZN_ERR_BODY_TOO_LARGE');
  metrics.requestEndedBeforePipeline('rejected', 'ZN_ERR_BODY_TOO_LARGE');
  metrics.requestEndedBeforePipeline('aborted', null);
  const parsed = scrape();
  t.equal(sampleValue(parsed, 'zenova_node_requests_total', { api: 'none', status: 'rejected', code: 'ZN_ERR_BODY_TOO_LARGE' }), 2);
  t.equal(sampleValue(parsed, 'zenova_node_requests_total', { api: 'none', status: 'aborted', code: 'none' }), 1);
});

t.test('rate-limit rejections are counted by scope and limit', async (t) => {
  const { clock, metrics, scrape } = setup();
  const limiter = new NodeRateLimiter(new MemoryLimitStore(), quietLogger);
  const finishRefused = (opts: Parameters<typeof callContext>[1]): void => {
    const ctx = callContext(clock, opts);
    const rejection = limiter.admit(ctx);
    if (rejection === undefined) return;
    ctx.outcome = { status: 'rejected', httpStatus: 429, errorCode: rejection.error.code };
    metrics.requestFinished(ctx);
  };
  for (let i = 0; i < 3; i++) finishRefused({ keyLimits: { requestsPerMinute: 1 } });
  for (let i = 0; i < 2; i++) finishRefused({ keyId: 'k2', accountId: 'acct-2', accountLimits: { concurrentRequests: 1 } });
  const parsed = scrape();
  t.equal(sampleValue(parsed, 'zenova_node_rate_limit_rejections_total', { scope: 'key', limit: 'requests' }), 2);
  t.equal(sampleValue(parsed, 'zenova_node_rate_limit_rejections_total', { scope: 'account', limit: 'concurrency' }), 1);
  t.equal(sampleValue(parsed, 'zenova_node_requests_total', { code: 'ZN_ERR_RATE_LIMITED' }), 2);
});

t.test('guardrail verdicts are counted, and blocks as rejections by direction', async (t) => {
  const { clock, metrics, scrape } = setup();
  const flagged = callContext(clock);
  flagged.guardrails = [{ policyId: 'p1', rule: 0, detector: 'email', action: 'mask', on: 'input', matches: 2 }];
  metrics.requestFinished(flagged);
  const blocked = callContext(clock);
  blocked.guardrails = [
    { policyId: 'p1', rule: 0, detector: 'email', action: 'mask', on: 'output', matches: 1 },
    { policyId: 'p1', rule: 1, detector: 'prc_id', action: 'block', on: 'output', matches: 1 },
  ];
  blocked.outcome = { status: 'rejected', httpStatus: 400, errorCode: 'ZN_ERR_GUARDRAIL_BLOCKED' };
  metrics.requestFinished(blocked);
  const parsed = scrape();
  t.equal(sampleValue(parsed, 'zenova_node_guardrail_verdicts_total', { on: 'input', action: 'mask', detector: 'email' }), 1);
  t.equal(sampleValue(parsed, 'zenova_node_guardrail_verdicts_total', { on: 'output', action: 'block', detector: 'prc_id' }), 1);
  t.equal(sampleValue(parsed, 'zenova_node_guardrail_rejections_total', { on: 'output' }), 1);
});

t.test('in-flight requests rise on start and fall on finish; a request never started does not drive it negative', async (t) => {
  const { clock, metrics, scrape } = setup();
  const a = callContext(clock);
  const b = callContext(clock);
  metrics.requestStarted(a);
  metrics.requestStarted(b);
  t.equal(sampleValue(scrape(), 'zenova_node_inflight_requests'), 2);
  metrics.requestFinished(a);
  t.equal(sampleValue(scrape(), 'zenova_node_inflight_requests'), 1);
  metrics.requestFinished(callContext(clock));
  metrics.requestFinished(a);
  t.equal(sampleValue(scrape(), 'zenova_node_inflight_requests'), 1);
});

t.test('spool bytes and backfill backlog are read at each scrape', async (t) => {
  const { scrape } = setup();
  figures.spoolBytes = 4096;
  figures.backfillBacklog = 12;
  let parsed = scrape();
  t.equal(sampleValue(parsed, 'zenova_node_spool_bytes'), 4096);
  t.equal(sampleValue(parsed, 'zenova_node_backfill_backlog'), 12);
  figures.backfillBacklog = 0;
  parsed = scrape();
  t.equal(sampleValue(parsed, 'zenova_node_backfill_backlog'), 0);
});

t.test('records the control plane rejected are a gauge read at each scrape, 0 without a backfill', async (t) => {
  const { scrape } = setup();
  t.equal(sampleValue(scrape(), 'zenova_node_backfill_rejected_records'), 0);
  figures.backfillRejected = 2;
  t.equal(sampleValue(scrape(), 'zenova_node_backfill_rejected_records'), 2);
  delete figures.backfillRejected;
});

function target(upstream: string, baseUrl: string, upstreamModel: string): RuntimeTarget {
  return { upstream: { name: upstream, kind: 'openai-compatible', baseUrl, apiKey: undefined, timeoutMs: 30_000 }, upstreamModel, weight: 1 };
}

t.test('an ejected upstream target is a gauge read at each scrape over the served targets: 1 until it answers again, and each ejection is counted', async (t) => {
  const { metrics, scrape } = setup();
  const health = new TargetHealth({ failureThreshold: 1 });
  const broken = target('openai-main', 'http://10.0.0.1/v1', 'gpt-4o');
  const other = target('backup', 'http://10.0.0.2/v1', 'gpt-4o');
  let served: RuntimeTarget[] = [broken, other, broken];
  metrics.watchTargetHealth(health, () => served);
  const labels = { upstream: 'openai-main', model: 'gpt-4o' };

  t.equal(sampleValue(scrape(), 'zenova_node_upstream_target_ejected', labels), 0, 'a served target is 0 before any failure');
  t.equal(health.note(broken, 'failed', 0), 'ejected');
  metrics.upstreamTargetHealth('openai-main', 'gpt-4o', 'ejected');
  let parsed = scrape();
  t.equal(sampleValue(parsed, 'zenova_node_upstream_target_ejected', labels), 1);
  t.equal(sampleValue(parsed, 'zenova_node_upstream_target_ejected', { upstream: 'backup', model: 'gpt-4o' }), 0);
  t.equal(parsed.samples.filter((x) => x.name === 'zenova_node_upstream_target_ejected').length, 2, 'a target in several routes is one series');
  t.equal(sampleValue(parsed, 'zenova_node_upstream_ejections_total', labels), 1);

  // The operator fixes the base URL: the new target never failed, and the old one is served no more.
  served = [target('openai-main', 'http://10.0.0.9/v1', 'gpt-4o'), other];
  t.equal(sampleValue(scrape(), 'zenova_node_upstream_target_ejected', labels), 0, 'a changed base URL is not ejected');
  served = [broken];
  t.equal(sampleValue(scrape(), 'zenova_node_upstream_target_ejected', labels), 1, 'back on the URL that failed: still ejected');
  served = [other];
  t.equal(sampleValue(scrape(), 'zenova_node_upstream_target_ejected', labels), undefined, 'a target the config dropped has no series');

  served = [broken];
  t.equal(health.note(broken, 'reachable', 1), 'restored');
  t.equal(sampleValue(scrape(), 'zenova_node_upstream_target_ejected', labels), 0, 'answering again');
  t.equal(health.note(broken, 'failed', 2), 'ejected');
  metrics.upstreamTargetHealth('openai-main', 'gpt-4o', 'ejected');
  parsed = scrape();
  t.equal(sampleValue(parsed, 'zenova_node_upstream_target_ejected', labels), 1);
  t.equal(sampleValue(parsed, 'zenova_node_upstream_ejections_total', labels), 2);
});
