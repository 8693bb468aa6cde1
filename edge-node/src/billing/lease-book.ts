/**
 * All credit leases of this node: at most one open lease per account (the one reservations come
 * from), plus returned ones remembered so a LeaseReturn lost in transit can be sent again. Grants
 * arrive from the control plane (credit-channel.ts); every change is written to the store, which
 * replicas of the node share: a write takes on the lease as stored (lease-store.ts), and a lease
 * too small here is looked up there (the control link's holder may have been granted more).
 *
 * At open, what an earlier run still held counts as spent, except reservations of requests that
 * never reached the spool, which are released, and those whose request's final record the spool
 * holds, which are charged that record's cost (left-reservations.ts). No request is charged twice:
 * a charge is written in the transaction that removes its reservation's row, so a row that is left
 * was never charged.
 *
 * What a report or return tells the control plane (reportedFigures) is the figures as the request
 * records will show them at that moment: a request that finished (its record stamped `finishedAt`)
 * counts as spent at its cost even while its charge waits for the record's commit. Counted
 * reserved, the control plane, which releases a closed lease's reservations by the records of
 * requests in flight at the figures' time (receivedAt ≤ it < finishedAt), never released it: it
 * stayed outstanding until the hold bound (docs/billing.md, "Closed leases").
 *
 * While the node's credit is withdrawn (the control plane refused the node: credit-withdrawal.ts)
 * nothing is reserved: the store refuses every reservation in the transaction that would write it,
 * whichever replica makes it. A deletion (NODE_DELETED) is also kept in memory (deletion()), for
 * the pipeline to refuse every caller request without reading the store: read at open, set and
 * cleared here by withdraw() and resume(), and read again from the store by refreshDeletion() (the
 * credit channel's report timer), so a replica without the control link follows the holder.
 */
import type { Logger } from '../logger.js';
import { CreditLease, addMicros } from './credit-lease.js';
import type { FinishedReservation, LeaseSnapshot, LeaseState, Reservation, ReservationChange, SpentFloor } from './credit-lease.js';
import { withdrawnForGood } from './credit-withdrawal.js';
import type { CreditWithdrawal } from './credit-withdrawal.js';
import { sortLeftReservations } from './left-reservations.js';
import type { ReservationEvidence } from './left-reservations.js';
import type { LeaseStore, StoredLeaseWrite, StoredReservation } from './lease-store.js';

export interface LeaseBookOptions {
  /** What the spool knows of earlier runs' requests; without it every reservation left counts as spent. */
  evidence?: ReservationEvidence | undefined;
  logger?: Pick<Logger, 'info' | 'warn' | 'error'> | undefined;
}

export interface GrantInput {
  accountId: string;
  leaseId: string;
  /** Cumulative granted total of the lease, micro-units. */
  amountMicros: number;
  expiresAt: number;
  /**
   * LeaseGrant.known_spent_micros: the spend the control plane knows of the lease; the lease counts
   * at least this much spent (CreditLease.grant). 0 or absent: none known, or an older control plane.
   */
  knownSpentMicros?: number | undefined;
}

export type GrantOutcome =
  /** Applied (new lease, top-up, or a repeat that changed nothing). */
  | 'applied'
  /** For a lease this node already returned: the control plane missed the return. */
  | 'already-returned';

/** A lease's figures as a LeaseReport or LeaseReturn gives them (reportedFigures). */
export interface ReportedFigures {
  granted: number;
  /** Settled spend, with the cost of requests that finished and wait for their charge. */
  spent: number;
  /** Held by requests still in flight. */
  reserved: number;
  /** granted − spent − reserved, at least 0: what a return hands back. */
  unused: number;
}

/** What recording a withdrawal did. */
export interface WithdrawOutcome {
  /** The withdrawal that stood before (undefined: the credit was not withdrawn). */
  before: CreditWithdrawal | undefined;
  /** The leases closed for good (NODE_DELETED), and those that could not be. */
  closed: CreditLease[];
  notClosed: CreditLease[];
}

/** A start-up settlement whose write failed: its rows, and what it moves from reserved to spent. */
interface UnsettledRows {
  requestIds: readonly string[];
  addSpent: number;
  addReserved: number;
}

