/**
 * Whether the control plane deleted this node, as `zenova-node status` shows it: from whichever of
 * the node's two sources knows it first.
 *
 * - The credit lease book (credit-leases.sqlite, `credit_withdrawals`): the serving node records
 *   the deletion there (LeaseBook.withdraw) before it refuses its first caller with
 *   ZN_ERR_NODE_DELETED, every replica refuses by it (LeaseBook.refreshDeletion), and a restarted
 *   node refuses by it from its first request, before any control session — also while the
 *   control plane is out of reach, when control-status.json says only GATEWAY_UNREACHABLE.
 * - control-status.json: the control link's last error NODE_DELETED, not resolved by a session
 *   established since (a book that could not be read, or one written by an older release).
 *
 * The book is read without writing anything in the state dir: through a private copy of the book
 * and its -wal, as `doctor` does, also while node-edge runs (a connection to the book itself, even a
 * read-only one, creates its -wal/-shm when a clean stop removed them between a check and the open,
 * and would recover its WAL). A book that cannot be read, or a copy torn by a checkpoint running
 * meanwhile, leaves this source silent (control-status.json remains): `doctor` names what is wrong.
 */
import { copyFileSync, lstatSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { withdrawnForGood } from '../billing/credit-withdrawal.js';
import { LEASE_DB_FILE } from '../billing/lease-store.js';
import type { ControlStatusRecord } from '../control/control-status.js';
import { refusalAdvice } from '../control/refusal-advice.js';

export const NODE_DELETED_CODE = 'NODE_DELETED';

export interface NodeDeletion {
  /** NODE_DELETED. */
  code: string;
  /** When the node learned it (ISO time: the lease book's record, else the control link's refusal). */
  at: string;
  /** The control plane's refusal message. */
  message: string;
  /** What the operator does next (refusal-advice.ts: create the node again and re-enroll this host with it, or uninstall). */
  advice: string;
  /** Which source said so: the lease book the pipeline refuses by, or the control link's refusal. */
  source: 'lease-book' | 'control-link';
}

/** What a deleted node refuses its callers with. */
export const DELETED_CALLER_CODE = 'ZN_ERR_NODE_DELETED';

function isFile(file: string): boolean {
  try {
    return lstatSync(file).isFile();
  } catch {
    return false;
  }
}

/** The book's NODE_DELETED withdrawal of `nodeId` read through `db`; undefined without one (or without the table: an older book). */
function withdrawalIn(db: Database.Database, nodeId: string): { code: string; message: string; at: number } | undefined {
  const table = db.prepare("select 1 from sqlite_master where type = 'table' and name = 'credit_withdrawals'").get();
  if (table === undefined) return undefined;
  const row = db.prepare<[string], { code: string; message: string; withdrawn_at: number }>('select code, message, withdrawn_at from credit_withdrawals where node_id = ?').get(nodeId);
  return row === undefined ? undefined : { code: row.code, message: row.message, at: row.withdrawn_at };
}

/** The lease book's withdrawal of `nodeId`, read without writing in the state dir; undefined when none or unreadable. */
export function readBookWithdrawal(stateDir: string, nodeId: string): { code: string; message: string; at: number } | undefined {
  const file = path.join(stateDir, LEASE_DB_FILE);
  if (!isFile(file)) return undefined;
  try {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'zenova-status-lease-book-'));
    try {
      const copy = path.join(dir, LEASE_DB_FILE);
      copyFileSync(file, copy);
      if (isFile(`${file}-wal`)) copyFileSync(`${file}-wal`, `${copy}-wal`);
      // Read-write on the copy: SQLite builds the copy's -shm beside it, in the private dir.
      const db = new Database(copy, { fileMustExist: true });
      try {
        return withdrawalIn(db, nodeId);
      } finally {
        db.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  } catch {
    return undefined;
  }
}

/**
 * The node's deletion from the lease book of `stateDir` (for `nodeId`) or from the control link's
 * unresolved last error; null when neither says it was deleted.
 */
export function nodeDeletionOf(stateDir: string, nodeId: string, control: ControlStatusRecord | undefined): NodeDeletion | null {
  const advice = refusalAdvice(NODE_DELETED_CODE) ?? '';
  const book = readBookWithdrawal(stateDir, nodeId);
  if (book !== undefined && withdrawnForGood(book)) {
    return { code: book.code, at: new Date(book.at).toISOString(), message: book.message, advice, source: 'lease-book' };
  }
  const lastError = control?.lastError;
  if (lastError !== null && lastError !== undefined && lastError.code === NODE_DELETED_CODE && lastError.resolvedAt === undefined) {
    return { code: lastError.code, at: lastError.at, message: lastError.message, advice, source: 'control-link' };
  }
  return null;
}
