/**
 * A node's Edit network and Edit settings forms in real headless Chromium, while someone else edits
 * the same node: the form works on the node as it was when it opened (the page is not refreshed
 * under it), sends only the fields changed in it with `If-Match` (the ETag the page read), and a
 * change made meanwhile is never written over: the API's 412 is shown in the form, which offers the
 * current values; saved on those, both changes stand.
 */
import t from 'tap';
import type { Request } from 'playwright-core';
import { bearer, validNodeBody } from '../control-plane/nodes-harness.js';
import { waitFor } from '../fixtures/wait-for.js';
import { launchChromium, newConsoleContext, startConsoleStack, watchPageProblems } from './browser-harness.js';
import type { LoggedInPage } from './browser-harness.js';

const browser = await launchChromium(t);
const stack = await startConsoleStack(t);

/** node-detail.js's refresh interval once onboarded (every 2 s before): more than either. */
const LONGEST_REFRESH_MS = 5_000;

const createNode = async (name: string): Promise<void> => {
  const res = await stack.app.inject({ method: 'POST', url: '/api/v1/nodes', headers: bearer, payload: validNodeBody({ name }) });
  if (res.statusCode !== 201) throw new Error(`node ${name}: ${res.statusCode} ${res.body.slice(0, 200)}`);
};

/** The node as the API has it, and its ETag. */
const getNode = async (name: string): Promise<{ node: Record<string, unknown>; etag: string }> => {
  const res = await stack.app.inject({ method: 'GET', url: `/api/v1/nodes/${name}`, headers: bearer });
  if (res.statusCode !== 200) throw new Error(`GET node ${name}: ${res.statusCode}`);
  return { node: res.json<Record<string, unknown>>(), etag: String(res.headers.etag ?? '') };
};

/** Someone else's edit, through the admin API (a script, another console). */
const editElsewhere = async (name: string, what: 'network' | 'settings', patch: Record<string, unknown>): Promise<void> => {
  const res = await stack.app.inject({ method: 'PATCH', url: `/api/v1/nodes/${name}/${what}`, headers: bearer, payload: patch });
  if (res.statusCode !== 200) throw new Error(`PATCH ${what}: ${res.statusCode} ${res.body.slice(0, 200)}`);
};

const pathOf = (url: string) => new URL(url).pathname;

/**
 * A page logged in through the real form on the node's detail, and every request of the node it
 * made (GET refreshes, PATCH saves). Its timers are on Playwright's clock, paused from the start: a
 * refresh comes only when the test fast-forwards the clock (the first load is no timer's).
 */
async function nodePage(t: Parameters<typeof newConsoleContext>[0], name: string): Promise<{ page: LoggedInPage; requests: Request[] }> {
  const context = await newConsoleContext(t, stack, browser);
  await context.clock.install();
  await context.clock.pauseAt(Date.now() + 1_000);
  const page = await context.newPage();
  const problems = watchPageProblems(page);
  const requests: Request[] = [];
  const pending = new Set<Request>();
  page.on('request', (req) => {
    if (!pathOf(req.url()).startsWith(`/api/v1/nodes/${name}`)) return;
    requests.push(req);
    pending.add(req);
  });
  page.on('requestfinished', (req) => pending.delete(req));
  page.on('requestfailed', (req) => pending.delete(req));
  await page.goto(`${stack.baseUrl}/console/#/nodes/${name}`);
  await page.getByLabel('Admin token').fill(stack.adminToken);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.locator('[data-field="address"]').waitFor();
  await waitFor(() => pending.size === 0, { what: 'no request of the node on its way' });
  return { page: Object.assign(page, { problems: problems.list }), requests };
}

/** Waits until the form's field shows `value` (it is set as a property: no attribute to select by). */
const waitForValue = (page: LoggedInPage, selector: string, value: string) =>
  waitFor(async () => (await page.locator(selector).inputValue({ timeout: 1_000 })) === value, { what: `${selector} showing ${value}` });

const isRefresh = (name: string) => (req: Request) => req.method() === 'GET' && pathOf(req.url()) === `/api/v1/nodes/${name}`;

