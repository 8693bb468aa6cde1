// An owner slot file holds no data, only its lock matters (spool-owner-lock.ts): a damaged one
// (garbage, a cut header) is nobody's. It is emptied in place and taken, and it is answered "not
// held", so the open rows naming it are recorded as interrupted instead of the start failing.
import { statSync, truncateSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import { createSpoolFile } from '../../../edge-node/src/spool/spool-file.js';
import type { SpoolMeta } from '../../../edge-node/src/spool/spool-file.js';
import { isOwnerSlotHeld, spoolOwnerLockFile } from '../../../edge-node/src/spool/spool-owner-lock.js';
import { SpoolStore } from '../../../edge-node/src/spool/spool-store.js';
import { NODE_ID, openRow, quietLogger, tempStateDir } from './spool-helpers.js';

const limits = () => ({ quotaBytes: 1024 ** 3, fullPolicy: 'reject' as const });

const DAMAGE: Array<[string, (file: string) => void]> = [
  ['garbage', (file) => writeFileSync(file, Buffer.alloc(4096, 0x41))],
  ['a header cut to 50 bytes', (file) => truncateSync(file, 50)],
];

function start(file: string, meta: SpoolMeta): SpoolStore {
  return new SpoolStore({ file, meta, logger: quietLogger(), limits });
}

function spoolState(file: string): { open: string[]; records: string[] } {
  const db = new Database(file, { readonly: true });
  try {
    const open = db.prepare('select request_id from open_requests order by request_id').pluck().all() as string[];
    const records = (db.prepare('select record_json from records order by sequence').pluck().all() as string[]).map((j) => {
      const r = JSON.parse(j) as { requestId: string; status: string };
      return `${r.requestId}:${r.status}`;
    });
    return { open, records };
  } finally {
    db.close();
  }
}

for (const [damage, apply] of DAMAGE) {
  t.test(`a store starts on an owner slot file damaged by ${damage}: the file is emptied in place and taken, and the rows naming it become interrupted records`, async (t) => {
    const file = path.join(tempStateDir(t), 'spool.db');
    const meta = createSpoolFile(file, NODE_ID);
    const before = start(file, meta);
    await before.open(openRow('req-left-open'));
    await before.close();
    const slotFile = spoolOwnerLockFile(file, 0);
    apply(slotFile);
    const inode = statSync(slotFile).ino;

    const restarted = start(file, meta);
    t.teardown(() => restarted.close());
    t.equal(statSync(slotFile).ino, inode, 'the same file (never unlinked or replaced)');
    t.equal(isOwnerSlotHeld(file, 0), true, 'its slot is held by the new store');
    t.same(spoolState(file), { open: [], records: ['req-left-open:interrupted'] });
  });
}

// Garbage only: a file shorter than a page (the cut header) reads to SQLite as an empty database
// when nothing is written, so the check answered "not held" for it already.
for (const [damage, apply] of DAMAGE.slice(0, 1)) {
  t.test(`an owner slot file damaged by ${damage} is answered not held, and the rows naming it are recovered by a store on another slot`, async (t) => {
    const file = path.join(tempStateDir(t), 'spool.db');
    const meta = createSpoolFile(file, NODE_ID);
    // Slots 0 and 1 taken, so the store with the open row gets slot 2.
    const first = start(file, meta);
    const second = start(file, meta);
    const third = start(file, meta);
    await third.open(openRow('req-on-slot-2'));
    await third.close();
    await first.close();
    await second.close();
    apply(spoolOwnerLockFile(file, 2));
    t.equal(isOwnerSlotHeld(file, 2), false, 'a damaged slot is nobody\'s');

    const restarted = start(file, meta);
    t.teardown(() => restarted.close());
    t.same(spoolState(file), { open: [], records: ['req-on-slot-2:interrupted'] }, 'recovered by the store on slot 0');
  });
}
