/**
 * Opens the node's spool in its state dir (`serve` calls this once): vets or creates spool.db,
 * keeps the marker in step, recovers interrupted rows, and wires backfill. Replicas do the first
 * three one at a time, under the lock of `spool.db.lock` (state/open-lock.ts). Refusals
 * (SpoolRefusedError) name the file and what to do; `serve` exits non-zero with the message.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import type { ConfigHolder } from '../config/config-holder.js';
import type { ControlChannel } from '../control/control-channel.js';
import type { Logger } from '../logger.js';
import type { NodeFigures } from '../metrics/node-pipeline-metrics.js';
import { ReplicaSettingError } from '../rate-limit/create-node-rate-limiter.js';
import { underOpenLockAsync } from '../state/open-lock.js';
import { openStateStore } from '../state/state-store.js';
import type { StateStore } from '../state/state-store.js';
import { BackfillChannel } from './backfill-channel.js';
import { noSpool } from './request-spool.js';
import type { RequestSpool } from './request-spool.js';
import {
  checkSpoolFileAccess,
  createSpoolFile,
  refuseSymlinkedSpoolFiles,
  restrictSpoolFileModes,
  SPOOL_FILE,
  SpoolFileExistsError,
  SpoolRefusedError,
  spoolRecordSequence,
  vetSpoolFile,
} from './spool-file.js';
import type { SpoolMeta } from './spool-file.js';
import { SpoolOwnerLock, isSoleProcessLockHeld, isSpoolHeldOpen, soleProcessLockFile } from './spool-owner-lock.js';
import { loadSpoolMarker, saveSpoolMarker, SPOOL_MARKER_FILE } from './spool-marker.js';
import type { SpoolMarker } from './spool-marker.js';
import { DEFAULT_SPOOL_LIMITS, SpoolStore } from './spool-store.js';
import type { SpoolLimits, SpoolState, SpoolSynchronous } from './spool-store.js';

export interface NodeSpool {
  spool: RequestSpool;
  /** Backfill over the control session. */
  channel?: ControlChannel;
  /** For heartbeats and status. */
  figures(): NodeFigures;
  /** Fill against the quota and failing writes, for /readyz and control-status.json (undefined without a spool). */
  state(): SpoolState | undefined;
  /** See SpoolStore.onStateChanged. */
  onStateChanged(listener: () => void): void;
  /** What the spool knows of earlier runs' requests, for the lease book's start (undefined without a spool). */
  earlierRuns?: {
    ownerSlot: number;
    isOwnerGone(slot: number): boolean;
    holdsRequest(requestId: string): boolean;
    finalCostOf(requestId: string): number | undefined;
  };
  close(): Promise<void>;
}

export interface OpenNodeSpoolOptions {
  /** undefined in stand-alone mode. */
  stateDir: string | undefined;
  nodeId: string;
  holder: ConfigHolder;
  logger: Logger;
  /** ZENOVA_SPOOL_SYNCHRONOUS: `full` trades throughput for surviving power loss (docs/spool.md). */
  synchronous: SpoolSynchronous;
  /**
   * ZENOVA_NODE_REPLICAS (`serve` passes it): at 1, a spool another live process has open is refused
   * (ReplicaSettingError). Unset: not checked (tests that open several stores in one process).
   */
  replicas?: number;
}

/**
 * How long a starting replica waits for another to open the spool: vetting runs quick_check over the
 * whole file, seconds for a large spool (a start does nothing else meanwhile).
 */
const SPOOL_OPEN_LOCK_WAIT_MS = 60_000;

/** How often records other replicas committed to the shared spool are looked for. */
const OTHER_WRITERS_POLL_MS = 500;

/** spool.json's sequence mark is rewritten at most this often (each write is two fsyncs). */
const SEQUENCE_MARK_WRITE_MS = 2_000;

/**
 * Keeps spool.json's `sequenceMark` following the spool's durable record sequence (SpoolStore's
 * onDurableSequence), one write at a time, at most every SEQUENCE_MARK_WRITE_MS. Never raises it
 * past what a checkpoint synced, so no crash or power loss leaves spool.db below it; a write that
 * fails, or one a replica's lower value overtakes, only leaves it lower (detection then lags).
 */
