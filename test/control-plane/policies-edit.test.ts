/**
 * Editing a rate-limit or guardrail policy in place (`PUT /api/v1/…-policies/{name}`): the policy
 * keeps its id, so the accounts and keys using it keep it, and the next bundle a live node is
 * pushed carries the new definition. A PUT that changes nothing records no version; an unknown
 * name is a 404; a body the create would refuse is refused with the create's code and rule; and
 * concurrent PUTs each record their own version, the last one's definition standing.
 */
import type { LightMyRequestResponse } from 'fastify';
import pg from 'pg';
import t from 'tap';
import { CONFIG_CHANGE_LOCK_KEY } from '../../control-plane/src/config/config-changes.js';
import { verifyConfigBundle, type ConfigBundle, type ConfigPush } from '../../proto/src/index.js';
import { testDatabase } from '../fixtures/postgres.js';
import { waitFor } from '../fixtures/wait-for.js';
import { configApp, expectStatus, listenConfigChanges, uniqueConfigName } from './config-harness.js';
import {
  enrolledNode,
  gatewayIdentity,
  gatewaySettings,
  liveSession,
  migratedPool,
  startTestGateway,
} from './gateway-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const { call, version } = await configApp(t, db.url);
const changes = await listenConfigChanges(t, db.url);
const identity = await gatewayIdentity();
const settings = gatewaySettings(db.url);
const gateway = await startTestGateway(t, { pool, settings, identity });

interface RateLimitPolicy { id: string; name: string; requestsPerMinute: number | null; tokensPerMinute: number | null; concurrentRequests: number | null }
interface GuardrailPolicy { id: string; name: string; rules: Array<Record<string, unknown>> }
interface ErrorReply { error: { code: string; message: string } }

const EMAIL_MASK = { detector: 'email', action: 'mask', on: 'both' };
const PROJECT_BLOCK = { detector: 'regex', pattern: '\\bproject-x\\b', action: 'block', on: 'input' };
const KEYWORDS_FLAG = { detector: 'keywords', keywords: ['internal only', 'draft'], action: 'flag', on: 'output' };

async function createRateLimitPolicy(body: Record<string, unknown>): Promise<RateLimitPolicy> {
  const name = uniqueConfigName('rl');
  return expectStatus<{ policy: RateLimitPolicy }>(await call('POST', '/api/v1/rate-limit-policies', { name, ...body }), 201).policy;
}

async function createGuardrailPolicy(rules: unknown[]): Promise<GuardrailPolicy> {
  const name = uniqueConfigName('gr');
  return expectStatus<{ policy: GuardrailPolicy }>(await call('POST', '/api/v1/guardrail-policies', { name, rules }), 201).policy;
}

async function listed<P extends { name: string }>(kind: 'rate-limit-policies' | 'guardrail-policies', name: string): Promise<P | undefined> {
  return expectStatus<{ policies: P[] }>(await call('GET', `/api/v1/${kind}`), 200).policies.find((p) => p.name === name);
}

/** Verifies a push as a node must (the signature with the gateway's key, the schema) and opens it. */
function opened(push: ConfigPush): ConfigBundle {
  const check = verifyConfigBundle(push.bundle, push.signature, gateway.signingKey.publicKeyPem);
  if (!check.ok) throw new Error(`the push does not verify: ${check.code}: ${check.message}`);
  return check.bundle;
}

/** The latest version once its NOTIFY arrived, and how many NOTIFYs came so far: a mark to compare against. */
async function settledMark(): Promise<{ version: number; heard: number }> {
  const current = await version();
  await changes.heard(current);
  return { version: current, heard: changes.versions.length };
}

