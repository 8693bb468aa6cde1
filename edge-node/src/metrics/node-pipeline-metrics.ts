/**
 * The node's Prometheus metrics, fed once per finished request from what the pipeline recorded in
 * its context (outcome, per-stage times, upstream attempts, guardrail verdicts, usage), and once per
 * request that ended before the pipeline (app.ts). Series for the fixed label sets (APIs, stages)
 * are made up front; the rest are made once and kept, except the ejected-target gauge, read at each
 * scrape.
 */
import { requestPolicy } from '../guardrails/policy-engine.js';
import type { ApiKind, PipelineContext } from '../pipeline/context.js';
import type { StageName } from '../pipeline/stage.js';
import { rateLimitHitOf, rateLimitStoreFailedFor } from '../rate-limit/rate-limit-hits.js';
import type { PipelineMetrics } from './pipeline-metrics.js';
import type { RuntimeTarget } from '../config/runtime-config.js';
import type { ErrorCode } from '../errors.js';
import type { HealthChange, TargetHealth } from '../routing/target-health.js';
import { CollectedGauge, Counter, Gauge, Histogram, Registry } from './prometheus-registry.js';
import type { HistogramSeries } from './prometheus-registry.js';

/**
 * The direction a guardrail refusal was for: that of the block verdict, else (a fail-closed refusal
 * adds no verdict) the direction that cannot be applied, input first as it is checked first, else
 * (text a walk could not reach) output once the upstream has answered.
 */
function blockedDirection(ctx: PipelineContext): 'input' | 'output' {
  const block = ctx.guardrails.findLast((v) => v.action === 'block');
  if (block !== undefined) return block.on;
  const policy = requestPolicy(ctx);
  if (policy?.input.broken != null) return 'input';
  if (policy?.output.broken != null) return 'output';
  return ctx.reply === undefined ? 'input' : 'output';
}

/**
 * Which rules an up-front ZN_ERR_GUARDRAIL_UNCHECKABLE refusal was for: the input's, when the
 * request carried input they cannot read and the policy checks input (guardrails-in refuses that
 * first); otherwise the output's (a request asking for output they cannot read).
 */
function uncheckableDirection(ctx: PipelineContext): 'input' | 'output' {
  const input = requestPolicy(ctx)?.input;
  const checksInput = input !== undefined && (input.broken != null || input.rules.length > 0);
  return ctx.uncheckedInput !== undefined && checksInput ? 'input' : 'output';
}

const APIS: readonly ApiKind[] = ['chat.completions', 'embeddings', 'models', 'messages', 'mcp'];
const STAGES: readonly StageName[] = [
  'identify', 'authenticate', 'surface', 'rate-limit', 'guardrails-in', 'preauthorise',
  'route', 'forward', 'guardrails-out', 'meter', 'settle', 'spool',
];

/** Request and upstream latency, seconds: 1 ms to 5 min (streams run long). */
const REQUEST_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];
/** Stage time, seconds: most stages take microseconds; forward takes as long as the upstream. */
const STAGE_BUCKETS = [0.000005, 0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1, 5, 30, 300];

export interface NodeFigures {
  spoolBytes: number;
  backfillBacklog: number;
  /** Records the control plane acknowledged as rejected since this process started (absent: none sent). */
  backfillRejected?: number;
}

export interface NodePipelineMetrics extends PipelineMetrics {
  requestStarted(ctx: PipelineContext): void;
  upstreamTargetHealth(upstream: string, model: string, change: HealthChange): void;
  watchTargetHealth(health: TargetHealth, targets: () => Iterable<RuntimeTarget>): void;
  requestEndedBeforePipeline(status: 'rejected' | 'failed' | 'aborted', code: ErrorCode | null): void;
  recordDropped(ctx: PipelineContext): void;
  /** The text a scrape of /metrics returns. */
  render(): string;
}

