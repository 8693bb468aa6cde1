// Stage `guardrails-in` — the input rules of the key's guardrail policy over the caller's text:
// block (nothing is forwarded), mask (the forwarded body carries placeholders), flag (verdict only).
import { applyPolicy, requestPolicy } from '../../guardrails/policy-engine.js';
import { resolveDeferredTexts } from '../../providers/deferred-json-texts.js';
import { isPartial, uncheckedTextMessage } from '../../providers/partial-texts.js';
import type { PipelineContext } from '../context.js';
import { reject } from '../stage.js';
import type { Stage, StageResult } from '../stage.js';

export const guardrailsInStage: Stage = {
  name: 'guardrails-in',
  always: false,
  run(ctx: PipelineContext): StageResult {
    const policy = requestPolicy(ctx);
    if (policy === null) return undefined;
    // A stream's output rules are applied as it is delivered; when they cannot be applied, refuse
    // now, before anything is forwarded or charged, rather than after the stream has started. An
    // MCP answer may be a stream whatever the caller accepts (the tool server chooses), and a tool
    // call acts on the world: refused up front too.
    if ((ctx.stream || ctx.api === 'mcp') && policy.output.broken !== null) return reject('ZN_ERR_GUARDRAIL_BLOCKED', policy.output.broken.message);
    if (policy.input.broken === null && policy.input.rules.length > 0) {
      // Tool-call input is walked only now that there are rules; text the walk did not reach
      // cannot pass unchecked (fail closed).
      resolveDeferredTexts(ctx.inputTexts);
      if (isPartial(ctx.inputTexts)) return reject('ZN_ERR_GUARDRAIL_BLOCKED', uncheckedTextMessage(policy.id, 'input'));
    }
    return applyPolicy(ctx, policy, 'input', ctx.inputTexts);
  },
};
