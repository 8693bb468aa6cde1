// A spool that is not plainly this node's and healthy is refused with a message naming the file and
// what to do, and is left byte-identical; a missing spool the marker remembers is refused too.
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, renameSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { openNodeSpool } from '../../../edge-node/src/spool/open-node-spool.js';
import type { NodeSpool } from '../../../edge-node/src/spool/open-node-spool.js';
import { SpoolRefusedError } from '../../../edge-node/src/spool/spool-file.js';
import { NODE_ID, openRow, quietLogger, record, tempStateDir } from './spool-helpers.js';

const sha = (file: string): string => createHash('sha256').update(readFileSync(file)).digest('hex');

async function open(stateDir: string, nodeId = NODE_ID): Promise<NodeSpool> {
  return openNodeSpool({ stateDir, nodeId, holder: ConfigHolder.notReady('test'), logger: quietLogger(), synchronous: 'normal' });
}

/** A state dir whose spool holds one delivered-not-yet record, closed cleanly. */
async function stateWithSpool(t: Test): Promise<{ dir: string; file: string }> {
  const dir = tempStateDir(t);
  const spool = await open(dir);
  void spool.spool.open(openRow('r1'));
  await spool.spool.finalise(record('r1'));
  await spool.close();
  return { dir, file: path.join(dir, 'spool.db') };
}

async function expectRefusal(t: Test, dir: string, file: string, pattern: RegExp, nodeId = NODE_ID): Promise<void> {
  const before = existsSync(file) ? sha(file) : null;
  const entries = readdirSync(dir).sort();
  await t.rejects(open(dir, nodeId), pattern);
  try {
    await open(dir, nodeId);
  } catch (err) {
    t.ok(err instanceof SpoolRefusedError, 'a SpoolRefusedError');
    t.match((err as Error).message, file, 'the message names the file');
  }
  t.equal(existsSync(file) ? sha(file) : null, before, 'the file is byte-identical');
  // The read-only check may leave SQLite's -shm and an empty -wal (a reader never deletes them: a
  // node-edge may hold them, spool-status-race.test.ts); nothing else is created, nothing deleted.
  const sidecars = [`${path.basename(file)}-wal`, `${path.basename(file)}-shm`];
  const after = readdirSync(dir).sort();
  t.same(after.filter((f) => !(sidecars.includes(f) && !entries.includes(f))), entries, 'nothing else was created or deleted in the state dir');
  if (after.includes(sidecars[0] ?? '') && !entries.includes(sidecars[0] ?? '')) t.equal(statSync(`${file}-wal`).size, 0, 'a -wal it left is empty');
}

t.test('a spool reopened by its own node keeps its undelivered records', async (t) => {
  const { dir } = await stateWithSpool(t);
  const spool = await open(dir);
  t.equal(spool.figures().backfillBacklog, 1);
  t.ok(spool.figures().spoolBytes > 0);
  await spool.close();
});

t.test('a truncated spool file is refused and left untouched', async (t) => {
  const { dir, file } = await stateWithSpool(t);
  truncateSync(file, 5000);
  await expectRefusal(t, dir, file, /corrupt|cannot be read|not a SQLite|cut short/);
});

t.test('a spool file cut inside its last page (which reads its lost tail as zeros) is refused as cut short and left untouched', async (t) => {
  const { dir, file } = await stateWithSpool(t);
  // Enough records that the last page holds some: cut 1 000 bytes off it.
  const spool = await open(dir);
  await Promise.all(Array.from({ length: 300 }, (_, i) => spool.spool.finalise(record(`more-${i}`))));
  await spool.close();
  truncateSync(file, statSync(file).size - 1000);
  await expectRefusal(t, dir, file, /is cut short: \d+ bytes is not a whole number of its \d+-byte pages/);
});

t.test('a garbage spool file is refused as not a SQLite database and left untouched', async (t) => {
  const { dir, file } = await stateWithSpool(t);
  writeFileSync(file, Buffer.alloc(8192, 0x5a));
  await expectRefusal(t, dir, file, /is not a SQLite database/);
});

t.test('an empty spool file is refused and left untouched', async (t) => {
  const { dir, file } = await stateWithSpool(t);
  writeFileSync(file, '');
  await expectRefusal(t, dir, file, /is empty/);
});

t.test('a spool with damaged pages is refused as corrupt and left untouched', async (t) => {
  const { dir, file } = await stateWithSpool(t);
  const bytes = readFileSync(file);
  // Page 2 onwards: overwrite the b-tree pages (the header page stays valid).
  bytes.fill(0xff, 4096 + 8, Math.min(bytes.length, 4096 * 3));
  writeFileSync(file, bytes);
  await expectRefusal(t, dir, file, /corrupt|cannot be read/);
});

t.test("a spool of another node is refused as foreign and left untouched", async (t) => {
  const { dir, file } = await stateWithSpool(t);
  await expectRefusal(t, dir, file, /belongs to node node-spool-test-0001, but this state dir is enrolled as node another-node/, 'another-node');
});

t.test('a missing spool file is refused when the marker says this node had one', async (t) => {
  const { dir, file } = await stateWithSpool(t);
  renameSync(file, `${file}.moved`);
  await expectRefusal(t, dir, file, /is missing.*never taken as proof that its records were delivered/);
});

t.test('a spool file swapped for another spool of the same node is refused', async (t) => {
  const { dir, file } = await stateWithSpool(t);
  const other = tempStateDir(t);
  const spool = await open(other);
  await spool.close();
  writeFileSync(file, readFileSync(path.join(other, 'spool.db')));
  await expectRefusal(t, dir, file, /the file was replaced/);
});

t.test('a stand-alone node (no state dir) keeps no spool', async (t) => {
  const spool = await openNodeSpool({ stateDir: undefined, nodeId: 'local', holder: ConfigHolder.notReady('x'), logger: quietLogger(), synchronous: 'normal' });
  t.equal(spool.channel, undefined);
  t.equal(spool.spool.keepsBodies(), false);
  await spool.close();
});
