/**
 * What a starting node does with the reservations an earlier run left in its lease book
 * (docs/billing.md, "Persistence and crashes"). A reservation is written when the preauthorise stage
 * runs; the request's spool row is committed a turn later, and nothing goes upstream before that
 * commit and the reservation's `forwarded` mark. The lease is charged right after the request's
 * final record commits, in the transaction that removes the reservation's row: a row that is left
 * was never charged. So for a reservation of a process that is gone:
 * - its request has a final record in the spool (the process died between the record's commit and
 *   the charge, or the charge could not be written): charged the record's cost, the rest released,
 *   as that charge would have done. The control plane charges the same cost from the record and
 *   returns nothing for it, so the rest would otherwise be lost to the account;
 * - never marked forwarded, and its request has neither an open row nor a record: killed before
 *   anything went upstream, released;
 * - anything else counts as spent (it may have been charged; an open row becomes an interrupted
 *   record that carries it, and the control plane writes its unused part off).
 * Reservations of processes still running (replicas on this state dir) are theirs: left alone.
 */
import { addMicros } from './credit-lease.js';
import type { LeaseSnapshot } from './credit-lease.js';
import type { StoredReservation } from './lease-store.js';

/** What the spool can tell about the requests of earlier runs (spool-store.ts answers it). */
export interface ReservationEvidence {
  /** This process's spool owner slot: the reservations it makes name it. */
  readonly owner: number;
  /** Whether the process that held spool owner slot `slot` is gone (the slot is free, or this process's now). */
  ownerGone(slot: number): boolean;
  /** Whether the spool holds an open row or a record of the request. */
  holdsRequest(requestId: string): boolean;
  /**
   * The cost of the request's final record when the spool holds one (no open row, not an
   * `interrupted` record); undefined otherwise.
   */
  finalCost(requestId: string): number | undefined;
}

/** A left reservation whose request's final record is in the spool: charged that record's cost. */
export interface ChargedReservation {
  row: StoredReservation;
  costMicros: number;
  /** The part of the reservation given back (its amount less the cost, at least 0). */
  releasedMicros: number;
}

export interface LeftReservations {
  /** Rows of gone processes decided now: their lease's figures take them in (released or spent). */
  settled: string[];
  /** The ones released: their requests never reached the spool, so nothing went upstream. */
  released: StoredReservation[];
  /** The ones charged their final record's cost (the charge after the record's commit never written). */
  charged: ChargedReservation[];
  /** What goes back to the lease's free credit: the released rows and the unused part of the charged ones. */
  releasedMicros: number;
  /** What charged rows cost beyond their reservations (a low prompt estimate): spent on top of them. */
  overReservedMicros: number;
}

/**
 * Sorts one lease's left reservation rows. What is released never exceeds the lease's `reserved`
 * figure, the sum its rows were written with: a row whose amount is no longer in it (its lease was
 * written since, with it counted as spent) is only settled.
 */
export function sortLeftReservations(lease: LeaseSnapshot, rows: readonly StoredReservation[], evidence: ReservationEvidence): LeftReservations {
  const left: LeftReservations = { settled: [], released: [], charged: [], releasedMicros: 0, overReservedMicros: 0 };
  const gone = new Map<number, boolean>();
  for (const row of rows) {
    if (row.leaseId !== lease.leaseId) continue;
    if (row.owner !== null) {
      let ownerGone = gone.get(row.owner);
      if (ownerGone === undefined) {
        ownerGone = evidence.ownerGone(row.owner);
        gone.set(row.owner, ownerGone);
      }
      // A replica still serving this request: its reservation, its row.
      if (!ownerGone) continue;
    }
    left.settled.push(row.requestId);
    // Only rows naming their process: one without an owner slot (a lease book opened without a spool) may be a live one's.
    if (row.owner === null) continue;
    const cost = evidence.finalCost(row.requestId);
    if (cost !== undefined) {
      // Charged in full like the charge it stands for (an upstream paid beyond the reservation too).
      const unused = Math.max(0, row.amount - cost);
      if (left.releasedMicros + unused > lease.reserved) continue;
      left.charged.push({ row, costMicros: cost, releasedMicros: unused });
      left.releasedMicros += unused;
      left.overReservedMicros = addMicros(left.overReservedMicros, Math.max(0, cost - row.amount));
      continue;
    }
    const neverForwarded = !row.forwarded && !evidence.holdsRequest(row.requestId);
    if (neverForwarded && left.releasedMicros + row.amount <= lease.reserved) {
      left.released.push(row);
      left.releasedMicros += row.amount;
    }
  }
  return left;
}
