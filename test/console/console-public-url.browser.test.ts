/**
 * ZENOVA_PUBLIC_URL in real headless Chromium: behind a reverse proxy the page's own origin is not
 * the address node hosts reach, so the Add Node wizard's control-plane URL starts as the control
 * plane's public URL when it is https, over this page's origin; an http one is not offered (nodes
 * enroll over HTTPS only). The hint says where the default came from, and a value typed before a
 * session ended wins over the default after logging in again.
 */
import t from 'tap';
import type { Page } from 'playwright-core';
import { bearer } from '../control-plane/nodes-harness.js';
import { launchChromium, loginPage, startConsoleStack } from './browser-harness.js';
import type { ConsoleStack } from './browser-harness.js';

const browser = await launchChromium(t);
const PUBLIC_URL = 'https://zenova.example.com';

/** Step 1 with a name, then the Network step, where the control-plane URL field is. */
async function openNetworkStep(page: Page, name: string): Promise<void> {
  await page.getByLabel('Node name').fill(name);
  await page.getByRole('button', { name: 'Next' }).click();
  await page.getByLabel('Node address').waitFor();
}

const cpUrlHint = async (page: Page): Promise<string> => (await page.locator('#control-plane-url-hint').textContent()) ?? '';

async function nodeControlPlaneUrl(stack: ConsoleStack, name: string): Promise<string | undefined> {
  const res = await stack.app.inject({ method: 'GET', url: `/api/v1/nodes/${name}`, headers: bearer });
  return res.statusCode === 200 ? res.json<{ controlPlaneUrl: string }>().controlPlaneUrl : undefined;
}

/** From the Network step: an address, then on to the review and Create; waits for the command. */
async function createFromNetworkStep(page: Page, address: string): Promise<void> {
  await page.getByLabel('Node address').fill(address);
  await page.getByRole('button', { name: 'Next' }).click();
  await page.getByRole('button', { name: 'Next' }).click();
  await page.getByRole('button', { name: 'Create and generate install command' }).click();
  await page.getByTestId('install-command').waitFor();
}

