/**
 * Makes each node's signed bundle cheaply enough for a fleet. A change reaches every live session
 * at once, so requests are batched: all nodes waiting at one moment share ONE snapshot transaction
 * (the version, their rows, and the shared parts when that version is new), instead of one
 * transaction each queueing on the pool. The parts every node shares are rendered to canonical
 * JSON (and to UTF-8 bytes) once per version; per node only its own part is spliced in — one copy of
 * the bytes — and signed, yielding
 * between nodes so each push goes out as soon as it is signed. The last signed bundle of each node
 * is kept (bounded by bytes), so a node that reconnects, or is pushed the same version twice, costs
 * nothing.
 *
 * The splice yields exactly canonicalJson(bundle): canonical JSON of an object is its entries, keys
 * sorted, each value canonical in turn, so pre-rendered values can be joined under sorted keys.
 */
import { setImmediate as nextTurn } from 'node:timers/promises';
import type pg from 'pg';
import { CONFIG_BUNDLE_SCHEMA_VERSION, canonicalJson } from '../../../proto/src/index.js';
import type { SecretBox } from '../crypto/secret-box.js';
import type { Queryable } from '../nodes/with-transaction.js';
import {
  inConfigSnapshot,
  readBundleNodes,
  readFleetConfig,
  signBundleBytes,
  type BundleNode,
  type FleetConfig,
  type SignedBundle,
} from './bundle-builder.js';
import { latestConfigVersion } from './config-changes.js';
import type { ConfigSigningKey } from './signing-key.js';

export interface ConfigPublisherOptions {
  pool: pg.Pool;
  secretBox: SecretBox;
  signingKey: ConfigSigningKey;
  /** Upper bound of the per-node cache of signed bundles (default 64 MiB). */
  maxCachedBytes?: number;
  /** issuedAt of new bundles (tests may pin it). */
  now?: () => Date;
}

type FleetKey = keyof FleetConfig;

/** A version's shared parts, each already `"key":<canonical JSON>` in UTF-8. */
export interface RenderedFleet { version: number; parts: Record<FleetKey, Buffer> }

interface Waiter { resolve(bundle: SignedBundle | undefined): void; reject(err: unknown): void }

const DEFAULT_MAX_CACHED_BYTES = 64 * 1024 * 1024;

const member = (key: string, json: string): Buffer => Buffer.from(`${JSON.stringify(key)}:${json}`, 'utf8');

export function renderFleet(version: number, fleet: FleetConfig): RenderedFleet {
  return {
    version,
    parts: {
      accounts: member('accounts', canonicalJson(fleet.accounts)),
      apiKeys: member('apiKeys', canonicalJson(fleet.apiKeys)),
      upstreams: member('upstreams', canonicalJson(fleet.upstreams)),
      routes: member('routes', canonicalJson(fleet.routes)),
      guardrailPolicies: member('guardrailPolicies', canonicalJson(fleet.guardrailPolicies)),
      prices: member('prices', canonicalJson(fleet.prices)),
      toolServers: member('toolServers', canonicalJson(fleet.toolServers)),
    },
  };
}

const byKey = ([a]: [string, Buffer], [b]: [string, Buffer]): number => (a < b ? -1 : a > b ? 1 : 0);
const OPEN = Buffer.from('{');
const COMMA = Buffer.from(',');
const CLOSE = Buffer.from('}');

/** canonicalJson(assembleBundle(version, node, fleet, issuedAt)), without re-rendering the fleet. */
export function spliceBundle(version: number, node: BundleNode, fleet: RenderedFleet, issuedAt: Date): Buffer {
  const entries: Array<[string, Buffer]> = [
    ...Object.entries<Buffer>(fleet.parts),
    ['issuedAt', member('issuedAt', JSON.stringify(issuedAt.toISOString()))],
    ['node', member('node', canonicalJson(node.node))],
    ['nodeId', member('nodeId', JSON.stringify(node.nodeId))],
    ['nodeName', member('nodeName', JSON.stringify(node.nodeName))],
    ['schemaVersion', member('schemaVersion', String(CONFIG_BUNDLE_SCHEMA_VERSION))],
    ['version', member('version', String(version))],
  ];
  entries.sort(byKey);
  const pieces: Buffer[] = [OPEN];
  entries.forEach(([, bytes], i) => pieces.push(...(i === 0 ? [bytes] : [COMMA, bytes])));
  pieces.push(CLOSE);
  return Buffer.concat(pieces);
}

export class ConfigPublisher {
  private known = 0;
  private fleet: RenderedFleet | undefined;
  /** Insertion order is recency: a hit is re-inserted, eviction takes the first. */
  private readonly signed = new Map<string, SignedBundle>();
  private cachedBytes = 0;
  private readonly maxCachedBytes: number;
  private readonly now: () => Date;
  private waiting = new Map<string, Waiter[]>();
  private batchQueued = false;
  private batchRunning = false;

  constructor(private readonly opts: ConfigPublisherOptions) {
    this.maxCachedBytes = opts.maxCachedBytes ?? DEFAULT_MAX_CACHED_BYTES;
    this.now = opts.now ?? (() => new Date());
  }

  /** The newest version this process has heard of (notifications, or a read of the database). */
  get knownLatest(): number {
    return this.known;
  }

