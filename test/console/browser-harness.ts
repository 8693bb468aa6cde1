// Shared set-up for the console tests: a control plane on a fresh migrated PostgreSQL database,
// listening on loopback (HTTP, or HTTPS with a test CA), a real headless Chromium, and a page
// logged in through the real login form.
//
//   const browser = await launchChromium(t);          // first, with the file's root t
//   const stack = await startConsoleStack(t);
//   t.test('…', async (t) => { const page = await loginPage(t, stack, browser); … });
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import type pg from 'pg';
import { chromium } from 'playwright-core';
import type { Browser, BrowserContext, ConsoleMessage, Page } from 'playwright-core';
import tap from 'tap';
import { buildApp } from '../../control-plane/src/app.js';
import { migrate } from '../../control-plane/src/db/migrate.js';
import { createPool } from '../../control-plane/src/db/pool.js';
import type { EnrollmentDeps } from '../../control-plane/src/nodes/enrollment.js';
import type { NodeSettings, Settings } from '../../control-plane/src/settings.js';
import { listenConsole } from '../../control-plane/src/tls/console-server.js';
import { startPostgres } from '../fixtures/postgres.js';
import type { TestDatabase } from '../fixtures/postgres.js';
import { createTestCa, issueServerCert } from '../fixtures/tls.js';
import { captureLogger, freshDatabase, testSettings } from '../control-plane/helpers.js';
import type { CapturedLogger } from '../control-plane/helpers.js';
import { stubEnrollment } from '../control-plane/nodes-harness.js';
import { runEach } from '../fixtures/teardown-steps.js';

export const CHROMIUM_PATH = '/usr/bin/chromium';
export const CHROMIUM_ARGS = [
  '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
  '--disable-component-update', '--disable-sync',
];

interface HasTeardown { teardown(fn: () => unknown): void }

export interface ConsoleStackOptions {
  /** Serve HTTPS with a certificate from a fresh test CA (the session cookie is then Secure). */
  https?: boolean;
  /** Node settings over the product's defaults (offline timeout, token TTL, …). */
  nodes?: Partial<NodeSettings>;
  /** Any other settings over testSettings(). */
  settings?: Partial<Settings>;
  /** The stub enrollment dependency by default; null leaves it out (enrollment answers 503). */
  enrollment?: EnrollmentDeps | null;
}

export interface ConsoleStack {
  /** http(s)://127.0.0.1:PORT, no trailing slash; the console is at `${baseUrl}/console/`. */
  baseUrl: string;
  adminToken: string;
  /** A pool on the stack's database (the app has its own). */
  pool: pg.Pool;
  app: FastifyInstance;
  settings: Settings;
  /** The control plane's log lines. */
  log: CapturedLogger;
  /** The test CA's certificate when `https` was asked for. */
  caPem: string | undefined;
  databaseUrl: string;
}

// One PostgreSQL server per test process; each stack gets its own database in it.
let server: Promise<TestDatabase> | undefined;
function sharedServer(): Promise<TestDatabase> {
  if (!server) {
    server = startPostgres();
    const started = server;
    // Never rejects: a rejected teardown makes tap skip the rest (Chromium's close among them).
    tap.teardown(() => runEach('the shared PostgreSQL', async () => (await started).stop()));
  }
  return server;
}

