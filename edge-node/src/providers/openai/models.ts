// The `models` API: GET /v1/models and /v1/models/{id}, answered by the node itself (no upstream
// call): only the aliases the caller's key may use of the family the request speaks. OpenAI's
// shape and the OpenAI-compatible aliases; to a request carrying `anthropic-version` (the
// Anthropic SDK's models.list() and .retrieve()), Anthropic's Models API shape, Anthropic's error
// shape and the aliases /v1/messages serves (models-api-family.ts).
import type { PipelineContext } from '../../pipeline/context.js';
import { reject } from '../../pipeline/stage.js';
import type { StageResult } from '../../pipeline/stage.js';
import type { ZenovaError } from '../../errors.js';
import { listRoutes } from '../../routing/model-router.js';
import { modelsApiFamily } from '../../routing/models-api-family.js';
import { allowedRoute } from '../../routing/route-model.js';
import { anthropicErrorBodyOf } from '../anthropic/anthropic-errors.js';
import { anthropicModelInfo, anthropicModelPage } from '../anthropic/model-infos.js';
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
    const route = allowedRoute(ctx, ctx.config, ctx.model, modelsApiFamily(ctx.http.headers));
    if ('error' in route) return route;
    ctx.route = route;
    return undefined;
  },
  async forward(ctx: PipelineContext): Promise<StageResult> {
    const family = modelsApiFamily(ctx.http.headers);
    const aliases = ctx.route !== undefined ? [ctx.route.alias] : ctx.config === undefined ? [] : listRoutes(ctx.config, ctx.key).filter((route) => route.family === family).map((route) => route.alias);
    let body: unknown;
    if (family === 'anthropic') {
      const models = aliases.map((alias) => anthropicModelInfo(alias, MODELS_CREATED));
      body = ctx.route !== undefined ? models[0] : anthropicModelPage(models);
    } else {
      body = ctx.route !== undefined ? modelObject(ctx.route.alias) : { object: 'list', data: aliases.map(modelObject) };
    }
    ctx.reply = { kind: 'json', status: 200, headers: {}, body, texts: NO_TEXTS };
    return undefined;
  },
  errorBody(error: ZenovaError, ctx: PipelineContext): unknown {
    return modelsApiFamily(ctx.http.headers) === 'anthropic' ? anthropicErrorBodyOf(error) : error.toBody();
  },
};
