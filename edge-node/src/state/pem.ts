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
