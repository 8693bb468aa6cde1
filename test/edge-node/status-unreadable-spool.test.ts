// `zenova-node status` of a spool.db it cannot read: `--json` gives its backlog and open counts as
// null (a monitor reading 0 would take it for a spool with everything delivered), the text says
// UNREADABLE with the reason, never a backlog of 0, and to run `zenova-node doctor`.
import { chmod, mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { ConfigHolder } from '../../edge-node/src/config/config-holder.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { openNodeSpool } from '../../edge-node/src/spool/open-node-spool.js';
import { runNodeCli } from './cli-capture.js';
import { startFakeGateway, writeEnrolledState } from './control-fixtures.js';

async function enrolledDir(t: Test): Promise<string> {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(path.join(t.testdir({}), 'state'), gateway);
  await chmod(state.dir, 0o700);
  return state.dir;
}

t.test('status --json gives a spool.db of garbage null backlog and open counts with the reason, never 0', async (t) => {
  const dir = await enrolledDir(t);
  await writeFile(path.join(dir, 'spool.db'), 'garbage garbage', { mode: 0o600 });
  const result = await runNodeCli(['status', '--state-dir', dir, '--json']);
  const report = JSON.parse(result.stdout) as { spool: { backlog: unknown; open: unknown; error: unknown } };
  t.equal(report.spool.backlog, null, 'backlog unknown');
  t.equal(report.spool.open, null, 'open unknown');
  t.match(report.spool.error, /not a database/, 'with the reason');

  const text = (await runNodeCli(['status', '--state-dir', dir])).stdout;
  t.match(text, /^spool: +UNREADABLE: .*not a database/m);
  t.notMatch(text, /backlog 0/);
});

t.test('status of a directory at spool.db gives null counts in --json and says to run doctor in text; a readable spool keeps its numbers', async (t) => {
  const dir = await enrolledDir(t);
  await mkdir(path.join(dir, 'spool.db'));
  const report = JSON.parse((await runNodeCli(['status', '--state-dir', dir, '--json'])).stdout) as { spool: { backlog: unknown; open: unknown; error: unknown } };
  t.match(report.spool, { backlog: null, open: null, error: String });
  const text = (await runNodeCli(['status', '--state-dir', dir])).stdout;
  t.match(text, /^spool: +UNREADABLE: .*; run `zenova-node doctor`$/m, 'the text row says what to do');

  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(path.join(t.testdir({}), 'fresh'), gateway);
  const none = JSON.parse((await runNodeCli(['status', '--state-dir', state.dir, '--json'])).stdout) as { spool: unknown };
  t.equal(none.spool, null, 'no spool yet: null, as before');
  const spool = await openNodeSpool({ stateDir: state.dir, nodeId: state.identity.nodeId, holder: ConfigHolder.notReady('test'), logger: createLogger({ level: 'silent' }), synchronous: 'normal', replicas: 1 });
  await spool.close();
  const readable = JSON.parse((await runNodeCli(['status', '--state-dir', state.dir, '--json'])).stdout) as { spool: unknown };
  t.match(readable.spool, { backlog: 0, open: 0, error: null }, 'a readable empty spool: counts of 0');
});
