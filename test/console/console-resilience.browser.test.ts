/**
 * The console when the answer comes late, never, or from a control plane whose clock is not the
 * browser's, in real headless Chromium: a node created after its Add node page was left still
 * shows its one-time install command (on the page the user is on) and nothing polls for the page
 * that is gone; a refresh the control plane does not answer is given up after 15 s, says so, and
 * shows status and heartbeat age as unknown instead of "Online, 1s ago"; heartbeat ages are
 * measured on the control plane's clock, not on a browser clock an hour ahead.
 */
import t from 'tap';
import type { Page, Request, Route } from 'playwright-core';
import { FACTS, bearer, validNodeBody } from '../control-plane/nodes-harness.js';
import { launchChromium, loginPage, newConsoleContext, startConsoleStack, watchPageProblems } from './browser-harness.js';
import type { LoggedInPage } from './browser-harness.js';

const browser = await launchChromium(t);
const stack = await startConsoleStack(t);

/** What a refresh would wait on at most (api.js's REQUEST_TIMEOUT_MS). */
const REQUEST_TIMEOUT_MS = 15_000;
const LIST_REFRESH_MS = 5_000;
const ONBOARDING_REFRESH_MS = 2_000;

const createNode = async (name: string): Promise<void> => {
  const res = await stack.app.inject({ method: 'POST', url: '/api/v1/nodes', headers: bearer, payload: validNodeBody({ name }) });
  if (res.statusCode !== 201) throw new Error(`node ${name}: ${res.statusCode} ${res.body.slice(0, 200)}`);
};

/** What a heartbeat writes, `secondsAgo` seconds ago by the database's clock. */
const heartbeat = (name: string, secondsAgo: number) => stack.pool.query(
  `update nodes set last_heartbeat_at = now() - make_interval(secs => $2), enrolled_at = now(), version = '0.1.0',
     onboarding_stage = 'first-heartbeat', figures = '{"requests5m": 10, "errors5m": 0, "spoolBytes": 0, "backfillBacklog": 0, "clockSkewMs": 3}'
   where name = $1`, [name, secondsAgo]);

const pathOf = (url: string) => new URL(url).pathname;
const isGet = (path: string) => (req: Request) => req.method() === 'GET' && pathOf(req.url()) === path;

const cell = (page: Page, name: string, column: string) => page.getByTestId(`node-row-${name}`).locator(`[data-col="${column}"]`);
const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const exactly = (text: string) => new RegExp(`^${escape(text)}$`);
/** Waits until the element's text matches (a locator's wait: the CSP refuses the eval a polled string predicate needs). */
const waitForText = (page: Page, selector: string, text: RegExp) => page.locator(selector, { hasText: text }).waitFor({ timeout: 15_000 });
const waitForHash = (page: Page, hash: string) =>
  page.waitForFunction((want) => (globalThis as unknown as { location: { hash: string } }).location.hash === want, hash);

/**
 * A page logged in through the real form, its timers and Date on Playwright's clock (installed
 * before the console loads, running at real pace from `time` on until told otherwise).
 */
async function loginWithClock(t: Parameters<typeof loginPage>[0], time?: number): Promise<LoggedInPage> {
  const context = await newConsoleContext(t, stack, browser);
  await context.clock.install(time === undefined ? {} : { time });
  const page = await context.newPage();
  const problems = watchPageProblems(page);
  await page.goto(`${stack.baseUrl}/console/`);
  await page.getByLabel('Admin token').fill(stack.adminToken);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.getByRole('link', { name: 'Gateway › Nodes' }).waitFor();
  return Object.assign(page, { problems: problems.list });
}

