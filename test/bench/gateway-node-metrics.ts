/**
 * Where the node's time goes, from its own Prometheus text on the admin port: mean time per
 * pipeline stage, per request overall and per upstream attempt (means over every request the
 * bench sent, warm-up included). The node's time outside the stages (HTTP parsing, fastify hooks,
 * writing the reply) is request mean minus the stages' sum.
 */
import { fetch } from 'undici';

interface SumCount {
  sum: number;
  count: number;
}

/** `name_sum{labels} v` / `name_count{labels} v` lines → per-label-set sum and count. */
function sumsAndCounts(text: string, name: string, label: string): Map<string, SumCount> {
  const out = new Map<string, SumCount>();
  const re = new RegExp(`^${name}_(sum|count)\\{([^}]*)\\} (\\S+)$`);
  for (const line of text.split('\n')) {
    const m = re.exec(line);
    if (!m) continue;
    const labelValue = new RegExp(`${label}="([^"]*)"`).exec(m[2]!)?.[1] ?? '';
    const entry = out.get(labelValue) ?? { sum: 0, count: 0 };
    if (m[1] === 'sum') entry.sum += Number(m[3]);
    else entry.count += Number(m[3]);
    out.set(labelValue, entry);
  }
  return out;
}

const STAGE_METRIC = 'zenova_node_stage_duration_seconds';

const meanUs = (s: SumCount): number => (s.count > 0 ? (s.sum / s.count) * 1e6 : 0);

export async function nodeStageTimes(adminUrl: string): Promise<string> {
  const res = await fetch(`${adminUrl}/metrics`);
  if (res.status !== 200) throw new Error(`GET /metrics: HTTP ${res.status}`);
  const text = await res.text();
  const stages = sumsAndCounts(text, STAGE_METRIC, 'stage');
  const requests = sumsAndCounts(text, 'zenova_node_request_duration_seconds', 'api').get('chat.completions');
  const upstream = [...sumsAndCounts(text, 'zenova_node_upstream_duration_seconds', 'upstream').values()]
    .reduce((a, b) => ({ sum: a.sum + b.sum, count: a.count + b.count }), { sum: 0, count: 0 });
  const title = 'node-side mean time per request (its admin /metrics, all requests incl. warm-up)';
  const lines = [`${title}:`, '', '| part | mean µs |', '|---|---:|'];
  const header = lines.length;
  let stageSum = 0;
  for (const [stage, sc] of stages) {
    if (sc.count === 0) continue;
    stageSum += meanUs(sc);
    lines.push(`| stage ${stage} | ${meanUs(sc).toFixed(0)} |`);
  }
  if (upstream.count > 0) lines.push(`| (upstream attempt, inside forward) | ${meanUs(upstream).toFixed(0)} |`);
  if (requests && requests.count > 0) {
    lines.push(`| request total (arrival → end of answer), ${requests.count} requests | ${meanUs(requests).toFixed(0)} |`);
    lines.push(`| outside the stages (HTTP, hooks, reply) | ${(meanUs(requests) - stageSum).toFixed(0)} |`);
  }
  // A table with no rows reads as if the node spent no time; say what the scrape held instead.
  if (lines.length === header) {
    const why = text.includes(`${STAGE_METRIC}_count`)
      ? 'the node has timed no request (every stage and request count is 0)'
      : `its /metrics answer (HTTP 200, ${Buffer.byteLength(text)} bytes) holds no ${STAGE_METRIC} samples (another process on the port, or a body cut short)`;
    return `${title}: none to show, ${why}.`;
  }
  return lines.join('\n');
}

/** The node's GC pause totals so far (zenova_node_gc_pause_seconds), for differences around a load. */
export interface GcTotals {
  minorCount: number;
  minorSeconds: number;
  /** Young-generation pauses longer than 10 ms (count minus the le="0.01" bucket). */
  minorOver10ms: number;
  majorCount: number;
  majorSeconds: number;
  /** zenova_node_event_loop_busy_seconds_total: the event loop's busy time. */
  loopBusySeconds: number;
  /** Event-loop stalls over 10 ms (zenova_node_event_loop_delay_seconds: count minus le="0.01"). */
  loopStallsOver10ms: number;
}

