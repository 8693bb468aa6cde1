/**
 * Upstream bodies: create `{name, kind, baseUrl, apiKey?, timeoutMs?}`, patch `{baseUrl?, apiKey?,
 * timeoutMs?}`. The apiKey's rules never quote it back.
 */
import { z } from 'zod';
import { bodyObject, enumOf, integerIn, newConfigNameSchema, text } from '../config/config-fields.js';
import { baseUrlShapeProblem, dotSegmentProblem, urlCharactersProblem, withLowerCaseScheme, withoutTrailingSlash } from '../http/base-url-rules.js';

export const UPSTREAM_KINDS = ['openai', 'anthropic', 'openai-compatible'] as const;
export type UpstreamKind = (typeof UPSTREAM_KINDS)[number];

/**
 * The API family an upstream speaks: a node serves an alias on one family's APIs only, so every
 * upstream of one route must share it (model-route-store.ts). That is also why `kind` cannot be
 * patched: a route could not keep its one family.
 */
export type UpstreamApiFamily = 'openai' | 'anthropic';
export const upstreamApiFamily = (kind: UpstreamKind): UpstreamApiFamily => (kind === 'anthropic' ? 'anthropic' : 'openai');
export const API_FAMILY_NAMES: Readonly<Record<UpstreamApiFamily, string>> = { openai: 'OpenAI-compatible', anthropic: 'Anthropic' };

export const UPSTREAM_TIMEOUT_MS = { min: 100, max: 600_000, default: 60_000 } as const;
const MAX_BASE_URL_CHARS = 2048;
const MAX_SECRET_CHARS = 4096;

/** The rule a base URL breaks, or undefined. */
export function baseUrlProblem(value: string): string | undefined {
  if (value.length > MAX_BASE_URL_CHARS) return `must be at most ${MAX_BASE_URL_CHARS} characters`;
  const characters = urlCharactersProblem(value);
  if (characters) return characters;
  if (!/^https?:\/\//i.test(value)) return 'must start with http:// or https://';
  // A key in the URL would be returned by the API and logged: it belongs in apiKey.
  const shape = baseUrlShapeProblem(value, ' (put the key in apiKey)');
  if (shape) return shape;
  return dotSegmentProblem(value);
}

export const baseUrlSchema = text()
  .check((ctx) => {
    const problem = baseUrlProblem(ctx.value);
    if (problem) ctx.issues.push({ code: 'custom', input: ctx.value, message: problem });
  })
  .transform((value) => withoutTrailingSlash(withLowerCaseScheme(value)));

const secretRule = `must be 1 to ${MAX_SECRET_CHARS} printable characters without spaces`;
export const upstreamApiKeySchema = z.string({ error: () => 'must be a string' })
  // A pasted key often carries a trailing newline.
  .transform((value) => value.trim())
  .check((ctx) => {
    if (ctx.value.length === 0 || ctx.value.length > MAX_SECRET_CHARS || !/^[\x21-\x7e]+$/.test(ctx.value)) {
      // `input` is required by zod; the message (all a client sees) does not quote it.
      ctx.issues.push({ code: 'custom', input: '', message: secretRule });
    }
  });

const timeoutMsSchema = integerIn(UPSTREAM_TIMEOUT_MS.min, UPSTREAM_TIMEOUT_MS.max);

export const upstreamCreateSchema = bodyObject({
  name: newConfigNameSchema,
  kind: enumOf(UPSTREAM_KINDS),
  baseUrl: baseUrlSchema,
  apiKey: upstreamApiKeySchema.optional(),
  timeoutMs: timeoutMsSchema.default(UPSTREAM_TIMEOUT_MS.default),
});

export type UpstreamCreateInput = z.output<typeof upstreamCreateSchema>;

/** No `kind`: a route's upstreams must keep sharing one API family (upstreamApiFamily). */
export const upstreamPatchSchema = bodyObject({
  baseUrl: baseUrlSchema.optional(),
  /** null removes the key. */
  apiKey: upstreamApiKeySchema.nullable().optional(),
  timeoutMs: timeoutMsSchema.optional(),
}).check((ctx) => {
  const { baseUrl, apiKey, timeoutMs } = ctx.value;
  if (baseUrl === undefined && apiKey === undefined && timeoutMs === undefined) {
    ctx.issues.push({ code: 'custom', input: {}, message: 'must change at least one of baseUrl, apiKey, timeoutMs' });
  }
});

export type UpstreamPatch = z.output<typeof upstreamPatchSchema>;
