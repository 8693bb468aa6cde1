// The spool's quota check between measurements: while the store says "not full", the file's live
// bytes (read on another connection, as `status` reads them) are below the quota. The estimate
// counts UTF-8 bytes, the WAL's whole pages and the checkpoint's second copy, and measurements run
// on the monotonic clock, so neither CJK text, small records nor a wall clock stepped back lets the
// spool grow past its quota unnoticed.
import path from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import type { Test } from 'tap';
import type { RequestRecord } from '../../../proto/src/index.js';
import { createSpoolFile, spoolLiveBytes } from '../../../edge-node/src/spool/spool-file.js';
import { SpoolStore } from '../../../edge-node/src/spool/spool-store.js';
import type { SpoolLimits } from '../../../edge-node/src/spool/spool-store.js';
import { runEach } from '../../fixtures/teardown-steps.js';
import { NODE_ID, quietLogger, record, tempStateDir } from './spool-helpers.js';

function liveBytesOf(file: string): number {
  const db = new Database(file, { readonly: true, fileMustExist: true });
  try {
    return spoolLiveBytes(db, file);
  } finally {
    db.close();
  }
}

/**
 * Finalises records until the store says it is full (at most `max`), checking after each commit
 * that a store saying "not full" is right. Returns how many were written.
 */
async function fillChecking(t: Test, headroom: number, next: (n: number) => RequestRecord, max: number): Promise<number> {
  const file = path.join(tempStateDir(t), 'spool.db');
  const limits: SpoolLimits = { quotaBytes: 1024 ** 3, fullPolicy: 'reject' };
  const store = new SpoolStore({ file, meta: createSpoolFile(file, NODE_ID), logger: quietLogger(), limits: () => limits });
  t.teardown(() => store.close());
  limits.quotaBytes = store.bytes() + headroom;
  let n = 0;
  let wrongs = 0;
  let worst = 0;
  while (!store.isFull()) {
    if (n === max) throw new Error(`the spool never filled in ${max} records`);
    await store.finalise(next(n));
    n += 1;
    const live = liveBytesOf(file);
    if (!store.isFull() && live >= limits.quotaBytes) {
      wrongs += 1;
      worst = Math.max(worst, live / limits.quotaBytes);
    }
  }
  t.equal(wrongs, 0, `the store never said "not full" with the file at or past its quota (worst ${worst.toFixed(2)}× the quota, ${n} records)`);
  t.ok(liveBytesOf(file) < limits.quotaBytes * 2, 'the file is not far past the quota when the store says full');
  return n;
}

t.test('records of CJK text are counted in bytes, not characters', async (t) => {
  // 10 000 CJK characters: 30 000 bytes in the file, 10 000 in .length.
  const cjk = '数据记录'.repeat(2500);
  const n = await fillChecking(t, 1024 * 1024, (i) => record(`cjk-${i}`, { bodies: { request: cjk, response: cjk, truncated: false } }), 200);
  t.ok(n > 1, `filled after ${n} records`);
});

t.test('small records are charged the whole pages each commit writes to the WAL', async (t) => {
  const n = await fillChecking(t, 2 * 1024 * 1024, (i) => record(`small-${i}`), 5000);
  t.ok(n > 1, `filled after ${n} records`);
});

t.test('a wall clock stepped back an hour does not stop the measurements', async (t) => {
  const file = path.join(tempStateDir(t), 'spool.db');
  const store = new SpoolStore({ file, meta: createSpoolFile(file, NODE_ID), logger: quietLogger(), limits: () => ({ quotaBytes: 1024 ** 3, fullPolicy: 'reject' }) });
  t.teardown(() => store.close());
  const realNow = Date.now;
  // After the store's first measurement (taken when it opened).
  Date.now = () => realNow() - 3_600_000;
  t.teardown(() => {
    Date.now = realNow;
  });
  // Each commit adds its upper bound to the figure; only a measurement brings it down to the
  // file's real size. Far below the quota, nothing but the measurement interval measures.
  const deadline = performance.now() + 5000;
  let before = store.bytes();
  let measured = false;
  let n = 0;
  while (!measured && performance.now() < deadline) {
    await store.finalise(record(`stepped-${n}`));
    n += 1;
    measured = store.bytes() < before;
    before = store.bytes();
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  t.ok(measured, `the figure was measured again within 5 s of commits (${n} records)`);
});

t.test('two replicas filling one spool never say it is not full once the file is at its quota, each counting the other’s commits', async (t) => {
  const file = path.join(tempStateDir(t), 'spool.db');
  const limits: SpoolLimits = { quotaBytes: 1024 ** 3, fullPolicy: 'reject' };
  const meta = createSpoolFile(file, NODE_ID);
  const a = new SpoolStore({ file, meta, logger: quietLogger(), limits: () => limits });
  const b = new SpoolStore({ file, meta, logger: quietLogger(), limits: () => limits });
  t.teardown(() => runEach('the two spool stores', () => a.close(), () => b.close()));
  limits.quotaBytes = a.bytes() + 4 * 1024 * 1024;
  const body = 'z'.repeat(4000);
  let wrong = 0;
  let n = 0;
  // Each record goes to a replica that still accepts, alternating; both stop once both say full.
  for (; n < 20_000 && (!a.isFull() || !b.isFull()); n++) {
    const store = n % 2 === 0 ? (a.isFull() ? b : a) : b.isFull() ? a : b;
    await store.finalise(record(`r-${n}`, { bodies: { request: body, response: body, truncated: false } }));
    const live = liveBytesOf(file);
    for (const replica of [a, b]) if (!replica.isFull() && live >= limits.quotaBytes) wrong++;
  }
  t.ok(n > 100, `${n} records written before both were full`);
  t.equal(wrong, 0, 'no replica said not full with the file at or past its quota');
});
