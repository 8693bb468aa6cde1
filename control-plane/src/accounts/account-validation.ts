/** Account bodies: create `{name, status?, rateLimitPolicy?}`, patch `{status?, rateLimitPolicy?}`. */
import type { z } from 'zod';
import { UUID_PATTERN } from '../billing/ledger.js';
import { bodyObject, configNameSchema, enumOf, newConfigNameSchema } from '../config/config-fields.js';

export const ACCOUNT_STATUSES = ['active', 'suspended'] as const;
export type AccountStatus = (typeof ACCOUNT_STATUSES)[number];

/**
 * The billing routes take `{account}` as a name or an id, a name first (billing-views.ts
 * findAccount): a name shaped like a UUID could be another account's id and take its top-ups.
 */
export const ACCOUNT_NAME_NOT_UUID_RULE = 'must not be shaped like a UUID (accounts are also addressed by id)';
export const accountNameSchema = newConfigNameSchema.refine((value) => !UUID_PATTERN.test(value), { error: () => ACCOUNT_NAME_NOT_UUID_RULE });

export const accountCreateSchema = bodyObject({
  name: accountNameSchema,
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
