/**
 * Console sessions against real PostgreSQL: the login's cookie and what is stored, the cookie as
 * admin authentication, the CSRF header on unsafe methods, logout, expiry, the bearer token beside
 * it, the failed-login limit, and the login body's bounds.
 */
import { createHash } from 'node:crypto';
import https from 'node:https';
import type { LightMyRequestResponse } from 'fastify';
import t from 'tap';
import { buildApp } from '../../control-plane/src/app.js';
import { loginLimitKey } from '../../control-plane/src/console/console-sessions.js';
import { validNodeBody } from '../control-plane/nodes-harness.js';
import { startConsoleStack } from './browser-harness.js';
import type { ConsoleStack } from './browser-harness.js';

const stack = await startConsoleStack(t);
const bearer = { authorization: `Bearer ${stack.adminToken}` };
let ipCounter = 0;
/** A client address of its own, so one test's failed logins never count against another's. */
const freshIp = (): string => `10.0.${Math.floor(++ipCounter / 250)}.${(ipCounter % 250) + 1}`;

interface Login { res: LightMyRequestResponse; cookie: string; id: string; csrfToken: string; expiresAt: string }

function setCookies(res: { headers: Record<string, string | string[] | number | undefined> }): string[] {
  const raw = res.headers['set-cookie'];
  if (raw === undefined) return [];
  return Array.isArray(raw) ? raw : [String(raw)];
}

async function login(s: ConsoleStack = stack, remoteAddress = freshIp()): Promise<Login> {
  const res = await s.app.inject({ method: 'POST', url: '/api/console/login', payload: { adminToken: s.adminToken }, remoteAddress });
  if (res.statusCode !== 200) throw new Error(`login failed: ${res.statusCode} ${res.body}`);
  const setCookie = setCookies(res)[0]!;
  const id = /^zenova_console=([^;]*)/.exec(setCookie)![1]!;
  const body = res.json<{ csrfToken: string; expiresAt: string }>();
  return { res, cookie: `zenova_console=${id}`, id, ...body };
}

async function liveSessions(): Promise<number> {
  const { rows } = await stack.pool.query<{ n: number }>('select count(*)::int as n from console_sessions where expires_at > now()');
  return rows[0]!.n;
}

async function nodeExists(name: string): Promise<boolean> {
  const { rowCount } = await stack.pool.query('select 1 from nodes where name = $1 and deleted_at is null', [name]);
  return rowCount === 1;
}

t.test('login answers a CSRF token and a 12-hour expiry and sets an HttpOnly SameSite=Strict cookie', async (t) => {
  const before = Date.now();
  const { res, id, csrfToken, expiresAt } = await login();
  const cookies = setCookies(res);
  t.equal(cookies.length, 1);
  t.equal(cookies[0], `zenova_console=${id}; HttpOnly; SameSite=Strict; Path=/`, 'no Secure over plain HTTP');
  t.match(id, /^[A-Za-z0-9_-]{43}$/, '32 random bytes in base64url');
  t.match(csrfToken, /^[A-Za-z0-9_-]{43}$/);
  const ttl = Date.parse(expiresAt) - before;
  t.ok(ttl > 12 * 3600_000 - 60_000 && ttl <= 12 * 3600_000 + 60_000, `expires in 12 h (${ttl} ms)`);
  t.equal(res.headers['cache-control'], 'no-store');
});

t.test('over HTTPS the session cookie is Secure', async (t) => {
  const secureStack = await startConsoleStack(t, { https: true });
  const body = JSON.stringify({ adminToken: secureStack.adminToken });
  const answer = await new Promise<{ status: number; setCookie: string[] }>((resolve, reject) => {
    const req = https.request(`${secureStack.baseUrl}/api/console/login`, {
      method: 'POST', ca: secureStack.caPem, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
    }, (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode ?? 0, setCookie: res.headers['set-cookie'] ?? [] }));
    });
    req.on('error', reject);
    req.end(body);
  });
  t.equal(answer.status, 200);
  t.match(answer.setCookie[0], /^zenova_console=[A-Za-z0-9_-]{43}; HttpOnly; SameSite=Strict; Path=\/; Secure$/);
});

