/**
 * The dev stack's console/API HTTPS identity: a self-signed CA (kept, so office-primary and any
 * node enrolled against the dev stack keep trusting it across restarts) and a server certificate
 * for 127.0.0.1 and localhost. Written once into <home>/tls/.
 */
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { writeFileAtomic } from '../fs/atomic-write.js';
import { certCovers, certNotAfter, createCa, issueServerCert } from '../tls/self-signed.js';

export interface DevTls {
  caFile: string;
  caPem: string;
  certFile: string;
  keyFile: string;
}

const HOSTS = { dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'] };
const RENEW_BEFORE_MS = 7 * 24 * 3600_000;

export async function ensureDevTls(home: string): Promise<DevTls> {
  const dir = join(home, 'tls');
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const files = { caFile: join(dir, 'ca.crt'), caKey: join(dir, 'ca.key'), certFile: join(dir, 'tls.crt'), keyFile: join(dir, 'tls.key') };
  if (!existsSync(files.caFile) || !existsSync(files.caKey)) {
    const ca = await createCa('Zenova Gateway dev stack CA');
    writeFileAtomic(files.caKey, ca.keyPem, 0o600);
    writeFileAtomic(files.caFile, ca.certPem, 0o644);
  }
  const ca = { certPem: readFileSync(files.caFile, 'utf8'), keyPem: readFileSync(files.caKey, 'utf8') };
  const current = existsSync(files.certFile) ? readFileSync(files.certFile, 'utf8') : undefined;
  const fresh = current && certCovers(current, '127.0.0.1') && certCovers(current, 'localhost') && certNotAfter(current).getTime() - Date.now() > RENEW_BEFORE_MS;
  if (!fresh || !existsSync(files.keyFile)) {
    const cert = await issueServerCert(ca, { ...HOSTS, validityDays: 397 });
    writeFileAtomic(files.keyFile, cert.keyPem, 0o600);
    writeFileAtomic(files.certFile, cert.certPem, 0o644);
  }
  return { caFile: files.caFile, caPem: ca.certPem, certFile: files.certFile, keyFile: files.keyFile };
}