export class LeaseBook {
  private readonly open = new Map<string, CreditLease>();
  private readonly byId = new Map<string, CreditLease>();
  private readonly store: LeaseStore;
  /**
   * Per lease, earlier runs' reservation rows its figures count as spent but whose removal could not
   * be written at open: removed with the lease's next write, so no later start decides them again.
   */
  private readonly unsettled = new Map<string, UnsettledRows>();
  private readonly logger: LeaseBookOptions['logger'];
  /**
   * A withdrawal held in this process only: the store keeps none (memory), or could not write it.
   * Otherwise the store's is the one that counts (another replica may lift it on reconnecting).
   */
  private withdrawnHere: CreditWithdrawal | undefined;
  /**
   * resume() could not write the lift (a full disk for a moment, SQLITE_BUSY): the row would stand,
   * and every replica refuse priced requests, for the whole session the control plane accepted.
   * retryLift() writes it later; a new cut-off (withdraw()) drops it.
   */
  private liftPending = false;
  /**
   * The node's deletion (a NODE_DELETED withdrawal) as this process last knew it: what deletion()
   * answers per request, with no store read.
   */
  private deleted: CreditWithdrawal | undefined;

  constructor(store: LeaseStore, opts: LeaseBookOptions = {}) {
    this.store = store;
    this.logger = opts.logger;
    // One transaction from the reads to the last write: replicas starting together must not both
    // decide (and count) the same left reservations, nor read rows and figures another changed between.
    const restored = store.atomically(() => {
      const rows = opts.evidence === undefined ? [] : store.reservations();
      return store.load().map((snap) => (opts.evidence === undefined ? snap : this.settleLeftReservations(snap, rows, opts.evidence, opts.logger)));
    });
    for (const snap of restored) this.adopt(new CreditLease(snap, this.persist));
    this.refreshDeletion();
  }

  /**
   * The node's deletion (NODE_DELETED), when its credit is withdrawn for good; undefined otherwise
   * (a credential refusal only suspends the credit). From memory: no store read, so the pipeline
   * may ask it for every request.
   */
  deletion(): CreditWithdrawal | undefined {
    return this.deleted;
  }

  /**
   * Reads the withdrawal from the store again for deletion(): the replica holding the control link
   * records a deletion, or lifts it, there. A lift this process could not write yet (retryLift)
   * counts as lifted: a session was established. A store that cannot be read leaves it as it was.
   */
  refreshDeletion(): void {
    if (this.liftPending) {
      this.deleted = undefined;
      return;
    }
    let withdrawal: CreditWithdrawal | undefined;
    try {
      withdrawal = this.withdrawnHere ?? this.store.withdrawal?.();
    } catch (err) {
      this.logger?.warn({ err }, 'the lease store could not be read for a credit withdrawal');
      return;
    }
    this.deleted = withdrawal !== undefined && withdrawnForGood(withdrawal) ? withdrawal : undefined;
  }

  /**
   * The lease as it starts: the reservations left by processes that are gone are released (never
   * reached the spool), charged their final record's cost, or counted as spent, written with their
   * rows' removal in one transaction.
   * When that write fails everything counts as spent (as on disk) and the rows go with the lease's
   * next write.
   */
  private settleLeftReservations(
    snap: LeaseSnapshot, rows: readonly StoredReservation[], evidence: ReservationEvidence, logger: LeaseBookOptions['logger'],
  ): LeaseSnapshot {
    const left = sortLeftReservations(snap, rows, evidence);
    // What the rows of replicas still serving hold stays in `reserved` on disk (their process settles
    // them, and counts as spent in this process's copy, as before); the rest of it is decided now,
    // a part no row explains (written by an older release) included: it counts as spent.
    const decided = new Set(left.settled);
    const live = rows.filter((r) => r.leaseId === snap.leaseId && !decided.has(r.requestId)).reduce((sum, r) => sum + r.amount, 0);
    const leaving = Math.max(0, snap.reserved - live);
    if (left.settled.length === 0 && leaving === 0) return snap;
    const addSpent = leaving - left.releasedMicros + left.overReservedMicros;
    const next: LeaseSnapshot = { ...snap, spent: addMicros(snap.spent, addSpent), reserved: snap.reserved - leaving };
    let stored: LeaseSnapshot;
    try {
      stored = this.store.save(next, snap, { settled: left.settled })?.stored ?? next;
    } catch (err) {
      // Written with the lease's next write, figures and rows together.
      this.unsettled.set(snap.leaseId, { requestIds: left.settled, addSpent, addReserved: -leaving });
      logger?.error({ err, leaseId: snap.leaseId }, 'the lease store could not record the reservations the previous run left; they count as spent');
      return snap;
    }
    for (const r of left.released) {
      logger?.warn(
        { requestId: r.requestId, leaseId: r.leaseId, accountId: snap.accountId, reservedMicros: r.amount },
        'released the reservation of a request the previous run stopped before it reached the spool (nothing went upstream)',
      );
    }
    for (const c of left.charged) {
      logger?.warn(
        { requestId: c.row.requestId, leaseId: c.row.leaseId, accountId: snap.accountId, reservedMicros: c.row.amount, costMicros: c.costMicros, releasedMicros: c.releasedMicros },
        "charged the reservation of a request the previous run recorded but stopped before charging, at its record's cost (the rest released)",
      );
    }
    return stored;
  }

