/**
 * Marks a list of text slots that does not cover all the text of its body (a walk stopped at its
 * depth or count limit, or a streamed event could not be parsed). Guardrails fail closed on such
 * a list when their direction has rules: text they cannot see must not pass unchecked. A WeakSet,
 * so the lists stay plain arrays.
 */
import type { TextSlot } from '../pipeline/context.js';

const partial = new WeakSet<readonly TextSlot[]>();

export function markPartial(slots: readonly TextSlot[]): void {
  partial.add(slots);
}

export function isPartial(slots: readonly TextSlot[]): boolean {
  return partial.has(slots);
}

/**
 * The texts of a streamed event whose data is not a JSON object (so none could be found in it):
 * no slots, and partial, so output rules block it rather than relay it unchecked. Never added to.
 */
export const UNREAD_TEXTS: TextSlot[] = [];
markPartial(UNREAD_TEXTS);

/** The caller-facing reason for refusing a partial list: the policy, never the text. */
export function uncheckedTextMessage(policyId: string, on: 'input' | 'output'): string {
  return `The ${on} holds more text than guardrails check (nested too deep, too many strings, audio, a part of a type the node does not know, text outside the fields the node reads, or data that is not a JSON object), so guardrail policy "${policyId}" blocks it.`;
}