t.test('editing a policy changes the bundle nodes get and keeps the keys and accounts using it attached', async (t) => {
  const rate = await createRateLimitPolicy({ requestsPerMinute: 60 });
  const guard = await createGuardrailPolicy([EMAIL_MASK]);
  const account = uniqueConfigName('acct');
  const accountId = expectStatus<{ account: { id: string } }>(
    await call('POST', '/api/v1/accounts', { name: account, rateLimitPolicy: rate.name }), 201).account.id;
  const keyId = expectStatus<{ apiKey: { id: string } }>(await call('POST', '/api/v1/api-keys', {
    account, name: 'k1', rateLimitPolicy: rate.name, guardrailPolicy: guard.name,
  }), 201).apiKey.id;

  const node = await enrolledNode(pool, settings);
  const { conn } = await liveSession(t, gateway.server.port, identity.caPem, node);
  const first = await conn.nextConfigPush('the push after hello');
  const before = opened(first);
  t.same(before.guardrailPolicies.find((g) => g.id === guard.id)?.rules, [EMAIL_MASK], 'before: the policy as created');
  t.same(before.apiKeys.find((k) => k.id === keyId)?.limits, { requestsPerMinute: 60 }, 'before: the key\'s limits from the policy');
  conn.ackConfig(first.version);

  // The guardrail policy: a rule added in front of the one it had.
  const edited = expectStatus<{ policy: GuardrailPolicy; configVersion: number }>(
    await call('PUT', `/api/v1/guardrail-policies/${guard.name}`, { rules: [PROJECT_BLOCK, EMAIL_MASK] }), 200);
  t.equal(edited.policy.id, guard.id, 'the policy keeps its id');
  t.same(edited.policy.rules, [PROJECT_BLOCK, EMAIL_MASK], 'answers with the new rules');
  t.equal(edited.configVersion, Number(first.version) + 1, 'a new config version');
  const guardPush = await conn.nextConfigPush('the push of the guardrail edit');
  t.equal(guardPush.version, BigInt(edited.configVersion), 'the node is pushed that version');
  const afterGuard = opened(guardPush);
  t.same(afterGuard.guardrailPolicies.find((g) => g.id === guard.id), { id: guard.id, name: guard.name, rules: [PROJECT_BLOCK, EMAIL_MASK] },
    'the node gets the new rules under the same id');
  t.equal(afterGuard.apiKeys.find((k) => k.id === keyId)?.guardrailPolicyId, guard.id, 'and the key still names the policy');
  conn.ackConfig(guardPush.version);

  // The rate-limit policy: tightened, a token limit added.
  const tightened = expectStatus<{ policy: RateLimitPolicy; configVersion: number }>(
    await call('PUT', `/api/v1/rate-limit-policies/${rate.name}`, { requestsPerMinute: 30, tokensPerMinute: 100_000 }), 200);
  t.equal(tightened.policy.id, rate.id, 'the rate-limit policy keeps its id');
  t.match(tightened.policy, { requestsPerMinute: 30, tokensPerMinute: 100_000, concurrentRequests: null });
  t.equal(tightened.configVersion, edited.configVersion + 1, 'a new config version');
  const ratePush = await conn.nextConfigPush('the push of the rate-limit edit');
  t.equal(ratePush.version, BigInt(tightened.configVersion), 'the node is pushed that version');
  const afterRate = opened(ratePush);
  const newLimits = { requestsPerMinute: 30, tokensPerMinute: 100_000 };
  t.same(afterRate.accounts.find((a) => a.id === accountId)?.limits, newLimits, 'the account\'s limits are the new ones');
  t.same(afterRate.apiKeys.find((k) => k.id === keyId)?.limits, newLimits, 'and so are the key\'s');
  conn.ackConfig(ratePush.version);

  const key = expectStatus<{ rateLimitPolicy: string | null; guardrailPolicy: string | null }>(await call('GET', `/api/v1/api-keys/${keyId}`), 200);
  t.match(key, { rateLimitPolicy: rate.name, guardrailPolicy: guard.name }, 'the key still shows both policies');
  const stillInUse = await call('DELETE', `/api/v1/guardrail-policies/${guard.name}`);
  t.equal(stillInUse.json<ErrorReply>().error.code, 'ZN_ERR_CP_POLICY_IN_USE', 'and the edited policy is still in use by it');
});

