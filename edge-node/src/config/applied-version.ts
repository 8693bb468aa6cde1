/**
 * config-applied-version.json: the highest config version this node ever applied, kept apart from
 * the bundle cache (state-store.ts: atomic, 0600) so that rolling the cache back on disk (an old
 * current.json, previous.json copied over it, current.json removed) is noticed at start-up instead
 * of silently serving the older config — with the keys it revoked since — while the control plane
 * is out of reach. It is written after the bundle is durable in the cache and before the node
 * serves it. The mark belongs to one trust (node id and config-signing key): after a re-enrollment
 * to another node or control plane the old mark no longer applies.
 */
import { createHash } from 'node:crypto';
import { z } from 'zod';
import type { StateStore } from '../state/state-store.js';
import { StateFileError } from '../state/state-store.js';
import { describeIssues } from '../zod-issues.js';
import type { BundleTrust } from './bundle-cache.js';

export const APPLIED_VERSION_FILE = 'config-applied-version.json';
/** In the state dir: the lock replicas apply a bundle under (floor check, cache write, mark) (apply-bundle.ts). */
export const CONFIG_APPLY_LOCK_FILE = 'config-apply.lock';

const appliedVersionSchema = z.object({
  /** The highest bundle version applied (written to the cache and served). */
  version: z.int().min(1),
  nodeId: z.string().min(1).max(200),
  /** SHA-256 (hex) of the config-signing public key the bundle verified with. */
  signingKeySha256: z.string().regex(/^[0-9a-f]{64}$/),
  appliedAt: z.iso.datetime({ offset: true }),
});

export type AppliedVersionRecord = z.infer<typeof appliedVersionSchema>;

/** The signing key's fingerprint as the mark records it (whitespace around the PEM ignored). */
export function signingKeySha256(publicKeyPem: string): string {
  return createHash('sha256').update(publicKeyPem.trim(), 'utf8').digest('hex');
}

const DAMAGED_ADVICE =
  '(it records the highest config version this node applied; if it is damaged, stop the node and delete it: the cached config is then accepted as it is)';

/** The mark, or undefined when there is none; a damaged file is a StateFileError naming it and what to do. */
export async function loadAppliedVersion(store: StateStore): Promise<AppliedVersionRecord | undefined> {
  let value: unknown;
  try {
    value = await store.read(APPLIED_VERSION_FILE);
  } catch (err) {
    // Truncated or garbled JSON is damage like a schema failure; an unreadable file (EACCES) is not.
    if (err instanceof StateFileError && err.cause instanceof SyntaxError) {
      throw new StateFileError(store.path(APPLIED_VERSION_FILE), `is not valid JSON ${DAMAGED_ADVICE}`, { cause: err.cause });
    }
    throw err;
  }
  if (value === undefined) return undefined;
  const parsed = appliedVersionSchema.safeParse(value);
  if (!parsed.success) {
    throw new StateFileError(store.path(APPLIED_VERSION_FILE), `${describeIssues(parsed.error).join('; ')} ${DAMAGED_ADVICE}`);
  }
  return parsed.data;
}

/** The highest version a record marks for `trust`; 0 when there is none or it is another trust's. */
export function highestFor(record: AppliedVersionRecord | undefined, trust: BundleTrust): number {
  if (record === undefined) return 0;
  if (record.nodeId !== trust.nodeId || record.signingKeySha256 !== signingKeySha256(trust.publicKeyPem)) return 0;
  return record.version;
}

/** The mark in one state dir, read once and kept in step with what this process writes. */
export class AppliedVersionMark {
  private known: AppliedVersionRecord | undefined;
  private writes: Promise<void> = Promise.resolve();

  private constructor(
    private readonly store: StateStore,
    record: AppliedVersionRecord | undefined,
  ) {
    this.known = record;
  }

  /** Reads the mark (a damaged file is a StateFileError naming it). */
  static async open(store: StateStore): Promise<AppliedVersionMark> {
    return new AppliedVersionMark(store, await loadAppliedVersion(store));
  }

  file(): string {
    return this.store.path(APPLIED_VERSION_FILE);
  }

  /** The highest version applied under `trust` (0: none). */
  highest(trust: BundleTrust): number {
    return highestFor(this.known, trust);
  }

  /**
   * Rereads the file (another replica of the node may have raised it); keeps what this process
   * knows when the file cannot be read. Never lowers the mark.
   */
  async refresh(): Promise<void> {
    try {
      const onDisk = await loadAppliedVersion(this.store);
      if (onDisk !== undefined && (this.known === undefined || onDisk.nodeId !== this.known.nodeId || onDisk.signingKeySha256 !== this.known.signingKeySha256 || onDisk.version > this.known.version)) {
        this.known = onDisk;
      }
    } catch {
      // A damaged file is reported at the next start; what this process knows still holds.
    }
  }

  /** Raises the mark to `version` under `trust` (never lowers it for the same trust); durable on return. */
  async record(version: number, trust: BundleTrust, appliedAt: Date): Promise<void> {
    const write = this.writes.then(async () => {
      // What another replica wrote since this process read the mark counts too: never lowered.
      await this.refresh();
      if (this.highest(trust) >= version) return;
      const next: AppliedVersionRecord = {
        version,
        nodeId: trust.nodeId,
        signingKeySha256: signingKeySha256(trust.publicKeyPem),
        appliedAt: appliedAt.toISOString(),
      };
      await this.store.write(APPLIED_VERSION_FILE, appliedVersionSchema.parse(next));
      this.known = next;
    });
    this.writes = write.catch(() => undefined);
    return write;
  }
}
