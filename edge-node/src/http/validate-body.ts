// Validates a parsed request body with zod; failures become ZN_ERR_INVALID_REQUEST naming the field.
import type { z } from 'zod';
import { zenovaError } from '../errors.js';
import { describeIssues } from '../zod-issues.js';

export function validateBody<S extends z.ZodType>(schema: S, body: unknown): z.infer<S> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw zenovaError('ZN_ERR_INVALID_REQUEST', 'Invalid request: the body must be a JSON object.');
  }
  const result = schema.safeParse(body);
  if (!result.success) throw zenovaError('ZN_ERR_INVALID_REQUEST', `Invalid request: ${describeIssues(result.error).join('; ')}`);
  return result.data;
}
