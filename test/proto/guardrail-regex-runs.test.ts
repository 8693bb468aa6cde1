// Guardrail regexes with two unbounded (or widely varying) repetitions in a row over the same characters (polynomial
// backtracking: `a*a*a*b` held the event loop 48 s on 1 024 characters) are refused by the shared
// check, on the admin API and on the node; sets are compared exactly, so the common shapes whose
// neighbours share no character still pass.
import t from 'tap';
import { regexBacktrackingRisk } from '../../proto/src/index.js';
import { POLYNOMIAL_RISK, TOO_DEEP, TOO_MANY_CLASS_RUNS } from '../../proto/src/guardrail-regex-runs.js';
import { guardrailPolicyCreateSchema } from '../../control-plane/src/policies/guardrail-policy-validation.js';
import { compileRegex } from '../../edge-node/src/guardrails/detectors/regex.js';

const risk = (pattern: string): string | null => {
  const ignoreCase = pattern.startsWith('(?i)');
  return regexBacktrackingRisk(ignoreCase ? pattern.slice(4) : pattern, { ignoreCase });
};

t.test('two unbounded repetitions in a row over the same characters, with something after them that can fail, are refused', async (t) => {
  for (const pattern of ['a*a*b', 'a*a*a*b', '\\s*\\s*x', '.*.*x', '\\w+\\s*\\w+x', '[a-z]+\\w*!', '\\w+\\w+$', 'a+a+\\b', '\\p{L}+\\w+!']) {
    t.equal(risk(pattern), POLYNOMIAL_RISK, pattern);
  }
});

t.test('character sets are compared exactly: neighbours that share no character pass', async (t) => {
  for (const pattern of ['a*b', '\\w+\\s+\\w+x', '\\w+@\\w+\\.com', '\\d+\\.\\d+x', 'password\\s*[:=]\\s*\\S+', '[^\\s@]+@[^\\s@]+\\.[^\\s@]+', '[A-Z]+[a-z]+x', '\\p{L}+\\s+\\p{L}+!', '\\d+\\D+\\d+x', '\\bACCT-\\d{6,}\\b']) {
    t.equal(risk(pattern), null, pattern);
  }
});

t.test('under (?i) case variants meet', async (t) => {
  t.equal(risk('A*a*b'), null, 'A and a differ without it');
  t.equal(risk('(?i)A*a*b'), POLYNOMIAL_RISK);
  t.equal(risk('(?i)[K]+\u212a+x'), POLYNOMIAL_RISK, 'the Kelvin sign folds to k');
});

t.test('a mandatory item between the two keeps the shape only when each of its characters is in both', async (t) => {
  for (const pattern of ['.*x.*y', '.*@.*\\.com', 'foo.*bar.*baz', '\\w+_\\w+!']) t.equal(risk(pattern), POLYNOMIAL_RISK, pattern);
  for (const pattern of ['\\w+-\\w+!', '[\\w.-]+@[\\w.-]+\\.[a-z]{2,}', '[a-z]+\\d[a-z]+x', '\\s*,\\s*x']) t.equal(risk(pattern), null, pattern);
});

t.test('an optional item between the two does not hide them', async (t) => {
  for (const pattern of ['\\d+\\.?\\d+x', 'a*b*a*c', 'a+(?:-)?a+!', 'a+(?:b|)a+!']) t.equal(risk(pattern), POLYNOMIAL_RISK, pattern);
});

t.test('a pair with nothing after it that can fail passes: its first try succeeds', async (t) => {
  for (const pattern of ['.*foo.*', 'a*a*', 'x\\w+\\s*\\w*']) t.equal(risk(pattern), null, pattern);
  for (const pattern of ['.*foo.*$', 'a*a*\\b', 'a*a*(?=b)', '(?:a*a*)b']) t.equal(risk(pattern), POLYNOMIAL_RISK, pattern);
});

t.test('repeated groups, alternations and back-references take part', async (t) => {
  for (const pattern of ['(?:ab)+(?:ab)+c', '(?:a|b)*a+x', '(a)a*\\1*b', 'x(?:a+|b)a*c', '(?:q|a+)(?:r|a+)!']) t.equal(risk(pattern), POLYNOMIAL_RISK, pattern);
  for (const pattern of ['(?:ab)+(?:cd)+e', '(a|b)+c', '(\\d{3}-)+\\d{4}', 'x(?:a+|b)c+d']) t.equal(risk(pattern), null, pattern);
});

