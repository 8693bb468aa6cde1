// The `models` API: GET /v1/models and /v1/models/{id}, answered by the node itself (no upstream
// call): only the aliases the caller's key may use and this API serves (not Anthropic ones).
import type { PipelineContext } from '../../pipeline/context.js';
import { reject, rejectWith } from '../../pipeline/stage.js';
import type { StageResult } from '../../pipeline/stage.js';
import { isZenovaError } from '../../errors.js';
import { listRoutes, resolveRoute, shownAlias } from '../../routing/model-router.js';
import type { ApiHandler } from '../api-handler.js';
import { NO_TEXTS } from '../text-slot.js';

/** `created` for every alias, in Unix seconds: when this node process started (aliases have no birthday). */
const MODELS_CREATED = Math.floor(Date.now() / 1000);

function modelObject(id: string): Record<string, unknown> {
  return { id, object: 'model', created: MODELS_CREATED, owned_by: 'zenova' };
}

export const modelsApi: ApiHandler = {
  api: 'models',
  surface: 'model',
  identify(ctx: PipelineContext): StageResult {
    // `/v1/models/*` (openai.routes.ts): the rest of the path, decoded, is the id; absent for the list.
    const id = ctx.http.params['*'];
    if (id === '') {
      // `GET /v1/models/`: not an alias named "", and not the list either (the SDKs never send it).
      return reject('ZN_ERR_MODEL_NOT_FOUND', 'No model id in the path: GET /v1/models/{id} names one, GET /v1/models lists them.');
    }
    ctx.model = id ?? null;
    return undefined;
  },
  route(ctx: PipelineContext): StageResult {
    if (ctx.model === null || ctx.config === undefined) return undefined;
    try {
      ctx.route = resolveRoute(ctx.config, ctx.model, ctx.key);
    } catch (err) {
      if (isZenovaError(err)) return rejectWith(err);
      throw err;
    }
    if (ctx.route.family !== 'openai') {
      return reject('ZN_ERR_MODEL_WRONG_API', `The model ${shownAlias(ctx.route.alias)} is served through the Anthropic Messages API (/v1/messages) on this node.`);
    }
    return undefined;
  },
  async forward(ctx: PipelineContext): Promise<StageResult> {
    const body =
      ctx.route !== undefined
        ? modelObject(ctx.route.alias)
        : { object: 'list', data: ctx.config === undefined ? [] : listRoutes(ctx.config, ctx.key)
                .filter((route) => route.family === 'openai')
                .map((route) => modelObject(route.alias)) };
    ctx.reply = { kind: 'json', status: 200, headers: {}, body, texts: NO_TEXTS };
    return undefined;
  },
};
