// Stage `route` — where the call goes: the API's handler sets ctx.route + ctx.plan (models) or ctx.toolServer.
import { API_HANDLERS } from '../../providers/api-handlers.js';
import type { PipelineContext } from '../context.js';
import type { Stage, StageResult } from '../stage.js';

export const routeStage: Stage = {
  name: 'route',
  always: false,
  run(ctx: PipelineContext): StageResult {
    return API_HANDLERS[ctx.api].route(ctx);
  },
};
