import { readFileSync } from 'node:fs';
import type { FastifyInstance } from 'fastify';
import pg from 'pg';
import t from 'tap';
import { z } from 'zod';
import { PROTOCOL_VERSION } from '../../proto/src/protocol-version.js';
import { buildApp } from '../../control-plane/src/app.js';
import { migrate } from '../../control-plane/src/db/migrate.js';
import { createPool } from '../../control-plane/src/db/pool.js';
import { errorTable, zenovaError } from '../../control-plane/src/errors.js';
import type { ZodTypeProvider } from '../../control-plane/src/http/zod-schemas.js';
import { testDatabase } from '../fixtures/postgres.js';
import { runEach } from '../fixtures/teardown-steps.js';
import { ADMIN_TOKEN, captureLogger, closedPort, testSettings } from './helpers.js';
import type { CapturedLogger } from './helpers.js';

const db = await testDatabase(t);
{
  const pool = createPool({ databaseUrl: db.url });
  await migrate(pool);
  await pool.end();
}

interface Harness { app: FastifyInstance; log: CapturedLogger }
interface HasTeardown { teardown(fn: () => unknown): void }

/** A fresh app on its own pool; `databaseUrl` lets a test point it at a dead database. */
async function harness(tt: HasTeardown, opts: { databaseUrl?: string; logLevel?: 'info' | 'debug'; endPool?: boolean } = {}): Promise<Harness> {
  const settings = testSettings(opts.databaseUrl ?? db.url, { logLevel: opts.logLevel ?? 'info' });
  const log = captureLogger(settings);
  const pool = createPool({ databaseUrl: settings.databaseUrl, logger: log.logger, connectionTimeoutMs: 2_000 });
  let poolEnded = false;
  if (opts.endPool) {
    await pool.end();
    poolEnded = true;
  }
  const app = await buildApp({ settings, pool, logger: log.logger });
  tt.teardown(() => runEach('the app', () => app.close(), async () => { if (!poolEnded) await pool.end(); }));
  return { app, log };
}

const bearer = { authorization: `Bearer ${ADMIN_TOKEN}` };

t.test('GET /healthz answers 200 ok while the database answers', async (t) => {
  const { app } = await harness(t);
  const res = await app.inject({ method: 'GET', url: '/healthz' });
  t.equal(res.statusCode, 200);
  t.same(res.json(), { status: 'ok' });
  t.match(res.headers['x-request-id'], /^[0-9a-f-]{36}$/, 'every response carries a request id');
});

t.test('GET /healthz answers 503 DATABASE_UNAVAILABLE when the pool is closed', async (t) => {
  const { app } = await harness(t, { endPool: true });
  const res = await app.inject({ method: 'GET', url: '/healthz' });
  t.equal(res.statusCode, 503);
  t.same(res.json(), { error: { ...pick(errorTable.ZN_ERR_CP_DATABASE_UNAVAILABLE), param: null, code: 'ZN_ERR_CP_DATABASE_UNAVAILABLE' } });
  t.equal(res.headers['retry-after'], '1', 'retryable: the client is told when to come back');
});

t.test('GET /healthz answers 503 when the database cannot be reached', async (t) => {
  const port = await closedPort();
  const { app } = await harness(t, { databaseUrl: `postgres://zenova@127.0.0.1:${port}/zenova` });
  const res = await app.inject({ method: 'GET', url: '/healthz' });
  t.equal(res.statusCode, 503);
  t.equal(res.json().error.code, 'ZN_ERR_CP_DATABASE_UNAVAILABLE');
  t.notMatch(res.body, /ECONNREFUSED|127\.0\.0\.1/, 'no connection details in the body');
});

