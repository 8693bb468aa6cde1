// The admin port of `serve --replicas K` serves one exposition made of every replica's metrics:
// each family's HELP and TYPE once with all its samples together (the format refuses a family
// declared twice or split), and a replica label on every sample, so series of different replicas
// never collide. Fed with real registries' text, including the node's own metrics.
import t from 'tap';
import { createNodePipelineMetrics } from '../../../edge-node/src/metrics/node-pipeline-metrics.js';
import { Counter, Gauge, Histogram, Registry } from '../../../edge-node/src/metrics/prometheus-registry.js';
import { mergeReplicaMetrics } from '../../../edge-node/src/metrics/replica-admin.js';
import { parsePrometheusText, sampleValue } from './prometheus-text.js';

function replicaText(requests: number, odd: string): string {
  const registry = new Registry();
  registry.register(new Counter('demo_requests_total', 'Requests.', ['api'])).labels('chat').inc(requests);
  registry.register(new Gauge('demo_unlabelled', 'No labels.')).labels().set(requests * 2);
  registry.register(new Counter('demo_never_used_total', 'A family with no series yet.', ['x']));
  const latency = registry.register(new Histogram('demo_latency_seconds', 'Latency.', ['api'], [0.1, 1]));
  latency.labels('chat').observe(0.5);
  registry.register(new Gauge('demo_odd_labels', 'Label values needing escapes.', ['v'])).labels(odd).set(1);
  return registry.render();
}

t.test('two replicas merge into one valid exposition with a replica label on every sample', async (t) => {
  const merged = mergeReplicaMetrics([
    { replica: '1', text: replicaText(3, 'a "quoted" \\ value\nnext') },
    { replica: '2', text: replicaText(5, 'plain') },
  ]);
  const parsed = parsePrometheusText(merged);
  t.equal(sampleValue(parsed, 'demo_requests_total', { replica: '1', api: 'chat' }), 3);
  t.equal(sampleValue(parsed, 'demo_requests_total', { replica: '2', api: 'chat' }), 5);
  t.equal(sampleValue(parsed, 'demo_unlabelled', { replica: '2' }), 10);
  t.equal(sampleValue(parsed, 'demo_latency_seconds_bucket', { replica: '1', le: '1' }), 1);
  t.equal(sampleValue(parsed, 'demo_odd_labels', { replica: '1', v: 'a "quoted" \\ value\nnext' }), 1, 'label values pass through untouched');
  t.equal(parsed.types.get('demo_never_used_total'), 'counter', 'a family without series is still declared');
  t.ok(parsed.samples.every((s) => s.labels.replica === '1' || s.labels.replica === '2'));

  // Every family's lines together: once a family's lines end, none of its samples follows.
  const seen = new Set<string>();
  let current = '';
  for (const line of merged.trimEnd().split('\n')) {
    const family = /^# (?:HELP|TYPE) (\S+)/.exec(line)?.[1] ?? /^([a-zA-Z_:][a-zA-Z0-9_:]*?)(?:_bucket|_sum|_count)?[{ ]/.exec(line)?.[1] ?? '';
    if (family !== current) {
      t.notOk(seen.has(family), `${family} is not split`);
      seen.add(family);
      current = family;
    }
  }
});

t.test("the node's own metrics of two replicas merge into one valid exposition", async (t) => {
  const texts = [1, 2].map((replica) => ({ replica: String(replica), text: createNodePipelineMetrics(() => ({ spoolBytes: replica * 100, backfillBacklog: replica })).render() }));
  const parsed = parsePrometheusText(mergeReplicaMetrics(texts));
  t.equal(sampleValue(parsed, 'zenova_node_spool_bytes', { replica: '1' }), 100);
  t.equal(sampleValue(parsed, 'zenova_node_spool_bytes', { replica: '2' }), 200);
  t.ok(parsed.samples.every((s) => s.labels.replica !== undefined));
});

t.test('nothing to merge is an empty exposition, and a sample outside any declared family stays its own', async (t) => {
  t.equal(mergeReplicaMetrics([]), '');
  const merged = mergeReplicaMetrics([{ replica: '1', text: 'lonely_total 4\n# TYPE typed gauge\ntyped{} 1\n' }]);
  t.equal(merged, 'lonely_total{replica="1"} 4\n# TYPE typed gauge\ntyped{replica="1"} 1\n');
});
