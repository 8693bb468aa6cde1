/**
 * Wrong admin bearer tokens on /api/v1 count against the failed-admin-token budget the console
 * login uses (10 a minute per address, shared by both): past it, the address is refused with 429
 * before any token is compared, the right one too; other addresses, successful requests, headers
 * that carry no token and console session cookies are unaffected. Real app, real PostgreSQL.
 */
import type { LightMyRequestResponse } from 'fastify';
import t from 'tap';
import type { Test } from 'tap';
import { buildApp } from '../../control-plane/src/app.js';
import { migrate } from '../../control-plane/src/db/migrate.js';
import { createPool } from '../../control-plane/src/db/pool.js';
import { FAILED_ADMIN_AUTH_MAX_ADDRESSES, createFailedAdminAuthLimiter, failedAdminAuthKey } from '../../control-plane/src/http/failed-auth-limit.js';
import { testDatabase } from '../fixtures/postgres.js';
import { runEach } from '../fixtures/teardown-steps.js';
import { ADMIN_TOKEN, captureLogger, testSettings } from './helpers.js';

const db = await testDatabase(t);
const settings = testSettings(db.url);
const pool = createPool({ databaseUrl: db.url, logger: captureLogger(settings).logger });
await migrate(pool);
const app = await buildApp({ settings, pool, logger: captureLogger(settings).logger });
t.teardown(() => runEach('the app', () => app.close(), () => pool.end()));

let ipCounter = 0;
/** A client address of its own, so one test's failures never count against another's. */
const freshIp = (): string => `10.1.${Math.floor(++ipCounter / 250)}.${(ipCounter % 250) + 1}`;

const whoami = (remoteAddress: string, headers: Record<string, string> = {}): Promise<LightMyRequestResponse> =>
  app.inject({ method: 'GET', url: '/api/v1/whoami', headers, remoteAddress });
const withToken = (token: string): Record<string, string> => ({ authorization: `Bearer ${token}` });
const wrongToken = (i: number): string => `${ADMIN_TOKEN.slice(0, -4)}g${String(i).padStart(3, '0')}`;
const login = (remoteAddress: string, adminToken: string): Promise<LightMyRequestResponse> =>
  app.inject({ method: 'POST', url: '/api/console/login', payload: { adminToken }, remoteAddress });
const codeOf = (res: LightMyRequestResponse): string => res.json<{ error: { code: string } }>().error.code;

async function failBearer(t: Test, remoteAddress: string, times: number): Promise<void> {
  for (let i = 0; i < times; i++) {
    const res = await whoami(remoteAddress, withToken(wrongToken(i)));
    t.equal(res.statusCode, 401, `wrong token ${i + 1} from ${remoteAddress}: 401`);
  }
}

t.test('10 wrong bearer tokens from an address in a minute lock it out of the admin API with 429 and Retry-After, the right token too', async (t) => {
  const ip = freshIp();
  await failBearer(t, ip, 10);
  const right = await whoami(ip, withToken(ADMIN_TOKEN));
  t.equal(right.statusCode, 429, 'the right token is refused during the lockout: the lockout confirms no guess');
  t.equal(codeOf(right), 'ZN_ERR_CP_LOGIN_RATE_LIMITED');
  t.equal(right.json<{ error: { type: string } }>().error.type, 'rate_limit_error');
  const retryAfter = Number(right.headers['retry-after']);
  t.ok(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 60, `Retry-After in seconds (${String(right.headers['retry-after'])})`);
  t.equal(right.headers['www-authenticate'], undefined, 'no bearer challenge: the token was not looked at');
  const wrong = await whoami(ip, withToken(wrongToken(99)));
  t.equal(wrong.statusCode, 429, 'a further guess is refused the same way');
  t.same(wrong.json(), right.json(), 'right and wrong tokens get the same answer');
  const post = await app.inject({ method: 'POST', url: '/api/v1/accounts', headers: withToken(ADMIN_TOKEN), payload: { name: 'never-made' }, remoteAddress: ip });
  t.equal(post.statusCode, 429, 'a change with the right token is refused too');
  const { rowCount } = await pool.query("select 1 from accounts where name = 'never-made'");
  t.equal(rowCount, 0, 'and changes nothing');
  const elsewhere = await app.inject({ method: 'POST', url: '/api/v1/accounts', headers: withToken(ADMIN_TOKEN), payload: { name: 'never-made' }, remoteAddress: freshIp() });
  t.equal(elsewhere.statusCode, 201, 'the same change from another address is made');
});

t.test('while one address is locked out, the right bearer token from another address is answered at once', async (t) => {
  const attacker = freshIp();
  await failBearer(t, attacker, 10);
  t.equal((await whoami(attacker, withToken(ADMIN_TOKEN))).statusCode, 429, 'the guessing address is locked out');
  const admin = await whoami(freshIp(), withToken(ADMIN_TOKEN));
  t.equal(admin.statusCode, 200);
  t.same(admin.json(), { principal: 'admin' });
  const otherWrong = await whoami(freshIp(), withToken(wrongToken(1)));
  t.equal(otherWrong.statusCode, 401, 'another address still gets its own budget');
});

