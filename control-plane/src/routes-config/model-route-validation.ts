/**
 * Model route bodies: create `{alias, targets, fallbacks?, timeoutMs?, retries?}` and replace (the
 * same without alias). Bounds match the bundle schema; that the named upstreams exist and share one
 * API family is checked against the database (model-route-store.ts).
 */
import { z } from 'zod';
import { bodyObject, configNameSchema, integerIn, newConfigNameSchema, text } from '../config/config-fields.js';

export const ROUTE_LIMITS = {
  targets: 32,
  fallbacks: 32,
  weight: { min: 0, max: 1000, default: 1 },
  timeoutMs: { min: 100, max: 600_000, default: 60_000 },
  retries: { min: 0, max: 5, default: 0 },
} as const;
const MAX_MODEL_CHARS = 256;

/** The upstream's own model name: anything printable without spaces. */
const upstreamModelSchema = text().check((ctx) => {
  if (ctx.value.length === 0 || ctx.value.length > MAX_MODEL_CHARS || !/^[\x21-\x7e]+$/.test(ctx.value)) {
    ctx.issues.push({ code: 'custom', input: ctx.value, message: `must be 1 to ${MAX_MODEL_CHARS} printable characters without spaces` });
  }
});

const objectError = { error: (issue: z.core.$ZodRawIssue) => (issue.code === 'invalid_type' ? 'must be an object' : undefined) };
const arrayError = (what: string) => ({ error: (issue: z.core.$ZodRawIssue) => (issue.input === undefined ? 'is required' : `must be an array of ${what}`) });

const targetSchema = z.strictObject({
  upstream: configNameSchema,
  model: upstreamModelSchema,
  weight: integerIn(ROUTE_LIMITS.weight.min, ROUTE_LIMITS.weight.max).default(ROUTE_LIMITS.weight.default),
}, objectError);

const fallbackSchema = z.strictObject({ upstream: configNameSchema, model: upstreamModelSchema }, objectError);

/** Refuses a list naming one upstream and model twice: a repeat would double a target's weight or a failover attempt. */
function noRepeatedPair(what: 'target' | 'fallback') {
  return (ctx: z.core.ParsePayload<ReadonlyArray<{ upstream: string; model: string }>>): void => {
    const seen = new Map<string, number>();
    for (const [index, { upstream, model }] of ctx.value.entries()) {
      const key = JSON.stringify([upstream, model]);
      const earlier = seen.get(key);
      if (earlier !== undefined) {
        ctx.issues.push({
          code: 'custom',
          input: ctx.value,
          message: `must not list a ${what} twice: [${index}] repeats [${earlier}] (upstream '${upstream}', model '${model}')`,
        });
        return;
      }
      seen.set(key, index);
    }
  };
}

const routeShape = {
  targets: z.array(targetSchema, arrayError('targets'))
    .min(1, { error: () => 'must list at least one target' })
    .max(ROUTE_LIMITS.targets, { error: () => `must list at most ${ROUTE_LIMITS.targets} targets` })
    .check((ctx) => {
      if (ctx.value.length > 0 && !ctx.value.some((t) => t.weight > 0)) {
        ctx.issues.push({ code: 'custom', input: ctx.value, message: 'must have at least one target with a weight above 0' });
      }
    })
    .check(noRepeatedPair('target')),
  fallbacks: z.array(fallbackSchema, arrayError('fallbacks'))
    .max(ROUTE_LIMITS.fallbacks, { error: () => `must list at most ${ROUTE_LIMITS.fallbacks} fallbacks` })
    .check(noRepeatedPair('fallback'))
    .default([]),
  timeoutMs: integerIn(ROUTE_LIMITS.timeoutMs.min, ROUTE_LIMITS.timeoutMs.max).default(ROUTE_LIMITS.timeoutMs.default),
  retries: integerIn(ROUTE_LIMITS.retries.min, ROUTE_LIMITS.retries.max).default(ROUTE_LIMITS.retries.default),
};

export const modelRouteCreateSchema = bodyObject({ alias: newConfigNameSchema, ...routeShape });
export const modelRouteReplaceSchema = bodyObject(routeShape);

export type ModelRouteCreateInput = z.output<typeof modelRouteCreateSchema>;
export type ModelRouteSpec = z.output<typeof modelRouteReplaceSchema>;
export type RouteTarget = ModelRouteSpec['targets'][number];
export type RouteFallback = ModelRouteSpec['fallbacks'][number];