t.test('leaving Add node while Create is in flight shows the new node\'s one-time command on the page the user went to, and nothing polls the node', async (t) => {
  const page = await loginPage(t, stack, browser, { hash: '#/add-node' });
  let held: (route: Route) => void = () => {};
  const createHeld = new Promise<Route>((resolve) => { held = resolve; });
  await page.route((url) => pathOf(url.href) === '/api/v1/nodes', async (route) => {
    if (route.request().method() === 'POST') held(route);
    else await route.continue();
  });
  const nodePolls: string[] = [];
  page.on('request', (req) => { if (isGet('/api/v1/nodes/edge-away')(req)) nodePolls.push(req.url()); });

  await page.getByLabel('Node name').fill('edge-away');
  await page.getByRole('button', { name: 'Next' }).click();
  await page.getByLabel('Node address').fill('edge.example.com');
  await page.getByLabel('Control-plane URL').fill('https://cp.example.com');
  await page.getByRole('button', { name: 'Next' }).click();
  await page.getByRole('button', { name: 'Next' }).click();
  await page.getByRole('button', { name: 'Create and generate install command' }).click();
  const create = await createHeld;

  // Away to the node list while the control plane has not answered yet.
  await page.getByRole('link', { name: 'Gateway › Nodes' }).click();
  await waitForHash(page, '#/nodes');
  await page.getByTestId('nodes-empty').waitFor();
  await create.continue();

  const notice = page.getByTestId('node-created-notice');
  await notice.waitFor({ timeout: 15_000 });
  t.match(await notice.textContent(), /Node edge-away was created after you left Add node/, 'the notice names the node');
  t.match(await notice.getByTestId('command-warning').textContent(), /shown only once/, 'with the seed\'s warning');
  const command = (await notice.getByTestId('install-command').textContent()) ?? '';
  const token = /^printf '%s\\n' (\S+) \| sudo /.exec(command)?.[1] ?? '';
  const enrolled = await stack.app.inject({ method: 'POST', url: '/api/enroll', payload: { token, mode: 'install', facts: FACTS } });
  t.equal(enrolled.statusCode, 200, `the command shown is the one the API issued: its token enrolls (answer ${enrolled.statusCode})`);

  // The list's next refresh comes 5 s on: an onboarding poller (every 2 s, first at once) would have asked by then.
  await page.waitForResponse((res) => isGet('/api/v1/nodes')(res.request()), { timeout: LIST_REFRESH_MS + 10_000 });
  await page.getByTestId('node-row-edge-away').waitFor();
  t.same(nodePolls, [], 'nothing polls the node for the page that was left');

  await page.getByRole('link', { name: 'Gateway › Requests' }).click();
  await waitForHash(page, '#/requests');
  t.equal(await notice.count(), 1, 'the notice stays on the next page until dismissed');
  await notice.getByRole('button', { name: 'Dismiss' }).click();
  await notice.waitFor({ state: 'detached' });
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test('a list refresh the control plane does not answer is given up after 15 s and shows status and heartbeat age as unknown', async (t) => {
  await createNode('edge-hung');
  await heartbeat('edge-hung', 0);
  const page = await loginWithClock(t);
  await waitForText(page, '[data-testid="node-row-edge-hung"] [data-col="status"]', exactly('Online'));
  t.match(await cell(page, 'edge-hung', 'lastHeartbeatAt').textContent(), /^\ds ago$/, 'a fresh heartbeat first');

  // Watched before the hold: the refresh held may be one that comes on its own.
  const asked = page.waitForRequest(isGet('/api/v1/nodes'));
  const hung: Route[] = [];
  await page.route((url) => pathOf(url.href) === '/api/v1/nodes', (route) => { hung.push(route); });
  await page.clock.fastForward(LIST_REFRESH_MS);
  await asked;
  // Held by the route: the control plane never answers it.
  await page.clock.fastForward(REQUEST_TIMEOUT_MS);
  await page.getByTestId('error').filter({ hasText: 'The control plane did not answer within 15 s' }).waitFor({ timeout: 10_000 });
  t.match(await page.getByTestId('error').textContent(), /status and heartbeat ages are unknown/, 'the banner says what is stale');
  t.equal(await cell(page, 'edge-hung', 'status').textContent(), 'Unknown', 'no longer "Online"');
  t.equal(await cell(page, 'edge-hung', 'lastHeartbeatAt').textContent(), 'unknown', 'no longer "1s ago"');
  t.equal(hung.length, 1, 'the one request held');

  await page.unrouteAll({ behavior: 'ignoreErrors' });
  await page.clock.fastForward(LIST_REFRESH_MS);
  await waitForText(page, '[data-testid="node-row-edge-hung"] [data-col="status"]', exactly('Online'));
  await page.getByTestId('error').waitFor({ state: 'detached' });
  t.match(await cell(page, 'edge-hung', 'lastHeartbeatAt').textContent(), /^\d+s ago$/, 'the next answer shows the age again');
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test('a node detail refresh the control plane does not answer is given up and shows the status and heartbeat age as unknown', async (t) => {
  await createNode('edge-hung-detail');
  await heartbeat('edge-hung-detail', 0);
  const page = await loginWithClock(t);
  await page.goto(`${stack.baseUrl}/console/#/nodes/edge-hung-detail`);
  await waitForText(page, '[data-field="lastHeartbeatAt"]', /\(\ds ago\)$/);
  t.equal(await page.locator('h1 [data-status]').getAttribute('data-status'), 'online', 'online first');

  const asked = page.waitForRequest(isGet('/api/v1/nodes/edge-hung-detail'));
  await page.route((url) => pathOf(url.href) === '/api/v1/nodes/edge-hung-detail', () => {});
  await page.clock.fastForward(ONBOARDING_REFRESH_MS);
  await asked;
  await page.clock.fastForward(REQUEST_TIMEOUT_MS);
  await page.getByTestId('error').filter({ hasText: 'The control plane did not answer within 15 s' }).waitFor({ timeout: 10_000 });
  t.equal(await page.locator('h1 [data-status]').getAttribute('data-status'), 'unknown', 'the badge no longer says online');
  t.match(await page.locator('[data-field="lastHeartbeatAt"]').textContent(), /age unknown/, 'nor the age "1s ago"');
  await page.unrouteAll({ behavior: 'ignoreErrors' });
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test('heartbeat ages are measured on the control plane\'s clock when the browser\'s clock is an hour ahead', async (t) => {
  await createNode('edge-skew');
  await heartbeat('edge-skew', 20);
  const page = await loginWithClock(t, Date.now() + 3_600_000);
  t.ok(await page.evaluate(() => Date.now()) - Date.now() > 3_500_000, 'the browser\'s clock is an hour ahead');
  await page.getByTestId('node-row-edge-skew').waitFor();
  t.equal(await cell(page, 'edge-skew', 'status').textContent(), 'Online', 'online (the control plane judges that)');
  t.match(await cell(page, 'edge-skew', 'lastHeartbeatAt').textContent(), /^(19|2\d)s ago$/, 'the list: about 20 s, not an hour');

  await page.getByTestId('node-row-edge-skew').locator('[data-col="requests5m"]').click();
  await waitForHash(page, '#/nodes/edge-skew');
  await page.locator('[data-field="lastHeartbeatAt"]').waitFor();
  t.match(await page.locator('[data-field="lastHeartbeatAt"]').textContent(), /\((19|2\d)s ago\)$/, 'the detail: the same');
  t.same(page.problems, [], 'no console errors or CSP violations');
});