t.test('wrong bearer tokens and failed console logins from one address count against one budget', async (t) => {
  const mixed = freshIp();
  await failBearer(t, mixed, 5);
  for (let i = 0; i < 5; i++) t.equal((await login(mixed, wrongToken(i))).statusCode, 401, `failed login ${i + 1}`);
  t.equal((await login(mixed, ADMIN_TOKEN)).statusCode, 429, 'five of each lock the login out');
  t.equal((await whoami(mixed, withToken(ADMIN_TOKEN))).statusCode, 429, 'and the bearer token');

  const viaLogin = freshIp();
  for (let i = 0; i < 10; i++) await login(viaLogin, wrongToken(i));
  const bearer = await whoami(viaLogin, withToken(ADMIN_TOKEN));
  t.equal(bearer.statusCode, 429, 'failed logins alone lock the admin API out');
  t.equal(codeOf(bearer), 'ZN_ERR_CP_LOGIN_RATE_LIMITED');

  const viaBearer = freshIp();
  await failBearer(t, viaBearer, 10);
  const locked = await login(viaBearer, ADMIN_TOKEN);
  t.equal(locked.statusCode, 429, 'wrong bearer tokens alone lock the console login out');
  t.equal(locked.headers['set-cookie'], undefined, 'no session');
});

t.test('successful bearer requests are neither limited nor counted', async (t) => {
  const busy = freshIp();
  for (let i = 0; i < 40; i++) {
    const res = await whoami(busy, withToken(ADMIN_TOKEN));
    if (res.statusCode !== 200) t.fail(`success ${i + 1}: ${res.statusCode}`);
  }
  await failBearer(t, busy, 9);
  t.equal((await whoami(busy, withToken(ADMIN_TOKEN))).statusCode, 200, '40 successes and 9 failures stay under the limit of 10 failures');
  await failBearer(t, busy, 1);
  t.equal((await whoami(busy, withToken(ADMIN_TOKEN))).statusCode, 429, 'the tenth failure locks the address out');
});

t.test('a missing or malformed Authorization header compares no token and is not counted', async (t) => {
  const ip = freshIp();
  for (let i = 0; i < 12; i++) {
    t.equal((await whoami(ip)).statusCode, 401, `no header ${i + 1}`);
    t.equal((await whoami(ip, { authorization: `Basic ${wrongToken(i)}` })).statusCode, 401, `malformed header ${i + 1}`);
  }
  await failBearer(t, ip, 9);
  t.equal((await whoami(ip, withToken(ADMIN_TOKEN))).statusCode, 200, '24 token-less requests and 9 wrong tokens stay under the limit');
  await failBearer(t, ip, 1);
  t.equal((await whoami(ip, withToken(ADMIN_TOKEN))).statusCode, 429, 'the tenth wrong token locks the address out');
  t.equal((await whoami(ip)).statusCode, 429, 'then a request without a header is refused as locked out too');
});

t.test('of 20 concurrent wrong bearer tokens from one address only 10 are compared, the rest are refused as locked out', async (t) => {
  const ip = freshIp();
  const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => whoami(ip, withToken(wrongToken(i)))));
  const statuses = answers.map((res) => res.statusCode);
  t.equal(statuses.filter((s) => s === 401).length, 10, 'exactly 10 compared');
  t.equal(statuses.filter((s) => s === 429).length, 10, 'the rest refused as locked out');
});

t.test('the bearer lockout keys an IPv6 client by its /64 and an IPv4-mapped one by its IPv4 address', async (t) => {
  const prefix = `2001:db8:${(++ipCounter).toString(16)}:7`;
  for (let i = 0; i < 10; i++) {
    const res = await whoami(`${prefix}::${(i + 1).toString(16)}`, withToken(wrongToken(i)));
    t.equal(res.statusCode, 401, `failure ${i + 1}`);
  }
  t.equal((await whoami(`${prefix}:dead:beef:1:2`, withToken(ADMIN_TOKEN))).statusCode, 429, 'another address of the /64 is locked out');
  t.equal((await whoami(`${prefix.replace(/:7$/, ':8')}::1`, withToken(ADMIN_TOKEN))).statusCode, 200, 'the next /64 is not');

  const v4 = freshIp();
  for (let i = 0; i < 10; i++) await whoami(i % 2 === 0 ? v4 : `::ffff:${v4}`, withToken(wrongToken(i)));
  t.equal((await whoami(`::ffff:${v4}`, withToken(ADMIN_TOKEN))).statusCode, 429, 'the mapped spelling is locked out with its IPv4 address');
  t.equal((await whoami(v4, withToken(ADMIN_TOKEN))).statusCode, 429, 'and the plain one');
});

t.test('a console session cookie keeps working while its address is locked out for bearer tokens', async (t) => {
  const ip = freshIp();
  const res = await login(ip, ADMIN_TOKEN);
  t.equal(res.statusCode, 200);
  const cookie = /^zenova_console=[^;]*/.exec(String(res.headers['set-cookie']))![0];
  await failBearer(t, ip, 10);
  t.equal((await whoami(ip, withToken(ADMIN_TOKEN))).statusCode, 429, 'the bearer token is locked out');
  const viaCookie = await whoami(ip, { cookie });
  t.equal(viaCookie.statusCode, 200, 'the session opened before the lockout is no guess and still works');
  t.same(viaCookie.json(), { principal: 'console' });
});

t.test('the failed-admin-token budget remembers at most 10 000 addresses, dropping the oldest', async (t) => {
  t.equal(FAILED_ADMIN_AUTH_MAX_ADDRESSES, 10_000);
  const limiter = createFailedAdminAuthLimiter();
  const now = 1_000_000;
  const address = (i: number): string => failedAdminAuthKey(`10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`);
  for (let n = 0; n < 10; n++) limiter.recordFailure(address(0), now);
  t.equal(limiter.check(address(0), now).allowed, false, 'the first address is locked out');
  for (let i = 1; i < FAILED_ADMIN_AUTH_MAX_ADDRESSES; i++) limiter.recordFailure(address(i), now + 1);
  t.equal(limiter.check(address(0), now + 2).allowed, false, 'still remembered with 10 000 addresses tracked');
  limiter.recordFailure(address(FAILED_ADMIN_AUTH_MAX_ADDRESSES), now + 2);
  t.equal(limiter.check(address(0), now + 3).allowed, true, 'one address more drops the oldest');
});