t.test('a lookaround is tried again for every way to split the text before it; its own ways are tried once', async (t) => {
  t.equal(risk('b(?=a*a*)'), null, 'nothing after it can fail');
  t.equal(risk('(?=a*a*c)b'), POLYNOMIAL_RISK);
  t.equal(risk('x(?<=a*a*c)'), null, 'matched right to left, c comes first');
  for (const pattern of ['x(?<=ca*a*)', '(?<=b\\w*\\w*)x', '(?<=api.*key.*)\\w{32}']) t.equal(risk(pattern), POLYNOMIAL_RISK, pattern);
  for (const pattern of ['\\w+(?=.*secret)', 'a*(?=a*b)', 'a+(?=a*b)', 'a*(?<=ba*)c']) t.equal(risk(pattern), POLYNOMIAL_RISK, `${pattern}: the body scans again for each split of the run before it`);
  t.equal(risk('^(?=.*\\d)(?=.*[a-z]).{8,}$'), null, 'lookaheads at a fixed start, one repetition each');
});

t.test('an item that can fail only through an assertion still makes every split be tried', async (t) => {
  for (const pattern of ['\\d+\\.?\\d*(?:\\s|$)', 'a*a*(?:\\b|x)', 'a*a*(?:(?=b)|(?=c))']) t.equal(risk(pattern), POLYNOMIAL_RISK, pattern);
  t.equal(risk('a*a*(?:x|)'), null, 'an alternative that always matches empty cannot fail');
});

t.test('bounded repetitions count by their ways to match: a few next to one unbounded pass, many do not', async (t) => {
  for (const pattern of ['.{0,1000}x.{0,1000}y', 'a+a{1,1000}b', 'a*a{0,1000}b', '\\w{1,1000}\\w{1,1000}!', '(?:a|b){1,1000}(?:a|b){1,1000}c', 'a*a{0,31}b', 'a{0,31}a{0,31}a{0,31}b', 'a*a{0,31}a{0,31}b', '\\w+\\s{0,5}\\w{0,30}x', '[a-z]+[a-z0-9]{0,31}@', 'a*a?a?a?b', 'a*a{0,7}b']) {
    t.equal(risk(pattern), POLYNOMIAL_RISK, pattern);
  }
  for (const pattern of ['a{1,4}a*b', 'a{0,31}a{0,31}b', 'foo.*bar.{0,3}baz', '\\d{4,7}\\d+x', 'a*a?a?b', 'a*a{0,3}b', '\\d+\\.?\\d{0,2}x', '(\\d{1,3}\\.){3}\\d{1,3}!']) t.equal(risk(pattern), null, pattern);
});

t.test('a repeated group meets a run only through an alternative whose every mandatory character is in it', async (t) => {
  t.equal(risk('\\b\\d+(?:,\\d{3})*\\b'), null, 'each repetition needs a comma');
  t.equal(risk('\\d+(?:\\d{3})*x'), POLYNOMIAL_RISK);
  t.equal(risk('\\d+(?:,|\\d{3})*x'), POLYNOMIAL_RISK, 'an alternative without the comma does not separate them');
});

t.test('a run after a mandatory character outside its set does not stand in for one without it', async (t) => {
  for (const pattern of ['\\s*(?:d\\s*|)\\s*x', 'a*(?:ba*|)a*c']) t.equal(risk(pattern), POLYNOMIAL_RISK, `${pattern}: the empty alternative leaves \\s*\\s*x`);
});

