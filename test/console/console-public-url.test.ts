/**
 * ZENOVA_PUBLIC_URL reaches the console and the operator: the login and session answers carry it
 * (null when unset), so the Add Node wizard can offer it as the control-plane URL, and the control
 * plane's ready line names it and the console's address under it.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { testDatabase } from '../fixtures/postgres.js';
import { parseJsonLines, startProcess, tsEntry } from '../fixtures/processes.js';
import { ADMIN_TOKEN } from '../control-plane/helpers.js';
import { startConsoleStack } from './browser-harness.js';
import type { ConsoleStack } from './browser-harness.js';

const PUBLIC_URL = 'https://zenova.example.com';

interface SessionAnswer { csrfToken: string; expiresAt: string; publicUrl: string | null }

/** Logs in, then asks for the session with the cookie: both answers. */
async function loginAndSession(stack: ConsoleStack): Promise<{ login: SessionAnswer; session: SessionAnswer }> {
  const login = await stack.app.inject({ method: 'POST', url: '/api/console/login', payload: { adminToken: stack.adminToken } });
  if (login.statusCode !== 200) throw new Error(`login failed: ${login.statusCode} ${login.body}`);
  const setCookie = String(login.headers['set-cookie']);
  const cookie = /^zenova_console=[^;]*/.exec(setCookie)![0];
  const session = await stack.app.inject({ method: 'GET', url: '/api/console/session', headers: { cookie } });
  if (session.statusCode !== 200) throw new Error(`session failed: ${session.statusCode} ${session.body}`);
  return { login: login.json<SessionAnswer>(), session: session.json<SessionAnswer>() };
}

t.test('the login and session answers carry ZENOVA_PUBLIC_URL when it is set', async (t) => {
  const stack = await startConsoleStack(t, { settings: { publicUrl: PUBLIC_URL } });
  const { login, session } = await loginAndSession(stack);
  t.equal(login.publicUrl, PUBLIC_URL, 'the login answer');
  t.equal(session.publicUrl, PUBLIC_URL, 'the session answer');
  t.same(Object.keys(session).sort(), ['csrfToken', 'expiresAt', 'publicUrl'], 'nothing else was added');
});

t.test('the login and session answers carry publicUrl null when ZENOVA_PUBLIC_URL is unset', async (t) => {
  const stack = await startConsoleStack(t);
  const { login, session } = await loginAndSession(stack);
  t.equal(login.publicUrl, null, 'the login answer');
  t.equal(session.publicUrl, null, 'the session answer');
});

t.test('the control plane\'s ready line names ZENOVA_PUBLIC_URL and the console under it', async (t) => {
  const db = await testDatabase(t);
  const dir = mkdtempSync(path.join(os.tmpdir(), 'zenova-public-url-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const entry = tsEntry('control-plane/src/main.ts');
  // The test runner's own ZENOVA_* variables must not leak into the child.
  const clean = Object.fromEntries(Object.keys(process.env).filter((k) => k.startsWith('ZENOVA_')).map((k) => [k, undefined]));
  const proc = await startProcess({
    name: 'zenova-control',
    command: entry.command,
    args: entry.args,
    env: {
      ...clean,
      ZENOVA_DATABASE_URL: db.url,
      ZENOVA_ADMIN_TOKEN: ADMIN_TOKEN,
      ZENOVA_LISTEN: '127.0.0.1:0',
      ZENOVA_SECRET_ENC_KEY: randomBytes(32).toString('base64'),
      ZENOVA_GATEWAY_LISTEN: '127.0.0.1:0',
      ZENOVA_GATEWAY_TLS_DIR: path.join(dir, 'gateway-tls'),
      ZENOVA_PUBLIC_URL: `${PUBLIC_URL}/`,
    },
    readyLine: /control plane listening/,
    t,
  });
  const ready = parseJsonLines(proc.output()).find((l) => l.msg === 'control plane listening');
  t.match(String(ready?.url), /^http:\/\/127\.0\.0\.1:\d+$/, 'still the bound address');
  t.equal(ready?.publicUrl, PUBLIC_URL, 'the public URL, as normalised');
  t.equal(ready?.consoleUrl, `${PUBLIC_URL}/console/`, 'the console\'s public address');
  t.equal(await proc.stop('SIGTERM'), 0);
});
