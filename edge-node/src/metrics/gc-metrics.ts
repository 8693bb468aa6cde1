/**
 * The node process's garbage-collection pauses, as a Prometheus histogram by kind. A pause stops
 * the event loop: every request arriving meanwhile waits it out, so this is where an operator looks
 * when the node's p99 rises without its stages getting slower (docs/performance.md). Fed by a
 * PerformanceObserver: one entry per collection, nothing per request.
 */
import { constants, PerformanceObserver } from 'node:perf_hooks';
import type { PerformanceEntry } from 'node:perf_hooks';
import { Histogram, Registry } from './prometheus-registry.js';

/** Pause length, seconds: a young collection takes about a millisecond, a long one tens. */
const GC_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1];

/** Node's GC kinds: minor = young generation (scavenge), major = mark-compact. */
const KINDS = new Map<number, string>([
  [constants.NODE_PERFORMANCE_GC_MINOR, 'minor'],
  [constants.NODE_PERFORMANCE_GC_MAJOR, 'major'],
  [constants.NODE_PERFORMANCE_GC_INCREMENTAL, 'incremental'],
  [constants.NODE_PERFORMANCE_GC_WEAKCB, 'weakcb'],
]);

export interface GcMetrics {
  render(): string;
  stop(): void;
}

export function startGcMetrics(): GcMetrics {
  const registry = new Registry();
  const pauses = registry.register(new Histogram('zenova_node_gc_pause_seconds', 'Garbage-collection pauses of the node process, by kind (minor: young generation; major: mark-compact).', ['kind'], GC_BUCKETS));
  // Made up front, so a scrape shows every kind (at 0) before its first collection.
  const byKind = new Map([...KINDS].map(([code, name]) => [code, pauses.labels(name)]));
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      const kind = (entry as PerformanceEntry & { detail?: { kind?: number } }).detail?.kind;
      if (kind !== undefined) byKind.get(kind)?.observe(entry.duration / 1000);
    }
  });
  observer.observe({ entryTypes: ['gc'] });
  return {
    render: () => registry.render(),
    stop: () => observer.disconnect(),
  };
}
