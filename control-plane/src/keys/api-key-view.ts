/**
 * What the admin API shows of an API key. The zod schema is the response schema, so neither the
 * hash nor anything else beyond it can leave by accident; the secret is returned only by create.
 */
import { z } from 'zod';

// `expired`: past its expiresAt and not revoked (nodes refuse it as ZN_ERR_API_KEY_EXPIRED).
export const API_KEY_STATUSES = ['active', 'expired', 'revoked'] as const;
export type ApiKeyStatus = (typeof API_KEY_STATUSES)[number];

/**
 * A key's status as the API shows it: revoked wins, then expired by the database's clock — the
 * clock the policies' in-use checks judge expiry by (API_KEY_IN_USE_SQL), so a key shown expired is
 * never counted as holding a policy. The stored column only knows active and revoked.
 */
export const API_KEY_STATUS_SQL = `case when k.status = 'revoked' then 'revoked' when k.expires_at <= now() then 'expired' else 'active' end`;

/** A key nodes still accept (neither revoked nor expired), for `where` clauses over `api_keys k`. */
export const API_KEY_IN_USE_SQL = `(k.status = 'active' and (k.expires_at is null or k.expires_at > now()))`;

export const apiKeyViewSchema = z.object({
  id: z.string(),
  account: z.string(),
  name: z.string(),
  prefix: z.string(),
  allowedModels: z.array(z.string()).nullable(),
  allowedToolServers: z.array(z.string()).nullable(),
  expiresAt: z.string().nullable(),
  status: z.enum(API_KEY_STATUSES),
  rateLimitPolicy: z.string().nullable(),
  guardrailPolicy: z.string().nullable(),
  createdAt: z.string(),
  revokedAt: z.string().nullable(),
});

export type ApiKeyView = z.infer<typeof apiKeyViewSchema>;

export interface ApiKeyRow {
  id: string;
  /** The account's name. */
  account: string;
  name: string;
  prefix: string;
  allowedModels: string[] | null;
  allowedToolServers: string[] | null;
  expiresAt: Date | null;
  status: ApiKeyStatus;
  rateLimitPolicy: string | null;
  guardrailPolicy: string | null;
  createdAt: Date;
  revokedAt: Date | null;
}

export function toApiKeyView(row: ApiKeyRow): ApiKeyView {
  return {
    id: row.id,
    account: row.account,
    name: row.name,
    prefix: row.prefix,
    allowedModels: row.allowedModels,
    allowedToolServers: row.allowedToolServers,
    expiresAt: row.expiresAt?.toISOString() ?? null,
    status: row.status,
    rateLimitPolicy: row.rateLimitPolicy,
    guardrailPolicy: row.guardrailPolicy,
    createdAt: row.createdAt.toISOString(),
    revokedAt: row.revokedAt?.toISOString() ?? null,
  };
}