t.test('Edit network sends only the field changed, with If-Match, and a URL changed meanwhile is kept: the 412 shown, then saved on the current values', async (t) => {
  const name = 'edge-race-net';
  await createNode(name);
  const { page, requests } = await nodePage(t, name);
  const atOpen = await getNode(name);
  t.match(atOpen.etag, /^"[A-Za-z0-9_-]+"$/, 'the API gives the node an ETag');

  await page.getByRole('button', { name: 'Edit network' }).click();
  const openedAt = requests.length;
  await editElsewhere(name, 'network', { controlPlaneUrl: 'https://cp-other.example.com' });
  // Long past any refresh: none may come while the form is open.
  await page.clock.fastForward(3 * LONGEST_REFRESH_MS);

  await page.getByLabel('Node address').fill('edge-race-net.example.net');
  const patched = page.waitForRequest((req) => req.method() === 'PATCH');
  await page.getByRole('button', { name: 'Save network' }).click();
  const patch = await patched;
  // Every timer fired by the fast-forward asked (if it asked at all) before the Save.
  t.same(requests.slice(openedAt).filter(isRefresh(name)).map((r) => r.url()), [], 'the page was not refreshed under the open form');
  t.same(patch.postDataJSON(), { address: 'edge-race-net.example.net' }, 'only the field changed in the form is sent');
  t.equal(await patch.headerValue('if-match'), atOpen.etag, 'with the ETag of the node as the form opened');

  const error = page.getByRole('form', { name: 'Edit network' }).getByTestId('error');
  await error.waitFor();
  t.match(await error.textContent(), /changed since it was read/, 'the API\'s 412 message, in the form');
  t.match((await getNode(name)).node, { address: 'edge.example.com', controlPlaneUrl: 'https://cp-other.example.com' },
    'nothing written: the other change stands, the address is as it was');

  await page.getByRole('button', { name: 'Reload the current values' }).click();
  await waitForValue(page, '#edit-cp-url', 'https://cp-other.example.com');
  t.equal(await page.getByLabel('Control-plane URL').inputValue(), 'https://cp-other.example.com', 'the form shows the URL changed meanwhile');
  t.equal(await page.getByLabel('Node address').inputValue(), 'edge.example.com', 'and the address as it is now');
  t.equal(await page.locator('[data-field="controlPlaneUrl"]').textContent(), 'https://cp-other.example.com', 'so does the page');

  await page.getByLabel('Node address').fill('edge-race-net.example.net');
  const saved = page.waitForRequest((req) => req.method() === 'PATCH');
  await page.getByRole('button', { name: 'Save network' }).click();
  t.same((await saved).postDataJSON(), { address: 'edge-race-net.example.net' }, 'again only the address');
  await page.getByText('Network saved.').waitFor();
  t.match((await getNode(name)).node, { address: 'edge-race-net.example.net', controlPlaneUrl: 'https://cp-other.example.com' },
    'both changes stand');

  // The form closed: the page refreshes again.
  const refreshed = page.waitForRequest(isRefresh(name));
  await page.clock.fastForward(LONGEST_REFRESH_MS);
  await refreshed;
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test('Edit settings sends only the settings changed, with If-Match, and a spool quota changed meanwhile is kept', async (t) => {
  const name = 'edge-race-set';
  await createNode(name);
  const { page } = await nodePage(t, name);
  const atOpen = await getNode(name);
  t.equal(atOpen.node.spoolQuotaGb, 10, 'the default quota first');

  await page.getByRole('button', { name: 'Edit settings' }).click();
  await editElsewhere(name, 'settings', { spoolQuotaGb: 40 });
  await page.clock.fastForward(3 * LONGEST_REFRESH_MS);
  t.equal(await page.getByLabel('Spool quota (GiB)').inputValue(), '10', 'the form keeps the values it opened with');

  await page.getByLabel('Tool gateway (MCP)').check();
  const patched = page.waitForRequest((req) => req.method() === 'PATCH');
  await page.getByRole('button', { name: 'Save settings' }).click();
  const patch = await patched;
  t.same(patch.postDataJSON(), { surfaces: ['model', 'tools'] }, 'only the surfaces: the quota and the policy were left as they were');
  t.equal(await patch.headerValue('if-match'), atOpen.etag, 'with the ETag of the node as the form opened');
  const error = page.getByRole('form', { name: 'Edit settings' }).getByTestId('error');
  await error.waitFor();
  t.match(await error.textContent(), /changed since it was read/, 'the API\'s 412 message, in the form');
  t.match((await getNode(name)).node, { surfaces: ['model'], spoolQuotaGb: 40 }, 'nothing written over the other change');

  await page.getByRole('button', { name: 'Reload the current values' }).click();
  await waitForValue(page, '#edit-spool-quota', '40');
  t.equal(await page.getByLabel('Spool quota (GiB)').inputValue(), '40', 'the form shows the quota set meanwhile');
  t.notOk(await page.getByLabel('Tool gateway (MCP)').isChecked(), 'and the surfaces as they are now');
  await page.getByLabel('Tool gateway (MCP)').check();
  const saved = page.waitForRequest((req) => req.method() === 'PATCH');
  await page.getByRole('button', { name: 'Save settings' }).click();
  t.same((await saved).postDataJSON(), { surfaces: ['model', 'tools'] }, 'again only the surfaces');
  await page.getByText('Settings saved;').waitFor();
  t.match((await getNode(name)).node, { surfaces: ['model', 'tools'], spoolQuotaGb: 40 }, 'both changes stand');
  t.match(await page.locator('[data-field="spool"]').textContent(), /quota 40 GiB/, 'the page shows the node as saved');
  t.same(page.problems, [], 'no console errors or CSP violations');
});
