/**
 * The node's credit leases on disk (`<stateDir>/credit-leases.sqlite`), so a restarted node —
 * online or not — remembers what it spent and what it held, and its replicas share one book. Each
 * change is written through synchronously (one small transaction in WAL mode, synchronous=NORMAL):
 * a kill -9 loses nothing, only a power loss can lose the last few writes (docs/billing.md,
 * "Persistence and crashes", "Replicas").
 */
import path from 'node:path';
import type Database from 'better-sqlite3';
import type { Logger } from '../logger.js';
import { SPOOL_FILE } from '../spool/spool-file.js';
import { isOwnerSlotHeldByAnother } from '../spool/spool-owner-lock.js';
import { inspectWalDamage, walIndexFrameCount } from '../spool/wal-file-check.js';
import type { WalDamage } from '../spool/wal-file-check.js';
import { openStateDatabase, prepareStateFiles, quickCheckLine } from '../state/state-database.js';
import type { StateFileRole } from '../state/state-database.js';
import { StateFileError } from '../state/state-store.js';
import { flooredSpent } from './credit-lease.js';
import type { FinishedReservation, LeaseSnapshot, ReservationChange, SpentFloor } from './credit-lease.js';
import type { CreditWithdrawal } from './credit-withdrawal.js';

export const LEASE_DB_FILE = 'credit-leases.sqlite';

const SCHEMA = `create table if not exists leases (
    lease_id   text primary key,
    account_id text not null,
    granted    integer not null,
    spent      integer not null,
    reserved   integer not null,
    expires_at integer not null,
    state      text not null check (state in ('open', 'returned'))
  );
  create table if not exists reservations (
    request_id text primary key,
    lease_id   text not null,
    amount     integer not null,
    owner_slot integer,
    forwarded  integer not null default 0,
    finished_cost integer,
    finished_at   integer
  );
  create table if not exists credit_withdrawals (
    node_id      text primary key,
    code         text not null,
    message      text not null,
    withdrawn_at integer not null
  )`;

/** SQLite's answers for a file that is not (or no longer) a sound database (doctor's lease-book check takes them too). */
export const DAMAGED_CODES = new Set(['SQLITE_NOTADB', 'SQLITE_CORRUPT']);

export const DAMAGED_ADVICE =
  'the file was left untouched because it records what this node spent from its credit leases. Restore a good copy, or ' +
  'move it aside together with its -wal and -shm files (keep a copy for support) and start again, accepting that the node ' +
  'no longer knows what it spent: a lease granted to it again counts as unspent (docs/billing.md, "Persistence and crashes")';

export const LEASE_BOOK_ROLE: StateFileRole = {
  kind: 'the credit lease book',
  ifDirectory: DAMAGED_ADVICE,
  // Never "remove it": a new book would not know what the node spent.
  ifSymlink:
    "if it leads to this node's own file (put back by hand), move that file here in place of the link (the book together with its -wal and -shm); " +
    'otherwise remove the link and restore the file itself (a new book would not know what this node spent from its leases)',
};

/**
 * Whether another node-edge serving from this state dir already works from a recovery of the WAL
 * that dropped what follows `damage`: the wal-index (-shm) counts no frame past it — a killed
 * writer's still counts every frame it committed, so replicas starting together after a crash are
 * all refused — and a live process other than this one holds a spool owner slot (every serving
 * process does). Refusing this replica would then restore nothing: that process went on from the
 * shorter book (an earlier release, which did not walk the WAL, or a tool that opened the file).
 */
function recoveredPastByLiveProcess(file: string, damage: WalDamage, ownSlot: number | undefined): boolean {
  const indexed = walIndexFrameCount(`${file}-shm`, damage.salts);
  if (indexed === undefined || indexed > damage.framesBeforeDamage) return false;
  return isOwnerSlotHeldByAnother(path.join(path.dirname(file), SPOOL_FILE), ownSlot);
}

/**
 * Walks the lease book's WAL before any connection opens it (wal-file-check.ts, as for the spool).
 * The book is written through in WAL mode, so after a kill -9 what it wrote since the last checkpoint
 * is in the WAL; SQLite's recovery keeps the frames up to the first damaged one and silently drops
 * the commits after it, quick_check passes the shorter book, and the first close checkpoints it and
 * deletes the WAL: the lease's spent figure falls back, and the node spends that credit again.
 * A live writer's WAL is not taken for damage (the walk counts only a WAL that stayed the same
 * while it was read, twice).
 */
