/**
 * The node's config cache in its state dir: `config/current.json` (the bundle being served) and
 * `config/previous.json` (the last good one before it), each `{version, bundle, signature}` with
 * the bundle as its exact signed canonical JSON text and the signature in base64. Writes are atomic
 * and 0600 (the bundle holds upstream secrets). Loading verifies each file exactly as a push is
 * verified (signature with the pinned key, schema, node id) and never hands out an unverified one:
 * a refused current falls back to previous, and a refused file is named in a log line.
 *
 * Rollback: given the highest version the node applied (applied-version.ts), a current.json that
 * is older than it, or missing, is refused (CONFIG_ROLLED_BACK) with no fallback: previous is older
 * still. Only a current.json that is damaged (unreadable, not JSON, failing its signature or
 * schema) falls back to previous, and such a load is marked as older than the node applied.
 */
import type { BigIntStats } from 'node:fs';
import { chmod, mkdir, readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { MAX_CONFIG_BUNDLE_BYTES, verifyConfigBundle } from '../../../proto/src/index.js';
import type { BundleCheck, ConfigBundle } from '../../../proto/src/index.js';
import type { Logger } from '../logger.js';
import { removeInterruptedWrites, writeFileAtomic } from '../state/atomic-write.js';
import { APPLIED_VERSION_FILE } from './applied-version.js';
import { describeIssues } from '../zod-issues.js';

export const CONFIG_CACHE_DIR = 'config';
const DIR_MODE = 0o700;
const FILE_MODE = 0o600;
/** The bundle is one JSON string inside the file: escaping at most doubles it. */
const MAX_CACHE_FILE_BYTES = 2 * MAX_CONFIG_BUNDLE_BYTES + 64 * 1024;

export type CacheSlot = 'current' | 'previous';
const SLOTS: readonly CacheSlot[] = ['current', 'previous'];

const cachedBundleSchema = z.object({
  version: z.int().min(1),
  /** The canonical JSON exactly as signed. */
  bundle: z.string().min(2).max(MAX_CONFIG_BUNDLE_BYTES),
  signature: z.string().min(1).max(1024).regex(/^[A-Za-z0-9+/]+={0,2}$/, 'must be base64'),
  /** When this node applied it (not signed: informational, for status). */
  appliedAt: z.iso.datetime({ offset: true }).optional(),
});

export type CachedBundle = z.infer<typeof cachedBundleSchema>;

/** Why a bundle is not for this node: proto's BundleCheck codes plus the node id check. */
export type BundleRefusalCode = Extract<BundleCheck, { ok: false }>['code'] | 'CONFIG_WRONG_NODE';

/** Why a cache file was not used (log codes): the bundle's, the file's, or the build's. */
export type CacheRefusalCode = BundleRefusalCode | 'CONFIG_CACHE_UNREADABLE' | 'CONFIG_CACHE_CORRUPT' | 'CONFIG_APPLY_FAILED' | 'CONFIG_ROLLED_BACK';

export interface CacheRefusal {
  slot: CacheSlot;
  file: string;
  code: CacheRefusalCode;
  message: string;
  /**
   * The file's stamp (BundleCache.stamp) taken before it was read, when it was refused for its
   * content: the same file is refused again until it changes. Absent when the read itself failed
   * (CONFIG_CACHE_UNREADABLE: EMFILE, EACCES), which may pass.
   */
  stamp?: string;
}

export interface LoadedBundle<T> {
  slot: CacheSlot;
  file: string;
  entry: CachedBundle;
  bundle: ConfigBundle;
  /** What `build` made of the bundle. */
  value: T;
  /** The file's stamp (BundleCache.stamp) taken before it was read. */
  stamp: string;
  /**
   * Set when this is previous.json, used because current.json is damaged, and older than the
   * highest version the node applied (that version).
   */
  olderThanApplied?: number;
}

export interface CacheLoadOptions {
  /** The highest version this node applied (0 or absent: unknown); older caches are refused. */
  highestApplied?: number;
}

export interface CacheLoad<T> {
  loaded: LoadedBundle<T> | undefined;
  refusals: CacheRefusal[];
  /** Slots with no file at all (never written). */
  missing: CacheSlot[];
}

/** What a bundle must match to be served by this node. */
export interface BundleTrust {
  nodeId: string;
  /** identity.configSigningPublicKeyPem, pinned at enrollment. */
  publicKeyPem: string;
}

export type CheckedBundle = { ok: true; bundle: ConfigBundle } | { ok: false; code: BundleRefusalCode; message: string };

/** Signature, canonical form and schema (proto's verifyConfigBundle), then the node id. */
export function checkBundle(bytes: Uint8Array, signature: Uint8Array, trust: BundleTrust): CheckedBundle {
  const check = verifyConfigBundle(bytes, signature, trust.publicKeyPem);
  if (!check.ok) return check;
  if (check.bundle.nodeId !== trust.nodeId) {
    return { ok: false, code: 'CONFIG_WRONG_NODE', message: `the bundle is for node id ${JSON.stringify(check.bundle.nodeId)}, not this node (${trust.nodeId})` };
  }
  return check;
}

/** BundleCache.stamp of a file's stat. */
function stampOf(info: BigIntStats): string {
  return `${info.ino}:${info.size}:${info.mtimeNs}`;
}

export class BundleCache {
  readonly dir: string;

  constructor(stateDir: string) {
    this.dir = path.join(path.resolve(stateDir), CONFIG_CACHE_DIR);
  }

  file(slot: CacheSlot): string {
    return path.join(this.dir, `${slot}.json`);
  }

  /**
   * The first cache file (current, then previous) that verifies and that `build` accepts (a throw
   * refuses it as CONFIG_APPLY_FAILED). Every refused file gets a `config cache refused` log line.
   * With `highestApplied`, a current.json older than it (or missing) is refused as
   * CONFIG_ROLLED_BACK and previous is not tried; a previous.json used because current.json is
   * damaged carries `olderThanApplied`.
   */
  async load<T>(trust: BundleTrust, build: (bundle: ConfigBundle) => T, logger: Logger, opts: CacheLoadOptions = {}): Promise<CacheLoad<T>> {
    const highest = opts.highestApplied ?? 0;
    const refusals: CacheRefusal[] = [];
    const missing: CacheSlot[] = [];
    const refused = (refusal: CacheRefusal): void => {
      refusals.push(refusal);
      logger.error({ file: refusal.file, code: refusal.code, reason: refusal.message }, 'config cache refused');
    };
    for (const slot of SLOTS) {
      const file = this.file(slot);
      const outcome = await this.read(slot, trust, build);
      if (outcome === 'missing') {
        missing.push(slot);
        if (slot === 'current' && highest > 0) {
          refused({ slot, file, code: 'CONFIG_ROLLED_BACK', message: rolledBackMessage(`the file is missing`, highest) });
          return { loaded: undefined, refusals, missing };
        }
        continue;
      }
      if ('code' in outcome) {
        refused(outcome);
        continue;
      }
      // previous.json at the version applied last: the config a push of that same version with
      // other content replaced (a control plane restored from a backup). With current.json damaged,
      // it is no more the last applied config than an older one is.
      const replacedAtSameVersion = slot === 'previous' && highest > 0 && outcome.entry.version === highest && refusals.some((r) => r.slot === 'current');
      if (outcome.entry.version < highest || replacedAtSameVersion) {
        if (slot === 'current') {
          // Not damaged, only older: someone put an older cache here. previous.json is older still.
          refused({ slot, file, code: 'CONFIG_ROLLED_BACK', message: rolledBackMessage(`it holds version ${outcome.entry.version}`, highest) });
          return { loaded: undefined, refusals, missing };
        }
        return { loaded: { ...outcome, olderThanApplied: highest }, refusals, missing };
      }
      return { loaded: outcome, refusals, missing };
    }
    return { loaded: undefined, refusals, missing };
  }

  /** One cache file, verified and built; 'missing' when there is none. */
  async read<T>(slot: CacheSlot, trust: BundleTrust, build: (bundle: ConfigBundle) => T): Promise<LoadedBundle<T> | CacheRefusal | 'missing'> {
    const file = this.file(slot);
    // Taken before the read: a file replaced in between has another stamp, and is read again (followCache).
    let stamp: string | undefined;
    const refuse = (code: CacheRefusalCode, message: string): CacheRefusal => ({ slot, file, code, message, ...(stamp !== undefined ? { stamp } : {}) });
    let text: string;
    try {
      const info = await stat(file, { bigint: true });
      stamp = stampOf(info);
      if (info.size > BigInt(MAX_CACHE_FILE_BYTES)) return refuse('CONFIG_CACHE_CORRUPT', `the file is ${info.size} bytes, more than a bundle can take`);
      text = await readFile(file, 'utf8');
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return 'missing';
      // Not the content's fault: no stamp, so it is read again (followCache).
      return { slot, file, code: 'CONFIG_CACHE_UNREADABLE', message: `cannot read it (${code ?? (err as Error).message})` };
    }
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      return refuse('CONFIG_CACHE_CORRUPT', 'the file is not JSON');
    }
    const envelope = cachedBundleSchema.safeParse(value);
    if (!envelope.success) return refuse('CONFIG_CACHE_CORRUPT', describeIssues(envelope.error).join('; '));
    const entry = envelope.data;
    const check = checkBundle(Buffer.from(entry.bundle, 'utf8'), Buffer.from(entry.signature, 'base64'), trust);
    if (!check.ok) return refuse(check.code, check.message);
    if (check.bundle.version !== entry.version) {
      return refuse('CONFIG_CACHE_CORRUPT', `the file says version ${entry.version} but its bundle is version ${check.bundle.version}`);
    }
    try {
      return { slot, file, entry, bundle: check.bundle, value: build(check.bundle), stamp };
    } catch (err) {
      return refuse('CONFIG_APPLY_FAILED', (err as Error).message);
    }
  }

  /**
   * What identifies the file's content without reading it: its inode, size and modification time
   * (every store renames a new file into place); undefined when it cannot be stat'ed.
   */
  async stamp(slot: CacheSlot): Promise<string | undefined> {
    return stat(this.file(slot), { bigint: true }).then(stampOf, () => undefined);
  }

  /**
   * Removes the temp files a crash left mid-write of current.json or previous.json (nothing else);
   * resolves to their names. Only under config-apply.lock: stores are written under it, so no temp
   * file of a live replica's write is there while the lock is held.
   */
  async removeInterruptedWrites(): Promise<string[]> {
    return removeInterruptedWrites(this.dir, SLOTS.map((slot) => path.basename(this.file(slot))));
  }

  /**
   * Makes `next` current and `keep` (the verified bundle being served until now) previous; resolves
   * once both are durable. Previous is written first: a crash in between leaves current unchanged.
   */
  async store(next: CachedBundle, keep: CachedBundle | undefined): Promise<void> {
    await mkdir(this.dir, { recursive: true, mode: DIR_MODE });
    // mkdir's mode is filtered by the umask, and the directory may predate this code.
    await chmod(this.dir, DIR_MODE);
    if (keep !== undefined) await writeFileAtomic(this.file('previous'), serialize(keep), FILE_MODE);
    await writeFileAtomic(this.file('current'), serialize(next), FILE_MODE);
  }
}

function rolledBackMessage(what: string, highest: number): string {
  return (
    `${what}, but this node already applied version ${highest} (${APPLIED_VERSION_FILE}): the config cache was rolled back or restored from an older copy, ` +
    `and an older config may allow keys revoked since. The node waits for version ${highest} or newer from the control plane; ` +
    `to serve the older cache anyway, stop the node and delete ${APPLIED_VERSION_FILE} from the state dir`
  );
}

function serialize(entry: CachedBundle): string {
  return `${JSON.stringify(cachedBundleSchema.parse(entry))}\n`;
}
