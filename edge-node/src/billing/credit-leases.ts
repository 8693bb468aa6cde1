/**
 * Credit as the pipeline sees it (owned by the billing module; see docs/billing.md): the node's
 * credit leases per account, from which each request reserves its worst-case cost.
 */
import type { PipelineContext } from '../pipeline/context.js';
import type { Rejection } from '../pipeline/stage.js';

export interface CreditLeases {
  /** Reserves ctx's worst-case cost; sets ctx.cost.reservedMicros/leaseId, or returns ZN_ERR_CREDIT_EXHAUSTED. */
  preauthorise(ctx: PipelineContext): Rejection | undefined;
  /**
   * Computes the actual cost from ctx.usage and prices into ctx.cost.costMicros; the reservation is
   * charged it (the rest released) by the request's cleanup, after its record is committed.
   */
  settle(ctx: PipelineContext): void;
}

/** Billing off: nothing reserved, cost computed by nobody (tests that are not about money). */
export const noCredit: CreditLeases = {
  preauthorise: () => undefined,
  settle: () => undefined,
};
