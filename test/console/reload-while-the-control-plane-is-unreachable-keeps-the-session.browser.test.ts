/**
 * Loading the console while the control plane cannot be reached (no answer, or a 5xx), in real
 * headless Chromium: the console says it cannot reach the control plane — it does not ask for the
 * admin token, as the session may well be live —, tries again on its own with a growing wait and
 * with Try again, and shows the shell, on the page it was on, as soon as the session answers 200.
 * Only a 401 asks for the token.
 */
import t from 'tap';
import type { Route } from 'playwright-core';
import { waitFor } from '../fixtures/wait-for.js';
import { launchChromium, loginPage, newConsoleContext, startConsoleStack, watchPageProblems } from './browser-harness.js';

const browser = await launchChromium(t);
const stack = await startConsoleStack(t);

const SESSION = '/api/console/session';
const isSession = (url: URL) => url.pathname === SESSION;
const unavailable = (route: Route) => route.fulfill({
  status: 503,
  contentType: 'application/json',
  body: JSON.stringify({ error: { message: 'The control plane database is unavailable; try again shortly.', type: 'server_error', code: 'ZN_ERR_CP_DATABASE_UNAVAILABLE' } }),
});

t.test('a reload while the control plane cannot be reached says so instead of asking for the token, and Try again shows the shell once it answers', async (t) => {
  const page = await loginPage(t, stack, browser, { hash: '#/requests' });
  await page.waitForFunction(() => (globalThis as unknown as { location: { hash: string } }).location.hash === '#/requests');
  await page.route(isSession, (route) => route.abort('connectionrefused'));
  await page.reload();
  const view = page.getByTestId('unreachable');
  await view.waitFor({ timeout: 10_000 });
  t.match(await view.getByRole('heading').textContent(), 'Cannot reach the control plane', 'the view says so');
  t.match(await view.getByTestId('error').textContent(), /Cannot reach the control plane/, 'what went wrong');
  t.equal(await page.getByLabel('Admin token').count(), 0, 'no login form: the session is not known to have ended');

  // Up again, but answering 503 (its database away): still no login form, the API's words shown.
  await page.unroute(isSession);
  await page.route(isSession, unavailable);
  await page.getByRole('button', { name: 'Try again' }).click();
  await view.getByTestId('error').filter({ hasText: 'database is unavailable' }).waitFor();
  t.equal(await page.getByLabel('Admin token').count(), 0, 'a 5xx does not ask for the token either');

  await page.unroute(isSession);
  await page.getByRole('button', { name: 'Try again' }).click();
  await page.getByRole('link', { name: 'Gateway › Nodes' }).waitFor();
  t.equal(await page.evaluate('location.hash'), '#/requests', 'the page it was on');
  t.equal(await page.getByRole('link', { name: 'Gateway › Requests' }).getAttribute('aria-current'), 'page', 'its nav item current');
  t.equal(await page.getByLabel('Admin token').count(), 0, 'never asked for the token');
  t.equal(await view.count(), 0, 'the "cannot reach" view is gone');
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test('it tries again on its own, waiting longer each time, and shows the shell when the session answers', async (t) => {
  const context = await newConsoleContext(t, stack, browser);
  await context.clock.install();
  const page = await context.newPage();
  const problems = watchPageProblems(page);
  await page.goto(`${stack.baseUrl}/console/`);
  await page.getByLabel('Admin token').fill(stack.adminToken);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.getByRole('link', { name: 'Gateway › Nodes' }).waitFor();

  let tries = 0;
  await page.route(isSession, (route) => {
    tries += 1;
    return route.abort('connectionrefused');
  });
  await page.reload();
  const next = page.getByTestId('unreachable-next-try');
  await next.filter({ hasText: 'Trying again in 1 s.' }).waitFor({ timeout: 10_000 });
  t.equal(tries, 1, 'asked once');
  await page.clock.fastForward(1_000);
  await next.filter({ hasText: 'Trying again in 2 s.' }).waitFor();
  t.equal(tries, 2, 'asked again after 1 s');
  await page.clock.fastForward(2_000);
  await next.filter({ hasText: 'Trying again in 4 s.' }).waitFor();
  t.equal(tries, 3, 'and again after 2 s more');
  t.equal(await page.getByLabel('Admin token').count(), 0, 'no login form meanwhile');

  await page.unroute(isSession);
  await page.clock.fastForward(4_000);
  await page.getByRole('link', { name: 'Gateway › Nodes' }).waitFor();
  await waitFor(async () => (await page.getByTestId('unreachable').count()) === 0, { what: 'the "cannot reach" view gone' });
  t.equal(await page.getByLabel('Admin token').count(), 0, 'the shell, without the token asked for');
  t.same(problems.list, [], 'no console errors or CSP violations');
});

t.test('a session that has ended still asks for the token at load', async (t) => {
  const page = await loginPage(t, stack, browser);
  await page.context().clearCookies();
  await page.reload();
  await page.getByLabel('Admin token').waitFor();
  t.equal(await page.getByTestId('unreachable').count(), 0, 'a 401 is no unreachable control plane');
  t.same(page.problems, [], 'no console errors or CSP violations');
});
