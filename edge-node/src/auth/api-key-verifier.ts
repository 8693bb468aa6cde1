// Caller API keys: the node holds only SHA-256 hashes of keys. The presented key is hashed and
// looked up in the request's config snapshot; what the key may do (status, expiry, account,
// allowed models) decides the code a refused caller gets.
import { hash, timingSafeEqual } from 'node:crypto';
import type { RuntimeApiKey, RuntimeConfig } from '../config/runtime-config.js';
import type { ErrorCode } from '../errors.js';
import type { CallerKey } from '../pipeline/context.js';

/** Longer "keys" are refused before hashing; no real key comes close. */
const MAX_KEY_LENGTH = 1024;
const NO_LIMITS = Object.freeze({});

export type PresentedKey = { ok: true; key: string } | { ok: false; code: ErrorCode };

const BEARER = /^Bearer(?:[ \t]+(\S+))?[ \t]*$/i;
const BEARER_SCHEME = /^Bearer(?:[ \t]|$)/i;

/**
 * The key from `Authorization: Bearer <key>` or `x-api-key`, read from the request's header lines
 * as sent (`rawHeaders`: name, value, name, value…): Node's merged `headers` keep only the first of
 * repeated `Authorization` lines and join repeated `x-api-key` lines with ", ", so one key would
 * silently win, or the same key sent twice be refused. Every line counts: the same key in several
 * lines is one key, two different keys are ZN_ERR_API_KEY_CONFLICT rather than one silently
 * winning. A Bearer line that is not `Bearer <one token>` is ZN_ERR_API_KEY_MALFORMED (an empty
 * one, or `Bearer` with no token, counts as absent). An Authorization line of another scheme
 * (`Basic …`, often a proxy's own credentials) is ignored when another line carries the key, and
 * MALFORMED only when there is none.
 */
export function presentedApiKey(rawHeaders: readonly string[]): PresentedKey {
  let key: string | undefined;
  let conflict = false;
  let malformed = false;
  let otherScheme = false;
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const name = rawHeaders[i] as string;
    let found: string | undefined;
    // By length first: most header names are neither, and no string is made for them.
    if (name.length === 9 && (name === 'x-api-key' || name.toLowerCase() === 'x-api-key')) {
      found = (rawHeaders[i + 1] as string).trim() || undefined;
    } else if (name.length === 13 && (name === 'authorization' || name === 'Authorization' || name.toLowerCase() === 'authorization')) {
      const value = rawHeaders[i + 1] as string;
      const match = BEARER.exec(value);
      if (match !== null) found = match[1];
      else if (BEARER_SCHEME.test(value)) malformed = true;
      else if (value.trim() !== '') otherScheme = true;
    }
    if (found === undefined) continue;
    if (key === undefined) key = found;
    else if (found !== key) conflict = true;
  }
  // A malformed Bearer is the caller's mistake whatever else is sent.
  if (malformed) return { ok: false, code: 'ZN_ERR_API_KEY_MALFORMED' };
  if (conflict) return { ok: false, code: 'ZN_ERR_API_KEY_CONFLICT' };
  if (key === undefined) return { ok: false, code: otherScheme ? 'ZN_ERR_API_KEY_MALFORMED' : 'ZN_ERR_API_KEY_MISSING' };
  return { ok: true, key };
}

export type KeyLookup = { ok: true; key: RuntimeApiKey } | { ok: false; code: ErrorCode };

/**
 * The config's entry for the presented key, whatever its standing, or why there is none
 * (ZN_ERR_API_KEY_MISSING / _MALFORMED / _CONFLICT / _INVALID), from the request's header lines as
 * sent (presentedApiKey). Call only when the config has keys (`apiKeys !== null`).
 */
export function findCallerKey(apiKeys: ReadonlyMap<string, RuntimeApiKey>, rawHeaders: readonly string[]): KeyLookup {
  const found = presentedApiKey(rawHeaders);
  if (!found.ok) return found;
  const presented = found.key;
  if (presented.length > MAX_KEY_LENGTH) return { ok: false, code: 'ZN_ERR_API_KEY_INVALID' };
  // The one-shot hash(): no Hash object per request (about half the cost of createHash's chain).
  const digest = hash('sha256', presented, 'buffer');
  // A map lookup by the digest: timing can at most hint at digests of stored keys, which do not
  // lead back to a key (SHA-256 preimages), so a scan over every key would buy nothing.
  const key = apiKeys.get(digest.toString('hex'));
  if (key === undefined) return { ok: false, code: 'ZN_ERR_API_KEY_INVALID' };
  // Defence in depth: the match is confirmed against the stored digest byte for byte in constant
  // time, so the final yes/no never depends on where two digests first differ, whatever the
  // map's own string comparison does.
  const stored = storedDigest(apiKeys, key);
  if (stored === undefined || !timingSafeEqual(stored, digest)) return { ok: false, code: 'ZN_ERR_API_KEY_INVALID' };
  return { ok: true, key };
}

// The stored digests as bytes, per config's key map (built once; a config is immutable).
const digestsByConfig = new WeakMap<ReadonlyMap<string, RuntimeApiKey>, Map<RuntimeApiKey, Buffer>>();

function storedDigest(apiKeys: ReadonlyMap<string, RuntimeApiKey>, key: RuntimeApiKey): Buffer | undefined {
  let digests = digestsByConfig.get(apiKeys);
  if (digests === undefined) {
    digests = new Map();
    for (const [hash, entry] of apiKeys) {
      const bytes = Buffer.from(hash, 'hex');
      if (bytes.length === 32) digests.set(entry, bytes);
    }
    digestsByConfig.set(apiKeys, digests);
  }
  return digests.get(key);
}

export type KeyStanding = { ok: true; key: CallerKey } | { ok: false; code: ErrorCode };

/** What `key` may do now: ZN_ERR_API_KEY_REVOKED / _EXPIRED / _INVALID (account gone) or ZN_ERR_ACCOUNT_SUSPENDED. */
export function checkKeyStanding(config: RuntimeConfig, key: RuntimeApiKey, now: number): KeyStanding {
  if (key.status === 'revoked') return { ok: false, code: 'ZN_ERR_API_KEY_REVOKED' };
  if (key.expiresAtMs !== null && key.expiresAtMs <= now) return { ok: false, code: 'ZN_ERR_API_KEY_EXPIRED' };
  let accountLimits = NO_LIMITS;
  if (key.accountId !== null) {
    const account = config.accounts.get(key.accountId);
    // A key whose account is gone (deleted) is no longer a key.
    if (account === undefined) return { ok: false, code: 'ZN_ERR_API_KEY_INVALID' };
    if (account.status === 'suspended') return { ok: false, code: 'ZN_ERR_ACCOUNT_SUSPENDED' };
    accountLimits = account.limits;
  }
  return {
    ok: true,
    key: {
      id: key.id,
      accountId: key.accountId,
      keyLimits: key.limits,
      accountLimits,
      guardrailPolicyId: key.guardrailPolicyId,
      allowedModels: key.allowedModels,
      allowedToolServers: key.allowedToolServers,
    },
  };
}
