/**
 * Spool end to end: under steady load the node is killed with SIGKILL and restarted; every request
 * that got a complete response appears exactly once in the control plane after backfill, and every
 * call the upstream received has a record (real processes, real PostgreSQL). Prints served /
 * ingested / lost / unrecorded upstream calls.
 */
import t from 'tap';
import { waitFor } from '../fixtures/wait-for.js';
import { ingested, spoolStack, steadyLoad } from './spool-stack.js';
import { nodeView, startNodeServe } from './stack.js';

t.test('a node killed with SIGKILL under load loses no answered request: each appears exactly once after backfill', async (t) => {
  const s = await spoolStack(t, 'spool-kill');
  let url = s.node.url;
  const load = steadyLoad(() => url, s.apiKey);
  await waitFor(() => load.served.size >= 80, { what: '80 answered requests', timeoutMs: 30_000 });
  await s.node.proc.kill9();
  const servedBeforeKill = load.served.size;
  const restarted = await startNodeServe(t, { stateDir: s.stateDir });
  url = restarted.url;
  await waitFor(() => load.served.size >= servedBeforeKill + 50, { what: '50 more answered requests after the restart', timeoutMs: 30_000 });
  await load.stop();

  const result = await waitFor(async () => {
    const r = await ingested(s.pool, s.nodeId);
    return [...load.served].every((id) => r.ids.has(id)) ? r : undefined;
  }, { what: 'every answered request to be ingested', timeoutMs: 45_000 });
  const lost = [...load.served].filter((id) => !result.ids.has(id));
  // Every call the upstream received (and would bill) has a record too: answered, or 'interrupted'
  // when the kill cut it off (the open row is durable before anything goes upstream).
  const upstreamIds = s.upstream.requests.map((r) => String(r.headers['x-request-id'] ?? ''));
  const unrecorded = await waitFor(async () => {
    const r = await ingested(s.pool, s.nodeId);
    const missing = upstreamIds.filter((id) => !r.ids.has(id));
    return missing.length === 0 ? missing : undefined;
  }, { what: 'every upstream call to have a record', timeoutMs: 15_000 }).catch(() => upstreamIds.filter((id) => !result.ids.has(id)));
  const interrupted = [...result.ids.values()].filter((status) => status === 'interrupted').length;
  t.comment(`served ${load.served.size}, ingested ${result.rows} (interrupted ${interrupted}), lost ${lost.length}, failed calls ${load.failed}, upstream calls ${upstreamIds.length} (unrecorded ${unrecorded.length})`);
  t.equal(lost.length, 0, 'no answered request is missing');
  t.ok(upstreamIds.length >= load.served.size && upstreamIds.every((id) => id.startsWith('req_')), 'the upstream saw each call with its request id');
  t.same(unrecorded, [], 'no upstream call is without a record');
  t.ok([...load.served].every((id) => result.ids.get(id) === 'ok'), 'each answered request is recorded as ok');
  t.equal(result.rows, result.idRows, 'one record row per request id: no duplicates');
  await waitFor(async () => (await nodeView(s.cp, 'spool-kill') as unknown as { backfillBacklog: number }).backfillBacklog === 0 ? true : undefined, { what: 'the node to report an empty backlog', timeoutMs: 15_000 });
  t.ok((await nodeView(s.cp, 'spool-kill') as unknown as { spoolBytes: number }).spoolBytes > 0, 'the node view shows the spool size from heartbeats');
});

