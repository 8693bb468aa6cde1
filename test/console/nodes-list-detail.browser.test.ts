/**
 * Gateway › Nodes list and node detail in real headless Chromium: the empty state, the seed's
 * columns refreshed in place as heartbeats change the node's row, the detail's fields with a
 * config error shown prominently, reissued commands (the earlier token stops working), the
 * network and settings edits, and deletion behind a typed-name confirmation (the central node's
 * refusal shown in the API's words).
 */
import t from 'tap';
import type { Page } from 'playwright-core';
import { FACTS, bearer, validNodeBody } from '../control-plane/nodes-harness.js';
import { createTestCa } from '../fixtures/tls.js';
import { launchChromium, loginPage, startConsoleStack } from './browser-harness.js';

const browser = await launchChromium(t);
const stack = await startConsoleStack(t);

interface Created { node: { id: string; name: string }; install: { command: string; token: string } }

const createNode = async (name: string, overrides: Record<string, unknown> = {}): Promise<Created> => {
  const res = await stack.app.inject({ method: 'POST', url: '/api/v1/nodes', headers: bearer, payload: validNodeBody({ name, ...overrides }) });
  if (res.statusCode !== 201) throw new Error(`node ${name}: ${res.statusCode} ${res.body.slice(0, 200)}`);
  return res.json<Created>();
};

const getNode = async (name: string) => {
  const res = await stack.app.inject({ method: 'GET', url: `/api/v1/nodes/${name}`, headers: bearer });
  return { status: res.statusCode, node: res.json<Record<string, unknown>>() };
};

const enroll = async (token: string, mode: 'install' | 'reenroll' = 'install') => stack.app.inject({
  method: 'POST', url: '/api/enroll', payload: { token, mode, facts: FACTS },
});

const tokenOf = (command: string): string => {
  const token = /^printf '%s\\n' (\S+) \| sudo /.exec(command)?.[1];
  if (!token) throw new Error(`no piped token in ${command}`);
  return token;
};

/** The text of one cell of a node's row in the list. */
const cell = (page: Page, name: string, column: string) => page.getByTestId(`node-row-${name}`).locator(`[data-col="${column}"]`);
/** One field of the detail page. */
const detailField = (page: Page, key: string) => page.locator(`[data-field="${key}"]`);

/** Marks the document: a reload would lose the mark. */
/**
 * Waits for the location hash. A function, not a string: polling a string predicate needs eval,
 * which the console's CSP refuses.
 */
const waitForHash = (page: Page, hash: string) =>
  page.waitForFunction((want) => (globalThis as unknown as { location: { hash: string } }).location.hash === want, hash);

const markDocument = (page: Page) => page.evaluate('window.sameDocument = true');
const sameDocument = (page: Page) => page.evaluate('window.sameDocument === true');

/** Waits until the element's text matches (a locator's wait: the console's CSP refuses the eval a polled string predicate needs). */
const waitForText = (page: Page, selector: string, text: RegExp) => page.locator(selector, { hasText: text }).waitFor({ timeout: 15_000 });
const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const exactly = (text: string) => new RegExp(`^${escape(text)}$`);

