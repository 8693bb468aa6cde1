/**
 * Whether the control plane deleted this node, or cut it off by revoking its credential
 * (CREDENTIAL_REVOKED: the node re-enrolled on another host), as `zenova-node status` shows it:
 * from whichever of the node's two sources knows it first.
 *
 * - The credit lease book (credit-leases.sqlite, `credit_withdrawals`): the serving node records
 *   the deletion there (LeaseBook.withdraw) before it refuses its first caller with
 *   ZN_ERR_NODE_DELETED, every replica refuses by it (LeaseBook.refreshDeletion), and a restarted
 *   node refuses by it from its first request, before any control session — also while the
 *   control plane is out of reach, when control-status.json says only GATEWAY_UNREACHABLE.
 * - control-status.json: the control link's last error NODE_DELETED, not resolved by a session
 *   established since (a book that could not be read, or one written by an older release).
 *
 * A revoked credential (CREDENTIAL_CUT_OFF_CODES) withdraws the node's credit the same way, in the
 * same row of the book (LeaseBook.withdraw, before the refusal reaches control-status.json): priced
 * requests are refused with ZN_ERR_CREDIT_WITHDRAWN, by every replica and after a restart, until a
 * control session is established again (which deletes the row). The link's unresolved
 * CREDENTIAL_REVOKED counts only when the book cannot say (unreadable, absent, or without the
 * table): with a readable book and no row, the node is not cut off — the refusal was of the current
 * credential with the previous one still to try, or credential.json already holds a newer one.
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
import { CREDENTIAL_CUT_OFF_CODES, refusalAdvice } from '../control/refusal-advice.js';

export const NODE_DELETED_CODE = 'NODE_DELETED';

export interface NodeDeletion {
  /** NODE_DELETED (CREDENTIAL_REVOKED in a CredentialRevocation). */
  code: string;
  /** When the node learned it (ISO time: the lease book's record, else the control link's refusal). */
  at: string;
  /** The control plane's refusal message. */
  message: string;
  /** What the operator does next (refusal-advice.ts: for a deletion, create the node again and re-enroll this host with it, or uninstall). */
  advice: string;
  /** Which source said so: the lease book the pipeline refuses by, or the control link's refusal. */
  source: 'lease-book' | 'control-link';
}

/** What a deleted node refuses its callers with. */
export const DELETED_CALLER_CODE = 'ZN_ERR_NODE_DELETED';

/**
 * The control plane revoked the node's credential (CREDENTIAL_REVOKED, CREDENTIAL_CUT_OFF_CODES: the
 * node was re-enrolled on another host): its credit is withdrawn until a control session is
 * established again.
 */
export interface CredentialRevocation extends NodeDeletion {
  /**
   * When credential.json was written, if after the revocation (ISO time): a re-enrollment on this
   * host saved a new credential, and the withdrawal is lifted at node-edge's first session with it.
   */
  newerCredentialSavedAt?: string;
}

/** What a node whose credential was revoked refuses its priced callers with (requests that cost nothing are still served). */
export const WITHDRAWN_CALLER_CODE = 'ZN_ERR_CREDIT_WITHDRAWN';

/** How the control plane cut this node off, as `status` shows it: deleted, or its credential revoked (never both: a deletion says more). */
export interface NodeCutOff {
  deleted: NodeDeletion | null;
  credentialRevoked: CredentialRevocation | null;
}

function isFile(file: string): boolean {
  try {
    return lstatSync(file).isFile();
  } catch {
    return false;
  }
}

type BookWithdrawal = { code: string; message: string; at: number };

/** The book's withdrawal of `nodeId` read through `db`: null without one; undefined without the table (an older book, which cannot say). */
function withdrawalIn(db: Database.Database, nodeId: string): BookWithdrawal | null | undefined {
  const table = db.prepare("select 1 from sqlite_master where type = 'table' and name = 'credit_withdrawals'").get();
  if (table === undefined) return undefined;
  const row = db.prepare<[string], { code: string; message: string; withdrawn_at: number }>('select code, message, withdrawn_at from credit_withdrawals where node_id = ?').get(nodeId);
  return row === undefined ? null : { code: row.code, message: row.message, at: row.withdrawn_at };
}

/**
 * The lease book's withdrawal of `nodeId`, read without writing in the state dir: null when the book
 * says there is none; undefined when it cannot say (no book, unreadable, or without the table).
 */
function readBook(stateDir: string, nodeId: string): BookWithdrawal | null | undefined {
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
 * How the control plane cut the node off, from the lease book of `stateDir` (for `nodeId`, read
 * once) or from the control link's unresolved last error: deleted (NODE_DELETED), else its
 * credential revoked (CREDENTIAL_CUT_OFF_CODES); nulls when neither source says so.
 */
export function nodeCutOffOf(stateDir: string, nodeId: string, control: ControlStatusRecord | undefined): NodeCutOff {
  const book = readBook(stateDir, nodeId);
  const lastError = control?.lastError;
  const link = lastError !== null && lastError !== undefined && lastError.resolvedAt === undefined ? lastError : undefined;
  const fromBook = (w: BookWithdrawal): Omit<NodeDeletion, 'advice'> => ({ code: w.code, at: new Date(w.at).toISOString(), message: w.message, source: 'lease-book' });
  const fromLink = (e: NonNullable<typeof link>): Omit<NodeDeletion, 'advice'> => ({ code: e.code, at: e.at, message: e.message, source: 'control-link' });

  const deletedBy = book !== undefined && book !== null && withdrawnForGood(book) ? fromBook(book) : link?.code === NODE_DELETED_CODE ? fromLink(link) : undefined;
  if (deletedBy !== undefined) return { deleted: { ...deletedBy, advice: refusalAdvice(NODE_DELETED_CODE) ?? '' }, credentialRevoked: null };

  const revokedBy =
    book !== undefined && book !== null && CREDENTIAL_CUT_OFF_CODES.has(book.code)
      ? fromBook(book)
      : book === undefined && link !== undefined && CREDENTIAL_CUT_OFF_CODES.has(link.code)
        ? fromLink(link)
        : undefined;
  if (revokedBy !== undefined) return { deleted: null, credentialRevoked: { ...revokedBy, advice: refusalAdvice(revokedBy.code) ?? '' } };
  return { deleted: null, credentialRevoked: null };
}