t.test('nested lookarounds are checked in time linear in their depth', async (t) => {
  const letters = 'bcdefghijklmnopqrstuvwxyzBCDEFGHIJKLMNOPQRSTUVWXYZ';
  const depth = 40;
  const nested = `a*${Array.from({ length: depth }, (_, k) => `(?=${letters[k]}*`).join('')}z${')'.repeat(depth)}`;
  // Walking each body twice made this 2^40 walks: the test would not finish.
  t.equal(risk(nested), null, 'each lookahead repeats other characters');
});

t.test('a negative lookaround tries all its ways whenever it succeeds, and fails when its body matches', async (t) => {
  for (const pattern of ['\\w+(?!\\w*)', '[\\s\\S]*(?!1*)', '.*(?!a*)', '\\w+(?<!\\w*)', '\\s+(?!\\s*)', '\\w+(?!\\w*a?)', '\\w+(?!\\w*|x)', '(?!a*a*)b']) t.equal(risk(pattern), POLYNOMIAL_RISK, pattern);
  t.equal(risk('\\w+(?!\\s)'), null, 'a body of characters outside the run');
});

t.test('the runs before a quantified group go on into it, lookarounds inside it included', async (t) => {
  for (const pattern of ['\\D*(?:\\D(?<=-*))?[a-z]', '-*(?:-(?<=-*))?x', '\\w*(?:\\w(?<=\\w*))?!', '\\w*(?:(?<=\\w*)\\w)?!', '\\w*(?:\\w(?=\\w*!))?x', '\\w*(?:\\w(?=\\w*!)){0,1}x', '\\w*(?:\\w(?=\\w*))?!']) {
    t.equal(risk(pattern), POLYNOMIAL_RISK, pattern);
  }
});

t.test('a run that starts after ^ or after a mandatory character outside its set may hold two unbounded repetitions, not three', async (t) => {
  for (const pattern of ['(?i)\\bpassword\\b\\s*:?\\s*\\S+', '(?i)(?:api|secret)[_-]?key\\s*[:=]?\\s*\\S+', 'd\\s*\\s*x', '^\\s*\\S+\\s*\\S+$']) t.equal(risk(pattern), null, pattern);
  for (const pattern of ['d\\s*\\s*\\s*x', '^.+@.+\\..+$', 'a\\w*\\w*x', '\\s\\s*\\s*x']) t.equal(risk(pattern), POLYNOMIAL_RISK, `${pattern}: three, or the character before is in the run`);
});

t.test('the parser reads what the engine reads', async (t) => {
  t.equal(risk('a{000000000000000000000000,}a{000000000000000000000000,}b'), POLYNOMIAL_RISK, 'a count with leading zeros is still a count');
  t.match(risk('(a{00000000000000000000001,}){00000000000000000000001,}b'), /nested quantifiers/, 'in the exponential check too');
  t.match(risk('[]|(a+)+b\\]'), /nested quantifiers/, '[] is an empty class, not the start of one holding ]');
  t.equal(risk('[^]*[^]*x'), POLYNOMIAL_RISK);
  t.equal(risk('\\ud83d\\ude00*\\ud83d\\ude00*x'), POLYNOMIAL_RISK, 'under u a surrogate pair of escapes is one character');
  t.equal(risk('\\u{1F600}*\\ud83d\\ude00*x'), POLYNOMIAL_RISK);
  const legacy = compileRegex('\\-?u*\\u{3}u*!');
  t.equal(legacy.ok, false, 'without u, \\u{3} is uuu');
  t.equal(risk('\\b(\\w+)\\s+\\1\\b'), null, 'a back-reference repeats the characters of the capturing groups, not anything');
  t.equal(risk('(a)a*\\1*b'), POLYNOMIAL_RISK);
  t.equal(risk('(?<w>\\w)\\s*\\k<w>*\\w+!'), POLYNOMIAL_RISK);
  t.match(compileRegex('(?:\\k<|)(a+)+b').ok ? '' : (compileRegex('(?:\\k<|)(a+)+b') as { reason: string }).reason, /nested quantifiers/, 'without u and named groups, \\k< is text: what follows is read');
  t.equal(compileRegex('(?:\\k<|)a*a*b').ok, false);
  t.equal(compileRegex('a*\\01*a*b').ok, false, 'without u, \\01 is one octal character');
  t.equal(compileRegex('(?:\\c())?a*a*b').ok, false, 'without u, \\c( is a backslash, c and a group');
  t.equal(compileRegex('[(?<]\\k<(a+)+b>').ok, false, 'a (?< inside a class names no group: \\k< is still text');
  t.equal(compileRegex('[(?<]\\k<a*a*a*b>').ok, false);
});

t.test('past the check\'s own limits the pattern is refused, saying why', async (t) => {
  const classes = Array.from({ length: 40 }, (_, k) => `[${String.fromCharCode(0x4e00 + 2 * k)}-${String.fromCharCode(0x4e01 + 2 * k)}]+`);
  t.equal(risk(`${classes.join('')}!`), TOO_MANY_CLASS_RUNS, '40 distinct class pairs');
  t.equal(risk(`${'(?:'.repeat(70)}a${')'.repeat(70)}`), TOO_DEEP);
  t.equal(risk(`${'(?:'.repeat(60)}a${')'.repeat(60)}`), null, '60 deep is fine');
});

t.test('the admin API refuses such a pattern with the reason, and the node fails closed on one that reaches it', async (t) => {
  const parsed = guardrailPolicyCreateSchema.safeParse({ name: 'g', rules: [{ detector: 'regex', pattern: '\\w+\\s*\\w+x', action: 'block', on: 'input' }] });
  t.equal(parsed.success, false);
  t.match(parsed.error?.issues[0]?.message, /^is refused: it has repetitions in a row that can match the same characters/);
  const node = compileRegex('(?i)a*A*b');
  t.equal(node.ok, false);
  t.match(node.ok ? '' : node.reason, /^the pattern is refused: it has repetitions in a row/);
  t.equal(compileRegex('\\w+\\s+\\w+x').ok, true, 'and runs the safe neighbour');
});

t.test('the verdict on a pattern does not depend on what the process checked before (a node that saw nothing else must agree with the control plane)', async (t) => {
  // Classes no other test uses, so the process-wide scan cache holds none of their pairs yet.
  const few = '[αβ]?[γδ]?[εζ]?[ηθ]?[ικ]?[λμ]?';
  const many = `${few}[νξ]?`;
  const fresh = risk(many);
  t.match(fresh, TOO_MANY_CLASS_RUNS);
  t.equal(risk(few), null);
  t.equal(risk(many), fresh, 'refused again after its pairs were scanned for another pattern');
});
