/**
 * The node gateway's TLS server identity (seed 000, DESIGN §3).
 *
 * Generated mode (default): on first start a CA and a server certificate covering
 * ZENOVA_GATEWAY_HOSTS are generated, stored in PostgreSQL (key sealed with ZENOVA_SECRET_ENC_KEY)
 * and cached in ZENOVA_GATEWAY_TLS_DIR (ca.crt, tls.crt, tls.key). Every replica serves that one
 * identity: first generation is serialised by an advisory lock, a replica without a cache restores
 * it from the database, and a complete local cache found with an empty database is imported.
 * Nodes pin the CA, so trust is never replaced silently: a cache that disagrees with the database,
 * an incomplete cache, an expired certificate or one missing a configured host stops start-up
 * with a GatewayIdentityError that says what differs and what to do. Refusals write nothing.
 *
 * External mode (ZENOVA_GATEWAY_CERT_FILE/KEY_FILE): the files are used as they are, after the same
 * checks; nodes get ZENOVA_GATEWAY_TRUST_BUNDLE as their CA, or nothing (their system store).
 */
import { X509Certificate, createPrivateKey, randomUUID } from 'node:crypto';
import { chmodSync, mkdirSync, statSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type pg from 'pg';
import type pino from 'pino';
import type { SecretBox } from '../crypto/secret-box.js';
import { writeFileAtomic } from '../fs/atomic-write.js';
import { readBoundedRegularFile } from '../fs/bounded-file.js';
import type { Settings } from '../settings.js';
import {
  certCovers, certFingerprint, certNotAfter, certNotBefore, createCa, isIssuedBy, issueServerCert, keyMatchesCert, sanFor,
  splitPemCertificates,
} from '../tls/self-signed.js';

export type GatewayIdentitySource = 'generated' | 'database' | 'cache' | 'external';

export interface GatewayIdentity {
  /** The server certificate (external mode: with its chain). */
  certPem: string;
  keyPem: string;
  /**
   * What nodes pin; '' in external mode without a trust bundle: the enrollment answer then carries
   * caPem '' and nodes verify the gateway against their system trust store (and its name).
   */
  caPem: string;
  source: GatewayIdentitySource;
}

export type GatewayIdentityErrorCode =
  | 'CACHE_INCOMPLETE' | 'CACHE_INVALID' | 'CACHE_MISMATCH' | 'STORED_INVALID' | 'EXPIRED' | 'NOT_YET_VALID'
  | 'HOSTS_NOT_COVERED' | 'NO_IDENTITY' | 'EXTERNAL_INVALID' | 'CACHE_UNREADABLE';

export class GatewayIdentityError extends Error {
  readonly code: GatewayIdentityErrorCode;
  constructor(code: GatewayIdentityErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'GatewayIdentityError';
    this.code = code;
  }
}

/** Fixed advisory-lock key for first generation/import, shared by every replica ("zenova" + 0003). */
export const GATEWAY_IDENTITY_LOCK_KEY = BigInt('0x7a656e6f76610003').toString();

export const CACHE_FILES = { ca: 'ca.crt', cert: 'tls.crt', key: 'tls.key' } as const;

/** The generated server certificate lives as long as its CA: replacing it means re-trusting nodes. */
export const GENERATED_CERT_VALIDITY_DAYS = 3650;
const EXPIRY_WARNING_MS = 30 * 24 * 60 * 60_000;
const KEY_CONTEXT = 'gateway-tls-key';

interface IdentityPems { caPem: string; certPem: string; keyPem: string }

export interface LoadGatewayIdentityOptions {
  pool: pg.Pool;
  settings: Pick<Settings, 'gateway'>;
  secretBox: SecretBox;
  logger: pino.Logger;
  /** The moment expiry is judged against (tests); defaults to now. */
  now?: Date;
}

export async function loadGatewayIdentity(opts: LoadGatewayIdentityOptions): Promise<GatewayIdentity> {
  const g = opts.settings.gateway;
  const now = opts.now ?? new Date();
  if (g.certFile !== undefined && g.keyFile !== undefined) return loadExternal(opts, g.certFile, g.keyFile, now);
  return loadGenerated(opts, now);
}

// ---------------------------------------------------------------- generated mode

type CacheState =
  | { kind: 'absent' }
  | { kind: 'incomplete'; present: string[]; missing: string[] }
  | ({ kind: 'complete' } & IdentityPems);

async function readOptional(file: string): Promise<string | undefined> {
  try {
    return await readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new GatewayIdentityError('CACHE_UNREADABLE', `cannot read the gateway TLS cache file ${file}: ${(err as Error).message}`, { cause: err });
  }
}

async function readCache(dir: string): Promise<CacheState> {
  const [caPem, certPem, keyPem] = await Promise.all([
    readOptional(path.join(dir, CACHE_FILES.ca)),
    readOptional(path.join(dir, CACHE_FILES.cert)),
    readOptional(path.join(dir, CACHE_FILES.key)),
  ]);
  if (caPem !== undefined && certPem !== undefined && keyPem !== undefined) return { kind: 'complete', caPem, certPem, keyPem };
  const files: Array<[string, string | undefined]> = [[CACHE_FILES.ca, caPem], [CACHE_FILES.cert, certPem], [CACHE_FILES.key, keyPem]];
  const present = files.filter(([, v]) => v !== undefined).map(([n]) => n);
  if (present.length === 0) return { kind: 'absent' };
  return { kind: 'incomplete', present, missing: files.filter(([, v]) => v === undefined).map(([n]) => n) };
}

interface StoredRow { ca_cert_pem: string; cert_pem: string; key_encrypted: Buffer }

async function readStored(db: pg.Pool | pg.PoolClient, secretBox: SecretBox): Promise<IdentityPems | undefined> {
  const { rows } = await db.query<StoredRow>('select ca_cert_pem, cert_pem, key_encrypted from gateway_tls_identity');
  const row = rows[0];
  if (!row) return undefined;
  // A wrong ZENOVA_SECRET_ENC_KEY surfaces here as SecretBoxError with its own clear message.
  const keyPem = secretBox.open(row.key_encrypted, KEY_CONTEXT).toString('utf8');
  return { caPem: row.ca_cert_pem, certPem: row.cert_pem, keyPem };
}

async function insertStored(client: pg.PoolClient, identity: IdentityPems, hosts: readonly string[], secretBox: SecretBox): Promise<void> {
  await client.query(
    `insert into gateway_tls_identity (ca_cert_pem, cert_pem, key_encrypted, hosts, not_after)
     values ($1, $2, $3, $4, $5)`,
    [identity.caPem, identity.certPem, secretBox.seal(identity.keyPem, KEY_CONTEXT), hosts, certNotAfter(identity.certPem)],
  );
}

/** Runs `fn` in a transaction holding the identity lock, so replicas starting together take turns. */
async function withIdentityLock<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  try {
    await client.query('begin');
    await client.query('select pg_advisory_xact_lock($1::bigint)', [GATEWAY_IDENTITY_LOCK_KEY]);
    const result = await fn(client);
    await client.query('commit');
    return result;
  } catch (err) {
    await client.query('rollback').catch(() => undefined);
    throw err;
  } finally {
    client.release();
  }
}

