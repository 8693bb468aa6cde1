/**
 * `sudo zenova-node enroll` in a state dir of the node's user: the enrollment's writes there run with
 * the effective uid and gid (and the only group) of the dir's owner, never as root. That user
 * controls every name in the dir: a lock file or a `retired` entry swapped for a symbolic link
 * between a check and a use would otherwise have root open, chmod, truncate or fill whatever the
 * link points at. As the owner, such a link reaches only what the owner could reach anyway, and the
 * files written (credential.json, identity.json, the lock file) are the owner's, so the node can read
 * them. Only the effective ids change: the real and saved uid stay 0, so root's are taken back after.
 *
 * Process-wide (the kernel's credentials; glibc applies them to every thread, libuv's pool too): for
 * the enroll command, which does nothing else meanwhile. No switch as another user, or as root in a
 * dir root owns (the installer's data dir).
 */
import { statSync } from 'node:fs';

export interface StateDirOwner {
  readonly uid: number;
  readonly gid: number;
}

/** The owner to act as: set only when this process is root and the state dir belongs to another uid. */
export function stateDirOwnerToActAs(dir: string): StateDirOwner | undefined {
  if (process.geteuid?.() !== 0) return undefined;
  const info = statSync(dir);
  return info.uid === 0 ? undefined : { uid: info.uid, gid: info.gid };
}

/**
 * Runs `fn` as `owner` (effective ids), then as root again, whether it resolves or throws. Nested
 * calls run inside the outer switch. Without an owner, runs `fn` as it is.
 */
export async function asStateDirOwner<T>(owner: StateDirOwner | undefined, fn: () => Promise<T>): Promise<T> {
  if (owner === undefined || process.geteuid?.() === owner.uid) return fn();
  const groups = process.getgroups!();
  const egid = process.getegid!();
  // Root's supplementary groups (gid 0 among them) would still open group-root files: dropped too.
  process.setgroups!([owner.gid]);
  try {
    process.setegid!(owner.gid);
    try {
      process.seteuid!(owner.uid);
      try {
        return await fn();
      } finally {
        process.seteuid!(0);
      }
    } finally {
      process.setegid!(egid);
    }
  } finally {
    process.setgroups!(groups);
  }
}
