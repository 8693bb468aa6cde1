// Stage `identify` — the request's config snapshot must exist (ZN_ERR_NODE_NOT_READY), then the
// API's handler validates the body and sets model, stream, max tokens, input texts and estimates.
import { API_HANDLERS } from '../../providers/api-handlers.js';
import type { PipelineContext } from '../context.js';
import { reject } from '../stage.js';
import type { Stage, StageResult } from '../stage.js';

export const identifyStage: Stage = {
  name: 'identify',
  always: false,
  run(ctx: PipelineContext): StageResult {
    if (ctx.config === undefined) return reject('ZN_ERR_NODE_NOT_READY');
    return API_HANDLERS[ctx.api].identify(ctx);
  },
};
