// `zenova-node doctor` checks credit-leases.sqlite as `serve` opens it: a lease book serve refuses to
// start with (garbage, a directory, a failing quick_check, a damaged WAL, another user's file) fails
// doctor with serve's own message, and doctor writes nothing beside it (no -wal/-shm of its own).
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import type { Test } from 'tap';
import { LEASE_DB_FILE, openLeaseStore } from '../../edge-node/src/billing/lease-store.js';
import { runDoctor } from '../../edge-node/src/doctor/doctor.js';
import type { DoctorCheck } from '../../edge-node/src/doctor/doctor.js';
import { runNodeCli } from './cli-capture.js';
import { startFakeGateway, writeEnrolledState } from './control-fixtures.js';
import type { EnrolledState } from './control-fixtures.js';
import { giveToNodeUser, NEEDS_ROOT, NODE_USER } from './node-user-serve.js';
import { FRAME_HEADER_BYTES, WAL_HEADER_BYTES, flipByte, walShape } from '../fixtures/wal-damage.js';

const REFUSED = '`serve` refuses to start with it: ';
const LEASE_CHILD = fileURLToPath(new URL('./billing/lease-wal-child.ts', import.meta.url));
const LEASE = { leaseId: 'lease-1', accountId: 'acct-1', granted: 1000, spent: 10, reserved: 0, expiresAt: 4_000_000_000_000, state: 'open' as const };

async function enrolled(t: Test): Promise<{ state: EnrolledState; file: string }> {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(path.join(t.testdir({}), 'state'), gateway);
  chmodSync(state.dir, 0o700);
  return { state, file: path.join(state.dir, LEASE_DB_FILE) };
}

async function leaseCheck(t: Test, dir: string): Promise<DoctorCheck> {
  const checks = await runDoctor(dir);
  const found = checks.filter((c) => c.label.startsWith('credit lease book'));
  t.equal(found.length, 1, 'one lease book check');
  return found[0] ?? { ok: false, label: 'none' };
}

/** What serve stops with for this state dir's lease book (it leaves a refused book as it was). */
function serveRefusal(state: EnrolledState): string {
  try {
    openLeaseStore(state.dir, { nodeId: state.identity.nodeId }).close();
  } catch (err) {
    return (err as Error).message;
  }
  throw new Error('serve opened the lease book');
}

/** The state dir's names, and each file's bytes: doctor must change none of them. */
function contents(dir: string): Array<[string, string]> {
  return readdirSync(dir).sort().map((name) => {
    const file = path.join(dir, name);
    return [name, statSync(file).isDirectory() ? 'dir' : readFileSync(file).toString('base64')];
  });
}

t.test('doctor fails a credit-leases.sqlite of garbage with the message serve exits 2 with, and leaves it as it was', async (t) => {
  const { state, file } = await enrolled(t);
  writeFileSync(file, 'garbage garbage', { mode: 0o600 });
  const before = contents(state.dir);
  const result = await runNodeCli(['doctor', '--state-dir', state.dir]);
  t.equal(result.code, 1, 'doctor exits 1');
  t.match(result.stdout, new RegExp(`FAIL\\s+credit lease book ${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\n`));
  t.same(contents(state.dir), before, 'no -wal or -shm made, the book unchanged');
  const check = await leaseCheck(t, state.dir);
  t.equal(check.ok, false);
  t.equal(check.advice, `${REFUSED}${serveRefusal(state)}`, "serve's message");
  t.match(check.advice, 'is not a readable credit lease book (file is not a database); the file was left untouched');
});

t.test('doctor passes a node with no lease book yet and a good one, and changes neither', async (t) => {
  const { state, file } = await enrolled(t);
  const none = await leaseCheck(t, state.dir);
  t.same(none, { ok: true, label: `credit lease book: none yet (node-edge creates ${LEASE_DB_FILE} at its first start)` });
  t.notOk(existsSync(file), 'doctor created no book');
  const store = openLeaseStore(state.dir, { nodeId: state.identity.nodeId });
  store.save(LEASE, LEASE);
  store.close();
  const before = contents(state.dir);
  t.same(await leaseCheck(t, state.dir), { ok: true, label: `credit lease book ${file}: readable` });
  t.same(contents(state.dir), before, 'unchanged');
});

