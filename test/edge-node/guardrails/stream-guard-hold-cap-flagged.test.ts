// A flagged match (action `flag`: nothing masked, a verdict only) that the stream guard's hold cap
// cuts through is counted once, as in the whole text. The cap keeps the head of a masked match it
// cuts through as context, so the rest is read as the same match; it kept none for a flagged one,
// so the rest was scanned alone and, when it reads as a match of its own (`token=` inside a long
// `password=token=…` value), counted again: a verdict of 2 or 3 matches for one secret.
import t from 'tap';
import { compilePolicy } from '../../../edge-node/src/guardrails/compiled-policy.js';
import { guardStream } from '../../../edge-node/src/guardrails/stream-guard.js';
import { MAX_HELD_CHARS, TextGuard, VerdictTally } from '../../../edge-node/src/guardrails/text-guard.js';
import type { GuardrailPolicy, GuardrailVerdict } from '../../../proto/src/index.js';
import { drain, guardContext, openAiStream, openAiText, policy } from './guardrail-fixtures.js';

const FLAG_SECRET = policy('flag', [{ detector: 'secret', action: 'flag', on: 'output' }]);
const FLAG_AND_MASK = policy('both', [
  { detector: 'secret', action: 'flag', on: 'output' },
  { detector: 'email', action: 'mask', on: 'output' },
]);

async function streamed(rules: GuardrailPolicy, deltas: string[]): Promise<{ text: string; verdicts: GuardrailVerdict[]; error: unknown }> {
  const reply = openAiStream(deltas);
  const { ctx } = guardContext({ policies: [rules], policyId: rules.id, reply, stream: true });
  guardStream(ctx, compilePolicy(rules), reply);
  const { events, error } = await drain(reply);
  return { text: openAiText(events), verdicts: ctx.guardrails, error };
}

function wholeVerdicts(rules: GuardrailPolicy, text: string): GuardrailVerdict[] {
  const verdicts: GuardrailVerdict[] = [];
  new TextGuard(compilePolicy(rules).output, new VerdictTally(rules.id, 'output', verdicts)).whole(text);
  return verdicts;
}

function inDeltas(text: string, size: number): string[] {
  const out: string[] = [];
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size));
  return out;
}

// Unquoted values longer than the cap whose rest, read alone, holds a secret's name and value.
const VALUES = [`token=${'token='.repeat(20_000)}`, `password=${'password='.repeat(12_000)}`, `api_key: ${'x&access_token=abc123XYZ'.repeat(4_000)}`];

t.test('a flagged secret the hold cap cuts through is counted once, as in the whole text, and goes out unchanged; a second secret after it still counts', async (t) => {
  for (const value of VALUES) {
    t.ok(value.length > MAX_HELD_CHARS, 'the value is longer than the cap');
    const text = `before ${value} after`;
    t.same(wholeVerdicts(FLAG_SECRET, text).map((v) => v.matches), [1], 'the whole text: one match');
    for (const size of [16, 1000]) {
      const got = await streamed(FLAG_SECRET, inDeltas(text, size));
      t.equal(got.error, undefined);
      t.equal(got.text, text, 'a flag changes nothing');
      t.same(got.verdicts.map((v) => [v.action, v.matches]), [['flag', 1]], `${value.slice(0, 9)}…, deltas of ${size}: one match`);
    }
  }
  const two = `${VALUES[0]} and later password=hunter2isMySecret done`;
  t.same(wholeVerdicts(FLAG_SECRET, two).map((v) => v.matches), [2]);
  const got = await streamed(FLAG_SECRET, inDeltas(two, 1000));
  t.equal(got.text, two);
  t.same(got.verdicts.map((v) => v.matches), [2], 'two secrets, two matches');
});

t.test('beside a mask rule, a flagged match the cap cuts through is counted once and the mask still applies', async (t) => {
  const text = `mail bob@example.com then ${VALUES[0]} then eve@example.org`;
  const got = await streamed(FLAG_AND_MASK, inDeltas(text, 512));
  t.equal(got.text, text.replace('bob@example.com', '[EMAIL]').replace('eve@example.org', '[EMAIL]'));
  const byRule = (verdicts: GuardrailVerdict[]): Array<[number, string, number]> => verdicts.map((v): [number, string, number] => [v.rule, v.action, v.matches]).sort((a, b) => a[0] - b[0]);
  t.same(byRule(got.verdicts), [
    [0, 'flag', 1],
    [1, 'mask', 2],
  ]);
  t.same(byRule(got.verdicts), byRule(wholeVerdicts(FLAG_AND_MASK, text)), 'the same verdicts as the whole text');
});
