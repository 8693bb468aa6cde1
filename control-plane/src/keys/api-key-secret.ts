/**
 * API key secrets: `zn_sk_` + 32 random bytes in base64url (43 characters). Only the SHA-256 of the
 * whole secret is stored (and shipped to nodes as hex); the first 12 characters are kept so an
 * operator can tell keys apart, which leaves 37 random characters unknown.
 */
import { createHash, randomBytes } from 'node:crypto';

export const API_KEY_SECRET_PREFIX = 'zn_sk_';
export const API_KEY_SECRET_PATTERN = /^zn_sk_[A-Za-z0-9_-]{43}$/;
export const API_KEY_DISPLAY_PREFIX_CHARS = 12;

export interface NewApiKeySecret {
  /** Shown to the operator once; never stored. */
  secret: string;
  /** sha256 of the secret's UTF-8 bytes. */
  hash: Buffer;
  prefix: string;
}

export function hashApiKeySecret(secret: string): Buffer {
  return createHash('sha256').update(secret, 'utf8').digest();
}

export function generateApiKeySecret(): NewApiKeySecret {
  const secret = `${API_KEY_SECRET_PREFIX}${randomBytes(32).toString('base64url')}`;
  return { secret, hash: hashApiKeySecret(secret), prefix: secret.slice(0, API_KEY_DISPLAY_PREFIX_CHARS) };
}
