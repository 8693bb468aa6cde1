/**
 * The pipeline's CreditLeases backed by the node's lease book (docs/billing.md): preauthorise
 * reserves the request's worst-case cost from its account's lease or refuses with
 * ZN_ERR_CREDIT_EXHAUSTED (nothing is forwarded); settle works out the actual cost, which the lease
 * is charged (and the rest released) as soon as the request's record is committed (the spool stage
 * calls recordCommitted). Check and update are one synchronous step, so concurrent requests cannot
 * overdraw. Before the request goes upstream its reservation is marked forwarded (beforeForward),
 * so a restart tells a request killed before it reached the spool (released) from one that may
 * have been charged (counted as spent; docs/billing.md, "Persistence and crashes").
 *
 * Why the charge waits for the record: the record (with its cost) is committed to the spool only
 * after settle, before the caller's last byte. Written at settle, a kill -9 in between left a lease
 * that had spent the cost and a spool that recovered the request as `interrupted`, cost 0: an
 * answered request the account was never charged for. Written right after the commit, a crash
 * before it leaves the reservation held (counted as spent at restart) next to the interrupted record
 * that returns it, and a crash after it leaves the record with its cost next to the reservation's
 * row, which the next start charges that cost, releasing the rest (left-reservations.ts). The charge
 * removes the row in its own transaction, so a charged request is never charged again there
 * (docs/billing.md, "Persistence and crashes"). Not
 * later than the commit either: held until the caller has read the answer, a reservation would
 * outlive its record's finish time, which the control plane's lease cutoffs go by.
 *
 * While the node's credit is withdrawn (the control plane refused the node: credit-withdrawal.ts)
 * the store refuses every reservation, and the request is told why with ZN_ERR_CREDIT_WITHDRAWN;
 * a request that cannot cost anything reserves nothing and is still served.
 */
import type { Logger } from '../logger.js';
import { controlPlaneNow } from '../pipeline/clock.js';
import type { PipelineContext } from '../pipeline/context.js';
import { reject } from '../pipeline/stage.js';
import type { Rejection } from '../pipeline/stage.js';
import type { CreditLeases } from './credit-leases.js';
import type { CreditLease, Reservation } from './credit-lease.js';
import type { CreditPolicy } from './credit-policy.js';
import { withdrawnMessage } from './credit-withdrawal.js';
import type { CreditWithdrawal } from './credit-withdrawal.js';
import type { LeaseBook } from './lease-book.js';
import { actualCostMicros, canCostAnything, enforceOutputLimit, priceOf, worstCaseMicros } from './request-cost.js';

interface Held {
  lease: CreditLease;
  reservation: Reservation;
  /** The actual cost settle worked out; the cleanup charges it rather than releasing the reservation. */
  cost?: number;
}

/**
 * The least a request that can cost something reserves: a worst case estimated at 0 (an input-only
 * price and empty message contents) is still billed what the upstream counts, so it must hold part
 * of a standing lease (open, not expired, not exhausted) like any priced request, never skip it.
 */
export const MIN_RESERVATION_MICROS = 1;

/** What a refused request is told when its reservation could not be written. */
const LEASE_STORE_FAILED = "The node cannot write its credit lease store (disk full or failing); it accepts priced requests once writes succeed again.";

/**
 * What a request its lease cannot cover is told. The node cannot tell a lease that the next top-up
 * refills from one already at the most the control plane grants (a share of the account's free
 * balance, capped), where waiting never helps: the caller is told both.
 */
function creditShort(ctx: PipelineContext): string {
  return (
    "The account's credit on this node cannot cover this request's worst-case cost. Credit is topped up within seconds as it is spent, " +
    "but one request's worst case can never exceed what a lease holds: at most ZENOVA_LEASE_SHARE (default 0.25) of the account's free balance, " +
    `and at most ZENOVA_LEASE_CAP_MICROS. If a retry is refused too, ${smallerRequest(ctx)}, or raise the balance or those settings.`
  );
}