class SequenceMarkWriter {
  private wanted = 0;
  private writing: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private lastWriteAt = -Infinity;
  private closed = false;

  constructor(
    private readonly store: StateStore,
    private readonly meta: SpoolMeta,
    private readonly logger: Logger,
  ) {}

  offer(sequence: number): void {
    if (this.closed || !(sequence > this.wanted)) return;
    this.wanted = sequence;
    this.schedule();
  }

  private schedule(): void {
    if (this.closed || this.writing !== undefined || this.timer !== undefined) return;
    const wait = Math.max(0, this.lastWriteAt + SEQUENCE_MARK_WRITE_MS - performance.now());
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.writing = this.write().finally(() => {
        this.writing = undefined;
      });
    }, wait);
    this.timer.unref();
  }

  private async write(): Promise<void> {
    const sequence = this.wanted;
    this.lastWriteAt = performance.now();
    try {
      const marker = await loadSpoolMarker(this.store);
      // Moved aside (a loss accepted) or another spool's: not this writer's to recreate or take over.
      if (marker === undefined || marker.spoolId !== this.meta.spoolId) return;
      if ((marker.sequenceMark ?? 0) >= sequence) return;
      await saveSpoolMarker(this.store, this.meta, sequence);
    } catch (err) {
      this.logger.debug({ message: (err as Error).message, sequence }, "could not write the spool's sequence mark into spool.json");
    }
    if (this.wanted > sequence) this.schedule();
  }

  /** Stops; a write under way finishes first. */
  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    this.timer = undefined;
    await this.writing;
  }
}

/** The pushed config's quota and policy, else the node's defaults. */
export function spoolLimitsOf(holder: ConfigHolder): SpoolLimits {
  const snapshot = holder.current();
  const settings = snapshot.ready ? snapshot.config.spool : null;
  return settings ?? DEFAULT_SPOOL_LIMITS;
}

export async function openNodeSpool(opts: OpenNodeSpoolOptions): Promise<NodeSpool> {
  if (opts.stateDir === undefined) {
    return { spool: noSpool, figures: () => ({ spoolBytes: 0, backfillBacklog: 0 }), state: () => undefined, onStateChanged: () => undefined, close: async () => undefined };
  }
  const store = await openStateStore(opts.stateDir, { create: false });
  const file = path.join(store.dir, SPOOL_FILE);
  // Replicas start at once on a fresh state dir: without the lock each could find no spool.db,
  // create one and write its marker, and the spools and markers of the others would be lost.
  const { meta, spoolStore, sole, marks } = await underOpenLockAsync(
    spoolOpenLockFile(file),
    async () => {
      // First: the probes of the owner slots below, and the spool's checks, would follow a link.
      refuseSymlinkedSpoolFiles(file);
      // Under the lock, every other process that opened the spool holds its owner slot (and, at
      // ZENOVA_NODE_REPLICAS=1, the sole-process lock) already.
      if (opts.replicas === 1 && (await heldOpenByAnother(file))) throw otherProcessRefusal(store.dir);
      if (opts.replicas !== undefined && opts.replicas > 1 && (await soleProcessBeside(file))) throw soleProcessRefusal(store.dir, opts.replicas);
      const meta = await vetOrCreateSpool(store, file, opts);
      const marks = new SequenceMarkWriter(store, meta, opts.logger);
      const spoolStore = new SpoolStore({
        file,
        meta,
        logger: opts.logger,
        limits: () => spoolLimitsOf(opts.holder),
        synchronous: opts.synchronous,
        onDurableSequence: (sequence) => marks.offer(sequence),
      });
      // Held for the process's life (released at close): a process started beside it at a higher setting refuses.
      const sole = opts.replicas === 1 ? await acquireSole(file) : undefined;
      if (opts.replicas === 1 && sole === undefined) {
        // A process that was closing held it (its owner slot already released): serving goes on,
        // but what the lock guards is not guarded for this process's life.
        opts.logger.warn(
          { file: soleProcessLockFile(file) },
          'could not take the sole-process lock (another process held it); this process serves without it, so a node-edge started beside it with ZENOVA_NODE_REPLICAS above 1 is not refused: restart this one once no other runs',
        );
      }
      return { meta, spoolStore, sole, marks };
    },
    SPOOL_OPEN_LOCK_WAIT_MS,
  );
  const channel = new BackfillChannel({ store: spoolStore, logger: opts.logger });
  // Replicas share spool.db and only the control link's holder backfills: it looks for their
  // records (and every replica keeps its backlog figure true) twice a second.
  spoolStore.noticeOtherWriters();
  const otherWriters = setInterval(() => {
    try {
      spoolStore.noticeOtherWriters();
    } catch (err) {
      opts.logger.debug({ message: (err as Error).message }, 'could not look for other replicas\' spool records');
    }
  }, OTHER_WRITERS_POLL_MS);
  otherWriters.unref();
  opts.logger.info({ file, spoolId: meta.spoolId, backlog: spoolStore.backlogCount(), bytes: spoolStore.bytes() }, 'request spool open');
  return {
    spool: spoolStore,
    channel,
    earlierRuns: spoolStore,
    figures: () => ({ spoolBytes: spoolStore.bytes(), backfillBacklog: spoolStore.backlogCount(), backfillRejected: channel.totals.rejected }),
    state: () => spoolStore.state(),
    onStateChanged: (listener) => void spoolStore.onStateChanged(listener),
    close: async () => {
      clearInterval(otherWriters);
      channel.stop();
      // Before the store gives its owner slot up: with no slot held, a re-enrollment may move
      // spool.json into retired/, and a mark written after would put it back.
      await marks.close();
      await spoolStore.close();
      sole?.release();
    },
  };
}

