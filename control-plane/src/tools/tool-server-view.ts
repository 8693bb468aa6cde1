/**
 * What the admin API shows of a tool server. The zod schema is the response schema: the secret is
 * never part of it, only `hasApiKey`.
 */
import { z } from 'zod';

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
