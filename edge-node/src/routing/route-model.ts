/**
 * The route stage's work for model APIs, shared by every provider: the alias the caller asked for
 * (ctx.model) → ctx.route and ctx.plan (one weighted choice among the route's targets, then its
 * fallbacks in order; targets the node found failing moved last, target-health.ts). The key's allowed models are checked first, then existence, then the API
 * family (an Anthropic alias called through the OpenAI API and the reverse: ZN_ERR_MODEL_WRONG_API).
 * The same three checks run earlier too, in the surface stage (`checkModelAccess`), so a request
 * that can never succeed is refused before the rate limits count it.
 */
import type { RuntimeRoute, RuntimeTarget } from '../config/runtime-config.js';
import { isZenovaError } from '../errors.js';
import type { ApiKind, PipelineContext } from '../pipeline/context.js';
import { reject, rejectWith } from '../pipeline/stage.js';
import type { Rejection, StageResult } from '../pipeline/stage.js';
import { resolveRoute, shownAlias } from './model-router.js';
import { modelsApiFamily } from './models-api-family.js';

let random: () => number = Math.random;

/**
 * Replaces the randomness of the weighted choice (tests make it deterministic); returns a function
 * that restores the previous one. A module seam rather than a dependency: the choice is the only
 * user and the hot path should not carry it per request.
 */
export function setRouteRandomForTests(next: () => number): () => void {
  const previous = random;
  random = next;
  return () => {
    random = previous;
  };
}

export function routeModel(ctx: PipelineContext, family: RuntimeRoute['family']): StageResult {
  const config = ctx.config;
  if (config === undefined) return reject('ZN_ERR_NODE_NOT_READY');
  if (ctx.model === null) return reject('ZN_ERR_INVALID_REQUEST', 'Invalid request: model: a model is required.');
  const route = allowedRoute(ctx, config, ctx.model, family);
  if ('error' in route) return route;
  ctx.route = route;
  // Targets that keep failing go last for a while (target-health.ts).
  const plan = planFor(route);
  ctx.plan = ctx.deps.targetHealth.order(plan, ctx.clock.monotonic(), plan.length - route.fallbacks.length);
  return undefined;
}

/** The API family each model API speaks (the one its handler's route passes to routeModel). */
const FAMILY_OF_API: Readonly<Partial<Record<ApiKind, RuntimeRoute['family']>>> = {
  'chat.completions': 'openai',
  embeddings: 'openai',
  messages: 'anthropic',
};

/** The family the request's API speaks: the models API speaks either (models-api-family.ts). */
function apiFamilyOf(ctx: PipelineContext): RuntimeRoute['family'] | undefined {
  return ctx.api === 'models' ? modelsApiFamily(ctx.http.headers) : FAMILY_OF_API[ctx.api];
}

/**
 * Before the rate limits: the key may use the model asked for, the node serves it, and through this
 * API. A forbidden, unknown or wrong-API model gets its own 403/404/400 and spends none of the key's
 * or account's quota nor a concurrency slot (a 429 would make SDKs retry a request that cannot
 * succeed). No model named (the model list, or a body the route stage refuses): nothing to check.
 */
export function checkModelAccess(ctx: PipelineContext): StageResult {
  const family = apiFamilyOf(ctx);
  const config = ctx.config;
  if (family === undefined || config === undefined || ctx.model === null) return undefined;
  const route = allowedRoute(ctx, config, ctx.model, family);
  return 'error' in route ? route : undefined;
}

/** The route of `model` if the request's key may use it through `family`, else the rejection. */
export function allowedRoute(ctx: PipelineContext, config: NonNullable<PipelineContext['config']>, model: string, family: RuntimeRoute['family']): RuntimeRoute | Rejection {
  let route: RuntimeRoute;
  try {
    route = resolveRoute(config, model, ctx.key, family);
  } catch (err) {
    if (isZenovaError(err)) return rejectWith(err);
    throw err;
  }
  if (route.family === family) return route;
  const other = route.family === 'anthropic' ? 'the Anthropic Messages API (/v1/messages)' : 'the OpenAI API (/v1/chat/completions)';
  return reject('ZN_ERR_MODEL_WRONG_API', `The model ${shownAlias(route.alias)} is served through ${other} on this node.`);
}

/**
 * The attempt order: a weighted choice among the targets, then (when it fails) the other targets in
 * weighted order too, then the fallbacks in order. The targets all serve the alias: with two of
 * them at 1:1 and one down, sending half the requests to the dead one and failing them while the
 * other is up is what a load balancer must not do. A target of weight 0 (taken out of rotation)
 * is never tried.
 */
export function planFor(route: RuntimeRoute): RuntimeTarget[] {
  const remaining = route.targets.filter((t) => t.weight > 0);
  // A route whose weights are all 0 (the bundle refuses it; a hand-written config may not): its first target.
  if (remaining.length === 0 && route.targets[0] !== undefined) remaining.push(route.targets[0]);
  const plan: RuntimeTarget[] = [];
  while (remaining.length > 0) {
    const index = chooseWeighted(remaining);
    plan.push(...remaining.splice(index, 1));
  }
  plan.push(...route.fallbacks);
  return plan;
}

/** The index of a target drawn with probability proportional to its weight (the first if all are 0). */
function chooseWeighted(targets: readonly RuntimeTarget[]): number {
  if (targets.length <= 1) return 0;
  let total = 0;
  for (const target of targets) total += target.weight;
  if (total <= 0) return 0;
  let point = random() * total;
  for (let i = 0; i < targets.length; i += 1) {
    point -= targets[i]!.weight;
    if (point < 0) return i;
  }
  return targets.length - 1;
}

