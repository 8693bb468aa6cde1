// Replicas of a node share one spool (ZENOVA_NODE_REPLICAS > 1). A replica that starts must not take
// another live replica's open rows for requests cut off by a crash: those requests are still being
// served, and their real records (same request id) would be dropped behind the interrupted ones.
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import path from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import { pidNamespace, processStartTicks } from '../../../edge-node/src/process-alive.js';
import { createSpoolFile } from '../../../edge-node/src/spool/spool-file.js';
import { SpoolStore } from '../../../edge-node/src/spool/spool-store.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { NODE_ID, openRow, quietLogger, record, tempStateDir } from './spool-helpers.js';

const limits = () => ({ quotaBytes: 1024 ** 3, fullPolicy: 'reject' as const });

/** A process that stays alive until killed: the "other replica". */
async function liveProcess(t: { teardown(fn: () => unknown): void }): Promise<ChildProcess> {
  const child = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
  t.teardown(() => child.kill('SIGKILL'));
  await waitFor(() => child.pid !== undefined && processStartTicks(child.pid) !== null, { what: 'the child to start' });
  return child;
}

/** Rewrites an open row as if `pid` (started at `ticks`) had written it. */
function ownRow(file: string, requestId: string, pid: number, ticks: string | null): void {
  const db = new Database(file);
  try {
    const row = JSON.parse(db.prepare('select row_json from open_requests where request_id = ?').pluck().get(requestId) as string) as Record<string, unknown>;
    row.owner = { pid, pidNs: pidNamespace(), startTicks: ticks };
    db.prepare('update open_requests set row_json = ? where request_id = ?').run(JSON.stringify(row), requestId);
  } finally {
    db.close();
  }
}

function state(file: string): { open: string[]; records: Array<{ id: string; status: string }> } {
  const db = new Database(file, { readonly: true });
  try {
    const open = db.prepare('select request_id from open_requests order by request_id').pluck().all() as string[];
    const records = (db.prepare('select record_json from records order by sequence').pluck().all() as string[]).map((j) => {
      const r = JSON.parse(j) as { requestId: string; status: string };
      return { id: r.requestId, status: r.status };
    });
    return { open, records };
  } finally {
    db.close();
  }
}

t.test("a starting replica leaves a live replica's open rows to it and records only the dead ones as interrupted", async (t) => {
  const file = path.join(tempStateDir(t), 'spool.db');
  const meta = createSpoolFile(file, NODE_ID);
  const first = new SpoolStore({ file, meta, logger: quietLogger(), limits });
  void first.open(openRow('req-live'));
  void first.open(openRow('req-dead'));
  void first.open(openRow('req-unmarked'));
  await first.finalise(record('req-other'));
  await first.close();

  const live = await liveProcess(t);
  ownRow(file, 'req-live', live.pid!, processStartTicks(live.pid!));
  const dead = spawn(process.execPath, ['-e', ''], { stdio: 'ignore' });
  await new Promise((resolve) => dead.once('exit', resolve));
  ownRow(file, 'req-dead', dead.pid!, '1');
  // A row written before rows named their process: taken for interrupted, as always.
  const db = new Database(file);
  db.prepare("update open_requests set row_json = json_remove(row_json, '$.owner') where request_id = 'req-unmarked'").run();
  db.close();

  const second = new SpoolStore({ file, meta, logger: quietLogger(), limits });
  t.same(state(file).open, ['req-live'], "the live replica's request stays open");
  t.same(state(file).records, [{ id: 'req-other', status: 'ok' }, { id: 'req-dead', status: 'interrupted' }, { id: 'req-unmarked', status: 'interrupted' }]);
  await second.close();

  live.kill('SIGKILL');
  await new Promise((resolve) => live.once('exit', resolve));
  const third = new SpoolStore({ file, meta, logger: quietLogger(), limits });
  t.teardown(() => third.close());
  t.same(state(file).open, [], 'once that replica is gone, its row is an interrupted request');
  t.ok(state(file).records.some((r) => r.id === 'req-live' && r.status === 'interrupted'));
});

t.test('an open row names the owner slot and the process that wrote it', async (t) => {
  const file = path.join(tempStateDir(t), 'spool.db');
  const store = new SpoolStore({ file, meta: createSpoolFile(file, NODE_ID), logger: quietLogger(), limits });
  t.teardown(() => store.close());
  void store.open(openRow('req-1'));
  await waitFor(() => store.pending().opens === 0, { what: 'the open row to commit' });
  const db = new Database(file, { readonly: true });
  const row = JSON.parse(db.prepare('select row_json from open_requests').pluck().get() as string) as { requestId: string; owner: unknown };
  db.close();
  t.equal(row.requestId, 'req-1');
  t.same(row.owner, { pid: process.pid, pidNs: pidNamespace(), startTicks: processStartTicks(process.pid), slot: 0 }, 'its owner slot, and its pid for people');
});
