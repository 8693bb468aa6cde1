/**
 * Spool end to end: records spooled while the control plane was away survive `--reenroll` of the
 * node (same node id, spool.db kept) and are delivered afterwards under their original node.
 */
import t from 'tap';
import { waitFor } from '../fixtures/wait-for.js';
import { ingested, spoolStack } from './spool-stack.js';
import { callNodeDetailed, runEnroll, startControlPlane, startNodeServe, tokenOf } from './stack.js';

t.test('records not yet delivered when the node is re-enrolled are delivered afterwards with their original node id', async (t) => {
  const s = await spoolStack(t, 'spool-reenroll');
  await s.cp.proc.kill9();
  let served = 0;
  for (let i = 0; i < 20; i++) if ((await callNodeDetailed(s.node.url, s.apiKey)).status === 200) served += 1;
  t.equal(served, 20, 'served with the control plane down');
  await s.node.proc.stop();

  const cp = await startControlPlane(t, s.cpOpts);
  const command = await cp.api<{ command: string }>('POST', '/api/v1/nodes/spool-reenroll/reenroll-command', {});
  t.equal(command.status, 200);
  const enrolled = await runEnroll(t, { url: cp.url, token: tokenOf(command.body.command), stateDir: s.stateDir, caFile: s.cpOpts.https.caFile, extra: ['--reenroll'] });
  t.equal(enrolled.code, 0, `re-enrolled: ${enrolled.output.slice(-300)}`);
  t.match(enrolled.output, s.nodeId, 'the node keeps its id');

  await startNodeServe(t, { stateDir: s.stateDir });
  const result = await waitFor(async () => {
    const r = await ingested(s.pool, s.nodeId);
    return r.rows === 20 ? r : undefined;
  }, { what: 'the 20 records spooled before re-enrollment', timeoutMs: 30_000 });
  t.equal(result.rows, 20, `ingested ${result.rows} under node ${s.nodeId}`);
  t.equal(result.rows, result.idRows, 'no duplicates');
});
