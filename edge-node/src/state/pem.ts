// PEM checks shared by the enrollment response and the stored identity: parse, do not just match text.
import { X509Certificate, createPublicKey } from 'node:crypto';
import { z } from 'zod';

export const MAX_PEM_CHARS = 64 * 1024;

/** True when `pem` holds at least one certificate that node:crypto can parse. */
export function isCertificatePem(pem: string): boolean {
  try {
    new X509Certificate(pem);
    return true;
  } catch {
    return false;
  }
}

/** A PEM private key block of any kind (PRIVATE KEY, RSA/EC/ENCRYPTED/OPENSSH PRIVATE KEY). */
const PRIVATE_KEY_BLOCK = /-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----/;

/**
 * True when `text` holds a PEM private key block anywhere (a cert+key bundle): a CA file must hold
 * certificates only, as its content is copied (0644), sent and stored where a key must never go.
 */
export function holdsPrivateKeyPem(text: string): boolean {
  return PRIVATE_KEY_BLOCK.test(text);
}

/**
 * `text` with PEM blocks that run together (`-----END CERTIFICATE----------BEGIN CERTIFICATE-----`,
 * as `cat a.pem b.pem` gives when a.pem lacks its last newline) put on lines of their own: OpenSSL
 * refuses such an END line ("bad end line"), so the first certificate would not parse either.
 */
export function separatePemBlocks(text: string): string {
  return text.replace(/(-----END [A-Z0-9 ]+-----)[ \t]*(?=-----BEGIN )/g, '$1\n');
}

export function isPublicKeyPem(pem: string): boolean {
  try {
    createPublicKey(pem);
    return true;
  } catch {
    return false;
  }
}

export const certificatePemSchema = z
  .string()
  .max(MAX_PEM_CHARS)
  .refine(isCertificatePem, 'must be a PEM certificate');

export const publicKeyPemSchema = z
  .string()
  .max(MAX_PEM_CHARS)
  .refine(isPublicKeyPem, 'must be a PEM public key');
