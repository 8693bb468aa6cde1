// Stage `guardrails-in` — the input rules of the key's guardrail policy over the caller's text:
// block (nothing is forwarded), mask (the forwarded body carries placeholders), flag (verdict only).
// A request carrying input, or asking for output, that a direction's rules cannot check is refused
// under them (fail closed; ctx.uncheckedInput / uncheckedOutput, found by the provider). A request
// refused before the input rules ran over all of it keeps no body in its record (ctx.inputChecked).
import type { CompiledPolicy, Direction } from '../../guardrails/compiled-policy.js';
import { applyPolicy, requestPolicy } from '../../guardrails/policy-engine.js';
import { resolveDeferredTexts } from '../../providers/deferred-json-texts.js';
import { isPartial, uncheckedTextMessage } from '../../providers/partial-texts.js';
import type { PipelineContext, UncheckedParam } from '../context.js';
import { reject } from '../stage.js';
import type { Rejection, Stage, StageResult } from '../stage.js';

export const guardrailsInStage: Stage = {
  name: 'guardrails-in',
  always: false,
  run(ctx: PipelineContext): StageResult {
    const policy = requestPolicy(ctx);
    return policy === null ? undefined : guardInput(ctx, policy);
  },
};

/** The stage's work under the key's policy. */
function guardInput(ctx: PipelineContext, policy: CompiledPolicy): StageResult {
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
  // Rules first, so a blocked match is masked in the body the record may keep whatever refuses it.
  return applyPolicy(ctx, policy, 'input', ctx.inputTexts) ?? uncheckedParamRefusal(policy, 'input', ctx.uncheckedInput) ?? uncheckedParamRefusal(policy, 'output', ctx.uncheckedOutput);
}

/**
 * The stage's refusal, made by the surface stage before rate-limit, for a request it refuses
 * whatever its text (ZN_ERR_GUARDRAIL_UNCHECKABLE: it carries, or asks for, what the policy's rules
 * cannot check, which the provider found up front), so a request that can never succeed spends no
 * quota; undefined for any other request (the stage runs in its place). It runs the stage itself, so
 * the answer and the record are the ones the stage gives there (input rules first: a blocked match
 * wins, and is masked in the body the record may keep).
 */
export function upFrontGuardrailRefusal(ctx: PipelineContext): StageResult {
  if (ctx.uncheckedInput === undefined && ctx.uncheckedOutput === undefined) return undefined;
  const policy = requestPolicy(ctx);
  if (policy === null) return undefined;
  if (uncheckedParamRefusal(policy, 'input', ctx.uncheckedInput) === undefined && uncheckedParamRefusal(policy, 'output', ctx.uncheckedOutput) === undefined) return undefined;
  return guardInput(ctx, policy);
}

/** ZN_ERR_GUARDRAIL_UNCHECKABLE for `unchecked` when the policy checks `on` (it has rules there, or rules it cannot apply). */
function uncheckedParamRefusal(policy: CompiledPolicy, on: Direction, unchecked: UncheckedParam | undefined): Rejection | undefined {
  if (unchecked === undefined) return undefined;
  const side = policy[on];
  if (side.broken === null && side.rules.length === 0) return undefined;
  const message =
    on === 'input'
      ? `Guardrail policy "${policy.id}" checks the input, and ${unchecked.what} in \`${unchecked.param}\` cannot be checked; send it as text.`
      : `Guardrail policy "${policy.id}" checks the output, and \`${unchecked.param}\` asks for ${unchecked.what}, which its rules cannot check; ask without it, or use a key whose policy has no output rules.`;
  return reject('ZN_ERR_GUARDRAIL_UNCHECKABLE', message, { param: unchecked.param });
}
