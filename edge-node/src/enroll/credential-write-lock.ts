/**
 * The enrollment's write of credential.json (and identity.json) under the lock a serving node stores
 * a rotated credential under (credential-store.ts storeRotatedCredentialIfUnchanged,
 * `config-apply.lock`). Unlocked, a rotation the node checked against the old file just before
 * `enroll --reenroll` wrote would land over the new credential: the file would hold a credential
 * the re-enrollment revoked, and the node could not connect until enrolled again.
 *
 * As root (`sudo zenova-node enroll`) in a state dir of another user (the node's), the lock is
 * taken and the files written as that user (state-dir-owner.ts): that user controls the lock file's
 * name and could swap a symbolic link in between two tries of the lock, each of which opens, chmods
 * and may truncate the file by name; as that user, the link reaches nothing root's. The lock file
 * (created if missing) and the files written are then the node's, so it can still take the lock and
 * read its credential.
 */
import { lstatSync } from 'node:fs';
import { credentialLockFile } from '../state/credential-store.js';
import { underOpenLockAsync } from '../state/open-lock.js';
import { StateFileError } from '../state/state-store.js';
import type { StateStore } from '../state/state-store.js';
import { EnrollError } from './enroll-errors.js';
import type { EnrollMode } from './enroll-errors.js';
import { asStateDirOwner, stateDirOwnerToActAs } from './state-dir-owner.js';

/**
 * How long the enrollment waits for the lock. A node holds it for moments (a rotation's store, a
 * config push's apply); the wait comes after the token was redeemed, so it is generous.
 */
export const ENROLL_LOCK_WAIT_MS = 30_000;

/** What a refusal after the redemption adds: nothing is saved, and how to go on. */
function nothingSaved(store: StateStore, mode: EnrollMode): string {
  return `the token was redeemed but nothing was saved in ${store.dir}. Run the same command again within 15 minutes, or issue a new ${mode} command`;
}

/**
 * Refuses a lock file that is not a regular file (a symbolic link planted in place of the empty file
 * node-edge creates). Acting as the dir's owner, a link swapped in later reaches only what that user
 * may open.
 */
function refuseUnsafeLockFile(store: StateStore, lockFile: string, mode: EnrollMode): void {
  let isFile: boolean;
  try {
    isFile = lstatSync(lockFile).isFile();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return; // created by the lock, as the owner
    throw err;
  }
  if (!isFile) {
    throw new EnrollError('STATE_LOCK_UNSAFE', `${lockFile} is not a regular file, so it is not taken as the lock; remove it (node-edge creates it again), then: ${nothingSaved(store, mode)}`);
  }
}

/** The lock stayed taken past the wait (open-lock.ts's refusal, whose cause is SQLite's SQLITE_BUSY). */
function isLockBusy(err: unknown, lockFile: string): boolean {
  return err instanceof StateFileError && err.file === lockFile && (err.cause as { code?: unknown } | undefined)?.code === 'SQLITE_BUSY';
}

/**
 * Runs `write` holding the state dir's credential lock, waiting up to `waitMs` for a node-edge
 * process that holds it. EnrollError STATE_LOCKED when it stays held, STATE_LOCK_FAILED when it
 * cannot be taken at all (nothing written either way). As root in a state dir of another user, the
 * lock is taken and `write` runs as that user, and a lock file that is not a regular file is
 * refused, STATE_LOCK_UNSAFE.
 */
export async function underCredentialWriteLock<T>(store: StateStore, mode: EnrollMode, write: () => Promise<T>, waitMs = ENROLL_LOCK_WAIT_MS): Promise<T> {
  const lockFile = credentialLockFile(store);
  const owner = stateDirOwnerToActAs(store.dir);
  let writing = false;
  try {
    return await asStateDirOwner(owner, async () => {
      if (owner !== undefined) refuseUnsafeLockFile(store, lockFile, mode);
      return underOpenLockAsync(lockFile, () => {
        writing = true;
        return write();
      }, waitMs);
    });
  } catch (err) {
    if (err instanceof EnrollError) throw err;
    if (writing) throw err;
    if (isLockBusy(err, lockFile)) {
      throw new EnrollError(
        'STATE_LOCKED',
        `${lockFile} stayed locked for over ${waitMs / 1000} s (a node-edge process serving from ${store.dir} holds it for moments while it stores a rotated credential or applies a config; one stopped while holding it keeps it): ${nothingSaved(store, mode)}`,
        { cause: err },
      );
    }
    throw new EnrollError('STATE_LOCK_FAILED', `cannot take the lock ${lockFile} (${(err as Error).message}): ${nothingSaved(store, mode)}`, { cause: err });
  }
}
