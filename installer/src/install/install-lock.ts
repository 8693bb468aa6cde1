/**
 * One `zenova install node` at a time per host: two runs at once (a dropped ssh session run again,
 * a configuration tool retrying) would each pass the checks and then write over each other's
 * release, etc/ and units. The lock is a file in the host's run dir holding the holder's pid, pid
 * namespace and start time (edge-node/src/process-alive.ts), the boot it was taken in, and the name
 * of a unix socket the holder listens on beside it. Node has no flock without native code, so a lock
 * dies with its process this way instead:
 * - a lock from an earlier boot is stale (no process outlives a boot; /run may be no tmpfs, e.g. in a
 *   container image);
 * - in this pid namespace, a lock whose process no longer runs (or whose pid now belongs to a later
 *   process) is stale;
 * - from another pid namespace (a container since restarted, or the host and a container sharing
 *   /run) the pid tells nothing, but the socket does: the kernel refuses a connection to it
 *   (ECONNREFUSED) only once its listener is gone, and accepts one while the holder lives, even
 *   frozen. A lock that names no socket (an earlier installer's) or whose socket gives no clear
 *   answer cannot be judged there: it is kept, and the refusal says how to remove it by hand.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { link, lstat, mkdir, readFile, rename, rm, rmdir, stat, writeFile } from 'node:fs/promises';
import { connect, createServer } from 'node:net';
import type { Server } from 'node:net';
import path from 'node:path';
import { isMarkedProcessAlive, pidNamespace, thisProcessMark } from '../../../edge-node/src/process-alive.js';
import type { ProcessMark } from '../../../edge-node/src/process-alive.js';
import { onHost } from './install-layout.js';

/** The lock as the host sees it. */
export const INSTALL_LOCK_FILE = '/run/zenova-node-install.lock';
/** Stale locks taken over in a row before giving up (another run keeps winning the race). */
const MAX_TAKEOVERS = 3;
/** The holder's socket beside the lock: `zenova-node-install.lock.<run id>.sock`. */
const SOCKET_NAME = /^zenova-node-install\.lock\.[0-9a-f]{16}\.sock$/;
/** A unix socket's path must fit sockaddr_un (108 bytes with its NUL on Linux). */
const MAX_SOCKET_PATH_BYTES = 107;
/** A connection to a listening unix socket is answered at once; this only bounds a hung filesystem. */
const SOCKET_PROBE_TIMEOUT_MS = 2_000;
const BOOT_ID_FILE = '/proc/sys/kernel/random/boot_id';

export interface InstallLock {
  /** The lock as the host sees it (for messages). */
  file: string;
  /** Removes the lock if it is still this run's; never throws. */
  release(): Promise<void>;
}

export type LockAttempt =
  | { ok: true; lock: InstallLock }
  /**
   * Another run holds it: its pid, as far as the file tells. `unverified`: its holder ran in
   * another pid namespace and left no socket that answers either way, so whether it still runs
   * cannot be told from here (the lock file's age, when known, for the advice).
   */
  | { ok: false; busy: true; file: string; holderPid: number | undefined; unverified?: { since: Date | undefined } }
  /** The lock file could not be written at all (e.g. not root, read-only run dir). */
  | { ok: false; busy: false; file: string; reason: string };

/** What the lock file records. */
interface LockMark extends ProcessMark {
  /** The kernel's boot id when the lock was taken; null when unknown (an earlier installer's lock). */
  bootId: string | null;
  /** The holder's socket, a name in the lock's dir; null when it has none. */
  socket: string | null;
}

/** Whether the holder runs: known either way, or not to be told from this pid namespace. */
type HolderState = 'alive' | 'gone' | 'unknown';

function bootId(): string | null {
  try {
    return readFileSync(BOOT_ID_FILE, 'utf8').trim() || null;
  } catch {
    return null;
  }
}

function parseMark(text: string): LockMark | undefined {
  try {
    const value = JSON.parse(text) as Partial<Record<keyof LockMark, unknown>>;
    if (typeof value.pid !== 'number' || !Number.isInteger(value.pid) || value.pid <= 0) return undefined;
    const str = (v: unknown): string | null => (typeof v === 'string' && v !== '' ? v : null);
    const socket = str(value.socket);
    return {
      pid: value.pid,
      pidNs: str(value.pidNs),
      startTicks: str(value.startTicks),
      bootId: str(value.bootId),
      socket: socket !== null && SOCKET_NAME.test(socket) ? socket : null,
    };
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

/** Connects to the holder's socket: accepted while it listens, ECONNREFUSED once it is gone. */
async function probeSocket(file: string): Promise<HolderState> {
  // connect() to a path that is no socket is refused too: only a socket's refusal tells.
  const info = await lstat(file).catch(() => undefined);
  if (info?.isSocket() !== true) return 'unknown';
  return new Promise((resolve) => {
    const socket = connect(file);
    const done = (state: HolderState): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve(state);
    };
    const timer = setTimeout(() => done('unknown'), SOCKET_PROBE_TIMEOUT_MS);
    socket.once('connect', () => done('alive'));
    socket.once('error', (err: NodeJS.ErrnoException) => done(err.code === 'ECONNREFUSED' ? 'gone' : 'unknown'));
  });
}

async function holderState(mark: LockMark, runDir: string): Promise<HolderState> {
  const boot = bootId();
  if (mark.bootId !== null && boot !== null && mark.bootId !== boot) return 'gone';
  const here = pidNamespace();
  // In this namespace the pid and its start time tell exactly (process-alive.ts).
  if (mark.pidNs !== null && here !== null && mark.pidNs === here) return isMarkedProcessAlive(mark, here) ? 'alive' : 'gone';
  return mark.socket === null ? 'unknown' : probeSocket(path.join(runDir, mark.socket));
}

/**
 * Moves a stale lock aside. If another run took the lock over in between, what was moved is its
 * fresh lock, not the stale one: it is linked back (unless a third run already holds the name).
 * The stale holder's socket goes with its lock.
 */
async function removeStale(physical: string, staleText: string, stale: LockMark | undefined): Promise<void> {
  const aside = `${physical}.stale-${process.pid}-${randomBytes(4).toString('hex')}`;
  try {
    await rename(physical, aside);
  } catch {
    return;
  }
  if ((await readText(aside)) !== staleText) {
    await link(aside, physical).catch(() => undefined);
  } else if (stale !== undefined && stale.socket !== null) {
    const socket = path.join(path.dirname(physical), stale.socket);
    if ((await lstat(socket).catch(() => undefined))?.isSocket() === true) await rm(socket, { force: true }).catch(() => undefined);
  }
  await rm(aside, { force: true });
}

/** Listens on `file` for the lock's lifetime; undefined when it cannot (the lock is then judged by pid alone). */
async function listenOn(file: string): Promise<Server | undefined> {
  if (Buffer.byteLength(file) > MAX_SOCKET_PATH_BYTES) return undefined;
  // Nothing is said on it: a connection only shows the holder is alive.
  const server = createServer((socket) => socket.destroy());
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(file, () => {
        server.off('error', reject);
        resolve();
      });
    });
  } catch {
    return undefined;
  }
  // It must not keep the CLI running; the lock's release closes it.
  server.unref();
  return server;
}

