// The admin API's guardrail policy rules for regex patterns: the (?i) prefix nodes support is
// accepted, patterns with nested repetition or with overlapping alternatives under a repetition
// (both exponential backtracking) are refused with a message naming the problem, and the node
// applies the very same rule (proto/src/guardrail-regex-risk.ts, shared by both sides) to patterns
// that reach it anyway.
import t from 'tap';
import { guardrailPolicyCreateSchema } from '../../control-plane/src/policies/guardrail-policy-validation.js';
import { compileRegex } from '../../edge-node/src/guardrails/detectors/regex.js';

const parsePattern = (pattern: string) =>
  guardrailPolicyCreateSchema.safeParse({ name: 'g', rules: [{ detector: 'regex', pattern, action: 'block', on: 'input' }] });

const messages = (pattern: string): string[] => {
  const result = parsePattern(pattern);
  return result.success ? [] : result.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`);
};

const NESTED = ['(\\w+\\s?)+$', '(a+)+', '(?:a*b?)*c', '((ab)*)+', '(?<n>[a-z]+\\d)*x', '(a{2,})+', '(x+){3,}', '(?:(a)+)*', '([a-z]+)*@', '(a+){3}', '((a{2,5}){3})+', '(ab?|b)+$', '(a?a)+$', '(\\w\\w?)+$', '(?:https?|ftp)+', '(a?b|b)*'];
// A repeated group two of whose alternatives can start with the same character, at its top level
// or deeper inside it.
const OVERLAPPING = ['(a|a)*', '(a|ab)*c', '(\\w|\\d)+$', '(.|\\s)*x', '(?:(a|a)b)*c', '(a|a){2,}', '(a|a){9}', '(a|[a-z])+', '((a|b)|a)*', '(x|\\1)+', '(?:\\x61|a)+', '(\\p{L}|a)+'];
// Alternatives that cannot start alike, or that are not repeated.
const SAFE_ALTERNATIVES = ['(foo|bar)+', '(?:ab|cd)*', '(a|b)', '(a|a)', '(a|a)?', '(a|a){1}', '[a-z]+', '\\b(secret|token)\\b', '(\\w|-)+', '(.|\\n)*', '(\\s|,)+', '(?:https|ftp)+', '(?=a|a)b', '(A|a)+'];
// Repetitions with a small upper bound over content that repeats nothing without bound: at most a
// few hundred ways to try per start (IPv4 addresses, loose and strict).
const BOUNDED = ['(\\d{1,3}\\.){3}\\d{1,3}', '((25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)\\.){3}(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)', '(a|a){1,3}', '(a{1,3}){3}', '((a|b)?c){3}'];
const SAFE = [...SAFE_ALTERNATIVES, ...BOUNDED, 'order-\\d{4}', '\\bproject-x\\b', '(?:foo|bar)+', '(ab){2}', '(a+)?b', '(a?)', '[(+)]+', '\\(a+\\)+', 'a{2,5}b*', '\\p{Lu}{2,}', '(\\d{3})-(\\d{4})', '(?:ab)+c', '(a{1})+', '[+*]{3}', '(\\d{3}-)+\\d{4}', '(?:[a-f0-9]{8}-){3}', '((ab){2})+'];

t.test('a regex pattern with the (?i) prefix nodes document is accepted', async (t) => {
  t.same(messages('(?i)order-\\d{4}'), []);
  t.ok(compileRegex('(?i)order-\\d{4}').ok, 'and the node compiles it');
});

t.test('a pattern that is only the (?i) prefix is refused as empty on both sides; one that may match empty text but also real text is accepted', async (t) => {
  // `(?i)` alone compiles to an empty regex, whose empty matches nodes skip: a rule that never fires.
  t.same(messages('(?i)'), ['rules.0.pattern: must not be empty'], 'the words an empty pattern gets');
  t.same(messages(''), ['rules.0.pattern: must not be empty'], 'an empty pattern, said once');
  const node = compileRegex('(?i)');
  t.notOk(node.ok, 'a node given it anyway cannot apply the rule, so its policy fails closed');
  if (!node.ok) t.equal(node.reason, 'the rule has no pattern');
  for (const pattern of ['a*', '(?i)a*']) {
    t.same(messages(pattern), [], pattern);
    t.ok(compileRegex(pattern).ok, `${pattern} on the node`);
  }
});

t.test('a pattern that can only match empty text (anchors, \\b, lookarounds, a zero count) is refused, since nodes skip empty matches and its rule would never fire', async (t) => {
  const text = 'Please summarise this CONFIDENTIAL project-x document';
  for (const pattern of ['(?=project-x)', '(?i)(?=.*confidential)', '^$', '\\b', '(?:)', '(?<=a)', '(?!x)\\B', 'x{0}', '(ab){0,0}', '(?:^|$)', '((?=a))+']) {
    const said = messages(pattern);
    t.equal(said.length, 1, pattern);
    t.match(said[0], /^rules\.0\.pattern: can only match empty text .*never fire/, `${pattern}: says why`);
    // What the node would do with it: only empty matches, which it skips.
    const node = compileRegex(pattern);
    if (node.ok) t.same(node.detector.find(text), [], `${pattern}: no match on the node`);
  }
  // Anything that can take one character passes, lookarounds beside it included.
  for (const pattern of ['(?i)(?=.*confidential).', 'a?', '^a*$', '\\bx', '(?<=a)b', '\\1?(a)', '[^]', '(?:(?=a)|b)', 'x{0,1}', '(?<n>a)\\k<n>']) {
    t.same(messages(pattern), [], pattern);
  }
});

t.test('a pattern whose first choice at every position is an empty match is refused, since its rule would never fire on a node; so is the empty class [], which matches nothing', async (t) => {
  const text = 'a secret, then ab and b';
  const emptyFirst = ['(|a)', '(?:|secret)', '(?i)(|secret)', 'a*?', 'a??', '(?:ab)*?', 'x{0,3}?', '(|a)|b', '(?:a*?)', '(?:|a)(?:b??)', '((|a))', '(|a)+?', '(|a){2}'];
  for (const pattern of emptyFirst) {
    const said = messages(pattern);
    t.equal(said.length, 1, pattern);
    t.match(said[0], /^rules\.0\.pattern: matches empty text first at every position .*never fire/, `${pattern}: says why`);
    const node = compileRegex(pattern);
    if (node.ok) t.same(node.detector.find(text), [], `${pattern}: the node finds nothing in text it holds`);
  }
  for (const pattern of ['[]', 'a[]', '(?:[]b)+', '(?:[])|a']) {
    const said = messages(pattern);
    t.equal(said.length, 1, pattern);
    t.match(said[0], /^rules\.0\.pattern: holds \[\], a class that matches no character/, `${pattern}: says why`);
  }
  // The engine prefers text here (an empty choice comes later, or a required item follows, or an
  // item can fail and hand over to the next choice): accepted, and the node finds it.
  for (const pattern of ['(a|)', 'a*?b', '(?:|x)b', '(|a)b', 'a+?', '(?:(?=a)|b)', 'se??cret', '(?:a??)c?b', '(|a)*', '((|a))+', '(|a){1,2}']) {
    t.same(messages(pattern), [], pattern);
    const node = compileRegex(pattern);
    t.ok(node.ok && node.detector.find(text).length > 0, `${pattern}: the node finds it`);
  }
});

t.test('a pattern with nested repetition is refused, naming the problem', async (t) => {
  for (const pattern of NESTED) {
    const got = messages(pattern);
    t.equal(got.length, 1, pattern);
    t.match(got[0], /^rules\.0\.pattern: is refused: it repeats a group that itself contains a repeated item \(nested quantifiers/, pattern);
  }
  t.match(messages('(?i)(a+)+')[0], /nested quantifiers/, 'the (?i) prefix does not hide it');
});

t.test('a bounded repetition is accepted while its ways to match stay few, and refused past that', async (t) => {
  for (const pattern of BOUNDED) t.same(messages(pattern), [], pattern);
  t.same(messages('(a|a){8}b'), [], '2^8 ways');
  t.match(messages('(a|a){9}b')[0], /overlapping alternatives/, '2^9 ways');
  t.match(messages('(\\d{1,10}){16}x')[0], /nested quantifiers/, '10^16 ways');
  t.match(messages('(a{1,3}){6}')[0], /nested quantifiers/, '3^6 ways');
  t.match(messages('((\\d{1,3}\\.){3})+')[0], /nested quantifiers/, 'the bounded group repeated without bound');
  t.match(messages('(a|a){8}(a|a){8}$')[0], /overlapping alternatives/, 'bounded repetitions one after the other share the budget (256 × 256 ways)');
  t.same(messages('(\\d{1,3}\\.){3}\\d{1,3}-(a|b){8}'), [], 'a bounded repetition without overlap or optional items costs nothing from the budget');
});

t.test('patterns with neither shape are accepted', async (t) => {
  for (const pattern of SAFE) t.same(messages(pattern), [], pattern);
  t.match(messages('(unclosed')[0], /^rules\.0\.pattern: must be a valid JavaScript regular expression \(u flag\), optionally prefixed with \(\?i\)$/);
});

t.test('a repeated group whose alternatives can start with the same character is refused, naming the problem', async (t) => {
  for (const pattern of OVERLAPPING) {
    const got = messages(pattern);
    t.equal(got.length, 1, pattern);
    t.match(got[0], /^rules\.0\.pattern: is refused: it repeats a group whose alternatives can start with the same character \(overlapping alternatives/, pattern);
  }
  t.same(messages('(A|a)+'), [], 'without (?i), A and a do not overlap');
  t.match(messages('(?i)(A|a)+')[0], /overlapping alternatives/, 'with (?i) they do');
  t.match(messages('(?i)(s|\u017f)+$')[0], /overlapping alternatives/, 'with (?i) the long s folds to s');
  t.match(messages('(?i)(\u03c2|\u03c3)+')[0], /overlapping alternatives/, 'with (?i) the final sigma folds to sigma');
});

t.test('the node refuses the same patterns (fail closed)', async (t) => {
  for (const pattern of [...NESTED, ...OVERLAPPING]) {
    const refused = compileRegex(pattern);
    t.equal(refused.ok, false, pattern);
  }
  for (const pattern of SAFE) t.equal(compileRegex(pattern).ok, true, pattern);
  const compiled = compileRegex('(\\w+\\s?)+$');
  t.equal(compiled.ok, false);
  t.match(compiled.ok ? '' : compiled.reason, /nested quantifiers/);
  const overlapping = compileRegex('(?i)(A|a)+');
  t.match(overlapping.ok ? '' : overlapping.reason, /^the pattern is refused: .*overlapping alternatives/);
});
