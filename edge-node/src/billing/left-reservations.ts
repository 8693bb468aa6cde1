/**
 * What a starting node does with the reservations an earlier run left in its lease book
 * (docs/billing.md, "Persistence and crashes"). A reservation is written when the preauthorise stage
 * runs; the request's spool row is committed a turn later, and nothing goes upstream before that
 * commit and the reservation's `forwarded` mark. So a reservation of a process that is gone, never
 * marked forwarded, whose request has neither an open row nor a record in the spool, was killed
 * before anything went upstream: it is released. Every other one of a gone process counts as spent
 * (it may have been charged; an open row becomes an interrupted record that carries it, and the
 * control plane writes its unused part off). Reservations of processes still running (replicas on
 * this state dir) are theirs: left alone.
 */
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
}

export interface LeftReservations {
  /** Rows of gone processes decided now: their lease's figures take them in (released or spent). */
  settled: string[];
  /** The ones released: their requests never reached the spool, so nothing went upstream. */
  released: StoredReservation[];
  releasedMicros: number;
}

/**
 * Sorts one lease's left reservation rows. What is released never exceeds the lease's `reserved`
 * figure, the sum its rows were written with: a row whose amount is no longer in it (its lease was
 * written since, with it counted as spent) is only settled.
 */
export function sortLeftReservations(lease: LeaseSnapshot, rows: readonly StoredReservation[], evidence: ReservationEvidence): LeftReservations {
  const left: LeftReservations = { settled: [], released: [], releasedMicros: 0 };
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
    const neverForwarded = row.owner !== null && !row.forwarded && !evidence.holdsRequest(row.requestId);
    if (neverForwarded && left.releasedMicros + row.amount <= lease.reserved) {
      left.released.push(row);
      left.releasedMicros += row.amount;
    }
  }
  return left;
}
