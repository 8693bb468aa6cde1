/**
 * `POST /api/v1/api-keys` with an `Idempotency-Key` (docs/api.md, "Retrying a create"): a retry of
 * a create whose answer was lost creates no second live key. The secret is stored only as a hash, so
 * the retry cannot be shown it: it is answered 409 ZN_ERR_CP_IDEMPOTENT_REPLAY naming the key the
 * first request created. The same key with another body is 422, a malformed key 400, and two
 * requests with one key at the same moment create one key (the claim is a primary key, not a look-up).
 * Without the header every create creates, as before.
 */
import { randomUUID } from 'node:crypto';
import type { LightMyRequestResponse } from 'fastify';
import pg from 'pg';
import t from 'tap';
import { testDatabase } from '../fixtures/postgres.js';
import { waitFor } from '../fixtures/wait-for.js';
import { configApp, expectStatus, uniqueConfigName } from './config-harness.js';
import { bearer, migratedPool } from './nodes-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const { app, call } = await configApp(t, db.url);

interface ApiKeyView { id: string; account: string; name: string; prefix: string; status: string }
interface Created { apiKey: ApiKeyView; secret: string; configVersion: number }
interface ErrorAnswer { error: { code: string; message: string; type: string; param: string | null }; apiKey?: ApiKeyView }

/** A string body is sent as written (to send the same JSON with other key order and white space). */
const create = (body: unknown, idempotencyKey?: string | string[]): Promise<LightMyRequestResponse> => app.inject({
  method: 'POST',
  url: '/api/v1/api-keys',
  headers: { ...bearer, 'content-type': 'application/json', ...(idempotencyKey === undefined ? {} : { 'idempotency-key': idempotencyKey }) },
  payload: body as object,
});

async function newAccount(): Promise<string> {
  return expectStatus<{ account: { name: string } }>(await call('POST', '/api/v1/accounts', { name: uniqueConfigName('idem') }), 201).account.name;
}

async function keysOf(account: string): Promise<ApiKeyView[]> {
  return expectStatus<{ apiKeys: ApiKeyView[] }>(await call('GET', `/api/v1/api-keys?account=${account}`), 200).apiKeys;
}

async function hashesOf(account: string): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(
    'select count(*)::int as n from api_keys k join accounts a on a.id = k.account_id where a.name = $1', [account],
  );
  return rows[0]!.n;
}

t.test('a retry with the same key and body creates nothing and names the key the first created', async (t) => {
  const account = await newAccount();
  const key = randomUUID();
  const body = { account, name: 'ci', allowedModels: ['demo-echo'] };
  const first = expectStatus<Created>(await create(body, key), 201);
  t.match(first.secret, /^zn_sk_/);
  const versionAfterFirst = first.configVersion;

  // Key order and white space are not the body: a client re-serialising it is still a retry.
  const retry = await create(JSON.stringify({ allowedModels: ['demo-echo'], name: 'ci', account }, null, 2), key);
  t.equal(retry.statusCode, 409);
  const answer = retry.json<ErrorAnswer>();
  t.equal(answer.error.code, 'ZN_ERR_CP_IDEMPOTENT_REPLAY');
  t.equal(answer.error.type, 'conflict_error');
  t.match(answer.error.message, first.apiKey.id, 'the message names the key created first');
  t.match(answer.error.message, /revoke/);
  t.equal(answer.apiKey?.id, first.apiKey.id, 'and the body carries its view');
  t.equal(answer.apiKey?.prefix, first.apiKey.prefix);
  t.notOk(retry.body.includes(first.secret), 'never the secret');
  t.notOk(retry.body.includes(first.secret.slice(12)), 'nor any of its unshown part');
  t.notOk('secret' in answer, 'no secret field');

  t.same((await keysOf(account)).map((k) => k.id), [first.apiKey.id], 'one key in the list');
  t.equal(await hashesOf(account), 1, 'one key in the database');
  const { rows } = await pool.query<{ version: number }>('select max(version)::int as version from config_changes');
  t.equal(rows[0]!.version, versionAfterFirst, 'no config version recorded for the retry');
  const { rows: claims } = await pool.query<{ row: string }>('select row_to_json(c)::text as row from admin_idempotency_keys c');
  t.equal(claims.length, 1, 'one claim');
  for (const { row } of claims) {
    t.notOk(row.includes(first.secret.slice(12)) || row.includes(Buffer.from(first.secret).toString('hex')), 'the claim holds no secret');
    t.notOk(row.includes(key), 'nor the Idempotency-Key as sent (its hash)');
  }

  // A third try answers the same, also once the key is revoked.
  expectStatus(await call('POST', `/api/v1/api-keys/${first.apiKey.id}/revoke`), 200);
  const again = await create(body, key);
  t.equal(again.statusCode, 409);
  t.equal(again.json<ErrorAnswer>().apiKey?.status, 'revoked');
  t.equal(await hashesOf(account), 1);
});

