/**
 * Credit as the pipeline sees it (owned by the billing module; see docs/billing.md): the node's
 * credit leases per account, from which each request reserves its worst-case cost.
 */
import type { PipelineContext } from '../pipeline/context.js';
import type { Rejection } from '../pipeline/stage.js';
import type { CreditWithdrawal } from './credit-withdrawal.js';

export interface CreditLeases {
  /** Reserves ctx's worst-case cost; sets ctx.cost.reservedMicros/leaseId, or returns ZN_ERR_CREDIT_EXHAUSTED. */
  preauthorise(ctx: PipelineContext): Rejection | undefined;
  /**
   * The request's open row is durable and it is about to go upstream: its reservation is marked so
   * (a restart counts it as spent from then on), or ZN_ERR_SPOOL_FULL when that cannot be written.
   */
  beforeForward(ctx: PipelineContext): Rejection | undefined;
  /**
   * Computes the actual cost from ctx.usage and prices into ctx.cost.costMicros; the reservation is
   * charged it (the rest released) once the record is committed (recordCommitted).
   */
  settle(ctx: PipelineContext): void;
  /** The request's record (carrying its cost) is committed: the lease is charged the cost now. */
  recordCommitted(ctx: PipelineContext): void;
  /**
   * The node's deletion (the control plane refused it NODE_DELETED: credit-withdrawal.ts), from
   * memory; the identify stage refuses every caller request with ZN_ERR_NODE_DELETED while it stands.
   * Absent or undefined: not deleted (billing off, stand-alone mode).
   */
  nodeDeletion?(): CreditWithdrawal | undefined;
}

/** Billing off: nothing reserved, cost computed by nobody (tests that are not about money). */
export const noCredit: CreditLeases = {
  preauthorise: () => undefined,
  beforeForward: () => undefined,
  settle: () => undefined,
  recordCommitted: () => undefined,
};
