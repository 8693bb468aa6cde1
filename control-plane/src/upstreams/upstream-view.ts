/**
 * What the admin API shows of an upstream. The zod schema is the response schema: the secret is
 * never part of it, only `hasApiKey`.
 */
import { z } from 'zod';
import { etagOf } from '../http/if-match.js';
import { UPSTREAM_KINDS } from './upstream-validation.js';
import type { UpstreamKind } from './upstream-validation.js';

export const upstreamViewSchema = z.object({
  id: z.string(),
  name: z.string(),
  kind: z.enum(UPSTREAM_KINDS),
  baseUrl: z.string(),
  hasApiKey: z.boolean(),
  timeoutMs: z.number(),
  createdAt: z.string(),
});

export type UpstreamView = z.infer<typeof upstreamViewSchema>;

/** A row as the admin API reads it: whether a secret is set, never the sealed bytes. */
export interface UpstreamRow {
  id: string;
  name: string;
  kind: UpstreamKind;
  baseUrl: string;
  hasApiKey: boolean;
  timeoutMs: number;
  createdAt: Date;
  /** A digest of the sealed key (null: none): never shown, only part of the ETag, so a new key changes it. */
  secretDigest: string | null;
}

export function toUpstreamView(row: UpstreamRow): UpstreamView {
  return {
    id: row.id,
    name: row.name,
    kind: row.kind,
    baseUrl: row.baseUrl,
    hasApiKey: row.hasApiKey,
    timeoutMs: row.timeoutMs,
    createdAt: row.createdAt.toISOString(),
  };
}

/** The upstream's ETag (http/if-match.ts): its view and its sealed key's digest. */
export function upstreamEtag(row: UpstreamRow): string {
  return etagOf({ upstream: toUpstreamView(row), secretDigest: row.secretDigest });
}