  /** The account's open lease, if any. */
  leaseOf(accountId: string): CreditLease | undefined {
    const lease = this.open.get(accountId);
    return lease?.state === 'open' ? lease : undefined;
  }

  lease(leaseId: string): CreditLease | undefined {
    return this.byId.get(leaseId);
  }

  openLeases(): CreditLease[] {
    this.refresh();
    return [...this.open.values()].filter((l) => l.state === 'open');
  }

  /**
   * The account's open lease as the store has it now, its figures taken on: another replica of the
   * node (the one holding the control link, which receives the grants) may have been granted a new
   * lease or a top-up since this process last wrote. Asked when a reservation did not fit.
   */
  storedLeaseOf(accountId: string): CreditLease | undefined {
    const snap = this.store.openLeaseOf(accountId);
    if (snap === undefined) return undefined;
    const lease = this.take(snap);
    if (lease.state !== 'open') return undefined;
    // Reservations come from it from now on (the one known here may be an older lease of the account).
    this.open.set(accountId, lease);
    return lease;
  }

  /** Takes on the figures of every lease as stored (for reports and returns: other replicas' charges count). */
  private refresh(): void {
    for (const snap of this.store.load()) {
      if (snap.state === 'returned' && !this.byId.has(snap.leaseId)) continue;
      this.take(snap);
    }
  }

  /** A stored lease's figures into this book: the known lease takes them on, an unknown one is added. */
  private take(snap: LeaseSnapshot): CreditLease {
    let lease = this.byId.get(snap.leaseId);
    if (lease === undefined) {
      lease = new CreditLease({ ...snap, reserved: 0 }, this.persist);
      lease.adoptFigures(snap);
      this.byId.set(lease.leaseId, lease);
    } else {
      lease.adoptFigures(snap);
    }
    if (lease.state === 'open' && this.open.get(lease.accountId)?.state !== 'open') this.open.set(lease.accountId, lease);
    if (lease.state === 'returned' && this.open.get(lease.accountId) === lease) this.open.delete(lease.accountId);
    return lease;
  }

  returnedLeases(): CreditLease[] {
    return [...this.byId.values()].filter((l) => l.state === 'returned');
  }

  grant(input: GrantInput): GrantOutcome {
    const known = this.byId.get(input.leaseId);
    if (known !== undefined) {
      if (known.accountId !== input.accountId) throw new Error(`lease ${input.leaseId} belongs to another account`);
      if (known.state === 'returned') return 'already-returned';
      known.grant(input.amountMicros, input.expiresAt, input.knownSpentMicros ?? 0);
      // Another replica returned it (found by this write): the control plane missed that return.
      return (known.state as LeaseState) === 'returned' ? 'already-returned' : 'applied';
    }
    // A new lease for an account replaces its previous open one for new reservations; requests
    // holding the old one still settle against it (they keep their own reservation). A lease this
    // book does not know may have been spent from already (the book was lost or restored from an
    // older copy, or the node re-enrolled on another host): it starts from the spend the control
    // plane knows of it, not from nothing.
    const knownSpent = input.knownSpentMicros ?? 0;
    const lease = new CreditLease(
      { accountId: input.accountId, leaseId: input.leaseId, granted: input.amountMicros, spent: knownSpent, expiresAt: input.expiresAt, state: 'open' },
      this.persist,
    );
    // Written first: a lease the store could not record is not served from (the grant is sent again).
    // Another replica may have stored it already (a control link held by two for a moment): its
    // figures there stand, the grant only raises the total, the expiry and spent to the known spend.
    const floor: SpentFloor | undefined = knownSpent > 0 ? { knownSpent, finished: [] } : undefined;
    const stored = this.persist(lease.snapshot(), lease.snapshot(), undefined, floor);
    if (stored !== undefined) lease.adoptFigures(stored.stored);
    this.adopt(lease);
    // Stored as returned: a replica that held the link before this one (and never told this one of
    // the lease) returned it, and the control plane, granting it again, missed that return.
    return lease.state === 'returned' ? 'already-returned' : 'applied';
  }

