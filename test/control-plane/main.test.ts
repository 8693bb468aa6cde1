import t from 'tap';
import { testDatabase } from '../fixtures/postgres.js';
import { parseJsonLines, startProcess, tsEntry } from '../fixtures/processes.js';
import { ADMIN_TOKEN, closedPort } from './helpers.js';

const entry = tsEntry('control-plane/src/main.ts');

// The test runner's own ZENOVA_* variables must not leak into the child.
const CLEAN_ENV: NodeJS.ProcessEnv = Object.fromEntries(
  Object.keys(process.env).filter((k) => k.startsWith('ZENOVA_')).map((k) => [k, undefined]),
);

async function run(name: string, env: NodeJS.ProcessEnv, args: string[] = []): Promise<{ code: number | null; output: string }> {
  const proc = await startProcess({ name, command: entry.command, args: [...entry.args, ...args], env: { ...CLEAN_ENV, ...env }, t });
  const { code } = await proc.exited;
  return { code, output: proc.output() };
}

t.test('--help prints usage with every environment variable and exits 0', async (t) => {
  const { code, output } = await run('help', {}, ['--help']);
  t.equal(code, 0);
  t.match(output, /Usage: zenova-control/);
  for (const name of ['ZENOVA_DATABASE_URL', 'ZENOVA_LISTEN', 'ZENOVA_ADMIN_TOKEN', 'ZENOVA_SECRET_ENC_KEY', 'ZENOVA_LOG_LEVEL', 'ZENOVA_PUBLIC_URL']) {
    t.match(output, name);
  }
});

t.test('a bad ZENOVA_LISTEN stops start-up with exit 2 naming the variable, without a stack trace', async (t) => {
  const { code, output } = await run('bad-listen', {
    ZENOVA_DATABASE_URL: 'postgres://zenova@127.0.0.1:1/zenova',
    ZENOVA_ADMIN_TOKEN: ADMIN_TOKEN,
    ZENOVA_LISTEN: 'abc',
  });
  t.equal(code, 2);
  t.match(output, /^zenova-control: invalid settings:$/m);
  t.match(output, /ZENOVA_LISTEN: expected HOST:PORT.*got 'abc'/);
  t.notMatch(output, /^\s+at /m, 'no stack trace');
});

t.test('missing required settings are all listed at once', async (t) => {
  const { code, output } = await run('no-settings', {});
  t.equal(code, 2);
  t.match(output, /ZENOVA_DATABASE_URL: is required/);
  t.match(output, /ZENOVA_ADMIN_TOKEN: is required/);
});

t.test('an unreachable database stops start-up with exit 1 naming the host but not the password', async (t) => {
  const port = await closedPort();
  const password = 'never-print-this-password';
  const { code, output } = await run('no-db', {
    ZENOVA_DATABASE_URL: `postgres://zenova:${password}@127.0.0.1:${port}/zenova`,
    ZENOVA_ADMIN_TOKEN: ADMIN_TOKEN,
    ZENOVA_LISTEN: '127.0.0.1:0',
  });
  t.equal(code, 1);
  t.match(output, new RegExp(`^zenova-control: cannot reach the database at 127\\.0\\.0\\.1:${port}/zenova`, 'm'));
  t.notMatch(output, password);
  t.notMatch(output, ADMIN_TOKEN);
});

t.test('the control plane starts, answers /healthz over HTTP and stops on SIGTERM with exit 0', async (t) => {
  const db = await testDatabase(t);
  const proc = await startProcess({
    name: 'zenova-control',
    command: entry.command,
    args: entry.args,
    env: { ...CLEAN_ENV, ZENOVA_DATABASE_URL: db.url, ZENOVA_ADMIN_TOKEN: ADMIN_TOKEN, ZENOVA_LISTEN: '127.0.0.1:0' },
    readyLine: /control plane listening/,
    t,
  });
  const ready = parseJsonLines(proc.output()).find((l) => l.msg === 'control plane listening');
  const url = String(ready?.url);
  t.match(url, /^http:\/\/127\.0\.0\.1:\d+$/, 'the real bound port, not 0');
  t.notMatch(url, /:0$/);

  const health = await fetch(`${url}/healthz`);
  t.equal(health.status, 200);
  t.same(await health.json(), { status: 'ok' });
  const whoami = await fetch(`${url}/api/v1/whoami`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
  t.same(await whoami.json(), { principal: 'admin' });
  const version = await fetch(`${url}/api/version`);
  t.equal(((await version.json()) as { component?: string }).component, 'control-plane', 'migrated at start-up: the installation exists');

  t.equal(await proc.stop('SIGTERM'), 0);
  t.match(proc.output(), /control plane stopped/);
  t.notMatch(proc.output(), ADMIN_TOKEN, 'the admin token never reaches the log');
});
