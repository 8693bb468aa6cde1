// Stage `spool` — the request's final record (spool/request-record-builder.ts, valid by
// construction), durable before the caller's last byte: the runner holds the end of the answer
// back until this resolves.
//
// A request refused before anything went upstream is no billable call: its record keeps no bodies
// (its text is the caller's, unchecked and, without a key, anyone's), except the masked body of an
// authenticated request an input guardrail blocked (audit evidence; bounded by the key's rate
// limits, which ran before) while the spool is not full. Only when the input rules ran over all of
// it: one refused before (text they cannot reach, a rule the node cannot apply) is unmasked. Without a valid key such a record is not
// written at all once the spool is at UNAUTHENTICATED_RECORD_FULLNESS of its quota, so callers
// without a key can never fill it and get keyed callers refused ZN_ERR_SPOOL_FULL (docs/spool.md).
//
// A deleted node's refusals (ZN_ERR_NODE_DELETED) are not recorded: its records are never delivered
// (the control plane refuses its batches), so they would only fill its spool; the request log line
// and the metrics count them.
import { holdsUnmaskedInput } from '../../guardrails/policy-engine.js';
import { buildRequestRecord } from '../../spool/request-record-builder.js';
import type { RequestSpool } from '../../spool/request-spool.js';
import type { PipelineContext } from '../context.js';
import type { Stage, StageResult } from '../stage.js';

/** Spool fullness (bytes over quota) from which refusals of callers without a valid key are not recorded. */
export const UNAUTHENTICATED_RECORD_FULLNESS = 0.9;
/** At most one warning about records not written per spool in this long. */
export const DROPPED_RECORDS_WARNING_MS = 60_000;

export const spoolStage: Stage = {
  name: 'spool',
  always: true,
  async run(ctx: PipelineContext): Promise<StageResult> {
    const spool = ctx.deps.spool;
    // Refused in identify: no open row, nothing reserved, and no record that could ever be delivered.
    if (ctx.outcome.errorCode === 'ZN_ERR_NODE_DELETED') return undefined;
    let keepBodies: boolean;
    if (ctx.attempts.length > 0 || ctx.outcome.status === 'ok') keepBodies = spool.keepsBodies();
    // No open row either (refused before preauthorise): a final record that deletes one is never dropped.
    else if (ctx.key === undefined && ctx.openRowDurable === null) {
      if (spool.fullness() >= UNAUTHENTICATED_RECORD_FULLNESS) {
        recordDropped(ctx, spool);
        return undefined;
      }
      keepBodies = false;
    } else keepBodies = ctx.outcome.errorCode === 'ZN_ERR_GUARDRAIL_BLOCKED' && !holdsUnmaskedInput(ctx) && spool.fullness() < 1;
    await spool.finalise(buildRequestRecord(ctx, { keepBodies }));
    // The record carrying the cost is durable: the credit lease is charged it now (billing/lease-credit.ts).
    ctx.deps.credit.recordCommitted(ctx);
    return undefined;
  },
};

/** Per spool: when the last warning was logged, and the records not written since. */
const droppedSince = new WeakMap<RequestSpool, { warnedAt: number; count: number }>();

/** Counts a record not written, and warns at most once per DROPPED_RECORDS_WARNING_MS (a flood must not flood the log). */
function recordDropped(ctx: PipelineContext, spool: RequestSpool): void {
  ctx.deps.metrics.recordDropped?.(ctx);
  const now = ctx.clock.monotonic();
  let dropped = droppedSince.get(spool);
  if (dropped === undefined) {
    dropped = { warnedAt: -Infinity, count: 0 };
    droppedSince.set(spool, dropped);
  }
  dropped.count += 1;
  if (now - dropped.warnedAt < DROPPED_RECORDS_WARNING_MS) return;
  ctx.deps.logger.warn(
    { dropped: dropped.count, fullness: Math.round(spool.fullness() * 100) / 100, code: ctx.outcome.errorCode },
    'the spool is nearly full: records of requests refused without a valid key are not written (zenova_node_spool_dropped_records_total)',
  );
  dropped.warnedAt = now;
  dropped.count = 0;
}
