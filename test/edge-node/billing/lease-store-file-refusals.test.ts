// credit-leases.sqlite (or its -wal) that node-edge may not use — root's after a command run with
// sudo, or a directory at its path — stops `serve` with one line naming the file, its owner and the
// chown (or what to do), exit 2, as spool.db does; one of its own user at a mode that forbids it is
// made 0600 and the node starts. A book failing quick_check is named on one line, whatever SQLite's
// report spans. The access cases need root: files made as root, serve run as the node's user.
import { spawnSync } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import type { Test } from 'tap';
import { LEASE_DB_FILE, openLeaseStore } from '../../../edge-node/src/billing/lease-store.js';
import { startFakeGateway, writeEnrolledState } from '../control-fixtures.js';
import { giveToNodeUser, NEEDS_ROOT, NODE_USER, serveAsNodeUser } from '../node-user-serve.js';
import { readableStateDir } from '../state-file-modes.js';

const LEASE = { leaseId: 'lease-1', accountId: 'acct-1', granted: 1000, spent: 10, reserved: 0, expiresAt: 4_000_000_000_000, state: 'open' as const };

/** An enrolled state dir with a lease book holding one lease, all of it the node's user's. */
async function stateWithLeaseBook(t: Test): Promise<{ dir: string; file: string }> {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(path.join(t.testdir({}), 'state'), gateway);
  const store = openLeaseStore(state.dir, { nodeId: state.identity.nodeId });
  store.save(LEASE, LEASE);
  store.close();
  giveToNodeUser(state.dir);
  return { dir: state.dir, file: path.join(state.dir, LEASE_DB_FILE) };
}

function expectOwnerRefusal(t: Test, result: Awaited<ReturnType<typeof serveAsNodeUser>>, file: string): void {
  t.equal(result.code, 2, `exit 2${result.code === 2 ? '' : `: ${result.output}`}`);
  t.equal(result.said.length, 1, 'one line');
  t.equal(
    result.said[0],
    `zenova-node: ${file}: permission denied: it belongs to uid 0, and node-edge runs as uid ${NODE_USER}; run node-edge as uid 0 if that is the node's user; ` +
      `else give the file to the node's user (a command run as root may have left it): chown ${NODE_USER} ${file}`,
  );
  t.notMatch(result.output, /unexpected failure|SQLITE_CANTOPEN/);
}

t.test('serve refuses a credit-leases.sqlite root owns with one line naming it, its owner and the chown, exit 2', { skip: NEEDS_ROOT }, async (t) => {
  const { dir, file } = await stateWithLeaseBook(t);
  chownSync(file, 0, 0);
  const before = readFileSync(file);
  expectOwnerRefusal(t, await serveAsNodeUser(dir), file);
  t.same(readFileSync(file), before, 'the file was left as it was');
});

t.test('serve refuses a credit-leases.sqlite-wal root owns the same way, naming that file', { skip: NEEDS_ROOT }, async (t) => {
  const { dir, file } = await stateWithLeaseBook(t);
  // A -wal a kill -9 left (a clean close removes it), then made root's.
  const sqlite = fileURLToPath(import.meta.resolve('better-sqlite3'));
  const script = `const D = require(${JSON.stringify(sqlite)}); const db = new D(${JSON.stringify(file)});
    db.prepare("update leases set spent = spent + 1").run(); process.kill(process.pid, 'SIGKILL');`;
  spawnSync(process.execPath, ['-e', script]);
  const wal = `${file}-wal`;
  t.ok(statSync(wal).size > 0, 'a non-empty -wal');
  chownSync(wal, 0, 0);
  chmodSync(wal, 0o600);
  expectOwnerRefusal(t, await serveAsNodeUser(dir), wal);
});

t.test('serve makes a credit-leases.sqlite of its own user at mode 000 owner-only and starts', { skip: NEEDS_ROOT }, async (t) => {
  const { dir, file } = await stateWithLeaseBook(t);
  chmodSync(file, 0o000);
  const result = await serveAsNodeUser(dir);
  t.ok(result.listened, `serve started${result.listened ? '' : `: ${result.output}`}`);
  t.equal(result.code, 0, 'and stopped cleanly');
  t.equal(statSync(file).mode & 0o777, 0o600, 'the file is 0600');
});

t.test('serve refuses a directory at credit-leases.sqlite with one line naming it and what to do, exit 2', { skip: NEEDS_ROOT }, async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(path.join(t.testdir({}), 'state'), gateway);
  const file = path.join(state.dir, LEASE_DB_FILE);
  mkdirSync(file);
  giveToNodeUser(state.dir);
  const result = await serveAsNodeUser(state.dir);
  t.equal(result.code, 2, `exit 2${result.code === 2 ? '' : `: ${result.output}`}`);
  t.equal(result.said.length, 1, 'one line');
  t.match(result.said[0], `zenova-node: ${file}: is a directory, not the credit lease book; the file was left untouched`);
  t.notMatch(result.output, /unexpected failure|SQLITE_CANTOPEN/);
});

t.test('a credit-leases.sqlite failing quick_check is refused with a message of one line', async (t) => {
  const dir = readableStateDir(t);
  const store = openLeaseStore(dir, { nodeId: 'node-1' });
  store.save(LEASE, LEASE);
  store.close();
  const file = path.join(dir, LEASE_DB_FILE);
  // The header's free-page count, wrong: SQLite reports it on two lines ("*** in database main ***", then the problem).
  const bytes = readFileSync(file);
  bytes.writeUInt32BE(3, 36);
  writeFileSync(file, bytes);
  t.throws(() => openLeaseStore(dir, { nodeId: 'node-1' }), /is corrupt \(quick_check: \*\*\* in database main \*\*\*; Freelist: size is 0 but should be 3\); the file was left untouched/);
  try {
    openLeaseStore(dir, { nodeId: 'node-1' });
  } catch (err) {
    t.notMatch((err as Error).message, /\n/, 'no line break in it');
  }
});