t.test('only the SHA-256 of the session id is stored, and nothing of the CSRF token', async (t) => {
  const { id, csrfToken } = await login();
  const hash = createHash('sha256').update(id).digest();
  const { rows } = await stack.pool.query<{ row: string; id_hash: Buffer }>(
    'select row_to_json(s)::text as row, id_hash from console_sessions s where id_hash = $1', [hash],
  );
  t.equal(rows.length, 1, 'one row keyed by the hash');
  const all = await stack.pool.query<{ dump: string }>("select coalesce(string_agg(row_to_json(s)::text || encode(id_hash, 'hex'), ''), '') as dump from console_sessions s");
  for (const secret of [id, csrfToken, Buffer.from(id).toString('hex')]) {
    t.notOk(all.rows[0]!.dump.includes(secret), 'the table holds neither the id nor the CSRF token');
  }
});

t.test('a wrong admin token is 401 with no cookie, and no token reaches the log', async (t) => {
  const wrong = `wrong-token-${'z'.repeat(30)}`;
  const res = await stack.app.inject({ method: 'POST', url: '/api/console/login', payload: { adminToken: wrong }, remoteAddress: freshIp() });
  t.equal(res.statusCode, 401);
  t.same(res.json(), { error: { message: 'Invalid admin token.', type: 'authentication_error', param: null, code: 'ZN_ERR_CP_UNAUTHENTICATED' } });
  t.same(setCookies(res), [], 'no cookie');
  await login();
  const logText = stack.log.text();
  t.notOk(logText.includes(wrong), 'the wrong token is not logged');
  t.notOk(logText.includes(stack.adminToken), 'the admin token is not logged');
  t.ok(stack.log.lines().some((l) => l.msg === 'console login'), 'the login itself is logged');
});

t.test('the session cookie authenticates GET /api/v1/nodes, and whoami says console', async (t) => {
  const { cookie } = await login();
  const nodes = await stack.app.inject({ method: 'GET', url: '/api/v1/nodes', headers: { cookie } });
  t.equal(nodes.statusCode, 200, nodes.body);
  const whoami = await stack.app.inject({ method: 'GET', url: '/api/v1/whoami', headers: { cookie } });
  t.same(whoami.json(), { principal: 'console' });
  const bearerWhoami = await stack.app.inject({ method: 'GET', url: '/api/v1/whoami', headers: bearer });
  t.same(bearerWhoami.json(), { principal: 'admin' });
});

t.test('GET /api/console/session answers the same CSRF token the login did, and 401 without a cookie', async (t) => {
  const { cookie, csrfToken, expiresAt } = await login();
  const res = await stack.app.inject({ method: 'GET', url: '/api/console/session', headers: { cookie } });
  t.same(res.json(), { csrfToken, expiresAt, publicUrl: null });
  const none = await stack.app.inject({ method: 'GET', url: '/api/console/session' });
  t.equal(none.statusCode, 401);
  t.equal(none.json<{ error: { code: string } }>().error.code, 'ZN_ERR_CP_UNAUTHENTICATED');
  const garbage = await stack.app.inject({ method: 'GET', url: '/api/console/session', headers: { cookie: 'zenova_console=nope' } });
  t.equal(garbage.statusCode, 401);
  t.match(setCookies(garbage)[0], /^zenova_console=; .*Max-Age=0/, 'a stale cookie is cleared');
});

