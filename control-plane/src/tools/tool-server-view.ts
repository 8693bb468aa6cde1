/**
 * What the admin API shows of a tool server. The zod schema is the response schema: the secret is
 * never part of it, only `hasApiKey`.
 */
import { z } from 'zod';
import { etagOf } from '../http/if-match.js';

export const toolServerViewSchema = z.object({
  id: z.string(),
  name: z.string(),
  url: z.string(),
  hasApiKey: z.boolean(),
  timeoutMs: z.number(),
  callMicros: z.number(),
  createdAt: z.string(),
  updatedAt: z.string(),
});

export type ToolServerView = z.infer<typeof toolServerViewSchema>;

/** A row as the admin API reads it: whether a secret is set, never the sealed bytes. */
export interface ToolServerRow {
  id: string;
  name: string;
  url: string;
  hasApiKey: boolean;
  timeoutMs: number;
  /** bigint, as pg returns it. */
  callMicros: string;
  createdAt: Date;
  updatedAt: Date;
  /** A digest of the sealed key (null: none): never shown, only part of the ETag, so a new key changes it. */
  secretDigest: string | null;
}

export function toToolServerView(row: ToolServerRow): ToolServerView {
  return {
    id: row.id,
    name: row.name,
    url: row.url,
    hasApiKey: row.hasApiKey,
    timeoutMs: row.timeoutMs,
    callMicros: Number(row.callMicros),
    createdAt: row.createdAt.toISOString(),
    updatedAt: row.updatedAt.toISOString(),
  };
}

/** The tool server's ETag (http/if-match.ts): its view and its sealed key's digest. */
export function toolServerEtag(row: ToolServerRow): string {
  return etagOf({ toolServer: toToolServerView(row), secretDigest: row.secretDigest });
}