t.test('a PUT that changes nothing records no version and notifies nothing', async (t) => {
  const rate = await createRateLimitPolicy({ requestsPerMinute: 60, concurrentRequests: 4 });
  const guard = await createGuardrailPolicy([PROJECT_BLOCK, KEYWORDS_FLAG]);
  const mark = await settledMark();

  const noOps: Array<[string, string, unknown]> = [
    ['the same limits', `/api/v1/rate-limit-policies/${rate.name}`, { requestsPerMinute: 60, concurrentRequests: 4 }],
    ['the same limits, the missing one spelled null', `/api/v1/rate-limit-policies/${rate.name}`,
      { concurrentRequests: 4, tokensPerMinute: null, requestsPerMinute: 60 }],
    ['the same rules', `/api/v1/guardrail-policies/${guard.name}`, { rules: [PROJECT_BLOCK, KEYWORDS_FLAG] }],
    ['the same rules with their fields in another order', `/api/v1/guardrail-policies/${guard.name}`, {
      rules: [
        { on: 'input', action: 'block', pattern: '\\bproject-x\\b', detector: 'regex' },
        { keywords: ['internal only', 'draft'], on: 'output', detector: 'keywords', action: 'flag' },
      ],
    }],
  ];
  for (const [what, url, body] of noOps) {
    const reply = expectStatus<{ policy: { id: string }; configVersion: number }>(await call('PUT', url, body), 200);
    t.equal(reply.configVersion, mark.version, `${what}: answers with the current version`);
    t.equal(reply.policy.id, url.includes('rate-limit') ? rate.id : guard.id, `${what}: answers with the policy`);
    t.equal(await version(), mark.version, `${what}: the version did not move`);
  }
  t.match(await listed<RateLimitPolicy>('rate-limit-policies', rate.name), { requestsPerMinute: 60, tokensPerMinute: null, concurrentRequests: 4 });
  t.same((await listed<GuardrailPolicy>('guardrail-policies', guard.name))?.rules, [PROJECT_BLOCK, KEYWORDS_FLAG]);

  // Order is what nodes apply: the same rules reordered are a change, and the only one notified.
  const reordered = expectStatus<{ configVersion: number }>(
    await call('PUT', `/api/v1/guardrail-policies/${guard.name}`, { rules: [KEYWORDS_FLAG, PROJECT_BLOCK] }), 200);
  t.equal(reordered.configVersion, mark.version + 1, 'the rules reordered record a version');
  await changes.heard(reordered.configVersion);
  // A limit left out is no limit of that kind: a change.
  const dropped = expectStatus<{ policy: RateLimitPolicy; configVersion: number }>(
    await call('PUT', `/api/v1/rate-limit-policies/${rate.name}`, { requestsPerMinute: 60 }), 200);
  t.equal(dropped.configVersion, mark.version + 2, 'a limit left out records a version');
  t.equal(dropped.policy.concurrentRequests, null, 'and removes that limit');
  await changes.heard(dropped.configVersion);
  t.same(changes.versions.slice(mark.heard), [mark.version + 1, mark.version + 2], 'only the two changes were notified, none of the no-ops');
});

t.test('a PUT to a policy name that does not exist answers 404 ZN_ERR_CP_POLICY_NOT_FOUND and records nothing', async (t) => {
  const gone = await createGuardrailPolicy([EMAIL_MASK]);
  expectStatus(await call('DELETE', `/api/v1/guardrail-policies/${gone.name}`), 200);
  const mark = await settledMark();
  const cases: Array<[string, string, unknown]> = [
    ['a rate-limit policy never created', '/api/v1/rate-limit-policies/no-such-policy', { requestsPerMinute: 1 }],
    ['a guardrail policy never created', '/api/v1/guardrail-policies/no-such-policy', { rules: [] }],
    ['a deleted guardrail policy', `/api/v1/guardrail-policies/${gone.name}`, { rules: [EMAIL_MASK] }],
  ];
  for (const [what, url, body] of cases) {
    const res = await call('PUT', url, body);
    t.equal(res.statusCode, 404, `${what}: 404`);
    t.equal(res.json<ErrorReply>().error.code, 'ZN_ERR_CP_POLICY_NOT_FOUND', `${what}: the policy code`);
  }
  t.equal(await version(), mark.version, 'no version recorded');
  t.equal(await listed('guardrail-policies', gone.name), undefined, 'the deleted policy did not come back');
});

