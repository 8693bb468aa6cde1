// WAL checkpoints happen in a worker thread: a connection that never checkpoints itself
// (wal_autocheckpoint = 0) still sees its data copied into the main database file.
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import { createLogger } from '../../../edge-node/src/logger.js';
import { WalCheckpointer } from '../../../edge-node/src/state/wal-checkpointer.js';
import { waitFor } from '../../fixtures/wait-for.js';

function writer(t: { teardown(fn: () => unknown): void }): { file: string; db: Database.Database } {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'zn-wal-'));
  const file = path.join(dir, 'data.db');
  const db = new Database(file);
  db.pragma('journal_mode = WAL');
  db.pragma('wal_autocheckpoint = 0');
  db.exec('create table rows (id integer primary key, body text not null)');
  t.teardown(() => {
    if (db.open) db.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return { file, db };
}

function writeRows(db: Database.Database, n: number): void {
  const insert = db.prepare('insert into rows (body) values (?)');
  for (let i = 0; i < n; i++) insert.run('x'.repeat(1000));
}

t.test('without a checkpointer the rows stay in the WAL and the database file stays small', async (t) => {
  const { file, db } = writer(t);
  writeRows(db, 1000);
  await new Promise((resolve) => setTimeout(resolve, 300));
  t.ok(statSync(file).size < 100_000, `main file ${statSync(file).size} bytes`);
  t.ok(statSync(`${file}-wal`).size > 1_000_000, 'the rows are in the WAL');
});

t.test('the checkpointer copies the WAL into the database file off the writing thread', async (t) => {
  const { file, db } = writer(t);
  const checkpointer = new WalCheckpointer(file, createLogger({ level: 'silent' }), 20);
  t.teardown(() => checkpointer.stop());
  writeRows(db, 1000);
  await waitFor(() => statSync(file).size > 1_000_000, { what: 'the rows to be checkpointed into the database file', timeoutMs: 10_000 });
  t.equal(Number(db.prepare('select count(*) from rows').pluck().get()), 1000);
  await checkpointer.stop();
  await checkpointer.stop();
  t.pass('stop is safe to call twice');
});
