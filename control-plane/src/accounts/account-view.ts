/** What the admin API shows of an account; the zod schema is the response schema. */
import { z } from 'zod';
import { etagOf } from '../http/if-match.js';
import { ACCOUNT_STATUSES } from './account-validation.js';
import type { AccountStatus } from './account-validation.js';

export const accountViewSchema = z.object({
  id: z.string(),
  name: z.string(),
  status: z.enum(ACCOUNT_STATUSES),
  rateLimitPolicy: z.string().nullable(),
  createdAt: z.string(),
});

export type AccountView = z.infer<typeof accountViewSchema>;

export interface AccountRow {
  id: string;
  name: string;
  status: AccountStatus;
  /** The policy's name. */
  rateLimitPolicy: string | null;
  createdAt: Date;
}

export function toAccountView(row: AccountRow): AccountView {
  return { id: row.id, name: row.name, status: row.status, rateLimitPolicy: row.rateLimitPolicy, createdAt: row.createdAt.toISOString() };
}

/** The account's ETag (http/if-match.ts): a hash of its view (its status and rate-limit policy). */
export function accountEtag(row: AccountRow): string {
  return etagOf({ account: toAccountView(row) });
}