t.test('a POST with the cookie but without or with a wrong CSRF header is 403 and creates nothing', async (t) => {
  const { cookie, csrfToken } = await login();
  const other = await login();
  const wrongHeaders: Array<[string, Record<string, string>]> = [
    ['no header', { cookie }],
    ['an empty header', { cookie, 'x-zenova-csrf': '' }],
    ['a wrong header', { cookie, 'x-zenova-csrf': `${csrfToken.slice(0, -1)}${csrfToken.endsWith('A') ? 'B' : 'A'}` }],
    ['another session\'s token', { cookie, 'x-zenova-csrf': other.csrfToken }],
  ];
  for (const [what, headers] of wrongHeaders) {
    const body = validNodeBody();
    const res = await stack.app.inject({ method: 'POST', url: '/api/v1/nodes', headers, payload: body });
    t.equal(res.statusCode, 403, what);
    t.equal(res.json<{ error: { code: string; type: string } }>().error.code, 'ZN_ERR_CP_CSRF', what);
    t.notOk(await nodeExists(String(body.name)), `${what}: no node was created`);
  }
  const del = await stack.app.inject({ method: 'DELETE', url: '/api/v1/nodes/office-primary', headers: { cookie } });
  t.equal(del.statusCode, 403, 'DELETE needs it too');
  const body = validNodeBody();
  const ok = await stack.app.inject({ method: 'POST', url: '/api/v1/nodes', headers: { cookie, 'x-zenova-csrf': csrfToken }, payload: body });
  t.equal(ok.statusCode, 201, ok.body);
  t.ok(await nodeExists(String(body.name)), 'with the right header the node is created');
});

t.test('logout needs the CSRF header, deletes the session and clears the cookie', async (t) => {
  const { cookie, csrfToken, id } = await login();
  const sessions = await liveSessions();
  const refused = await stack.app.inject({ method: 'POST', url: '/api/console/logout', headers: { cookie } });
  t.equal(refused.statusCode, 403);
  t.equal(refused.json<{ error: { code: string } }>().error.code, 'ZN_ERR_CP_CSRF');
  t.equal(await liveSessions(), sessions, 'the session is still there');
  const res = await stack.app.inject({ method: 'POST', url: '/api/console/logout', headers: { cookie, 'x-zenova-csrf': csrfToken } });
  t.equal(res.statusCode, 200);
  t.same(res.json(), {});
  t.equal(setCookies(res)[0], 'zenova_console=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0');
  t.equal(await liveSessions(), sessions - 1);
  const hash = createHash('sha256').update(id).digest();
  t.equal((await stack.pool.query('select 1 from console_sessions where id_hash = $1', [hash])).rowCount, 0, 'the row is deleted');
  const after = await stack.app.inject({ method: 'GET', url: '/api/v1/nodes', headers: { cookie } });
  t.equal(after.statusCode, 401, 'the old cookie no longer authenticates');
  t.match(after.json<{ error: { message: string } }>().error.message, /log in again/);
});

t.test('after a restart with another admin token, the sessions the old token opened are refused and swept', async (t) => {
  const old = await login();
  // The same database, the control plane started again with a new ZENOVA_ADMIN_TOKEN (the old one leaked).
  const replacedToken = `replaced-admin-token-${'r'.repeat(24)}`;
  const restarted = await buildApp({ settings: { ...stack.settings, adminToken: replacedToken }, pool: stack.pool, logger: stack.log.logger });
  t.teardown(() => restarted.close());
  const refused = await restarted.inject({ method: 'GET', url: '/api/v1/nodes', headers: { cookie: old.cookie } });
  t.equal(refused.statusCode, 401, 'the old session no longer authenticates');
  t.equal((await restarted.inject({ method: 'GET', url: '/api/console/session', headers: { cookie: old.cookie } })).statusCode, 401);
  const fresh = await restarted.inject({ method: 'POST', url: '/api/console/login', payload: { adminToken: replacedToken }, remoteAddress: freshIp() });
  t.equal(fresh.statusCode, 200, 'the new token logs in');
  t.equal((await stack.pool.query('select 1 from console_sessions where id_hash = $1', [createHash('sha256').update(old.id).digest()])).rowCount, 0,
    "the new token's login sweeps the old token's sessions");
});