export async function nodeGcTotals(adminUrl: string): Promise<GcTotals> {
  const res = await fetch(`${adminUrl}/metrics`);
  if (res.status !== 200) throw new Error(`GET /metrics: HTTP ${res.status}`);
  const text = await res.text();
  const pauses = sumsAndCounts(text, 'zenova_node_gc_pause_seconds', 'kind');
  const upTo10ms = /^zenova_node_gc_pause_seconds_bucket\{kind="minor",le="0\.01"\} (\S+)$/m.exec(text);
  const sample = (re: RegExp): number | undefined => {
    const m = re.exec(text);
    return m === null ? undefined : Number(m[1]);
  };
  const probes = sample(/^zenova_node_event_loop_delay_seconds_count (\S+)$/m) ?? 0;
  const minor = pauses.get('minor') ?? { sum: 0, count: 0 };
  const major = pauses.get('major') ?? { sum: 0, count: 0 };
  return {
    minorCount: minor.count,
    minorSeconds: minor.sum,
    minorOver10ms: minor.count - Number(upTo10ms?.[1] ?? minor.count),
    majorCount: major.count,
    majorSeconds: major.sum,
    loopBusySeconds: sample(/^zenova_node_event_loop_busy_seconds_total (\S+)$/m) ?? 0,
    loopStallsOver10ms: probes - (sample(/^zenova_node_event_loop_delay_seconds_bucket\{le="0\.01"\} (\S+)$/m) ?? probes),
  };
}

function combine(a: GcTotals, b: GcTotals, sign: 1 | -1): GcTotals {
  return {
    minorCount: a.minorCount + sign * b.minorCount,
    minorSeconds: a.minorSeconds + sign * b.minorSeconds,
    minorOver10ms: a.minorOver10ms + sign * b.minorOver10ms,
    majorCount: a.majorCount + sign * b.majorCount,
    majorSeconds: a.majorSeconds + sign * b.majorSeconds,
    loopBusySeconds: a.loopBusySeconds + sign * b.loopBusySeconds,
    loopStallsOver10ms: a.loopStallsOver10ms + sign * b.loopStallsOver10ms,
  };
}

export const gcDifference = (after: GcTotals, before: GcTotals): GcTotals => combine(after, before, -1);
export const gcSum = (a: GcTotals, b: GcTotals): GcTotals => combine(a, b, 1);

/** What the node's GC paused it for during each load (node cells only), as a table. */
export function gcTable(byLoad: ReadonlyMap<string, { gc: GcTotals; seconds: number; requests: number }>): string {
  const lines = [
    "node GC pauses and event-loop stalls during each load (its admin /metrics; a pause or stall stops the node, and requests arriving meanwhile wait it out):",
    '',
    '| load | young GCs | mean ms | > 10 ms | old GCs | mean ms | paused ms per s of load | requests per young GC | loop busy % | loop stalls > 10 ms per s |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  const mean = (seconds: number, count: number): string => (count > 0 ? ((seconds / count) * 1000).toFixed(2) : '—');
  for (const [load, { gc, seconds, requests }] of byLoad) {
    const paused = ((gc.minorSeconds + gc.majorSeconds) * 1000) / Math.max(seconds, 1e-9);
    lines.push(`| ${load} | ${gc.minorCount} | ${mean(gc.minorSeconds, gc.minorCount)} | ${gc.minorOver10ms} | ${gc.majorCount} | ${mean(gc.majorSeconds, gc.majorCount)} | ${paused.toFixed(1)} | ${gc.minorCount > 0 ? (requests / gc.minorCount).toFixed(0) : '—'} | ${((gc.loopBusySeconds / Math.max(seconds, 1e-9)) * 100).toFixed(0)} | ${(gc.loopStallsOver10ms / Math.max(seconds, 1e-9)).toFixed(2)} |`);
  }
  return lines.join('\n');
}
