/**
 * Secrets through the config API: an API key's secret is shown once and only its SHA-256 is
 * stored; a provider's secret is sealed at rest and never comes back in a response, a log line or
 * an error body.
 */
import { createHash, randomBytes } from 'node:crypto';
import t from 'tap';
import { openUpstreamSecret, upstreamSecretContext } from '../../control-plane/src/upstreams/upstream-secret.js';
import { testDatabase } from '../fixtures/postgres.js';
import { configApp, expectStatus, uniqueConfigName } from './config-harness.js';
import { migratedPool } from './nodes-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const { call, log, secretBox } = await configApp(t, db.url);

/** Every row of `table`, every column, as text: what a dump of the table would show. */
async function tableText(table: 'api_keys' | 'upstreams'): Promise<string> {
  const { rows } = await pool.query<{ row: string }>(`select t::text as row from ${table} t`);
  return rows.map((r) => r.row).join('\n');
}

t.test('an API key secret is shown once; only its SHA-256 is stored', async (t) => {
  const account = uniqueConfigName('acct');
  expectStatus(await call('POST', '/api/v1/accounts', { name: account }), 201);
  const res = await call('POST', '/api/v1/api-keys', { account, name: 'billing-bot', allowedModels: ['gpt-4o'] });
  const created = expectStatus<{ apiKey: Record<string, unknown> & { id: string; prefix: string }; secret: string }>(res, 201);
  t.match(created.secret, /^zn_sk_[A-Za-z0-9_-]{43}$/);
  t.equal(created.apiKey.prefix, created.secret.slice(0, 12));
  t.match(created.apiKey, { account, name: 'billing-bot', allowedModels: ['gpt-4o'], status: 'active', expiresAt: null, revokedAt: null });
  t.notOk('secret' in created.apiKey || 'hash' in created.apiKey || 'keyHash' in created.apiKey, 'the view has no secret or hash');

  const { rows } = await pool.query<{ key_hash: Buffer }>('select key_hash from api_keys where id = $1', [created.apiKey.id]);
  t.same(rows[0]?.key_hash, createHash('sha256').update(created.secret).digest(), 'the stored hash is sha256 of the secret');
  const secretPart = created.secret.slice(12);
  t.notOk((await tableText('api_keys')).includes(secretPart), 'the secret (past its display prefix) is nowhere in the table');

  for (const url of ['/api/v1/api-keys', `/api/v1/api-keys?account=${account}`, `/api/v1/api-keys/${created.apiKey.id}`]) {
    const body = expectStatus<unknown>(await call('GET', url), 200);
    const text = JSON.stringify(body);
    t.ok(text.includes(created.apiKey.id), `${url} lists the key`);
    t.notOk(text.includes(secretPart), `${url} does not carry the secret`);
    t.notOk(text.includes(createHash('sha256').update(created.secret).digest('hex')), `${url} does not carry the hash`);
  }
  const revoked = expectStatus<{ apiKey: Record<string, unknown> }>(await call('POST', `/api/v1/api-keys/${created.apiKey.id}/revoke`), 200);
  t.notOk(JSON.stringify(revoked).includes(secretPart), 'revoke does not carry the secret');
  t.notOk(log.text().includes(secretPart), 'the secret is in no log line');
});

t.test('each key gets its own secret', async (t) => {
  const account = uniqueConfigName('acct');
  expectStatus(await call('POST', '/api/v1/accounts', { name: account }), 201);
  const a = expectStatus<{ secret: string }>(await call('POST', '/api/v1/api-keys', { account, name: 'same' }), 201);
  const b = expectStatus<{ secret: string }>(await call('POST', '/api/v1/api-keys', { account, name: 'same' }), 201);
  t.not(a.secret, b.secret);
});

