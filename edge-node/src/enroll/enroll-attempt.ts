/**
 * The enrollment attempt file (`enroll-attempt.json` in the state dir, 0600, replaced atomically):
 * the random redemption key this node sends with its redemption, kept under the SHA-256 of the
 * token it belongs to. It is written before the token is first sent, so when the answer is lost
 * (connection cut, crash before the identity was saved) running the same command again — a new
 * process, the same token — sends the same key, and the control plane answers the redemption again
 * instead of refusing the token as used (docs/api.md, "Retrying a lost answer"). It is removed once
 * the identity is saved. The token itself is never stored.
 */
import { createHash, randomBytes } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { z } from 'zod';
import type { StateStore } from '../state/state-store.js';

export const ENROLL_ATTEMPT_FILE = 'enroll-attempt.json';

const attemptSchema = z.object({
  tokenSha256: z.string().regex(/^[0-9a-f]{64}$/),
  redemptionKey: z.string().regex(/^[A-Za-z0-9_-]{43}$/),
  createdAt: z.string().max(64),
});

const tokenSha256 = (token: string): string => createHash('sha256').update(token, 'utf8').digest('hex');

/**
 * The redemption key for `token`: the saved one when the attempt file belongs to this token, else a
 * new one, saved before it is returned. An unreadable or foreign attempt file is replaced.
 */
export async function redemptionKeyFor(store: StateStore, token: string, now: () => number = Date.now): Promise<string> {
  const hash = tokenSha256(token);
  let saved: unknown;
  try {
    saved = await store.read(ENROLL_ATTEMPT_FILE);
  } catch {
    saved = undefined; // corrupt: a fresh attempt replaces it (only a retry of a lost answer is lost)
  }
  const parsed = attemptSchema.safeParse(saved);
  if (parsed.success && parsed.data.tokenSha256 === hash) return parsed.data.redemptionKey;
  const redemptionKey = randomBytes(32).toString('base64url');
  await store.write(ENROLL_ATTEMPT_FILE, { tokenSha256: hash, redemptionKey, createdAt: new Date(now()).toISOString() });
  return redemptionKey;
}

/** Removes the attempt file: the enrollment it belonged to is saved. */
export async function removeEnrollAttempt(store: StateStore): Promise<void> {
  await rm(store.path(ENROLL_ATTEMPT_FILE), { force: true });
}
