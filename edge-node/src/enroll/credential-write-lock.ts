/**
 * The enrollment's write of credential.json (and identity.json) under the lock a serving node stores
 * a rotated credential under (credential-store.ts storeRotatedCredentialIfUnchanged,
 * `config-apply.lock`). Unlocked, a rotation the node checked against the old file just before
 * `enroll --reenroll` wrote would land over the new credential: the file would hold a credential
 * the re-enrollment revoked, and the node could not connect until enrolled again.
 *
 * The lock file must stay one the node can open: as root (`sudo zenova-node enroll`) in a state dir
 * of another user (the node's), a lock file this process creates would be root's at 0600, and the
 * node's next rotation or config apply could not take the lock. It is created with the state dir's
 * owner and group instead. (The installer's data dir is root's, as node-edge is: nothing to do there.)
 */
import { closeSync, constants, fchownSync, lstatSync, openSync, statSync } from 'node:fs';
import { credentialLockFile } from '../state/credential-store.js';
import { underOpenLockAsync } from '../state/open-lock.js';
import { STATE_FILE_MODE, StateFileError } from '../state/state-store.js';
import type { StateStore } from '../state/state-store.js';
import { EnrollError } from './enroll-errors.js';
import type { EnrollMode } from './enroll-errors.js';

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
 * As root, when files this process creates would not be the state dir owner's: creates the lock
 * file, if missing, owned by the dir's owner and group (0600), and refuses a lock file that is not
 * a regular file (a symbolic link planted there would have root open and chmod its target).
 */
function prepareLockFile(store: StateStore, lockFile: string, mode: EnrollMode): void {
  if (process.geteuid?.() !== 0) return;
  const dir = statSync(store.dir);
  if (dir.uid === process.geteuid() && dir.gid === process.getegid?.()) return;
  let fd: number;
  try {
    // O_EXCL with O_NOFOLLOW: never follows or reuses what is at the name.
    fd = openSync(lockFile, constants.O_RDONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, STATE_FILE_MODE);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    // The node's own (or one given back before): left as it is, if it is a file.
    if (!lstatSync(lockFile).isFile()) {
      throw new EnrollError('STATE_LOCK_UNSAFE', `${lockFile} is not a regular file, so it is not opened as root; remove it (node-edge creates it again), then: ${nothingSaved(store, mode)}`);
    }
    return;
  }
  try {
    fchownSync(fd, dir.uid, dir.gid);
  } finally {
    closeSync(fd);
  }
}

/** The lock stayed taken past the wait (open-lock.ts's refusal, whose cause is SQLite's SQLITE_BUSY). */
function isLockBusy(err: unknown, lockFile: string): boolean {
  return err instanceof StateFileError && err.file === lockFile && (err.cause as { code?: unknown } | undefined)?.code === 'SQLITE_BUSY';
}

/**
 * Runs `write` holding the state dir's credential lock, waiting up to `waitMs` for a node-edge
 * process that holds it. EnrollError STATE_LOCKED when it stays held, STATE_LOCK_FAILED when it
 * cannot be taken at all (nothing written either way).
 */
export async function underCredentialWriteLock<T>(store: StateStore, mode: EnrollMode, write: () => Promise<T>, waitMs = ENROLL_LOCK_WAIT_MS): Promise<T> {
  const lockFile = credentialLockFile(store);
  prepareLockFile(store, lockFile, mode);
  let writing = false;
  try {
    return await underOpenLockAsync(lockFile, () => {
      writing = true;
      return write();
    }, waitMs);
  } catch (err) {
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
