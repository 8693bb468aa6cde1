/** The API key create body and the list filter. */
import { z } from 'zod';
import { bodyObject, boundedText, configNameSchema, text } from '../config/config-fields.js';
import { MAX_NEWEST_FIRST_CURSOR_LENGTH } from '../http/list-cursors.js';
import { FINER_THAN_MS, MILLISECOND_RULE, isInstantInRange, listLimitSchema } from '../http/zod-schemas.js';
import { TOOL_SERVER_NAME_PATTERN, TOOL_SERVER_NAME_RULE } from '../tools/tool-server-validation.js';

export const MAX_ALLOWED_MODELS = 1000;
export const MAX_ALLOWED_TOOL_SERVERS = 1000;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export const allowedModelsSchema = z.array(configNameSchema, { error: () => 'must be an array of model aliases, or null for all' })
  .max(MAX_ALLOWED_MODELS, { error: () => `must list at most ${MAX_ALLOWED_MODELS} aliases` })
  .check((ctx) => {
    if (new Set(ctx.value).size !== ctx.value.length) {
      ctx.issues.push({ code: 'custom', input: ctx.value, message: 'must not list an alias twice' });
    }
  });

export const allowedToolServersSchema = z.array(text().regex(TOOL_SERVER_NAME_PATTERN, { error: () => TOOL_SERVER_NAME_RULE }), {
  error: () => 'must be an array of tool server names, or null for all',
})
  .max(MAX_ALLOWED_TOOL_SERVERS, { error: () => `must list at most ${MAX_ALLOWED_TOOL_SERVERS} tool servers` })
  .check((ctx) => {
    if (new Set(ctx.value).size !== ctx.value.length) {
      ctx.issues.push({ code: 'custom', input: ctx.value, message: 'must not list a tool server twice' });
    }
  });

const expiresAtSchema = z.iso.datetime({ offset: true, error: () => 'must be an ISO 8601 date-time with a time zone, e.g. 2027-01-01T00:00:00Z' })
  // A Date keeps milliseconds: finer digits would be cut without a word, so the key would expire at another instant than asked.
  .refine((s) => !FINER_THAN_MS.test(s), { error: () => MILLISECOND_RULE, abort: true })
  .transform((value) => new Date(value))
  .check((ctx) => {
    const ms = ctx.value.getTime();
    // 9999-12-31T23:59:59-12:00 is in year 10000 UTC, which the bundle's ISO times cannot carry.
    if (!isInstantInRange(ms)) ctx.issues.push({ code: 'custom', input: ctx.value, message: 'must be at most 9999-12-31T23:59:59.999Z (UTC)' });
    else if (ms <= Date.now()) ctx.issues.push({ code: 'custom', input: ctx.value, message: 'must be in the future' });
  });

export const apiKeyCreateSchema = bodyObject({
  /** The account's name or id, a name first (findAccount), as `GET /api-keys?account=` takes it. */
  account: configNameSchema,
  name: configNameSchema,
  /** Null or absent: every alias. */
  allowedModels: allowedModelsSchema.nullable().optional(),
  /** Null or absent: every tool server. Names need not exist yet, as allowedModels' aliases need not. */
  allowedToolServers: allowedToolServersSchema.nullable().optional(),
  expiresAt: expiresAtSchema.nullable().optional(),
  rateLimitPolicy: configNameSchema.nullable().optional(),
  guardrailPolicy: configNameSchema.nullable().optional(),
});

export type ApiKeyCreateInput = z.output<typeof apiKeyCreateSchema>;

export const DEFAULT_API_KEY_LIST_LIMIT = 1_000;
export const MAX_API_KEY_LIST_LIMIT = 10_000;

// Strict: an unknown parameter (`?acount=`) would otherwise list every account's keys.
export const apiKeyListQuerySchema = z.strictObject({
  account: configNameSchema.optional(),
  limit: listLimitSchema(MAX_API_KEY_LIST_LIMIT, DEFAULT_API_KEY_LIST_LIMIT),
  cursor: boundedText(MAX_NEWEST_FIRST_CURSOR_LENGTH).optional(),
});

export function isApiKeyId(value: string): boolean {
  return UUID.test(value);
}
