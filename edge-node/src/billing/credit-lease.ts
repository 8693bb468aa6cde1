/**
 * One credit lease of one account on this node (docs/billing.md): what the control plane granted
 * (cumulative), what settled requests spent, and what in-flight requests hold. Every operation is
 * synchronous — the check and the update happen with no await in between — so concurrent requests
 * on the event loop can never reserve more than the lease holds; the store checks a reservation
 * again against the lease as other replicas left it, and the lease takes on what it stored.
 * Amounts are integer micro-units (safe integers).
 */

export type LeaseState =
  /** Reservations allowed. */
  | 'open'
  /** The node handed it back (LeaseReturn sent): no new reservations, grants ignored. */
  | 'returned';

export interface LeaseSnapshot {
  accountId: string;
  leaseId: string;
  granted: number;
  spent: number;
  reserved: number;
  /** Unix ms after which nothing may be reserved. */
  expiresAt: number;
  state: LeaseState;
}

/** What one request holds; settle or release it exactly once. */
export interface Reservation {
  readonly leaseId: string;
  readonly amount: number;
  /** The request holding it, kept on its own row (LeaseStore): a restart can then tell what became of it. */
  readonly requestId: string;
  /** True once settled or released. */
  readonly done: boolean;
}

interface MutableReservation {
  readonly leaseId: string;
  readonly amount: number;
  readonly requestId: string;
  done: boolean;
  readonly lease: CreditLease;
}

/**
 * A reservation whose request has finished, its cost known and its record being written: it still
 * holds its amount until the charge after the record's commit (lease-credit.ts), but a report or
 * return counts it as spent at its cost (LeaseBook.reportedFigures), as its record will say.
 */
export interface FinishedReservation {
  readonly requestId: string;
  readonly leaseId: string;
  readonly amount: number;
  readonly costMicros: number;
  /** Unix ms (node clock) the request finished at: its record's `finishedAt` is this or just after. */
  readonly finishedAt: number;
}

/**
 * The row of one request's reservation that a lease change writes with it (same transaction): added
 * by a reservation, removed by its settlement or release.
 */
export type ReservationChange = { add: { requestId: string; amount: number } } | { remove: string };

/**
 * The spend the control plane knows of a lease (LeaseGrant.known_spent_micros), written with a
 * grant: the lease's spent, with the costs of its finished reservations not charged yet (they count
 * as spent in reports, so the control plane's figure already holds them), is raised to at least
 * `knownSpent`. `finished` are this process's such reservations (the store adds every replica's).
 */
export interface SpentFloor {
  knownSpent: number;
  finished: readonly FinishedReservation[];
}

/**
 * Persists the change from `prev` (this lease as it stands) to `next` (and the request row written
 * with it, or the known spend a grant raises spent to, in the same transaction). Returns the lease
 * as stored after it, which the lease takes on (other replicas of the node write to the same
 * lease), refused when a reservation did not fit the stored figures; undefined when nothing is
 * stored (the change stands as `next`, spent raised to the floor). Throws when it cannot write.
 */
export type LeaseChangeWriter = (
  next: LeaseSnapshot,
  prev: LeaseSnapshot,
  reservation?: ReservationChange,
  spentFloor?: SpentFloor,
) => { refused: boolean; stored: LeaseSnapshot } | undefined | void;

function assertMicros(name: string, value: number): void {
  if (!Number.isSafeInteger(value) || value < 0) throw new RangeError(`${name} must be a non-negative safe integer of micro-units, got ${value}`);
}

/**
 * A sum of micro-unit figures, held at Number.MAX_SAFE_INTEGER: a cost is charged at that ceiling
 * when an upstream's usage prices beyond it (request-cost.ts), and a spent figure past it would be
 * written inexact and refused when the lease store is read again (the node could not start).
 */
export function addMicros(...values: number[]): number {
  let sum = 0;
  for (const v of values) sum = Math.min(Number.MAX_SAFE_INTEGER, sum + v);
  return sum;
}

/**
 * The spent a lease takes to count at least `floor.knownSpent`, its finished reservations' costs
 * counted with its spent (each request once, by id).
 */
