import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type pg from 'pg';
import t from 'tap';
import { createSecretBox, KEY_MISMATCH_MESSAGE } from '../../control-plane/src/crypto/secret-box.js';
import type { SecretBox } from '../../control-plane/src/crypto/secret-box.js';
import { migrate } from '../../control-plane/src/db/migrate.js';
import { createPool } from '../../control-plane/src/db/pool.js';
import { loopbackTargetWarning } from '../../control-plane/src/gateway/gateway-target.js';
import { GatewayIdentityError, loadGatewayIdentity } from '../../control-plane/src/gateway/tls-identity.js';
import type { GatewayIdentity } from '../../control-plane/src/gateway/tls-identity.js';
import type { GatewaySettings } from '../../control-plane/src/settings.js';
import { certCovers, createCa, isIssuedBy, issueServerCert } from '../../control-plane/src/tls/self-signed.js';
import { testDatabase } from '../fixtures/postgres.js';
import { captureLogger, freshDatabase } from './helpers.js';

const DAY_MS = 86_400_000;
const HOSTS = ['localhost', '127.0.0.1'];

const server = await testDatabase(t);
const secretBox = createSecretBox(randomBytes(32));

// All these helpers need of a test is somewhere to register teardown.
interface T { teardown(fn: () => unknown): void }

/** A fresh, migrated database and a pool on it, both gone at teardown. */
async function migratedDb(t: T): Promise<{ url: string; pool: pg.Pool }> {
  const url = await freshDatabase(t, server.url);
  return { url, pool: await poolFor(t, url) };
}

async function poolFor(t: T, url: string): Promise<pg.Pool> {
  const pool = createPool({ databaseUrl: url });
  t.teardown(() => pool.end());
  await migrate(pool);
  return pool;
}

function tempDir(t: T): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'zenova-gw-tls-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function gateway(tlsDir: string, overrides: Partial<GatewaySettings> = {}): { gateway: GatewaySettings } {
  return { gateway: { listen: { host: '127.0.0.1', port: 0 }, hosts: HOSTS, tlsDir, autoGenerate: true, ...overrides } };
}

function load(pool: pg.Pool, settings: { gateway: GatewaySettings }, opts: { box?: SecretBox; now?: Date } = {}): Promise<GatewayIdentity> {
  const log = captureLogger({ logLevel: 'info' });
  return loadGatewayIdentity({ pool, settings, secretBox: opts.box ?? secretBox, logger: log.logger, ...(opts.now ? { now: opts.now } : {}) });
}

/** Names, contents and modes of every file in `dir`, to prove a refusal wrote nothing. */
function snapshot(dir: string): Record<string, string> {
  if (!existsSync(dir)) return {};
  return Object.fromEntries(readdirSync(dir).sort().map((f) => {
    const file = path.join(dir, f);
    return [f, `${(statSync(file).mode & 0o777).toString(8)} ${statSync(file).mtimeMs} ${readFileSync(file, 'utf8')}`];
  }));
}

async function storedCount(pool: pg.Pool): Promise<number> {
  const { rows } = await pool.query<{ n: number }>('select count(*)::int as n from gateway_tls_identity');
  return rows[0]?.n ?? 0;
}

/** Writes an identity (from our own PKI) into `dir` as a cache would hold it. */
async function writeIdentityFiles(
  dir: string,
  opts: { ca?: { certPem: string; keyPem: string }; hosts?: string[]; issuedAt?: Date; validityDays?: number } = {},
): Promise<{ caPem: string; caKeyPem: string; certPem: string; keyPem: string }> {
  const ca = opts.ca ?? await createCa('Imported CA', opts.issuedAt ? { issuedAt: opts.issuedAt } : {});
  const hosts = opts.hosts ?? HOSTS;
  const cert = await issueServerCert(ca, {
    dnsNames: hosts.filter((h) => !/^[\d.]+$/.test(h)),
    ipAddresses: hosts.filter((h) => /^[\d.]+$/.test(h)),
    validityDays: opts.validityDays ?? 365,
    ...(opts.issuedAt ? { issuedAt: opts.issuedAt } : {}),
  });
  mkdirSync(dir, { recursive: true });
  writeFileSync(path.join(dir, 'ca.crt'), ca.certPem);
  writeFileSync(path.join(dir, 'tls.crt'), cert.certPem);
  writeFileSync(path.join(dir, 'tls.key'), cert.keyPem, { mode: 0o600 });
  return { caPem: ca.certPem, caKeyPem: ca.keyPem, certPem: cert.certPem, keyPem: cert.keyPem };
}

