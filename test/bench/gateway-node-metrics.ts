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

const meanUs = (s: SumCount): number => (s.count > 0 ? (s.sum / s.count) * 1e6 : 0);

export async function nodeStageTimes(adminUrl: string): Promise<string> {
  const res = await fetch(`${adminUrl}/metrics`);
  if (res.status !== 200) throw new Error(`GET /metrics: HTTP ${res.status}`);
  const text = await res.text();
  const stages = sumsAndCounts(text, 'zenova_node_stage_duration_seconds', 'stage');
  const requests = sumsAndCounts(text, 'zenova_node_request_duration_seconds', 'api').get('chat.completions');
  const upstream = [...sumsAndCounts(text, 'zenova_node_upstream_duration_seconds', 'upstream').values()]
    .reduce((a, b) => ({ sum: a.sum + b.sum, count: a.count + b.count }), { sum: 0, count: 0 });
  const lines = ['node-side mean time per request (its admin /metrics, all requests incl. warm-up):', '', '| part | mean µs |', '|---|---:|'];
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
  return lines.join('\n');
}
