import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import t from 'tap';
import { testDatabase } from '../fixtures/postgres.js';
import { parseJsonLines, startProcess, tsEntry } from '../fixtures/processes.js';
import { openSpareConnection } from '../fixtures/spare-connection.js';
import { ADMIN_TOKEN, closedPort } from './helpers.js';

const entry = tsEntry('control-plane/src/main.ts');

// The test runner's own ZENOVA_* variables must not leak into the child.
const CLEAN_ENV: NodeJS.ProcessEnv = Object.fromEntries(
  Object.keys(process.env).filter((k) => k.startsWith('ZENOVA_')).map((k) => [k, undefined]),
);

const SECRET_ENC_KEY = randomBytes(32).toString('base64');

function tempDir(t: { teardown(fn: () => unknown): void }): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'zenova-main-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

async function run(name: string, env: NodeJS.ProcessEnv, args: string[] = []): Promise<{ code: number | null; output: string }> {
  const proc = await startProcess({ name, command: entry.command, args: [...entry.args, ...args], env: { ...CLEAN_ENV, ...env }, t });
  const { code } = await proc.exited;
  return { code, output: proc.output() };
}

t.test('--help prints usage with every environment variable and exits 0', async (t) => {
  const { code, output } = await run('help', {}, ['--help']);
  t.equal(code, 0);
  t.match(output, /Usage: zenova-control/);
  for (const name of [
    'ZENOVA_DATABASE_URL', 'ZENOVA_LISTEN', 'ZENOVA_ADMIN_TOKEN', 'ZENOVA_SECRET_ENC_KEY', 'ZENOVA_LOG_LEVEL', 'ZENOVA_PUBLIC_URL',
    'ZENOVA_TLS_CERT_FILE', 'ZENOVA_TLS_KEY_FILE', 'ZENOVA_GATEWAY_LISTEN', 'ZENOVA_GATEWAY_HOSTS', 'ZENOVA_GATEWAY_PUBLIC_ADDRESS',
    'ZENOVA_GATEWAY_TLS_DIR', 'ZENOVA_GATEWAY_TLS_AUTO_GENERATE', 'ZENOVA_GATEWAY_CERT_FILE', 'ZENOVA_GATEWAY_KEY_FILE',
    'ZENOVA_GATEWAY_TRUST_BUNDLE', 'ZENOVA_NODE_OFFLINE_AFTER_SECONDS', 'ZENOVA_CREDENTIAL_VALIDITY_SECONDS',
    'ZENOVA_CREDENTIAL_ROTATE_AFTER_SECONDS', 'ZENOVA_CREDENTIAL_HANDOVER_SECONDS', 'ZENOVA_HEARTBEAT_INTERVAL_MS',
    'ZENOVA_INSTALL_TOKEN_TTL_SECONDS', 'ZENOVA_ENROLL_ATTEMPTS_PER_MINUTE', 'ZENOVA_FAULT_DROP_ROTATION_REPLIES',
    'ZENOVA_LEASE_CAP_MICROS', 'ZENOVA_LEASE_SHARE', 'ZENOVA_LEASE_REFRESH_MS',
  ]) {
    t.match(output, name);
  }
  // Exactly the variables start-up refuses to run without are marked.
  const marked = output.split('\n').filter((line) => line.includes('(required)')).map((line) => line.trim().split(/\s+/)[0]).sort();
  t.same(marked, ['ZENOVA_ADMIN_TOKEN', 'ZENOVA_DATABASE_URL', 'ZENOVA_SECRET_ENC_KEY']);
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
  t.match(output, /ZENOVA_SECRET_ENC_KEY: is required/);
});

