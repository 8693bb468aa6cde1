// The node keeps compiled rules across config swaps: a policy that did not change costs no recompile.
import t from 'tap';
import type { GuardrailPolicy } from '../../../proto/src/index.js';
import { TOO_COSTLY } from '../../../proto/src/guardrail-regex-runs.js';
import { compilePolicy } from '../../../edge-node/src/guardrails/compiled-policy.js';

const policyJson = JSON.stringify({
  id: 'gp_cache',
  name: 'cache',
  rules: [
    { detector: 'regex', pattern: '(?i)secret-\\d{4}', action: 'mask', on: 'both' },
    { detector: 'keywords', keywords: ['alpha', 'beta'], action: 'flag', on: 'input' },
    { detector: 'email', action: 'block', on: 'output' },
  ],
});
/** The policy as a new bundle brings it: new objects, parsed anew. */
const fromNewBundle = (json = policyJson): GuardrailPolicy => JSON.parse(json) as GuardrailPolicy;

t.test('the same policy in a new bundle object reuses the compiled rules', (t) => {
  const first = compilePolicy(fromNewBundle());
  const second = compilePolicy(fromNewBundle());
  t.not(second, first, 'a new policy object gets its own compiled policy');
  t.equal(second.input.rules.length, 2);
  for (let i = 0; i < first.input.rules.length; i++) t.equal(second.input.rules[i]!.detector, first.input.rules[i]!.detector, `rule ${i}'s detector is reused`);
  t.equal(second.output.rules[0]!.detector, first.output.rules[0]!.detector);
  t.same(second.input.rules[0]!.detector.find('x SECRET-1234 y'), [{ start: 2, end: 13 }], 'and still finds what it should');
  t.end();
});

t.test('a rule whose pattern changed is compiled anew, the others reused', (t) => {
  const before = compilePolicy(fromNewBundle());
  const after = compilePolicy(fromNewBundle(policyJson.replace('secret-\\\\d{4}', 'token-\\\\d{4}')));
  t.not(after.input.rules[0]!.detector, before.input.rules[0]!.detector);
  t.same(after.input.rules[0]!.detector.find('token-1234'), [{ start: 0, end: 10 }]);
  t.equal(after.input.rules[1]!.detector, before.input.rules[1]!.detector);
  t.end();
});

t.test('a rule the check refuses for its cost fails closed on the node, with the control plane\'s reason', (t) => {
  const pattern = Array.from({ length: 1365 }, (_, i) => `${String.fromCharCode(0x100 + i)}?`).join('');
  const reasons: unknown[] = [];
  const logger = { error: (fields: { reason?: unknown }) => reasons.push(fields.reason) } as unknown as Parameters<typeof compilePolicy>[1];
  const policy = fromNewBundle(JSON.stringify({ id: 'gp_costly', name: 'costly', rules: [{ detector: 'regex', pattern, action: 'mask', on: 'both' }] }));
  const compiled = compilePolicy(policy, logger);
  t.match(compiled.input.broken?.message, /rule 0 \(regex\) cannot be applied/);
  t.equal(reasons[0], `the pattern is refused: ${TOO_COSTLY}`);
  t.end();
});
