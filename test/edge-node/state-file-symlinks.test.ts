// A symbolic link in the state dir where node-edge keeps a SQLite file or a lock file — spool.db, its
// -wal, credit-leases.sqlite, the spool's lock files — stops `serve` with one line naming the link,
// where it leads and what to do (exit 2), and neither the link nor what it leads to is touched: it
// was followed, so the node served from (or chmodded, or truncated) a file outside its state dir.
import { chmodSync, existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, renameSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { LEASE_DB_FILE, openLeaseStore } from '../../edge-node/src/billing/lease-store.js';
import { ConfigHolder } from '../../edge-node/src/config/config-holder.js';
import { openRateLimitDatabase } from '../../edge-node/src/rate-limit/rate-limit-file.js';
import { openNodeSpool } from '../../edge-node/src/spool/open-node-spool.js';
import { openStateDatabase } from '../../edge-node/src/state/state-database.js';
import { StateFileError } from '../../edge-node/src/state/state-store.js';
import { startFakeGateway, writeEnrolledState } from './control-fixtures.js';
import { serveRefusal } from './serve-refusal.js';
import { openRow, quietLogger, record } from './spool/spool-helpers.js';

const FOLLOWS_NO_LINK = "node-edge follows no link in its state dir (one can lead to another user's file, or to a copy that is not this node's), and left both as they are";
const SPOOL_ADVICE =
  "if it leads to this node's own spool (put back by hand), move that file here in place of the link (spool.db together with its -wal and -shm); " +
  'otherwise remove the link and put spool.db itself back: records are only ever delivered from the spool file in the state dir';
const LOCK_ADVICE = 'remove the link (only a lock counts in a lock file, never its content): node-edge creates the lock file again';

/** An enrolled state dir (with a spool holding one record when `withSpool`), and an empty dir outside it. */
async function enrolled(t: Test, withSpool: boolean): Promise<{ dir: string; nodeId: string; elsewhere: string }> {
  const gateway = await startFakeGateway(t);
  const root = t.testdir({});
  const state = await writeEnrolledState(path.join(root, 'state'), gateway);
  if (withSpool) {
    const node = await openNodeSpool({ stateDir: state.dir, nodeId: state.identity.nodeId, holder: ConfigHolder.notReady('x'), logger: quietLogger(), synchronous: 'normal' });
    void node.spool.open(openRow('r1'));
    await node.spool.finalise(record('r1'));
    await node.close();
  }
  const elsewhere = path.join(root, 'elsewhere');
  mkdirSync(elsewhere);
  return { dir: state.dir, nodeId: state.identity.nodeId, elsewhere };
}

/** Serve was refused with exactly `line`, exit 2. */
async function expectRefusal(t: Test, dir: string, line: string): Promise<void> {
  const { listened, code, said, output } = await serveRefusal(t, dir);
  t.notOk(listened, 'serve did not start');
  if (listened) return;
  t.equal(code, 2, `exit 2${code === 2 ? '' : `: ${output}`}`);
  t.same(said, [`zenova-node: ${line}`], 'one line naming the link, where it leads and what to do');
  t.notMatch(output, /unexpected failure|unable to open database file/);
}

t.test('serve refuses a spool.db that is a symbolic link to the spool moved elsewhere, and opens nothing there', async (t) => {
  const { dir, elsewhere } = await enrolled(t, true);
  const link = path.join(dir, 'spool.db');
  const target = path.join(elsewhere, 'spool.db');
  // A restore by hand: the spool (spool.json still names it) kept on another disk and linked in.
  renameSync(link, target);
  symlinkSync(target, link);
  const before = readFileSync(target);
  await expectRefusal(t, dir, `${link}: is a symbolic link (to ${target}), not a spool file; ${FOLLOWS_NO_LINK}: ${SPOOL_ADVICE}`);
  t.ok(lstatSync(link).isSymbolicLink(), 'the link is still there');
  t.same(readFileSync(target), before, 'the spool it leads to was left as it was');
  t.same(readdirSync(elsewhere), ['spool.db'], 'no -wal or -shm was made beside it');
});

t.test('serve refuses a dangling spool.db link, and makes no spool where it leads', async (t) => {
  const { dir, elsewhere } = await enrolled(t, false);
  const link = path.join(dir, 'spool.db');
  const target = path.join(elsewhere, 'spool.db');
  symlinkSync(target, link);
  await expectRefusal(t, dir, `${link}: is a symbolic link (to ${target}), not a spool file; ${FOLLOWS_NO_LINK}: ${SPOOL_ADVICE}`);
  t.same(readdirSync(elsewhere), [], 'nothing was made where it leads');
  t.notOk(existsSync(path.join(dir, 'spool.json')), 'no spool marker was written');
});

t.test('serve refuses a spool.db-wal that is a symbolic link, naming the -wal', async (t) => {
  const { dir, elsewhere } = await enrolled(t, true);
  const link = path.join(dir, 'spool.db-wal');
  const target = path.join(elsewhere, 'spool.db-wal');
  writeFileSync(target, '');
  symlinkSync(target, link);
  await expectRefusal(t, dir, `${link}: is a symbolic link (to ${target}), not a spool file; ${FOLLOWS_NO_LINK}: ${SPOOL_ADVICE}`);
  t.equal(statSync(target).size, 0, 'the file it leads to was left as it was');
});

t.test('serve refuses a credit-leases.sqlite that is a symbolic link, and leaves the book it leads to as it was', async (t) => {
  const { dir, nodeId, elsewhere } = await enrolled(t, false);
  const link = path.join(dir, LEASE_DB_FILE);
  const target = path.join(elsewhere, LEASE_DB_FILE);
  const book = openLeaseStore(elsewhere, { nodeId });
  const lease = { leaseId: 'lease-1', accountId: 'acct-1', granted: 1000, spent: 10, reserved: 0, expiresAt: 4_000_000_000_000, state: 'open' as const };
  book.save(lease, lease);
  book.close();
  chmodSync(target, 0o644);
  symlinkSync(target, link);
  const before = readFileSync(target);
  await expectRefusal(
    t,
    dir,
    `${link}: is a symbolic link (to ${target}), not the credit lease book; ${FOLLOWS_NO_LINK}: ` +
      "if it leads to this node's own file (put back by hand), move that file here in place of the link (the book together with its -wal and -shm); " +
      'otherwise remove the link and restore the file itself (a new book would not know what this node spent from its leases)',
  );
  t.same(readFileSync(target), before, 'the book it leads to was left as it was');
  t.equal(statSync(target).mode & 0o777, 0o644, 'and was not chmodded');
  t.same(readdirSync(elsewhere), [LEASE_DB_FILE], 'no -wal or -shm was made beside it');
});

// spool.db.lock is taken first; spool-owner-0.lock is the slot a lone node takes; spool-owner-3.lock a
// slot no start would reach (0 is free), whose probe would lock what it leads to; the sole-process
// lock is taken at ZENOVA_NODE_REPLICAS=1.
for (const name of ['spool.db.lock', 'spool-owner-0.lock', 'spool-owner-3.lock', 'spool-owner-sole.lock']) {
  t.test(`serve refuses a ${name} that is a symbolic link, and neither truncates nor chmods the file it leads to`, async (t) => {
    // No spool yet, so no lock file either: serve makes the spool under spool.db.lock.
    const { dir, elsewhere } = await enrolled(t, false);
    const link = path.join(dir, name);
    const target = path.join(elsewhere, 'notes.txt');
    // Not a SQLite file: a lock file holding anything else is emptied in place.
    writeFileSync(target, 'another program\'s data\n', { mode: 0o644 });
    chmodSync(target, 0o644);
    symlinkSync(target, link);
    await expectRefusal(t, dir, `${link}: is a symbolic link (to ${target}), not a lock file; ${FOLLOWS_NO_LINK}: ${LOCK_ADVICE}`);
    t.equal(readFileSync(target, 'utf8'), 'another program\'s data\n', 'what it leads to was not truncated');
    t.equal(statSync(target).mode & 0o777, 0o644, 'nor chmodded');
    t.ok(lstatSync(link).isSymbolicLink(), 'the link is still there');
  });
}

t.test('a SQLite state file that is a symbolic link is refused before any connection (rate-limits, mcp-sessions, control-link)', async (t) => {
  const root = t.testdir({ state: {}, elsewhere: {} });
  const link = path.join(root, 'state', 'mcp-sessions.sqlite');
  const target = path.join(root, 'elsewhere', 'mcp-sessions.sqlite');
  symlinkSync(target, link);
  const refused = t.throws(() => openStateDatabase(link, { busyTimeoutMs: 100, synchronous: 'NORMAL', schema: 'create table if not exists x (a)' })) as unknown;
  t.ok(refused instanceof StateFileError, 'a StateFileError, which names the file');
  t.equal((refused as StateFileError).file, link);
  t.match((refused as Error).message, `is a symbolic link (to ${target}), not a SQLite file`);
  t.notOk(existsSync(target), 'no database was made where it leads');
});

t.test('a -wal beside a SQLite state file that is a symbolic link is refused, naming the -wal', async (t) => {
  const root = t.testdir({ state: {}, elsewhere: { 'x-wal': '' } });
  const file = path.join(root, 'state', 'x.sqlite');
  symlinkSync(path.join(root, 'elsewhere', 'x-wal'), `${file}-wal`);
  const refused = t.throws(() => openStateDatabase(file, { busyTimeoutMs: 100, synchronous: 'NORMAL', schema: 'create table if not exists x (a)' })) as unknown;
  t.equal((refused as StateFileError).file, `${file}-wal`);
  t.notOk(existsSync(file), 'the database was not made either');
});

t.test('rate-limits.sqlite.lock that is a symbolic link is refused, and what it leads to is not truncated', async (t) => {
  const root = t.testdir({ state: {}, elsewhere: { 'notes.txt': 'keep me\n' } });
  const file = path.join(root, 'state', 'rate-limits.sqlite');
  const target = path.join(root, 'elsewhere', 'notes.txt');
  symlinkSync(target, `${file}.lock`);
  const refused = t.throws(() => openRateLimitDatabase(file, { busyTimeoutMs: 100, schema: 'create table if not exists x (a)' })) as unknown;
  t.equal((refused as StateFileError).file, `${file}.lock`);
  t.match((refused as Error).message, 'not a lock file');
  t.equal(readFileSync(target, 'utf8'), 'keep me\n');
  t.notOk(existsSync(file), 'the counters file was not made');
});

t.test('a state dir reached through a symbolic link is still used: only links inside it are refused', async (t) => {
  const root = t.testdir({ real: {} });
  symlinkSync(path.join(root, 'real'), path.join(root, 'linked'));
  const db = openStateDatabase(path.join(root, 'linked', 'x.sqlite'), { busyTimeoutMs: 100, synchronous: 'NORMAL', schema: 'create table if not exists x (a)' });
  db.close();
  t.ok(statSync(path.join(root, 'real', 'x.sqlite')).isFile());
});
