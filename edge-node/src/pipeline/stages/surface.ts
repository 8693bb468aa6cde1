// Stage `surface` — the node serves this surface (model: /v1/..., tools: /mcp/{server}).
import type { PipelineContext } from '../context.js';
import { reject } from '../stage.js';
import type { Stage, StageResult } from '../stage.js';

export const surfaceStage: Stage = {
  name: 'surface',
  always: false,
  run(ctx: PipelineContext): StageResult {
    if (ctx.config?.surfaces.has(ctx.surface) === true) return undefined;
    const what = ctx.surface === 'tools' ? 'the tools surface (/mcp)' : 'the model surface (/v1)';
    return reject('ZN_ERR_SURFACE_DISABLED', `This node does not serve ${what}.`);
  },
};