/** How to start over with a new identity; said in every message that may need it. */
function replaceAdvice(dir: string): string {
  return `to replace the identity, delete the stored one (psql: delete from gateway_tls_identity) and remove ${dir}, then start again: ` +
    'a new CA is generated and every node must be re-enrolled (or given the new CA) to trust it';
}

/** The cache/database pair must be a coherent identity: parseable, key matching, signed by the CA. */
function checkIntegrity(id: IdentityPems, where: string, code: 'CACHE_INVALID' | 'STORED_INVALID', advice: string): void {
  const problem = ((): string | undefined => {
    try {
      new X509Certificate(id.caPem);
    } catch {
      return 'the CA certificate does not parse';
    }
    try {
      new X509Certificate(id.certPem);
    } catch {
      return 'the server certificate does not parse';
    }
    try {
      createPrivateKey(id.keyPem);
    } catch {
      return 'the private key does not parse';
    }
    if (!keyMatchesCert(id.certPem, id.keyPem)) return 'the private key does not belong to the server certificate';
    if (!isIssuedBy(id.certPem, id.caPem)) return 'the server certificate was not issued by the CA certificate';
    return undefined;
  })();
  if (problem !== undefined) {
    throw new GatewayIdentityError(code, `the gateway TLS identity in ${where} is unusable: ${problem}. Refusing to start rather than replace the trust nodes have; ${advice}`);
  }
}

function hostsNotCovered(certPem: string, hosts: readonly string[]): string[] {
  return hosts.filter((h) => !certCovers(certPem, h));
}

