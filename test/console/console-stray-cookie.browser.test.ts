/**
 * Cookie tossing in a real Chromium: a `zenova_console` cookie planted with Path=/api is sent
 * before the console's own (Path=/) on every API call. The login must still lead to a working
 * shell, not back to the login view, and leave no orphan session rows.
 */
import t from 'tap';
import type { BrowserContext, Page } from 'playwright-core';
import { launchChromium, newConsoleContext, startConsoleStack, watchPageProblems } from './browser-harness.js';

const browser = await launchChromium(t);
const stack = await startConsoleStack(t);

const plantStray = (context: BrowserContext) => context.addCookies([{
  name: 'zenova_console', value: 'x'.repeat(43), domain: new URL(stack.baseUrl).hostname, path: '/api',
  sameSite: 'Lax', expires: Math.floor(Date.now() / 1000) + 86400,
}]);

/** Waits for the nodes list to answer or the login view to come (back); true for the former. */
const nodesListShown = async (page: Page): Promise<boolean> => {
  const empty = page.getByTestId('nodes-empty');
  await empty.or(page.getByLabel('Admin token')).waitFor({ timeout: 15_000 });
  return empty.isVisible();
};

const sessionRows = async (): Promise<number> =>
  (await stack.pool.query<{ n: number }>('select count(*)::int as n from console_sessions')).rows[0]!.n;

t.test('with a stray session cookie planted on /api, logging in shows a working shell that a reload keeps', async (t) => {
  const context = await newConsoleContext(t, stack, browser);
  await plantStray(context);
  const page = await context.newPage();
  const problems = watchPageProblems(page);
  await page.goto(`${stack.baseUrl}/console/#/nodes`);
  await stack.pool.query('delete from console_sessions');
  for (let round = 1; round <= 2; round++) {
    await page.getByLabel('Admin token').fill(stack.adminToken);
    await page.getByRole('button', { name: 'Log in' }).click();
    await page.getByRole('link', { name: 'Gateway › Nodes' }).waitFor();
    // The nodes list answered: /api/v1 took the session, no 401 back to the login.
    if (!t.ok(await nodesListShown(page), `login ${round}: the shell stays and the nodes list answers`)) return;
    t.equal(await sessionRows(), 1, `login ${round}: one session row, no orphans`);
    // Planted again after the login cleared it: the live session is found behind it.
    await plantStray(context);
    await page.reload();
    if (!t.ok(await nodesListShown(page), `login ${round}: a reload keeps the shell`)) return;
    if (round === 1) {
      await page.getByRole('button', { name: 'Log out' }).click();
      await page.getByLabel('Admin token').waitFor();
      t.equal(await sessionRows(), 0, 'the logout ended the live session, stray or not');
      await plantStray(context);
    }
  }
  t.same(problems.list, [], 'no console errors or CSP violations');
});
