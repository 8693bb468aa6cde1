/**
 * credential.json: the node's current credential and, after a rotation, the one it replaced.
 *
 * A rotated credential is stored (atomically, durably) before the node acknowledges it, and the
 * credential the session was using is kept as `previous`. If the node crashes between the write
 * and the acknowledgement, or the control plane never recorded the rotation, the next start can
 * fall back to `previous`: the control plane accepts it until one handover window after it learns
 * the node holds the new one (its ack, or the node connecting with it).
 */
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