/** How this request's worst case is made smaller: an embedding's cost is all input. */
function smallerRequest(ctx: PipelineContext): string {
  return ctx.api === 'embeddings' ? 'send fewer or shorter inputs' : 'lower max_tokens';
}

/** The request's finish as its record will stamp it (spool/request-record-builder.ts): not before its arrival. */
function finishTime(ctx: PipelineContext): number {
  const now = Math.round(ctx.clock.now());
  return Number.isFinite(ctx.receivedAt) ? Math.max(Math.round(ctx.receivedAt), now) : now;
}

export class LeaseCredit implements CreditLeases {
  private readonly held = new WeakMap<PipelineContext, Held>();
  private readonly book: LeaseBook;
  private readonly policy: CreditPolicy;
  private readonly logger: Logger;

  constructor(book: LeaseBook, policy: CreditPolicy, logger: Logger) {
    this.book = book;
    this.policy = policy;
    this.logger = logger;
  }

  preauthorise(ctx: PipelineContext): Rejection | undefined {
    const accountId = ctx.key?.accountId ?? null;
    const price = accountId === null ? undefined : priceOf(ctx);
    // Local keys (no account) and unpriced models cost nothing: nothing to reserve.
    if (accountId === null || price === undefined) return undefined;
    ctx.cost.priced = true;
    const worst = worstCaseMicros(ctx, price, this.policy.defaultMaxOutputTokens);
    if (worst === undefined) return reject('ZN_ERR_CREDIT_EXHAUSTED', `The worst-case cost of this request is beyond any credit; ${smallerRequest(ctx)}.`);
    // Only a request that cannot cost anything (every rate that applies is zero) skips the lease.
    if (worst === 0 && !canCostAnything(ctx, price)) return undefined;
    const amount = Math.max(worst, MIN_RESERVATION_MICROS);
    let lease: CreditLease | undefined;
    let reservation: Reservation | undefined;
    for (let attempt = 1; ; attempt++) {
      lease = this.book.leaseOf(accountId);
      try {
        // Kept on the request's own row: a restart releases it if the request never reached the spool.
        // The lease's expiresAt is the control plane's: judged by its time.
        reservation = lease?.reserve(amount, controlPlaneNow(ctx.clock), ctx.requestId);
        if (reservation === undefined) {
          // Once more from the lease as stored: the replica holding the control link may have been
          // granted a new lease or a top-up this process has not seen (its own figures are its last write's).
          lease = this.book.storedLeaseOf(accountId);
          reservation = lease?.reserve(amount, controlPlaneNow(ctx.clock), ctx.requestId);
        }
      } catch (err) {
        // Nothing is held (CreditLease changes only after its write): refused like a spool that cannot write.
        this.logger.error({ err, requestId: ctx.requestId, leaseId: lease?.leaseId }, 'the lease store could not record a reservation; request refused (ZN_ERR_SPOOL_FULL)');
        return reject('ZN_ERR_SPOOL_FULL', LEASE_STORE_FAILED);
      }
      if (lease !== undefined && reservation !== undefined) break;
      // Read only on a refusal: the store's check is what refuses, this says why.
      const withdrawn = this.book.withdrawal();
      if (withdrawn === undefined) return reject('ZN_ERR_CREDIT_EXHAUSTED', creditShort(ctx));
      // A lift the store could not write when the session came up: written now, this request is served.
      if (attempt > 1 || !this.book.retryLift()) return reject('ZN_ERR_CREDIT_WITHDRAWN', withdrawnMessage(withdrawn));
    }
    const held: Held = { lease, reservation };
    this.held.set(ctx, held);
    ctx.cost.reservedMicros = amount;
    ctx.cost.leaseId = lease.leaseId;
    // The upstream is told the per-choice limit reserved for (the caller's, else the default) in the
    // field its kind reads, so it cannot produce (and the lease be charged for) more than was reserved.
    // Anthropic Messages always carry max_tokens (required); embeddings produce no output.
    if (ctx.api === 'chat.completions' && price.outputMicrosPerToken > 0) {
      enforceOutputLimit(ctx, ctx.maxOutputTokens ?? this.policy.defaultMaxOutputTokens);
    }
    // At the end of the request, whatever happened: a cost not charged yet (its record's commit
    // failed, or the charge could not be written) is charged, a request that never reached settle
    // (an exception) gives its reservation back.
    ctx.cleanups.push(() => {
      if (reservation.done) return;
      try {
        if (held.cost === undefined) lease.release(reservation);
        else lease.settle(reservation, held.cost);
      } catch (err) {
        // Still held, in memory as on disk: the lease under-spends (a restart counts it as spent).
        this.logger.error({ err, requestId: ctx.requestId, leaseId: lease.leaseId }, 'the lease store could not record the end of a reservation; it stays held');
      }
    });
    return undefined;
  }

