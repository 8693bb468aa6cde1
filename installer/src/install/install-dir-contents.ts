/**
 * What an existing install dir may already hold without being foreign: the layout's own entries
 * (the remains of a rolled-back or killed attempt, or data/ kept by one), each only as the installer
 * and the node make it: `current` and `updater` links into releases/, releases/ holding releases the
 * installer unpacked, and inside etc/ and data/ only what the installer and the node write there.
 * Top-level names alone are not enough: an application's own /data/app/{current,releases,etc,data}
 * would pass, and the install would replace them (and its rollback delete them).
 */
import { lstat, readFile, readdir, readlink, stat } from 'node:fs/promises';
import path from 'node:path';
import { CA_FILE, ENV_FILE, TLS_CERT_FILE, TLS_KEY_FILE } from './install-layout.js';
import { isManifestlessRelease, isPartialReleaseLeftover, isUnpackedRelease } from './release-manifest.js';
import { NODE_ENV_HEADER } from './unit-files.js';
import { UPDATE_STATE_FILE } from './update-state.js';

/** The top level of an install dir (install-layout.ts). */
const LAYOUT_ENTRIES = new Set(['releases', 'current', 'updater', 'data', 'etc']);
/** The links install-node.ts makes, to `releases/<version>` (relative). */
const RELEASE_LINKS = ['current', 'updater'] as const;
const RELEASE_LINK_TARGET = /^releases\/([^/]+)$/;
const ENV_FILE_NAME = path.posix.basename(ENV_FILE);
const ETC_FILES = new Set([ENV_FILE_NAME, path.posix.basename(CA_FILE), path.posix.basename(TLS_CERT_FILE), path.posix.basename(TLS_KEY_FILE)]);
/**
 * The files the node keeps in its state dir. Written out, not imported: their modules load
 * better-sqlite3, which the installer tarball does not carry
 * (test/installer/install-dir-contents.test.ts keeps this list in step with the node's constants).
 */
export const NODE_STATE_JSON_FILES = ['identity.json', 'credential.json', 'control-status.json', 'config-applied-version.json', 'spool.json', 'enroll-attempt.json'] as const;
export const NODE_STATE_SQLITE_FILES = ['spool.db', 'credit-leases.sqlite', 'rate-limits.sqlite', 'mcp-sessions.sqlite', 'control-link.sqlite'] as const;
/** The config cache's dir in the state dir and the files in it (edge-node/src/config/bundle-cache.ts). */
export const NODE_CONFIG_CACHE_DIR = 'config';
const CONFIG_CACHE_FILES = new Set(['current.json', 'previous.json']);
/** Where a re-enrollment as another node moves the old node's state (edge-node/src/enroll/retire-node-state.ts). */
export const NODE_RETIRED_DIR = 'retired';
/** `<name>-<id8>-<yyyymmddThhmmssZ>` (`-<n>` after it when that name was taken), or `.<that>.partial` while it is filled. */
const RETIRED_ENTRY = /^(?:[A-Za-z0-9._-]+-\d{8}T\d{6}Z(?:-\d+)?|\.[A-Za-z0-9._-]+-\d{8}T\d{6}Z\.partial)$/;
/** SQLite's companions of a database file (WAL mode, and rollback journal while one is built). */
const SQLITE_SUFFIXES = ['', '-wal', '-shm', '-journal'];
/** The node's env file is tiny; a bigger file is not the installer's. */
const MAX_ENV_FILE_BYTES = 64 * 1024;

/** The node's JSON state files, and the one the installer keeps beside them (the last upgrade's outcome). */
const STATE_JSON_FILES: ReadonlySet<string> = new Set<string>([...NODE_STATE_JSON_FILES, UPDATE_STATE_FILE]);
const STATE_FILES = new Set(NODE_STATE_SQLITE_FILES.flatMap((f) => SQLITE_SUFFIXES.map((s) => `${f}${s}`)).concat([...STATE_JSON_FILES]));

