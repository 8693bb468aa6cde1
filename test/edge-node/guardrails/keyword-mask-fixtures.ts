// What the keyword detector's reading tests share: the texts a compiled keyword list finds, a text
// masked by a policy's output rules whole and streamed in given deltas (its text and verdicts), and
// the check that a stream split at every position, and one code point per delta, masks as the whole
// text does.
import type { Test } from 'tap';
import { compilePolicy } from '../../../edge-node/src/guardrails/compiled-policy.js';
import type { Match } from '../../../edge-node/src/guardrails/detectors/detector.js';
import { applyPolicy } from '../../../edge-node/src/guardrails/policy-engine.js';
import { guardStream } from '../../../edge-node/src/guardrails/stream-guard.js';
import type { GuardrailPolicy } from '../../../proto/src/index.js';
import { drain, guardContext, openAiStream, openAiText } from './guardrail-fixtures.js';

/** A compiled keyword list (compileKeywords). */
export type KeywordFind = (text: string, from?: number) => Match[];

/** The pieces of `text` that `find` matches, in order. */
export const matchedTexts = (find: KeywordFind, text: string): string[] => find(text).map((m) => text.slice(m.start, m.end));

/** `text` after policy `p`'s output rules, applied to it whole, and their verdicts. */
export function maskedWhole(p: GuardrailPolicy, text: string): { text: string; verdicts: unknown[] } {
  const slot = { text };
  const { ctx } = guardContext({ policies: [p], policyId: p.id });
  applyPolicy(ctx, compilePolicy(p), 'output', [slot]);
  return { text: slot.text, verdicts: ctx.guardrails };
}

/** The text a caller reassembles from an OpenAI stream of `deltas` guarded by policy `p` ('' if it failed), and the verdicts. */
export async function maskedStreamed(p: GuardrailPolicy, deltas: string[]): Promise<{ text: string; verdicts: unknown[] }> {
  const reply = openAiStream(deltas);
  const { ctx } = guardContext({ policies: [p], policyId: p.id, reply, stream: true });
  guardStream(ctx, compilePolicy(p), reply);
  const { events, error } = await drain(reply);
  return { text: error === undefined ? openAiText(events) : '', verdicts: ctx.guardrails };
}

/**
 * `text` streamed in two deltas split at every position, then one code point per delta, masks as
 * `expected` (the whole text's result) says, verdicts too; the first three failing splits are named.
 */
export async function checkEverySplitMasksAsWhole(t: Test, p: GuardrailPolicy, text: string, expected: { text: string; verdicts: unknown[] }): Promise<void> {
  let failures = 0;
  for (let i = 0; i <= text.length; i++) {
    const got = await maskedStreamed(p, [text.slice(0, i), text.slice(i)]);
    if (got.text !== expected.text || JSON.stringify(got.verdicts) !== JSON.stringify(expected.verdicts)) {
      failures++;
      if (failures <= 3) t.fail(`split at ${i}`, { got: got.text, want: expected.text });
    }
  }
  t.equal(failures, 0, `all ${text.length + 1} split points`);
  const perCodePoint = await maskedStreamed(p, [...text]);
  t.equal(perCodePoint.text, expected.text);
  t.same(perCodePoint.verdicts, expected.verdicts);
}
