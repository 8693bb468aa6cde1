// Stage `preauthorise` — reserve the worst-case cost from the account's credit lease (billing/),
// then open the request's spool row carrying the reservation: from here on it is "accepted". The
// forward stage waits for that row to be durable before it calls anyone.
import { isPriced } from '../../billing/request-cost.js';
import { isZenovaError } from '../../errors.js';
import { invalidField } from '../../providers/request-body.js';
import type { PipelineContext } from '../context.js';
import { rejectWith } from '../stage.js';
import type { Stage, StageResult } from '../stage.js';

/**
 * Billed above the price the node charges (OpenAI audio, Anthropic advisor tools and compaction, an
 * output limit the node does not set): refused when the request is billed at all; an unpriced
 * request (a local key, a model without a price) bills nothing. The surface stage asks first, so
 * such a request, which can never succeed, spends no rate-limit quota.
 */
export function billedAbovePriceRefusal(ctx: PipelineContext): StageResult {
  const billedAbovePrice = ctx.billedAbovePrice;
  if (billedAbovePrice !== undefined && isPriced(ctx)) return invalidField(billedAbovePrice.param, billedAbovePrice.reason);
  return undefined;
}

export const preauthoriseStage: Stage = {
  name: 'preauthorise',
  always: false,
  run(ctx: PipelineContext): StageResult {
    // Refused in the surface stage already; checked again before anything is reserved.
    const billedAbove = billedAbovePriceRefusal(ctx);
    if (billedAbove !== undefined) return billedAbove;
    // ctx.estimatedInputTokens includes the template's tokens, tools, schemas, images and documents (rate-limit stage).
    const refused = ctx.deps.credit.preauthorise(ctx);
    if (refused !== undefined) return refused;
    try {
      ctx.openRowDurable = ctx.deps.spool.open({
        requestId: ctx.requestId,
        receivedAt: ctx.receivedAt,
        keyId: ctx.key?.id ?? null,
        accountId: ctx.key?.accountId ?? null,
        model: ctx.model,
        reservedMicros: ctx.cost.reservedMicros,
        leaseId: ctx.cost.leaseId,
        // So a request cut off by a crash is recorded as what it was (interrupted-record.ts).
        api: ctx.api,
        surface: ctx.surface,
        stream: ctx.stream,
        configVersion: ctx.config?.version ?? null,
        priced: ctx.cost.priced,
        // undefined (not written to the row's JSON) when the caller sent none.
        clientRequestId: ctx.clientRequestId ?? undefined,
      }) ?? null;
    } catch (err) {
      // Not accepted after all: settle (always runs) releases the reservation with no usage.
      if (isZenovaError(err)) return rejectWith(err);
      throw err;
    }
    return undefined;
  },
};
