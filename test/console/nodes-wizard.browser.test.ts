/**
 * Gateway › Nodes › Add node in real headless Chromium: the four-step wizard creates the node the
 * API then shows with the values typed and a one-time install command whose token enrolls; bad
 * values are refused inline before anything is sent, and what the API refuses is shown in its
 * own words; the onboarding progress follows the node (enrollment, first heartbeat, config
 * synced) without a reload, and stops asking once the page is left.
 */
import { readFileSync } from 'node:fs';
import t from 'tap';
import type { Page } from 'playwright-core';
import { FACTS, bearer, validNodeBody } from '../control-plane/nodes-harness.js';
import { createTestCa } from '../fixtures/tls.js';
import { launchChromium, loginPage, startConsoleStack } from './browser-harness.js';

const browser = await launchChromium(t);
const stack = await startConsoleStack(t);

interface WizardValues {
  name: string;
  region?: string;
  tools?: boolean;
  installDir?: string;
  address?: string;
  controlPlaneUrl?: string;
  caPem?: string;
  spoolQuotaGb?: string;
  meteringOnly?: boolean;
  replicas?: string;
}

interface NodeView {
  id: string; name: string; region: string | null; surfaces: string[]; installDir: string | null; address: string;
  controlPlaneUrl: string; hasCa: boolean; spoolQuotaGb: number; spoolFullPolicy: string; replicas: number;
  onboardingStage: string | null;
}

const getNode = async (name: string): Promise<{ status: number; node: NodeView }> => {
  const res = await stack.app.inject({ method: 'GET', url: `/api/v1/nodes/${name}`, headers: bearer });
  return { status: res.statusCode, node: res.json<NodeView>() };
};

const enroll = async (token: string) => stack.app.inject({
  method: 'POST', url: '/api/enroll', payload: { token, mode: 'install', facts: FACTS },
});

/** Fills all four steps (each Next checked by the page) and stops on the review step. */
async function fillWizard(page: Page, v: WizardValues): Promise<void> {
  await page.getByLabel('Node name').fill(v.name);
  if (v.region !== undefined) await page.getByLabel('Region (optional)').fill(v.region);
  if (v.tools) await page.getByLabel('Tool gateway (MCP)').check();
  if (v.installDir !== undefined) await page.getByLabel('Install directory (optional)').fill(v.installDir);
  await page.getByRole('button', { name: 'Next' }).click();
  await page.getByLabel('Node address').fill(v.address ?? 'edge.example.com');
  await page.getByLabel('Control-plane URL').fill(v.controlPlaneUrl ?? 'https://cp.example.com');
  if (v.caPem !== undefined) await page.getByLabel('Control-plane CA (optional)').fill(v.caPem);
  await page.getByRole('button', { name: 'Next' }).click();
  if (v.spoolQuotaGb !== undefined) await page.getByLabel('Spool quota (GiB)').fill(v.spoolQuotaGb);
  if (v.meteringOnly) await page.getByLabel('Drop request bodies, keep metering').check();
  await page.getByRole('button', { name: 'Next' }).click();
  if (v.replicas !== undefined) await page.getByLabel('Replicas').fill(v.replicas);
  await page.getByRole('button', { name: 'Create and generate install command' }).waitFor();
}

/** The wizard through to its one-time command; answers the command's text and token. */
async function createThroughWizard(page: Page, v: WizardValues): Promise<{ command: string; token: string }> {
  await fillWizard(page, v);
  await page.getByRole('button', { name: 'Create and generate install command' }).click();
  const command = (await page.getByTestId('install-command').textContent()) ?? '';
  const token = /^printf '%s\\n' (\S+) \| sudo /.exec(command)?.[1];
  if (!token) throw new Error(`no piped token in the command shown: ${command}`);
  return { command, token };
}

/** POSTs to the create route the page sent (none expected when the page refuses first). */
function watchCreates(page: Page): string[] {
  const posts: string[] = [];
  page.on('request', (req) => {
    if (req.method() === 'POST' && new URL(req.url()).pathname === '/api/v1/nodes') posts.push(req.url());
  });
  return posts;
}

const stepShown = (page: Page, step: number) => page.locator(`fieldset[data-step="${step}"]`).isVisible();

/** Waits until the element's text is exactly `text` (a locator's wait: the console's CSP refuses the eval a polled string predicate needs). */
const waitForText = (page: Page, selector: string, text: string) =>
  page.locator(selector, { hasText: new RegExp(`^${text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`) }).waitFor();