t.test('a mistyped option gets the one meant, and a stray argument (perhaps a pasted secret) is not quoted back; both exit 2', async (t) => {
  const typo = await run('typo', {}, ['--verison']);
  t.equal(typo.code, 2);
  t.match(typo.output, /^zenova-control: unknown option --verison; did you mean --version\?$/m);
  const stray = await run('stray', {}, ['s3cr3t-admin-token-pasted-here']);
  t.equal(stray.code, 2);
  t.match(stray.output, /unexpected argument \(not shown/);
  t.notMatch(stray.output, /s3cr3t/);
});

t.test('an unreachable database stops start-up with exit 1 naming the host but not the password', async (t) => {
  const port = await closedPort();
  const password = 'never-print-this-password';
  const { code, output } = await run('no-db', {
    ZENOVA_DATABASE_URL: `postgres://zenova:${password}@127.0.0.1:${port}/zenova`,
    ZENOVA_ADMIN_TOKEN: ADMIN_TOKEN,
    ZENOVA_LISTEN: '127.0.0.1:0',
    ZENOVA_SECRET_ENC_KEY: SECRET_ENC_KEY,
  });
  t.equal(code, 1);
  t.match(output, new RegExp(`^zenova-control: cannot reach the database at 127\\.0\\.0\\.1:${port}/zenova`, 'm'));
  t.notMatch(output, password);
  t.notMatch(output, ADMIN_TOKEN);
});

t.test('a database URL with an unencoded password stops start-up with exit 2 naming the variable, without showing the password', async (t) => {
  // '/' in the password: the parser would read host 'zenova', port 2024 and the rest as the path.
  const { code, output } = await run('ambiguous-db-url', {
    ZENOVA_DATABASE_URL: 'postgres://zenova:2024/Tr0ub4dor-horse@127.0.0.1:5432/zenova',
    ZENOVA_ADMIN_TOKEN: ADMIN_TOKEN,
    ZENOVA_LISTEN: '127.0.0.1:0',
    ZENOVA_SECRET_ENC_KEY: SECRET_ENC_KEY,
  });
  t.equal(code, 2);
  t.match(output, /^zenova-control: invalid settings:$/m);
  t.match(output, /ZENOVA_DATABASE_URL: cannot be read unambiguously.*percent-encode/);
  t.notMatch(output, /Tr0ub4dor/, 'the password is not shown');
  t.notMatch(output, /cannot reach the database/, 'refused before connecting');
});

t.test('without ZENOVA_SECRET_ENC_KEY start-up stops with exit 2 naming the variable, before touching the database', async (t) => {
  const port = await closedPort();
  const { code, output } = await run('no-secret-key', {
    ZENOVA_DATABASE_URL: `postgres://zenova@127.0.0.1:${port}/zenova`,
    ZENOVA_ADMIN_TOKEN: ADMIN_TOKEN,
  });
  t.equal(code, 2);
  t.match(output, /^zenova-control: invalid settings:$/m);
  t.match(output, /ZENOVA_SECRET_ENC_KEY: is required: it encrypts the gateway TLS key/);
  t.notMatch(output, /cannot reach the database/, 'refused before connecting');
});

t.test('bad credit lease settings stop start-up with exit 2 naming each variable and its range, before touching the database', async (t) => {
  const port = await closedPort();
  const { code, output } = await run('bad-lease-settings', {
    ZENOVA_DATABASE_URL: `postgres://zenova@127.0.0.1:${port}/zenova`,
    ZENOVA_ADMIN_TOKEN: ADMIN_TOKEN,
    ZENOVA_SECRET_ENC_KEY: SECRET_ENC_KEY,
    ZENOVA_LEASE_CAP_MICROS: '0',
    ZENOVA_LEASE_SHARE: '2',
    ZENOVA_LEASE_REFRESH_MS: 'abc',
  });
  t.equal(code, 2);
  t.match(output, /^zenova-control: invalid settings:$/m);
  t.match(output, /^ {2}ZENOVA_LEASE_CAP_MICROS: expected a whole number from 1 to 999999999999999, got '0'$/m);
  t.match(output, /^ {2}ZENOVA_LEASE_SHARE: expected a decimal above 0 and at most 1 with at most 6 decimals \(e\.g\. 0\.25\), got '2'$/m);
  t.match(output, /^ {2}ZENOVA_LEASE_REFRESH_MS: expected a whole number from 100 to 999999999, got 'abc'$/m);
  t.notMatch(output, /cannot reach the database|cannot start the node gateway/, 'refused before connecting');
  t.notMatch(output, /^\s+at /m, 'no stack trace');
});

t.test('a credential validity shorter than twice the rotation age set stops start-up with exit 2 in one line naming both variables and their values', async (t) => {
  const port = await closedPort();
  const { code, output } = await run('rotate-after-validity', {
    ZENOVA_DATABASE_URL: `postgres://zenova@127.0.0.1:${port}/zenova`,
    ZENOVA_ADMIN_TOKEN: ADMIN_TOKEN,
    ZENOVA_SECRET_ENC_KEY: SECRET_ENC_KEY,
    ZENOVA_CREDENTIAL_VALIDITY_SECONDS: '43200',
    ZENOVA_CREDENTIAL_ROTATE_AFTER_SECONDS: '86400',
  });
  t.equal(code, 2);
  t.match(output, /^zenova-control: invalid settings:$/m);
  t.match(output, /^ {2}ZENOVA_CREDENTIAL_ROTATE_AFTER_SECONDS: 86400 must be at most half of ZENOVA_CREDENTIAL_VALIDITY_SECONDS 43200 \(at most 21600\), so credentials are rotated well before they expire: lower it, or raise the validity$/m);
  t.notMatch(output, /cannot reach the database|cannot start the node gateway/, 'refused before connecting');
});

t.test('the control plane starts, answers /healthz over HTTP, runs the node gateway over TLS and stops on SIGTERM with exit 0', async (t) => {
  const db = await testDatabase(t);
  const tlsDir = path.join(tempDir(t), 'gateway-tls');
  const proc = await startProcess({
    name: 'zenova-control',
    command: entry.command,
    args: entry.args,
    env: {
      ...CLEAN_ENV,
      ZENOVA_DATABASE_URL: db.url,
      ZENOVA_ADMIN_TOKEN: ADMIN_TOKEN,
      ZENOVA_LISTEN: '127.0.0.1:0',
      ZENOVA_SECRET_ENC_KEY: SECRET_ENC_KEY,
      ZENOVA_GATEWAY_LISTEN: '127.0.0.1:0',
      ZENOVA_GATEWAY_TLS_DIR: tlsDir,
    },
    readyLine: /control plane listening/,
    t,
  });
  const lines = parseJsonLines(proc.output());
  const ready = lines.find((l) => l.msg === 'control plane listening');
  t.equal(lines.at(-1)?.msg, 'control plane listening', 'the ready line is the last line of start-up');
  t.ok(lines.some((l) => l.msg === 'the console/API is served over plain HTTP: set ZENOVA_TLS_CERT_FILE and ZENOVA_TLS_KEY_FILE to serve HTTPS (nodes enroll over HTTPS only)'),
    'plain HTTP is warned about');

  const gatewayLine = lines.find((l) => l.msg === 'node gateway listening' && l.target !== undefined);
  const gatewayPort = Number(gatewayLine?.port);
  t.ok(gatewayPort > 0, 'the gateway reports its real bound port');
  t.equal(gatewayLine?.target, `localhost:${gatewayPort}`, 'nodes dial the first gateway host and the bound port');
  t.ok(lines.some((l) => l.level === 40 && /a loopback address: only a node on this host can reach it/.test(String(l.msg))), 'a loopback gateway address is warned about');
  t.equal(statSync(path.join(tlsDir, 'tls.key')).mode & 0o777, 0o600, 'the generated identity is cached with a private key');
  // The gateway serves the generated identity: a TLS client trusting only the cached CA accepts it.
  const authorized = await new Promise<boolean | string>((resolve) => {
    const socket = tls.connect({ host: '127.0.0.1', port: gatewayPort, servername: 'localhost', ca: readFileSync(path.join(tlsDir, 'ca.crt'), 'utf8'), ALPNProtocols: ['h2'] });
    socket.once('secureConnect', () => {
      resolve(socket.authorized);
      socket.destroy();
    });
    socket.once('error', (err) => resolve(err.message));
  });
  t.equal(authorized, true, 'the gateway speaks TLS with the generated identity');
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

  // A browser's spare connection (no request on it) does not hold the shutdown past its deadline.
  const spare = await openSpareConnection(url);
  t.equal(await proc.stop('SIGTERM'), 0);
  t.match(proc.output(), /control plane stopped/);
  t.ok(spare.closed(), 'the spare connection was closed');
  t.notMatch(proc.output(), ADMIN_TOKEN, 'the admin token never reaches the log');
});
