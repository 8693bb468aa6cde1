/** The rate-limit policy body: a name and at least one limit, bounded as the bundle schema bounds them. */
import type { z } from 'zod';
import { bodyObject, integerIn, newConfigNameSchema } from '../config/config-fields.js';

export const RATE_LIMIT_BOUNDS = {
  requestsPerMinute: { min: 1, max: 10_000_000 },
  tokensPerMinute: { min: 1, max: 10_000_000_000 },
  concurrentRequests: { min: 1, max: 100_000 },
} as const;

const limit = (key: keyof typeof RATE_LIMIT_BOUNDS): z.ZodOptional<z.ZodNullable<z.ZodNumber>> =>
  integerIn(RATE_LIMIT_BOUNDS[key].min, RATE_LIMIT_BOUNDS[key].max).nullable().optional();

export const rateLimitPolicyCreateSchema = bodyObject({
  name: newConfigNameSchema,
  requestsPerMinute: limit('requestsPerMinute'),
  tokensPerMinute: limit('tokensPerMinute'),
  concurrentRequests: limit('concurrentRequests'),
}).check((ctx) => {
  const { requestsPerMinute, tokensPerMinute, concurrentRequests } = ctx.value;
  if (requestsPerMinute == null && tokensPerMinute == null && concurrentRequests == null) {
    ctx.issues.push({
      code: 'custom',
      input: ctx.value,
      message: 'must set at least one of requestsPerMinute, tokensPerMinute, concurrentRequests',
    });
  }
});

export type RateLimitPolicyInput = z.output<typeof rateLimitPolicyCreateSchema>;