export function flooredSpent(spent: number, leaseId: string, floor: SpentFloor, moreFinished: readonly FinishedReservation[] = []): number {
  const costs = new Map<string, number>();
  for (const f of [...moreFinished, ...floor.finished]) if (f.leaseId === leaseId) costs.set(f.requestId, f.costMicros);
  const counted = addMicros(spent, ...costs.values());
  return counted >= floor.knownSpent ? spent : addMicros(spent, floor.knownSpent - counted);
}

/** The end of a reservation's own row. */
function rowEnd(r: MutableReservation): ReservationChange {
  return { remove: r.requestId };
}

export class CreditLease {
  readonly accountId: string;
  readonly leaseId: string;
  private grantedMicros: number;
  private spentMicros: number;
  private reservedMicros = 0;
  /** This process's reservations whose request finished and whose charge is still to come, by request id. */
  private readonly finishing = new Map<string, FinishedReservation>();
  private expiry: number;
  private leaseState: LeaseState;
  /**
   * Called with the state a change leads to, before the change is made (persistence): when it
   * throws (the lease store cannot write: disk full…) the change is not made, so what the node holds
   * in memory never runs ahead of what it wrote. `reservation` is the request row written with it.
   */
  private readonly onChange: LeaseChangeWriter;

  constructor(
    init: Omit<LeaseSnapshot, 'reserved'> & { reserved?: number },
    onChange: LeaseChangeWriter = () => undefined,
  ) {
    assertMicros('granted', init.granted);
    // A spent figure past the ceiling (written by a release without it) is held there, not refused.
    assertMicros('spent', Math.min(init.spent, Number.MAX_SAFE_INTEGER));
    this.accountId = init.accountId;
    this.leaseId = init.leaseId;
    this.grantedMicros = init.granted;
    // A lease restored after a crash: what in-flight requests held may have been consumed, so it
    // counts as spent (the conservative side: the node under-spends, never over-spends).
    this.spentMicros = addMicros(init.spent, init.reserved ?? 0);
    this.expiry = init.expiresAt;
    this.leaseState = init.state;
    this.onChange = onChange;
  }

  get granted(): number { return this.grantedMicros; }
  get spent(): number { return this.spentMicros; }
  get reserved(): number { return this.reservedMicros; }
  get expiresAt(): number { return this.expiry; }
  get state(): LeaseState { return this.leaseState; }

  /** granted − spent − reserved; negative only when settled costs exceeded their reservations. */
  get available(): number {
    return this.grantedMicros - this.spentMicros - this.reservedMicros;
  }

  snapshot(): LeaseSnapshot {
    return {
      accountId: this.accountId,
      leaseId: this.leaseId,
      granted: this.grantedMicros,
      spent: this.spentMicros,
      reserved: this.reservedMicros,
      expiresAt: this.expiry,
      state: this.leaseState,
    };
  }

  /**
   * Writes the state `change` leads to (onChange), then adopts it: if the write throws, nothing
   * changed (the caller sees the error; the lease is as before).
   */
  private commit(
    change: Partial<Pick<LeaseSnapshot, 'granted' | 'spent' | 'reserved' | 'expiresAt' | 'state'>>, reservation?: ReservationChange, spentFloor?: SpentFloor,
  ): boolean {
    const prev = this.snapshot();
    const next: LeaseSnapshot = { ...prev, ...change };
    const written = this.onChange(next, prev, reservation, spentFloor);
    // Nothing stored: the floor is applied here (a store applies it to the figures on disk).
    if (written === undefined && spentFloor !== undefined) next.spent = flooredSpent(next.spent, this.leaseId, spentFloor);
    this.adoptFigures(written === undefined ? next : written.stored);
    return written?.refused !== true;
  }

  /** Takes on the lease's figures as stored (another replica's charges and reservations in them). */
  adoptFigures(stored: Pick<LeaseSnapshot, 'granted' | 'spent' | 'reserved' | 'expiresAt' | 'state'>): void {
    this.grantedMicros = stored.granted;
    this.spentMicros = Math.min(stored.spent, Number.MAX_SAFE_INTEGER);
    this.reservedMicros = stored.reserved;
    this.expiry = stored.expiresAt;
    this.leaseState = stored.state;
  }

