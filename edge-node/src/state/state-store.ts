/**
 * The node's state directory: a few small JSON files, each replaced atomically at 0600, in a
 * directory only the node's user can enter (0700). Reading never changes anything, so `status`
 * and `doctor` can use it safely.
 */
import { constants } from 'node:fs';
import type { Stats } from 'node:fs';
import { access, mkdir, readFile, realpath, stat } from 'node:fs/promises';
import path from 'node:path';
import { pseudoFilesystemRule } from '../../../proto/src/install-dir-rules.js';
import { writeFileAtomic } from './atomic-write.js';

/** State files are tiny; anything bigger is not ours (or is corrupt) and is not read into memory. */
export const MAX_STATE_FILE_BYTES = 1024 * 1024;
export const STATE_DIR_MODE = 0o700;
export const STATE_FILE_MODE = 0o600;

const FILE_NAME = /^[a-z][a-z0-9-]{0,63}\.json$/;

/** A state file that exists but cannot be used; the message names the file and the problem. */
export class StateFileError extends Error {
  readonly file: string;
  constructor(file: string, problem: string, options?: { cause?: unknown }) {
    super(`${file}: ${problem}`, options);
    this.name = 'StateFileError';
    this.file = file;
  }
}

/** A --state-dir that can never be one (under /proc, /sys or /dev): a bad command line, exit 2. */
export class StateDirPathError extends StateFileError {
  constructor(file: string, problem: string) {
    super(file, problem);
    this.name = 'StateDirPathError';
  }
}

/**
 * The state dir or a file in it could not be read for want of permission: it belongs to the node's
 * user (0700/0600), so a command run as another user sees EACCES. Nothing is wrong with the node.
 */
export class StateAccessDeniedError extends StateFileError {
  /**
   * `owner`: the uid and mode of a file in the state dir this process could not use, when known.
   * `use`: `read` (a command reading the state: status, doctor, the control link's reads) or
   * `read-write` (a file node-edge opens to write: its SQLite files and their locks).
   */
  constructor(file: string, options?: { cause?: unknown; owner?: { uid: number; mode: number }; use?: 'read' | 'read-write' }) {
    super(file, `permission denied: ${options?.use === 'read-write' ? writeAccessAdvice(file, options.owner) : accessAdvice(file, options?.owner)}`, options);
    this.name = 'StateAccessDeniedError';
  }
}

/**
 * What to do about a state path this process may not read: the state dir's files belong to the
 * node's user; a file of another owner (written by a command run with sudo) goes back to the
 * node's user; a file of this process's own user has a mode that forbids it.
 */
function accessAdvice(file: string, owner: { uid: number; mode: number } | undefined): string {
  const me = process.getuid?.();
  if (owner === undefined || me === undefined) return "only the node's user (and root) may read the state dir; run this as that user or with sudo";
  if (owner.uid === me) return `its mode ${(owner.mode & 0o777).toString(8).padStart(3, '0')} does not let its owner read it: chmod 600 ${file}`;
  return `it belongs to uid ${owner.uid}, and this runs as uid ${me}: run this as the node's user or with sudo; if this user is the node's (a command run with sudo wrote the file), give it back: chown ${me} ${file}`;
}

/**
 * accessAdvice for a file node-edge itself opens to write, in the words of the spool's refusal
 * (spool-file.ts spoolAccessRefusal): sudo is what left such a file root's, never the cure.
 */
function writeAccessAdvice(file: string, owner: { uid: number; mode: number } | undefined): string {
  const me = process.getuid?.();
  if (owner === undefined || me === undefined) return 'node-edge may not read and write it; run node-edge as the user that owns the state dir';
  if (owner.uid === me) return `its mode ${(owner.mode & 0o777).toString(8).padStart(3, '0')} does not let its owner (this user) read and write it; chmod 600 ${file}`;
  return (
    `it belongs to uid ${owner.uid}, and node-edge runs as uid ${me}; run node-edge as uid ${owner.uid} if that is the node's user; ` +
    `else give the file to the node's user (a command run as root may have left it): chown ${me} ${file}`
  );
}

/** A file system error's code as the reason a state path cannot be read ("a part of the path is not a directory"). */
function unreadable(file: string, err: unknown, owner?: { uid: number; mode: number }): StateFileError {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'EACCES' || code === 'EPERM') return new StateAccessDeniedError(file, { cause: err, ...(owner !== undefined ? { owner } : {}) });
  const why = code === 'ENOTDIR' ? 'a part of its path is not a directory' : code === 'ELOOP' ? 'its path loops through symbolic links' : (code ?? (err as Error).message);
  return new StateFileError(file, `cannot read it (${why})`, { cause: err });
}

/**
 * The state dir can be written to: node-edge keeps its spool, locks, config cache and status there.
 * Checked before the first SQLite file is opened, whose failure says only "unable to open database file".
 */
export async function checkWritable(store: StateStore): Promise<void> {
  try {
    await access(store.dir, constants.W_OK | constants.X_OK);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const why = code === 'EROFS' ? 'its file system is mounted read-only' : code === 'EACCES' || code === 'EPERM' ? 'permission denied' : (code ?? (err as Error).message);
    throw new StateFileError(store.dir, `cannot be written (${why}); node-edge keeps its request spool, config cache and status there: run it as the user that owns the state dir, or give the dir back to the user node-edge runs as (chown -R)`, { cause: err });
  }
}