function checkLeaseWal(file: string, ownSlot: number | undefined, logger: Pick<Logger, 'warn'> | undefined): void {
  const damage = inspectWalDamage(`${file}-wal`);
  if (damage === null) return;
  if (recoveredPastByLiveProcess(file, damage, ownSlot)) {
    logger?.warn(
      { file, problem: damage.problem },
      `${file} ${damage.problem}; another node-edge serving from this state dir already opened it and went on without those transactions, so this one starts too: what they recorded spent may be spent again. Stop every node-edge of this state dir to have the file checked at the next start`,
    );
    return;
  }
  throw new StateFileError(file, `${damage.problem}; ${DAMAGED_ADVICE}`);
}

/**
 * Opens the file owner-only (openStateDatabase: its -wal/-shm take its mode; they were created at
 * the umask's 0644) and checks it can be read. A damaged file or WAL, and one node-edge may not use
 * (another user's: left root's by a command run with sudo; a directory), are a StateFileError naming
 * it and what to do, which `serve` prints as one line (exit 2); SQLite's own error named no file.
 * Nothing is written before the checks pass: a refused book is left as it was.
 */
function openLeaseDatabase(file: string, opts: { ownSlot: number | undefined; logger: Pick<Logger, 'warn'> | undefined }): Database.Database {
  prepareStateFiles(file, LEASE_BOOK_ROLE);
  checkLeaseWal(file, opts.ownSlot, opts.logger);
  let db: Database.Database | undefined;
  try {
    db = openStateDatabase(file, { busyTimeoutMs: 5000, synchronous: 'NORMAL', schema: SCHEMA, role: LEASE_BOOK_ROLE });
    // The file is small: a damaged page is found here, not by the first lease read or write.
    const check = db.pragma('quick_check', { simple: false }) as Array<{ quick_check: string }>;
    const problems = check.map((r) => r.quick_check).filter((r) => r !== 'ok');
    if (problems.length > 0) throw new StateFileError(file, `is corrupt (quick_check: ${quickCheckLine(problems)}); ${DAMAGED_ADVICE}`);
    return db;
  } catch (err) {
    db?.close();
    if (err instanceof StateFileError) throw err;
    const code = (err as { code?: unknown }).code;
    if (typeof code !== 'string' || !code.startsWith('SQLITE_')) throw err;
    if (DAMAGED_CODES.has(code)) throw new StateFileError(file, `is not a readable credit lease book (${(err as Error).message}); ${DAMAGED_ADVICE}`, { cause: err });
    throw new StateFileError(file, `cannot be opened (${code}: ${(err as Error).message})`, { cause: err });
  }
}

/**
 * One request's reservation as kept beside its lease's figures (the lease row's `reserved` is their
 * sum), so a restart can tell what became of each (lease-book.ts, left-reservations.ts).
 */
export interface StoredReservation {
  requestId: string;
  leaseId: string;
  amount: number;
  /** The spool owner slot of the process that made it; null when not known. */
  owner: number | null;
  /** Set before its request went upstream (nothing is forwarded before): it may have been charged. */
  forwarded: boolean;
}

/** The leases' figures and their finished, not yet charged reservations, read together. */
export interface LeaseFiguresRead<T> {
  value: T;
  finished: FinishedReservation[];
}

/** What a write left on disk: the lease's figures there; refused when a reservation did not fit them. */
export interface StoredLeaseWrite {
  refused: boolean;
  stored: LeaseSnapshot;
}

/** Reservation rows a lease write carries, in its transaction. */
export interface ReservationRows {
  /** A request's reservation made (added) or ended (removed) by this change. */
  change?: ReservationChange | undefined;
  /** Rows an earlier run left, settled by this write (their amounts are in its figures now). */
  settled?: readonly string[] | undefined;
}