t.test('an expired session is 401 on the admin API and on the session route', async (t) => {
  const { cookie, id } = await login();
  await stack.pool.query("update console_sessions set expires_at = now() - interval '1 second' where id_hash = $1", [createHash('sha256').update(id).digest()]);
  const nodes = await stack.app.inject({ method: 'GET', url: '/api/v1/nodes', headers: { cookie } });
  t.equal(nodes.statusCode, 401);
  t.equal(nodes.json<{ error: { code: string } }>().error.code, 'ZN_ERR_CP_UNAUTHENTICATED');
  const session = await stack.app.inject({ method: 'GET', url: '/api/console/session', headers: { cookie } });
  t.equal(session.statusCode, 401);
  const another = await login();
  t.equal((await stack.pool.query('select 1 from console_sessions where expires_at <= now()')).rowCount, 0, 'a login sweeps expired rows');
  t.equal((await stack.app.inject({ method: 'GET', url: '/api/v1/nodes', headers: { cookie: another.cookie } })).statusCode, 200);
});

t.test('the bearer token works as before and wins over a cookie', async (t) => {
  const nodes = await stack.app.inject({ method: 'GET', url: '/api/v1/nodes', headers: bearer });
  t.equal(nodes.statusCode, 200);
  const body = validNodeBody();
  const created = await stack.app.inject({ method: 'POST', url: '/api/v1/nodes', headers: bearer, payload: body });
  t.equal(created.statusCode, 201, 'a bearer POST needs no CSRF header');
  const { cookie } = await login();
  const wrongBearer = await stack.app.inject({ method: 'GET', url: '/api/v1/nodes', headers: { cookie, authorization: 'Bearer not-the-token' } });
  t.equal(wrongBearer.statusCode, 401, 'a wrong bearer token is refused even with a live cookie');
  const both = await stack.app.inject({ method: 'POST', url: '/api/v1/nodes', headers: { ...bearer, cookie }, payload: validNodeBody() });
  t.equal(both.statusCode, 201, 'with the bearer token the cookie is not looked at');
  const whoami = await stack.app.inject({ method: 'GET', url: '/api/v1/whoami', headers: { ...bearer, cookie } });
  t.same(whoami.json(), { principal: 'admin' });
  const none = await stack.app.inject({ method: 'GET', url: '/api/v1/nodes' });
  t.equal(none.statusCode, 401);
  t.match(none.json<{ error: { message: string } }>().error.message, /Missing admin bearer token/);
});

t.test('10 failed logins from an address in a minute lock it out, the right token too; other addresses and successes are unaffected', async (t) => {
  const ip = freshIp();
  for (let i = 0; i < 10; i++) {
    const res = await stack.app.inject({ method: 'POST', url: '/api/console/login', payload: { adminToken: `guess-${i}` }, remoteAddress: ip });
    t.equal(res.statusCode, 401, `failure ${i + 1}`);
  }
  const locked = await stack.app.inject({ method: 'POST', url: '/api/console/login', payload: { adminToken: stack.adminToken }, remoteAddress: ip });
  t.equal(locked.statusCode, 429);
  t.equal(locked.json<{ error: { code: string } }>().error.code, 'ZN_ERR_CP_LOGIN_RATE_LIMITED');
  t.ok(Number(locked.headers['retry-after']) >= 1 && Number(locked.headers['retry-after']) <= 60, 'Retry-After in seconds');
  t.same(setCookies(locked), [], 'no session');
  const elsewhere = await stack.app.inject({ method: 'POST', url: '/api/console/login', payload: { adminToken: stack.adminToken }, remoteAddress: freshIp() });
  t.equal(elsewhere.statusCode, 200, 'another address logs in');
  const busy = freshIp();
  for (let i = 0; i < 12; i++) await login(stack, busy);
  t.pass('12 successful logins from one address are not limited');
});

