/**
 * Following the NODE_DELETED advice end to end: a node deleted on the control plane while its spool
 * holds records not yet delivered, created again (a new node id) and re-enrolled on the same state
 * dir with its reenroll command, serves again: the old node's spool and config were moved into
 * retired/ (kept, never deleted), where `serve` refused the old node's spool before.
 */
import { existsSync, readdirSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { loadControlStatus } from '../../edge-node/src/control/control-status.js';
import { openStateStore } from '../../edge-node/src/state/state-store.js';
import { waitFor } from '../fixtures/wait-for.js';
import { spoolStack } from './spool-stack.js';
import { callNode, callNodeDetailed, createNode, runEnroll, startControlPlane, startNodeServe, tokenOf } from './stack.js';

t.test('a node deleted with records not yet delivered, created again and re-enrolled on its state dir, serves again with the old spool kept in retired/', async (t) => {
  const name = 'spool-deleted';
  const s = await spoolStack(t, name);
  await s.cp.proc.kill9();
  let served = 0;
  for (let i = 0; i < 5; i++) if ((await callNodeDetailed(s.node.url, s.apiKey)).status === 200) served += 1;
  t.equal(served, 5, 'served with the control plane down: the records wait in the spool');
  await s.node.proc.stop();

  const cp = await startControlPlane(t, s.cpOpts);
  t.equal((await cp.api('DELETE', `/api/v1/nodes/${name}`)).status, 200);
  const refused = await startNodeServe(t, { stateDir: s.stateDir });
  const store = await openStateStore(s.stateDir, { create: false });
  const status = await waitFor(async () => {
    const record = await loadControlStatus(store);
    return record?.lastError?.code === 'NODE_DELETED' ? record : undefined;
  }, { what: 'NODE_DELETED in control-status.json', timeoutMs: 30_000 });
  t.match(status.lastError?.advice, /cannot come back.*reenroll-command NAME.*--reenroll.*retired\//);
  await refused.proc.stop();

  // The advice: create a node, run its reenroll command on this host.
  const created = await createNode(cp, name);
  t.not(created.node.id, s.nodeId, 'the node created again has a new id');
  const command = await cp.api<{ command: string }>('POST', `/api/v1/nodes/${name}/reenroll-command`, {});
  t.equal(command.status, 200);
  const enrolled = await runEnroll(t, { url: cp.url, token: tokenOf(command.body.command), stateDir: s.stateDir, caFile: s.cpOpts.https.caFile, extra: ['--reenroll'] });
  t.equal(enrolled.code, 0, `re-enrolled: ${enrolled.output.slice(-500)}`);
  t.match(enrolled.output, `re-enrolled node ${name} (id ${created.node.id})`);
  t.match(enrolled.output, `moved node ${name} (${s.nodeId})'s state aside to ${path.join(s.stateDir, 'retired')}`);
  t.match(enrolled.output, '5 records of node spool-deleted not yet delivered are kept there (no other node can deliver them)');
  const retired = readdirSync(path.join(s.stateDir, 'retired'));
  t.equal(retired.length, 1);
  for (const f of ['spool.db', 'spool.json', 'control-status.json', 'config']) t.ok(existsSync(path.join(s.stateDir, 'retired', retired[0]!, f)), `${f} kept in retired/`);

  const node = await startNodeServe(t, { stateDir: s.stateDir });
  await node.proc.waitForLine(/"msg":"config applied"/, 30_000);
  t.equal(await callNode(node.url, s.apiKey), 200, 'the new node serves from this host');
  t.notMatch(node.proc.output(), /belongs to node|SpoolRefused/);
});
