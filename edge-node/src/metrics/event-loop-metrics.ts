/**
 * How busy the node's event loop is, and how long it stood still. Every request's work runs on that
 * one loop: a stall of 20 ms (a GC pause, a long synchronous task, or the process waiting for a core
 * on a crowded host) delays every request arriving meanwhile by up to that much, which is where a
 * p99 comes from when no stage got slower (docs/performance.md).
 *
 * - busy time: Node's event-loop utilisation (the loop's active time, counted by libuv), as a
 *   counter: `rate()` of it is the share of time the loop was busy, the node's saturation.
 * - delay: a timer every EVENT_LOOP_PROBE_MS notes how late it ran. A stall shows once, as its length
 *   (less up to one interval), whatever caused it. One unref'd timer: nothing per request.
 */
import { performance } from 'node:perf_hooks';
import { Counter, Histogram, Registry } from './prometheus-registry.js';

/** Lateness, seconds: a healthy loop is a millisecond or less late; a stall tens to hundreds. */
const DELAY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1];

/** Often enough to see any stall of 20 ms or more; rare enough to cost nothing (50 wake-ups/s). */
export const EVENT_LOOP_PROBE_MS = 20;

export interface EventLoopMetrics {
  render(): string;
  stop(): void;
}

export function startEventLoopMetrics(): EventLoopMetrics {
  const intervalMs = EVENT_LOOP_PROBE_MS;
  const registry = new Registry();
  const busy = registry.register(new Counter('zenova_node_event_loop_busy_seconds_total', "Time the node's event loop spent busy (not waiting for I/O) since its metrics started (at start-up); its rate is the loop's utilisation, 1 = saturated.")).labels();
  const delay = registry.register(
    new Histogram('zenova_node_event_loop_delay_seconds', `How late a ${intervalMs} ms timer on the node's event loop ran: each stall (GC, long task, waiting for a CPU) shows as one observation of about its length.`, [], DELAY_BUCKETS),
  ).labels();
  const start = performance.eventLoopUtilization();
  let last = performance.now();
  const probe = setInterval(() => {
    const now = performance.now();
    delay.observe(Math.max(0, now - last - intervalMs) / 1000);
    last = now;
  }, intervalMs);
  probe.unref();
  return {
    render: () => {
      busy.value = performance.eventLoopUtilization(start).active / 1000;
      return registry.render();
    },
    stop: () => clearInterval(probe),
  };
}
