// Validates a parsed request body with zod; failures become ZN_ERR_INVALID_REQUEST naming the field.
import type { z } from 'zod';
import { reject } from '../pipeline/stage.js';
import type { Rejection } from '../pipeline/stage.js';
import { describeIssues, formatIssuePath } from '../zod-issues.js';

export type Validated<T> = { ok: true; value: T } | { ok: false; rejection: Rejection };

export function validateBody<S extends z.ZodType>(schema: S, body: unknown): Validated<z.infer<S>> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    return { ok: false, rejection: reject('ZN_ERR_INVALID_REQUEST', 'Invalid request: the body must be a JSON object.') };
  }
  const result = schema.safeParse(body);
  if (!result.success) {
    // The first offending field is OpenAI's `param` (`messages[0].content`), as its API names it.
    const first = result.error.issues[0];
    const param = first === undefined || first.path.length === 0 ? undefined : formatIssuePath(first.path);
    return { ok: false, rejection: reject('ZN_ERR_INVALID_REQUEST', `Invalid request: ${describeIssues(result.error).join('; ')}`, param === undefined ? undefined : { param }) };
  }
  return { ok: true, value: result.data };
}

/** A field refused by a check made by hand, in the same words as validateBody's (`param` names it). */
export function invalidField(param: string, reason: string): Rejection {
  return reject('ZN_ERR_INVALID_REQUEST', `Invalid request: ${param}: ${reason}`, { param });
}
