/**
 * The caller port's HTTPS certificate and key (`serve --tls-cert/--tls-key`): read from local files
 * and checked before anything listens, again on every reload (SIGHUP), by `doctor`, and by the
 * installer before it copies them. Every refusal is one line naming the file: missing, unreadable,
 * not PEM, a key that is not the certificate's, a certificate expired or not yet valid, or a pair
 * OpenSSL will not serve (a damaged later block of the chain, a key too small).
 */
import { X509Certificate, createPrivateKey } from 'node:crypto';
import type { Server as HttpServer } from 'node:http';
import tls from 'node:tls';
import type { SecureContextOptions, TlsOptions } from 'node:tls';
import { readRegularFileWithin } from '../../../proto/src/bounded-regular-file.js';
import { oneLine } from '../one-line.js';

/** Below this many days left a valid certificate is still served, with a warning (log, doctor). */
export const EXPIRY_WARNING_DAYS = 14;
const DAY_MS = 24 * 60 * 60_000;

export interface CallerTlsFiles {
  certFile: string;
  keyFile: string;
}

export interface CallerTlsPair {
  /** The certificate file as read: the leaf first, then any intermediates (sent to callers as the chain). */
  certPem: string;
  keyPem: string;
  /** The leaf's serial number (hex) and end of validity. */
  serial: string;
  notAfter: Date;
  /** Whole days from the check to notAfter (0 on its last day). */
  daysLeft: number;
}

export class CallerTlsError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'CallerTlsError';
  }
}

/** A certificate chain or key larger than this is not one (a wrong path: a log, a disk image). */
export const MAX_TLS_FILE_BYTES = 256 * 1024;

function readPemFile(file: string, what: string): string {
  // Read only if a regular file of at most MAX_TLS_FILE_BYTES: a FIFO or a device (/dev/zero) would block the read or fill memory.
  const read = readRegularFileWithin(file, MAX_TLS_FILE_BYTES);
  if (read.ok) return read.text;
  switch (read.reason) {
    case 'missing':
      throw cannotRead(file, what, 'it does not exist');
    case 'unreadable':
      throw cannotRead(file, what, read.code === 'EACCES' ? 'permission denied' : read.code);
    case 'not-regular':
      throw cannotRead(file, what, read.fileType === 'directory' ? 'it is a directory' : 'it is not a regular file');
    case 'too-large':
      throw new CallerTlsError(`the TLS ${what} file ${file} is larger than ${MAX_TLS_FILE_BYTES / 1024} KiB: not a PEM ${what}`);
  }
}

function cannotRead(file: string, what: string, why: string): CallerTlsError {
  return new CallerTlsError(`cannot read the TLS ${what} file ${file}: ${why}`);
}

/** The first certificate of a PEM file (the leaf), or undefined when there is none readable. */
function leafOf(certPem: string): X509Certificate | undefined {
  const block = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/.exec(certPem)?.[0];
  if (block === undefined) return undefined;
  try {
    return new X509Certificate(block);
  } catch {
    return undefined;
  }
}

/** Reads and checks the pair; throws CallerTlsError with the one line an operator needs. */
export function readCallerTls(files: CallerTlsFiles, now = new Date()): CallerTlsPair {
  const certPem = readPemFile(files.certFile, 'certificate');
  const keyPem = readPemFile(files.keyFile, 'key');
  const leaf = leafOf(certPem);
  if (leaf === undefined) throw new CallerTlsError(`the TLS certificate file ${files.certFile} holds no PEM certificate (-----BEGIN CERTIFICATE-----)`);
  let key;
  try {
    key = createPrivateKey(keyPem);
  } catch {
    throw new CallerTlsError(`the TLS key file ${files.keyFile} holds no readable PEM private key (an encrypted key is not supported)`);
  }
  if (!leaf.checkPrivateKey(key)) {
    throw new CallerTlsError(`the TLS key file ${files.keyFile} is not the private key of the certificate in ${files.certFile}`);
  }
  const notAfter = new Date(leaf.validTo);
  const notBefore = new Date(leaf.validFrom);
  if (notAfter.getTime() <= now.getTime()) throw new CallerTlsError(`the TLS certificate in ${files.certFile} expired on ${notAfter.toISOString()}`);
  if (notBefore.getTime() > now.getTime()) throw new CallerTlsError(`the TLS certificate in ${files.certFile} is not valid before ${notBefore.toISOString()}`);
  const pair = { certPem, keyPem, serial: leaf.serialNumber, notAfter, daysLeft: Math.floor((notAfter.getTime() - now.getTime()) / DAY_MS) };
  // The checks above read only the leaf: OpenSSL reads the whole file (every intermediate) and
  // refuses keys below its security level, and listen or a reload would fail with its bare reason.
  try {
    tls.createSecureContext(serverTlsOptions(pair));
  } catch (err) {
    throw new CallerTlsError(`the TLS certificate file ${files.certFile} with the key ${files.keyFile} cannot be served: OpenSSL refuses them (${openSslReason(err)})`);
  }
  return pair;
}

/** OpenSSL's reason without its code and library ("error:04800066:PEM routines::bad end line" → "bad end line"). */
function openSslReason(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  return oneLine(/^error:[0-9A-Fa-f]+:[^:]*:[^:]*:(.+)$/.exec(message)?.[1] ?? message, 120);
}

/** A warning when the pair expires within EXPIRY_WARNING_DAYS; undefined otherwise. */
export function expiryWarning(pair: CallerTlsPair, certFile: string): string | undefined {
  if (pair.daysLeft >= EXPIRY_WARNING_DAYS) return undefined;
  return `the TLS certificate in ${certFile} expires on ${pair.notAfter.toISOString()} (${pair.daysLeft} day${pair.daysLeft === 1 ? '' : 's'} left): renew it, replace the files and reload (systemctl reload node-edge, or SIGHUP)`;
}

/** The caller port's TLS settings: the pair, and nothing older than TLS 1.2. */
export function serverTlsOptions(pair: CallerTlsPair): TlsOptions & SecureContextOptions {
  return { cert: pair.certPem, key: pair.keyPem, minVersion: 'TLSv1.2' };
}

/**
 * Serves `pair` to every connection from now on; connections already open keep theirs (nothing is
 * dropped). Throws when the server was not started with TLS.
 */
export function reloadCallerTls(server: HttpServer, pair: CallerTlsPair): void {
  const secure: unknown = server;
  if (!(secure instanceof tls.Server)) throw new Error('the caller port was started without TLS; a certificate cannot be loaded into it');
  secure.setSecureContext(serverTlsOptions(pair));
}
