// A node-edge killed -9 leaves records of answers already sent in spool.db-wal only, and its -shm
// counting them. A WAL SQLite creates anew in its place (the WAL deleted and a copy of the spool
// written to, whose new WAL is then put beside spool.db) has salts SQLite drew at random, and the
// check took every WAL whose salt-1 was up to 2^31 ahead of the -shm's for a later generation of
// the same WAL: about half of them, the loss then silent (status a smaller backlog, doctor
// "readable", no warning from serve). SQLite moves salt-1 on by one per restart of the WAL, so a
// later generation is only a few steps ahead; a WAL further on is now named as the loss, the same
// way as a deleted or cut-short one. A -shm a few generations behind a WAL SQLite itself started
// again (TRUNCATE and RESTART checkpoints) still raises no alarm.
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { tempStateDir } from './spool-helpers.js';
import { commitRecords, crashImage, expectLoss, expectNoAlarm, killedNode, newSpool, putImage, SIDECARS } from './wal-shortfall-fixtures.js';
import type { Image } from './wal-shortfall-fixtures.js';

/** WALs created before giving up on one whose random salt-1 falls where the test needs it (each try does so with a chance of about 1/2). */
const MAX_TRIES = 64;

t.test("a WAL created anew in place of a killed node's WAL, its random salt-1 between 2^16 and 2^31 ahead of the -shm's, is named as lost answered records by status, doctor and serve", async (t) => {
  const node = await killedNode(t);
  // The -shm's salts are those of the WAL it was written with.
  const salt1 = node.image['-wal'].readUInt32BE(16);
  // A copy of spool.db as the killed node left it, written to by SQLite: a real WAL with valid
  // checksums, created anew. Its salts are random, so new ones are made until salt-1 falls in the
  // window the check used to take for a later generation.
  const copy = path.join(tempStateDir(t), 'spool.db');
  let anew: Buffer | undefined;
  let ahead = 0;
  for (let i = 0; i < MAX_TRIES && anew === undefined; i++) {
    for (const s of SIDECARS) rmSync(`${copy}${s}`, { force: true });
    writeFileSync(copy, node.db);
    const wal = crashImage(path.dirname(copy), 'n', 5)['-wal'];
    ahead = (wal.readUInt32BE(16) - salt1) >>> 0;
    if (ahead > 0x10000 && ahead < 0x80000000) anew = wal;
  }
  if (anew === undefined) throw new Error(`no WAL with salt-1 between 2^16 and 2^31 ahead of ${salt1} in ${MAX_TRIES} tries`);
  t.equal(anew.readUInt32BE(12), 0, 'SQLite created the WAL anew (checkpoint sequence 0: salts drawn at random)');
  t.comment(`salt-1 ${anew.readUInt32BE(16)}, ${ahead} ahead of the -shm's ${salt1}`);
  writeFileSync(`${node.file}-wal`, anew, { mode: 0o600 });
  await expectLoss(
    t,
    node.dir,
    /lost committed transactions: its WAL \(.*spool\.db-wal\) is not the one its -shm was written with .*, and its -shm .* counts (\d+) committed WAL frames of which \1 /,
    5,
    node.committed,
  );
});

t.test('a -shm three WAL generations behind a WAL SQLite itself started again (TRUNCATE, then RESTART checkpoints) raises no alarm', async (t) => {
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
  t.equal(newer['-wal'].readUInt32BE(16), (older['-wal'].readUInt32BE(16) + 3) >>> 0, 'the WAL was started again three times: salt-1 three further on');
  putImage(dir, db, { '-wal': newer['-wal'], '-shm': older['-shm'] });
  await expectNoAlarm(t, dir, 40);
});