export interface LeaseStore {
  /** Every lease kept, open and returned. */
  load(): LeaseSnapshot[];
  /** The reservation rows of this node's leases: earlier runs' and those of replicas still serving. */
  reservations(): StoredReservation[];
  /**
   * Writes the change from `prev` to `next` (what this process knew, and what its change leads to)
   * onto the lease as stored, with `rows` in the same transaction, and returns the lease as stored
   * after it; undefined when the store keeps nothing (the change stands as `next`). A reservation
   * (`rows.change.add`) the stored figures cannot cover, of a lease returned meanwhile, or made
   * while the node's credit is withdrawn (setWithdrawal), is refused: nothing written.
   * `spentFloor` (a grant's known spend): in the same transaction, the open lease's spent as stored is
   * raised so that it, with the costs of its finished reservations not charged yet (every replica's
   * marks, and the floor's own), is at least the known spend; never lowered.
   */
  save(next: LeaseSnapshot, prev: LeaseSnapshot, rows?: ReservationRows, spentFloor?: SpentFloor): StoredLeaseWrite | undefined;
  /** The account's open lease as stored (another replica may hold a newer one than this process knows). */
  openLeaseOf(accountId: string): LeaseSnapshot | undefined;
  /** Runs `fn` (reads and writes of this store) as one transaction under the write lock. */
  atomically<T>(fn: () => T): T;
  /** The request's reservation is about to go upstream (written before it does). */
  markForwarded(requestId: string): void;
  /**
   * The request finished costing `costMicros` at `finishedAt` (node clock), its charge still to come
   * (after its record's commit): every replica's report counts it so from now on. Optional: a store
   * without it leaves reports to this process's own (CreditLease.finish).
   */
  markFinished?(requestId: string, costMicros: number, finishedAt: number): void;
  /**
   * `fn` (reads of this store: the leases' figures) and the finished reservations of this node's
   * leases, read in one snapshot, so a charge another replica makes cannot fall between them.
   */
  readWithFinished?<T>(fn: () => T): LeaseFiguresRead<T>;
  /**
   * The node's credit withdrawn (the control plane refused it: credit-withdrawal.ts), as every
   * replica sees it; undefined when none stands. Optional: without it the book keeps it in memory.
   */
  withdrawal?(): CreditWithdrawal | undefined;
  /** Records the withdrawal, or with undefined lifts it; returns the one that stood before. */
  setWithdrawal?(withdrawal: CreditWithdrawal | undefined): CreditWithdrawal | undefined;
  close(): void;
}

interface LeaseRow {
  lease_id: string;
  account_id: string;
  granted: number;
  spent: number;
  reserved: number;
  expires_at: number;
  state: string;
}

export interface LeaseStoreOptions {
  /** This node's id: its leases are stamped with it, and only its leases are loaded. */
  nodeId: string;
  /** Told about leases of another node found in the file (not served from, kept). */
  logger?: Pick<Logger, 'warn' | 'info'>;
  /** This process's spool owner slot, written on its reservation rows (a restart checks whether it is gone). */
  owner?: number | undefined;
  /** Wall clock (unix ms) for pruning long-expired returned leases; Date.now by default. */
  now?: () => number;
}

/** How long after its expiry a returned lease is kept (clock differences between node and control plane). */
export const RETURNED_LEASE_KEPT_MS = 24 * 60 * 60 * 1000;

interface ReservationRow {
  request_id: string;
  lease_id: string;
  amount: number;
  owner_slot: number | null;
  forwarded: number;
  finished_cost: number | null;
  finished_at: number | null;
}

/**
 * Opens the lease book of `opts.nodeId`. Each lease row carries the node it was granted to: a state
 * dir enrolled as another node (spool.db moved aside, credit-leases.sqlite kept) does not serve from
 * the old node's leases — they are another node's credit, which the control plane accounts for on
 * that node. Their rows stay in the file, untouched (money state is never deleted silently), and a
 * warning names both node ids. Rows written before node ids were recorded are claimed by the first
 * node that opens the file (the upgrade of the node that wrote them).
 */