  /**
   * Applies a LeaseGrant: `total` is the lease's cumulative granted amount, so a repeated or
   * reordered grant never adds twice and never shrinks the lease. Ignored once returned.
   * `knownSpent` is the spend the control plane knows of the lease (0: none, or an older control
   * plane): spent is raised so that it, with the costs of finished reservations not charged yet,
   * is at least that, in the grant's write. A lease book that went back (restored, lost, or on
   * another host after a re-enrollment) cannot spend again what the control plane knows was
   * spent; an intact book already counts at least that much and is left as it is. Reservations
   * are unchanged; spent never goes down.
   */
  grant(total: number, expiresAt: number, knownSpent = 0): void {
    assertMicros('granted total', total);
    assertMicros('known spent', knownSpent);
    if (this.leaseState !== 'open') return;
    const floor: SpentFloor | undefined = knownSpent > 0 ? { knownSpent, finished: this.finishedReservations() } : undefined;
    // A grant with a known spend is always written: the floor is checked against the figures as
    // stored, which decide (other replicas' charges and finished reservations are in them).
    if (total <= this.grantedMicros && expiresAt <= this.expiry && floor === undefined) return;
    this.commit({ granted: Math.max(this.grantedMicros, total), expiresAt: Math.max(this.expiry, expiresAt) }, undefined, floor);
  }

  /**
   * Holds `amount` for one request when the lease can cover it; undefined (nothing held) otherwise.
   * The reservation is also written as `requestId`'s own row (always: the row is what the store
   * checks against the figures every replica writes to), so a restart can release it when the
   * request never got its spool row (lease-book.ts). Throws (holding nothing) when the lease store
   * cannot record it.
   */
  reserve(amount: number, nowMs: number, requestId: string): Reservation | undefined {
    assertMicros('amount', amount);
    if (this.leaseState !== 'open' || nowMs >= this.expiry) return undefined;
    if (this.available < amount) return undefined;
    // The store may refuse it: other replicas reserved or spent from this lease meanwhile.
    if (!this.commit({ reserved: this.reservedMicros + amount }, { add: { requestId, amount } })) return undefined;
    const reservation: MutableReservation = { leaseId: this.leaseId, amount, requestId, done: false, lease: this };
    return reservation;
  }

  /**
   * The request cost `actual`: it moves to spent and the rest of the reservation is released.
   * An actual above the reservation (the prompt estimate was low) is still charged in full: the
   * upstream was paid for it; the lease's available amount then goes down by the difference.
   * Throws when the lease store cannot record it: the reservation is then still held (not done).
   */
  settle(reservation: Reservation, actual: number): void {
    assertMicros('actual', actual);
    const r = this.own(reservation);
    this.commit({ reserved: this.reservedMicros - r.amount, spent: addMicros(this.spentMicros, actual) }, rowEnd(r));
    r.done = true;
    this.finishing.delete(r.requestId);
  }

  /** Gives the whole reservation back (nothing was spent). Throws, still holding it, when the store cannot record it. */
  release(reservation: Reservation): void {
    const r = this.own(reservation);
    this.commit({ reserved: this.reservedMicros - r.amount }, rowEnd(r));
    r.done = true;
    this.finishing.delete(r.requestId);
  }

  /**
   * The reservation's request finished at `finishedAt` costing `cost`, and will be charged that
   * once its record is committed: until then reports count it spent at that cost (nothing changes
   * in the lease's figures). Returns what was noted.
   */
  finish(reservation: Reservation, cost: number, finishedAt: number): FinishedReservation {
    assertMicros('cost', cost);
    const r = this.own(reservation);
    const finished: FinishedReservation = { requestId: r.requestId, leaseId: this.leaseId, amount: r.amount, costMicros: cost, finishedAt };
    this.finishing.set(r.requestId, finished);
    return finished;
  }

  /** This process's reservations that finished and are not charged yet (finish). */
  finishedReservations(): FinishedReservation[] {
    return [...this.finishing.values()];
  }

  /**
   * Stops reservations for good (LeaseReturn); returns what is handed back: granted − spent −
   * reserved, at least 0. Throws, still open, when the store cannot record it.
   */
  markReturned(): number {
    this.commit({ state: 'returned' });
    return Math.max(0, this.available);
  }

  private own(reservation: Reservation): MutableReservation {
    const r = reservation as MutableReservation;
    if (r.lease !== this) throw new Error(`reservation belongs to lease ${r.leaseId}, not ${this.leaseId}`);
    if (r.done) throw new Error(`reservation on lease ${this.leaseId} was already settled or released`);
    return r;
  }
}
