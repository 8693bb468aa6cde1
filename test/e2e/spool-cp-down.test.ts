/**
 * Spool end to end: the control plane is killed under load and restarted; the node serves every
 * request meanwhile and, once it is back, served == ingested with no duplicates. Prints the counts.
 */
import t from 'tap';
import { waitFor } from '../fixtures/wait-for.js';
import { ingested, spoolStack, steadyLoad } from './spool-stack.js';
import { startControlPlane } from './stack.js';

t.test('with the control plane down under load the node serves every request and backfills them all once it returns', async (t) => {
  const s = await spoolStack(t, 'spool-cp-down');
  const load = steadyLoad(() => s.node.url, s.apiKey);
  await waitFor(() => load.served.size >= 50, { what: '50 answered requests', timeoutMs: 30_000 });
  await s.cp.proc.kill9();
  const atKill = load.served.size;
  await waitFor(() => load.served.size >= atKill + 120, { what: '120 requests served with the control plane down', timeoutMs: 60_000 });
  const failedWhileDown = load.failed;
  const cp = await startControlPlane(t, s.cpOpts);
  await waitFor(() => load.served.size >= atKill + 160, { what: 'more requests after the control plane returned', timeoutMs: 30_000 });
  await load.stop();

  const result = await waitFor(async () => {
    const r = await ingested(s.pool, s.nodeId);
    return r.rows >= load.served.size && [...load.served].every((id) => r.ids.has(id)) ? r : undefined;
  }, { what: 'served == ingested', timeoutMs: 45_000 });
  t.comment(`served ${load.served.size}, ingested ${result.rows}, failed calls ${load.failed}`);
  t.equal(failedWhileDown, 0, 'no call failed while the control plane was down');
  t.equal(load.failed, 0, 'no call failed at all');
  t.equal(result.rows, load.served.size, 'served == ingested');
  t.equal(result.rows, result.idRows, 'no duplicates');
  const one = [...load.served][0]!;
  const detail = await cp.api<{ request: { requestId: string; status: string; node: { name: string } } }>('GET', `/api/v1/requests/${one}`);
  t.match(detail.body, { request: { requestId: one, status: 'ok', node: { name: 'spool-cp-down' } } }, 'a request can be found by its x-request-id');
});
