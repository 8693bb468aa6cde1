/**
 * A stray `zenova_console` cookie beside the browser's own (planted by a sibling host with a longer
 * Path, so the browser sends it first: cookie tossing) must neither hide the live session nor leave
 * orphan session rows behind each login.
 */
import { createHash } from 'node:crypto';
import type { LightMyRequestResponse } from 'fastify';
import t from 'tap';
import { startConsoleStack } from './browser-harness.js';

const stack = await startConsoleStack(t);
const junk = 'x'.repeat(43); // shaped like a session id, but none
// console-sessions.ts's MAX_SESSION_COOKIE_VALUES, spelled out: the bound is part of the contract.
const MAX_SESSION_COOKIE_VALUES = 8;
let ipCounter = 0;
const freshIp = (): string => `10.1.0.${++ipCounter}`;

function setCookies(res: LightMyRequestResponse): string[] {
  const raw = res.headers['set-cookie'];
  if (raw === undefined) return [];
  return Array.isArray(raw) ? raw : [String(raw)];
}

async function login(cookie?: string): Promise<{ res: LightMyRequestResponse; id: string; csrfToken: string }> {
  const res = await stack.app.inject({
    method: 'POST', url: '/api/console/login', payload: { adminToken: stack.adminToken }, remoteAddress: freshIp(),
    ...(cookie === undefined ? {} : { headers: { cookie } }),
  });
  if (res.statusCode !== 200) throw new Error(`login failed: ${res.statusCode} ${res.body}`);
  const id = /^zenova_console=([^;]*)/.exec(setCookies(res)[0]!)![1]!;
  return { res, id, csrfToken: res.json<{ csrfToken: string }>().csrfToken };
}

const rowExists = async (id: string): Promise<boolean> =>
  (await stack.pool.query('select 1 from console_sessions where id_hash = $1', [createHash('sha256').update(id).digest()])).rowCount === 1;

t.test('a stray session cookie sent before the live one does not hide it from the session route or the admin API', async (t) => {
  const { id, csrfToken } = await login();
  const cookie = `zenova_console=${junk}; zenova_console=${id}`;
  const session = await stack.app.inject({ method: 'GET', url: '/api/console/session', headers: { cookie } });
  t.equal(session.statusCode, 200, session.body);
  t.equal(session.json<{ csrfToken: string }>().csrfToken, csrfToken, 'the live session\'s CSRF token');
  t.same(setCookies(session), [], 'the live cookie is not cleared');
  const whoami = await stack.app.inject({ method: 'GET', url: '/api/v1/whoami', headers: { cookie } });
  t.equal(whoami.statusCode, 200, whoami.body);
  t.same(whoami.json(), { principal: 'console' });
  const unsafe = await stack.app.inject({
    method: 'POST', url: '/api/console/logout', headers: { cookie: `zenova_console=not-an-id; ${cookie}`, 'x-zenova-csrf': csrfToken },
  });
  t.equal(unsafe.statusCode, 200, 'the logout finds the live session behind two strays');
  t.notOk(await rowExists(id), 'and ends it');
});

t.test('of two live sessions presented, the first in the header is the one used', async (t) => {
  const first = await login();
  const second = await login();
  const res = await stack.app.inject({
    method: 'GET', url: '/api/console/session', headers: { cookie: `zenova_console=${second.id}; zenova_console=${first.id}` },
  });
  t.equal(res.json<{ csrfToken: string }>().csrfToken, second.csrfToken);
});

t.test('a login ends every session the browser presented and expires a stray copy on the API paths', async (t) => {
  const older = await login();
  const old = await login();
  const again = await login(`zenova_console=${junk}; zenova_console=${old.id}; zenova_console=${older.id}`);
  t.notOk(await rowExists(old.id), 'the session the browser held is gone');
  t.notOk(await rowExists(older.id), 'so is any other presented one: no orphan rows');
  t.ok(await rowExists(again.id), 'the new one is live');
  const cookies = setCookies(again.res);
  t.match(cookies[0], new RegExp(`^zenova_console=${again.id}; HttpOnly; SameSite=Strict; Path=/$`));
  for (const path of ['/api', '/api/console', '/api/v1']) {
    t.ok(cookies.includes(`zenova_console=; HttpOnly; SameSite=Strict; Path=${path}; Max-Age=0`), `a stray at Path=${path} is expired`);
  }
  const plain = await login(`zenova_console=${again.id}`);
  t.same(setCookies(plain.res).length, 1, 'a browser presenting one cookie gets only its new one');
  t.notOk(await rowExists(again.id));
});

t.test(`at most ${MAX_SESSION_COOKIE_VALUES} session cookie values of a header are looked at`, async (t) => {
  const { id } = await login();
  const strays = (n: number) => Array.from({ length: n }, () => `zenova_console=${junk}`).join('; ');
  const within = await stack.app.inject({
    method: 'GET', url: '/api/v1/whoami', headers: { cookie: `${strays(MAX_SESSION_COOKIE_VALUES - 1)}; zenova_console=${id}` },
  });
  t.equal(within.statusCode, 200, 'the live one as the last value looked at');
  const beyond = await stack.app.inject({
    method: 'GET', url: '/api/v1/whoami', headers: { cookie: `${strays(MAX_SESSION_COOKIE_VALUES)}; zenova_console=${id}` },
  });
  t.equal(beyond.statusCode, 401, 'one past the bound is not looked at');
});

t.test('a logout ends every session the browser presented, not only the first, and expires a stray copy on the API paths', async (t) => {
  const own = await login();
  const stray = await login();
  // The stray (a longer path) is sent first; its CSRF token is the one the logout proves.
  const res = await stack.app.inject({
    method: 'POST', url: '/api/console/logout',
    headers: { cookie: `zenova_console=${stray.id}; zenova_console=${own.id}`, 'x-zenova-csrf': stray.csrfToken },
  });
  t.equal(res.statusCode, 200, res.body);
  t.notOk(await rowExists(stray.id), 'the session proved is ended');
  t.notOk(await rowExists(own.id), "the browser's own session behind it is ended too");
  t.ok(setCookies(res).some((c) => /Path=\/api(;|$)/.test(c) && /Max-Age=0|Expires=Thu, 01 Jan 1970/.test(c)), setCookies(res).join(' | '));
});
