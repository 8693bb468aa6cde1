// The spool's own WAL cut short after a checkpoint had copied all of it into spool.db: through what is
// left, older versions of pages lie over spool.db's newer ones and the record sequence goes back.
// serve and doctor refuse that view (wal-belongs-check.ts), but `status` counted a plausible backlog
// from it, and the refusal called the WAL flatly "a WAL of another spool". Now status runs the same
// check and shows the spool UNREADABLE with serve's reason, which says the WAL is cut short, older
// than spool.db, or another spool's.
import { readFileSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { checkSpool } from '../../../edge-node/src/doctor/spool-check.js';
import { openNodeSpool } from '../../../edge-node/src/spool/open-node-spool.js';
import { readSpoolFigures } from '../../../edge-node/src/spool/spool-figures.js';
import { openStateStore } from '../../../edge-node/src/state/state-store.js';
import { formatNodeStatus, readNodeStatus } from '../../../edge-node/src/status/node-status.js';
import { NODE_ID, quietLogger, record, tempStateDir } from './spool-helpers.js';

const open = (dir: string) => openNodeSpool({ stateDir: dir, nodeId: NODE_ID, holder: ConfigHolder.notReady('test'), logger: quietLogger(), synchronous: 'normal' });

const CUT = /has a WAL \(.*spool\.db-wal\) that does not belong to it as it stands: through it the record sequence goes back from 40 to \d+, which this spool's never does; the WAL is cut short \(truncated\) or older than spool\.db \(an earlier copy put back\), or it is another spool's/;

t.test("a spool whose own WAL was cut short after a full checkpoint is UNREADABLE in status, with serve's reason naming a cut-short or older WAL", async (t) => {
  const dir = tempStateDir(t);
  await (await open(dir)).close();
  const file = path.join(dir, 'spool.db');
  // A node killed -9 right after a checkpoint copied every frame into spool.db (the WAL kept as it is).
  const db = new Database(file);
  let wal: Buffer;
  let shm: Buffer;
  try {
    db.pragma('wal_autocheckpoint = 0');
    const insert = db.prepare('insert into records (request_id, record_json) values (?, ?)');
    for (let i = 0; i < 40; i++) insert.run(`r${i}`, JSON.stringify(record(`r${i}`)));
    db.pragma('wal_checkpoint(PASSIVE)');
    wal = readFileSync(`${file}-wal`);
    shm = readFileSync(`${file}-shm`);
  } finally {
    db.close();
  }
  writeFileSync(`${file}-wal`, wal, { mode: 0o600 });
  writeFileSync(`${file}-shm`, shm, { mode: 0o600 });
  truncateSync(`${file}-wal`, Math.floor(statSync(`${file}-wal`).size / 2));

  const figures = readSpoolFigures(dir);
  t.match(figures?.error, CUT, 'status runs the same check as serve and gives its reason');
  t.equal(figures?.backlog, 0, 'no backlog counted from the view serve refuses');
  const store = await openStateStore(dir, { create: false });
  const report = { ...(await readNodeStatus(store)), enrolled: true, node: { name: 'edge-1', id: NODE_ID, enrolledAt: '2026-01-01T00:00:00Z' } };
  const text = formatNodeStatus(report);
  t.match(text, /spool: {9}UNREADABLE: .*goes back from 40 to .*cut short \(truncated\).*; run `zenova-node doctor`/, 'zenova-node status shows the spool UNREADABLE with the reason');
  t.notMatch(text, /backlog \d+ record/, 'and no backlog');
  const check = await checkSpool(store, NODE_ID);
  t.equal(check.ok, false, 'doctor fails the spool');
  t.match(check.advice, CUT, "doctor gives serve's reason");
  t.notMatch(check.advice, /a WAL of another spool, copied or left beside it\)/, 'not flatly called another spool\'s WAL');
  await t.rejects(open(dir), CUT, 'serve refuses it');
});

t.test('status still counts the backlog of a spool whose WAL a killed node left whole', async (t) => {
  const dir = tempStateDir(t);
  await (await open(dir)).close();
  const file = path.join(dir, 'spool.db');
  const db = new Database(file);
  let wal: Buffer;
  let shm: Buffer;
  try {
    db.pragma('wal_autocheckpoint = 0');
    const insert = db.prepare('insert into records (request_id, record_json) values (?, ?)');
    for (let i = 0; i < 40; i++) insert.run(`r${i}`, JSON.stringify(record(`r${i}`)));
    db.pragma('wal_checkpoint(PASSIVE)');
    for (let i = 40; i < 45; i++) insert.run(`r${i}`, JSON.stringify(record(`r${i}`)));
    wal = readFileSync(`${file}-wal`);
    shm = readFileSync(`${file}-shm`);
  } finally {
    db.close();
  }
  writeFileSync(`${file}-wal`, wal, { mode: 0o600 });
  writeFileSync(`${file}-shm`, shm, { mode: 0o600 });
  const figures = readSpoolFigures(dir);
  t.equal(figures?.error, null, 'no refusal');
  t.equal(figures?.backlog, 45, 'every record counted');
});
