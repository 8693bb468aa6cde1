/**
 * The console's login in real headless Chromium: logging in with the admin token shows the shell,
 * a wrong token shows the API's own message, a reload keeps the session, logging out returns to
 * the login view (and the old session is gone on the server), and no page logs an error or a CSP
 * violation on the way.
 */
import t from 'tap';
import { waitFor } from '../fixtures/wait-for.js';
import { launchChromium, loginPage, newConsoleContext, startConsoleStack, watchPageProblems } from './browser-harness.js';

const browser = await launchChromium(t);
const stack = await startConsoleStack(t);

t.test('logging in with the admin token shows the shell with the Gateway nav', async (t) => {
  const page = await loginPage(t, stack, browser);
  t.ok(await page.getByRole('link', { name: 'Gateway › Nodes' }).isVisible(), 'Nodes nav');
  t.ok(await page.getByRole('link', { name: 'Gateway › Requests' }).isVisible(), 'Requests nav');
  t.ok(await page.getByRole('button', { name: 'Log out' }).isVisible(), 'Log out button');
  await page.waitForFunction(() => (globalThis as unknown as { location: { hash: string } }).location.hash === '#/nodes');
  t.equal(await page.getByRole('link', { name: 'Gateway › Nodes' }).getAttribute('aria-current'), 'page', 'the default route is the nodes list');
  const cookies = await page.context().cookies();
  const session = cookies.find((c) => c.name === 'zenova_console');
  t.ok(session, 'a session cookie was set');
  t.equal(session?.httpOnly, true, 'HttpOnly');
  t.equal(session?.sameSite, 'Strict', 'SameSite=Strict');
  t.equal(await page.evaluate('document.cookie'), '', 'the page script cannot read the session cookie');
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test('a wrong admin token shows the API\'s message and no session', async (t) => {
  const context = await newConsoleContext(t, stack, browser);
  const page = await context.newPage();
  const problems = watchPageProblems(page);
  await page.goto(`${stack.baseUrl}/console/`);
  await page.getByLabel('Admin token').fill('not-the-admin-token');
  await page.getByRole('button', { name: 'Log in' }).click();
  const banner = page.getByTestId('error');
  await banner.waitFor();
  t.equal((await banner.textContent())?.trim(), 'Invalid admin token.');
  t.equal(await page.getByRole('link', { name: 'Gateway › Nodes' }).count(), 0, 'no shell');
  t.notOk((await context.cookies()).some((c) => c.name === 'zenova_console'), 'no cookie');
  t.same(problems.list, [], 'no console errors or CSP violations');
});

t.test('an admin token pasted with spaces around it logs in, rather than failing as a wrong token', async (t) => {
  const context = await newConsoleContext(t, stack, browser);
  const page = await context.newPage();
  const problems = watchPageProblems(page);
  const logins: number[] = [];
  page.on('response', (res) => { if (new URL(res.url()).pathname === '/api/console/login') logins.push(res.status()); });
  await page.goto(`${stack.baseUrl}/console/`);
  await page.getByLabel('Admin token').fill(`  \t${stack.adminToken} `);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.getByRole('link', { name: 'Gateway › Nodes' }).waitFor();
  t.same(logins, [200], 'one login, answered 200: no failed attempt counted against the lockout');
  t.equal(await page.getByTestId('error').count(), 0, 'no "Invalid admin token."');
  t.same(problems.list, [], 'no console errors or CSP violations');
});

t.test('a reload keeps the session and the page the user was on', async (t) => {
  const page = await loginPage(t, stack, browser);
  await page.getByRole('link', { name: 'Gateway › Requests' }).click();
  await page.waitForFunction(() => (globalThis as unknown as { location: { hash: string } }).location.hash === '#/requests');
  await page.reload();
  await page.getByRole('link', { name: 'Gateway › Nodes' }).waitFor();
  t.equal(await page.getByLabel('Admin token').count(), 0, 'no login form after the reload');
  t.equal(await page.evaluate('location.hash'), '#/requests');
  t.equal(await page.getByRole('link', { name: 'Gateway › Requests' }).getAttribute('aria-current'), 'page');
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test('logging out returns to the login view and ends the session on the server', async (t) => {
  const page = await loginPage(t, stack, browser);
  const before = await stack.pool.query<{ n: number }>('select count(*)::int as n from console_sessions where expires_at > now()');
  await page.getByRole('button', { name: 'Log out' }).click();
  await page.getByLabel('Admin token').waitFor();
  t.equal(await page.getByRole('link', { name: 'Gateway › Nodes' }).count(), 0, 'the shell is gone');
  const after = await stack.pool.query<{ n: number }>('select count(*)::int as n from console_sessions where expires_at > now()');
  t.equal(after.rows[0]!.n, before.rows[0]!.n - 1, 'the session row was deleted');
  t.notOk((await page.context().cookies()).some((c) => c.name === 'zenova_console'), 'the cookie was cleared');
  await page.reload();
  await page.getByLabel('Admin token').waitFor();
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test('a session ended on the server sends the next API call back to the login view', async (t) => {
  const page = await loginPage(t, stack, browser);
  await stack.pool.query('delete from console_sessions');
  // The next call of any page answers 401; made here through the console's own api().
  await page.evaluate(async (url) => {
    const module = await import(url) as { api(method: string, path: string): Promise<unknown> };
    await module.api('GET', '/api/v1/whoami').catch(() => undefined);
  }, '/console/assets/api.js');
  const banner = page.getByTestId('error');
  await banner.waitFor();
  t.match(await banner.textContent(), /session has ended/);
  t.ok(await page.getByLabel('Admin token').isVisible(), 'the login form is shown');
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test('over HTTPS the login works and the browser holds a Secure cookie', async (t) => {
  const secureStack = await startConsoleStack(t, { https: true });
  t.match(secureStack.baseUrl, /^https:\/\//);
  const page = await loginPage(t, secureStack, browser);
  const session = (await page.context().cookies()).find((c) => c.name === 'zenova_console');
  t.equal(session?.secure, true, 'Secure');
  t.equal(session?.httpOnly, true, 'HttpOnly');
  await page.reload();
  await page.getByRole('link', { name: 'Gateway › Nodes' }).waitFor();
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test('the browser enforces the CSP, and an inline style or script is reported as a problem', async (t) => {
  const page = await loginPage(t, stack, browser);
  const applied = await page.evaluate(`(() => {
    const style = document.createElement('style');
    style.textContent = 'body { visibility: hidden; }';
    document.head.append(style);
    const script = document.createElement('script');
    script.textContent = 'window.__inlineRan = true;';
    document.head.append(script);
    return { hidden: getComputedStyle(document.body).visibility === 'hidden', ran: window.__inlineRan === true };
  })()`);
  t.same(applied, { hidden: false, ran: false }, 'neither the inline style nor the inline script took effect');
  await waitFor(() => page.problems.filter((p) => /Content Security Policy/.test(p)).length >= 2, { what: 'both CSP violations reported' });
  t.pass(`the violations were reported: ${page.problems.join(' | ')}`);
});
