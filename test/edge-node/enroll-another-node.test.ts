// `zenova-node enroll --reenroll` of a state dir that holds node OLD, with a token that enrolls node
// NEW (OLD was deleted and created again): OLD's spool and config are moved aside into retired/
// when OLD was refused as deleted or has nothing left to deliver, and the re-enrollment is refused,
// with nothing changed, while OLD's spool holds records only OLD can deliver. Real spool files,
// against the HTTPS control plane stand-in (the real control plane: e2e/spool-reenroll-deleted-node).
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, readdir, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import type { Test } from 'tap';
import { saveControlStatus } from '../../edge-node/src/control/control-status.js';
import { SPOOL_FILE, createSpoolFile, vetSpoolFile } from '../../edge-node/src/spool/spool-file.js';
import { saveSpoolMarker } from '../../edge-node/src/spool/spool-marker.js';
import { inspectPreviousNode, retirePreviousNode } from '../../edge-node/src/enroll/retire-node-state.js';
import { SpoolOwnerLock } from '../../edge-node/src/spool/spool-owner-lock.js';
import { loadIdentity } from '../../edge-node/src/state/identity.js';
import { openStateStore } from '../../edge-node/src/state/state-store.js';
import { runNodeCli as run } from './cli-capture.js';
import { startEnrollServer } from './enroll-fixtures.js';

const TOKEN = 'zn_it_UmVlbnJvbGxBc0Fub3RoZXJOb2RlTmV2ZXJQcmludGVkMDEyMzQ1';

const mode = async (file: string): Promise<number> => (await stat(file)).mode & 0o777;

/** A state dir enrolled as OLD whose spool holds `records` final and `open` open rows, and a config cache. */
async function enrolledAsOld(t: Test, opts: { records: number; open: number; deleted: boolean }) {
  const oldId: string = randomUUID();
  let answerId: string = oldId;
  const server = await startEnrollServer(t, { nodeId: () => answerId });
  const dir = t.testdir({});
  const stateDir = path.join(dir, 'state');
  const ca = path.join(dir, 'ca.pem');
  await writeFile(ca, server.ca.certPem);
  const enroll = (extra: string[] = ['--reenroll']) => run(['enroll', '--control-plane', server.url, '--token', TOKEN, '--state-dir', stateDir, '--ca-file', ca, ...extra]);
  t.equal((await enroll([])).code, 0, 'enrolled as OLD');

  const store = await openStateStore(stateDir, { create: false });
  const spoolFile = path.join(stateDir, SPOOL_FILE);
  await saveSpoolMarker(store, createSpoolFile(spoolFile, oldId));
  const db = new Database(spoolFile);
  db.pragma('journal_mode = WAL');
  for (let i = 0; i < opts.records; i++) db.prepare('insert into records (request_id, record_json) values (?, ?)').run(`req_${i}`, '{}');
  for (let i = 0; i < opts.open; i++) db.prepare('insert into open_requests (request_id, row_json) values (?, ?)').run(`req_open_${i}`, '{}');
  db.close();
  await mkdir(path.join(stateDir, 'config'), { mode: 0o700 });
  await writeFile(path.join(stateDir, 'config', 'current.json'), '{"version":3}', { mode: 0o600 });
  await writeFile(path.join(stateDir, 'config-applied-version.json'), '{}', { mode: 0o600 });
  const now = new Date().toISOString();
  await saveControlStatus(store, {
    connected: false,
    since: now,
    lastError: opts.deleted ? { code: 'NODE_DELETED', message: 'node edge-1 was deleted', at: now } : { code: 'GATEWAY_UNREACHABLE', message: 'refused', at: now },
    sessionId: null,
    pid: process.pid,
    serving: false,
    updatedAt: now,
  });
  return {
    oldId,
    stateDir,
    /** What a first run does before it saves the new identity: its moves, then (a crash, a full disk) nothing more. */
    async retireLikeAFailedRun(now: number) {
      const identity = await loadIdentity(store);
      if (identity === undefined) throw new Error('not enrolled');
      return retirePreviousNode(store, await inspectPreviousNode(store, identity), now);
    },
    spoolFile,
    enroll,
    enrollAs(id: string) {
      answerId = id;
      return enroll();
    },
  };
}

const identityOf = async (stateDir: string): Promise<{ nodeId: string }> => JSON.parse(await readFile(path.join(stateDir, 'identity.json'), 'utf8')) as { nodeId: string };