t.test('a database that refuses new connections (ALLOW_CONNECTIONS false, as in maintenance) answers 503 DATABASE_UNAVAILABLE, not 500', async (t) => {
  // A database of its own: the others' tests keep theirs.
  const own = await testDatabase(t);
  const name = new URL(own.url).pathname.slice(1);
  const adminUrl = new URL(own.url);
  adminUrl.pathname = '/postgres';
  const admin = new pg.Client({ connectionString: adminUrl.toString() });
  await admin.connect();
  t.teardown(() => runEach('the admin connection', () => admin.query(`ALTER DATABASE "${name}" ALLOW_CONNECTIONS true`), () => admin.end()));
  await admin.query(`ALTER DATABASE "${name}" ALLOW_CONNECTIONS false`);
  const { app } = await harness(t, { databaseUrl: own.url });
  for (const url of ['/healthz', '/api/v1/nodes']) {
    const res = await app.inject({ method: 'GET', url, headers: bearer });
    t.equal(res.statusCode, 503, `${url}: ${res.body}`);
    t.equal(res.json().error.code, 'ZN_ERR_CP_DATABASE_UNAVAILABLE', url);
  }
});

t.test('GET /api/version reports product, component, versions and the installation id', async (t) => {
  const { app } = await harness(t);
  const res = await app.inject({ method: 'GET', url: '/api/version' });
  t.equal(res.statusCode, 200);
  const body = res.json();
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
  t.equal(body.product, 'zenova-gateway');
  t.equal(body.component, 'control-plane');
  t.equal(body.version, pkg.version);
  t.equal(body.protocolVersion, PROTOCOL_VERSION);
  const pg = createPool({ databaseUrl: db.url });
  t.teardown(() => pg.end());
  const { rows } = await pg.query<{ id: string }>('select id from installation');
  t.equal(rows.length, 1, 'exactly one installation row');
  t.equal(body.installationId, rows[0]!.id);
  t.match(body.installationId, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
  const again = await app.inject({ method: 'GET', url: '/api/version' });
  t.equal(again.json().installationId, body.installationId, 'stable across calls');
});

t.test('the admin API refuses requests without the admin bearer token', async (t) => {
  const { app } = await harness(t);
  // Each says which of three things is wrong: no header, a header not of the form, a wrong token.
  const cases: Array<[string, Record<string, string>, RegExp]> = [
    ['no header', {}, /^Missing admin bearer token/],
    ['wrong token', { authorization: `Bearer ${ADMIN_TOKEN.slice(0, -1)}x` }, /^Invalid admin bearer token/],
    ['token prefix', { authorization: `Bearer ${ADMIN_TOKEN.slice(0, 32)}` }, /^Invalid admin bearer token/],
    ['basic scheme', { authorization: `Basic ${Buffer.from(`admin:${ADMIN_TOKEN}`).toString('base64')}` }, /^Malformed Authorization header/],
    ['bare token', { authorization: ADMIN_TOKEN }, /^Malformed Authorization header/],
    ['a space inside the token', { authorization: `Bearer ${ADMIN_TOKEN.slice(0, 20)} ${ADMIN_TOKEN.slice(20)}` }, /^Malformed Authorization header/],
  ];
  for (const [name, headers, message] of cases) {
    const res = await app.inject({ method: 'GET', url: '/api/v1/whoami', headers });
    t.equal(res.statusCode, 401, name);
    t.match(res.json().error.message, message, name);
    t.equal(res.json().error.code, 'ZN_ERR_CP_UNAUTHENTICATED', name);
    t.equal(res.json().error.type, 'authentication_error', name);
    t.match(res.headers['www-authenticate'], /^Bearer /, `${name}: the scheme is announced`);
    t.notMatch(res.body, ADMIN_TOKEN.slice(0, 20), `${name}: the token is not echoed`);
  }
});

t.test('the admin API answers with the admin bearer token', async (t) => {
  const { app } = await harness(t);
  const res = await app.inject({ method: 'GET', url: '/api/v1/whoami', headers: bearer });
  t.equal(res.statusCode, 200);
  t.same(res.json(), { principal: 'admin' });
  const lower = await app.inject({ method: 'GET', url: '/api/v1/whoami', headers: { authorization: `bearer ${ADMIN_TOKEN}` } });
  t.equal(lower.statusCode, 200, 'the scheme name is case-insensitive');
});

t.test('unknown admin routes need the token before they say 404', async (t) => {
  const { app } = await harness(t);
  const anonymous = await app.inject({ method: 'GET', url: '/api/v1/no-such-thing' });
  t.equal(anonymous.statusCode, 401);
  const admin = await app.inject({ method: 'GET', url: '/api/v1/no-such-thing', headers: bearer });
  t.equal(admin.statusCode, 404);
  t.equal(admin.json().error.code, 'ZN_ERR_CP_NOT_FOUND');
});

t.test('an unknown route answers 404 ZN_ERR_CP_NOT_FOUND naming the path but not the query', async (t) => {
  const { app } = await harness(t);
  const res = await app.inject({ method: 'GET', url: '/no/such/route?token=abc123secret' });
  t.equal(res.statusCode, 404);
  const { error } = res.json();
  t.equal(error.code, 'ZN_ERR_CP_NOT_FOUND');
  t.equal(error.type, 'not_found_error');
  t.match(error.message, 'GET /no/such/route');
  t.notMatch(res.body, 'abc123secret');
});

/** The app plus a test route exercising body parsing, schema validation and failures. */
async function appWithTestRoutes(t: HasTeardown): Promise<Harness> {
  const h = await harness(t);
  const typed = h.app.withTypeProvider<ZodTypeProvider>();
  typed.post('/test/echo', {
    schema: { body: z.object({ name: z.string().min(1), count: z.number().int().optional() }) },
  }, async (request) => ({ name: request.body.name }));
  typed.get('/test/boom', async () => {
    throw new Error('relation "internal_table" does not exist (pool.js:42)');
  });
  typed.get('/test/db-down', async () => {
    throw Object.assign(new Error('connect ECONNREFUSED 10.0.0.5:5432'), { code: 'ECONNREFUSED' });
  });
  typed.get('/test/zenova', async () => {
    throw zenovaError('ZN_ERR_CP_INVALID_REQUEST', 'a specific reason');
  });
  return h;
}

t.test('a body that matches the route schema reaches the handler', async (t) => {
  const { app } = await appWithTestRoutes(t);
  const res = await app.inject({ method: 'POST', url: '/test/echo', payload: { name: 'ok' } });
  t.equal(res.statusCode, 200);
  t.same(res.json(), { name: 'ok' });
});

t.test('a body that fails the schema answers 400 INVALID_REQUEST naming the field', async (t) => {
  const { app } = await appWithTestRoutes(t);
  const res = await app.inject({ method: 'POST', url: '/test/echo', payload: { name: 42 } });
  t.equal(res.statusCode, 400);
  const { error } = res.json();
  t.equal(error.code, 'ZN_ERR_CP_INVALID_REQUEST');
  t.equal(error.type, 'invalid_request_error');
  t.match(error.message, /body field 'name'/);
  const missing = await app.inject({ method: 'POST', url: '/test/echo', payload: { count: 1.5 } });
  t.match(missing.json().error.message, /'name'.*'count'/, 'every failing field is named');
});

t.test('malformed JSON answers 400 INVALID_REQUEST', async (t) => {
  const { app } = await appWithTestRoutes(t);
  const res = await app.inject({ method: 'POST', url: '/test/echo', headers: { 'content-type': 'application/json' }, payload: '{"name": ' });
  t.equal(res.statusCode, 400);
  t.equal(res.json().error.code, 'ZN_ERR_CP_INVALID_REQUEST');
  t.match(res.json().error.message, /not valid JSON/);
});

t.test('a body over 1 MiB answers 413 BODY_TOO_LARGE', async (t) => {
  const { app } = await appWithTestRoutes(t);
  const payload = JSON.stringify({ name: 'x'.repeat(1024 * 1024) });
  const res = await app.inject({ method: 'POST', url: '/test/echo', headers: { 'content-type': 'application/json' }, payload });
  t.equal(res.statusCode, 413);
  t.equal(res.json().error.code, 'ZN_ERR_CP_BODY_TOO_LARGE');
  const justUnder = JSON.stringify({ name: 'x'.repeat(1024 * 1024 - 100) });
  const ok = await app.inject({ method: 'POST', url: '/test/echo', headers: { 'content-type': 'application/json' }, payload: justUnder });
  t.equal(ok.statusCode, 200, 'a body just under the limit is accepted');
});

t.test('an unsupported content type answers 415', async (t) => {
  const { app } = await appWithTestRoutes(t);
  const res = await app.inject({ method: 'POST', url: '/test/echo', headers: { 'content-type': 'application/xml' }, payload: '<a/>' });
  t.equal(res.statusCode, 415);
  t.equal(res.json().error.code, 'ZN_ERR_CP_UNSUPPORTED_MEDIA_TYPE');
});

t.test('an unexpected error answers 500 INTERNAL without internals and is logged with its stack', async (t) => {
  const { app, log } = await appWithTestRoutes(t);
  const res = await app.inject({ method: 'GET', url: '/test/boom' });
  t.equal(res.statusCode, 500);
  t.same(res.json(), { error: { ...pick(errorTable.ZN_ERR_CP_INTERNAL), param: null, code: 'ZN_ERR_CP_INTERNAL' } });
  t.notMatch(res.body, /internal_table|pool\.js/);
  const logged = log.lines().find((l) => l.level === 50);
  t.ok(logged, 'an error-level line was written');
  const err = logged?.err as { message?: string; stack?: string } | undefined;
  t.match(err?.message, /internal_table/);
  t.match(err?.stack, /app\.test\.ts/, 'with the stack');
});

t.test('a database connection failure inside a route answers 503 DATABASE_UNAVAILABLE', async (t) => {
  const { app } = await appWithTestRoutes(t);
  const res = await app.inject({ method: 'GET', url: '/test/db-down' });
  t.equal(res.statusCode, 503);
  t.equal(res.json().error.code, 'ZN_ERR_CP_DATABASE_UNAVAILABLE');
  t.notMatch(res.body, /10\.0\.0\.5/);
});

t.test('a ZenovaError thrown by a route keeps its code and message', async (t) => {
  const { app } = await appWithTestRoutes(t);
  const res = await app.inject({ method: 'GET', url: '/test/zenova' });
  t.equal(res.statusCode, 400);
  t.same(res.json(), { error: { message: 'a specific reason', type: 'invalid_request_error', param: null, code: 'ZN_ERR_CP_INVALID_REQUEST' } });
});

t.test('request logs carry neither the admin token nor the database password', async (t) => {
  // The logger knows the configured secrets; the pool uses the real (password-less) test URL.
  const dbPassword = 'db-password-for-log-test';
  const databaseUrl = `postgres://zenova:${dbPassword}@db.internal:5432/zenova`;
  const log = captureLogger(testSettings(databaseUrl, { logLevel: 'debug' }));
  const pool = createPool({ databaseUrl: db.url, logger: log.logger });
  const app = await buildApp({ settings: testSettings(db.url, { logLevel: 'debug' }), pool, logger: log.logger });
  app.get('/test/leaky', async () => {
    throw new Error(`could not connect to ${databaseUrl} using token ${ADMIN_TOKEN}`);
  });
  t.teardown(() => runEach('the app', () => app.close(), () => pool.end()));
  await app.inject({ method: 'GET', url: `/api/v1/whoami?token=${ADMIN_TOKEN}`, headers: bearer });
  await app.inject({ method: 'GET', url: '/api/v1/whoami', headers: { authorization: `Bearer ${ADMIN_TOKEN}x` } });
  await app.inject({ method: 'GET', url: '/test/leaky', headers: { ...bearer, cookie: `session=${ADMIN_TOKEN}` } });
  const text = log.text();
  t.ok(log.lines().length >= 6, 'requests were logged');
  t.match(text, '/api/v1/whoami', 'request URLs are logged');
  t.notMatch(text, ADMIN_TOKEN, 'admin token absent');
  t.notMatch(text, ADMIN_TOKEN.slice(0, 24), 'not even in part');
  t.notMatch(text, dbPassword, 'database password absent');
});

function pick(spec: { type: string; message: string }): { type: string; message: string } {
  return { type: spec.type, message: spec.message };
}
