// Stage `guardrails-in` — the input rules of the key's guardrail policy over the caller's text:
// block (nothing is forwarded), mask (the forwarded body carries placeholders), flag (verdict only).
// A request carrying input, or asking for output, that a direction's rules cannot check is refused
// under them (fail closed; ctx.uncheckedInput / uncheckedOutput, found by the provider). A request
// refused before the input rules ran over all of it keeps no body in its record (ctx.inputChecked).
import type { CompiledPolicy, Direction } from '../../guardrails/compiled-policy.js';
import { applyPolicy, requestPolicy } from '../../guardrails/policy-engine.js';
import { resolveDeferredTexts } from '../../providers/deferred-json-texts.js';
import { longIntegerTokens } from '../../providers/json-string-slots.js';
import { isPartial, uncheckedTextMessage } from '../../providers/partial-texts.js';
import { FieldSlot } from '../../providers/text-slot.js';
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
  return (
    applyPolicy(ctx, policy, 'input', ctx.inputTexts) ??
    longIntegerRefusal(ctx, policy) ??
    uncheckedParamRefusal(policy, 'input', ctx.uncheckedInput) ??
    uncheckedParamRefusal(policy, 'output', ctx.uncheckedOutput)
  );
}

/**
 * Integers past 2^53 in the caller's body: the rules saw them rounded (JSON.parse), yet the upstream
 * gets them digit for digit (withLongIntegersOf), so each is checked again as written. One a block
 * rule matches is blocked; one a mask rule matches is blocked too, since a number cannot carry a
 * placeholder in place (a flag rule only flags it).
 */
function longIntegerRefusal(ctx: PipelineContext, policy: CompiledPolicy): Rejection | undefined {
  // MCP messages are parsed as written (jsonrpc-message.ts): the rules saw those digits already.
  if (ctx.api === 'mcp' || policy.input.broken !== null || policy.input.rules.length === 0) return undefined;
  const tokens = longIntegerTokens(ctx.http.bodyText);
  if (tokens.length === 0) return undefined;
  const holders = tokens.map((token) => ({ text: token }));
  const blocked = applyPolicy(ctx, policy, 'input', holders.map((holder) => new FieldSlot(holder, 'text')));
  const masked = holders.some((holder, i) => holder.text !== tokens[i]);
  // The body the record would keep holds the number unmasked (rounded): not kept.
  if (blocked !== undefined || masked) ctx.inputChecked = false;
  if (blocked !== undefined) return blocked;
  if (!masked) return undefined;
  return reject(
    'ZN_ERR_GUARDRAIL_BLOCKED',
    `Blocked by guardrail policy "${policy.id}" on the input: an integer past 2^53 in the request matches a mask rule, and a JSON number cannot be masked; send it as a string.`,
  );
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