async function refusal(promise: Promise<unknown>): Promise<GatewayIdentityError> {
  try {
    await promise;
  } catch (err) {
    if (err instanceof GatewayIdentityError) return err;
    throw err;
  }
  throw new Error('expected loadGatewayIdentity to refuse');
}

t.test('the first start generates an identity, stores it encrypted and caches it privately; later starts reuse it', async (t) => {
  const { pool } = await migratedDb(t);
  const dir = path.join(tempDir(t), 'gateway-tls');

  const first = await load(pool, gateway(dir));
  t.equal(first.source, 'generated');
  t.ok(isIssuedBy(first.certPem, first.caPem), 'the server certificate is issued by the CA nodes get');
  for (const host of HOSTS) t.ok(certCovers(first.certPem, host), `the certificate covers ${host}`);
  t.equal(statSync(dir).mode & 0o777, 0o700, 'the cache directory is private');
  t.equal(statSync(path.join(dir, 'tls.key')).mode & 0o777, 0o600, 'the key is 0600');
  t.equal(readFileSync(path.join(dir, 'tls.key'), 'utf8'), first.keyPem);
  t.equal(readFileSync(path.join(dir, 'tls.crt'), 'utf8'), first.certPem);
  t.equal(readFileSync(path.join(dir, 'ca.crt'), 'utf8'), first.caPem);

  const { rows } = await pool.query<{ key_encrypted: Buffer; cert_pem: string; hosts: string[] }>('select key_encrypted, cert_pem, hosts from gateway_tls_identity');
  t.equal(rows.length, 1);
  t.equal(rows[0]?.cert_pem, first.certPem);
  t.same(rows[0]?.hosts, HOSTS);
  t.notOk(rows[0]?.key_encrypted.includes(Buffer.from('PRIVATE KEY')), 'the key is not stored in the clear');

  const second = await load(pool, gateway(dir));
  t.equal(second.source, 'cache');
  t.equal(second.certPem, first.certPem, 'same certificate on restart');
  t.equal(second.keyPem, first.keyPem);

  const otherReplicaDir = path.join(tempDir(t), 'gateway-tls');
  const third = await load(pool, gateway(otherReplicaDir));
  t.equal(third.source, 'database', 'a replica without a cache restores it from the database');
  t.equal(third.certPem, first.certPem);
  t.equal(readFileSync(path.join(otherReplicaDir, 'tls.key'), 'utf8'), first.keyPem);
  t.equal(statSync(path.join(otherReplicaDir, 'tls.key')).mode & 0o777, 0o600);
  t.equal(await storedCount(pool), 1);
});

t.test('two replicas starting together on a fresh database end with one identity', async (t) => {
  const { url } = await migratedDb(t);
  // Separate pools and directories: as two processes on two hosts would be.
  const [poolA, poolB] = [await poolFor(t, url), await poolFor(t, url)];
  const [a, b] = await Promise.all([load(poolA, gateway(tempDir(t))), load(poolB, gateway(tempDir(t)))]);
  t.equal(a.certPem, b.certPem, 'the same certificate');
  t.equal(a.caPem, b.caPem, 'the same CA');
  t.same([a.source, b.source].sort(), ['database', 'generated'], 'one generated it, the other read the winner\'s');
  t.equal(await storedCount(poolA), 1);
});

t.test('a cache that disagrees with the database stops start-up and is left untouched', async (t) => {
  const { pool } = await migratedDb(t);
  const stored = await load(pool, gateway(tempDir(t)));
  const dir = tempDir(t);
  await writeIdentityFiles(dir);
  const before = snapshot(dir);

  const err = await refusal(load(pool, gateway(dir)));
  t.equal(err.code, 'CACHE_MISMATCH');
  t.match(err.message, `the gateway TLS identity cached in ${dir} differs from the one stored in the database`);
  t.match(err.message, /CA \(cache [0-9A-F:]+, database [0-9A-F:]+\)/, 'says what differs');
  t.match(err.message, `remove ${dir} and start again`, 'says what to do');
  t.same(snapshot(dir), before, 'the cache files are untouched');
  const { rows } = await pool.query<{ cert_pem: string }>('select cert_pem from gateway_tls_identity');
  t.equal(rows[0]?.cert_pem, stored.certPem, 'the stored identity is untouched');
});