t.test('an invalid body is refused with the code and rule the create gives, and changes nothing', async (t) => {
  const rate = await createRateLimitPolicy({ requestsPerMinute: 60 });
  const guard = await createGuardrailPolicy([EMAIL_MASK]);
  const mark = await settledMark();

  // Each body as a PUT, and with a name as a POST: both refused the same way.
  const cases: Array<[string, 'rate-limit-policies' | 'guardrail-policies', string, Record<string, unknown>, RegExp]> = [
    ['no limit at all', 'rate-limit-policies', rate.name, { requestsPerMinute: null }, /^body: must set at least one of requestsPerMinute/],
    ['a limit out of bounds', 'rate-limit-policies', rate.name, { requestsPerMinute: 0 }, /^requestsPerMinute: must be an integer from 1 to 10000000$/],
    ['a limit as a string', 'rate-limit-policies', rate.name, { tokensPerMinute: '100' }, /^tokensPerMinute: must be an integer/],
    ['rules missing', 'guardrail-policies', guard.name, {}, /^rules: is required$/],
    ['a regex that can take exponential time', 'guardrail-policies', guard.name,
      { rules: [{ detector: 'regex', pattern: '(a+)+$', action: 'block', on: 'input' }] }, /^rules\[0\]\.pattern: is refused: /],
    ['a keywords rule without keywords', 'guardrail-policies', guard.name,
      { rules: [{ detector: 'keywords', action: 'flag', on: 'both' }] }, /^rules\[0\]\.keywords: is required for the keywords detector$/],
  ];
  for (const [what, kind, name, body, rule] of cases) {
    const put = await call('PUT', `/api/v1/${kind}/${name}`, body);
    t.equal(put.statusCode, 400, `${what}: 400`);
    const refused = put.json<ErrorReply>().error;
    t.equal(refused.code, 'ZN_ERR_CP_INVALID_REQUEST', `${what}: the create's code`);
    t.match(refused.message, rule, `${what}: names the field and its rule`);
    const post = await call('POST', `/api/v1/${kind}`, { name: uniqueConfigName('new'), ...body });
    t.same(post.json<ErrorReply>().error, refused, `${what}: exactly what the create answers`);
  }

  // The name is the path's, as for a route's alias or a tool server's name.
  for (const [kind, name, body] of [
    ['rate-limit-policies', rate.name, { name: rate.name, requestsPerMinute: 10 }],
    ['guardrail-policies', guard.name, { name: 'renamed', rules: [] }],
  ] as const) {
    const res = await call('PUT', `/api/v1/${kind}/${name}`, body);
    t.equal(res.statusCode, 400, `${kind}: a name in the body is refused`);
    t.match(res.json<ErrorReply>().error, { code: 'ZN_ERR_CP_INVALID_REQUEST', message: 'name: unknown field' });
  }
  const badPath = await call('PUT', '/api/v1/rate-limit-policies/a%20b', { requestsPerMinute: 10 });
  t.equal(badPath.statusCode, 400, 'a path name that breaks the name rule is a 400, not a look-up');

  t.equal(await version(), mark.version, 'no version recorded');
  t.match(await listed<RateLimitPolicy>('rate-limit-policies', rate.name), { id: rate.id, requestsPerMinute: 60 }, 'the rate-limit policy is as it was');
  t.same((await listed<GuardrailPolicy>('guardrail-policies', guard.name))?.rules, [EMAIL_MASK], 'the guardrail policy is as it was');
});

/**
 * Two PUTs of one policy, made to overlap for sure: the test holds the config-change lock until
 * one PUT has written and waits for that lock, and the other waits on the first one's row lock.
 * Returns both answers and how many versions the pair recorded.
 */