export function openLeaseStore(stateDir: string, opts: LeaseStoreOptions): LeaseStore {
  const nodeId = opts.nodeId;
  const db = openLeaseDatabase(path.join(stateDir, LEASE_DB_FILE), { ownSlot: opts.owner, logger: opts.logger });
  // Checked and added under the write lock: replicas starting together on a file from before node
  // ids must not both try to add the column (the second would fail, and its serve with it).
  const claimed = db.transaction(() => {
    const columns = db.prepare<[], { name: string }>('pragma table_info(leases)').all();
    if (!columns.some((c) => c.name === 'node_id')) db.exec('alter table leases add column node_id text');
    // A file of an earlier release: its rows have no finished mark (reports count them reserved, as that release did).
    const reservationColumns = db.prepare<[], { name: string }>('pragma table_info(reservations)').all();
    if (!reservationColumns.some((c) => c.name === 'finished_cost')) {
      db.exec('alter table reservations add column finished_cost integer; alter table reservations add column finished_at integer');
    }
    return db.prepare('update leases set node_id = ? where node_id is null').run(nodeId).changes;
  }).immediate();
  if (claimed > 0) opts.logger?.info({ nodeId, leases: claimed }, 'credit leases written before node ids were recorded are taken as this node\'s');
  // Every clean stop returns each account's lease and the next connection grants new ones: without
  // this the file (and the book loaded from it) grew by a row per account per restart. A returned
  // lease is kept to answer a grant of it with the return again, which the control plane no longer
  // sends once the lease expired (it closes it then); a day's margin covers clock differences.
  const pruned = db
    .prepare(`delete from leases where node_id = ? and state = 'returned' and expires_at < ?
      and not exists (select 1 from reservations r where r.lease_id = leases.lease_id)`)
    .run(nodeId, (opts.now ?? Date.now)() - RETURNED_LEASE_KEPT_MS).changes;
  if (pruned > 0) opts.logger?.info({ nodeId, leases: pruned }, 'removed returned credit leases that expired more than a day ago');
  const foreign = db
    .prepare<[string], { node_id: string; leases: number }>('select node_id, count(*) as leases from leases where node_id <> ? group by node_id')
    .all(nodeId);
  for (const other of foreign) {
    opts.logger?.warn(
      { nodeId, otherNodeId: other.node_id, leases: other.leases, file: LEASE_DB_FILE },
      `${LEASE_DB_FILE} holds ${other.leases} credit lease(s) of node ${other.node_id}; this node is ${nodeId}: they are not served from and are kept in the file`,
    );
  }
  // Replicas of the node share this file, each with the book it loaded: a write carries what its
  // change adds (spent, reserved) to the figures on disk rather than its process's copy of them, so
  // every replica's charges count; a reservation is checked against the figures on disk, so two
  // replicas cannot both spend what is left. Granted and expiry only grow. A returned lease stays
  // returned: a replica that loaded it while open must not reopen on disk a lease whose credit the
  // control plane took back. A row of another node is never written (lease ids are unique per node).
  const selectLease = db.prepare<[string, string], LeaseRow>('select * from leases where lease_id = ? and node_id = ?');
  const insertLease = db.prepare(`insert into leases (lease_id, account_id, granted, spent, reserved, expires_at, state, node_id)
    values (@leaseId, @accountId, @granted, @spent, @reserved, @expiresAt, @state, @nodeId)`);
  const updateLease = db.prepare<Record<string, unknown>, LeaseRow>(`update leases set
      granted = max(granted, @granted),
      spent = min(@ceiling, max(0, spent + @addSpent)),
      reserved = max(0, reserved + @addReserved),
      expires_at = max(expires_at, @expiresAt),
      state = case when state = 'returned' then 'returned' else @state end
    where lease_id = @leaseId and node_id = @nodeId
    returning *`);
  const otherNodes = db.prepare<[string], { node_id: string }>('select node_id from leases where lease_id = ?');
  const mine = db.prepare<[string], LeaseRow>('select * from leases where node_id = ?');
  const openOfAccount = db.prepare<[string, string], LeaseRow>(
    "select * from leases where node_id = ? and account_id = ? and state = 'open' order by expires_at desc limit 1",
  );
  const addReservation = db.prepare('insert or replace into reservations (request_id, lease_id, amount, owner_slot, forwarded) values (?, ?, ?, ?, 0)');
  const removeReservation = db.prepare('delete from reservations where request_id = ?');
  const forward = db.prepare('update reservations set forwarded = 1 where request_id = ?');
  const finish = db.prepare('update reservations set finished_cost = ?, finished_at = ? where request_id = ?');
  const myFinished = db.prepare<[string], ReservationRow>(
    'select r.* from reservations r join leases l on l.lease_id = r.lease_id where l.node_id = ? and r.finished_cost is not null',
  );
  const leaseFinished = db.prepare<[string], ReservationRow>('select * from reservations where lease_id = ? and finished_cost is not null');
  const raiseSpent = db.prepare<Record<string, unknown>, LeaseRow>(
    'update leases set spent = min(@ceiling, @spent) where lease_id = @leaseId and node_id = @nodeId and spent < @spent returning *',
  );
  const myReservations = db.prepare<[string], ReservationRow>(
    'select r.* from reservations r join leases l on l.lease_id = r.lease_id where l.node_id = ?',
  );
  const selectWithdrawal = db.prepare<[string], { code: string; message: string; withdrawn_at: number }>(
    'select code, message, withdrawn_at from credit_withdrawals where node_id = ?',
  );
  const upsertWithdrawal = db.prepare(`insert into credit_withdrawals (node_id, code, message, withdrawn_at) values (?, ?, ?, ?)
    on conflict (node_id) do update set code = excluded.code, message = excluded.message, withdrawn_at = excluded.withdrawn_at`);
  const deleteWithdrawal = db.prepare('delete from credit_withdrawals where node_id = ?');
  const readWithdrawal = (): CreditWithdrawal | undefined => {
    const row = selectWithdrawal.get(nodeId);
    return row === undefined ? undefined : { code: row.code, message: row.message, at: row.withdrawn_at };
  };
  const replaceWithdrawal = db.transaction((next: CreditWithdrawal | undefined): CreditWithdrawal | undefined => {
    const before = readWithdrawal();
    if (next === undefined) {
      if (before !== undefined) deleteWithdrawal.run(nodeId);
    } else if (before === undefined || before.code !== next.code) {
      // The first refusal's moment is kept while the code stays the same (each slow retry repeats it).
      upsertWithdrawal.run(nodeId, next.code, next.message, next.at);
    }
    return before;
  });
  const owner = opts.owner ?? null;
  /**
   * A grant's known spend on the lease as stored (after this write's rows: a settled row's amount is
   * in spent already). Logged when it raises spent: the lease book had gone back.
   */
  const applySpentFloor = (stored: LeaseSnapshot, floor: SpentFloor): LeaseSnapshot => {
    if (stored.state !== 'open') return stored;
    const finished = leaseFinished.all(stored.leaseId).map((r): FinishedReservation => ({
      requestId: r.request_id, leaseId: r.lease_id, amount: r.amount, costMicros: r.finished_cost ?? 0, finishedAt: r.finished_at ?? 0,
    }));
    const spent = flooredSpent(stored.spent, stored.leaseId, floor, finished);
    if (spent <= stored.spent) return stored;
    const row = raiseSpent.get({ leaseId: stored.leaseId, nodeId, spent, ceiling: Number.MAX_SAFE_INTEGER });
    if (row === undefined) return stored;
    opts.logger?.warn(
      { leaseId: stored.leaseId, accountId: stored.accountId, storedSpentMicros: stored.spent, knownSpentMicros: floor.knownSpent, spentMicros: row.spent },
      `the control plane knows of more spend on a credit lease than ${LEASE_DB_FILE} holds (the book was lost, restored from an older copy, or this node re-enrolled on another host): the lease counts that spend, so it is not spent again`,
    );
    return snapshotOf(row);
  };
  // One transaction: a lease's figures and its reservation rows never disagree on disk.
  const write = db.transaction((next: LeaseSnapshot, prev: LeaseSnapshot, rows: ReservationRows | undefined, floor: SpentFloor | undefined): StoredLeaseWrite => {
    const row = selectLease.get(next.leaseId, nodeId);
    const adds = rows?.change !== undefined && 'add' in rows.change;
    // The node's credit withdrawn by the link's holder (the other replicas learn of it only here).
    if (adds && selectWithdrawal.get(nodeId) !== undefined) return { refused: true, stored: row === undefined ? prev : snapshotOf(row) };
    let stored: LeaseSnapshot;
    if (row === undefined) {
      if (otherNodes.get(next.leaseId) !== undefined) throw new Error(`lease ${next.leaseId} belongs to another node in ${LEASE_DB_FILE}`);
      insertLease.run({ ...next, nodeId });
      stored = next;
      if (floor !== undefined && next.spent > 0) {
        // A lease the book has no row of, granted with spend already known: its row was lost (or this
        // node re-enrolled on another host); it starts from that spend, not from nothing.
        opts.logger?.warn(
          { leaseId: next.leaseId, accountId: next.accountId, knownSpentMicros: floor.knownSpent, spentMicros: next.spent },
          `a credit lease ${LEASE_DB_FILE} holds no row of was granted with spend the control plane already knows of (the book was lost, restored from an older copy, or this node re-enrolled on another host): the lease counts that spend, so it is not spent again`,
        );
      }
    } else {
      const onDisk = snapshotOf(row);
      const change = rows?.change;
      // Checked against the figures every replica writes to, not this process's copy of them.
      if (change !== undefined && 'add' in change && (onDisk.state !== 'open' || onDisk.granted - onDisk.spent - onDisk.reserved < change.add.amount)) {
        return { refused: true, stored: onDisk };
      }
      const addSpent = next.spent - prev.spent;
      const addReserved = next.reserved - prev.reserved;
      // Held at 0 on disk, but never quietly: a figure going below 0 means two writers disagreed
      // about what was held (a reservation ended twice), which an operator must be able to find.
      if (onDisk.spent + addSpent < 0 || onDisk.reserved + addReserved < 0) {
        opts.logger?.warn(
          { leaseId: next.leaseId, accountId: onDisk.accountId, storedSpentMicros: onDisk.spent, storedReservedMicros: onDisk.reserved, addSpentMicros: addSpent, addReservedMicros: addReserved },
          `a change would take a credit lease's figure in ${LEASE_DB_FILE} below 0; it is held at 0`,
        );
      }
      stored = snapshotOf(updateLease.get({
        leaseId: next.leaseId,
        nodeId,
        granted: next.granted,
        addSpent,
        addReserved,
        expiresAt: next.expiresAt,
        state: next.state,
        ceiling: Number.MAX_SAFE_INTEGER,
      }) as LeaseRow);
    }
    const change = rows?.change;
    if (change !== undefined) {
      if ('add' in change) addReservation.run(change.add.requestId, next.leaseId, change.add.amount, owner);
      else removeReservation.run(change.remove);
    }
    for (const requestId of rows?.settled ?? []) removeReservation.run(requestId);
    if (floor !== undefined) stored = applySpentFloor(stored, floor);
    return { refused: false, stored };
  });
  return {
    load: () => mine.all(nodeId).map(snapshotOf),
    openLeaseOf: (accountId) => {
      const row = openOfAccount.get(nodeId, accountId);
      return row === undefined ? undefined : snapshotOf(row);
    },
    reservations: () =>
      myReservations.all(nodeId).map((r) => ({
        requestId: r.request_id,
        leaseId: r.lease_id,
        amount: r.amount,
        owner: r.owner_slot,
        forwarded: r.forwarded !== 0,
      })),
    save: (next, prev, rows, spentFloor) => write.immediate(next, prev, rows, spentFloor),
    atomically: (fn) => db.transaction(fn).immediate(),
    markForwarded: (requestId) => {
      forward.run(requestId);
    },
    markFinished: (requestId, costMicros, finishedAt) => {
      finish.run(costMicros, finishedAt, requestId);
    },
    // A deferred transaction: a snapshot for its reads (WAL), never waiting on a writer's lock.
    readWithFinished: <T>(fn: () => T) => db.transaction(() => {
      const value = fn();
      const finished = myFinished.all(nodeId).map((r): FinishedReservation => ({
        requestId: r.request_id,
        leaseId: r.lease_id,
        amount: r.amount,
        costMicros: r.finished_cost ?? 0,
        finishedAt: r.finished_at ?? 0,
      }));
      return { value, finished };
    }).deferred(),
    withdrawal: readWithdrawal,
    setWithdrawal: (withdrawal) => replaceWithdrawal.immediate(withdrawal),
    close: () => db.close(),
  };
}

function snapshotOf(r: LeaseRow): LeaseSnapshot {
  return {
    leaseId: r.lease_id,
    accountId: r.account_id,
    granted: r.granted,
    spent: r.spent,
    reserved: r.reserved,
    expiresAt: r.expires_at,
    state: r.state === 'returned' ? 'returned' : 'open',
  };
}

/** For stand-alone nodes and tests: nothing kept. */
export const memoryLeaseStore: LeaseStore = {
  load: () => [],
  openLeaseOf: () => undefined,
  reservations: () => [],
  save: () => undefined,
  atomically: (fn) => fn(),
  markForwarded: () => undefined,
  close: () => undefined,
};