t.test('the same key with another body is refused and creates nothing', async (t) => {
  const account = await newAccount();
  const key = `order-${randomUUID()}`;
  const first = expectStatus<Created>(await create({ account, name: 'ci' }, key), 201);
  const other = await create({ account, name: 'ci-2' }, key);
  t.equal(other.statusCode, 422);
  const answer = other.json<ErrorAnswer>();
  t.equal(answer.error.code, 'ZN_ERR_CP_IDEMPOTENCY_KEY_REUSED');
  t.notOk(answer.apiKey, 'no key view');
  t.same((await keysOf(account)).map((k) => k.id), [first.apiKey.id]);
  // A new key is a new request.
  expectStatus<Created>(await create({ account, name: 'ci-2' }, `order-${randomUUID()}`), 201);
  t.equal(await hashesOf(account), 2);
});

t.test('without the header every create creates a key', async (t) => {
  const account = await newAccount();
  const body = { account, name: 'ci' };
  const a = expectStatus<Created>(await create(body), 201);
  const b = expectStatus<Created>(await create(body), 201);
  t.not(a.apiKey.id, b.apiKey.id);
  t.equal((await keysOf(account)).length, 2);
  t.equal(await hashesOf(account), 2);
});

t.test('a refused create claims nothing: its retry, once it can succeed, creates the key', async (t) => {
  const account = await newAccount();
  const key = randomUUID();
  const policy = uniqueConfigName('rl');
  const body = { account, name: 'ci', rateLimitPolicy: policy };
  const refused = await create(body, key);
  t.equal(refused.statusCode, 400, 'the policy does not exist yet');
  expectStatus(await call('POST', '/api/v1/rate-limit-policies', { name: policy, requestsPerMinute: 60 }), 201);
  expectStatus<Created>(await create(body, key), 201);
  t.equal(await hashesOf(account), 1);
});

t.test('a key whose claim expired (24 h) creates again', async (t) => {
  const account = await newAccount();
  const key = randomUUID();
  const body = { account, name: 'ci' };
  const first = expectStatus<Created>(await create(body, key), 201);
  await pool.query("update admin_idempotency_keys set expires_at = now() - interval '1 second'");
  const second = expectStatus<Created>(await create(body, key), 201);
  t.not(second.apiKey.id, first.apiKey.id);
  t.equal(await hashesOf(account), 2);
  const { rows } = await pool.query<{ n: number }>('select count(*)::int as n from admin_idempotency_keys where expires_at <= now()');
  t.equal(rows[0]!.n, 0, 'expired claims are swept');
  t.equal((await create(body, key)).statusCode, 409, 'the new claim holds');
});

t.test('a malformed Idempotency-Key is a 400 and creates nothing', async (t) => {
  const account = await newAccount();
  const cases: Array<[string, string | string[]]> = [
    ['longer than 255 characters', 'k'.repeat(256)],
    ['a control character', 'a\u0001b'],
    ['not ASCII', 'clé'],
    ['sent twice', ['a', 'b']],
  ];
  for (const [what, value] of cases) {
    const res = await create({ account, name: 'ci' }, value);
    t.equal(res.statusCode, 400, what);
    t.equal(res.json<ErrorAnswer>().error.code, 'ZN_ERR_CP_IDEMPOTENCY_KEY_INVALID', what);
  }
  t.equal(await hashesOf(account), 0);
  expectStatus<Created>(await create({ account, name: 'ci' }, 'k'.repeat(255)), 201);
  expectStatus<Created>(await create({ account, name: 'ci' }, ' !~ printable ~! '), 201);
  t.equal(await hashesOf(account), 2);
});

t.test('two requests with one key at the same moment create one key', async (t) => {
  const account = await newAccount();
  const key = randomUUID();
  const body = { account, name: 'ci' };
  // Hold the account row: a create that claimed the key waits at the account's share lock, so both
  // requests are in their transactions before either commits (a look-up before the insert would
  // see no claim in either).
  const holder = new pg.Client({ connectionString: db.url });
  await holder.connect();
  t.teardown(() => holder.end());
  await holder.query('begin');
  await holder.query('select id from accounts where name = $1 for update', [account]);
  const requests = [create(body, key), create(body, key)];
  await waitFor(async () => {
    const { rows } = await pool.query<{ n: number }>(
      "select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'",
    );
    return rows[0]!.n >= 2;
  }, { what: 'both creates waiting on a lock' });
  await holder.query('commit');
  const answers = await Promise.all(requests);
  const statuses = answers.map((r) => r.statusCode).sort();
  t.same(statuses, [201, 409]);
  const created = answers.find((r) => r.statusCode === 201)!.json<Created>();
  const replayed = answers.find((r) => r.statusCode === 409)!.json<ErrorAnswer>();
  t.equal(replayed.error.code, 'ZN_ERR_CP_IDEMPOTENT_REPLAY');
  t.equal(replayed.apiKey?.id, created.apiKey.id);
  t.equal(await hashesOf(account), 1);
});