function subjectAltNames(certPem: string): string {
  return new X509Certificate(certPem).subjectAltName ?? '(no subject alternative names)';
}

/** Expiry and host coverage: a certificate nodes would refuse is refused here first. */
function checkUsable(
  certPems: { certPem: string; caPem?: string | undefined },
  hosts: readonly string[],
  where: string,
  now: Date,
  advice: string,
): void {
  const certs: Array<[string, string]> = [['server certificate', certPems.certPem]];
  if (certPems.caPem) certs.push(['CA certificate', certPems.caPem]);
  for (const [label, pem] of certs) {
    const notAfter = certNotAfter(pem);
    if (notAfter.getTime() <= now.getTime()) {
      throw new GatewayIdentityError('EXPIRED', `the gateway TLS ${label} in ${where} expired on ${notAfter.toISOString()}; nodes would refuse it. ${advice}`);
    }
    const notBefore = certNotBefore(pem);
    if (notBefore.getTime() > now.getTime()) {
      throw new GatewayIdentityError('NOT_YET_VALID', `the gateway TLS ${label} in ${where} is not valid before ${notBefore.toISOString()}; check this host's clock. ${advice}`);
    }
  }
  const missing = hostsNotCovered(certPems.certPem, hosts);
  if (missing.length > 0) {
    throw new GatewayIdentityError('HOSTS_NOT_COVERED',
      `the gateway TLS certificate in ${where} does not cover ${missing.join(', ')} from ZENOVA_GATEWAY_HOSTS ` +
      `(it covers ${subjectAltNames(certPems.certPem)}); nodes dialling that address would fail host-name verification. ` +
      `Remove ${missing.length === 1 ? 'it' : 'them'} from ZENOVA_GATEWAY_HOSTS, or ${advice}`);
  }
}

function sameCert(a: string, b: string): boolean {
  return new X509Certificate(a).raw.equals(new X509Certificate(b).raw);
}

function checkCacheMatchesStored(cache: IdentityPems, stored: IdentityPems, dir: string): void {
  const differs: string[] = [];
  if (!sameCert(cache.caPem, stored.caPem)) differs.push(`CA (cache ${certFingerprint(cache.caPem)}, database ${certFingerprint(stored.caPem)})`);
  if (!sameCert(cache.certPem, stored.certPem)) differs.push(`server certificate (cache ${certFingerprint(cache.certPem)}, database ${certFingerprint(stored.certPem)})`);
  // The cache passed its integrity check, so its key matches its certificate: equal certificates mean equal keys.
  if (differs.length === 0) return;
  throw new GatewayIdentityError('CACHE_MISMATCH',
    `the gateway TLS identity cached in ${dir} differs from the one stored in the database: ${differs.join('; ')} (SHA-256 fingerprints). ` +
    'Refusing to start rather than silently replace the trust nodes have. If the database is right (the cache comes from another ' +
    `installation or an old backup), remove ${dir} and start again: it is restored from the database. If the cache is the identity your ` +
    'nodes trust, delete the stored one (psql: delete from gateway_tls_identity) and start again: the cache is imported.');
}

/** Writes the identity into the cache directory: private (0700), key 0600, each file atomically. */
function writeCache(dir: string, id: IdentityPems): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
  writeFileAtomic(path.join(dir, CACHE_FILES.ca), id.caPem, 0o644);
  writeFileAtomic(path.join(dir, CACHE_FILES.cert), id.certPem, 0o644);
  writeFileAtomic(path.join(dir, CACHE_FILES.key), id.keyPem, 0o600);
}

/** A cached key readable by others is tightened (we own the cache) and reported. */
function tightenKeyMode(dir: string, logger: pino.Logger): void {
  const keyFile = path.join(dir, CACHE_FILES.key);
  const mode = statSync(keyFile).mode & 0o777;
  if ((mode & 0o077) === 0) return;
  chmodSync(keyFile, 0o600);
  logger.warn({ file: keyFile, mode: mode.toString(8) }, 'the cached gateway TLS key was readable by others; its mode is now 0600');
}

async function generateIdentity(hosts: readonly string[]): Promise<IdentityPems> {
  const ca = await createCa(`Zenova Gateway CA ${new Date().toISOString().slice(0, 10)} ${randomUUID().slice(0, 8)}`);
  const server = await issueServerCert(ca, { ...sanFor(hosts), validityDays: GENERATED_CERT_VALIDITY_DAYS });
  return { caPem: ca.certPem, certPem: server.certPem, keyPem: server.keyPem };
}

