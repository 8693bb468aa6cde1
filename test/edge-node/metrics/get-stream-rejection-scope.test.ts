// A refused MCP GET event stream (its own per-key and per-account limit) is counted in
// zenova_node_rate_limit_rejections_total under the scope that refused it, key or account, never
// scope="unknown".
import t from 'tap';
import { createNodePipelineMetrics } from '../../../edge-node/src/metrics/node-pipeline-metrics.js';
import type { PipelineContext } from '../../../edge-node/src/pipeline/context.js';
import { admitGetStream } from '../../../edge-node/src/providers/mcp/get-stream-limit.js';
import { rateLimitHitOf } from '../../../edge-node/src/rate-limit/rate-limit-hits.js';
import { ManualClock, callContext, finish } from '../rate-limit/limit-fixtures.js';
import { parsePrometheusText, sampleValue } from './prometheus-text.js';

const clock = new ManualClock();

function refusedMetric(refused: PipelineContext, code: string): ReturnType<typeof createNodePipelineMetrics> {
  const metrics = createNodePipelineMetrics(() => ({ spoolBytes: 0, backfillBacklog: 0 }));
  refused.outcome = { status: 'rejected', errorCode: code } as PipelineContext['outcome'];
  metrics.requestStarted(refused);
  metrics.requestFinished(refused);
  return metrics;
}

t.test('a GET stream refused by the key\'s limit is counted with scope key', async (t) => {
  const opts = { api: 'mcp' as const, keyId: 'gs-key', accountId: 'gs-acct-1', keyLimits: { concurrentRequests: 1 } };
  const first = callContext(clock, opts);
  t.teardown(() => finish(first));
  t.equal(admitGetStream(first), undefined);
  const second = callContext(clock, opts);
  const rejection = admitGetStream(second);
  t.equal(rejection?.error.code, 'ZN_ERR_CONCURRENCY_LIMITED');
  t.same(rateLimitHitOf(second), { scope: 'key', limit: 'concurrency' });
  const parsed = parsePrometheusText(refusedMetric(second, rejection!.error.code).render());
  t.equal(sampleValue(parsed, 'zenova_node_rate_limit_rejections_total', { scope: 'key', limit: 'concurrency' }), 1);
  t.equal(sampleValue(parsed, 'zenova_node_rate_limit_rejections_total', { scope: 'unknown', limit: 'concurrency' }), undefined);
});

t.test('a GET stream refused by the account\'s limit is counted with scope account', async (t) => {
  const account = { api: 'mcp' as const, accountId: 'gs-acct-2', keyLimits: { concurrentRequests: 5 }, accountLimits: { concurrentRequests: 1 } };
  const first = callContext(clock, { ...account, keyId: 'gs-key-1' });
  t.teardown(() => finish(first));
  t.equal(admitGetStream(first), undefined);
  const second = callContext(clock, { ...account, keyId: 'gs-key-2' });
  const rejection = admitGetStream(second);
  t.equal(rejection?.error.code, 'ZN_ERR_CONCURRENCY_LIMITED');
  t.same(rateLimitHitOf(second), { scope: 'account', limit: 'concurrency' });
  const parsed = parsePrometheusText(refusedMetric(second, rejection!.error.code).render());
  t.equal(sampleValue(parsed, 'zenova_node_rate_limit_rejections_total', { scope: 'account', limit: 'concurrency' }), 1);
});