/** A temp file writeFileAtomic (edge-node/src/state/atomic-write.ts: `.<name>.<12 hex>.tmp`) left beside one of `names`. */
function isAtomicWriteLeftover(entry: string, names: ReadonlySet<string>): boolean {
  const target = /^\.(.+)\.[0-9a-f]{12}\.tmp$/.exec(entry)?.[1];
  return target !== undefined && names.has(target);
}

/**
 * Beside spool.db: a spool being created when the node died (spool-file.ts: `spool.db.new-<12 hex>`,
 * `spool.db.new-<pid>` from earlier releases, with its journal), and the lock replicas open the spool
 * under (open-node-spool.ts: `spool.db.lock`).
 */
export function isSpoolFileLeftover(entry: string): boolean {
  return /^spool\.db\.(new-(\d+|[0-9a-f]{12})|lock)(-journal)?$/.test(entry);
}

/** A symlink to releases/<name> of this dir, as install-node.ts writes `current` and `updater`. */
async function isReleaseLink(physical: string): Promise<boolean> {
  try {
    const name = RELEASE_LINK_TARGET.exec(await readlink(physical))?.[1];
    return name !== undefined && name !== '.' && name !== '..';
  } catch {
    return false; // not a link (EINVAL), or unreadable
  }
}

async function isRealDir(physical: string): Promise<boolean> {
  return lstat(physical).then((info) => info.isDirectory(), () => false);
}

/**
 * releases/ (a real dir, not a link elsewhere) may hold releases the installer unpacked and its
 * partial leftovers. `earlierInstaller`: the dir's etc/node.env is the installer's, so a release
 * dir without a manifest is one an installer from before release manifests unpacked (a run killed
 * before its rollback left it, with the identity --reenroll recovers): ours, not foreign.
 */
async function foreignInReleases(physical: string, earlierInstaller: boolean): Promise<string[]> {
  if (!(await isRealDir(physical))) return ['releases (not a directory)'];
  const entries = await listDir(physical);
  if (typeof entries === 'string') return [`releases (${entries})`];
  const foreign: string[] = [];
  for (const entry of entries) {
    const full = path.join(physical, entry);
    const ours = isPartialReleaseLeftover(entry)
      ? await isRealDir(full)
      : (await isUnpackedRelease(full, entry)) || (earlierInstaller && (await isManifestlessRelease(full)));
    if (!ours) foreign.push(`releases/${entry} (not a release unpacked by zenova install node)`);
  }
  return foreign;
}

/**
 * A spool owner slot (edge-node/src/spool/spool-owner-lock.ts: `spool-owner-<n>.lock`) or the
 * sole-process lock (`spool-owner-sole.lock`), with a journal should SQLite leave one.
 */
export function isSpoolOwnerLock(entry: string): boolean {
  return /^spool-owner-(\d{1,4}|sole)\.lock(-journal)?$/.test(entry);
}

/** The lock replicas apply a config bundle under (edge-node/src/config/applied-version.ts), with a journal should SQLite leave one. */
export const NODE_CONFIG_APPLY_LOCK_FILE = 'config-apply.lock';

/**
 * Beside rate-limits.sqlite (edge-node/src/rate-limit/rate-limit-file.ts): the lock replicas open it
 * under, `rate-limits.sqlite.lock`, and a damaged file the node moved aside,
 * `rate-limits.sqlite.damaged-<UTC time>`, with the SQLite companions it had.
 */
export function isRateLimitFileLeftover(entry: string): boolean {
  return /^rate-limits\.sqlite\.(lock(-journal)?|damaged-\d{8}T\d{6}\.\d{3}Z(-wal|-shm|-journal)?)$/.test(entry);
}

async function listDir(physical: string): Promise<string[] | string> {
  try {
    if (!(await stat(physical)).isDirectory()) return 'not a directory';
    return (await readdir(physical)).sort();
  } catch (err) {
    return `cannot read it: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`;
  }
}

async function isInstallerEnvFile(physical: string): Promise<boolean> {
  try {
    const info = await stat(physical);
    if (!info.isFile() || info.size > MAX_ENV_FILE_BYTES) return false;
    return (await readFile(physical, 'utf8')).startsWith(NODE_ENV_HEADER);
  } catch {
    return false;
  }
}

