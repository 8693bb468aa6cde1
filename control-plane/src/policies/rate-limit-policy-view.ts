/** What the admin API shows of a rate-limit policy; the zod schema is the response schema. */
import { z } from 'zod';
import { etagOf } from '../http/if-match.js';

export const rateLimitPolicyViewSchema = z.object({
  id: z.string(),
  name: z.string(),
  requestsPerMinute: z.number().nullable(),
  tokensPerMinute: z.number().nullable(),
  concurrentRequests: z.number().nullable(),
  createdAt: z.string(),
});

export type RateLimitPolicyView = z.infer<typeof rateLimitPolicyViewSchema>;

export interface RateLimitPolicyRow {
  id: string;
  name: string;
  requestsPerMinute: number | null;
  /** bigint: pg returns it as a string. */
  tokensPerMinute: string | null;
  concurrentRequests: number | null;
  createdAt: Date;
}

export function toRateLimitPolicyView(row: RateLimitPolicyRow): RateLimitPolicyView {
  return {
    id: row.id,
    name: row.name,
    requestsPerMinute: row.requestsPerMinute,
    tokensPerMinute: row.tokensPerMinute === null ? null : Number(row.tokensPerMinute),
    concurrentRequests: row.concurrentRequests,
    createdAt: row.createdAt.toISOString(),
  };
}

/** The policy's ETag (http/if-match.ts): a hash of its view, which is all it stores. */
export function rateLimitPolicyEtag(row: RateLimitPolicyRow): string {
  return etagOf({ rateLimitPolicy: toRateLimitPolicyView(row) });
}