async function overlappingPuts(url: string, bodies: [object, object]): Promise<{ answers: LightMyRequestResponse[]; versions: number }> {
  const before = await version();
  const holder = new pg.Client({ connectionString: db.url });
  await holder.connect();
  try {
    const { rows: me } = await holder.query<{ pid: number }>('select pg_backend_pid() as pid');
    await holder.query('begin');
    await holder.query('select pg_advisory_xact_lock($1::bigint)', [CONFIG_CHANGE_LOCK_KEY]);
    const puts = bodies.map((body) => call('PUT', url, body));
    await waitFor(async () => {
      const { rows } = await pool.query<{ waiting: number }>(
        `select count(*)::int as waiting from pg_stat_activity
          where datname = current_database() and wait_event_type = 'Lock' and pid <> $1`,
        [me[0]!.pid],
      );
      return rows[0]!.waiting >= 2;
    }, { what: 'both PUTs waiting: one for the config-change lock, the other for the first one\'s row' });
    await holder.query('commit');
    const answers = await Promise.all(puts);
    return { answers, versions: (await version()) - before };
  } finally {
    await holder.end();
  }
}

async function updatesRecorded(entity: string, id: string): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(
    "select count(*)::int as n from config_changes where entity = $1 and entity_id = $2 and action = 'update'", [entity, id]);
  return rows[0]!.n;
}

/** The two answers in commit order (by the version each recorded), with the bodies they were for. */
function byVersion<P>(answers: LightMyRequestResponse[], bodies: [object, object]): Array<{ reply: { policy: P; configVersion: number }; body: object }> {
  return answers
    .map((res, i) => ({ reply: expectStatus<{ policy: P; configVersion: number }>(res, 200), body: bodies[i]! }))
    .sort((a, b) => a.reply.configVersion - b.reply.configVersion);
}

t.test('concurrent PUTs of different definitions record exactly one version each, and the final state is the later one', async (t) => {
  const guard = await createGuardrailPolicy([EMAIL_MASK]);
  const guardBodies: [object, object] = [{ rules: [PROJECT_BLOCK] }, { rules: [KEYWORDS_FLAG, EMAIL_MASK] }];
  const guardRun = await overlappingPuts(`/api/v1/guardrail-policies/${guard.name}`, guardBodies);
  t.equal(guardRun.versions, 2, 'guardrail: two versions for two changes');
  const [guardFirst, guardLast] = byVersion<GuardrailPolicy>(guardRun.answers, guardBodies);
  t.equal(guardLast!.reply.configVersion, guardFirst!.reply.configVersion + 1, 'guardrail: each answers with its own version');
  t.equal(await updatesRecorded('guardrail-policy', guard.id), 2, 'guardrail: two updates recorded for the policy');
  t.same(guardLast!.reply.policy.rules, (guardLast!.body as { rules: unknown }).rules, 'guardrail: the later one answers with its rules');
  t.same((await listed<GuardrailPolicy>('guardrail-policies', guard.name))?.rules, (guardLast!.body as { rules: unknown }).rules,
    'guardrail: what stands is the later one\'s rules');

  const rate = await createRateLimitPolicy({ requestsPerMinute: 60 });
  const rateBodies: [object, object] = [{ requestsPerMinute: 10 }, { concurrentRequests: 2 }];
  const rateRun = await overlappingPuts(`/api/v1/rate-limit-policies/${rate.name}`, rateBodies);
  t.equal(rateRun.versions, 2, 'rate-limit: two versions for two changes');
  const [rateFirst, rateLast] = byVersion<RateLimitPolicy>(rateRun.answers, rateBodies);
  t.equal(rateLast!.reply.configVersion, rateFirst!.reply.configVersion + 1, 'rate-limit: each answers with its own version');
  t.equal(await updatesRecorded('rate-limit-policy', rate.id), 2, 'rate-limit: two updates recorded for the policy');
  const expected = { requestsPerMinute: null, tokensPerMinute: null, concurrentRequests: null, ...rateLast!.body };
  t.match(await listed<RateLimitPolicy>('rate-limit-policies', rate.name), expected, 'rate-limit: what stands is the later one\'s limits, nothing of the other');
});

