/**
 * Lists whose repeats would silently change what nodes do are refused like allowedModels' and
 * surfaces' repeats, through the admin API on real PostgreSQL, with nothing stored: a keywords rule
 * listing one keyword twice (exactly, or as the node's matcher reads it: case, width, accents
 * written either way, invisible characters), and a route whose targets or fallbacks name one
 * `{upstream, model}` twice (doubling its weight or its failover attempts), on create and replace.
 * The same model at another upstream, another model at one upstream, or a fallback repeating a
 * target stay accepted.
 */
import t from 'tap';
import { keywordsDetector } from '../../edge-node/src/guardrails/detectors/keywords.js';
import { testDatabase } from '../fixtures/postgres.js';
import { configApp, expectStatus, uniqueConfigName } from './config-harness.js';
import { migratedPool } from './nodes-harness.js';

const db = await testDatabase(t);
await migratedPool(t, db.url);
const { call, version } = await configApp(t, db.url);

interface ErrorReply { error: { code: string; message: string } }

const upstream = uniqueConfigName('up');
const other = uniqueConfigName('up');
for (const name of [upstream, other]) {
  expectStatus(await call('POST', '/api/v1/upstreams', { name, kind: 'openai-compatible', baseUrl: 'http://127.0.0.1:9/v1' }), 201);
}

const keywordsRule = (keywords: string[]) => ({ detector: 'keywords', keywords, action: 'block', on: 'input' });

/** The stored guardrail policy of that name, or undefined. */
async function storedPolicy(name: string): Promise<{ name: string; rules: unknown[] } | undefined> {
  const { policies } = expectStatus<{ policies: Array<{ name: string; rules: unknown[] }> }>(await call('GET', '/api/v1/guardrail-policies'), 200);
  return policies.find((p) => p.name === name);
}

t.test('a keywords rule listing a keyword twice is a 400 naming both places, on create and replace; nothing is stored', async (t) => {
  const kept = uniqueConfigName('g');
  expectStatus(await call('POST', '/api/v1/guardrail-policies', { name: kept, rules: [keywordsRule(['a', 'b'])] }), 201);
  const cases: Array<[what: string, keywords: string[], repeated: [number, number], message: string]> = [
    ['the same keyword', ['a', 'a'], [0, 1], 'rules[0].keywords: must not list a keyword twice: keywords[1] repeats keywords[0]'],
    ['a repeat further down', ['x', 'secret', 'y', 'secret'], [1, 3], 'rules[0].keywords: must not list a keyword twice: keywords[3] repeats keywords[1]'],
    ['another case', ['VPN', 'vpn'], [0, 1], 'rules[0].keywords: must not list a keyword twice: keywords[1] repeats keywords[0] (case, width, accents written either way and invisible characters do not count)'],
    ['full width', ['ＶＰＮ', 'vpn'], [0, 1], 'keywords[1] repeats keywords[0] (case, width'],
    ['an accent composed and decomposed', ['café', 'cafe\u0301'], [0, 1], 'keywords[1] repeats keywords[0] (case, width'],
    ['a zero-width space inside', ['password', 'pass\u200Bword'], [0, 1], 'keywords[1] repeats keywords[0] (case, width'],
  ];
  const before = await version();
  for (const [what, keywords, [earlier, index], message] of cases) {
    // What the node does with the pair: the later keyword's text is a hit for the earlier keyword alone.
    t.equal(keywordsDetector([keywords[earlier]!]).find(`x ${keywords[index]!} x`).length, 1, `${what}: the node reads them alike`);
    const name = uniqueConfigName('g');
    const created = await call('POST', '/api/v1/guardrail-policies', { name, rules: [keywordsRule(keywords)] });
    t.equal(created.statusCode, 400, `${what}: create 400`);
    t.equal(created.json<ErrorReply>().error.code, 'ZN_ERR_CP_INVALID_REQUEST', `${what}: code`);
    t.ok(created.json<ErrorReply>().error.message.includes(message), `${what}: "${created.json<ErrorReply>().error.message}" says "${message}"`);
    t.equal(await storedPolicy(name), undefined, `${what}: nothing stored`);
    const replaced = await call('PUT', `/api/v1/guardrail-policies/${kept}`, { rules: [keywordsRule(['ok']), keywordsRule(keywords)] });
    t.equal(replaced.statusCode, 400, `${what}: replace 400`);
    t.ok(replaced.json<ErrorReply>().error.message.includes(message.replace('rules[0]', 'rules[1]')), `${what}: replace names rules[1]`);
  }
  t.equal(await version(), before, 'no config version recorded');
  t.match((await storedPolicy(kept))?.rules, [keywordsRule(['a', 'b'])], 'the policy keeps its rules');
});