t.test('a reenroll as another node after NODE_DELETED moves the old spool and config into retired/ and the state dir starts afresh', async (t) => {
  const s = await enrolledAsOld(t, { records: 2, open: 1, deleted: true });
  const newId = randomUUID();
  const r = await s.enrollAs(newId);
  t.equal(r.code, 0, r.stderr);
  t.equal((await identityOf(s.stateDir)).nodeId, newId, 'enrolled as NEW');

  const retired = await readdir(path.join(s.stateDir, 'retired'));
  t.equal(retired.length, 1);
  const name = retired[0]!;
  t.match(name, new RegExp(`^edge-1-${s.oldId.slice(0, 8)}-\\d{8}T\\d{6}Z$`));
  const moved = path.join(s.stateDir, 'retired', name);
  t.match(r.stdout, `moved node edge-1 (${s.oldId})'s state aside to ${moved}`);
  t.match(r.stdout, /3 records of node edge-1 not yet delivered are kept there \(no other node can deliver them\)/);
  for (const f of ['spool.db', 'spool.db-wal', 'spool.db-shm', 'spool.json', 'control-status.json', 'config-applied-version.json', 'config/current.json']) {
    t.ok(existsSync(path.join(moved, f)), `${f} moved`);
    t.notOk(existsSync(path.join(s.stateDir, f)), `${f} no longer in the state dir`);
  }
  t.equal(await mode(path.join(moved, 'spool.db')), 0o600, 'modes kept');
  t.equal(await mode(path.join(moved, 'config')), 0o700);
  t.equal(await mode(path.join(moved)), 0o700);
  t.equal(await mode(path.join(s.stateDir, 'retired')), 0o700);
  t.equal(vetSpoolFile(path.join(moved, 'spool.db'), s.oldId).nodeId, s.oldId, 'the old spool is whole');
  const db = new Database(path.join(moved, 'spool.db'), { readonly: true });
  t.equal(db.prepare('select count(*) from records').pluck().get(), 2, 'its records are all there');
  db.close();
  t.notOk(existsSync(path.join(s.stateDir, 'enroll-attempt.json')));
});

t.test('a reenroll as another node with an empty spool moves it aside even without NODE_DELETED', async (t) => {
  const s = await enrolledAsOld(t, { records: 0, open: 0, deleted: false });
  const r = await s.enrollAs(randomUUID());
  t.equal(r.code, 0, r.stderr);
  t.match(r.stdout, /0 records of node edge-1 not yet delivered are kept there/);
  t.notOk(existsSync(s.spoolFile));
});

t.test('a reenroll as another node while the old spool holds undelivered records and no NODE_DELETED is refused, nothing moved', async (t) => {
  const s = await enrolledAsOld(t, { records: 2, open: 1, deleted: false });
  const identity = await readFile(path.join(s.stateDir, 'identity.json'), 'utf8');
  const credential = await readFile(path.join(s.stateDir, 'credential.json'), 'utf8');
  const spool = await readFile(s.spoolFile);
  const newId = randomUUID();
  const r = await s.enrollAs(newId);
  t.equal(r.code, 1);
  t.match(r.stderr, `holds node edge-1 (${s.oldId}) with 3 records not yet delivered; enrolling it as node ${newId} would strand them`);
  t.match(r.stderr, /Let edge-1 deliver them first/);
  t.notMatch(r.stderr, TOKEN);
  t.equal(await readFile(path.join(s.stateDir, 'identity.json'), 'utf8'), identity, 'identity unchanged');
  t.equal(await readFile(path.join(s.stateDir, 'credential.json'), 'utf8'), credential, 'credential unchanged');
  t.same(await readFile(s.spoolFile), spool, 'spool untouched');
  for (const f of ['spool.json', 'control-status.json', 'config/current.json', 'config-applied-version.json']) t.ok(existsSync(path.join(s.stateDir, f)), `${f} in place`);
  t.notOk(existsSync(path.join(s.stateDir, 'retired')), 'nothing moved');
});

t.test('a reenroll as another node while a node-edge process holds the old spool open is refused, nothing moved', async (t) => {
  const s = await enrolledAsOld(t, { records: 0, open: 0, deleted: true });
  const slot = SpoolOwnerLock.acquire(s.spoolFile);
  t.teardown(() => slot.release());
  const r = await s.enrollAs(randomUUID());
  t.equal(r.code, 1);
  t.match(r.stderr, /a node-edge process still serves node edge-1 .*: stop it before/);
  t.equal((await identityOf(s.stateDir)).nodeId, s.oldId);
  t.ok(existsSync(s.spoolFile));
  t.notOk(existsSync(path.join(s.stateDir, 'retired')));
});