  /** Takes note of a version (e.g. from a notification); true when it is newer than any known. */
  noteVersion(version: number): boolean {
    if (version <= this.known) return false;
    this.known = version;
    return true;
  }

  /** Reads the newest committed version (and takes note of it). */
  async latestVersion(): Promise<number> {
    const version = await latestConfigVersion(this.opts.pool);
    this.noteVersion(version);
    return version;
  }

  /**
   * The node's signed bundle at the newest committed version; undefined when the node does not
   * exist (deleted). Rejects with BundleBuildError / SecretBoxError when the stored config cannot
   * make a bundle (messages that name no secret), or with the database's error.
   */
  bundleFor(nodeId: string): Promise<SignedBundle | undefined> {
    return new Promise((resolve, reject) => {
      const waiters = this.waiting.get(nodeId);
      if (waiters === undefined) this.waiting.set(nodeId, [{ resolve, reject }]);
      else waiters.push({ resolve, reject });
      this.scheduleBatch();
    });
  }

  /** Drops the node's cached bundle. */
  forget(nodeId: string): void {
    const cached = this.signed.get(nodeId);
    if (cached === undefined) return;
    this.signed.delete(nodeId);
    this.cachedBytes -= cached.bytes.byteLength;
  }

  // ---- batching ----

  private scheduleBatch(): void {
    // A running batch takes whatever is waiting when it finishes.
    if (this.batchQueued || this.batchRunning) return;
    this.batchQueued = true;
    // Next turn of the event loop: every session told of a change in this turn joins the batch.
    setImmediate(() => void this.runBatches());
  }

  private async runBatches(): Promise<void> {
    this.batchQueued = false;
    this.batchRunning = true;
    try {
      while (this.waiting.size > 0) {
        const batch = this.waiting;
        this.waiting = new Map();
        await this.build(batch);
      }
    } finally {
      this.batchRunning = false;
    }
  }

  private async build(batch: Map<string, Waiter[]>): Promise<void> {
    const settle = (nodeId: string, outcome: { bundle: SignedBundle | undefined } | { err: unknown }): void => {
      for (const waiter of batch.get(nodeId) ?? []) {
        if ('err' in outcome) waiter.reject(outcome.err);
        else waiter.resolve(outcome.bundle);
      }
    };
    // Held for the whole batch: signing another node's bundle may evict one from the cache before its
    // turn, and a node with neither a cached bundle nor a row read reads as deleted (no push).
    const cachedAtRead = new Map<string, SignedBundle | undefined>();
    let read: { version: number; nodes: Map<string, BundleNode>; fleet: RenderedFleet | undefined };
    try {
      read = await inConfigSnapshot(this.opts.pool, async (client) => {
        const version = await latestConfigVersion(client);
        this.noteVersion(version);
        for (const id of batch.keys()) cachedAtRead.set(id, this.signed.get(id));
        // A node's own row changes only with a new version (node settings are config changes too).
        const stale = [...batch.keys()].filter((id) => cachedAtRead.get(id)?.version !== version);
        const nodes = stale.length > 0 ? await readBundleNodes(client, stale) : new Map<string, BundleNode>();
        const fleet = nodes.size > 0 ? await this.fleetAt(version, client) : undefined;
        return { version, nodes, fleet };
      });
    } catch (err) {
      for (const nodeId of batch.keys()) settle(nodeId, { err });
      return;
    }
    const issuedAt = this.now();
    for (const nodeId of batch.keys()) {
      const cached = cachedAtRead.get(nodeId);
      if (cached?.version === read.version) {
        this.remember(nodeId, cached);
        settle(nodeId, { bundle: cached });
        continue;
      }
      const node = read.nodes.get(nodeId);
      if (node === undefined || read.fleet === undefined) {
        this.forget(nodeId);
        settle(nodeId, { bundle: undefined });
        continue;
      }
      try {
        const signed = signBundleBytes(read.version, spliceBundle(read.version, node, read.fleet, issuedAt), this.opts.signingKey);
        this.remember(nodeId, signed);
        settle(nodeId, { bundle: signed });
      } catch (err) {
        settle(nodeId, { err });
      }
      // Let this node's push go out (and acks come in) before signing the next one.
      await nextTurn();
    }
  }

  private remember(nodeId: string, signed: SignedBundle): void {
    this.forget(nodeId);
    if (signed.bytes.byteLength > this.maxCachedBytes) return;
    this.signed.set(nodeId, signed);
    this.cachedBytes += signed.bytes.byteLength;
    for (const [id, old] of this.signed) {
      if (this.cachedBytes <= this.maxCachedBytes) break;
      this.signed.delete(id);
      this.cachedBytes -= old.bytes.byteLength;
    }
  }

  /** The shared parts at `version`, read on `client` (whose snapshot is at that version) unless rendered already. */
  private async fleetAt(version: number, client: Queryable): Promise<RenderedFleet> {
    if (this.fleet?.version === version) return this.fleet;
    const rendered = renderFleet(version, await readFleetConfig(client, this.opts.secretBox));
    // Batches run one at a time, but a later one may have read an older snapshot: keep the newest.
    if (this.fleet === undefined || this.fleet.version < version) this.fleet = rendered;
    return rendered;
  }
}
