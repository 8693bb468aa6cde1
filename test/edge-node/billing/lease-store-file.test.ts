// credit-leases.sqlite as a state file: owner-only (0600) with its -wal and -shm whatever the umask,
// and a damaged one refused with one line naming it and what to do (exit 2), left untouched.
import { createHash } from 'node:crypto';
import { chmodSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import { LEASE_DB_FILE, openLeaseStore } from '../../../edge-node/src/billing/lease-store.js';
import { StateFileError } from '../../../edge-node/src/state/state-store.js';
import { startProcess, tsEntry } from '../../fixtures/processes.js';
import { startFakeGateway, writeEnrolledState } from '../control-fixtures.js';
import { modeOf, readableStateDir } from '../state-file-modes.js';

const LEASE = { leaseId: 'lease-1', accountId: 'acct-1', granted: 1000, spent: 10, reserved: 5, expiresAt: 1_700_000_000_000, state: 'open' as const };

function sha256(file: string): string {
  return createHash('sha256').update(readFileSync(file)).digest('hex');
}

t.test('credit-leases.sqlite and its -wal and -shm are created owner-only in a state dir others can read, whatever the umask', async (t) => {
  const dir = readableStateDir(t);
  const previous = process.umask(0o022);
  t.teardown(() => process.umask(previous));
  const store = openLeaseStore(dir, { nodeId: 'node-1' });
  t.teardown(() => store.close());
  store.save(LEASE, LEASE);
  const file = path.join(dir, LEASE_DB_FILE);
  t.same([modeOf(file), modeOf(`${file}-wal`), modeOf(`${file}-shm`)], ['600', '600', '600'], 'the file, its -wal and its -shm');
});

t.test('a -wal and -shm a crash left readable by others are made owner-only when the lease book opens', async (t) => {
  const dir = readableStateDir(t);
  const file = path.join(dir, LEASE_DB_FILE);
  const first = openLeaseStore(dir, { nodeId: 'node-1' });
  first.save(LEASE, LEASE);
  // A connection kept open keeps the -wal and -shm (with their content) in place, as a kill -9 leaves them.
  const sidecarHolder = new Database(file, { readonly: true });
  sidecarHolder.prepare('select count(*) from leases').get();
  t.teardown(() => sidecarHolder.close());
  first.close();
  // As an older release left them: at the umask's 0644. (SQLite itself fixes the mode of an empty sidecar only.)
  for (const f of [file, `${file}-wal`, `${file}-shm`]) chmodSync(f, 0o644);
  t.ok(statSync(`${file}-wal`).size > 0 && statSync(`${file}-shm`).size > 0, 'the sidecars hold data');
  const reopened = openLeaseStore(dir, { nodeId: 'node-1' });
  t.teardown(() => reopened.close());
  t.same([modeOf(file), modeOf(`${file}-wal`), modeOf(`${file}-shm`)], ['600', '600', '600']);
  t.same(reopened.load(), [LEASE], 'the leases are read as they were');
});

t.test('a garbage credit-leases.sqlite is refused with a StateFileError naming the file and what to do, and left byte-identical', async (t) => {
  const dir = readableStateDir(t);
  const file = path.join(dir, LEASE_DB_FILE);
  writeFileSync(file, Buffer.alloc(4096, 0x41), { mode: 0o600 });
  const before = sha256(file);
  try {
    openLeaseStore(dir, { nodeId: 'node-1' }).close();
    t.fail('expected a StateFileError');
  } catch (err) {
    t.ok(err instanceof StateFileError, `a StateFileError (${(err as Error).name})`);
    t.equal((err as StateFileError).file, file, 'naming the file');
    t.match((err as Error).message, /left untouched.*move it aside together with its -wal and -shm/i, 'and what to do');
  }
  t.equal(sha256(file), before, 'byte-identical');
});

t.test('serve refuses a garbage credit-leases.sqlite with one line naming it and exits 2', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(path.join(t.testdir({}), 'state'), gateway);
  const file = path.join(state.dir, LEASE_DB_FILE);
  writeFileSync(file, Buffer.alloc(4096, 0x41), { mode: 0o600 });
  const entry = tsEntry('edge-node/src/main.ts');
  const proc = await startProcess({ name: 'zenova-node serve', command: entry.command, args: [...entry.args, 'serve', '--state-dir', state.dir, '--listen', '127.0.0.1:0'], t });
  const exit = await proc.exited;
  t.equal(exit.code, 2, 'exit 2, as for every state problem');
  const output = proc.output();
  t.match(output, `zenova-node: ${file}: is not a readable credit lease book`, 'one line naming the file');
  t.notMatch(output, /unexpected failure/);
  t.notMatch(output, /node-edge listening/);
});
