/**
 * A keywords rule whose keyword is only invisible characters (zero width space, soft hyphen, BOM,
 * tags, Hangul fillers, bidi controls) or decorative marks (U+20DD, U+0332) would never fire: the
 * node's matcher folds it to nothing and skips it. The admin API refuses it as it refuses an
 * impossible regex, 400 `rules[0].keywords[i]: must hold a visible character`, on create and replace
 * (real PostgreSQL), nothing stored; and, for a list of tricky keywords, it refuses exactly those the
 * node finds nowhere, not even in the keyword's own text (both sides fold with
 * proto/src/keyword-fold.ts).
 */
import t from 'tap';
import { guardrailPolicyCreateSchema } from '../../control-plane/src/policies/guardrail-policy-validation.js';
import { keywordsDetector } from '../../edge-node/src/guardrails/detectors/keywords.js';
import { testDatabase } from '../fixtures/postgres.js';
import { configApp, expectStatus, uniqueConfigName } from './config-harness.js';
import { migratedPool } from './nodes-harness.js';

interface ErrorReply { error: { code: string; message: string } }

const keywordsRule = (keywords: string[]) => ({ detector: 'keywords', keywords, action: 'block', on: 'input' });

/** Keywords of nothing but invisible characters and decorative marks, and look-alikes that hold a character. */
const TRICKY = [
  '\u200B', '\u00AD', '\u20DD', '\u200B\u200C\u200D\u2060\uFEFF', '\uFE0F', '\u{E0041}', '\u3164', '\u115F', '\u1160', '\u034F',
  '\u061C', '\u180E', '\u202E', '\u2061', '\u206A', '\u17B4', '\u0332', '\u0305\u0336', '\uFE20', '\u20E3', '\u00AD\u0332',
  // ...and keywords that hold something the node matches.
  'a\u200B', '\u200Bb', '\uFE0Fa', '\u0332a', 'a\u20DD', '\u0301', '\u0307', 'I\u0307', '\u0338', '\u0345', '\u11A8', '\u00A0',
  ' ', '\t', '\u2028', '\u3000', '\u{1D41B}', 'ß', 'x',
];

/** A keyword named by its code points (TAP's output is line-based: U+2028 must not go in raw). */
const shown = (keyword: string): string => Array.from(keyword, (c) => `U+${c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}`).join(' ');

/** What the control plane says about a rule listing `keywords`: its messages, or [] when accepted. */
function refusals(keywords: string[]): string[] {
  const result = guardrailPolicyCreateSchema.safeParse({ name: 'g', rules: [keywordsRule(keywords)] });
  return result.success ? [] : result.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`);
}

t.test('the control plane refuses exactly the keywords the node compiles to nothing', async (t) => {
  let refused = 0;
  for (const keyword of TRICKY) {
    const detector = keywordsDetector([keyword]);
    // The node's verdict: it finds the keyword nowhere, not even in its own text.
    const nodeNeverFires = [keyword, ` ${keyword} `, `x ${keyword}`].every((text) => detector.find(text).length === 0);
    const said = refusals([keyword]);
    t.same(said, nodeNeverFires ? ['rules.0.keywords.0: must hold a visible character'] : [], `${shown(keyword)}: ${nodeNeverFires ? 'refused' : 'accepted'}`);
    if (nodeNeverFires) refused++;
  }
  t.ok(refused >= 20, 'the list holds both kinds');
  // Each one named by its place; an invisible keyword listed twice is not also called a repeat.
  t.same(refusals(['ok', '\u200B', 'vpn', '\u20DD', '\u20DD']), [
    'rules.0.keywords.1: must hold a visible character',
    'rules.0.keywords.3: must hold a visible character',
    'rules.0.keywords.4: must hold a visible character',
  ]);
});

t.test('through the admin API: a 400 naming the keyword, on create and replace, nothing stored', async (t) => {
  const db = await testDatabase(t);
  await migratedPool(t, db.url);
  const { call, version } = await configApp(t, db.url);
  const kept = uniqueConfigName('g');
  expectStatus(await call('POST', '/api/v1/guardrail-policies', { name: kept, rules: [keywordsRule(['secret'])] }), 201);
  const before = await version();
  for (const [keywords, message] of [
    [['\u200B'], 'rules[0].keywords[0]: must hold a visible character'],
    [['secret', '\u00AD'], 'rules[0].keywords[1]: must hold a visible character'],
    [['x', 'y', '\u20DD'], 'rules[0].keywords[2]: must hold a visible character'],
  ] as Array<[string[], string]>) {
    const name = uniqueConfigName('g');
    const created = await call('POST', '/api/v1/guardrail-policies', { name, rules: [keywordsRule(keywords)] });
    t.equal(created.statusCode, 400, `${keywords.map(shown).join(', ')}: create 400`);
    t.equal(created.json<ErrorReply>().error.code, 'ZN_ERR_CP_INVALID_REQUEST');
    t.ok(created.json<ErrorReply>().error.message.includes(message), `"${created.json<ErrorReply>().error.message}" says "${message}"`);
    t.equal((await call('GET', `/api/v1/guardrail-policies/${name}`)).statusCode, 404, 'nothing stored');
    const replaced = await call('PUT', `/api/v1/guardrail-policies/${kept}`, { rules: [keywordsRule(['ok']), keywordsRule(keywords)] });
    t.equal(replaced.statusCode, 400, 'replace 400');
    t.ok(replaced.json<ErrorReply>().error.message.includes(message.replace('rules[0]', 'rules[1]')), `replace: "${replaced.json<ErrorReply>().error.message}"`);
  }
  t.equal(await version(), before, 'no config version recorded');
  // A keyword with a visible character around its invisible ones is still accepted.
  expectStatus(await call('POST', '/api/v1/guardrail-policies', { name: uniqueConfigName('g'), rules: [keywordsRule(['pass\u200Bword', 'v\u0332p\u0332n\u0332'])] }), 201);
});