/** A control plane for the console tests, torn down (app, pools, database) with `t`. */
export async function startConsoleStack(t: HasTeardown, opts: ConsoleStackOptions = {}): Promise<ConsoleStack> {
  const db = await sharedServer();
  // The database is dropped after the app and pools are closed, not before: one teardown for all.
  const dropLater: Array<() => unknown> = [];
  const databaseUrl = await freshDatabase({ teardown: (fn) => dropLater.push(fn) }, db.url);
  const cleanups: Array<() => unknown> = [];
  // Every step runs even if one fails, and the teardown never rejects (tap would skip the rest).
  t.teardown(() => runEach('the console stack', ...cleanups.reverse(), ...dropLater));

  let tls: { certPem: string; keyPem: string } | undefined;
  let caPem: string | undefined;
  const base = testSettings(databaseUrl);
  let settings: Settings = { ...base, ...opts.settings, nodes: { ...base.nodes, ...opts.nodes } };
  if (opts.https) {
    const ca = await createTestCa();
    const cert = await issueServerCert(ca, { dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'] });
    tls = cert;
    caPem = ca.certPem;
    // Settings name files (main.ts reads them); the app only needs to know TLS is on.
    const dir = mkdtempSync(path.join(os.tmpdir(), 'zenova-console-tls-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const certFile = path.join(dir, 'tls.crt');
    const keyFile = path.join(dir, 'tls.key');
    writeFileSync(certFile, cert.certPem);
    writeFileSync(keyFile, cert.keyPem, { mode: 0o600 });
    settings = { ...settings, tls: { certFile, keyFile } };
  }

  const pool = createPool({ databaseUrl });
  cleanups.push(() => pool.end());
  await migrate(pool);
  const log = captureLogger(settings);
  const appPool = createPool({ databaseUrl, logger: log.logger });
  cleanups.push(() => appPool.end());
  const app = await buildApp({
    settings,
    pool: appPool,
    logger: log.logger,
    ...(opts.enrollment === null ? {} : { enrollment: opts.enrollment ?? stubEnrollment }),
  });
  const listener = await listenConsole(app, { host: '127.0.0.1', port: 0 }, tls);
  cleanups.push(() => listener.close());
  return { baseUrl: listener.url, adminToken: settings.adminToken, pool, app, settings, log, caPem, databaseUrl };
}

/**
 * Debian's Chromium, headless, closed at `t`'s teardown. Without /usr/bin/chromium this throws,
 * unless ZENOVA_SKIP_BROWSER_TESTS=1: then the whole file is reported skipped and ends here, so
 * call it first, with the file's root `t`.
 */
export async function launchChromium(t: HasTeardown & { plan(n: number, reason?: string): void }): Promise<Browser> {
  if (!existsSync(CHROMIUM_PATH)) {
    const reason = `${CHROMIUM_PATH} is missing (install Debian's chromium: apt-get install chromium)`;
    if (process.env.ZENOVA_SKIP_BROWSER_TESTS === '1') {
      t.plan(0, `browser test skipped: ${reason}; ZENOVA_SKIP_BROWSER_TESTS=1`);
      // Nothing after this in the file may run: there is no browser to run it with.
      process.exit(0);
    }
    throw new Error(`the console's browser tests need a real Chromium: ${reason}, or set ZENOVA_SKIP_BROWSER_TESTS=1 to skip them`);
  }
  const browser = await chromium.launch({ executablePath: CHROMIUM_PATH, headless: true, args: CHROMIUM_ARGS });
  t.teardown(() => browser.close());
  return browser;
}

/** A fresh browser context (no cookies) for the stack, closed at `t`'s teardown. */
export async function newConsoleContext(t: HasTeardown, stack: ConsoleStack, browser: Browser): Promise<BrowserContext> {
  // The test CA is not in Chromium's trust store; the stack's certificate is what it is testing.
  const context = await browser.newContext({ ignoreHTTPSErrors: stack.caPem !== undefined, baseURL: stack.baseUrl });
  t.teardown(() => context.close());
  return context;
}

export interface PageProblems {
  /** Console errors, CSP violations, uncaught exceptions: each as one line of text. */
  readonly list: string[];
}

/**
 * Collects what must never happen on a console page: console errors (CSP violations are logged
 * as such) and uncaught exceptions. A 4xx/5xx answer of the API is the UI's to show, not a
 * problem, so Chromium's "Failed to load resource" line for an /api/ URL is left out; the same
 * line for a console asset (a missing module) counts.
 */
export function watchPageProblems(page: Page): PageProblems {
  const list: string[] = [];
  page.on('console', (msg: ConsoleMessage) => {
    if (msg.type() !== 'error') return;
    const text = msg.text();
    const url = msg.location().url;
    if (text.startsWith('Failed to load resource') && /\/api\//.test(url)) return;
    list.push(`console error: ${text}${url ? ` (${url})` : ''}`);
  });
  page.on('pageerror', (err) => list.push(`page error: ${err.message}`));
  return { list };
}

export interface LoggedInPage extends Page {
  /** Problems seen on the page since it opened (see watchPageProblems). */
  problems: string[];
}

/** Logs in through the real login form with the admin token; answers once the shell shows. */
export async function loginPage(t: HasTeardown, stack: ConsoleStack, browser: Browser, opts: { hash?: string } = {}): Promise<LoggedInPage> {
  const context = await newConsoleContext(t, stack, browser);
  const page = await context.newPage();
  const problems = watchPageProblems(page);
  await page.goto(`${stack.baseUrl}/console/${opts.hash ?? ''}`);
  await page.getByLabel('Admin token').fill(stack.adminToken);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.getByRole('link', { name: 'Gateway › Nodes' }).waitFor();
  return Object.assign(page, { problems: problems.list });
}
