/**
 * The spool's write path: one group commit's operations applied in one SQLite transaction on the
 * event loop's connection. SpoolStore decides what to write (which open rows to skip or delete)
 * and hands over a list of operations; they are applied all or none. Every operation is
 * idempotent (insert-or-replace of an open row, delete by key, insert-or-ignore of a record by
 * request id, delete of a sequence range), so a batch retried after a failed commit writes
 * nothing twice.
 *
 * Why not a writer thread: we measured one (docs/performance.md). On this class of machine the two
 * thread wake-ups per commit cost more CPU than the commit they moved, and the added round trip
 * showed in every request's latency. The checkpoints, which block for an fsync, do run in a
 * thread (state/wal-checkpointer.ts).
 */
import type Database from 'better-sqlite3';

/** One write: [0, requestId, rowJson] open row, [1, requestId] delete open row, [2, requestId, recordJson] record, [3, first, last] delete records. */
export type SpoolOp = [0, string, string] | [1, string] | [2, string, string] | [3, number, number];

export interface SpoolWriteResult {
  /** Records inserted (a duplicate request id is not). */
  inserted: number;
  /** Records deleted by ranges. */
  deleted: number;
}

export class SpoolWriter {
  private readonly apply: (ops: SpoolOp[]) => SpoolWriteResult;

  constructor(db: Database.Database) {
    const insertOpen = db.prepare('insert or replace into open_requests (request_id, row_json) values (?, ?)');
    const deleteOpen = db.prepare('delete from open_requests where request_id = ?');
    // A second final record for one request id is dropped, as the control plane would drop it:
    // request id (minted by the node, never the caller's) is the idempotency key end to end.
    const insertRecord = db.prepare('insert or ignore into records (request_id, record_json) values (?, ?)');
    const deleteRange = db.prepare('delete from records where sequence between ? and ?');
    this.apply = db.transaction((ops: SpoolOp[]): SpoolWriteResult => {
      let inserted = 0;
      let deleted = 0;
      for (const op of ops) {
        switch (op[0]) {
          case 0:
            insertOpen.run(op[1], op[2]);
            break;
          case 1:
            deleteOpen.run(op[1]);
            break;
          case 2:
            inserted += insertRecord.run(op[1], op[2]).changes;
            break;
          case 3:
            deleted += deleteRange.run(op[1], op[2]).changes;
            break;
        }
      }
      return { inserted, deleted };
    });
  }

  /** Applies `ops` in one transaction; throws SQLite's error (with its code) when it rolled back. */
  write(ops: SpoolOp[]): SpoolWriteResult {
    return this.apply(ops);
  }
}