t.test('doctor fails a directory at credit-leases.sqlite and a book failing quick_check with serve\'s messages', async (t) => {
  const { state, file } = await enrolled(t);
  mkdirSync(file);
  const dirCheck = await leaseCheck(t, state.dir);
  t.equal(dirCheck.ok, false);
  t.equal(dirCheck.advice, `${REFUSED}${serveRefusal(state)}`);
  t.match(dirCheck.advice, `${file}: is a directory, not the credit lease book`);

  const other = await enrolled(t);
  const store = openLeaseStore(other.state.dir, { nodeId: other.state.identity.nodeId });
  store.save(LEASE, LEASE);
  store.close();
  // The header's free-page count, wrong: quick_check fails, SQLite opens it.
  const bytes = readFileSync(other.file);
  bytes.writeUInt32BE(3, 36);
  writeFileSync(other.file, bytes);
  const corrupt = await leaseCheck(t, other.state.dir);
  t.equal(corrupt.ok, false);
  t.equal(corrupt.advice, `${REFUSED}${serveRefusal(other.state)}`);
  t.match(corrupt.advice, /is corrupt \(quick_check: .*Freelist/);
  t.same(readFileSync(other.file), bytes, 'the book unchanged');
});

t.test('doctor fails a lease book whose WAL a kill -9 left with a damaged frame, and skips a book a running node-edge holds open', async (t) => {
  const { state, file } = await enrolled(t);
  const killed = spawnSync(process.execPath, ['--import', 'tsx', LEASE_CHILD, state.dir, 'spend'], { encoding: 'utf8', timeout: 60_000 });
  t.equal(killed.signal, 'SIGKILL', `the node was killed${killed.stderr ? ` (${killed.stderr})` : ''}`);
  const wal = `${file}-wal`;
  t.equal(await leaseCheck(t, state.dir).then((c) => c.ok), true, 'a WAL a kill -9 left intact passes');
  const { frameBytes, frames } = walShape(wal);
  flipByte(wal, WAL_HEADER_BYTES + Math.floor(frames / 2) * frameBytes + FRAME_HEADER_BYTES + 100);
  const walBytes = readFileSync(wal);
  const check = await leaseCheck(t, state.dir);
  t.equal(check.ok, false);
  t.equal(check.advice, `${REFUSED}${serveRefusal(state)}`, "serve's message");
  t.same(readFileSync(wal), walBytes, 'the WAL unchanged');

  // A node-edge holding a spool owner slot: it opened the book already, so doctor does not walk its WAL.
  const child = spawn(process.execPath, ['--import', 'tsx', LEASE_CHILD, state.dir, 'slot'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  t.teardown(async () => {
    child.kill('SIGKILL');
    await exited;
  });
  await new Promise<void>((resolve, reject) => {
    child.stdout.on('data', (chunk: Buffer) => {
      if (chunk.toString().includes('ready')) resolve();
    });
    child.once('exit', () => reject(new Error('the slot holder exited')));
  });
  t.same(await leaseCheck(t, state.dir), { ok: true, label: `credit lease book ${file} (open in the running node-edge)` });
});

t.test('doctor run as the node\'s user fails a credit-leases.sqlite root owns with serve\'s owner refusal', { skip: NEEDS_ROOT }, async (t) => {
  const { state, file } = await enrolled(t);
  const store = openLeaseStore(state.dir, { nodeId: state.identity.nodeId });
  store.save(LEASE, LEASE);
  store.close();
  giveToNodeUser(state.dir);
  chownSync(file, 0, 0);
  const child = spawnSync(
    process.execPath,
    ['--import', 'tsx', fileURLToPath(new URL('../../edge-node/src/main.ts', import.meta.url)), 'doctor', '--state-dir', state.dir],
    { uid: NODE_USER, gid: NODE_USER, encoding: 'utf8', env: { ...process.env, HOME: '/tmp' }, timeout: 60_000 },
  );
  t.equal(child.status, 1, child.stdout + child.stderr);
  t.match(
    child.stdout,
    `FAIL  credit lease book ${file}\n      ${REFUSED}${file}: permission denied: it belongs to uid 0, and node-edge runs as uid ${NODE_USER}; run node-edge as uid 0 if that is the node's user; ` +
      `else give the file to the node's user (a command run as root may have left it): chown ${NODE_USER} ${file}\n`,
  );
});
