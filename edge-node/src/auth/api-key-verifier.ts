// Caller API keys (the seed of full auth): the node holds only SHA-256 hashes and compares the
// hash of the presented key against all of them in constant time.
import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { ApiKeyConfig } from '../config/local-config.js';
import { zenovaError } from '../errors.js';

/** Longer "keys" are refused before hashing; no real key comes close. */
const MAX_KEY_LENGTH = 1024;

export interface AuthenticatedKey {
  /** The key's config id: safe to log, unlike the key. */
  id: string;
  name?: string;
}

export interface ApiKeyVerifier {
  /** False when the config sets no `apiKeys`: the node is open (development). */
  readonly required: boolean;
  /** The matching key, `undefined` when keys are not required; throws ZN_ERR_API_KEY_* otherwise. */
  verify(headers: IncomingHttpHeaders): AuthenticatedKey | undefined;
}

/** The key from `Authorization: Bearer <key>`, else from `x-api-key`. */
export function presentedApiKey(headers: IncomingHttpHeaders): string | undefined {
  const auth = headers.authorization;
  if (typeof auth === 'string') {
    const match = /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(auth);
    if (match?.[1]) return match[1];
  }
  const header = headers['x-api-key'];
  const value = Array.isArray(header) ? header[0] : header;
  const trimmed = value?.trim();
  return trimmed ? trimmed : undefined;
}

export function createApiKeyVerifier(keys: readonly ApiKeyConfig[] | undefined): ApiKeyVerifier {
  if (keys === undefined) return { required: false, verify: () => undefined };
  const stored = keys.map((k) => ({ key: { id: k.id, ...(k.name === undefined ? {} : { name: k.name }) }, hash: Buffer.from(k.sha256, 'hex') }));
  return {
    required: true,
    verify(headers) {
      const presented = presentedApiKey(headers);
      if (presented === undefined) throw zenovaError('ZN_ERR_API_KEY_MISSING');
      if (presented.length > MAX_KEY_LENGTH) throw zenovaError('ZN_ERR_API_KEY_INVALID');
      const hash = createHash('sha256').update(presented, 'utf8').digest();
      // Compare against every stored hash, without stopping at a match, so timing says nothing
      // about which (or whether an early) entry matched.
      let found: AuthenticatedKey | undefined;
      for (const entry of stored) {
        if (timingSafeEqual(hash, entry.hash) && found === undefined) found = entry.key;
      }
      if (found === undefined) throw zenovaError('ZN_ERR_API_KEY_INVALID');
      return found;
    },
  };
}
