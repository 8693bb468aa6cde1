// The admin API refuses a guardrail pattern that "would never fire" (regexNeverFiresReason): one
// that can only match empty text, or whose first choice at every position is an empty match, since
// nodes skip empty matches. That refusal is only fair if it is sound: a refused
// pattern must find nothing on a node, whatever the text. Held here on generated patterns (empty
// alternatives, lazy and greedy quantifiers, counts, anchors, lookarounds, nested groups) against
// the node's own detector on texts made of the same characters; and the check must refuse some of
// them, or it would hold trivially.
import fc from 'fast-check';
import t from 'tap';
import { regexNeverFiresReason } from '../../proto/src/index.js';
import { compileRegex } from '../../edge-node/src/guardrails/detectors/regex.js';

const quantifier = fc.constantFrom('', '', '*', '+', '?', '*?', '+?', '??', '{0}', '{2}', '{1,2}', '{0,2}?', '{1,2}?', '{2}?');
// Not `[]`: it is refused as a slip even where another choice fires ((?:[])|a).
const atom = fc.constantFrom('a', 'b', '[ab]', '.', '[^a]');
const assertion = fc.constantFrom('^', '$', '\\b', '(?=a)', '(?!b)', '(?<=a)');

const { pattern } = fc.letrec<{ pattern: string; alternative: string; item: string }>((tie) => ({
  pattern: fc.array(tie('alternative'), { minLength: 1, maxLength: 3 }).map((alts) => alts.join('|')),
  alternative: fc.array(tie('item'), { minLength: 0, maxLength: 3 }).map((items) => items.join('')),
  item: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    fc.tuple(atom, quantifier).map(([a, q]) => a + q),
    assertion,
    fc.tuple(tie('pattern'), quantifier).map(([p, q]) => `(?:${p})${q}`),
  ),
}));

const TEXTS = ['a', 'b', 'ab', 'ba', 'aab', 'abba', 'bab', 'a b', 'aaaa bbbb'];

t.test('a pattern refused as never firing finds nothing on a node, whatever the text', async (t) => {
  let refused = 0;
  let fires = 0;
  fc.assert(
    fc.property(pattern, (source) => {
      fc.pre(source.length > 0);
      try {
        new RegExp(source, 'u');
      } catch {
        fc.pre(false);
      }
      const node = compileRegex(source);
      fc.pre(node.ok);
      if (!node.ok) return true;
      const found = TEXTS.some((text) => node.detector.find(text).length > 0);
      if (found) fires++;
      if (regexNeverFiresReason(source) === null) return true;
      refused++;
      return !found;
    }),
    { numRuns: 4000, seed: 20261205 },
  );
  t.ok(refused > 100, `the check refused ${refused} patterns`);
  t.ok(fires > 100, `${fires} patterns fire`);
});