/** The state directory is missing (and the caller asked not to create it). */
export class StateDirMissingError extends Error {
  readonly dir: string;
  constructor(dir: string) {
    super(`the state directory ${dir} does not exist`);
    this.name = 'StateDirMissingError';
    this.dir = dir;
  }
}

export interface StateStore {
  readonly dir: string;
  /** Absolute path of a state file. */
  path(name: string): string;
  /** The parsed JSON of `name`, or undefined when the file does not exist. */
  read(name: string): Promise<unknown>;
  /** Replaces `name` atomically with `value` as JSON, mode 0600. */
  write(name: string, value: unknown): Promise<void>;
}

function checkName(name: string): void {
  // Names are ours, never user input; the check keeps a slip from writing outside the directory.
  if (!FILE_NAME.test(name)) throw new Error(`invalid state file name ${JSON.stringify(name)}`);
}

/** The nearest part of `absolute` that exists (its stat), and the names below it that do not; undefined when that cannot be told. */
async function existingPart(absolute: string): Promise<{ at: string; info: Stats; missing: string[] } | undefined> {
  const missing: string[] = [];
  for (let at = absolute; ; at = path.dirname(at)) {
    try {
      return { at, info: await stat(at), missing };
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if ((code !== 'ENOENT' && code !== 'ENOTDIR') || at === path.dirname(at)) return undefined;
      missing.unshift(path.basename(at));
    }
  }
}

/**
 * `dir` (or, through a symbolic link, what its existing part leads to) is under /proc, /sys or /dev:
 * no disk, and a recursive mkdir under /proc never returns. The words are install-dir-rules.ts's
 * (`must not be under /proc (…)`); undefined when it is not.
 */
export async function pseudoFilesystemProblem(dir: string): Promise<string | undefined> {
  const absolute = path.resolve(dir);
  const rule = pseudoFilesystemRule(absolute);
  if (rule !== undefined) return rule;
  const part = await existingPart(absolute);
  if (part === undefined) return undefined;
  const real = await realpath(part.at).catch(() => part.at);
  const linked = pseudoFilesystemRule(path.join(real, ...part.missing));
  return linked === undefined ? undefined : `${linked} (${part.at} leads to ${real})`;
}

/**
 * Why `dir` can never be a state dir, judged before anything is created (undefined when it can be,
 * or when only opening it can tell): pseudoFilesystemProblem's, or a regular file (or another
 * non-directory), or a path under one.
 */
export async function stateDirPathProblem(dir: string): Promise<string | undefined> {
  const absolute = path.resolve(dir);
  const pseudo = await pseudoFilesystemProblem(absolute);
  if (pseudo !== undefined) return pseudo;
  const part = await existingPart(absolute);
  if (part === undefined || part.info.isDirectory()) return undefined;
  return part.missing.length === 0 ? 'is not a directory' : `is under ${part.at}, which is a file, not a directory`;
}

/**
 * Opens the state directory. With `create`, a missing directory is created with mode 0700
 * (parents included); without it, a missing directory is a StateDirMissingError. A path that can
 * never be one, under /proc, /sys or /dev (pseudoFilesystemProblem), is a StateFileError before
 * anything is created.
 */
export async function openStateStore(dir: string, opts: { create: boolean }): Promise<StateStore> {
  const absolute = path.resolve(dir);
  const pseudo = await pseudoFilesystemProblem(absolute);
  if (pseudo !== undefined) throw new StateDirPathError(absolute, pseudo);
  let info;
  try {
    info = await stat(absolute);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw unreadable(absolute, err);
    if (!opts.create) throw new StateDirMissingError(absolute);
    await mkdir(absolute, { recursive: true, mode: STATE_DIR_MODE });
    info = await stat(absolute);
  }
  if (!info.isDirectory()) throw new StateFileError(absolute, 'is not a directory');

  return {
    dir: absolute,
    path(name) {
      checkName(name);
      return path.join(absolute, name);
    },
    async read(name) {
      checkName(name);
      const file = path.join(absolute, name);
      let bytes: Buffer;
      let owner: { uid: number; mode: number } | undefined;
      try {
        const info = await stat(file);
        owner = { uid: info.uid, mode: info.mode };
        if (info.size > MAX_STATE_FILE_BYTES) throw new StateFileError(file, `larger than ${MAX_STATE_FILE_BYTES} bytes`);
        bytes = await readFile(file);
      } catch (err) {
        if (err instanceof StateFileError) throw err;
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
        throw unreadable(file, err, owner);
      }
      try {
        return JSON.parse(bytes.toString('utf8')) as unknown;
      } catch (err) {
        throw new StateFileError(file, 'is not valid JSON', { cause: err });
      }
    },
    async write(name, value) {
      checkName(name);
      await writeFileAtomic(path.join(absolute, name), `${JSON.stringify(value, null, 2)}\n`, STATE_FILE_MODE);
    },
  };
}
