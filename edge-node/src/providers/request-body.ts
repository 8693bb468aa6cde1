// Validates a parsed request body with zod; failures become ZN_ERR_INVALID_REQUEST naming the field.
import type { z } from 'zod';
import { reject } from '../pipeline/stage.js';
import type { Rejection } from '../pipeline/stage.js';
import { describeIssues } from '../zod-issues.js';

export type Validated<T> = { ok: true; value: T } | { ok: false; rejection: Rejection };

export function validateBody<S extends z.ZodType>(schema: S, body: unknown): Validated<z.infer<S>> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    return { ok: false, rejection: reject('ZN_ERR_INVALID_REQUEST', 'Invalid request: the body must be a JSON object.') };
  }
  const result = schema.safeParse(body);
  if (!result.success) return { ok: false, rejection: reject('ZN_ERR_INVALID_REQUEST', `Invalid request: ${describeIssues(result.error).join('; ')}`) };
  return { ok: true, value: result.data };
}