t.test('a cache with the same CA but another server certificate is a disagreement too', async (t) => {
  const { pool } = await migratedDb(t);
  const importedDir = tempDir(t);
  const original = await writeIdentityFiles(importedDir);
  t.equal((await load(pool, gateway(importedDir))).source, 'cache', 'imported into the empty database');
  // Another replica's cache holds a certificate from the same CA: coherent on its own, but not the
  // certificate every other replica serves.
  const dir = tempDir(t);
  await writeIdentityFiles(dir, { ca: { certPem: original.caPem, keyPem: original.caKeyPem } });
  const before = snapshot(dir);
  const err = await refusal(load(pool, gateway(dir)));
  t.equal(err.code, 'CACHE_MISMATCH');
  t.match(err.message, /differs from the one stored in the database: server certificate \(cache [0-9A-F:]+, database [0-9A-F:]+\)/);
  t.notMatch(err.message, /: CA \(/, 'the CA is the same, so it is not named');
  t.same(snapshot(dir), before, 'untouched');
});

t.test('a cache whose key does not belong to its certificate is refused as unusable', async (t) => {
  const { pool } = await migratedDb(t);
  const dir = tempDir(t);
  await writeIdentityFiles(dir);
  const other = await writeIdentityFiles(tempDir(t));
  writeFileSync(path.join(dir, 'tls.key'), other.keyPem);
  const before = snapshot(dir);
  const err = await refusal(load(pool, gateway(dir)));
  t.equal(err.code, 'CACHE_INVALID');
  t.match(err.message, /the private key does not belong to the server certificate/);
  t.same(snapshot(dir), before, 'untouched');
  t.equal(await storedCount(pool), 0);
});

t.test('an incomplete cache stops start-up naming the missing file, and nothing is generated', async (t) => {
  const { pool } = await migratedDb(t);
  const dir = tempDir(t);
  await writeIdentityFiles(dir);
  rmSync(path.join(dir, 'tls.key'));
  const before = snapshot(dir);

  const err = await refusal(load(pool, gateway(dir)));
  t.equal(err.code, 'CACHE_INCOMPLETE');
  t.match(err.message, `the gateway TLS cache ${dir} is incomplete: it has ca.crt, tls.crt but not tls.key`);
  t.match(err.message, /database holds no identity to restore from/);
  t.same(snapshot(dir), before, 'untouched');
  t.equal(await storedCount(pool), 0, 'no identity was generated in its place');

  await load(pool, gateway(tempDir(t)));
  const again = await refusal(load(pool, gateway(dir)));
  t.match(again.message, `the database holds the identity: remove ${dir} and start again`, 'with an identity stored, the advice is to restore');
});

t.test('an expired certificate stops start-up, from the cache and from the database', async (t) => {
  const { pool } = await migratedDb(t);
  const dir = tempDir(t);
  await writeIdentityFiles(dir, { issuedAt: new Date(Date.now() - 30 * DAY_MS), validityDays: 10 });
  const before = snapshot(dir);
  const fromCache = await refusal(load(pool, gateway(dir)));
  t.equal(fromCache.code, 'EXPIRED');
  t.match(fromCache.message, `the gateway TLS server certificate in the local cache ${dir} expired on `);
  t.same(snapshot(dir), before, 'untouched');
  t.equal(await storedCount(pool), 0, 'an expired certificate is never imported');

  const goodDir = tempDir(t);
  await load(pool, gateway(goodDir));
  const goodBefore = snapshot(goodDir);
  const inTenYearsAndADay = new Date(Date.now() + 3651 * DAY_MS);
  const fromDatabase = await refusal(load(pool, gateway(goodDir), { now: inTenYearsAndADay }));
  t.equal(fromDatabase.code, 'EXPIRED');
  t.match(fromDatabase.message, /in the database expired on .*nodes would refuse it/);
  t.match(fromDatabase.message, /delete from gateway_tls_identity/, 'says how to replace it');
  t.same(snapshot(goodDir), goodBefore, 'untouched');
});

t.test('a certificate that does not cover a configured gateway host stops start-up', async (t) => {
  const { pool } = await migratedDb(t);
  const dir = tempDir(t);
  await load(pool, gateway(dir));
  const before = snapshot(dir);
  const err = await refusal(load(pool, gateway(dir, { hosts: ['localhost', 'gw.example.com', '10.1.2.3'] })));
  t.equal(err.code, 'HOSTS_NOT_COVERED');
  t.match(err.message, /does not cover gw\.example\.com, 10\.1\.2\.3 from ZENOVA_GATEWAY_HOSTS/);
  t.match(err.message, /it covers DNS:localhost, IP Address:127\.0\.0\.1/);
  t.match(err.message, /Remove them from ZENOVA_GATEWAY_HOSTS, or/);
  t.same(snapshot(dir), before, 'untouched');
  t.equal(await storedCount(pool), 1, 'the stored identity is not replaced');
});

t.test('the loopback warning of the start that generated the identity tells how to take another host, and following it starts', async (t) => {
  const { pool } = await migratedDb(t);
  const dir = tempDir(t);
  const loopback = { target: 'localhost:8443', serverName: 'localhost' };
  const first = await load(pool, gateway(dir));
  t.equal(first.source, 'generated');
  const warning = loopbackTargetWarning(loopback, first.source, gateway(dir).gateway) ?? '';
  t.match(warning, /generated on this start for localhost,127\.0\.0\.1 and is never reissued/);
  t.match(warning, /before enrolling any node: stop the control plane, delete the identity \(psql: delete from gateway_tls_identity\) and remove /);
  t.ok(warning.includes(`remove ${dir}, then start again with ZENOVA_GATEWAY_HOSTS`), 'names the cache dir to remove');

  // Following the warning the way it suggests without the replacement is refused...
  const wider = gateway(dir, { hosts: ['gw.example.com', 'localhost', '127.0.0.1'] });
  t.equal((await refusal(load(pool, wider))).code, 'HOSTS_NOT_COVERED');
  // ...a later start that did not generate the identity says what replacing it costs...
  const later = await load(pool, gateway(dir));
  t.match(loopbackTargetWarning(loopback, later.source, gateway(dir).gateway), /never reissued.*delete from gateway_tls_identity.*every node already enrolled must be re-enrolled/);
  // ...and doing what it says starts with a certificate for the new host.
  await pool.query('delete from gateway_tls_identity');
  rmSync(dir, { recursive: true, force: true });
  const replaced = await load(pool, wider);
  t.equal(replaced.source, 'generated');
  t.ok(certCovers(replaced.certPem, 'gw.example.com'), 'the new certificate covers the host');
});

t.test('a complete cache found with an empty database is imported into the database', async (t) => {
  const { pool } = await migratedDb(t);
  const dir = tempDir(t);
  const files = await writeIdentityFiles(dir);
  const imported = await load(pool, gateway(dir));
  t.equal(imported.source, 'cache');
  t.equal(imported.certPem, files.certPem);
  t.equal(imported.caPem, files.caPem);
  const restored = await load(pool, gateway(tempDir(t)));
  t.equal(restored.source, 'database');
  t.equal(restored.certPem, files.certPem, 'other replicas get the imported identity');
  t.equal(restored.keyPem, files.keyPem);
});

t.test('a cached key readable by others is tightened to 0600', async (t) => {
  const { pool } = await migratedDb(t);
  const dir = tempDir(t);
  await writeIdentityFiles(dir);
  const { chmodSync } = await import('node:fs');
  chmodSync(path.join(dir, 'tls.key'), 0o644);
  await load(pool, gateway(dir));
  t.equal(statSync(path.join(dir, 'tls.key')).mode & 0o777, 0o600);
});

t.test('a wrong ZENOVA_SECRET_ENC_KEY is refused with a clear message', async (t) => {
  const { pool } = await migratedDb(t);
  await load(pool, gateway(tempDir(t)));
  const dir = tempDir(t);
  await t.rejects(load(pool, gateway(dir), { box: createSecretBox(randomBytes(32)) }), { name: 'SecretBoxError', message: KEY_MISMATCH_MESSAGE });
  t.same(snapshot(dir), {}, 'nothing cached');
});

t.test('with auto-generation off and no identity anywhere, start-up is refused', async (t) => {
  const { pool } = await migratedDb(t);
  const err = await refusal(load(pool, gateway(tempDir(t), { autoGenerate: false })));
  t.equal(err.code, 'NO_IDENTITY');
  t.match(err.message, /ZENOVA_GATEWAY_TLS_AUTO_GENERATE is false/);
  t.equal(await storedCount(pool), 0);
});

t.test('external mode uses the files as they are and hands nodes the trust bundle', async (t) => {
  const { pool } = await migratedDb(t);
  const dir = tempDir(t);
  const ca = await createCa('Corporate CA');
  const cert = await issueServerCert(ca, { dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'], validityDays: 90 });
  const other = await createCa('Unrelated CA');
  const files = {
    cert: path.join(dir, 'gw.crt'), key: path.join(dir, 'gw.key'), bundle: path.join(dir, 'ca.pem'), wrongBundle: path.join(dir, 'other.pem'),
    wrongKey: path.join(dir, 'other.key'),
  };
  writeFileSync(files.cert, cert.certPem);
  writeFileSync(files.key, cert.keyPem);
  writeFileSync(files.bundle, ca.certPem);
  writeFileSync(files.wrongBundle, other.certPem);
  writeFileSync(files.wrongKey, other.keyPem);
  const cacheDir = path.join(dir, 'cache');
  const external = (o: Partial<GatewaySettings>): { gateway: GatewaySettings } =>
    gateway(cacheDir, { autoGenerate: false, certFile: files.cert, keyFile: files.key, ...o });

  const withBundle = await load(pool, external({ trustBundleFile: files.bundle }));
  t.equal(withBundle.source, 'external');
  t.equal(withBundle.certPem.trim(), cert.certPem.trim());
  t.equal(withBundle.keyPem, cert.keyPem);
  t.equal(withBundle.caPem.trim(), ca.certPem.trim(), 'nodes get the trust bundle as their CA');
  const systemTrust = await load(pool, external({}));
  t.equal(systemTrust.caPem, '', 'no bundle: nodes use their system trust store');
  t.equal(await storedCount(pool), 0, 'nothing generated');
  t.notOk(existsSync(cacheDir), 'nothing cached');

  const wrongKey = await refusal(load(pool, external({ keyFile: files.wrongKey })));
  t.equal(wrongKey.code, 'EXTERNAL_INVALID');
  t.match(wrongKey.message, /ZENOVA_GATEWAY_KEY_FILE .* is not the private key of the certificate in ZENOVA_GATEWAY_CERT_FILE/);
  const wrongBundle = await refusal(load(pool, external({ trustBundleFile: files.wrongBundle })));
  t.match(wrongBundle.message, /ZENOVA_GATEWAY_TRUST_BUNDLE .* does not contain the CA that issued ZENOVA_GATEWAY_CERT_FILE/);
  const uncovered = await refusal(load(pool, external({ hosts: ['gw.example.com'] })));
  t.equal(uncovered.code, 'HOSTS_NOT_COVERED');
  t.match(uncovered.message, /ZENOVA_GATEWAY_CERT_FILE .* does not cover gw\.example\.com/);
  const missing = await refusal(load(pool, external({ certFile: path.join(dir, 'nope.crt') })));
  t.match(missing.message, /cannot read ZENOVA_GATEWAY_CERT_FILE/);
});

t.test('an external certificate that expires within 30 days is warned about at start, as a generated one is; one with longer left is not', async (t) => {
  const { pool } = await migratedDb(t);
  const dir = tempDir(t);
  const ca = await createCa('Corporate CA');
  for (const [days, warned] of [[5, true], [90, false]] as const) {
    const cert = await issueServerCert(ca, { dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'], validityDays: days });
    const files = { cert: path.join(dir, `gw-${days}.crt`), key: path.join(dir, `gw-${days}.key`) };
    writeFileSync(files.cert, cert.certPem);
    writeFileSync(files.key, cert.keyPem, { mode: 0o600 });
    const log = captureLogger({ logLevel: 'info' });
    const identity = await loadGatewayIdentity({
      pool, secretBox, logger: log.logger,
      settings: gateway(path.join(dir, 'cache'), { autoGenerate: false, certFile: files.cert, keyFile: files.key }),
    });
    t.equal(identity.source, 'external');
    t.equal(log.lines().some((l) => l.level === 40 && l.msg === 'the gateway TLS certificate expires within 30 days'), warned, `${days} days left`);
  }
});
