/**
 * credential.json: the node's current credential and, after a rotation, the one it replaced.
 *
 * A rotated credential is stored (atomically, durably) before the node acknowledges it, and the
 * credential the session was using is kept as `previous`. If the node crashes between the write
 * and the acknowledgement, or the control plane never recorded the rotation, the next start can
 * fall back to `previous`: the control plane accepts it until one handover window after it learns
 * the node holds the new one (its ack, or the node connecting with it).
 */
import { statSync } from 'node:fs';
import { z } from 'zod';
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
