// A node-edge killed -9 leaves committed transactions (records of answers already sent) only in
// spool.db-wal, and its -shm counting them. Deleting that WAL, or cutting it short, lost them without
// a word: SQLite's first connection rebuilt the -shm from what was left, status showed a smaller
// backlog, doctor said "readable" and serve started. Now status shows the spool UNREADABLE naming the
// loss, doctor fails naming it (neither opens the spool, so the -shm stays for the next look), and
// serve starts with the spool and logs the loss as a warning. No alarm for what a crash or a clean
// stop leaves: a killed node's files as they are, a clean close, frames all copied into spool.db, a
// -shm of an older WAL generation beside a WAL SQLite started again after a full checkpoint.
import { existsSync, readFileSync, rmSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { readSpoolFigures } from '../../../edge-node/src/spool/spool-figures.js';
import { record } from './spool-helpers.js';
import { crashImage, expectLoss, expectNoAlarm, killedNode, newSpool, putImage } from './wal-shortfall-fixtures.js';
import type { Image } from './wal-shortfall-fixtures.js';

t.test('a killed node-edge\'s spool as it left it raises no alarm', async (t) => {
  const node = await killedNode(t);
  await expectNoAlarm(t, node.dir, node.committed);
});

t.test('a spool closed cleanly (no -wal, no -shm) raises no alarm', async (t) => {
  const dir = await newSpool(t);
  crashImage(dir, 'r', 12);
  t.notOk(existsSync(path.join(dir, 'spool.db-wal')), 'no -wal after a clean close');
  await expectNoAlarm(t, dir, 12);
});

t.test('spool.db-wal deleted after a kill -9 is named as lost answered records by status, doctor and serve', async (t) => {
  const node = await killedNode(t);
  rmSync(`${node.file}-wal`);
  await expectLoss(t, node.dir, /lost committed transactions: its WAL \(.*spool\.db-wal\) is missing, but its -shm .* counts (\d+) committed WAL frames of which \1 /, 0, node.committed);
});

t.test('spool.db-wal cut short after a kill -9 is named as lost answered records by status, doctor and serve', async (t) => {
  const node = await killedNode(t);
  truncateSync(`${node.file}-wal`, Math.floor(statSync(`${node.file}-wal`).size / 2));
  await expectLoss(t, node.dir, /lost committed transactions: its WAL \(.*spool\.db-wal\) is cut short, holding \d+ whole frames, but its -shm .* counts \d+ committed WAL frames of which \d+ /, undefined, node.committed);
});

t.test('spool.db-wal put back before serve starts brings every record back, and no alarm stays', async (t) => {
  const node = await killedNode(t);
  const wal = readFileSync(`${node.file}-wal`);
  rmSync(`${node.file}-wal`);
  t.match(readSpoolFigures(node.dir)?.error, /is missing/, 'status names the loss while the WAL is away');
  writeFileSync(`${node.file}-wal`, wal, { mode: 0o600 });
  await expectNoAlarm(t, node.dir, node.committed);
});

t.test('a WAL whose frames were all copied into spool.db may go without an alarm: nothing is lost', async (t) => {
  const dir = await newSpool(t);
  const file = path.join(dir, 'spool.db');
  // A PASSIVE checkpoint copies every frame (nBackfill = mxFrame) and leaves the WAL as it is.
  const image = crashImage(dir, 'r', 20, { after: (db) => void db.pragma('wal_checkpoint(PASSIVE)') });
  const db = readFileSync(file); // the close copied the same frames: spool.db as that checkpoint left it
  putImage(dir, db, { '-shm': image['-shm'] });
  await expectNoAlarm(t, dir, 20);
});

t.test("a -shm of an older WAL generation beside a WAL SQLite started again after a full checkpoint raises no alarm; an older WAL in the -shm's place is a loss", async (t) => {
  const dir = await newSpool(t);
  const file = path.join(dir, 'spool.db');
  const db0 = readFileSync(file);
  let older: Image | undefined;
  // Generation 1: 10 records committed, none copied (the older -shm counts them); then a RESTART
  // checkpoint (every frame copied; the next commit starts the WAL again, salt-1 + 1) and 10 more.
  const newer = crashImage(dir, 'b', 10, {
    before: (db) => {
      const insert = db.prepare('insert into records (request_id, record_json) values (?, ?)');
      for (let i = 0; i < 10; i++) insert.run(`a${i}`, JSON.stringify(record(`a${i}`)));
      older = { '-wal': readFileSync(`${file}-wal`), '-shm': readFileSync(`${file}-shm`) };
      db.pragma('wal_checkpoint(RESTART)');
    },
  });
  if (older === undefined) throw new Error('no older image');
  t.equal(newer['-wal'].readUInt32BE(16), (older['-wal'].readUInt32BE(16) + 1) >>> 0, 'the WAL was started again: salt-1 one further on');
  putImage(dir, readFileSync(file), { '-wal': newer['-wal'], '-shm': older['-shm'] });
  await expectNoAlarm(t, dir, 20);
  // The older generation's WAL beside spool.db as it was before it, under the newer -shm: the newer frames are gone.
  putImage(dir, db0, { '-wal': older['-wal'], '-shm': newer['-shm'] });
  t.match(readSpoolFigures(dir)?.error, /lost committed transactions: its WAL \(.*\) is not the one its -shm was written with/, 'status names the loss');
});