t.test('a provider secret is sealed at rest and never returned, logged or echoed', async (t) => {
  const secret = `sk-provider-${randomBytes(18).toString('hex')}`;
  const name = uniqueConfigName('up');
  const created = expectStatus<{ upstream: Record<string, unknown> & { id: string } }>(
    await call('POST', '/api/v1/upstreams', { name, kind: 'openai', baseUrl: 'https://api.openai.example/v1/', apiKey: `${secret}\n` }), 201);
  t.match(created.upstream, { name, kind: 'openai', baseUrl: 'https://api.openai.example/v1', hasApiKey: true, timeoutMs: 60000 });
  t.same(Object.keys(created.upstream).sort(), ['baseUrl', 'createdAt', 'hasApiKey', 'id', 'kind', 'name', 'timeoutMs']);

  const { rows } = await pool.query<{ secret_encrypted: Buffer }>('select secret_encrypted from upstreams where id = $1', [created.upstream.id]);
  const sealed = rows[0]!.secret_encrypted;
  t.notOk(sealed.includes(Buffer.from(secret)), 'the raw column does not contain the secret');
  t.notOk((await tableText('upstreams')).includes(secret), 'no column of the table contains it');
  t.equal(openUpstreamSecret(secretBox!, created.upstream.id, sealed), secret, 'it opens to the (trimmed) secret');
  t.throws(() => secretBox!.open(sealed, upstreamSecretContext('another-upstream')), 'it is bound to its upstream id');

  const responses: string[] = [JSON.stringify(created)];
  const read = async (method: 'GET' | 'PATCH' | 'POST' | 'DELETE', url: string, payload?: unknown): Promise<number> => {
    const res = await call(method, url, payload);
    responses.push(res.body);
    return res.statusCode;
  };
  t.equal(await read('GET', '/api/v1/upstreams'), 200);
  t.equal(await read('GET', `/api/v1/upstreams/${name}`), 200);
  const rotated = `sk-rotated-${randomBytes(18).toString('hex')}`;
  t.equal(await read('PATCH', `/api/v1/upstreams/${name}`, { apiKey: rotated, timeoutMs: 1000 }), 200);

  // Rejections of bodies that carry a secret: none may quote it back.
  t.equal(await read('POST', '/api/v1/upstreams', { name: 'bad name', kind: 'openai', baseUrl: 'https://a.example', apiKey: secret }), 400);
  t.equal(await read('POST', '/api/v1/upstreams', { name: uniqueConfigName('up'), kind: 'openai', baseUrl: 'ftp://x', apiKey: secret }), 400);
  t.equal(await read('POST', '/api/v1/upstreams', { name: uniqueConfigName('up'), kind: 'openai', baseUrl: 'https://a.example', apiKey: `${secret} with spaces` }), 400);
  t.equal(await read('POST', '/api/v1/upstreams', { name: uniqueConfigName('up'), kind: 'openai', baseUrl: 'https://a.example', apiKey: secret, extra: secret }), 400);
  t.equal(await read('POST', '/api/v1/upstreams', { name, kind: 'openai', baseUrl: 'https://a.example', apiKey: secret }), 409);
  t.equal(await read('PATCH', `/api/v1/upstreams/${name}`, { apiKey: `${rotated} ${'x'.repeat(5000)}` }), 400);
  t.equal(await read('PATCH', '/api/v1/upstreams/missing', { apiKey: rotated }), 404);
  t.equal(await read('POST', '/api/v1/upstreams', `{"name":"x","apiKey":"${secret}"`), 400, 'broken JSON');

  for (const body of responses) {
    t.notOk(body.includes(secret) || body.includes(rotated), `no response carries a secret: ${body.slice(0, 120)}`);
  }
  const logs = log.text();
  t.ok(logs.includes('upstream created'), 'the logs were captured');
  t.notOk(logs.includes(secret) || logs.includes(rotated), 'no log line carries a secret');

  const { rows: after } = await pool.query<{ secret_encrypted: Buffer }>('select secret_encrypted from upstreams where id = $1', [created.upstream.id]);
  t.equal(openUpstreamSecret(secretBox!, created.upstream.id, after[0]!.secret_encrypted), rotated, 'the patch replaced the secret');

  const cleared = expectStatus<{ upstream: { hasApiKey: boolean } }>(await call('PATCH', `/api/v1/upstreams/${name}`, { apiKey: null }), 200);
  t.equal(cleared.upstream.hasApiKey, false, 'apiKey: null removes it');
  const { rows: none } = await pool.query('select 1 from upstreams where id = $1 and secret_encrypted is null', [created.upstream.id]);
  t.equal(none.length, 1);
});

t.test('without a secret box, an upstream secret is refused with 503 and nothing is stored', async (t) => {
  const noBox = await configApp(t, db.url, { secretBox: false });
  const name = uniqueConfigName('up');
  const before = await noBox.version();
  const res = await noBox.call('POST', '/api/v1/upstreams', { name, kind: 'openai', baseUrl: 'https://a.example', apiKey: 'sk-nobox-secret-value' });
  t.equal(res.statusCode, 503);
  t.equal(res.json<{ error: { code: string } }>().error.code, 'ZN_ERR_CP_SECRETS_UNAVAILABLE');
  t.notOk(res.body.includes('sk-nobox-secret-value'));
  t.equal(await noBox.version(), before);
  t.equal((await noBox.call('GET', `/api/v1/upstreams/${name}`)).statusCode, 404);
  t.equal((await noBox.call('POST', '/api/v1/upstreams', { name, kind: 'openai', baseUrl: 'https://a.example' })).statusCode, 201,
    'an upstream without a secret needs no key');
});
