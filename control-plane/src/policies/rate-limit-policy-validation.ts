/**
 * Rate-limit policy bodies: create `{name, requestsPerMinute?, tokensPerMinute?, concurrentRequests?}`
 * and replace (the same without name, which is in the path). At least one limit, each bounded as
 * the bundle schema bounds it.
 */
import type { z } from 'zod';
import { bodyObject, integerIn, newConfigNameSchema } from '../config/config-fields.js';

export const RATE_LIMIT_BOUNDS = {
  requestsPerMinute: { min: 1, max: 10_000_000 },
  tokensPerMinute: { min: 1, max: 10_000_000_000 },
  concurrentRequests: { min: 1, max: 100_000 },
} as const;

const limit = (key: keyof typeof RATE_LIMIT_BOUNDS): z.ZodOptional<z.ZodNullable<z.ZodNumber>> =>
  integerIn(RATE_LIMIT_BOUNDS[key].min, RATE_LIMIT_BOUNDS[key].max).nullable().optional();

const limitsShape = {
  requestsPerMinute: limit('requestsPerMinute'),
  tokensPerMinute: limit('tokensPerMinute'),
  concurrentRequests: limit('concurrentRequests'),
};

type Limits = z.output<z.ZodObject<typeof limitsShape>>;

/** A policy without a limit would limit nothing: refused on create and replace alike. */
function requireALimit(ctx: z.core.ParsePayload<Limits>): void {
  const { requestsPerMinute, tokensPerMinute, concurrentRequests } = ctx.value;
  if (requestsPerMinute == null && tokensPerMinute == null && concurrentRequests == null) {
    ctx.issues.push({
      code: 'custom',
      input: ctx.value,
      message: 'must set at least one of requestsPerMinute, tokensPerMinute, concurrentRequests',
    });
  }
}

export const rateLimitPolicyCreateSchema = bodyObject({ name: newConfigNameSchema, ...limitsShape }).check(requireALimit);
export const rateLimitPolicyReplaceSchema = bodyObject(limitsShape).check(requireALimit);

export type RateLimitPolicyInput = z.output<typeof rateLimitPolicyCreateSchema>;
export type RateLimitPolicySpec = z.output<typeof rateLimitPolicyReplaceSchema>;
