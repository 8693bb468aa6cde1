/**
 * The pipeline's CreditLeases backed by the node's lease book (docs/billing.md): preauthorise
 * reserves the request's worst-case cost from its account's lease or refuses with
 * ZN_ERR_CREDIT_EXHAUSTED (nothing is forwarded); settle charges the actual cost and releases the
 * rest. Check and update are one synchronous step, so concurrent requests cannot overdraw.
 */
import type { Logger } from '../logger.js';
import type { PipelineContext } from '../pipeline/context.js';
import { reject } from '../pipeline/stage.js';
import type { Rejection } from '../pipeline/stage.js';
import type { CreditLeases } from './credit-leases.js';
import type { CreditLease, Reservation } from './credit-lease.js';
import type { CreditPolicy } from './credit-policy.js';
import type { LeaseBook } from './lease-book.js';
import { actualCostMicros, priceOf, worstCaseMicros } from './request-cost.js';

interface Held {
  lease: CreditLease;
  reservation: Reservation;
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
    if (worst === undefined) return reject('ZN_ERR_CREDIT_EXHAUSTED', 'The worst-case cost of this request is beyond any credit; lower max_tokens.');
    if (worst === 0) return undefined;
    const lease = this.book.leaseOf(accountId);
    const reservation = lease?.reserve(worst, ctx.clock.now());
    if (lease === undefined || reservation === undefined) {
      return reject('ZN_ERR_CREDIT_EXHAUSTED', "The account's credit on this node cannot cover this request's worst-case cost.");
    }
    this.held.set(ctx, { lease, reservation });
    ctx.cost.reservedMicros = worst;
    ctx.cost.leaseId = lease.leaseId;
    // Whatever happens (even an exception that skips settle), the reservation is not held forever.
    ctx.cleanups.push(() => {
      if (!reservation.done) lease.release(reservation);
    });
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
    this.held.delete(ctx);
    if (held.reservation.done) return;
    if (actual > held.reservation.amount) {
      // The prompt estimate was low: charged in full (the upstream was paid), noted for operators.
      this.logger.warn({ requestId: ctx.requestId, reservedMicros: held.reservation.amount, costMicros: actual }, 'actual cost exceeded the reservation');
    }
    held.lease.settle(held.reservation, actual);
  }
}