/** etc/ may hold the env file the installer wrote (its header says so), the CA file, the caller TLS pair, and temp files of these. */
async function foreignInEtc(physical: string): Promise<string | undefined> {
  const entries = await listDir(physical);
  if (typeof entries === 'string') return `etc (${entries})`;
  for (const entry of entries) {
    if (entry === ENV_FILE_NAME) {
      if (!(await isInstallerEnvFile(path.join(physical, entry)))) return `etc/${entry} (not written by zenova install node)`;
    } else if (!ETC_FILES.has(entry) && !isAtomicWriteLeftover(entry, ETC_FILES)) {
      return `etc/${entry}`;
    }
  }
  return undefined;
}

/** data/ may hold only the node's state files (and their SQLite companions and temp files), its config cache and retired/. */
async function foreignInData(physical: string): Promise<string | undefined> {
  const entries = await listDir(physical);
  if (typeof entries === 'string') return `data (${entries})`;
  for (const entry of entries) {
    if (entry === NODE_CONFIG_CACHE_DIR) {
      const cache = await listDir(path.join(physical, entry));
      if (typeof cache === 'string') return `data/${entry} (${cache})`;
      const other = cache.find((e) => !CONFIG_CACHE_FILES.has(e) && !isAtomicWriteLeftover(e, CONFIG_CACHE_FILES));
      if (other !== undefined) return `data/${entry}/${other}`;
    } else if (entry === NODE_RETIRED_DIR) {
      // What is inside is an earlier node's state as it was moved; only the dirs themselves are checked.
      const retired = await listDir(path.join(physical, entry));
      if (typeof retired === 'string') return `data/${entry} (${retired})`;
      for (const dir of retired) {
        if (!RETIRED_ENTRY.test(dir) || !(await isRealDir(path.join(physical, entry, dir)))) return `data/${entry}/${dir}`;
      }
    } else if (!STATE_FILES.has(entry) && !isAtomicWriteLeftover(entry, STATE_JSON_FILES) && !isSpoolFileLeftover(entry) && !isSpoolOwnerLock(entry) && !isRateLimitFileLeftover(entry) && entry !== NODE_CONFIG_APPLY_LOCK_FILE && entry !== `${NODE_CONFIG_APPLY_LOCK_FILE}-journal`) {
      return `data/${entry}`;
    }
  }
  return undefined;
}

/**
 * What in the install dir (`physical`, its listing `entries`) is neither the installer's nor the
 * node's own, as paths relative to the dir; [] when nothing is.
 */
/** The temp link swapSymlink (symlink-swap.ts) makes beside `current` or `updater` before renaming it over: left by a run killed in between. */
export function isLinkSwapLeftoverName(entry: string): boolean {
  return /^(current|updater)\.[0-9a-f]{8}\.tmp$/.test(entry);
}

async function isLinkSwapLeftover(dir: string, entry: string): Promise<boolean> {
  if (!isLinkSwapLeftoverName(entry)) return false;
  const info = await lstat(path.join(dir, entry)).catch(() => undefined);
  return info?.isSymbolicLink() === true;
}

export async function foreignInstallDirEntries(physical: string, entries: readonly string[]): Promise<string[]> {
  const foreign: string[] = [];
  for (const entry of entries) if (!LAYOUT_ENTRIES.has(entry) && !(await isLinkSwapLeftover(physical, entry))) foreign.push(entry);
  foreign.sort();
  if (foreign.length > 0) return foreign;
  const inside: Array<string | undefined> = [];
  for (const link of RELEASE_LINKS) {
    if (entries.includes(link) && !(await isReleaseLink(path.join(physical, link)))) inside.push(`${link} (not a link into releases/)`);
  }
  const installerEnvFile = entries.includes('etc') && (await isInstallerEnvFile(path.join(physical, 'etc', ENV_FILE_NAME)));
  if (entries.includes('releases')) inside.push(...(await foreignInReleases(path.join(physical, 'releases'), installerEnvFile)));
  if (entries.includes('etc')) inside.push(await foreignInEtc(path.join(physical, 'etc')));
  if (entries.includes('data')) inside.push(await foreignInData(path.join(physical, 'data')));
  return inside.filter((e) => e !== undefined);
}