t.test('the failed-login limit keys an IPv6 client by its /64 and an IPv4-mapped one by its IPv4 address', async (t) => {
  t.equal(loginLimitKey('203.0.113.7'), '203.0.113.7', 'IPv4 as is');
  t.equal(loginLimitKey('::ffff:203.0.113.7'), '203.0.113.7', 'IPv4-mapped: the IPv4 address');
  t.equal(loginLimitKey('::FFFF:cb00:7107'), '203.0.113.7', 'IPv4-mapped in hex groups too');
  const key = loginLimitKey('2001:db8:1:2:aaaa:bbbb:cccc:dddd');
  t.equal(key, '2001:db8:1:2::/64');
  t.equal(loginLimitKey('2001:0db8:0001:0002::1'), key, 'another address of the /64, written short');
  t.equal(loginLimitKey('2001:db8:1:2:ffff:ffff:ffff:ffff'), key, 'the /64\'s last address');
  t.not(loginLimitKey('2001:db8:1:3::1'), key, 'the next /64 is another key');
  t.equal(loginLimitKey('::1'), '0:0:0:0::/64', 'loopback');
  t.equal(loginLimitKey('fe80::1%eth0'), loginLimitKey('fe80::2'), 'a zone id is left out');
  t.equal(loginLimitKey('2001:db8::1.2.3.4'), '2001:db8:0:0::/64', 'an embedded dotted quad');

  // Through the route: ten failures spread over ten addresses of one /64 lock out an eleventh.
  const prefix = `2001:db8:${(++ipCounter).toString(16)}:1`;
  for (let i = 0; i < 10; i++) {
    const res = await stack.app.inject({ method: 'POST', url: '/api/console/login', payload: { adminToken: `guess-${i}` }, remoteAddress: `${prefix}::${(i + 1).toString(16)}` });
    t.equal(res.statusCode, 401, `failure ${i + 1} from ${prefix}::${(i + 1).toString(16)}`);
  }
  const sameNet = await stack.app.inject({ method: 'POST', url: '/api/console/login', payload: { adminToken: stack.adminToken }, remoteAddress: `${prefix}:dead:beef:1:2` });
  t.equal(sameNet.statusCode, 429, 'another address of the same /64 is locked out');
  const otherNet = await stack.app.inject({ method: 'POST', url: '/api/console/login', payload: { adminToken: stack.adminToken }, remoteAddress: `${prefix.replace(/:1$/, ':2')}::1` });
  t.equal(otherNet.statusCode, 200, 'the next /64 logs in');

  // IPv4 and its IPv4-mapped spelling share one count.
  const v4 = freshIp();
  for (let i = 0; i < 10; i++) {
    await stack.app.inject({ method: 'POST', url: '/api/console/login', payload: { adminToken: `guess-${i}` }, remoteAddress: i % 2 === 0 ? v4 : `::ffff:${v4}` });
  }
  const mapped = await stack.app.inject({ method: 'POST', url: '/api/console/login', payload: { adminToken: stack.adminToken }, remoteAddress: `::ffff:${v4}` });
  t.equal(mapped.statusCode, 429, 'the mapped spelling is locked out with its IPv4 address');
});

t.test('the login body is bounded: a token of at most 512 characters, even one JSON escapes whole, no other fields', async (t) => {
  const big = await stack.app.inject({ method: 'POST', url: '/api/console/login', payload: { adminToken: 'x'.repeat(2000) }, remoteAddress: freshIp() });
  t.equal(big.statusCode, 413);
  t.equal(big.json<{ error: { code: string } }>().error.code, 'ZN_ERR_CP_BODY_TOO_LARGE');
  const long = await stack.app.inject({ method: 'POST', url: '/api/console/login', payload: { adminToken: 'x'.repeat(513) }, remoteAddress: freshIp() });
  t.equal(long.statusCode, 400);
  t.match(long.json<{ error: { message: string } }>().error.message, /adminToken.*512/);
  // 512 characters JSON escapes to two each ('"', '\\'): read and judged, not refused for its size.
  const escaped = await stack.app.inject({ method: 'POST', url: '/api/console/login', headers: { 'content-type': 'application/json' }, payload: JSON.stringify({ adminToken: '"\\'.repeat(256) }), remoteAddress: freshIp() });
  t.equal(escaped.statusCode, 401, 'a 512-character token of quotes and backslashes is read');
  const extra = await stack.app.inject({ method: 'POST', url: '/api/console/login', payload: { adminToken: stack.adminToken, remember: true }, remoteAddress: freshIp() });
  t.equal(extra.statusCode, 400);
  const missing = await stack.app.inject({ method: 'POST', url: '/api/console/login', payload: {}, remoteAddress: freshIp() });
  t.equal(missing.statusCode, 400);
  t.same(setCookies(extra), []);
});