t.test('the wizard creates the node with the values typed and shows a command whose token enrolls it', async (t) => {
  const page = await loginPage(t, stack, browser, { hash: '#/add-node' });
  const ca = await createTestCa('Zenova Console Wizard CA');
  const { command, token } = await createThroughWizard(page, {
    name: 'edge-wizard-1', region: 'east', tools: true, installDir: '/data/zenova-node/',
    address: 'Edge-1.Example.com:8443', controlPlaneUrl: 'https://cp.example.test:9443', caPem: ca.certPem,
    spoolQuotaGb: '25', meteringOnly: true, replicas: '2',
  });

  const { status, node } = await getNode('edge-wizard-1');
  t.equal(status, 200, 'the API has the node');
  t.match(node, {
    name: 'edge-wizard-1', region: 'east', surfaces: ['model', 'tools'], installDir: '/data/zenova-node',
    address: 'edge-1.example.com:8443', controlPlaneUrl: 'https://cp.example.test:9443', hasCa: true,
    spoolQuotaGb: 25, spoolFullPolicy: 'metering-only', replicas: 2, onboardingStage: null,
  }, 'with every value typed (as the API stores them)');
  t.equal(command,
    `printf '%s\\n' ${token} | sudo ./zenova install node --package zenova-node.zpkg --control-plane https://cp.example.test:9443 --token-file - `
    + '--ca-file zenova-control-plane-ca.pem --install-dir /data/zenova-node',
    'the command is the API\'s, whole');

  // Seed 004 §9.4 step 1: the pre-check, with the command's --ca-file and --install-dir, no token, shown first.
  const check = (await page.getByTestId('check-command').textContent()) ?? '';
  t.equal(check,
    'sudo ./zenova install node --package zenova-node.zpkg --control-plane https://cp.example.test:9443 '
    + '--ca-file zenova-control-plane-ca.pem --install-dir /data/zenova-node --check-only',
    'the pre-check is shown with the command\'s CA file and install dir, and no token');
  t.ok(await page.getByRole('heading', { name: 'First: the pre-check (spends no token)' }).isVisible(), 'labelled as the pre-check that spends no token');
  const boxes = await page.locator('pre.command-box').allTextContents();
  t.ok(boxes.indexOf(check) !== -1 && boxes.indexOf(check) < boxes.indexOf(command), 'the pre-check is shown before the install command');
  t.match((await page.getByTestId('check-command-hint').textContent()) ?? '', /uses no token and writes nothing.*do not run the install command until it passes/,
    'says it spends no token and to run the command only once it passes');

  const tokenHint = (await page.getByTestId('command-token-hint').textContent()) ?? '';
  t.match(tokenHint, /pipes the token to the installer.*does not show in the process list.*--token-file <file>/,
    'says the token is piped in, off the process list, and how to use a file instead');
  t.notMatch(tokenHint, /--token </, 'no longer tells to replace a --token the command does not have');
  const warning = (await page.getByTestId('command-warning').textContent()) ?? '';
  t.match(warning, /shown only once/, 'says the command is shown once');
  t.match(warning, /do not send it over chat, e-mail or tickets/, 'says not to pass the token around');

  const [download] = await Promise.all([
    page.waitForEvent('download'),
    page.getByRole('link', { name: 'Download zenova-control-plane-ca.pem' }).click(),
  ]);
  t.equal(download.suggestedFilename(), 'zenova-control-plane-ca.pem', 'the CA downloads under the name the command uses');
  t.equal(readFileSync(await download.path(), 'utf8').trim(), ca.certPem.trim(), 'holding the CA given');

  await page.context().grantPermissions(['clipboard-read', 'clipboard-write']);
  await page.getByRole('button', { name: 'Copy command' }).click();
  await page.getByText('Copied.', { exact: false }).waitFor();
  const copied = await page.evaluate(() => (globalThis as unknown as { navigator: { clipboard: { readText(): Promise<string> } } }).navigator.clipboard.readText());
  t.equal(copied, command, 'the copy button copies the whole command');

  const enrolled = await enroll(token);
  t.equal(enrolled.statusCode, 200, `the token in the command enrolls the node (answer ${enrolled.statusCode})`);
  t.equal(enrolled.json<{ replicas: number }>().replicas, 2, 'with the replicas typed');
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test('a bad name or install dir is refused at its field before anything is sent', async (t) => {
  const page = await loginPage(t, stack, browser, { hash: '#/add-node' });
  const posts = watchCreates(page);
  const nameError = page.locator('#node-name-error');

  await page.getByLabel('Node name').fill('Edge_1');
  await page.getByRole('button', { name: 'Next' }).click();
  await nameError.waitFor();
  t.equal(await nameError.textContent(), 'must be 2 to 31 characters of lowercase letters, digits and hyphens', 'the API\'s rule, at the field');
  t.equal(await page.getByLabel('Node name').getAttribute('aria-invalid'), 'true', 'the field is marked');
  t.ok(await stepShown(page, 1), 'still on step 1');
  t.notOk(await stepShown(page, 2), 'step 2 not shown');

  await page.getByLabel('Node name').fill('-edge');
  await page.getByRole('button', { name: 'Next' }).click();
  await waitForText(page, '#node-name-error', 'must begin and end with a letter or digit');
  t.ok(await stepShown(page, 1), 'a name starting with "-" is refused too');

  await page.getByLabel('Node name').fill('edge-inline');
  await page.getByLabel('Install directory (optional)').fill('/tmp/zenova-node');
  await page.getByRole('button', { name: 'Next' }).click();
  await waitForText(page, '#install-dir-error', 'must not be under /tmp');
  t.ok(await nameError.isHidden(), 'the corrected name is no longer marked');
  t.ok(await stepShown(page, 1), 'an install dir under /tmp keeps the wizard on step 1');

  await page.getByLabel('Install directory (optional)').fill('');
  await page.getByRole('button', { name: 'Next' }).click();
  await page.getByLabel('Node address').waitFor();
  await page.getByLabel('Control-plane URL').fill('http://cp.example.com');
  await page.getByRole('button', { name: 'Next' }).click();
  await waitForText(page, '#control-plane-url-error', 'must start with https://');
  t.ok(await stepShown(page, 2), 'a plain-HTTP control-plane URL keeps the wizard on step 2');

  t.same(posts, [], 'nothing was sent to the API');
  t.equal((await getNode('edge-inline')).status, 404, 'no node was created');
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test('an install dir pasted with spaces around it is taken, as the API takes it', async (t) => {
  const page = await loginPage(t, stack, browser, { hash: '#/add-node' });
  await page.getByLabel('Node name').fill('edge-padded-dir');
  await page.getByLabel('Install directory (optional)').fill('  /data/zenova-padded ');
  await page.getByLabel('Node name').focus(); // leaves the field: its blur check runs
  t.ok(await page.locator('#install-dir-error').isHidden(), 'no problem shown on leaving the field');
  await page.getByRole('button', { name: 'Next' }).click();
  await page.getByLabel('Node address').waitFor();
  t.ok(await stepShown(page, 2), 'Next moved on to step 2');
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test('what the API refuses is shown in the API\'s words and marks the refused field', async (t) => {
  const created = await stack.app.inject({ method: 'POST', url: '/api/v1/nodes', headers: bearer, payload: validNodeBody({ name: 'edge-taken' }) });
  t.equal(created.statusCode, 201);
  const apiAnswer = await stack.app.inject({ method: 'POST', url: '/api/v1/nodes', headers: bearer, payload: validNodeBody({ name: 'edge-taken' }) });
  t.equal(apiAnswer.statusCode, 409);
  const takenMessage = apiAnswer.json<{ error: { message: string } }>().error.message;

  const page = await loginPage(t, stack, browser, { hash: '#/add-node' });
  const posts = watchCreates(page);
  await fillWizard(page, { name: 'edge-taken' });
  await page.getByRole('button', { name: 'Create and generate install command' }).click();
  const banner = page.getByTestId('error');
  await banner.waitFor();
  t.equal(await banner.textContent(), takenMessage, 'a taken name: the API\'s 409 message, as it wrote it');
  t.ok(await stepShown(page, 1), 'the wizard went back to the name\'s step');
  t.equal(await page.locator('#node-name-error').textContent(), "a node named 'edge-taken' already exists", 'the name is marked with its part of the message');

  // A PEM block the page cannot tell from a certificate; only the API parses it.
  await page.getByLabel('Node name').fill('edge-bad-ca');
  await page.getByRole('button', { name: 'Next' }).click();
  await page.getByLabel('Control-plane CA (optional)').fill('-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n');
  await page.getByRole('button', { name: 'Next' }).click();
  await page.getByRole('button', { name: 'Next' }).click();
  await page.getByRole('button', { name: 'Create and generate install command' }).click();
  await waitForText(page, '[data-testid="error"]', 'caPem: must parse as an X.509 certificate');
  t.equal(await banner.textContent(), 'caPem: must parse as an X.509 certificate', 'an invalid CA: the API\'s 400 message, as it wrote it');
  t.ok(await stepShown(page, 2), 'the wizard went to the CA\'s step');
  t.equal(await page.locator('#ca-pem-error').textContent(), 'must parse as an X.509 certificate');
  t.equal(posts.length, 2, 'both were sent and refused by the API');
  t.equal((await getNode('edge-bad-ca')).status, 404, 'no node was created');
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test('onboarding progress follows enrollment, first heartbeat and config sync without a reload', async (t) => {
  const page = await loginPage(t, stack, browser, { hash: '#/add-node' });
  const { token } = await createThroughWizard(page, { name: 'edge-onboard' });
  const step = (stage: string, state: string) => page.locator(`[data-testid="onboarding-${stage}"][data-state="${state}"]`);
  await step('registered', 'current').waitFor();
  t.ok(await step('first-heartbeat', 'waiting').isVisible(), 'nothing reached before the node enrolls');
  // Set on this document: a reload would lose it.
  await page.evaluate('window.sameDocument = true');

  const enrolled = await enroll(token);
  t.equal(enrolled.statusCode, 200, 'the node enrolls with the command\'s token');
  await step('registered', 'done').waitFor();
  t.ok(await step('first-heartbeat', 'current').isVisible(), 'registered: the first heartbeat is next');

  // What the gateway writes on the node's first heartbeat and on its first config ack.
  await stack.pool.query(`update nodes set last_heartbeat_at = now(), onboarding_stage = 'first-heartbeat' where name = 'edge-onboard'`);
  await step('first-heartbeat', 'done').waitFor();
  t.ok(await step('config-synced', 'current').isVisible(), 'the config sync is next');

  await stack.pool.query(`update nodes set onboarding_stage = 'config-synced', config_synced_at = now(),
    applied_config_version = (select max(version) from config_changes) where name = 'edge-onboard'`);
  await step('config-synced', 'done').waitFor();
  t.equal(await page.evaluate('window.sameDocument === true'), true, 'the page was never reloaded');
  t.ok(await page.getByTestId('install-command').isVisible(), 'the command stays shown meanwhile');
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test('leaving the page stops the onboarding polling', async (t) => {
  const page = await loginPage(t, stack, browser, { hash: '#/add-node' });
  await createThroughWizard(page, { name: 'edge-leave' });
  const polls: number[] = [];
  const lists: number[] = [];
  page.on('request', (req) => {
    const path = new URL(req.url()).pathname;
    if (path === '/api/v1/nodes/edge-leave') polls.push(Date.now());
    if (path === '/api/v1/nodes' && req.method() === 'GET') lists.push(Date.now());
  });
  await page.locator('[data-testid="onboarding-registered"][data-state="current"]').waitFor();
  // Polling every 2 s: one more poll shows it runs.
  const started = polls.length;
  await page.waitForRequest((req) => new URL(req.url()).pathname === '/api/v1/nodes/edge-leave');
  t.ok(polls.length > started, 'the progress polls while shown');

  await page.getByRole('link', { name: 'Gateway › Nodes' }).click();
  await page.getByTestId('node-row-edge-leave').waitFor();
  const left = Date.now();
  // The list refreshes every 5 s: its second load comes after two and a half polling periods.
  await page.waitForRequest((req) => new URL(req.url()).pathname === '/api/v1/nodes' && req.method() === 'GET' && Date.now() - left > 1000,
    { timeout: 15_000 });
  t.same(polls.filter((at) => at > left), [], 'no poll of the node after the page was left');
  t.ok(lists.length >= 2, 'the list itself refreshed meanwhile');
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test('over HTTPS the control-plane URL defaults to the console\'s own address, which the API takes', async (t) => {
  const https = await startConsoleStack(t, { https: true });
  t.match(https.baseUrl, /^https:\/\//);
  const page = await loginPage(t, https, browser, { hash: '#/add-node' });
  await page.getByLabel('Node name').fill('edge-https');
  await page.getByRole('button', { name: 'Next' }).click();
  t.equal(await page.getByLabel('Control-plane URL').inputValue(), https.baseUrl, 'prefilled with the console\'s origin');
  await page.getByLabel('Node address').fill('edge-https.example.com');
  await page.getByRole('button', { name: 'Next' }).click();
  await page.getByRole('button', { name: 'Next' }).click();
  await page.getByRole('button', { name: 'Create and generate install command' }).click();
  await page.getByTestId('install-command').waitFor();
  const res = await https.app.inject({ method: 'GET', url: '/api/v1/nodes/edge-https', headers: bearer });
  t.equal(res.json<NodeView>().controlPlaneUrl, https.baseUrl, 'the node calls back to the console\'s address');
  t.same(page.problems, [], 'no console errors or CSP violations');
});
