/** Account bodies: create `{name, status?, rateLimitPolicy?}`, patch `{status?, rateLimitPolicy?}`. */
import type { z } from 'zod';
import { bodyObject, configNameSchema, enumOf } from '../config/config-fields.js';

export const ACCOUNT_STATUSES = ['active', 'suspended'] as const;
export type AccountStatus = (typeof ACCOUNT_STATUSES)[number];

export const accountCreateSchema = bodyObject({
  name: configNameSchema,
  status: enumOf(ACCOUNT_STATUSES).default('active'),
  /** A rate-limit policy's name; null or absent: none. */
  rateLimitPolicy: configNameSchema.nullable().optional(),
});

export type AccountCreateInput = z.output<typeof accountCreateSchema>;

export const accountPatchSchema = bodyObject({
  status: enumOf(ACCOUNT_STATUSES).optional(),
  rateLimitPolicy: configNameSchema.nullable().optional(),
}).check((ctx) => {
  if (ctx.value.status === undefined && ctx.value.rateLimitPolicy === undefined) {
    ctx.issues.push({ code: 'custom', input: ctx.value, message: 'must change at least one of status, rateLimitPolicy' });
  }
});

export type AccountPatch = z.output<typeof accountPatchSchema>;