  private adopt(lease: CreditLease): void {
    this.byId.set(lease.leaseId, lease);
    if (lease.state === 'open') this.open.set(lease.accountId, lease);
  }

  /** Marks the lease returned (no more reservations); returns what is handed back. */
  markReturned(lease: CreditLease): number {
    const returned = lease.markReturned();
    if (this.open.get(lease.accountId) === lease) this.open.delete(lease.accountId);
    return returned;
  }

  /** The node's credit withdrawn, as the store (every replica) has it; undefined when it is not. */
  withdrawal(): CreditWithdrawal | undefined {
    if (this.withdrawnHere !== undefined) return this.withdrawnHere;
    try {
      return this.store.withdrawal?.();
    } catch (err) {
      this.logger?.warn({ err }, 'the lease store could not be read for a credit withdrawal');
      return undefined;
    }
  }

  /**
   * Withdraws the node's credit (the control plane refused it): no reservation from now on, in any
   * replica. NODE_DELETED also closes every open lease for good (returned, as a LeaseReturn would:
   * the control plane already took their credit back); otherwise they stay open, suspended until
   * resume(). A withdrawal the store cannot write holds in this process only.
   */
  withdraw(withdrawal: CreditWithdrawal): WithdrawOutcome {
    let before: CreditWithdrawal | undefined;
    // Refused again since: the lift resume() could not write must not be written now.
    this.liftPending = false;
    if (this.store.setWithdrawal === undefined) {
      before = this.withdrawnHere;
      if (before?.code !== withdrawal.code) this.withdrawnHere = withdrawal;
    } else {
      try {
        before = this.store.setWithdrawal(withdrawal);
        this.withdrawnHere = undefined;
      } catch (err) {
        before = this.withdrawnHere;
        if (before?.code !== withdrawal.code) this.withdrawnHere = withdrawal;
        this.logger?.error({ err, code: withdrawal.code }, "the lease store could not record the node's credit withdrawn; only this process refuses priced requests");
      }
    }
    // As the store now has it: a later refusal's code replaces the row (credit-withdrawal.ts).
    this.deleted = withdrawnForGood(withdrawal) ? withdrawal : undefined;
    const closed: CreditLease[] = [];
    const notClosed: CreditLease[] = [];
    if (withdrawnForGood(withdrawal)) {
      for (const lease of this.openLeases()) {
        try {
          this.markReturned(lease);
          closed.push(lease);
        } catch (err) {
          // Still open on disk, but no reservation is written while the withdrawal stands.
          this.logger?.error({ err, leaseId: lease.leaseId }, 'the lease store could not close a lease of a deleted node');
          notClosed.push(lease);
        }
      }
    }
    return { before, closed, notClosed };
  }

  /**
   * A control session was established: the credit withdrawn, if it was, is given back. Returns that
   * withdrawal. A lift the store cannot write is kept pending for retryLift().
   */
  resume(): CreditWithdrawal | undefined {
    const here = this.withdrawnHere;
    this.withdrawnHere = undefined;
    // Accepted: the node is not deleted, whether or not the store can write the lift now.
    this.deleted = undefined;
    try {
      const before = this.store.setWithdrawal?.(undefined) ?? here;
      this.liftPending = false;
      return before;
    } catch (err) {
      // Once per pending lift: a store failing for long would say it at every session otherwise.
      if (!this.liftPending) {
        this.logger?.error(
          { err },
          "the lease store could not lift the node's credit withdrawal; priced requests are refused until it can, tried again at each lease report and refused priced request",
        );
      }
      this.liftPending = true;
      return here;
    }
  }