t.test('keywords that differ for the node are accepted, in one rule or across rules', async (t) => {
  for (const keywords of [['a', 'b'], ['sik', 'sık'], ['e', 'é'], ['ass', 'class'], ['カ', 'ガ']]) {
    const res = await call('POST', '/api/v1/guardrail-policies', { name: uniqueConfigName('g'), rules: [keywordsRule(keywords)] });
    t.equal(res.statusCode, 201, `${keywords.join(', ')}: ${res.statusCode === 201 ? 'accepted' : res.body}`);
  }
  const res = await call('POST', '/api/v1/guardrail-policies', { name: uniqueConfigName('g'), rules: [keywordsRule(['a']), { ...keywordsRule(['a']), action: 'flag' }] });
  t.equal(res.statusCode, 201, 'one keyword in two rules');
});

t.test('a route listing one upstream and model twice in its targets or its fallbacks is a 400 naming both places; nothing is stored', async (t) => {
  const kept = uniqueConfigName('alias');
  expectStatus(await call('POST', '/api/v1/routes', { alias: kept, targets: [{ upstream, model: 'm' }] }), 201);
  const cases: Array<[what: string, body: Record<string, unknown>, message: string]> = [
    ['two targets alike', { targets: [{ upstream, model: 'm' }, { upstream, model: 'm' }] },
      `targets: must not list a target twice: [1] repeats [0] (upstream '${upstream}', model 'm')`],
    ['two targets alike but for their weight', { targets: [{ upstream, model: 'm', weight: 3 }, { upstream: other, model: 'm' }, { upstream, model: 'm', weight: 0 }] },
      `targets: must not list a target twice: [2] repeats [0] (upstream '${upstream}', model 'm')`],
    ['two fallbacks alike', { targets: [{ upstream, model: 'm' }], fallbacks: [{ upstream: other, model: 'f' }, { upstream, model: 'f' }, { upstream: other, model: 'f' }] },
      `fallbacks: must not list a fallback twice: [2] repeats [0] (upstream '${other}', model 'f')`],
  ];
  const before = await version();
  for (const [what, body, message] of cases) {
    const alias = uniqueConfigName('alias');
    const created = await call('POST', '/api/v1/routes', { alias, ...body });
    t.equal(created.statusCode, 400, `${what}: create 400`);
    t.equal(created.json<ErrorReply>().error.code, 'ZN_ERR_CP_INVALID_REQUEST', `${what}: code`);
    t.equal(created.json<ErrorReply>().error.message, message, `${what}: message`);
    t.equal((await call('GET', `/api/v1/routes/${alias}`)).statusCode, 404, `${what}: nothing stored`);
    const replaced = await call('PUT', `/api/v1/routes/${kept}`, body);
    t.equal(replaced.statusCode, 400, `${what}: replace 400`);
    t.equal(replaced.json<ErrorReply>().error.message, message, `${what}: replace message`);
  }
  t.equal(await version(), before, 'no config version recorded');
  t.match(expectStatus<unknown>(await call('GET', `/api/v1/routes/${kept}`), 200), { targets: [{ upstream, model: 'm', weight: 1 }], fallbacks: [] }, 'the route is as it was');
});

t.test('one model at two upstreams, two models at one upstream, and a fallback repeating a target are accepted', async (t) => {
  const res = await call('POST', '/api/v1/routes', {
    alias: uniqueConfigName('alias'),
    targets: [{ upstream, model: 'm' }, { upstream: other, model: 'm' }, { upstream, model: 'n' }],
    fallbacks: [{ upstream, model: 'm' }, { upstream: other, model: 'n' }],
  });
  t.equal(res.statusCode, 201, res.statusCode === 201 ? 'accepted' : res.body);
});