t.test('two concurrent PUTs of the same new definition record one version', async (t) => {
  const guard = await createGuardrailPolicy([EMAIL_MASK]);
  const body = { rules: [PROJECT_BLOCK] };
  const { answers, versions } = await overlappingPuts(`/api/v1/guardrail-policies/${guard.name}`, [body, body]);
  t.equal(versions, 1, 'one version: the second PUT found the rules it was setting');
  const replies = answers.map((res) => expectStatus<{ policy: GuardrailPolicy; configVersion: number }>(res, 200));
  t.equal(replies[0]!.configVersion, replies[1]!.configVersion, 'both answer with the version the first recorded');
  t.same(replies[1]!.policy, replies[0]!.policy, 'and with the same policy');
  t.equal(await updatesRecorded('guardrail-policy', guard.id), 1, 'one update recorded for the policy');
});

t.test('an edit that makes a policy larger is held to the bundle limits as a create is; one that makes it smaller never is', async (t) => {
  const rate = await createRateLimitPolicy({ requestsPerMinute: 60 });
  const guard = await createGuardrailPolicy([EMAIL_MASK, PROJECT_BLOCK]);
  const account = uniqueConfigName('acct');
  const accountId = expectStatus<{ account: { id: string } }>(await call('POST', '/api/v1/accounts', { name: account }), 201).account.id;
  const tag = uniqueConfigName('fill');
  t.teardown(() => pool.query("delete from api_keys where name like $1 || '%'", [tag]));
  // A config stored before the limits held: 30 000 revoked keys (kept in every bundle), each
  // carrying the policy's limits, are over the 8 MiB.
  await pool.query(
    `insert into api_keys (account_id, name, key_hash, key_prefix, status, revoked_at, rate_limit_policy_id)
     select $1, $2 || '-' || i, sha256(convert_to($2 || '-' || i, 'UTF8')), 'zn_sk_fill__', 'revoked', now(), $3
       from generate_series(1, 30000) as i`,
    [accountId, tag, rate.id],
  );

  const limitRefusal = (what: string, res: LightMyRequestResponse): void => {
    t.equal(res.statusCode, 409, `${what}: 409`);
    t.match(res.json<ErrorReply>().error, { code: 'ZN_ERR_CP_CONFIG_LIMIT', message: /^the config bundle nodes get would take/ }, `${what}: the limit's code`);
  };
  const before = await version();
  limitRefusal('a guardrail create', await call('POST', '/api/v1/guardrail-policies', { name: uniqueConfigName('gr'), rules: [EMAIL_MASK] }));
  limitRefusal('a guardrail edit adding a rule',
    await call('PUT', `/api/v1/guardrail-policies/${guard.name}`, { rules: [EMAIL_MASK, PROJECT_BLOCK, KEYWORDS_FLAG] }));
  limitRefusal('a rate-limit edit adding a limit',
    await call('PUT', `/api/v1/rate-limit-policies/${rate.name}`, { requestsPerMinute: 60, tokensPerMinute: 1000 }));
  limitRefusal('a rate-limit edit to a longer number', await call('PUT', `/api/v1/rate-limit-policies/${rate.name}`, { requestsPerMinute: 600 }));
  t.equal(await version(), before, 'no version recorded for any of them');
  t.match(await listed<RateLimitPolicy>('rate-limit-policies', rate.name), { requestsPerMinute: 60, tokensPerMinute: null }, 'the limits are as they were');
  t.same((await listed<GuardrailPolicy>('guardrail-policies', guard.name))?.rules, [EMAIL_MASK, PROJECT_BLOCK], 'the rules are as they were');

  // Tightening a rate limit or dropping a rule only shrinks every bundle: never refused.
  const tightened = expectStatus<{ configVersion: number }>(await call('PUT', `/api/v1/rate-limit-policies/${rate.name}`, { requestsPerMinute: 6 }), 200);
  t.equal(tightened.configVersion, before + 1, 'a shorter limit goes through');
  const dropped = expectStatus<{ configVersion: number }>(await call('PUT', `/api/v1/guardrail-policies/${guard.name}`, { rules: [PROJECT_BLOCK] }), 200);
  t.equal(dropped.configVersion, before + 2, 'fewer rules go through');
});