  beforeForward(ctx: PipelineContext): Rejection | undefined {
    const held = this.held.get(ctx);
    if (held === undefined || held.reservation.done) return undefined;
    try {
      this.book.markForwarded(held.reservation.requestId);
    } catch (err) {
      // Unmarked, a restart could release a reservation whose request went upstream: not forwarded.
      this.logger.error({ err, requestId: ctx.requestId, leaseId: held.lease.leaseId }, 'the lease store could not mark a reservation forwarded; request refused (ZN_ERR_SPOOL_FULL)');
      return reject('ZN_ERR_SPOOL_FULL', LEASE_STORE_FAILED);
    }
    return undefined;
  }

  settle(ctx: PipelineContext): void {
    const held = this.held.get(ctx);
    const price = ctx.cost.priced ? priceOf(ctx) : undefined;
    const actual = price === undefined ? 0 : actualCostMicros(ctx, price);
    ctx.cost.costMicros = actual;
    if (held === undefined) {
      if (actual > 0) this.logger.warn({ requestId: ctx.requestId, costMicros: actual }, 'a request was charged without a reservation');
      return;
    }
    if (held.reservation.done) return;
    if (actual > held.reservation.amount) {
      // The prompt estimate was low: charged in full (the upstream was paid), noted for operators.
      this.logger.warn({ requestId: ctx.requestId, reservedMicros: held.reservation.amount, costMicros: actual }, 'actual cost exceeded the reservation');
    }
    // Charged once the record carrying this cost is committed (recordCommitted), or by the cleanup.
    held.cost = actual;
    // The spool stage stamps the record's finishedAt next, in this same turn: from now on a report or
    // return counts the request spent at this cost, as its record will, though the charge waits for
    // the commit (reported reserved, its reservation was kept on a lease closed meanwhile until the
    // hold bound: the record says it finished before the figures were taken).
    try {
      this.book.markFinished(held.lease, held.reservation, actual, finishTime(ctx));
    } catch (err) {
      this.logger.warn({ err, requestId: ctx.requestId, leaseId: held.lease.leaseId }, 'the lease store could not mark a request finished; only this process\'s reports count it so until its charge');
    }
  }

  nodeDeletion(): CreditWithdrawal | undefined {
    return this.book.deletion();
  }

  recordCommitted(ctx: PipelineContext): void {
    const held = this.held.get(ctx);
    if (held === undefined) return;
    this.held.delete(ctx);
    if (held.cost === undefined || held.reservation.done) return;
    try {
      held.lease.settle(held.reservation, held.cost);
    } catch (err) {
      // Still held, in memory as on disk; the request's cleanup tries the charge again.
      this.logger.error({ err, requestId: ctx.requestId, leaseId: held.lease.leaseId, costMicros: held.cost }, 'the lease store could not record a settlement; retried at the end of the request');
    }
  }
}