export function createNodePipelineMetrics(figures: () => NodeFigures): NodePipelineMetrics {
  const registry = new Registry();
  const requests = registry.register(
    new Counter('zenova_node_requests_total', 'Finished requests by API (none: ended before the pipeline), outcome and error code (none when ok).', ['api', 'status', 'code']),
  );
  const duration = registry.register(new Histogram('zenova_node_request_duration_seconds', 'Time from arrival to the end of the answer.', ['api'], REQUEST_BUCKETS));
  const stages = registry.register(new Histogram('zenova_node_stage_duration_seconds', 'Time spent in each pipeline stage.', ['stage'], STAGE_BUCKETS));
  const upstream = registry.register(
    new Histogram(
      'zenova_node_upstream_duration_seconds',
      'Duration of each upstream attempt, by upstream and outcome: for the one that answered, from sending to the end of its answer (a stream\'s last event).',
      ['upstream', 'outcome'],
      REQUEST_BUCKETS,
    ),
  );
  const inflight = registry.register(new Gauge('zenova_node_inflight_requests', 'Requests in the pipeline now.')).labels();
  registry.register(new Gauge('zenova_node_spool_bytes', 'Bytes the request spool holds.', [], () => figures().spoolBytes));
  registry.register(new Gauge('zenova_node_backfill_backlog', 'Request records waiting to be sent to the control plane.', [], () => figures().backfillBacklog));
  // A gauge read from the channel's running total (it only grows while the process lives): any
  // value above 0 means records the control plane could not read sit in its rejected_request_records.
  registry.register(
    new Gauge('zenova_node_backfill_rejected_records', 'Records the control plane could not ingest (kept in its rejected_request_records) since the node started.', [], () => figures().backfillRejected ?? 0),
  );
  const droppedRecords = registry.register(
    new Counter(
      'zenova_node_spool_dropped_records_total',
      'Final records not written: requests refused before forwarding, without a valid key, while the spool was at 90% of its quota or more; by the refusal code.',
      ['reason'],
    ),
  );
  const rateLimited = registry.register(
    new Counter('zenova_node_rate_limit_rejections_total', 'Requests refused by a rate or concurrency limit.', ['scope', 'limit']),
  );
  const rateLimitStoreFailures = registry
    .register(new Counter('zenova_node_rate_limit_store_failures_total', 'Requests admitted without limits because the shared limit store could not be written.'))
    .labels();
  const guardrailBlocked = registry.register(new Counter('zenova_node_guardrail_rejections_total', 'Requests blocked by a guardrail.', ['on']));
  const verdicts = registry.register(
    new Counter('zenova_node_guardrail_verdicts_total', 'Guardrail rule hits, by direction, action and detector.', ['on', 'action', 'detector']),
  );
  const tokens = registry.register(new Counter('zenova_node_tokens_total', 'Tokens metered, by API and direction.', ['api', 'kind']));
  // Read at each scrape over the config served then: a target whose upstream was fixed (a new base
  // URL is a new target) or that the config dropped can never be left showing 1.
  let watched: { health: TargetHealth; targets: () => Iterable<RuntimeTarget> } | undefined;
  registry.register(
    new CollectedGauge('zenova_node_upstream_target_ejected', '1 while an upstream target of the served config that kept failing is tried last (until it answers again), else 0.', ['upstream', 'model'], () =>
      watched === undefined ? [] : ejectedSeries(watched.health, watched.targets()),
    ),
  );
  const ejections = registry.register(new Counter('zenova_node_upstream_ejections_total', 'Times an upstream target was ejected for consecutive failures.', ['upstream', 'model']));

  const durationByApi = new Map<string, HistogramSeries>(APIS.map((api) => [api, duration.labels(api)]));
  const stageSeries = new Map<string, HistogramSeries>(STAGES.map((stage) => [stage, stages.labels(stage)]));
  const tokenSeries = new Map(APIS.map((api) => [api, { input: tokens.labels(api, 'input'), output: tokens.labels(api, 'output') }]));
  // Only requests counted in are counted out, so a runner that never calls requestStarted cannot drive the gauge negative.
  const started = new WeakSet<PipelineContext>();

  return {
    requestStarted(ctx) {
      started.add(ctx);
      inflight.inc();
    },
    requestFinished(ctx) {
      if (started.delete(ctx)) inflight.dec();
      const { outcome } = ctx;
      requests.labels(ctx.api, outcome.status, outcome.errorCode ?? 'none').inc();
      (durationByApi.get(ctx.api) ?? duration.labels(ctx.api)).observe(Math.max(0, ctx.clock.monotonic() - ctx.startedAt) / 1000);
      for (const name in ctx.stagesUs) {
        const us = ctx.stagesUs[name as StageName];
        if (us !== undefined) (stageSeries.get(name) ?? stages.labels(name)).observe(us / 1e6);
      }
      for (const attempt of ctx.attempts) {
        // The answering attempt's own duration stops at its answer (a stream's first event); the
        // upstream is busy until its last, which upstreamMs has. Failed attempts end with their failure.
        const ms = attempt.outcome === 'ok' && ctx.upstreamMs !== null ? ctx.upstreamMs : attempt.durationMs;
        upstream.labels(attempt.upstream, attempt.outcome).observe(ms / 1000);
      }
      const perApi = tokenSeries.get(ctx.api);
      if (perApi !== undefined) {
        perApi.input.inc(ctx.usage.inputTokens);
        perApi.output.inc(ctx.usage.outputTokens);
      }
      if (outcome.errorCode === 'ZN_ERR_RATE_LIMITED' || outcome.errorCode === 'ZN_ERR_CONCURRENCY_LIMITED') {
        const hit = rateLimitHitOf(ctx);
        rateLimited.labels(hit?.scope ?? 'unknown', hit?.limit ?? (outcome.errorCode === 'ZN_ERR_RATE_LIMITED' ? 'rate' : 'concurrency')).inc();
      }
      if (rateLimitStoreFailedFor(ctx)) rateLimitStoreFailures.inc();
      for (const verdict of ctx.guardrails) verdicts.labels(verdict.on, verdict.action, verdict.detector).inc();
      if (outcome.errorCode === 'ZN_ERR_GUARDRAIL_BLOCKED') guardrailBlocked.labels(blockedDirection(ctx)).inc();
      else if (outcome.errorCode === 'ZN_ERR_GUARDRAIL_UNCHECKABLE') guardrailBlocked.labels(uncheckableDirection(ctx)).inc();
    },
    recordDropped(ctx) {
      // The code, or the status of a caller that left before any refusal (aborted, no code).
      droppedRecords.labels(ctx.outcome.errorCode ?? ctx.outcome.status).inc();
    },
    upstreamTargetHealth(upstreamName, model, change) {
      if (change === 'ejected') ejections.labels(upstreamName, model).inc();
    },
    watchTargetHealth(health, targets) {
      watched = { health, targets };
    },
    requestEndedBeforePipeline(status, code) {
      requests.labels('none', status, code ?? 'none').inc();
    },
    render: () => registry.render(),
  };
}

/** One series per distinct target (upstream, model) among `targets`: 1 while ejected, else 0. */
function ejectedSeries(health: TargetHealth, targets: Iterable<RuntimeTarget>): Array<readonly [readonly string[], number]> {
  const seen = new Set<string>();
  const series: Array<readonly [readonly string[], number]> = [];
  for (const target of targets) {
    const id = `${target.upstream.name}\u0000${target.upstreamModel}`;
    if (seen.has(id)) continue;
    seen.add(id);
    series.push([[target.upstream.name, target.upstreamModel], health.isEjected(target) ? 1 : 0]);
  }
  return series;
}
