// The regex safety check counts its work in steps and refuses past MAX_CHECK_STEPS, so a policy of
// the maximum size is checked in bounded work, with the same verdict in every process.
import t from 'tap';
import { regexBacktrackingRisk, regexNeverFiresReason } from '../../proto/src/guardrail-regex-risk.js';
import { MAX_CHECK_STEPS, TOO_COSTLY } from '../../proto/src/guardrail-regex-runs.js';

const MAX_GUARDRAIL_RULES = 200;
const MAX_PATTERN_CHARS = 4096;
// The largest single charge (a class-pair scan) can take a count just past the budget before it stops.
const OVERSHOOT = 1_000;

/** 1 365 distinct optional letters (2 730 characters): every one is compared with every run before it. */
const optionalLetters = (k: number): string => Array.from({ length: 1365 }, (_, i) => `${String.fromCharCode(0x100 + ((i + k) % 1365))}?`).join('');
/** Patterns near the length limit, of shapes that used to take tens of milliseconds each to check. */
const fill = (unit: (i: number) => string, max = MAX_PATTERN_CHARS): string => {
  let s = '';
  for (let i = 0; ; i++) {
    const u = unit(i);
    if (s.length + u.length > max) return s;
    s += u;
  }
};
const L = (i: number): string => String.fromCharCode(0x100 + i);
const heavy = [
  (k: number) => optionalLetters(k),
  (k: number) => fill((i) => `${L(i + k)}*`),
  (k: number) => fill((i) => `${L(i + k)}{0,9}`),
  (k: number) => `(?:${fill((i) => `${L(i + k)}${L(i + k + 1)}${L(i + k + 2)}|`, MAX_PATTERN_CHARS - 5)}z)`,
  (k: number) => '(?:ab)?'.repeat(580) + L(k),
];

t.test('a policy of the maximum size, every rule a slow-to-check pattern of the maximum length, is checked within the step budget', (t) => {
  let total = 0;
  for (let k = 0; k < MAX_GUARDRAIL_RULES; k++) {
    const pattern = heavy[k % heavy.length]!(k);
    t.ok(pattern.length <= MAX_PATTERN_CHARS);
    for (const ignoreCase of [false, true]) {
      const work = { steps: 0 };
      const risk = regexBacktrackingRisk(pattern, { ignoreCase, work });
      if (risk === null) regexNeverFiresReason(pattern, { ignoreCase });
      if (work.steps > MAX_CHECK_STEPS + OVERSHOOT) t.fail(`rule ${k} took ${work.steps} steps`);
      total += work.steps;
    }
  }
  t.ok(total > 0, 'the work is counted');
  t.ok(total <= 2 * MAX_GUARDRAIL_RULES * (MAX_CHECK_STEPS + OVERSHOOT), `the policy's work is bounded (${total} steps)`);
  t.end();
});

t.test('a pattern that takes more steps to check than the budget is refused, saying why', (t) => {
  const work = { steps: 0 };
  t.equal(regexBacktrackingRisk(optionalLetters(0), { work }), TOO_COSTLY);
  t.ok(work.steps > MAX_CHECK_STEPS && work.steps <= MAX_CHECK_STEPS + OVERSHOOT, `stopped at the budget (${work.steps})`);
  t.equal(regexNeverFiresReason(optionalLetters(0)), null, 'refused for its cost, not reported as never firing');
  t.match(TOO_COSTLY, /split it into several shorter rules/);
  t.end();
});

t.test('the verdict and the count for a pattern are the same whatever was checked before', (t) => {
  const patterns = ['\\w+\\s*[:=]\\s*\\S+x', '[a-f]*[d-z]*!', '(?:\\d{1,3}\\.){3}\\d{1,3}', '\\p{L}+\\p{Lu}*x', optionalLetters(7)];
  const check = (p: string): [string | null, number] => {
    const work = { steps: 0 };
    return [regexBacktrackingRisk(p, { ignoreCase: true, work }), work.steps];
  };
  const fresh = patterns.map(check);
  // Warm the process-wide scan cache with other classes, then check again, in the other order.
  for (const other of ['[a-c]*[b-d]*!', '\\s*\\S*x', '[d-z]*[a-f]*!', '\\p{Lu}*\\p{L}+x']) check(other);
  const after = [...patterns].reverse().map(check).reverse();
  t.same(after, fresh);
  t.equal(fresh[4]![0], TOO_COSTLY);
  t.end();
});
