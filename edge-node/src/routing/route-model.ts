/**
 * The route stage's work for model APIs, shared by every provider: the alias the caller asked for
 * (ctx.model) → ctx.route and ctx.plan (one weighted choice among the route's targets, then its
 * fallbacks in order). The key's allowed models are checked first, then existence, then the API
 * family (an Anthropic alias called through the OpenAI API and the reverse: ZN_ERR_MODEL_WRONG_API).
 */
import type { RuntimeRoute, RuntimeTarget } from '../config/runtime-config.js';
import { isZenovaError } from '../errors.js';
import type { PipelineContext } from '../pipeline/context.js';
import { reject, rejectWith } from '../pipeline/stage.js';
import type { StageResult } from '../pipeline/stage.js';
import { resolveRoute, shownAlias } from './model-router.js';

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
  let route: RuntimeRoute;
  try {
    route = resolveRoute(config, ctx.model, ctx.key);
  } catch (err) {
    if (isZenovaError(err)) return rejectWith(err);
    throw err;
  }
  if (route.family !== family) {
    const other = route.family === 'anthropic' ? 'the Anthropic Messages API (/v1/messages)' : 'the OpenAI API (/v1/chat/completions)';
    return reject('ZN_ERR_MODEL_WRONG_API', `The model ${shownAlias(route.alias)} is served through ${other} on this node.`);
  }
  ctx.route = route;
  ctx.plan = planFor(route);
  return undefined;
}

/** The chosen weighted target first, then the fallbacks. */
export function planFor(route: RuntimeRoute): RuntimeTarget[] {
  const chosen = chooseWeighted(route.targets);
  return chosen === undefined ? [...route.fallbacks] : [chosen, ...route.fallbacks];
}

function chooseWeighted(targets: readonly RuntimeTarget[]): RuntimeTarget | undefined {
  if (targets.length <= 1) return targets[0];
  let total = 0;
  for (const target of targets) total += target.weight;
  let point = random() * total;
  for (const target of targets) {
    point -= target.weight;
    if (point < 0) return target;
  }
  return targets[targets.length - 1];
}