type Resolution = { outcome: 'stored'; identity: IdentityPems } | { outcome: 'created'; identity: IdentityPems };

async function loadGenerated(opts: LoadGatewayIdentityOptions, now: Date): Promise<GatewayIdentity> {
  const { pool, secretBox, logger } = opts;
  const { hosts, tlsDir: dir, autoGenerate } = opts.settings.gateway;
  const advice = replaceAdvice(dir);
  const cacheWhere = `the local cache ${dir}`;

  const cache = await readCache(dir);
  let stored = await readStored(pool, secretBox);

  if (cache.kind === 'incomplete') {
    const remedy = stored
      ? `the database holds the identity: remove ${dir} and start again to restore it from the database`
      : `the database holds no identity to restore from: put the missing file(s) back from a backup so the cache can be imported, or ${advice}`;
    throw new GatewayIdentityError('CACHE_INCOMPLETE',
      `the gateway TLS cache ${dir} is incomplete: it has ${cache.present.join(', ')} but not ${cache.missing.join(', ')}. ` +
      `Refusing to start rather than replace the trust nodes have; ${remedy}`);
  }
  if (cache.kind === 'complete') {
    checkIntegrity(cache, cacheWhere, 'CACHE_INVALID', stored
      ? `if the database holds the right identity, remove ${dir} and start again to restore it`
      : `restore the cache from a backup, or ${advice}`);
  }

  let source: GatewayIdentitySource;
  if (!stored && cache.kind === 'complete') {
    // Refused before import: a certificate nodes would reject must not become the stored identity.
    checkUsable(cache, hosts, cacheWhere, now, advice);
    const resolution = await withIdentityLock<Resolution>(pool, async (client) => {
      const winner = await readStored(client, secretBox);
      if (winner) return { outcome: 'stored', identity: winner };
      await insertStored(client, cache, hosts, secretBox);
      return { outcome: 'created', identity: cache };
    });
    if (resolution.outcome === 'created') {
      logger.info({ dir, fingerprint: certFingerprint(cache.certPem) }, 'imported the cached gateway TLS identity into the database');
    }
    // Otherwise another replica stored one while we waited: it is checked below like any other.
    stored = resolution.identity;
  } else if (!stored) {
    if (!autoGenerate) {
      throw new GatewayIdentityError('NO_IDENTITY',
        `no gateway TLS identity exists (none in the database, none in ${dir}) and ZENOVA_GATEWAY_TLS_AUTO_GENERATE is false: ` +
        'allow generation, restore the cache or database from a backup, or use an external certificate (ZENOVA_GATEWAY_CERT_FILE, ZENOVA_GATEWAY_KEY_FILE)');
    }
    const resolution = await withIdentityLock<Resolution>(pool, async (client) => {
      const winner = await readStored(client, secretBox);
      if (winner) return { outcome: 'stored', identity: winner };
      const generated = await generateIdentity(hosts);
      await insertStored(client, generated, hosts, secretBox);
      return { outcome: 'created', identity: generated };
    });
    if (resolution.outcome === 'created') {
      writeCache(dir, resolution.identity);
      logger.info({ dir, hosts, fingerprint: certFingerprint(resolution.identity.certPem), caFingerprint: certFingerprint(resolution.identity.caPem) },
        'generated the gateway TLS identity');
      return { ...resolution.identity, source: 'generated' };
    }
    stored = resolution.identity;
  }

  // From here the database holds the identity; the cache is either the same identity or absent.
  checkIntegrity(stored, 'the database', 'STORED_INVALID', advice);
  if (cache.kind === 'complete') checkCacheMatchesStored(cache, stored, dir);
  checkUsable(stored, hosts, 'the database', now, advice);
  const identity = stored;
  if (cache.kind === 'complete') {
    tightenKeyMode(dir, logger);
    source = 'cache';
  } else {
    writeCache(dir, identity);
    logger.info({ dir }, 'restored the gateway TLS cache from the database');
    source = 'database';
  }

  const notAfter = certNotAfter(identity.certPem);
  warnIfExpiringSoon(logger, notAfter, now);
  logger.info({ source, fingerprint: certFingerprint(identity.certPem), notAfter: notAfter.toISOString() }, 'gateway TLS identity loaded');
  return { ...identity, source };
}

