/**
 * Tool server bodies: `PUT /tool-servers/{name}` `{url, apiKey?, timeoutMs?, callMicros?}`. The
 * name (a path segment on every node, /mcp/{name}) follows the bundle's rule, stricter than other
 * config names. The apiKey's rules never quote it back.
 */
import type { z } from 'zod';
import { bodyObject, integerIn, text } from '../config/config-fields.js';
import { toolServerSchema } from '../../../proto/src/index.js';
import { baseUrlShapeProblem, dotSegmentProblem, urlCharactersProblem, withLowerCaseScheme } from '../http/base-url-rules.js';
import { upstreamApiKeySchema } from '../upstreams/upstream-validation.js';

export const TOOL_SERVER_NAME_PATTERN = /^[a-z0-9][a-z0-9-]{0,62}$/;
export const TOOL_SERVER_NAME_RULE = 'must be 1 to 63 lower-case letters, digits and -, starting with a letter or digit';
export const TOOL_SERVER_TIMEOUT_MS = { min: 100, max: 600_000, default: 60_000 } as const;
const MAX_URL_CHARS = 2048;

/** The rule an MCP endpoint URL breaks, or undefined. Unlike a base URL it is called as is (no path appended). */
export function toolServerUrlProblem(value: string): string | undefined {
  if (value.length > MAX_URL_CHARS) return `must be at most ${MAX_URL_CHARS} characters`;
  const characters = urlCharactersProblem(value);
  if (characters) return characters;
  if (!/^https?:\/\//i.test(value)) return 'must start with http:// or https://';
  // A key in the URL would be returned by the API and logged: it belongs in apiKey.
  const shape = baseUrlShapeProblem(value, ' (put the key in apiKey)');
  if (shape) return shape;
  // Nodes call the path the URL parser resolves, without dot segments: refuse them as for a base URL.
  const dots = dotSegmentProblem(value);
  if (dots) return dots;
  // A row the bundle schema refuses would break every node's next bundle.
  if (!toolServerSchema.shape.url.safeParse(value).success) return 'must be a valid http or https URL';
  return undefined;
}

const urlSchema = text()
  .check((ctx) => {
    const problem = toolServerUrlProblem(ctx.value);
    if (problem) ctx.issues.push({ code: 'custom', input: ctx.value, message: problem });
  })
  .transform(withLowerCaseScheme);

export const toolServerPutSchema = bodyObject({
  url: urlSchema,
  /** Omitted: keep the stored key (none for a new server); null: remove it. Same rules as an upstream's key. */
  apiKey: upstreamApiKeySchema.nullable().optional(),
  timeoutMs: integerIn(TOOL_SERVER_TIMEOUT_MS.min, TOOL_SERVER_TIMEOUT_MS.max).default(TOOL_SERVER_TIMEOUT_MS.default),
  /** Integer micro-units per call; a float or a string is refused, never rounded. */
  callMicros: integerIn(0, Number.MAX_SAFE_INTEGER).default(0),
});

export type ToolServerInput = z.output<typeof toolServerPutSchema>;
