// Stands in for another replica of the node in spool-wal-concurrent.test.ts. argv: file, role.
// - `write`: writes `file` unthrottled as a replica does (group commits of 10 rows of 1-2 KB, WAL
//   mode, no autocheckpoint) with a PASSIVE checkpoint from a second connection every 20 commits,
//   as the checkpoint worker runs, so the next commit starts the WAL again over its older frames.
//   It takes no owner slot: what a replica does in the moment between opening and taking one.
// - `hold`: takes an owner slot of `file` (a replica serving it) and idles.
// Prints `ready` once it is, and runs until killed (or `LIMIT_MS`, so a lost one cannot run on).
import { writeSync } from 'node:fs';
import Database from 'better-sqlite3';
import { SpoolOwnerLock } from '../../../edge-node/src/spool/spool-owner-lock.js';

const LIMIT_MS = 120_000;
const [file, role] = [process.argv[2] ?? '', process.argv[3]];
const end = Date.now() + LIMIT_MS;

if (role === 'hold') {
  SpoolOwnerLock.acquire(file);
  writeSync(1, 'ready\n');
  setTimeout(() => process.exit(0), LIMIT_MS);
} else {
  const db = new Database(file);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma('journal_size_limit = 8388608');
  db.pragma('busy_timeout = 5000');
  db.pragma('wal_autocheckpoint = 0');
  db.exec('create table if not exists churn (sequence integer primary key, body text)');
  const checkpointer = new Database(file);
  checkpointer.pragma('busy_timeout = 5000');
  const insert = db.prepare('insert into churn (body) values (?)');
  const prune = db.prepare('delete from churn where sequence <= ?');
  const commit = db.transaction((n: number) => {
    for (let i = 0; i < 10; i++) insert.run('x'.repeat(1000 + ((n * 7 + i) % 900)));
  });
  for (let n = 1; Date.now() < end; n++) {
    commit(n);
    if (n % 20 === 0) checkpointer.pragma('wal_checkpoint(PASSIVE)');
    if (n % 50 === 0) prune.run(n * 10 - 200);
    if (n === 40) writeSync(1, 'ready\n'); // the WAL has been started again at least once
  }
}
