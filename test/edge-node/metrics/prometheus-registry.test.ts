// The registry's text output follows the Prometheus exposition format: one HELP and TYPE per
// family, escaped label values, cumulative histogram buckets ending in +Inf, _sum and _count.
import t from 'tap';
import { Counter, Gauge, Histogram, Registry } from '../../../edge-node/src/metrics/prometheus-registry.js';
import { parsePrometheusText, sampleValue } from './prometheus-text.js';

t.test('counters, gauges and histograms render as parseable text with their values', async (t) => {
  const registry = new Registry();
  const counter = registry.register(new Counter('things_total', 'Things.\nCounted.', ['kind']));
  const gauge = registry.register(new Gauge('level', 'A level.'));
  let read = 7;
  registry.register(new Gauge('read_level', 'Read at scrape.', [], () => read));
  const histogram = registry.register(new Histogram('latency_seconds', 'Latency.', ['api'], [0.1, 0.01, 1]));

  counter.labels('a').inc();
  counter.labels('a').inc(2);
  counter.labels('quote " back \\ new\nline').inc();
  gauge.labels().set(3);
  gauge.labels().dec();
  for (const v of [0.005, 0.01, 0.05, 0.5, 2]) histogram.labels('chat').observe(v);
  read = 9;

  const text = registry.render();
  const parsed = parsePrometheusText(text);
  t.equal(parsed.types.get('things_total'), 'counter');
  t.equal(parsed.types.get('latency_seconds'), 'histogram');
  t.equal(parsed.helps.get('things_total'), 'Things.\\nCounted.');
  t.equal(sampleValue(parsed, 'things_total', { kind: 'a' }), 3);
  t.equal(sampleValue(parsed, 'things_total', { kind: 'quote " back \\ new\nline' }), 1, 'label value escaped and round-tripped');
  t.equal(sampleValue(parsed, 'level'), 2);
  t.equal(sampleValue(parsed, 'read_level'), 9, 'read at render time');
  // Buckets sorted and cumulative; a value on a bound counts in that bucket (le).
  t.same(
    parsed.samples.filter((s) => s.name === 'latency_seconds_bucket').map((s) => [s.labels.le, s.value]),
    [['0.01', 2], ['0.1', 3], ['1', 4], ['+Inf', 5]],
  );
  t.equal(sampleValue(parsed, 'latency_seconds_count', { api: 'chat' }), 5);
  t.equal(sampleValue(parsed, 'latency_seconds_sum', { api: 'chat' }), 0.005 + 0.01 + 0.05 + 0.5 + 2);
});

t.test('a series asked for twice is the same series, and a wrong label count is refused', async (t) => {
  const counter = new Counter('x_total', 'X.', ['a', 'b']);
  t.equal(counter.labels('1', '2'), counter.labels('1', '2'));
  t.throws(() => counter.labels('1'), /takes 2 label values/);
  const registry = new Registry();
  registry.register(counter);
  t.throws(() => registry.register(new Counter('x_total', 'again')), /registered twice/);
});

t.test('a family without series still declares itself', async (t) => {
  const registry = new Registry();
  registry.register(new Counter('empty_total', 'Nothing yet.', ['a']));
  t.equal(registry.render(), '# HELP empty_total Nothing yet.\n# TYPE empty_total counter\n');
});
