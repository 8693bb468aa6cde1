// Property test of the input estimate of a parsed tool input (deferred-json-texts.ts): whatever
// JSON a caller sends, the walk that builds no text counts exactly what serialising it would, so
// no part of the JSON the upstream bills (numbers, literals, punctuation, escapes) is free.
import fc from 'fast-check';
import t from 'tap';
import type { TextSlot } from '../../../edge-node/src/pipeline/context.js';
import { deferJsonValue, estimateInputTokens } from '../../../edge-node/src/providers/deferred-json-texts.js';
import { estimateTokens } from '../../../edge-node/src/providers/token-estimate.js';

/** Any JSON object or array; strings of any UTF-16 code units (CJK, control characters, lone surrogates). */
const container = fc.oneof(
  fc.dictionary(fc.string({ unit: 'binary' }), fc.jsonValue({ stringUnit: 'binary' })),
  fc.array(fc.jsonValue({ stringUnit: 'binary' })),
);

t.test('a parsed input is estimated exactly as its JSON text is', (t) => {
  fc.assert(
    fc.property(container, (input) => {
      const slots: TextSlot[] = [];
      deferJsonValue(slots, { input }, 'input');
      return estimateInputTokens(slots) === estimateTokens(JSON.stringify(input));
    }),
    { numRuns: 2_000 },
  );
  t.pass('2 000 values');
  t.end();
});
