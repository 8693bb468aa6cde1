// The admin API's guardrail policy rules for regex patterns: the (?i) prefix nodes support is
// accepted, patterns with nested repetition (exponential backtracking) are refused with a message
// naming the problem, and the node applies the very same rule (proto/src/guardrail-regex-risk.ts,
// shared by both sides) to patterns that reach it anyway.
import t from 'tap';
import { guardrailPolicyCreateSchema } from '../../control-plane/src/policies/guardrail-policy-validation.js';
import { compileRegex } from '../../edge-node/src/guardrails/detectors/regex.js';

const parsePattern = (pattern: string) =>
  guardrailPolicyCreateSchema.safeParse({ name: 'g', rules: [{ detector: 'regex', pattern, action: 'block', on: 'input' }] });

const messages = (pattern: string): string[] => {
  const result = parsePattern(pattern);
  return result.success ? [] : result.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`);
};

const NESTED = ['(\\w+\\s?)+$', '(a+)+', '(?:a*b?)*c', '((ab)*)+', '(?<n>[a-z]+\\d)*x', '(a{2,})+', '(x+){3,}', '(?:(a)+)*', '([a-z]+)*@', '(a+){3}', '((a{2,5}){3})+'];
const SAFE = ['order-\\d{4}', '\\bproject-x\\b', '(?:foo|bar)+', '(ab){2}', '(a+)?b', '(a?)', '[(+)]+', '\\(a+\\)+', 'a{2,5}b*', '\\p{Lu}{2,}', '(\\d{3})-(\\d{4})', '(?:ab)+c', '(a{1})+', '[+*]{3}', '(\\d{3}-)+\\d{4}', '(?:[a-f0-9]{8}-){3}', '((ab){2})+'];

t.test('a regex pattern with the (?i) prefix nodes document is accepted', async (t) => {
  t.same(messages('(?i)order-\\d{4}'), []);
  t.ok(compileRegex('(?i)order-\\d{4}').ok, 'and the node compiles it');
});

t.test('a pattern with nested repetition is refused, naming the problem', async (t) => {
  for (const pattern of NESTED) {
    const got = messages(pattern);
    t.equal(got.length, 1, pattern);
    t.match(got[0], /^rules\.0\.pattern: is refused: it repeats a group that itself contains a repeated item \(nested quantifiers/, pattern);
  }
  t.match(messages('(?i)(a+)+')[0], /nested quantifiers/, 'the (?i) prefix does not hide it');
});

t.test('patterns without nested repetition are accepted', async (t) => {
  for (const pattern of SAFE) t.same(messages(pattern), [], pattern);
  t.match(messages('(unclosed')[0], /^rules\.0\.pattern: must be a valid JavaScript regular expression \(u flag\), optionally prefixed with \(\?i\)$/);
});

t.test('the node refuses the same patterns (fail closed)', async (t) => {
  for (const pattern of NESTED) {
    const refused = compileRegex(pattern);
    t.equal(refused.ok, false, pattern);
  }
  for (const pattern of SAFE) t.equal(compileRegex(pattern).ok, true, pattern);
  const compiled = compileRegex('(\\w+\\s?)+$');
  t.equal(compiled.ok, false);
  t.match(compiled.ok ? '' : compiled.reason, /nested quantifiers/);
});
