/**
 * Two console tabs of one browser share the session cookie: logging in again in one replaces it
 * (and with it the CSRF token, derived from the session id). The other tab's changes and logout
 * must still work: on a 403 ZN_ERR_CP_CSRF the console fetches the current token and retries the
 * request once, and only once.
 */
import t from 'tap';
import type { Page } from 'playwright-core';
import { validNodeBody } from '../control-plane/nodes-harness.js';
import { launchChromium, loginPage, startConsoleStack, watchPageProblems } from './browser-harness.js';

const browser = await launchChromium(t);
const stack = await startConsoleStack(t);

/** Calls the console's own api() in the page; answers the result or the ApiError's status and code. */
const callApi = (page: Page, method: string, path: string, body?: unknown) => page.evaluate(async (call) => {
  const module = await import(call.url) as { api(method: string, path: string, body?: unknown): Promise<unknown> };
  try {
    return { ok: true, answer: await module.api(call.method, call.path, call.body) };
  } catch (err) {
    const e = err as { status: number; code: string };
    return { ok: false, status: e.status, code: e.code };
  }
}, { url: '/console/assets/api.js', method, path, body });

/** A second tab of the same browser context, showing the shell with the session the first opened. */
async function secondTab(first: Page): Promise<Page & { problems: string[] }> {
  const page = await first.context().newPage();
  const problems = watchPageProblems(page);
  await page.goto(`${stack.baseUrl}/console/`);
  await page.getByRole('link', { name: 'Gateway › Nodes' }).waitFor();
  return Object.assign(page, { problems: problems.list });
}

const liveSessions = async (): Promise<number> =>
  (await stack.pool.query<{ n: number }>('select count(*)::int as n from console_sessions where expires_at > now()')).rows[0]!.n;

t.test('after a login in another tab, this tab\'s changes and its logout still work', async (t) => {
  const first = await loginPage(t, stack, browser);
  const second = await secondTab(first);
  const cookieBefore = (await first.context().cookies()).find((c) => c.name === 'zenova_console')?.value;

  const relogin = await callApi(second, 'POST', '/api/console/login', { adminToken: stack.adminToken });
  t.equal(relogin.ok, true, 'the second tab logged in again');
  const cookieAfter = (await first.context().cookies()).find((c) => c.name === 'zenova_console')?.value;
  t.not(cookieAfter, cookieBefore, 'the shared session cookie was replaced');

  const created = await callApi(first, 'POST', '/api/v1/nodes', validNodeBody({ name: 'edge-other-tab' }));
  t.match(created, { ok: true, answer: { node: { name: 'edge-other-tab' } } }, 'the first tab\'s change went through');

  const before = await liveSessions();
  await first.getByRole('button', { name: 'Log out' }).click();
  await first.getByLabel('Admin token').waitFor();
  t.equal(await first.getByTestId('error').count(), 0, 'no "Logging out failed" banner');
  t.equal(await liveSessions(), before - 1, 'the session was ended on the server');
  t.same(first.problems, [], 'no console errors or CSP violations in the first tab');
  t.same(second.problems, [], 'no console errors or CSP violations in the second tab');
});

t.test('a CSRF refusal is retried once with a fresh token, not again', async (t) => {
  const page = await loginPage(t, stack, browser);
  let sent = 0;
  let sessionAsks = 0;
  await page.route('**/api/v1/nodes', async (route) => {
    if (route.request().method() !== 'POST') return route.fallback();
    sent += 1;
    return route.fulfill({
      status: 403, contentType: 'application/json',
      body: JSON.stringify({ error: { code: 'ZN_ERR_CP_CSRF', message: 'CSRF token missing or wrong.' } }),
    });
  });
  page.on('request', (req) => { if (new URL(req.url()).pathname === '/api/console/session') sessionAsks += 1; });
  const result = await callApi(page, 'POST', '/api/v1/nodes', validNodeBody({ name: 'edge-never' }));
  t.match(result, { ok: false, status: 403, code: 'ZN_ERR_CP_CSRF' }, 'the second refusal is the caller\'s');
  t.equal(sent, 2, 'the request was sent twice: once, then once more');
  t.equal(sessionAsks, 1, 'the token was fetched once');
});
