// A node-edge killed -9 leaves records of answers already sent in spool.db-wal only, and its -shm
// counting them. A WAL of another generation in the WAL's place holds none of them unless it is a
// later generation, started again only once every frame was copied into spool.db (after a power
// loss the -shm may be older than the WAL). SQLite writes a new WAL header with the writing
// connection's checkpoint count (bytes 12–15) and, when that count is 0, random salts: a WAL its
// own connection started again (count above 0) has salt-1 one further on per restart, so one whose
// salt-1 is more than 65536 ahead of the -shm's is not a later generation and is named as the loss
// (the 2^31 window before it took half of such WALs for later generations, the loss then silent).
// A WAL whose count is 0 was started by a connection that did not restart it itself: with several
// replicas, one replica's TRUNCATE checkpoint and another replica's next write make every later
// generation so, random salts and all. That proves nothing either way (short of a -shm a few
// generations ahead of it: an older WAL) and raises no alarm (it did,
// nearly always, when every WAL was held to the 65536 window), so a WAL created anew in place of a
// killed node's goes unnoticed.
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import { tempStateDir } from './spool-helpers.js';
import { commitRecords, crashImage, expectLoss, expectNoAlarm, killedNode, newSpool, putImage, SIDECARS } from './wal-shortfall-fixtures.js';
import type { Image } from './wal-shortfall-fixtures.js';

/** WALs made before giving up on one whose random salt-1 falls where the test needs it (each try does so with a chance of about 1/2 or better). */
const MAX_TRIES = 64;
/** A -shm's salt-1 further behind than this is not a few restarts behind (wal-file-check.ts, MAX_GENERATIONS_AHEAD). */
const WINDOW = 0x10000;

const salt1 = (wal: Buffer): number => wal.readUInt32BE(16);
const checkpointSequence = (wal: Buffer): number => wal.readUInt32BE(12);

t.test("a WAL of a copy of the spool, started again by its own connection, in place of a killed node's WAL (salt-1 between 2^16 and 2^31 ahead of the -shm's) is named as lost answered records by status, doctor and serve", async (t) => {
  const node = await killedNode(t);
  // The -shm's salts are those of the WAL it was written with.
  const shmSalt1 = salt1(node.image['-wal']);
  // A copy of spool.db as the killed node left it, written to by SQLite on one connection: a first
  // WAL (random salts: the connection's checkpoint count is 0), a TRUNCATE checkpoint, and a WAL its
  // connection started again (count 1, salt-1 the random one + 1). New ones are made until salt-1
  // falls in the window the 2^31 rule took for a later generation.
  const copy = path.join(tempStateDir(t), 'spool.db');
  let foreign: Buffer | undefined;
  let ahead = 0;
  for (let i = 0; i < MAX_TRIES && foreign === undefined; i++) {
    for (const s of SIDECARS) rmSync(`${copy}${s}`, { force: true });
    writeFileSync(copy, node.db);
    const wal = crashImage(path.dirname(copy), 'n', 5, {
      before: (conn) => {
        commitRecords(conn, 'm', 1);
        const [result] = conn.pragma('wal_checkpoint(TRUNCATE)') as Array<{ busy: number }>;
        if (result?.busy !== 0) throw new Error('the TRUNCATE checkpoint did not complete');
      },
    })['-wal'];
    ahead = (salt1(wal) - shmSalt1) >>> 0;
    if (ahead > WINDOW && ahead < 0x80000000) foreign = wal;
  }
  if (foreign === undefined) throw new Error(`no WAL with salt-1 between 2^16 and 2^31 ahead of ${shmSalt1} in ${MAX_TRIES} tries`);
  t.equal(checkpointSequence(foreign), 1, 'its connection started the WAL again itself (checkpoint sequence 1: salt-1 counted on, not drawn)');
  t.comment(`salt-1 ${salt1(foreign)}, ${ahead} ahead of the -shm's ${shmSalt1}`);
  writeFileSync(`${node.file}-wal`, foreign, { mode: 0o600 });
  await expectLoss(
    t,
    node.dir,
    /lost committed transactions: its WAL \(.*spool\.db-wal\) is not the one its -shm was written with .*, and its -shm .* counts (\d+) committed WAL frames of which \1 /,
    undefined,
    node.committed,
  );
});

t.test("a WAL of 32 zero bytes (no WAL header: checkpoint sequence read as 0) in place of a killed node's WAL is named as lost answered records", async (t) => {
  const node = await killedNode(t);
  writeFileSync(`${node.file}-wal`, Buffer.alloc(32), { mode: 0o600 });
  await expectLoss(t, node.dir, /lost committed transactions: its WAL \(.*spool\.db-wal\)/, undefined, node.committed);
});

