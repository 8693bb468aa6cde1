/**
 * The guardrail policy of a request and its application to whole texts: block (a rejection that
 * names the rule and detector, never the matched text; the match is masked in the body as well, so
 * a kept request body never holds it), mask (placeholders written into the slots,
 * hence into the forwarded or delivered body), flag (a verdict only). Every rule that matched adds a
 * verdict to ctx.guardrails. A key without a policy costs one property read.
 */
import type { GuardrailPolicy } from '../../../proto/src/index.js';
import type { PipelineContext, TextSlot } from '../pipeline/context.js';
import { reject } from '../pipeline/stage.js';
import type { Rejection } from '../pipeline/stage.js';
import { resolveDeferredTexts } from '../providers/deferred-json-texts.js';
import { isPartial } from '../providers/partial-texts.js';
import { compilePolicy, missingPolicy } from './compiled-policy.js';
import type { CompiledPolicy, CompiledRule, Direction } from './compiled-policy.js';
import { TextGuard, VerdictTally } from './text-guard.js';

// A key naming a policy its config lacks is logged once per config snapshot, not per request.
const missingLogged = new WeakMap<ReadonlyMap<string, GuardrailPolicy>, Set<string>>();

/** The compiled policy of the request's key, or null when the key has none. */
export function requestPolicy(ctx: PipelineContext): CompiledPolicy | null {
  const id = ctx.key?.guardrailPolicyId;
  if (id === undefined || id === null) return null;
  const policies = ctx.config?.guardrailPolicies;
  const policy = policies?.get(id);
  if (policy !== undefined) return compilePolicy(policy, ctx.deps.logger);
  if (policies !== undefined) {
    let logged = missingLogged.get(policies);
    if (logged === undefined) missingLogged.set(policies, (logged = new Set()));
    if (!logged.has(id)) {
      logged.add(id);
      ctx.deps.logger.error({ policyId: id, keyId: ctx.key?.id }, 'a key names a guardrail policy this config does not carry; its requests are blocked (fail closed)');
    }
  }
  return missingPolicy(id);
}

/** The caller-facing reason for a block: policy, rule and detector, never the text. */
export function blockedMessage(policy: CompiledPolicy, rule: CompiledRule, on: Direction): string {
  return `Blocked by guardrail policy "${policy.id}" rule ${rule.index} (${rule.detector.name}) on the ${on}.`;
}

/**
 * Applies `on` rules of `policy` to each slot (each a finished text of its own; deferred tool-call
 * input is walked first). Returns a ZN_ERR_GUARDRAIL_BLOCKED rejection when a block rule matched
 * or the direction cannot be applied.
 */
export function applyPolicy(ctx: PipelineContext, policy: CompiledPolicy, on: Direction, slots: readonly TextSlot[]): Rejection | undefined {
  const side = policy[on];
  if (side.broken !== null) return reject('ZN_ERR_GUARDRAIL_BLOCKED', side.broken.message);
  if (side.rules.length === 0) return undefined;
  resolveDeferredTexts(slots);
  const tally = new VerdictTally(policy.id, on, ctx.guardrails);
  const guard = new TextGuard(side, tally);
  // A refused request's body may still be kept in its record: its blocked text is masked too.
  guard.wholeTexts(slots);
  if (on === 'input' && !isPartial(slots)) ctx.inputChecked = true;
  return guard.blockedBy === null ? undefined : reject('ZN_ERR_GUARDRAIL_BLOCKED', blockedMessage(policy, guard.blockedBy, on));
}

/**
 * Whether the request's body may hold text its key's input rules were to mask but did not: they
 * have rules (or ones the node cannot apply) and did not run over all of it (the request was
 * refused before, for text they could not reach or rules they could not apply). Such a body is
 * never recorded: it is the caller's text unmasked.
 */
export function holdsUnmaskedInput(ctx: PipelineContext): boolean {
  if (ctx.inputChecked === true) return false;
  const policy = requestPolicy(ctx);
  return policy !== null && (policy.input.broken !== null || policy.input.rules.length > 0);
}