/** Nodes refuse an expired gateway certificate (GATEWAY_TLS_EXPIRED): the operator hears of it first. */
function warnIfExpiringSoon(logger: LoadGatewayIdentityOptions['logger'], notAfter: Date, now: Date): void {
  if (notAfter.getTime() - now.getTime() < EXPIRY_WARNING_MS) {
    logger.warn({ notAfter: notAfter.toISOString() }, 'the gateway TLS certificate expires within 30 days');
  }
}

// ---------------------------------------------------------------- external mode

async function readSetting(variable: string, file: string): Promise<string> {
  try {
    return readBoundedRegularFile(file);
  } catch (err) {
    throw new GatewayIdentityError('EXTERNAL_INVALID', `cannot read ${variable} (${file}): ${(err as Error).message}`, { cause: err });
  }
}

async function loadExternal(opts: LoadGatewayIdentityOptions, certFile: string, keyFile: string, now: Date): Promise<GatewayIdentity> {
  const { hosts, trustBundleFile } = opts.settings.gateway;
  const invalid = (message: string): GatewayIdentityError => new GatewayIdentityError('EXTERNAL_INVALID', message);
  const certText = await readSetting('ZENOVA_GATEWAY_CERT_FILE', certFile);
  const keyPem = await readSetting('ZENOVA_GATEWAY_KEY_FILE', keyFile);

  let chain: string[];
  try {
    chain = splitPemCertificates(certText);
  } catch {
    throw invalid(`ZENOVA_GATEWAY_CERT_FILE (${certFile}) holds a certificate that does not parse`);
  }
  const leaf = chain[0];
  if (leaf === undefined) throw invalid(`ZENOVA_GATEWAY_CERT_FILE (${certFile}) holds no PEM certificate`);
  try {
    createPrivateKey(keyPem);
  } catch {
    throw invalid(`ZENOVA_GATEWAY_KEY_FILE (${keyFile}) is not a readable PEM private key (an encrypted key is not supported)`);
  }
  if (!keyMatchesCert(leaf, keyPem)) {
    throw invalid(`ZENOVA_GATEWAY_KEY_FILE (${keyFile}) is not the private key of the certificate in ZENOVA_GATEWAY_CERT_FILE (${certFile})`);
  }
  checkUsable({ certPem: leaf }, hosts, `ZENOVA_GATEWAY_CERT_FILE (${certFile})`, now, 'install a certificate that is valid and covers every gateway host');

  let caPem = '';
  if (trustBundleFile !== undefined) {
    const bundleText = await readSetting('ZENOVA_GATEWAY_TRUST_BUNDLE', trustBundleFile);
    let bundle: string[];
    try {
      bundle = splitPemCertificates(bundleText);
    } catch {
      throw invalid(`ZENOVA_GATEWAY_TRUST_BUNDLE (${trustBundleFile}) holds a certificate that does not parse`);
    }
    if (bundle.length === 0) throw invalid(`ZENOVA_GATEWAY_TRUST_BUNDLE (${trustBundleFile}) holds no PEM certificate`);
    // Nodes get this bundle as their only trust: it must anchor the chain the gateway presents.
    const anchored = chain.some((c) => bundle.some((b) => sameCert(c, b) || isIssuedBy(c, b)));
    if (!anchored) {
      throw invalid(`ZENOVA_GATEWAY_TRUST_BUNDLE (${trustBundleFile}) does not contain the CA that issued ZENOVA_GATEWAY_CERT_FILE ` +
        `(issuer: ${new X509Certificate(chain.at(-1) ?? leaf).issuer.replace(/\n/g, ', ')}); nodes given this bundle would refuse the gateway`);
    }
    caPem = bundle.join('');
  }

  const { rows } = await opts.pool.query<{ n: number }>('select count(*)::int as n from gateway_tls_identity');
  if ((rows[0]?.n ?? 0) > 0) {
    opts.logger.warn('external gateway certificate in use; the generated identity stored in the database is ignored (nodes enrolled against it must be given the new trust)');
  }
  // An external (e.g. ACME) certificate is renewed outside the control plane, which reads it at start only.
  warnIfExpiringSoon(opts.logger, certNotAfter(leaf), now);
  opts.logger.info({ source: 'external', fingerprint: certFingerprint(leaf), notAfter: certNotAfter(leaf).toISOString(), systemTrust: caPem === '' },
    'gateway TLS identity loaded');
  return { certPem: chain.join(''), keyPem, caPem, source: 'external' };
}
