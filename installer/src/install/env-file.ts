// The installed etc/node.env (KEY=VALUE lines, as unit-files.ts writes them): read, written
// atomically, and the temp files of a write that never finished removed.
import { randomBytes } from 'node:crypto';
import { lstat, open, readFile, readdir, rename, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import { ENV_FILE } from './install-layout.js';

export async function readNodeEnv(file: string): Promise<Record<string, string>> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch {
    return {};
  }
  return parseEnvText(text);
}

/** The KEY=VALUE lines of an env file's text. */
export function parseEnvText(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const m = /^([A-Z0-9_]+)=(.*)$/.exec(line.trim());
    if (m?.[1] !== undefined && m[2] !== undefined) out[m[1]] = m[2];
  }
  return out;
}

/**
 * The env file with its ZENOVA_NODE_REPLICAS line set to `replicas` (added when missing, as in an
 * env file of an installer from before replicas): every other line, an operator's too, stays.
 */
export function withReplicas(envText: string, replicas: number): string {
  return withEnvLine(envText, 'ZENOVA_NODE_REPLICAS', String(replicas));
}

/**
 * The env file with exactly one `key` line, `key=value`: in place of the last one there (systemd,
 * parseEnvText and `zenova status` all take the last of several, so an operator's appended
 * duplicate would otherwise win over the line written here), the others dropped; appended when
 * there is none. Every other line stays.
 */
export function withEnvLine(envText: string, key: string, value: string): string {
  const line = `${key}=${value}`;
  const lines = envText.split('\n');
  // Matched as parseEnvText reads them: surrounding blanks do not hide a line.
  const isKey = (l: string): boolean => l.trim().startsWith(`${key}=`);
  const last = lines.findLastIndex(isKey);
  if (last === -1) return `${envText.replace(/\n?$/, '\n')}${line}\n`;
  return lines.flatMap((l, i) => (i === last ? [line] : isKey(l) ? [] : [l])).join('\n');
}

/** The env file's ZENOVA_NODE_REPLICAS when it is a count node-edge takes (1–999), else undefined. */
export function envReplicas(env: Record<string, string>): number | undefined {
  const raw = env.ZENOVA_NODE_REPLICAS;
  if (raw === undefined || !/^[1-9]\d{0,2}$/.test(raw)) return undefined;
  return Number(raw);
}

const ENV_FILE_NAME = path.posix.basename(ENV_FILE);
/** The temp name writeEnvFile uses, as edge-node's writeFileAtomic names its own: `.node.env.<12 hex>.tmp`. */
const ENV_TEMP_FILE = /^\.node\.env\.[0-9a-f]{12}\.tmp$/;

/**
 * Replaces the env file atomically (temp file, fsync, rename, fsync of the dir). The temp file is
 * 0600 for as long as it has its temp name — lines an operator added may hold secrets (a proxy
 * password), and a run killed mid-write leaves it behind — and the file gets `mode` only once renamed.
 */
export async function writeEnvFile(file: string, text: string, mode: number): Promise<void> {
  const dir = path.dirname(file);
  const tmp = path.join(dir, `.${ENV_FILE_NAME}.${randomBytes(6).toString('hex')}.tmp`);
  // 'wx': never follow or reuse something already at the temp name.
  const handle = await open(tmp, 'wx', 0o600);
  let renamed = false;
  try {
    // Explicit: the mode given to open() is filtered by the umask, which only narrows it anyway.
    await handle.chmod(0o600);
    await handle.writeFile(text);
    // The file replaced keeps its owner and group (root:<group> 0640 lets that group read it):
    // the temp is the creator's, root's, until it is given theirs.
    const owner = await stat(file).catch((err: unknown) => {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw err;
    });
    if (owner !== undefined) await handle.chown(owner.uid, owner.gid);
    await handle.sync();
    await rename(tmp, file);
    renamed = true;
    await handle.chmod(mode);
    await handle.sync();
  } catch (err) {
    if (!renamed) await rm(tmp, { force: true });
    throw err;
  } finally {
    await handle.close().catch(() => undefined);
  }
  // The rename itself is durable only once the directory entry is on disk.
  const dirHandle = await open(dir, 'r');
  try {
    await dirHandle.sync();
  } finally {
    await dirHandle.close();
  }
}

/**
 * Removes the env file's temp files a run killed mid-write left in `etcDir` (physical): only
 * regular files of writeEnvFile's temp name, only there. Call it only while holding the install
 * lock: no other installer run is then writing one. Returns the names removed and those that
 * could not be (with why).
 */
export async function removeStaleEnvFileTemps(etcDir: string): Promise<{ removed: string[]; failed: Array<{ name: string; reason: string }> }> {
  const removed: string[] = [];
  const failed: Array<{ name: string; reason: string }> = [];
  let entries: string[];
  try {
    entries = await readdir(etcDir);
  } catch {
    return { removed, failed }; // no etc/ yet (a new install), or none to read: nothing left there
  }
  for (const name of entries.filter((e) => ENV_TEMP_FILE.test(e)).sort()) {
    const file = path.join(etcDir, name);
    try {
      if (!(await lstat(file)).isFile()) continue;
      await rm(file);
      removed.push(name);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT') failed.push({ name, reason: code ?? (err as Error).message });
    }
  }
  return { removed, failed };
}