/** The lock replicas open spool.db under, `spool.db.lock` (the installer accepts it in data/: install-dir-contents.ts). */
export function spoolOpenLockFile(file: string): string {
  return `${file}.lock`;
}

/** spool.db is gone while spool.json says this node had one: its undelivered records may be lost. */
export function missingSpoolRefusal(store: StateStore, file: string, marker: SpoolMarker): SpoolRefusedError {
  return new SpoolRefusedError(
    file,
    `is missing, but ${store.path(SPOOL_MARKER_FILE)} says spool ${marker.spoolId} was created here on ${marker.createdAt}; an empty new spool is never taken as proof that its records were delivered`,
    'restore spool.db (with its -wal file if there was one) from where it went; if it is lost for good, move spool.json aside, ' +
      'with spool.db-wal and spool.db-shm if they are still here (a new spool would replay that WAL: the lost records would appear in it), to start a new spool and accept the loss',
  );
}

/** spool.db is another spool than the one spool.json names (the file was replaced). */
export function replacedSpoolRefusal(store: StateStore, file: string, meta: SpoolMeta, marker: SpoolMarker): SpoolRefusedError {
  return new SpoolRefusedError(
    file,
    `is spool ${meta.spoolId}, but ${store.path(SPOOL_MARKER_FILE)} says this node's spool is ${marker.spoolId} (the file was replaced)`,
    'put the original spool.db back; if it is lost for good and its undelivered records with it, move spool.json aside to accept this file',
  );
}

/**
 * Throws serve's refusal of a vetted spool.db that spool.json says is not the spool it marked:
 * another spool (replacedSpoolRefusal), or an older copy of it (olderSpoolRefusal). Shared with
 * doctor (spool-check.ts), so doctor fails what serve refuses. Reads only.
 */
export function checkAgainstMarker(store: StateStore, file: string, meta: SpoolMeta, marker: SpoolMarker | undefined): void {
  if (marker !== undefined && marker.spoolId !== meta.spoolId) throw replacedSpoolRefusal(store, file, meta, marker);
  if (marker?.sequenceMark !== undefined) {
    // Replicas serving meanwhile only raise it: a spool below the mark is an older copy of this one.
    const sequence = spoolRecordSequence(file);
    if (sequence < marker.sequenceMark) throw olderSpoolRefusal(store, file, marker, sequence);
  }
}

/** spool.db is this spool, but older than spool.json's mark (an older copy put back by hand). */
export function olderSpoolRefusal(store: StateStore, file: string, marker: SpoolMarker, sequence: number): SpoolRefusedError {
  return new SpoolRefusedError(
    file,
    `is an older copy of spool ${marker.spoolId}: its records go up to sequence ${sequence}, but ${store.path(SPOOL_MARKER_FILE)} says this spool had durably reached ${marker.sequenceMark} ` +
      '(the file was put back from a backup or copy); the records written after the copy was taken are not in it, and serving from it would take them as lost without a word',
    'put the newest spool.db back (with its -wal file if there was one); if it is lost for good and the records written after the copy with it, move spool.json aside to accept this file',
  );
}

