/**
 * "Log out" clicked after the session already ended on the server (it expired, or another tab
 * logged out): the logout answers 401, and that is a logout all the same (docs/console.md). The
 * one-time install command notice is dropped and the Add node wizard starts afresh after the next
 * login, as after any other logout; the login view is the plain one, not "your session has ended".
 */
import t from 'tap';
import type { Route } from 'playwright-core';
import { launchChromium, loginPage, startConsoleStack } from './browser-harness.js';

const browser = await launchChromium(t);
const stack = await startConsoleStack(t);
const pathOf = (url: string) => new URL(url).pathname;

t.test('Log out after the session ended elsewhere drops the one-time install command notice', async (t) => {
  const page = await loginPage(t, stack, browser, { hash: '#/add-node' });
  // Create is held until the wizard was left, so its answer becomes a notice of the shell.
  let hold: (route: Route) => void = () => {};
  const held = new Promise<Route>((resolve) => { hold = resolve; });
  await page.route((url) => pathOf(url.href) === '/api/v1/nodes', async (route) => {
    if (route.request().method() === 'POST') hold(route);
    else await route.continue();
  });
  await page.getByLabel('Node name').fill('edge-away');
  await page.getByRole('button', { name: 'Next' }).click();
  await page.getByLabel('Node address').fill('edge.example.com');
  await page.getByLabel('Control-plane URL').fill('https://cp.example.com');
  await page.getByRole('button', { name: 'Next' }).click();
  await page.getByRole('button', { name: 'Next' }).click();
  await page.getByRole('button', { name: 'Create and generate install command' }).click();
  const create = await held;
  await page.getByRole('link', { name: 'Gateway › Requests' }).click();
  await create.continue();
  const notice = page.getByTestId('node-created-notice');
  await notice.waitFor({ timeout: 15_000 });
  t.match(await notice.getByTestId('install-command').textContent(), /--token-file -/);

  await stack.pool.query('delete from console_sessions'); // ended elsewhere
  await page.getByRole('button', { name: 'Log out' }).click();
  await page.getByLabel('Admin token').waitFor();
  t.equal(await page.getByTestId('error').count(), 0, 'the plain login view: no "session has ended" message');
  await page.getByLabel('Admin token').fill(stack.adminToken);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.getByRole('link', { name: 'Gateway › Nodes' }).waitFor();
  // The shell draws its notice area in the same step as the nav: no notice now means none to come.
  await page.getByRole('heading', { name: 'Recent requests' }).waitFor();
  t.equal(await notice.count(), 0, 'the notice is dropped, as after any logout');
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test('Log out after the session ended elsewhere starts the Add node wizard afresh', async (t) => {
  const page = await loginPage(t, stack, browser, { hash: '#/add-node' });
  await page.getByLabel('Node name').fill('edge-kept');
  await page.getByRole('button', { name: 'Next' }).click();
  await page.getByLabel('Node address').fill('kept.example.com');
  await stack.pool.query('delete from console_sessions');
  await page.getByRole('button', { name: 'Log out' }).click();
  await page.getByLabel('Admin token').fill(stack.adminToken);
  await page.getByRole('button', { name: 'Log in' }).click();
  // Same tab, no reload: the wizard's memory would still hold what was typed.
  await page.getByRole('link', { name: 'Gateway › Nodes' }).waitFor();
  const nodeName = page.getByLabel('Node name');
  // Attached, not visible: the page draws every step at once and restores a draft in that same step.
  await nodeName.waitFor({ state: 'attached' });
  t.ok(await nodeName.isVisible(), 'the wizard is back at step 1');
  t.equal(await nodeName.inputValue(), '', 'with nothing typed');
  t.notOk(await page.getByLabel('Node address').isVisible(), 'not at the step the user left');
  t.same(page.problems, [], 'no console errors or CSP violations');
});
