// A node-edge at ZENOVA_NODE_REPLICAS=1 refuses to start beside another live process serving the
// same state dir (it holds a spool owner slot), but a slot held only for a moment — `zenova-node
// status` probing the slots as the node starts — must not refuse a node that is alone.
import path from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { openNodeSpool } from '../../../edge-node/src/spool/open-node-spool.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import { soleProcessLockFile, spoolOwnerLockFile } from '../../../edge-node/src/spool/spool-owner-lock.js';
import { NODE_ID, quietLogger, tempStateDir } from './spool-helpers.js';

const open = (stateDir: string, replicas = 1) => openNodeSpool({ stateDir, nodeId: NODE_ID, holder: ConfigHolder.notReady('test'), logger: quietLogger(), synchronous: 'normal', replicas });

t.test('a spool owner slot held for a moment by a probe does not refuse a node that is alone', async (t) => {
  const dir = tempStateDir(t);
  await (await open(dir)).close();
  // A probe's hold of slot 0, as isOwnerSlotHeld takes it from another process, released 40 ms later.
  const probe = new Database(spoolOwnerLockFile(path.join(dir, 'spool.db'), 0), { fileMustExist: true });
  probe.exec('begin immediate');
  setTimeout(() => {
    probe.exec('rollback');
    probe.close();
  }, 40);
  const node = await open(dir);
  t.teardown(() => node.close());
  t.pass('the node opened its spool');
});

t.test('a spool owner slot a live process keeps refuses a second process at ZENOVA_NODE_REPLICAS=1', async (t) => {
  const dir = tempStateDir(t);
  await (await open(dir)).close();
  const holder = new Database(spoolOwnerLockFile(path.join(dir, 'spool.db'), 0), { fileMustExist: true });
  holder.exec('begin immediate');
  t.teardown(() => {
    holder.exec('rollback');
    holder.close();
  });
  await t.rejects(open(dir), { name: 'ReplicaSettingError', message: /another node-edge process is serving from/ });
});

t.test('a process at ZENOVA_NODE_REPLICAS=2 started beside one left at 1 is refused, saying to set it on that one too', async (t) => {
  const dir = tempStateDir(t);
  const single = await open(dir, 1);
  await t.rejects(open(dir, 2), { name: 'ReplicaSettingError', message: /with ZENOVA_NODE_REPLICAS unset or 1[^]*Set ZENOVA_NODE_REPLICAS=2 on that process too/ });
  await single.close();
  const first = await open(dir, 2);
  const second = await open(dir, 2);
  t.pass('once it stopped, replicas at 2 start beside each other');
  await second.close();
  await first.close();
});

t.test('a node at ZENOVA_NODE_REPLICAS=1 that cannot take the sole-process lock starts all the same and warns that a process at a higher setting beside it would not be refused', async (t) => {
  const dir = tempStateDir(t);
  await (await open(dir)).close();
  // Held past the node's retries, as by a process closing (its owner slot already released).
  const holder = new Database(soleProcessLockFile(path.join(dir, 'spool.db')), { fileMustExist: true });
  holder.exec('begin immediate');
  t.teardown(() => {
    holder.exec('rollback');
    holder.close();
  });
  const lines: string[] = [];
  const node = await openNodeSpool({ stateDir: dir, nodeId: NODE_ID, holder: ConfigHolder.notReady('test'), logger: createLogger({ level: 'warn', destination: { write: (line: string) => void lines.push(line) } }), synchronous: 'normal', replicas: 1 });
  t.teardown(() => node.close());
  const warning = lines.map((line) => JSON.parse(line) as { level: number; msg: string; file?: string }).find((line) => /sole-process lock/.test(line.msg));
  t.ok(warning, 'a warning says it serves without the lock');
  t.match(warning, { level: 40, msg: /ZENOVA_NODE_REPLICAS above 1 is not refused/, file: /spool-owner-sole\.lock$/ });
});