  /**
   * Writes a lift resume() could not (the control plane accepted the node since, and has not cut it
   * off again). True once written now: priced requests may be reserved again, in every replica.
   * False when none is pending, or the store failed again (said once, by resume()).
   */
  retryLift(): boolean {
    if (!this.liftPending) return false;
    let lifted: CreditWithdrawal | undefined;
    try {
      lifted = this.store.setWithdrawal?.(undefined);
    } catch {
      return false;
    }
    this.liftPending = false;
    this.logger?.info(
      { ...(lifted !== undefined ? { code: lifted.code, withdrawnAt: new Date(lifted.at).toISOString() } : {}) },
      "the lease store could lift the node's credit withdrawal at last: priced requests are served again",
    );
    return true;
  }

  /** The request's reservation is about to go upstream: from now on a restart counts it as spent. */
  markForwarded(requestId: string): void {
    this.store.markForwarded(requestId);
  }

  /**
   * The request finished at `finishedAt` costing `cost`; its charge waits for its record's commit.
   * Noted in this process at once, then in the store for the replica that reports (which throws
   * when it cannot write: this process's own reports count it still).
   */
  markFinished(lease: CreditLease, reservation: Reservation, cost: number, finishedAt: number): void {
    const finished = lease.finish(reservation, cost, finishedAt);
    this.store.markFinished?.(finished.requestId, finished.costMicros, finished.finishedAt);
  }

  /**
   * The figures of `leases` as a report or return gives them, as of `now()` (read with them, node
   * clock, returned as `atMs`): the leases as stored (every replica's charges and reservations),
   * with each reservation whose request finished at or before `atMs` counted as spent at its cost
   * instead of reserved — exactly the requests whose records have finishedAt ≤ atMs, whatever
   * the order of their charge and this report.
   */
  reportedFigures(leases: readonly CreditLease[], now: () => number): { atMs: number; figures: Map<CreditLease, ReportedFigures> } {
    let stored: FinishedReservation[] = [];
    let atMs: number;
    try {
      if (this.store.readWithFinished === undefined) {
        this.refresh();
        atMs = now();
      } else {
        const read = this.store.readWithFinished(() => {
          this.refresh();
          return now();
        });
        atMs = read.value;
        stored = read.finished;
      }
    } catch (err) {
      // The figures known here, and this process's finished requests: never more reserved than that.
      this.logger?.warn({ err }, 'the lease store could not be read for a lease report; reporting the figures this process knows');
      atMs = now();
    }
    const figures = new Map<CreditLease, ReportedFigures>();
    for (const lease of leases) {
      const finished = new Map<string, FinishedReservation>();
      for (const f of stored) if (f.leaseId === lease.leaseId) finished.set(f.requestId, f);
      for (const f of lease.finishedReservations()) finished.set(f.requestId, f);
      let spent = lease.spent;
      let reserved = lease.reserved;
      for (const f of finished.values()) {
        // One that finished after atMs (the clock stepped back) is in flight at atMs; one whose
        // amount is not in `reserved` (figures an older release wrote) is left as it is.
        if (f.finishedAt > atMs || f.amount > reserved) continue;
        reserved -= f.amount;
        spent = addMicros(spent, f.costMicros);
      }
      figures.set(lease, { granted: lease.granted, spent, reserved, unused: Math.max(0, lease.granted - spent - reserved) });
    }
    return { atMs, figures };
  }

  private readonly persist = (next: LeaseSnapshot, prev: LeaseSnapshot, reservation?: ReservationChange, spentFloor?: SpentFloor): StoredLeaseWrite | undefined => {
    // The store refuses it too when it keeps the withdrawal; this one it does not know of.
    if (this.withdrawnHere !== undefined && reservation !== undefined && 'add' in reservation) return { refused: true, stored: prev };
    const left = this.unsettled.get(next.leaseId);
    if (reservation === undefined && left === undefined) return this.store.save(next, prev, undefined, spentFloor);
    // The start-up settlement that could not be written rides on this write: its rows and its figures.
    const carried = left === undefined ? next : { ...next, spent: addMicros(next.spent, left.addSpent), reserved: next.reserved + left.addReserved };
    const written = this.store.save(carried, prev, { change: reservation, settled: left?.requestIds }, spentFloor);
    // A refused reservation wrote nothing: the rows still go with the next write.
    if (written?.refused !== true) this.unsettled.delete(next.leaseId);
    return written;
  };

  snapshots(): LeaseSnapshot[] {
    return [...this.byId.values()].map((l) => l.snapshot());
  }
}
