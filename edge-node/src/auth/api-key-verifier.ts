// Caller API keys: the node holds only SHA-256 hashes of keys. The presented key is hashed and
// looked up in the request's config snapshot; what the key may do (status, expiry, account,
// allowed models) decides the code a refused caller gets.
import { createHash } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { RuntimeApiKey, RuntimeConfig } from '../config/runtime-config.js';
import { zenovaError } from '../errors.js';

/** Longer "keys" are refused before hashing; no real key comes close. */
const MAX_KEY_LENGTH = 1024;

export interface AuthenticatedKey {
  /** The key's config id: safe to log, unlike the key. */
  id: string;
  name?: string;
  accountId: string | null;
  /** null = every alias the node routes. */
  allowedModels: ReadonlySet<string> | null;
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

/**
 * The config's entry for the caller's key, whatever its standing; `undefined` when the config
 * requires no key (a local file without apiKeys). Throws ZN_ERR_API_KEY_MISSING / _INVALID.
 */
export function identifyCaller(config: RuntimeConfig, headers: IncomingHttpHeaders): RuntimeApiKey | undefined {
  if (config.apiKeys === null) return undefined;
  const presented = presentedApiKey(headers);
  if (presented === undefined) throw zenovaError('ZN_ERR_API_KEY_MISSING');
  if (presented.length > MAX_KEY_LENGTH) throw zenovaError('ZN_ERR_API_KEY_INVALID');
  // A map lookup by the digest: timing can at most hint at digests of stored keys, which do not
  // lead back to a key (SHA-256 preimages), so no constant-time scan over every key is needed.
  const hash = createHash('sha256').update(presented, 'utf8').digest('hex');
  const key = config.apiKeys.get(hash);
  if (key === undefined) throw zenovaError('ZN_ERR_API_KEY_INVALID');
  return key;
}

/** `key` if it may be used now; throws ZN_ERR_API_KEY_REVOKED / _EXPIRED / _INVALID or ZN_ERR_ACCOUNT_SUSPENDED. */
export function checkKeyStanding(config: RuntimeConfig, key: RuntimeApiKey, now = Date.now()): AuthenticatedKey {
  if (key.status === 'revoked') throw zenovaError('ZN_ERR_API_KEY_REVOKED');
  if (key.expiresAtMs !== null && key.expiresAtMs <= now) throw zenovaError('ZN_ERR_API_KEY_EXPIRED');
  if (key.accountId !== null) {
    const account = config.accounts.get(key.accountId);
    // A key whose account is gone (deleted) is no longer a key.
    if (account === undefined) throw zenovaError('ZN_ERR_API_KEY_INVALID');
    if (account.status === 'suspended') throw zenovaError('ZN_ERR_ACCOUNT_SUSPENDED');
  }
  return {
    id: key.id,
    ...(key.name === undefined ? {} : { name: key.name }),
    accountId: key.accountId,
    allowedModels: key.allowedModels,
  };
}