async function closeSocket(server: Server | undefined, file: string): Promise<void> {
  if (server === undefined) return;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  await rm(file, { force: true }).catch(() => undefined);
}

/** Takes the install lock under `hostRoot`, taking over a stale one; never waits for a live one. */
export async function takeInstallLock(hostRoot: string): Promise<LockAttempt> {
  const physical = onHost(hostRoot, INSTALL_LOCK_FILE);
  const runDir = path.dirname(physical);
  // The random run id tells this run's lock from another run's in the same process (tests).
  const run = randomBytes(8).toString('hex');
  const socketName = `${path.basename(physical)}.${run}.sock`;
  const socketFile = path.join(runDir, socketName);
  // Written in full under a temp name, then linked to the lock name: link() fails when the name
  // exists (like O_EXCL), and the lock file is never seen half-written.
  const tmp = `${physical}.${process.pid}-${randomBytes(4).toString('hex')}.tmp`;
  // The run dir always exists on a real host; one made here (a test's host root) goes again with
  // the lock, so a run leaves the host as it found it.
  let madeRunDir: string | undefined;
  const removeMadeRunDir = async (): Promise<void> => {
    if (madeRunDir === undefined) return;
    for (let dir = runDir; dir.length >= madeRunDir.length; dir = path.dirname(dir)) await rmdir(dir).catch(() => undefined);
  };
  let server: Server | undefined;
  let mine = '';
  const closeMine = async (): Promise<void> => {
    const open = server;
    server = undefined;
    await closeSocket(open, socketFile);
  };
  const unavailable = async (err: unknown): Promise<LockAttempt> => {
    await closeMine();
    await removeMadeRunDir();
    return { ok: false, busy: false, file: INSTALL_LOCK_FILE, reason: (err as NodeJS.ErrnoException).code ?? (err as Error).message };
  };
  try {
    madeRunDir = await mkdir(runDir, { recursive: true, mode: 0o755 });
    // The socket listens before the lock names it: a run judging the lock meanwhile finds it answering.
    server = await listenOn(socketFile);
    const mark: LockMark & { run: string } = { ...thisProcessMark(), bootId: bootId(), socket: server === undefined ? null : socketName, run };
    mine = `${JSON.stringify(mark)}\n`;
    await writeFile(tmp, mine, { mode: 0o644, flag: 'wx' });
  } catch (err) {
    return unavailable(err);
  }
  let taken = false;
  try {
    for (let attempt = 0; ; attempt += 1) {
      try {
        await link(tmp, physical);
        taken = true;
        const release = async (): Promise<void> => {
          await releaseLock(physical, mine);
          // Only after the lock is gone: a run judging it until then finds the socket answering.
          await closeMine();
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
      const state = mark === undefined ? 'gone' : await holderState(mark, runDir);
      if (state !== 'gone' || attempt >= MAX_TAKEOVERS) {
        const since = state === 'unknown' ? await stat(physical).then((s) => s.mtime, () => undefined) : undefined;
        return { ok: false, busy: true, file: INSTALL_LOCK_FILE, holderPid: mark?.pid, ...(state === 'unknown' ? { unverified: { since } } : {}) };
      }
      // Gone meanwhile (released): try again. Only this module writes the file, always whole, so
      // one that does not parse is no lock in use: it is stale like a dead holder's.
      if (held !== undefined) await removeStale(physical, held, mark);
    }
  } finally {
    await rm(tmp, { force: true });
    if (!taken) await closeMine();
  }
}

/**
 * The pid of the live run holding the install lock (read only, e.g. by `zenova status`); undefined
 * when none does. A holder that cannot be judged from this pid namespace counts as live.
 */
export async function installLockHolder(hostRoot: string): Promise<number | undefined> {
  const physical = onHost(hostRoot, INSTALL_LOCK_FILE);
  const held = await readText(physical);
  const mark = held === undefined ? undefined : parseMark(held);
  return mark !== undefined && (await holderState(mark, path.dirname(physical))) !== 'gone' ? mark.pid : undefined;
}

async function releaseLock(physical: string, mine: string): Promise<void> {
  // A lock taken over from this run (it was judged dead) is the other run's now: leave it.
  if ((await readText(physical)) === mine) await rm(physical, { force: true }).catch(() => undefined);
}
