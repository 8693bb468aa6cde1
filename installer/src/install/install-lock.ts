/**
 * One `zenova install node` at a time per host: two runs at once (a dropped ssh session run again,
 * a configuration tool retrying) would each pass the checks and then write over each other's
 * release, etc/ and units. The lock is a file in the host's run dir holding the holder's pid, pid
 * namespace and start time (edge-node/src/process-alive.ts). Node has no flock without native
 * code, so a lock dies with its process this way instead: a file whose process no longer runs (or
 * whose pid now belongs to a later process) is stale and taken over. /run is a tmpfs, so a reboot
 * clears it too.
 */
import { randomBytes } from 'node:crypto';
import { link, mkdir, readFile, rename, rm, rmdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { isMarkedProcessAlive, thisProcessMark } from '../../../edge-node/src/process-alive.js';
import type { ProcessMark } from '../../../edge-node/src/process-alive.js';
import { onHost } from './install-layout.js';

/** The lock as the host sees it. */
export const INSTALL_LOCK_FILE = '/run/zenova-node-install.lock';
/** Stale locks taken over in a row before giving up (another run keeps winning the race). */
const MAX_TAKEOVERS = 3;

export interface InstallLock {
  /** The lock as the host sees it (for messages). */
  file: string;
  /** Removes the lock if it is still this run's; never throws. */
  release(): Promise<void>;
}

export type LockAttempt =
  | { ok: true; lock: InstallLock }
  /** Another run holds it: its pid, as far as the file tells. */
  | { ok: false; busy: true; file: string; holderPid: number | undefined }
  /** The lock file could not be written at all (e.g. not root, read-only run dir). */
  | { ok: false; busy: false; file: string; reason: string };

function parseMark(text: string): ProcessMark | undefined {
  try {
    const value = JSON.parse(text) as Partial<ProcessMark>;
    if (typeof value.pid !== 'number' || !Number.isInteger(value.pid) || value.pid <= 0) return undefined;
    return { pid: value.pid, pidNs: typeof value.pidNs === 'string' ? value.pidNs : null, startTicks: typeof value.startTicks === 'string' ? value.startTicks : null };
  } catch {
    return undefined;
  }
}

async function readText(file: string): Promise<string | undefined> {
  try {
    return await readFile(file, 'utf8');
  } catch {
    return undefined;
  }
}

/**
 * Moves a stale lock aside. If another run took the lock over in between, what was moved is its
 * fresh lock, not the stale one: it is linked back (unless a third run already holds the name).
 */
async function removeStale(physical: string, staleText: string): Promise<void> {
  const aside = `${physical}.stale-${process.pid}-${randomBytes(4).toString('hex')}`;
  try {
    await rename(physical, aside);
  } catch {
    return;
  }
  if ((await readText(aside)) !== staleText) await link(aside, physical).catch(() => undefined);
  await rm(aside, { force: true });
}

/** Takes the install lock under `hostRoot`, taking over a stale one; never waits for a live one. */
export async function takeInstallLock(hostRoot: string): Promise<LockAttempt> {
  const physical = onHost(hostRoot, INSTALL_LOCK_FILE);
  // The random run id tells this run's lock from another run's in the same process (tests).
  const mine = `${JSON.stringify({ ...thisProcessMark(), run: randomBytes(8).toString('hex') })}\n`;
  // Written in full under a temp name, then linked to the lock name: link() fails when the name
  // exists (like O_EXCL), and the lock file is never seen half-written.
  const tmp = `${physical}.${process.pid}-${randomBytes(4).toString('hex')}.tmp`;
  const runDir = path.dirname(physical);
  // The run dir always exists on a real host; one made here (a test's host root) goes again with
  // the lock, so a run leaves the host as it found it.
  let madeRunDir: string | undefined;
  const removeMadeRunDir = async (): Promise<void> => {
    if (madeRunDir === undefined) return;
    for (let dir = runDir; dir.length >= madeRunDir.length; dir = path.dirname(dir)) await rmdir(dir).catch(() => undefined);
  };
  const unavailable = async (err: unknown): Promise<LockAttempt> => {
    await removeMadeRunDir();
    return { ok: false, busy: false, file: INSTALL_LOCK_FILE, reason: (err as NodeJS.ErrnoException).code ?? (err as Error).message };
  };
  try {
    madeRunDir = await mkdir(runDir, { recursive: true, mode: 0o755 });
    await writeFile(tmp, mine, { mode: 0o644, flag: 'wx' });
  } catch (err) {
    return unavailable(err);
  }
  try {
    for (let attempt = 0; ; attempt += 1) {
      try {
        await link(tmp, physical);
        const release = async (): Promise<void> => {
          await releaseLock(physical, mine);
          await removeMadeRunDir();
        };
        return { ok: true, lock: { file: INSTALL_LOCK_FILE, release } };
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') {
          await rm(tmp, { force: true });
          return await unavailable(err);
        }
      }
      const held = await readText(physical);
      const mark = held === undefined ? undefined : parseMark(held);
      if ((mark !== undefined && isMarkedProcessAlive(mark)) || attempt >= MAX_TAKEOVERS) return { ok: false, busy: true, file: INSTALL_LOCK_FILE, holderPid: mark?.pid };
      // Gone meanwhile (released): try again. Only this module writes the file, always whole, so
      // one that does not parse is no lock in use: it is stale like a dead holder's.
      if (held !== undefined) await removeStale(physical, held);
    }
  } finally {
    await rm(tmp, { force: true });
  }
}

/** The pid of the live run holding the install lock (read only, e.g. by `zenova status`); undefined when none does. */
export async function installLockHolder(hostRoot: string): Promise<number | undefined> {
  const held = await readText(onHost(hostRoot, INSTALL_LOCK_FILE));
  const mark = held === undefined ? undefined : parseMark(held);
  return mark !== undefined && isMarkedProcessAlive(mark) ? mark.pid : undefined;
}

async function releaseLock(physical: string, mine: string): Promise<void> {
  // A lock taken over from this run (it was judged dead) is the other run's now: leave it.
  if ((await readText(physical)) === mine) await rm(physical, { force: true }).catch(() => undefined);
}
