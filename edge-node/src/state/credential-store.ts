/**
 * credential.json: the node's current credential and, after a rotation, the one it replaced.
 *
 * A rotated credential is stored (atomically, durably) before the node acknowledges it, and the
 * credential the session was using is kept as `previous`. If the node crashes between the write
 * and the acknowledgement, or the control plane never recorded the rotation, the next start can
 * fall back to `previous`: the control plane accepts it until one handover window after it learns
 * the node holds the new one (its ack, or the node connecting with it).
 *
 * A session stores its rotation only while credential.json still holds what the session started
 * from (storeRotatedCredentialIfUnchanged): two links of one node for a moment, or an
 * `enroll --reenroll` writing meanwhile, must not have an older rotation land over a newer file.
 * The enrollment writes under the same lock, so the check and the rotation's write are never split
 * by it.
 */
import { statSync } from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { CONFIG_APPLY_LOCK_FILE } from '../config/applied-version.js';
import { underOpenLockAsync } from './open-lock.js';
import { describeIssues } from '../zod-issues.js';
import { StateFileError } from './state-store.js';
import type { StateStore } from './state-store.js';

export const CREDENTIAL_FILE = 'credential.json';

/** Printable ASCII without spaces: the credential travels as a gRPC metadata value. */
const METADATA_SAFE = /^[\x21-\x7e]+$/;

export const storedCredentialSchema = z.object({
  id: z.string().min(1).max(128),
  /** The full opaque credential string presented to the gateway. A secret. */
  secret: z.string().min(1).max(1024).regex(METADATA_SAFE, 'must be printable ASCII without spaces'),
  expiresAt: z.iso.datetime({ offset: true }),
});

export const credentialFileSchema = z.object({
  current: storedCredentialSchema,
  previous: storedCredentialSchema.optional(),
});

export type StoredCredential = z.infer<typeof storedCredentialSchema>;
export type CredentialFile = z.infer<typeof credentialFileSchema>;

export async function loadCredentials(store: StateStore): Promise<CredentialFile | undefined> {
  const value = await store.read(CREDENTIAL_FILE);
  if (value === undefined) return undefined;
  const parsed = credentialFileSchema.safeParse(value);
  // The issue paths name fields only; zod never echoes the secret value in these messages.
  if (!parsed.success) throw new StateFileError(store.path(CREDENTIAL_FILE), describeIssues(parsed.error).join('; '));
  return parsed.data;
}

export async function saveCredentials(store: StateStore, credentials: CredentialFile): Promise<void> {
  await store.write(CREDENTIAL_FILE, credentialFileSchema.parse(credentials));
}

/**
 * Makes `next` the current credential and keeps `inUse` (the one the live session authenticated
 * with) as previous. Resolves only once the file is durable, so the caller may then acknowledge.
 */
export async function storeRotatedCredential(store: StateStore, next: StoredCredential, inUse: StoredCredential): Promise<CredentialFile> {
  const file: CredentialFile = inUse.id === next.id ? { current: next } : { current: next, previous: inUse };
  await saveCredentials(store, file);
  return file;
}

/**
 * The lock credential.json is written under, by a rotation's compare-and-swap and by an enrollment
 * (enroll/credential-write-lock.ts): the one replicas share for the state dir's writes
 * (config-apply.lock: a new lock file name would be a file the installer does not know in the data dir).
 */
export function credentialLockFile(store: StateStore): string {
  return path.join(store.dir, CONFIG_APPLY_LOCK_FILE);
}

/** How a compare-and-swap store of a rotation went. */
export type RotationStoreOutcome = { stored: true; file: CredentialFile } | { stored: false; reason: string };

/** The credential ids of a file, as the reason of a refused store names them (ids are not secrets). */
function describeFile(file: CredentialFile): string {
  return `current ${file.current.id}${file.previous !== undefined ? `, previous ${file.previous.id}` : ''}`;
}

/**
 * storeRotatedCredential as a compare-and-swap: only while credential.json still is `expected` (the
 * file the session started from, or the session's own last write: same current and previous ids),
 * checked and written under credentialLockFile, which an enrollment writes under too. Otherwise
 * nothing is written: another process (a second link for a moment after a replica took the link
 * over) or a re-enrollment wrote a newer credential, and writing over it would leave the file
 * holding a credential the control plane revoked and a previous one whose handover window runs
 * out, the working one only in that process's memory. The caller then does not acknowledge: the
 * control plane keeps the credential in use valid while its successor is unacknowledged.
 * A file that already holds `next` (this rotation stored before) counts as stored.
 */
export async function storeRotatedCredentialIfUnchanged(
  store: StateStore,
  next: StoredCredential,
  inUse: StoredCredential,
  expected: CredentialFile,
): Promise<RotationStoreOutcome> {
  return underOpenLockAsync(credentialLockFile(store), async () => {
    const found = await loadCredentials(store);
    if (found === undefined) return { stored: false, reason: `${CREDENTIAL_FILE} is gone (it held ${describeFile(expected)} when this session started)` };
    if (found.current.id === next.id) return { stored: true, file: found };
    if (found.current.id !== expected.current.id || found.previous?.id !== expected.previous?.id) {
      return {
        stored: false,
        reason: `${CREDENTIAL_FILE} changed since this session started (it held ${describeFile(expected)}, now ${describeFile(found)}): another node-edge process or a re-enrollment wrote it`,
      };
    }
    return { stored: true, file: await storeRotatedCredential(store, next, inUse) };
  });
}

/** Whether a credential's expiry has passed at `now`. */
export function isExpired(credential: StoredCredential, now = Date.now()): boolean {
  return Date.parse(credential.expiresAt) <= now;
}

/**
 * The share of a credential's life left below which its rotation has failed: the control plane
 * rotates a credential on a live link once it is ZENOVA_CREDENTIAL_ROTATE_AFTER_SECONDS old, at
 * most half its validity (default 1 day of 30), so a held credential has at least half its life
 * left; 40 % leaves a tenth of the life as slack for a link that was briefly away. Judged against
 * each credential's own life, so a control plane with short validities (hours) is no false alarm.
 */
export const CREDENTIAL_RENEW_SHARE = 0.4;

/**
 * When this node took the credential it holds: credential.json's modification time (written
 * atomically when a credential is received or rotated in). The file keeps no issue time; a later
 * rewrite only makes the life look shorter, so the warning comes later, never falsely.
 */
export function credentialHeldSince(store: StateStore): number | undefined {
  try {
    return statSync(store.path(CREDENTIAL_FILE)).mtimeMs;
  } catch {
    return undefined;
  }
}

/** Whether the credential is still valid but has less than CREDENTIAL_RENEW_SHARE of its life (since `heldSince`) left at `now`. */
export function expiresSoon(credential: StoredCredential, heldSince: number | undefined, now = Date.now()): boolean {
  if (isExpired(credential, now) || heldSince === undefined) return false;
  const expiresAt = Date.parse(credential.expiresAt);
  const life = expiresAt - heldSince;
  return life > 0 && expiresAt - now < CREDENTIAL_RENEW_SHARE * life;
}

/** What to do about a credential that expires soon (status and doctor say the same). */
export const CREDENTIAL_RENEW_ADVICE =
  'it should have been rotated by now: the control plane rotates credentials only over a live control link, so check the link (`zenova-node status`: last error) and get it connected; ' +
  'once the credential has expired only a re-enrollment helps (`zenova gateway-node reenroll-command NAME` on the control plane)';