/** spool.db vetted (its marker adopted or checked), or made with its marker when there is none. */
async function vetOrCreateSpool(store: StateStore, file: string, opts: OpenNodeSpoolOptions): Promise<SpoolMeta> {
  const marker = await loadSpoolMarker(store);
  if (!existsSync(file)) {
    if (marker !== undefined) throw missingSpoolRefusal(store, file, marker);
    try {
      const meta = createSpoolFile(file, opts.nodeId);
      await saveSpoolMarker(store, meta);
      opts.logger.info({ file, spoolId: meta.spoolId }, 'created a new request spool');
      return meta;
    } catch (err) {
      // A process that opens spool.db without the lock (a replica of an earlier release) made it first: it is the spool.
      if (!(err instanceof SpoolFileExistsError)) throw err;
    }
  }
  // Before the vetting connection, which creates missing sidecars with spool.db's mode.
  restrictSpoolFileModes(file);
  checkSpoolFileAccess(file);
  // Committed transactions lost with the WAL (moved or cut short after a kill): served on, said loudly.
  const meta = vetSpoolFile(file, opts.nodeId, (warning) => opts.logger.warn({ file }, warning));
  checkAgainstMarker(store, file, meta, marker);
  // No marker yet (created by a run that stopped before writing it): adopt the vetted file.
  if (marker === undefined) await saveSpoolMarker(store, meta);
  return meta;
}

/**
 * A lock's answer asked up to three times 25 ms apart, until `settled` says it is the final one: a
 * probe (`zenova-node status`, or a replica starting) holds a lock for a moment, and one busy
 * answer must not refuse a node that is alone, nor leave it without its own lock.
 */
async function askThrice<T>(ask: () => T, settled: (answer: T) => boolean): Promise<T> {
  let answer = ask();
  for (let probe = 1; probe < 3 && !settled(answer); probe++) {
    await new Promise((resolve) => setTimeout(resolve, 25));
    answer = ask();
  }
  return answer;
}

/** Whether another live process holds a spool owner slot. */
function heldOpenByAnother(file: string): Promise<boolean> {
  return askThrice(() => isSpoolHeldOpen(file), (held) => !held);
}

/** Whether a live process at ZENOVA_NODE_REPLICAS=1 serves from this spool (it holds the sole-process lock). */
function soleProcessBeside(file: string): Promise<boolean> {
  return askThrice(() => isSoleProcessLockHeld(file), (held) => !held);
}

/** The sole-process lock for this process. */
function acquireSole(file: string): Promise<SpoolOwnerLock | undefined> {
  return askThrice(() => SpoolOwnerLock.acquireSole(file), (sole) => sole !== undefined);
}

function soleProcessRefusal(stateDir: string, replicas: number): ReplicaSettingError {
  return new ReplicaSettingError(
    `another node-edge process is serving from ${stateDir} with ZENOVA_NODE_REPLICAS unset or 1, which keeps its rate-limit counters in its own memory: ` +
      `this one (ZENOVA_NODE_REPLICAS=${replicas}) would count in the shared file without it, and each would enforce every limit on its own. ` +
      `Set ZENOVA_NODE_REPLICAS=${replicas} on that process too and restart it, then start this one; or stop it first`,
  );
}

/**
 * ZENOVA_NODE_REPLICAS is 1 (or unset) while another live process serves from this state dir: each
 * would keep its rate-limit counters in memory, every limit multiplied by the number of processes.
 */
function otherProcessRefusal(stateDir: string): ReplicaSettingError {
  return new ReplicaSettingError(
    `another node-edge process is serving from ${stateDir} (it holds a spool owner slot there), and this one has ZENOVA_NODE_REPLICAS unset or 1, ` +
      'which keeps rate-limit counters in this process only: each process would enforce every limit on its own. ' +
      'To run several node-edge processes on one state dir, set ZENOVA_NODE_REPLICAS to the number of processes on every one of them (and restart those running); ' +
      'otherwise stop the other process first',
  );
}
