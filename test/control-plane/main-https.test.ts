import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { Agent, fetch as undiciFetch } from 'undici';
import { createSecretBox } from '../../control-plane/src/crypto/secret-box.js';
import { migrate } from '../../control-plane/src/db/migrate.js';
import { createPool } from '../../control-plane/src/db/pool.js';
import { loadGatewayIdentity } from '../../control-plane/src/gateway/tls-identity.js';
import { createCa, issueServerCert } from '../../control-plane/src/tls/self-signed.js';
import { testDatabase } from '../fixtures/postgres.js';
import { parseJsonLines, startProcess, tsEntry } from '../fixtures/processes.js';
import { openSpareConnection } from '../fixtures/spare-connection.js';
import { ADMIN_TOKEN, captureLogger, closedPort, freshDatabase } from './helpers.js';

const entry = tsEntry('control-plane/src/main.ts');
const CLEAN_ENV: NodeJS.ProcessEnv = Object.fromEntries(
  Object.keys(process.env).filter((k) => k.startsWith('ZENOVA_')).map((k) => [k, undefined]),
);
const SECRET_ENC_KEY = randomBytes(32);

// All these helpers need of a test is somewhere to register teardown.
interface T { teardown(fn: () => unknown): void }

function tempDir(t: T): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'zenova-main-https-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** A console CA and a server certificate for 127.0.0.1/localhost, written as files. */
async function consolePki(dir: string): Promise<{ caPem: string; certFile: string; keyFile: string; otherKeyFile: string }> {
  const ca = await createCa('Zenova Console Test CA');
  const cert = await issueServerCert(ca, { dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'], validityDays: 30 });
  const files = { certFile: path.join(dir, 'console.crt'), keyFile: path.join(dir, 'console.key'), otherKeyFile: path.join(dir, 'other.key') };
  writeFileSync(files.certFile, cert.certPem);
  writeFileSync(files.keyFile, cert.keyPem, { mode: 0o600 });
  writeFileSync(files.otherKeyFile, ca.keyPem, { mode: 0o600 });
  return { caPem: ca.certPem, ...files };
}

function baseEnv(databaseUrl: string, tlsDir: string): NodeJS.ProcessEnv {
  return {
    ...CLEAN_ENV,
    ZENOVA_DATABASE_URL: databaseUrl,
    ZENOVA_ADMIN_TOKEN: ADMIN_TOKEN,
    ZENOVA_LISTEN: '127.0.0.1:0',
    ZENOVA_SECRET_ENC_KEY: SECRET_ENC_KEY.toString('base64'),
    ZENOVA_GATEWAY_LISTEN: '127.0.0.1:0',
    ZENOVA_GATEWAY_TLS_DIR: tlsDir,
  };
}

async function run(t: T, name: string, env: NodeJS.ProcessEnv): Promise<{ code: number | null; output: string }> {
  const proc = await startProcess({ name, command: entry.command, args: entry.args, env, t });
  const { code } = await proc.exited;
  return { code, output: proc.output() };
}

t.test('with ZENOVA_TLS_CERT_FILE/KEY_FILE the console/API is served over HTTPS and verifies with its CA', async (t) => {
  const db = await testDatabase(t);
  const dir = tempDir(t);
  const pki = await consolePki(dir);
  const proc = await startProcess({
    name: 'zenova-control-https',
    command: entry.command,
    args: entry.args,
    env: { ...baseEnv(db.url, path.join(dir, 'gateway-tls')), ZENOVA_TLS_CERT_FILE: pki.certFile, ZENOVA_TLS_KEY_FILE: pki.keyFile },
    readyLine: /control plane listening/,
    t,
  });
  const lines = parseJsonLines(proc.output());
  const url = String(lines.find((l) => l.msg === 'control plane listening')?.url);
  t.match(url, /^https:\/\/127\.0\.0\.1:\d+$/, 'the logged URL is https with the real port');
  t.notOk(lines.some((l) => typeof l.msg === 'string' && l.msg.includes('plain HTTP')), 'no plain-HTTP warning');

  const agent = new Agent({ connect: { ca: pki.caPem } });
  t.teardown(() => agent.close());
  const health = await undiciFetch(`${url}/healthz`, { dispatcher: agent });
  t.equal(health.status, 200);
  t.same(await health.json(), { status: 'ok' });
  const whoami = await undiciFetch(`${url}/api/v1/whoami`, { dispatcher: agent, headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
  t.same(await whoami.json(), { principal: 'admin' }, 'the admin API is behind the same HTTPS listener');

  const untrusting = new Agent();
  t.teardown(() => untrusting.close());
  await t.rejects(undiciFetch(`${url}/healthz`, { dispatcher: untrusting }), 'a client without the CA refuses the certificate');

  // A browser's spare connection (no request on it) does not hold the shutdown past its deadline.
  const spare = await openSpareConnection(url);
  t.equal(await proc.stop('SIGTERM'), 0);
  t.ok(spare.closed(), 'the spare connection was closed');
  t.match(proc.output(), /control plane stopped/);
});

t.test('a console key that does not belong to the certificate stops start-up with exit 2 naming ZENOVA_TLS_KEY_FILE', async (t) => {
  const dir = tempDir(t);
  const pki = await consolePki(dir);
  const port = await closedPort();
  const { code, output } = await run(t, 'bad-console-key', {
    ...baseEnv(`postgres://zenova@127.0.0.1:${port}/zenova`, path.join(dir, 'gateway-tls')),
    ZENOVA_TLS_CERT_FILE: pki.certFile,
    ZENOVA_TLS_KEY_FILE: pki.otherKeyFile,
  });
  t.equal(code, 2);
  t.match(output, /ZENOVA_TLS_KEY_FILE: .*other\.key is not the private key of the certificate in ZENOVA_TLS_CERT_FILE/);
  const missing = await run(t, 'missing-console-cert', {
    ...baseEnv(`postgres://zenova@127.0.0.1:${port}/zenova`, path.join(dir, 'gateway-tls')),
    ZENOVA_TLS_CERT_FILE: path.join(dir, 'nope.crt'),
    ZENOVA_TLS_KEY_FILE: pki.keyFile,
  });
  t.equal(missing.code, 2);
  t.match(missing.output, /ZENOVA_TLS_CERT_FILE: cannot read .*nope\.crt/);
});

t.test('a gateway identity that disagrees with the database, or a wrong ZENOVA_SECRET_ENC_KEY, stops start-up with exit 1 and says why', async (t) => {
  const db = await testDatabase(t);
  const pool = createPool({ databaseUrl: db.url });
  t.teardown(() => pool.end());
  await migrate(pool);
  const dir = tempDir(t);
  const settings = { gateway: { listen: { host: '127.0.0.1', port: 0 }, hosts: ['localhost', '127.0.0.1'], tlsDir: path.join(dir, 'a'), autoGenerate: true } };
  const secretBox = createSecretBox(SECRET_ENC_KEY);
  // One replica generated and stored the identity; another host carries a cache from elsewhere.
  await loadGatewayIdentity({ pool, settings, secretBox, logger: captureLogger({ logLevel: 'silent' }).logger });
  await loadGatewayIdentity({ pool: await otherDatabasePool(t, db.url), settings: { gateway: { ...settings.gateway, tlsDir: path.join(dir, 'b') } }, secretBox, logger: captureLogger({ logLevel: 'silent' }).logger });
  const before = readdirSync(path.join(dir, 'b')).sort();

  const mismatch = await run(t, 'identity-mismatch', baseEnv(db.url, path.join(dir, 'b')));
  t.equal(mismatch.code, 1);
  t.match(mismatch.output, /^zenova-control: cannot load the gateway TLS identity: the gateway TLS identity cached in .*\/b differs from the one stored in the database/m);
  t.notMatch(mismatch.output, /node gateway listening|control plane listening/, 'nothing was started');
  t.same(readdirSync(path.join(dir, 'b')).sort(), before);

  const wrongKey = await run(t, 'wrong-secret-key', { ...baseEnv(db.url, path.join(dir, 'c')), ZENOVA_SECRET_ENC_KEY: randomBytes(32).toString('base64') });
  t.equal(wrongKey.code, 1);
  t.match(wrongKey.output, /^zenova-control: cannot load the gateway TLS identity: ZENOVA_SECRET_ENC_KEY does not match the key these secrets were encrypted with/m);
});

/** A second migrated database in the same server: where the "other" cache comes from. */
async function otherDatabasePool(t: T, serverUrl: string): Promise<ReturnType<typeof createPool>> {
  const pool = createPool({ databaseUrl: await freshDatabase(t, serverUrl) });
  t.teardown(() => pool.end());
  await migrate(pool);
  return pool;
}