t.test("a -shm one WAL generation behind a WAL another connection started again (one replica's TRUNCATE checkpoint, another's write: random salts) raises no alarm in status, doctor and serve", async (t) => {
  let made: { dir: string; older: Image; newer: Image; db: Buffer } | undefined;
  let ahead = 0;
  // Made again (at most MAX_TRIES times) in the 2 in 65536 cases where the random salt-1 falls within
  // 65536 of the -shm's: ahead, which the 65536 rule alone took for a later generation too; behind,
  // which the check takes for an older WAL (a loss).
  for (let i = 0; i < MAX_TRIES && made === undefined; i++) {
    const dir = await newSpool(t);
    const file = path.join(dir, 'spool.db');
    const a = new Database(file);
    const b = new Database(file);
    try {
      a.pragma('wal_autocheckpoint = 0');
      b.pragma('wal_autocheckpoint = 0');
      // Generation 1, written by replica A: 10 records, none copied: the -shm the node leaves if it stops being written back now.
      commitRecords(a, 'a', 10);
      const older = { '-wal': readFileSync(`${file}-wal`), '-shm': readFileSync(`${file}-shm`) };
      // Replica A's measure(): every frame copied, the WAL emptied and its header started again in the -shm.
      const [result] = a.pragma('wal_checkpoint(TRUNCATE)') as Array<{ busy: number }>;
      if (result?.busy !== 0) throw new Error('the TRUNCATE checkpoint did not complete');
      // Generation 2, written by replica B, which never started the WAL again itself.
      commitRecords(b, 'b', 10);
      const newer = { '-wal': readFileSync(`${file}-wal`), '-shm': readFileSync(`${file}-shm`) };
      // spool.db as a kill now leaves it: generation 1 copied into it, generation 2 in the WAL only.
      const db = readFileSync(file);
      ahead = (salt1(newer['-wal']) - salt1(older['-wal'])) >>> 0;
      if (ahead > WINDOW && ahead < 2 ** 32 - WINDOW) made = { dir, older, newer, db };
    } finally {
      b.close();
      a.close();
    }
  }
  if (made === undefined) throw new Error(`no WAL with salt-1 more than 2^16 from the -shm's in ${MAX_TRIES} tries`);
  t.equal(checkpointSequence(made.newer['-wal']), 0, "replica B's connection wrote the WAL header with checkpoint sequence 0 (salts drawn at random)");
  t.comment(`salt-1 ${salt1(made.newer['-wal'])}, ${ahead} ahead of the -shm's ${salt1(made.older['-wal'])}`);
  putImage(made.dir, made.db, { '-wal': made.newer['-wal'], '-shm': made.older['-shm'] });
  await expectNoAlarm(t, made.dir, 20);
});

t.test('a -shm three WAL generations behind a WAL its own connection started again (TRUNCATE, then RESTART checkpoints) raises no alarm', async (t) => {
  const dir = await newSpool(t);
  const file = path.join(dir, 'spool.db');
  let older: Image | undefined;
  let db: Buffer | undefined;
  const newer = crashImage(dir, 'd', 10, {
    before: (conn) => {
      // Generation 1: 10 records, none copied: the -shm the node leaves if it stops being written back now.
      commitRecords(conn, 'a', 10);
      older = { '-wal': readFileSync(`${file}-wal`), '-shm': readFileSync(`${file}-shm`) };
      // Each full checkpoint copies every frame; the next commit starts the WAL again, salt-1 + 1.
      for (const [mode, prefix] of [['TRUNCATE', 'b'], ['RESTART', 'c'], ['RESTART', '']] as const) {
        const [result] = conn.pragma(`wal_checkpoint(${mode})`) as Array<{ busy: number }>;
        t.equal(result?.busy, 0, `the ${mode} checkpoint completed`);
        if (prefix !== '') commitRecords(conn, prefix, 10);
      }
    },
    // spool.db as a kill now leaves it: generations 1–3 copied into it, generation 4 in the WAL only.
    after: () => void (db = readFileSync(file)),
  });
  if (older === undefined || db === undefined) throw new Error('no older image');
  t.equal(salt1(newer['-wal']), (salt1(older['-wal']) + 3) >>> 0, 'the WAL was started again three times: salt-1 three further on');
  t.equal(checkpointSequence(newer['-wal']), 3, 'by the connection that writes it (checkpoint sequence 3)');
  putImage(dir, db, { '-wal': newer['-wal'], '-shm': older['-shm'] });
  await expectNoAlarm(t, dir, 40);
});