t.test('without nodes the list says so and "Add node" opens the wizard', async (t) => {
  const page = await loginPage(t, stack, browser);
  const empty = page.getByTestId('nodes-empty');
  await empty.waitFor();
  t.match(await empty.textContent(), /No gateway nodes yet/);
  await page.getByRole('button', { name: 'Add node' }).click();
  await waitForHash(page, '#/add-node');
  await page.getByLabel('Node name').waitFor();
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test('a node named "new" opens its detail, not the wizard', async (t) => {
  const created = await createNode('new');
  const page = await loginPage(t, stack, browser, { hash: '#/nodes/new' });
  await page.getByRole('heading', { name: 'Node new' }).waitFor();
  await waitForText(page, '[data-field="id"]', exactly(created.node.id));
  t.equal(await page.getByLabel('Node name').count(), 0, 'no wizard');
  for (const key of ['requests5m', 'errorRate5m', 'backfillBacklog', 'spoolBytes']) {
    t.equal(await detailField(page, key).textContent(), '-', `${key}: nothing measured before a heartbeat`);
  }
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test('the list shows a node\'s status and figures and refreshes them in place as heartbeats change them', async (t) => {
  await createNode('edge-list');
  const page = await loginPage(t, stack, browser);
  await page.getByTestId('node-row-edge-list').waitFor();
  t.equal(await cell(page, 'edge-list', 'status').textContent(), 'Pending', 'pending before a heartbeat');
  t.equal(await cell(page, 'edge-list', 'lastHeartbeatAt').textContent(), 'never');
  for (const column of ['requests5m', 'errorRate5m', 'backfillBacklog', 'spoolBytes']) {
    t.equal(await cell(page, 'edge-list', column).textContent(), '-', `${column}: nothing measured before a heartbeat`);
  }
  t.equal(await cell(page, 'edge-list', 'spoolBytes').getAttribute('title'), 'No heartbeat yet');
  t.equal(await cell(page, 'edge-list', 'configVersionsBehind').textContent(), '-', 'never enrolled: nothing to be behind on');
  await markDocument(page);

  // What the gateway writes on a heartbeat, and the enrollment's facts.
  await stack.pool.query(`update nodes set last_heartbeat_at = now(), enrolled_at = now(), version = '0.1.0',
      onboarding_stage = 'first-heartbeat',
      figures = '{"requests5m": 1200, "errors5m": 3, "spoolBytes": 4096, "backfillBacklog": 7, "clockSkewMs": 12}'
    where name = 'edge-list'`);
  await waitForText(page, '[data-testid="node-row-edge-list"] [data-col="requests5m"]', exactly('1200'));
  t.equal(await cell(page, 'edge-list', 'status').textContent(), 'Online', 'online after a heartbeat');
  t.equal(await cell(page, 'edge-list', 'version').textContent(), '0.1.0');
  t.equal(await cell(page, 'edge-list', 'errorRate5m').textContent(), '0.25%', '3 errors in 1200 requests');
  t.equal(await cell(page, 'edge-list', 'backfillBacklog').textContent(), '7');
  t.equal(await cell(page, 'edge-list', 'spoolBytes').textContent(), '4.0 KiB', 'the spool in human bytes');
  t.match(await cell(page, 'edge-list', 'lastHeartbeatAt').textContent(), /^\d+s ago$/, 'the heartbeat as an age');
  t.match(await cell(page, 'edge-list', 'lastHeartbeatAt').getAttribute('title'), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/, 'and as ISO on hover');
  t.match(await cell(page, 'edge-list', 'configVersionsBehind').textContent(), /^\d+$/, 'config versions behind, once enrolled');

  await stack.pool.query(`update nodes set figures = figures || '{"requests5m": 1500}' where name = 'edge-list'`);
  await waitForText(page, '[data-testid="node-row-edge-list"] [data-col="requests5m"]', exactly('1500'));
  t.equal(await cell(page, 'edge-list', 'errorRate5m').textContent(), '0.20%', 'every figure follows');
  t.ok(await sameDocument(page), 'the page was never reloaded');

  await page.getByTestId('node-row-edge-list').locator('[data-col="requests5m"]').click();
  await waitForHash(page, '#/nodes/edge-list');
  await detailField(page, 'requests5m').waitFor();
  t.equal(await detailField(page, 'requests5m').textContent(), '1500', 'a click on the row opens the node');
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test('at 1280 px the nodes table stays inside the page, scrolling sideways in its own box, and a long region wraps', async (t) => {
  const region = `region-${'x'.repeat(57)}`; // 64 characters, no space to break at
  await createNode('edge-wide', { region });
  const page = await loginPage(t, stack, browser);
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.getByTestId('node-row-edge-wide').waitFor();
  const layout = await page.evaluate(() => {
    const doc = globalThis as unknown as {
      document: {
        documentElement: { scrollWidth: number; clientWidth: number };
        querySelector(s: string): { scrollWidth: number; clientWidth: number; firstChild: unknown } | null;
        createRange(): { selectNodeContents(n: unknown): void; getClientRects(): { length: number } };
      };
      getComputedStyle(el: unknown): { overflowX: string };
    };
    const box = doc.document.querySelector('[data-testid="nodes-table-scroll"]');
    const regionCell = doc.document.querySelector('[data-testid="node-row-edge-wide"] [data-col="region"]');
    const lines = doc.document.createRange();
    if (regionCell) lines.selectNodeContents(regionCell.firstChild);
    return {
      pageScrollWidth: doc.document.documentElement.scrollWidth,
      pageWidth: doc.document.documentElement.clientWidth,
      boxOverflowX: box ? doc.getComputedStyle(box).overflowX : 'no box',
      regionLines: regionCell ? lines.getClientRects().length : 0,
    };
  });
  t.ok(layout.pageScrollWidth <= layout.pageWidth, `the page does not scroll sideways (${layout.pageScrollWidth} <= ${layout.pageWidth})`);
  t.equal(layout.boxOverflowX, 'auto', 'the table sits in a box that scrolls sideways');
  t.ok(layout.regionLines > 1, `the long region wraps (${layout.regionLines} lines)`);
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test('the detail shows every field and a config error prominently, updated without a reload', async (t) => {
  await createNode('edge-detail', { region: 'east', installDir: '/data/zenova-node', surfaces: ['model', 'tools'], spoolQuotaGb: 20 });
  const page = await loginPage(t, stack, browser, { hash: '#/nodes/edge-detail' });
  await detailField(page, 'id').waitFor();
  t.equal(await detailField(page, 'region').textContent(), 'east');
  t.equal(await detailField(page, 'surfaces').textContent(), 'Model gateway, Tool gateway (MCP)');
  t.equal(await detailField(page, 'installDir').textContent(), '/data/zenova-node');
  t.match(await detailField(page, 'spool').textContent(), /quota 20 GiB; when full: Reject new requests/);
  t.equal(await detailField(page, 'enrolledAt').textContent(), 'not yet');
  t.ok(await page.getByTestId('config-error').isHidden(), 'no config error box while there is none');
  await markDocument(page);

  await stack.pool.query(`update nodes set config_error = '{"version": 7, "code": "CONFIG_BAD_SIGNATURE",
    "message": "the bundle signature did not verify", "at": "2026-11-29T18:15:35.498Z"}' where name = 'edge-detail'`);
  const box = page.getByTestId('config-error');
  await box.waitFor();
  t.match(await box.textContent(), /Config version 7 was not applied: CONFIG_BAD_SIGNATURE/, 'the refusal heads the page');
  t.match(await box.textContent(), /the bundle signature did not verify/, 'with the node\'s message');
  t.match(await detailField(page, 'configError').textContent(), /^CONFIG_BAD_SIGNATURE for version 7/);
  t.ok(await sameDocument(page), 'the page was never reloaded');
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test('reissuing the install command shows a new one and the earlier token no longer enrolls', async (t) => {
  const first = await createNode('edge-reissue');
  const page = await loginPage(t, stack, browser, { hash: '#/nodes/edge-reissue' });
  await page.getByRole('button', { name: 'Reissue install command' }).click();
  const box = page.getByTestId('install-command');
  await box.waitFor();
  const token = tokenOf((await box.textContent()) ?? '');
  t.not(token, first.install.token, 'a new token');
  t.match(await page.getByTestId('command-warning').textContent(), /Any earlier unused install command of node edge-reissue no longer works/);

  const old = await enroll(first.install.token);
  t.not(old.statusCode, 200, `the earlier token is refused (answer ${old.statusCode})`);
  const fresh = await enroll(token);
  t.equal(fresh.statusCode, 200, 'the reissued token enrolls the node');

  await page.getByRole('button', { name: 'Issue reenroll command' }).click();
  await waitForText(page, '[data-testid="install-command"]', /--reenroll/);
  const reenrollToken = tokenOf((await box.textContent()) ?? '');
  t.match(await page.getByTestId('command-warning').textContent(), /shown only once/, 'the same warning');
  t.equal((await enroll(reenrollToken, 'reenroll')).statusCode, 200, 'the re-enroll token enrolls the node again');

  await page.getByRole('button', { name: 'Issue upgrade command' }).click();
  await waitForText(page, '[data-testid="install-command"]', /--upgrade$/);
  t.equal(await page.getByTestId('install-command').count(), 1, 'one command shown at a time');
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test('edit network sets the CA and address, and edit settings the surfaces and spool', async (t) => {
  await createNode('edge-edit');
  const ca = await createTestCa('Zenova Console Edit CA');
  const page = await loginPage(t, stack, browser, { hash: '#/nodes/edge-edit' });
  await page.getByRole('button', { name: 'Edit network' }).click();
  await page.getByLabel('Control-plane URL').fill('http://cp.example.com');
  await page.getByRole('button', { name: 'Save network' }).click();
  await waitForText(page, '#edit-cp-url-error', exactly('must start with https://'));
  await page.getByLabel('Control-plane URL').fill('https://cp2.example.com');
  await page.getByLabel('Node address').fill('edge-edit.example.net');
  await page.getByLabel('Control-plane CA (PEM, optional)').fill(ca.certPem);
  await page.getByRole('button', { name: 'Save network' }).click();
  await waitForText(page, '[data-field="hasCa"]', /^own CA/);
  t.match((await getNode('edge-edit')).node, { address: 'edge-edit.example.net', controlPlaneUrl: 'https://cp2.example.com', hasCa: true },
    'the API has the new network');
  t.equal(await detailField(page, 'address').textContent(), 'edge-edit.example.net', 'the page shows it');

  // With a CA set, the form keeps it unless asked; asked with a blank field, it removes it.
  await page.getByRole('button', { name: 'Edit network' }).click();
  await page.getByLabel('Replace or remove the current CA').check();
  await page.getByRole('button', { name: 'Save network' }).click();
  await waitForText(page, '[data-field="hasCa"]', /^none/);
  t.equal((await getNode('edge-edit')).node.hasCa, false, 'a blank CA removed it');

  await page.getByRole('button', { name: 'Edit settings' }).click();
  await page.getByLabel('Tool gateway (MCP)').check();
  await page.getByLabel('Spool quota (GiB)').fill('30');
  await page.getByLabel('Drop request bodies, keep metering').check();
  await page.getByRole('button', { name: 'Save settings' }).click();
  await waitForText(page, '[data-field="spool"]', /30 GiB/);
  t.match((await getNode('edge-edit')).node, { surfaces: ['model', 'tools'], spoolQuotaGb: 30, spoolFullPolicy: 'metering-only' },
    'the API has the new settings');
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test('the spool quota is labelled in GiB, as everywhere else, in the Add node wizard and in Edit settings', async (t) => {
  await createNode('edge-gib', { spoolQuotaGb: 12 });
  const page = await loginPage(t, stack, browser, { hash: '#/add-node' });
  await page.getByLabel('Node name').fill('edge-gib-new');
  await page.getByRole('button', { name: 'Next' }).click();
  await page.getByLabel('Node address').fill('edge.example.com');
  await page.getByLabel('Control-plane URL').fill('https://cp.example.com');
  await page.getByRole('button', { name: 'Next' }).click();
  t.equal(await page.locator('label[for="spool-quota"]').textContent(), 'Spool quota (GiB)', 'the wizard\'s step 3');
  t.equal(await page.getByLabel('Spool quota (GiB)').inputValue(), '10', 'its default');

  await page.goto(`${stack.baseUrl}/console/#/nodes/edge-gib`);
  await page.getByRole('button', { name: 'Edit settings' }).click();
  t.equal(await page.locator('label[for="edit-spool-quota"]').textContent(), 'Spool quota (GiB)', 'Edit settings');
  t.equal(await page.getByLabel('Spool quota (GiB)').inputValue(), '12', 'the node\'s quota');
  t.match(await detailField(page, 'spool').textContent(), /quota 12 GiB/, 'as the detail writes it');
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test('deleting needs the node\'s name typed and removes the node', async (t) => {
  await createNode('edge-delete');
  const page = await loginPage(t, stack, browser, { hash: '#/nodes/edge-delete' });
  const button = page.getByRole('button', { name: 'Delete node' });
  await button.waitFor();
  t.ok(await button.isDisabled(), 'disabled before the name is typed');
  await page.getByLabel('Type the node\'s name').fill('edge-delet');
  t.ok(await button.isDisabled(), 'disabled for another name');
  await page.getByLabel('Type the node\'s name').fill('edge-delete');
  t.ok(await button.isEnabled(), 'enabled for the node\'s name');
  t.equal((await getNode('edge-delete')).status, 200, 'nothing deleted before the click');
  await button.click();
  await waitForHash(page, '#/nodes');
  t.equal((await getNode('edge-delete')).status, 404, 'the node is gone');
  await page.getByTestId('node-row-edge-list').waitFor();
  t.equal(await page.getByTestId('node-row-edge-delete').count(), 0, 'and no longer listed');
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test('deleting the central node shows the API\'s refusal', async (t) => {
  // Refused once it enrolled (one created and never enrolled runs nowhere, and is deleted like any node).
  const central = await createNode('office-primary');
  t.equal((await enroll(central.install.token)).statusCode, 200, 'office-primary enrolled');
  const refused = await stack.app.inject({ method: 'DELETE', url: '/api/v1/nodes/office-primary', headers: bearer });
  t.equal(refused.statusCode, 409);
  const message = refused.json<{ error: { message: string } }>().error.message;
  const page = await loginPage(t, stack, browser, { hash: '#/nodes/office-primary' });
  await page.getByLabel('Type the node\'s name').fill('office-primary');
  await page.getByRole('button', { name: 'Delete node' }).click();
  const banner = page.getByTestId('error');
  await banner.waitFor();
  t.equal(await banner.textContent(), message, 'the API\'s 409 message, as it wrote it');
  t.equal(await page.evaluate('location.hash'), '#/nodes/office-primary', 'still on the node');
  t.equal((await getNode('office-primary')).status, 200, 'the node stays');
  t.same(page.problems, [], 'no console errors or CSP violations');
});