t.test('a reenroll of the same node moves nothing and keeps its spool with its records', async (t) => {
  const s = await enrolledAsOld(t, { records: 2, open: 1, deleted: false });
  const spool = await readFile(s.spoolFile);
  const r = await s.enrollAs(s.oldId);
  t.equal(r.code, 0, r.stderr);
  t.notMatch(r.stdout, /moved/);
  t.same(await readFile(s.spoolFile), spool);
  t.ok(existsSync(path.join(s.stateDir, 'config', 'current.json')));
  t.notOk(existsSync(path.join(s.stateDir, 'retired')));
});

t.test('a rerun after a run that moved the old state aside and failed before saving the new identity names that directory and its records, and makes no second one', async (t) => {
  const s = await enrolledAsOld(t, { records: 4, open: 1, deleted: true });
  // Seconds earlier, so the rerun's own time would name another directory.
  const first = await s.retireLikeAFailedRun(Date.now() - 2000);
  t.equal(first.undelivered, 5);
  const newId = randomUUID();
  const r = await s.enrollAs(newId);
  t.equal(r.code, 0, r.stderr);
  t.equal((await identityOf(s.stateDir)).nodeId, newId, 'enrolled as NEW');
  t.same(await readdir(path.join(s.stateDir, 'retired')), [path.basename(first.dir)], 'no second directory');
  t.match(r.stdout, `moved node edge-1 (${s.oldId})'s state aside to ${path.join(s.stateDir, first.dir)}: config-applied-version.json, config, spool.db, spool.db-wal`);
  t.match(r.stdout, /5 records of node edge-1 not yet delivered are kept there/);
  t.notMatch(r.stdout, /nothing was left to move/);
});

t.test('an empty partial directory left with the same time as the finished one does not block a rerun', async (t) => {
  const s = await enrolledAsOld(t, { records: 2, open: 0, deleted: true });
  const now = Date.now();
  const first = await s.retireLikeAFailedRun(now);
  // What a rerun within the same second left before this fix: an empty `.…partial` whose final rename failed (ENOTEMPTY).
  const leftover = path.join(s.stateDir, 'retired', `.${path.basename(first.dir)}.partial`);
  await mkdir(leftover, { mode: 0o700 });
  const again = await s.retireLikeAFailedRun(now);
  t.equal(again.dir, first.dir, 'a rerun within the same second names the first directory');
  t.equal(again.undelivered, 2);
  await mkdir(leftover, { mode: 0o700 });
  const r = await s.enrollAs(randomUUID());
  t.equal(r.code, 0, r.stderr);
  t.match(r.stdout, `state aside to ${path.join(s.stateDir, first.dir)}: `);
  t.match(r.stdout, /2 records of node edge-1 not yet delivered are kept there/);
  t.same(await readdir(path.join(s.stateDir, 'retired')), [path.basename(first.dir)], 'the empty partial is gone, no second directory');
});

t.test('a partial directory whose final name another directory took finishes under a name of its own, never into that one', async (t) => {
  const s = await enrolledAsOld(t, { records: 1, open: 0, deleted: true });
  const now = Date.now();
  const name = `edge-1-${s.oldId.slice(0, 8)}-${new Date(now).toISOString().replace(/[-:]/g, '').replace(/\.\d{3}/, '')}`;
  const taken = path.join(s.stateDir, 'retired', name);
  await mkdir(taken, { recursive: true, mode: 0o700 });
  await writeFile(path.join(taken, 'spool.db-wal'), 'another spool\'s WAL');
  await mkdir(path.join(s.stateDir, 'retired', `.${name}.partial`), { mode: 0o700 });
  const retired = await s.retireLikeAFailedRun(now);
  t.equal(retired.dir, path.join('retired', `${name}-2`));
  t.equal(retired.undelivered, 1);
  t.equal(await readFile(path.join(taken, 'spool.db-wal'), 'utf8'), 'another spool\'s WAL', 'the other directory untouched');
  t.same((await readdir(path.join(s.stateDir, 'retired'))).sort(), [name, `${name}-2`]);
});