t.test('a console served over plain HTTP with an https ZENOVA_PUBLIC_URL prefills it as the control-plane URL, says so, and the API takes it', async (t) => {
  const stack = await startConsoleStack(t, { settings: { publicUrl: PUBLIC_URL } });
  const page = await loginPage(t, stack, browser, { hash: '#/add-node' });
  await openNetworkStep(page, 'edge-public');
  t.equal(await page.getByLabel('Control-plane URL').inputValue(), PUBLIC_URL, 'prefilled with ZENOVA_PUBLIC_URL');
  t.match(await cpUrlHint(page), /Defaults to the control plane's public address \(its ZENOVA_PUBLIC_URL setting\)/);
  await createFromNetworkStep(page, 'edge-public.example.com');
  t.equal(await nodeControlPlaneUrl(stack, 'edge-public'), PUBLIC_URL, 'the node calls back to the public URL');
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test('over HTTPS an https ZENOVA_PUBLIC_URL is the default rather than the page\'s own origin, also after a reload (the session answer)', async (t) => {
  const stack = await startConsoleStack(t, { https: true, settings: { publicUrl: `${PUBLIC_URL}/zenova` } });
  const page = await loginPage(t, stack, browser, { hash: '#/add-node' });
  await openNetworkStep(page, 'edge-proxied');
  t.equal(await page.getByLabel('Control-plane URL').inputValue(), `${PUBLIC_URL}/zenova`, 'the public URL, path and all');
  t.not(await page.getByLabel('Control-plane URL').inputValue(), stack.baseUrl, 'not the page origin');

  // A reload boots from GET /api/console/session, not the login's answer.
  await page.reload();
  await openNetworkStep(page, 'edge-proxied');
  t.equal(await page.getByLabel('Control-plane URL').inputValue(), `${PUBLIC_URL}/zenova`, 'after a reload too');
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test('an http ZENOVA_PUBLIC_URL is not offered: over HTTPS the page origin stays the default, over HTTP the field stays empty, and the hint says why', async (t) => {
  const overHttps = await startConsoleStack(t, { https: true, settings: { publicUrl: 'http://zenova.example.com' } });
  const secure = await loginPage(t, overHttps, browser, { hash: '#/add-node' });
  await openNetworkStep(secure, 'edge-http-public');
  t.equal(await secure.getByLabel('Control-plane URL').inputValue(), overHttps.baseUrl, 'the console\'s own https origin');
  t.match(await cpUrlHint(secure), /Defaults to this console's address\. The control plane's ZENOVA_PUBLIC_URL \(http:\/\/zenova\.example\.com\) is not HTTPS/);
  t.same(secure.problems, [], 'no console errors or CSP violations (HTTPS page)');

  const overHttp = await startConsoleStack(t, { settings: { publicUrl: 'http://zenova.example.com' } });
  const plain = await loginPage(t, overHttp, browser, { hash: '#/add-node' });
  await openNetworkStep(plain, 'edge-http-public');
  t.equal(await plain.getByLabel('Control-plane URL').inputValue(), '', 'nothing to offer');
  t.match(await cpUrlHint(plain), /served over plain HTTP.*ZENOVA_PUBLIC_URL \(http:\/\/zenova\.example\.com\) is not HTTPS/);
  t.same(plain.problems, [], 'no console errors or CSP violations (HTTP page)');
});

t.test('without ZENOVA_PUBLIC_URL the wizard is as before: the https page origin, and the hint names the setting that changes it', async (t) => {
  const stack = await startConsoleStack(t, { https: true });
  const page = await loginPage(t, stack, browser, { hash: '#/add-node' });
  await openNetworkStep(page, 'edge-no-public');
  t.equal(await page.getByLabel('Control-plane URL').inputValue(), stack.baseUrl);
  t.match(await cpUrlHint(page), /Defaults to this console's address \(setting ZENOVA_PUBLIC_URL on the control plane changes the default\)/);
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test('a control-plane URL typed before the session ended wins over ZENOVA_PUBLIC_URL after logging in again', async (t) => {
  const stack = await startConsoleStack(t, { settings: { publicUrl: PUBLIC_URL } });
  const page = await loginPage(t, stack, browser, { hash: '#/add-node' });
  await openNetworkStep(page, 'edge-typed');
  t.equal(await page.getByLabel('Control-plane URL').inputValue(), PUBLIC_URL, 'the default first');
  await page.getByLabel('Node address').fill('edge-typed.example.com');
  await page.getByLabel('Control-plane URL').fill('https://cp.typed.example:9443');
  await page.getByRole('button', { name: 'Next' }).click();
  await page.getByRole('button', { name: 'Next' }).click();

  // The session ends on the server (as at expiry): the create answers 401 and the login view shows.
  await stack.pool.query('delete from console_sessions');
  await page.getByRole('button', { name: 'Create and generate install command' }).click();
  await page.getByTestId('error').waitFor();
  await page.getByLabel('Admin token').fill(stack.adminToken);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.getByRole('button', { name: 'Create and generate install command' }).waitFor();

  await page.getByRole('button', { name: 'Back' }).click();
  await page.getByRole('button', { name: 'Back' }).click();
  t.equal(await page.getByLabel('Control-plane URL').inputValue(), 'https://cp.typed.example:9443', 'the typed URL, not the default');
  await page.getByRole('button', { name: 'Next' }).click();
  await page.getByRole('button', { name: 'Next' }).click();
  await page.getByRole('button', { name: 'Create and generate install command' }).click();
  await page.getByTestId('install-command').waitFor();
  t.equal(await nodeControlPlaneUrl(stack, 'edge-typed'), 'https://cp.typed.example:9443', 'the node was created with the typed URL');
  t.same(page.problems, [], 'no console errors or CSP violations');
});
