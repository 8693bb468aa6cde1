// Turns zod issues into short messages that name the offending field (`upstreams[0].baseUrl: …`).
import type { z } from 'zod';

/** `['upstreams', 0, 'baseUrl']` → `upstreams[0].baseUrl`; the root is `(root)`. */
export function formatIssuePath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const part of path) {
    if (typeof part === 'number') out += `[${part}]`;
    else out += out === '' ? String(part) : `.${String(part)}`;
  }
  return out === '' ? '(root)' : out;
}

/** One line per issue, `path: message`, at most `max` of them (callers need the first, not all). */
export function describeIssues(error: z.ZodError, max = 3): string[] {
  // Each reason once: one rule can fail twice on one value.
  const lines = [...new Set(error.issues.slice(0, max).map((issue) => `${formatIssuePath(issue.path)}: ${issue.message}`))];
  if (error.issues.length > max) lines.push(`(${error.issues.length - max} more)`);
  return lines;
}
