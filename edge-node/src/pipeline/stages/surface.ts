// Stage `surface` — the node serves this surface (model: /v1/..., tools: /mcp/{server}), and on the
// model surface the model asked for: the key may use it, it exists, through this API; on the tools
// surface the tool server named: the key may use it, it exists. These are checked here, before
// rate-limit, so a request that can never succeed spends no quota (the route stage checks them
// again when it routes); for the same reason a request the key's guardrail policy cannot check
// (ZN_ERR_GUARDRAIL_UNCHECKABLE) gets guardrails-in's refusal here (upFrontGuardrailRefusal), and a
// priced one asking for what is billed above the node's price preauthorise's (billedAbovePriceRefusal).
import { checkModelAccess } from '../../routing/route-model.js';
import { checkToolServerAccess } from '../../routing/route-tool-server.js';
import type { PipelineContext } from '../context.js';
import { upFrontGuardrailRefusal } from './guardrails-in.js';
import { billedAbovePriceRefusal } from './preauthorise.js';
import { reject } from '../stage.js';
import type { Stage, StageResult } from '../stage.js';

export const surfaceStage: Stage = {
  name: 'surface',
  always: false,
  run(ctx: PipelineContext): StageResult {
    if (ctx.config?.surfaces.has(ctx.surface) !== true) {
      const what = ctx.surface === 'tools' ? 'the tools surface (/mcp)' : 'the model surface (/v1)';
      return reject('ZN_ERR_SURFACE_DISABLED', `This node does not serve ${what}.`);
    }
    return (ctx.surface === 'model' ? checkModelAccess(ctx) : checkToolServerAccess(ctx)) ?? upFrontGuardrailRefusal(ctx) ?? billedAbovePriceRefusal(ctx);
  },
};
