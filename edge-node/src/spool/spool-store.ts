/**
 * The spool's SQLite store (see docs/spool.md): open rows and final records with group commit,
 * the byte quota and full policy, the backlog for backfill, and acked-row deletion.
 *
 * Group commit: open() and finalise() only queue; one transaction (spool-writer.ts) writes
 * everything queued, on the next turn of the event loop (setImmediate) or at once when maxQueued
 * writes are waiting. finalise() resolves when the transaction holding its record has committed.
 * A failed commit (SQLITE_FULL, disk full, I/O error) keeps the queue and retries on a timer:
 * finalises stay pending (the caller's last byte waits; nothing is ever reported durable that is
 * not), and open() refuses new requests with ZN_ERR_SPOOL_FULL until a commit succeeds again.
 * A final still queued when the node's stop closes its caller's connection is stamped again as
 * the pipeline registered (onUndelivered, stampUndelivered): its answer never went out.
 * Checkpoints run in a worker thread (state/wal-checkpointer.ts), never inside a commit.
 */
import Database from 'better-sqlite3';
import type { RequestRecord } from '../../../proto/src/index.js';
import { zenovaError } from '../errors.js';
import type { Logger } from '../logger.js';
import { interruptedRecord, openRowSchema } from './interrupted-record.js';
import type { OpenRow, RequestSpool } from './request-spool.js';
import { RECORD_SEQUENCE_QUERY, spoolLiveBytes, spoolWalBytes } from './spool-file.js';
import type { SpoolMeta } from './spool-file.js';
import { WalCheckpointer } from '../state/wal-checkpointer.js';
import { isMarkedProcessAlive, thisProcessMark } from '../process-alive.js';
import { isOwnerSlotHeld, SpoolOwnerLock } from './spool-owner-lock.js';
import { SpoolWriter } from './spool-writer.js';
import type { SpoolOp } from './spool-writer.js';

export type FullPolicy = 'reject' | 'metering-only';

export interface SpoolLimits {
  quotaBytes: number;
  fullPolicy: FullPolicy;
}

/** See SpoolStore.state(). */
export interface SpoolState {
  /** Live bytes (the quota's measure). */
  bytes: number;
  quotaBytes: number;
  fullPolicy: FullPolicy;
  /** At or over the quota. */
  full: boolean;
  /** Set while commits fail (every new request is refused): the error code and since when. */
  writeFailing: { code: string; since: string } | null;
}

/** What a full or failing spool means for callers and what to do; undefined when it has room and writes. */
export function spoolProblem(spool: Pick<SpoolState, 'quotaBytes' | 'fullPolicy' | 'full' | 'writeFailing'>): string | undefined {
  if (spool.writeFailing !== null) {
    return `the request spool cannot be written since ${spool.writeFailing.since} (${spool.writeFailing.code}): new requests are refused (ZN_ERR_SPOOL_FULL); free space in the state directory's filesystem (\`zenova-node doctor\`)`;
  }
  if (!spool.full) return undefined;
  const quota = `the request spool is at its quota (${spool.quotaBytes} bytes)`;
  const what = 'deliver the backlog (check the control link: `zenova-node status`) or raise the spool quota in the node\'s config';
  return spool.fullPolicy === 'reject'
    ? `${quota}: new requests are refused (ZN_ERR_SPOOL_FULL); ${what}`
    : `${quota}: requests are served and metered without their bodies (policy metering-only); ${what}`;
}

/** The node's own default when its config says nothing (a local config file). */
export const DEFAULT_SPOOL_LIMITS: SpoolLimits = { quotaBytes: 1024 ** 3, fullPolicy: 'reject' };

/** `full`: every commit waits for the disk (survives power loss); `normal`: survives process crashes. */
export type SpoolSynchronous = 'normal' | 'full';

export interface SpoolStoreOptions {
  file: string;
  meta: SpoolMeta;
  logger: Logger;
  /** Read on every open() so a pushed config applies at once. */
  limits: () => SpoolLimits;
  synchronous?: SpoolSynchronous;
  /** Queued writes that force a commit without waiting for the next tick. */
  maxQueued?: number;
  /** How long after a failed commit the next attempt is made. */
  retryMs?: number;
  /**
   * Told the spool's highest record sequence ever used (sqlite_sequence: never lowered, even when the
   * rows are delivered and deleted) once a checkpoint has made it durable: the mark spool.json keeps
   * (open-node-spool.ts), so an older copy of spool.db put back is found.
   */
  onDurableSequence?: (sequence: number) => void;
}

/** A backlog record's place and size, read without its JSON. */
export interface BacklogSize {
  sequence: number;
  /** Bytes of its record JSON. */
  bytes: number;
}

export interface BacklogRow {
  sequence: number;
  requestId: string;
  /** The record's JSON as stored (UTF-8 bytes), ready for the wire: no string is made of it. */
  recordJson: Buffer;
}

/** The open rows of one group commit share one promise (one per commit, not per request). */
interface OpenWaiter {
  promise: Promise<void>;
  resolve: () => void;
  reject: (err: Error) => void;
}

function newOpenWaiter(): OpenWaiter {
  let resolve!: () => void;
  let reject!: (err: Error) => void;
  const promise = new Promise<void>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  // A request refused before its forward stage never awaits it: a rejection must not go unhandled.
  promise.catch(() => undefined);
  return { promise, resolve, reject };
}

interface QueuedFinal {
  requestId: string;
  json: string;
  resolve: () => void;
  reject: (err: Error) => void;
}

/** What one commit carries. */
interface Batch {
  opens: OpenRow[];
  finals: QueuedFinal[];
  deletes: Array<{ first: number; last: number }>;
  /** Open rows this commit writes, and the ones it deletes (for openInDb once it committed). */
  opened: string[];
  closed: string[];
  /** UTF-8 bytes of the JSON written (plus a per-row allowance), for the size estimate between measurements. */
  bytes: number;
}

const DEFAULT_MAX_QUEUED = 512;
const DEFAULT_RETRY_MS = 1000;
/**
 * The file's size is measured (page counts and the WAL's stat) at most this often (on the
 * monotonic clock: a wall clock stepped back must not stop the measurements); between
 * measurements each commit adds an upper bound of what it can grow the file by (commitGrowth), so
 * the quota check errs towards full. Measured per commit it cost more than the commit. Deletes and
 * a figure at the quota are always measured.
 */
const MEASURE_EVERY_MS = 250;
/** Per-row overhead added to the JSON's UTF-8 bytes in the estimate (row header, index entries). */
const ROW_OVERHEAD_BYTES = 64;
/**
 * Whole pages a commit can write beyond its rows' own bytes: the WAL takes each page a commit
 * touches whole (the records table's and open rows' leaves, their indexes, an overflow chain's last
 * page, a split's new pages).
 */
const PAGES_PER_COMMIT = 6;
/** A WAL this large means the checkpoint worker is not keeping up (or failed): checkpoint here. */
const WAL_FALLBACK_CHECKPOINT_BYTES = 64 * 1024 * 1024;

export class SpoolStore implements RequestSpool {
  readonly meta: SpoolMeta;
  readonly file: string;
  private readonly db: Database.Database;
  private readonly writer: SpoolWriter;
  private readonly checkpointer: WalCheckpointer;
  private readonly logger: Logger;
  private readonly limits: () => SpoolLimits;
  private readonly maxQueued: number;
  private readonly retryMs: number;
  private opens: OpenRow[] = [];
  /** Settled when the queued open rows are committed (or cannot be). */
  private openWaiter: OpenWaiter | undefined;
  /** Request ids whose open row is committed in the file (so their final must delete it). */
  private readonly openInDb = new Set<string>();
  private finals: QueuedFinal[] = [];
  /** How the pipeline stamps a request's record again should its answer never go out (onUndelivered). */
  private readonly undelivered = new Map<string, () => RequestRecord | undefined>();
  private deletes: Array<{ first: number; last: number }> = [];
  private flushScheduled = false;
  private retryTimer: NodeJS.Timeout | undefined;
  private closed = false;
  /** Set while commits fail; cleared by the next successful one. */
  private writeFailure: { code: string; since: number } | undefined;
  private usedBytes = 0;
  /** usedBytes holds commits' upper bounds (commitGrowth) added since the last measurement. */
  private estimated = false;
  /** Whether the last measurement was at the quota (logged once per crossing, either way). */
  private atQuota = false;
  private readonly stateListeners = new Set<() => void>();
  /** performance.now() at the last measurement. */
  private measuredAt = 0;
  /** A WAL frame: one page and its 24-byte header. */
  private readonly walFrameBytes: number;
  private commits = 0;
  private backlog = 0;
  /** SQLite's data_version at the last noticeOtherWriters() (changes when another connection commits). */
  private dataVersion: number;
  /** SQLite's data_version at the last measurement: another replica's commits since are not in the estimate. */
  private measuredVersion: number | undefined;
  private readonly readDataVersion: Database.Statement;
  private readonly committedListeners = new Set<() => void>();
  private readonly stmts: {
    backlogAfter: Database.Statement;
    backlogSizesAfter: Database.Statement;
    backlogRange: Database.Statement;
    holdsRequest: Database.Statement;
    finalCost: Database.Statement;
  };
  /** Held for the store's life: its open rows name its slot, so recovery can tell they are in flight. */
  private readonly ownerLock: SpoolOwnerLock;
  /** This process, as its open rows name it (the slot is what recovery checks; the rest tells people). */
  private readonly ownerJson: string;

  constructor(opts: SpoolStoreOptions) {
    this.meta = opts.meta;
    this.file = opts.file;
    this.logger = opts.logger;
    this.limits = opts.limits;
    this.maxQueued = opts.maxQueued ?? DEFAULT_MAX_QUEUED;
    this.retryMs = opts.retryMs ?? DEFAULT_RETRY_MS;
    this.db = new Database(opts.file, { fileMustExist: true });
    try {
      this.db.pragma('journal_mode = WAL');
      this.db.pragma(`synchronous = ${opts.synchronous === 'full' ? 'FULL' : 'NORMAL'}`);
      // Keeps the WAL file from staying at its high-water mark after a burst (it counts toward the quota).
      this.db.pragma('journal_size_limit = 8388608');
      this.db.pragma('busy_timeout = 5000');
      // Checkpoints run in a worker (state/wal-checkpointer.ts), never inside a request's commit.
      this.db.pragma('wal_autocheckpoint = 0');
      this.walFrameBytes = Number(this.db.pragma('page_size', { simple: true })) + 24;
      this.stmts = {
        // As a blob: the bytes go to the wire as they are, without a JS string decoded and encoded
        // again per record (backfill reads every record the node serves).
        backlogAfter: this.db.prepare('select sequence, request_id as requestId, cast(record_json as blob) as recordJson from records where sequence > ? order by sequence limit ?'),
        // octet_length() takes a value's size from the row header without reading the value, so a
        // batch is sized without loading records it will not carry (large bodies run to 1 MiB each).
        // A row's size as sent: its record (cut past the limit, backfill-channel.ts) and its request id (cut to 129 characters, up to 4 bytes each).
        backlogSizesAfter: this.db.prepare('select sequence, octet_length(record_json) + min(octet_length(request_id), 516) as bytes from records where sequence > ? order by sequence limit ?'),
        backlogRange: this.db.prepare('select sequence, request_id as requestId, cast(record_json as blob) as recordJson from records where sequence between ? and ? order by sequence'),
        holdsRequest: this.db
          .prepare('select exists (select 1 from open_requests where request_id = ?) or exists (select 1 from records where request_id = ?)')
          .pluck(),
        // SQLite reads the two fields out of the stored JSON: no record is parsed in JavaScript.
        finalCost: this.db.prepare(
          `select json_extract(record_json, '$.status') as status, json_extract(record_json, '$.cost.costMicros') as costMicros
             from records where request_id = ? and not exists (select 1 from open_requests where request_id = ?)`,
        ),
      };
      this.writer = new SpoolWriter(this.db);
      this.readDataVersion = this.db.prepare('pragma data_version').pluck();
    } catch (err) {
      this.db.close();
      throw err;
    }
    try {
      // Before recovery: from here on the rows naming this slot are the dead previous holder's.
      this.ownerLock = SpoolOwnerLock.acquire(opts.file);
    } catch (err) {
      this.db.close();
      throw err;
    }
    this.ownerJson = JSON.stringify({ ...thisProcessMark(), slot: this.ownerLock.slot });
    try {
      this.recoverInterrupted();
      // After recovery: records it could not write yet (disk full) are counted when they commit.
      this.backlog = Number(this.db.prepare('select count(*) from records').pluck().get());
      // The starting point for noticeOtherWriters: another connection's commits from here on are
      // not in this count (a store read before its first poll would otherwise miss them).
      this.dataVersion = Number(this.readDataVersion.get());
      this.measure();
    } catch (err) {
      clearTimeout(this.retryTimer);
      this.db.close();
      this.ownerLock.release();
      throw err;
    }
    const onDurableSequence = opts.onDurableSequence;
    this.checkpointer = new WalCheckpointer(
      opts.file,
      opts.logger,
      undefined,
      onDurableSequence === undefined ? undefined : { query: RECORD_SEQUENCE_QUERY, onDurable: (value) => onDurableSequence(Number(value)) },
    );
  }

  // ---- RequestSpool ----

  open(row: OpenRow): Promise<void> {
    if (this.closed) throw zenovaError('ZN_ERR_SPOOL_FULL', 'The node is shutting down and accepts no new requests.');
    if (this.writeFailure !== undefined) {
      throw zenovaError('ZN_ERR_SPOOL_FULL', "The node cannot write its request spool (disk full or failing); it accepts new requests once writes succeed again.");
    }
    if (this.isFull() && this.limits().fullPolicy === 'reject') throw zenovaError('ZN_ERR_SPOOL_FULL');
    this.opens.push(row);
    // Taken before scheduleFlush, which may commit at once (maxQueued) and settle it.
    const waiter = (this.openWaiter ??= newOpenWaiter());
    this.scheduleFlush();
    return waiter.promise;
  }

  finalise(record: RequestRecord): Promise<void> {
    if (this.closed) return Promise.reject(new Error('the spool is closed'));
    const json = JSON.stringify(record);
    return new Promise<void>((resolve, reject) => {
      this.finals.push({ requestId: record.requestId, json, resolve, reject });
      this.scheduleFlush();
    });
  }

  onUndelivered(requestId: string, restamp: () => RequestRecord | undefined): () => void {
    this.undelivered.set(requestId, restamp);
    return () => this.undelivered.delete(requestId);
  }

  stampUndelivered(): number {
    if (this.closed || this.undelivered.size === 0) return 0;
    let stamped = 0;
    for (const final of this.finals) {
      const record = this.undelivered.get(final.requestId)?.();
      if (record === undefined) continue;
      // The bodies as queued: the pipeline builds the new record without them.
      const { bodies } = JSON.parse(final.json) as RequestRecord;
      final.json = JSON.stringify({ ...record, bodies });
      stamped += 1;
    }
    if (stamped > 0) this.logger.warn({ count: stamped }, 'answers that never reached their callers while their records waited for the commit (the node stopping: failed ZN_ERR_NODE_STOPPING; a caller gone: aborted) are recorded as such');
    return stamped;
  }

  keepsBodies(): boolean {
    return !(this.isFull() && this.limits().fullPolicy === 'metering-only');
  }

  fullness(): number {
    const quota = this.limits().quotaBytes;
    return quota > 0 ? this.usedBytes / quota : Infinity;
  }

  // ---- figures ----

  /**
   * Live bytes of the database (free pages excluded) plus the WAL file: the figure metrics, the
   * heartbeat and status show. Replicas share the file (ZENOVA_NODE_REPLICAS > 1) and each keeps
   * its own estimate, so this reads the file first (refreshFigures) and every replica's scrape
   * shows the shared file's figures. Also recounts the backlog then: backlogCount() called right
   * after (as NodeSpool.figures does) is as current.
   */
  bytes(): number {
    this.refreshFigures();
    return this.usedBytes;
  }

  /**
   * Final records not yet acknowledged by the control plane: this store's count, brought up to
   * date with other replicas' commits by bytes() and the other-writers poll (noticeOtherWriters).
   * Not recounted here: backfill asks after each of its own commits, and a count(*) each time
   * would scan the whole backlog on the serving thread.
   */
  backlogCount(): number {
    return this.backlog;
  }

  /** Open rows and writes not yet committed, for tests and status. */
  pending(): { opens: number; finals: number; writeFailing: boolean } {
    return { opens: this.opens.length, finals: this.finals.length, writeFailing: this.writeFailure !== undefined };
  }

  /**
   * What refuses callers, for /readyz and control-status.json: the live bytes against the quota
   * and policy, and since when commits fail (disk full, I/O error), if they do.
   */
  state(): SpoolState {
    const { quotaBytes, fullPolicy } = this.limits();
    return {
      bytes: this.usedBytes,
      quotaBytes,
      fullPolicy,
      full: this.isFull(),
      writeFailing: this.writeFailure === undefined ? null : { code: this.writeFailure.code, since: new Date(this.writeFailure.since).toISOString() },
    };
  }

  /** Called when the spool reaches its quota or has room again, and when writes start or stop failing. */
  onStateChanged(listener: () => void): () => void {
    this.stateListeners.add(listener);
    return () => this.stateListeners.delete(listener);
  }

  /** Group commits made since open (tests and the bench check batching with it). */
  commitCount(): number {
    return this.commits;
  }

  isFull(): boolean {
    // Replicas share the file, and each estimate counts only its own commits between measurements:
    // another's commits since (one prepared pragma tells) are measured before the answer, or the
    // file could grow past the quota while each replica's estimate stayed under it.
    if (!this.closed && Number(this.readDataVersion.get()) !== this.measuredVersion) this.measure();
    return this.usedBytes >= this.limits().quotaBytes;
  }

  /** Runs a pragma on the writing connection (tests cap max_page_count with it). */
  writerPragma(sql: string): unknown {
    return this.db.pragma(sql);
  }

  // ---- what earlier runs left (the lease book asks at start-up: billing/left-reservations.ts) ----

  /** The owner slot this store holds: its open rows name it. */
  get ownerSlot(): number {
    return this.ownerLock.slot;
  }

  /** Whether the process that held owner slot `slot` is gone: the slot is this store's now, or nobody holds it. */
  isOwnerGone(slot: number): boolean {
    return slot === this.ownerLock.slot || !isOwnerSlotHeld(this.file, slot);
  }

  /** Whether the file holds an open row or a record (not yet acknowledged and deleted) of the request. */
  holdsRequest(requestId: string): boolean {
    return Number(this.stmts.holdsRequest.get(requestId, requestId)) === 1;
  }

  /**
   * The cost of the request's final record, when the file holds one its process committed (not an
   * `interrupted` record recovered from an open row, which carries no cost) and no open row of it;
   * undefined otherwise, or when the stored cost is not a whole number of micro-units.
   */
  finalCostOf(requestId: string): number | undefined {
    const row = this.stmts.finalCost.get(requestId, requestId) as { status: unknown; costMicros: unknown } | undefined;
    if (row === undefined || typeof row.status !== 'string' || row.status === 'interrupted') return undefined;
    const cost = row.costMicros;
    return typeof cost === 'number' && Number.isSafeInteger(cost) && cost >= 0 ? cost : undefined;
  }

  // ---- backfill ----

  /** Up to `limit` final records after `sequence`, oldest first (tests and tools: backfill reads by size, below). */
  backlogAfter(sequence: number, limit: number): BacklogRow[] {
    return this.stmts.backlogAfter.all(sequence, limit) as BacklogRow[];
  }

  /**
   * Sequence and JSON size of up to `limit` final records after `sequence`, oldest first, without
   * reading their JSON: backfill chooses a batch from these, then reads only its rows
   * (backlogRange). Reading whole rows to choose made each batch of large records read hundreds
   * of rows to send one or two.
   */
  backlogSizesAfter(sequence: number, limit: number): BacklogSize[] {
    return this.stmts.backlogSizesAfter.all(sequence, limit) as BacklogSize[];
  }

  /** The final records first..last (inclusive), oldest first. */
  backlogRange(first: number, last: number): BacklogRow[] {
    return this.stmts.backlogRange.all(first, last) as BacklogRow[];
  }

  /** Deletes the acknowledged records first..last (inclusive) with the next group commit. */
  deleteAcknowledged(first: number, last: number): void {
    if (this.closed) return;
    this.deletes.push({ first, last });
    this.scheduleFlush();
  }

  /**
   * Replicas of the node (ZENOVA_NODE_REPLICAS > 1) share this file, and only the one holding the
   * control link backfills: when another connection committed since the last call (SQLite's
   * `data_version`), the backlog is counted again and the committed listeners run, so records of
   * every replica are delivered without waiting for this process's own next commit. Cheap (one
   * pragma) when nothing changed; true when something did.
   */
  noticeOtherWriters(): boolean {
    if (this.closed) return false;
    const version = Number(this.readDataVersion.get());
    if (version === this.dataVersion) return false;
    this.dataVersion = version;
    this.backlog = Number(this.db.prepare('select count(*) from records').pluck().get());
    this.measure();
    if (this.backlog > 0) for (const listener of this.committedListeners) listener();
    return true;
  }

  /** Called after every successful commit that added records (backfill wakes up). */
  onCommitted(listener: () => void): () => void {
    this.committedListeners.add(listener);
    return () => this.committedListeners.delete(listener);
  }

  /**
   * Writes what is queued and closes; finalises that cannot be written (commits failing) are
   * rejected: their open rows become interrupted records at the next start.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    // Also an answer whose tail began after the stop closed its connection (each restamp checks that).
    this.stampUndelivered();
    this.undelivered.clear();
    this.flush();
    this.closed = true;
    // A last flush that failed armed a retry; nothing is retried after close.
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    const pending = this.finals;
    this.finals = [];
    for (const f of pending) f.reject(new Error('the spool closed before the record was written'));
    this.committedListeners.clear();
    this.stateListeners.clear();
    await this.checkpointer.stop();
    this.db.close();
    // Only now: rows still open (finalises that could not be written) are the next start's to recover.
    this.ownerLock.release();
  }

  // ---- internals ----

  private scheduleFlush(): void {
    if (this.retryTimer !== undefined) return; // a failed commit is being retried on its timer
    if (this.opens.length + this.finals.length + this.deletes.length >= this.maxQueued) {
      this.flush();
      return;
    }
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    setImmediate(() => {
      this.flushScheduled = false;
      this.flush();
    });
  }

  /** The writer's operations for everything queued. */
  private batchOf(): { batch: Batch; ops: SpoolOp[] } {
    const { opens, finals, deletes } = this;
    // A request that also finished within this batch needs no open row: its final record lands in
    // the same transaction.
    const finishing = finals.length === 0 ? undefined : new Set(finals.map((f) => f.requestId));
    const ops: SpoolOp[] = [];
    const opened: string[] = [];
    const closed: string[] = [];
    let bytes = 0;
    for (const row of opens) {
      if (finishing?.has(row.requestId) === true) continue;
      // The row names this process (recoverInterrupted: a replica starting on a shared spool must
      // not take a request another replica is still serving for interrupted); appended, not
      // spread, as a row is a plain object whose JSON ends in '}'.
      const plain = JSON.stringify(row);
      const json = `${plain.slice(0, -1)},"owner":${this.ownerJson}}`;
      ops.push([0, row.requestId, json]);
      opened.push(row.requestId);
      bytes += Buffer.byteLength(json) + ROW_OVERHEAD_BYTES;
    }
    for (const f of finals) {
      if (this.openInDb.has(f.requestId)) {
        ops.push([1, f.requestId]);
        closed.push(f.requestId);
      }
      ops.push([2, f.requestId, f.json]);
      // Bytes, not JS characters: a CJK character is 3 bytes in the file and 1 in .length.
      bytes += Buffer.byteLength(f.json) + ROW_OVERHEAD_BYTES;
    }
    for (const d of deletes) ops.push([3, d.first, d.last]);
    return { batch: { opens, finals, deletes, opened, closed, bytes }, ops };
  }

  private flush(): void {
    if (this.closed) return;
    if (this.opens.length === 0 && this.finals.length === 0 && this.deletes.length === 0) return;
    const { batch, ops } = this.batchOf();
    const openWaiter = this.openWaiter;
    this.openWaiter = undefined;
    let result: { inserted: number; deleted: number };
    try {
      result = this.writer.write(ops);
    } catch (err) {
      // The requests whose open rows are not durable are refused before anything goes upstream
      // (their rows are dropped from the queue; their final records, refusals, stay queued).
      this.opens = [];
      openWaiter?.reject(zenovaError('ZN_ERR_SPOOL_FULL', "The node cannot write its request spool (disk full or failing); it accepts new requests once writes succeed again."));
      this.onCommitFailed(err as Error & { code?: string });
      return;
    }
    this.opens = [];
    this.finals = [];
    this.deletes = [];
    // Only now, committed, do the open rows count as being in the file.
    for (const id of batch.opened) this.openInDb.add(id);
    for (const id of batch.closed) this.openInDb.delete(id);
    this.commits += 1;
    this.backlog += result.inserted - result.deleted;
    if (this.writeFailure !== undefined) {
      this.logger.warn({ code: this.writeFailure.code, failedForMs: Date.now() - this.writeFailure.since }, 'spool writes succeed again');
      this.writeFailure = undefined;
      this.stateChanged();
    }
    this.usedBytes += this.commitGrowth(batch.bytes);
    this.estimated = true;
    if (result.deleted > 0 || performance.now() - this.measuredAt >= MEASURE_EVERY_MS || this.isFull()) this.measure();
    // A raised (or lowered) quota is noticed at the next commit.
    else this.noticeQuota();
    openWaiter?.resolve();
    for (const f of batch.finals) f.resolve();
    if (result.inserted > 0) for (const listener of this.committedListeners) listener();
  }

  private onCommitFailed(err: Error & { code?: string }): void {
    const code = err.code ?? 'UNKNOWN';
    if (this.writeFailure === undefined) {
      this.writeFailure = { code, since: Date.now() };
      this.logger.error(
        { code, message: err.message, queued: this.opens.length + this.finals.length, file: this.file },
        'spool write failed; new requests are refused (ZN_ERR_SPOOL_FULL) and the write is retried until it succeeds',
      );
      this.stateChanged();
    }
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      this.flush();
    }, this.retryMs);
  }

  /**
   * At most what a commit of `rowBytes` adds to the live bytes: the rows twice (written to the
   * WAL, and again into the database's pages when it is checkpointed while the WAL file keeps its
   * size) and the whole pages the commit touches, each with its WAL frame header.
   */
  private commitGrowth(rowBytes: number): number {
    return 2 * rowBytes + PAGES_PER_COMMIT * this.walFrameBytes;
  }

  /**
   * The figures as the file holds them now, for a reader (bytes()). Another connection's commits
   * since the last look: the backlog recounted and the file measured (noticeOtherWriters; a count(*)
   * and three pragmas, as the poll runs twice a second anyway). This store's own commits since the
   * last measurement (counted by their upper bound, commitGrowth): measured once MEASURE_EVERY_MS
   * has passed, as the next commit would, so a spool gone quiet shows its real size rather than
   * the estimate of its last burst. Nothing committed since: nothing read (one prepared pragma).
   */
  private refreshFigures(): void {
    if (this.closed) return;
    if (this.noticeOtherWriters()) return;
    if (Number(this.readDataVersion.get()) !== this.measuredVersion) this.measure();
    else if (this.estimated && performance.now() - this.measuredAt >= MEASURE_EVERY_MS) this.measure();
  }

  private measure(): void {
    if (spoolWalBytes(this.file) > WAL_FALLBACK_CHECKPOINT_BYTES) {
      try {
        this.db.pragma('wal_checkpoint(TRUNCATE)');
      } catch {
        // A reader holds the WAL, or it is gone: the next measurement tries again.
      }
    }
    this.measuredVersion = Number(this.readDataVersion.get());
    this.usedBytes = spoolLiveBytes(this.db, this.file);
    this.estimated = false;
    this.measuredAt = performance.now();
    this.noticeQuota();
  }

  /**
   * One warn line when the spool reaches its quota and one when it has room again (not one per
   * refused request), and the state listeners told either way.
   */
  private noticeQuota(): void {
    const { quotaBytes, fullPolicy } = this.limits();
    const full = this.usedBytes >= quotaBytes;
    if (full === this.atQuota) return;
    this.atQuota = full;
    const fields = { bytes: this.usedBytes, quotaBytes, fullPolicy, file: this.file };
    if (full) {
      this.logger.warn(
        fields,
        fullPolicy === 'reject'
          ? 'spool reached its quota; new requests are refused (ZN_ERR_SPOOL_FULL) until delivered records free room (check the control link) or the quota is raised'
          : 'spool reached its quota; requests are served and metered without their bodies (policy metering-only) until delivered records free room',
      );
    } else {
      this.logger.warn(fields, 'spool has room again below its quota');
    }
    this.stateChanged();
  }

  private stateChanged(): void {
    for (const listener of this.stateListeners) listener();
  }

  /**
   * Open rows left by a crash become 'interrupted' records, in one transaction, at start-up. A row
   * whose process still runs (another replica on this shared spool, ZENOVA_NODE_REPLICAS > 1) is
   * that replica's request in flight, not a crash: it is left for the replica to finalise (taking
   * it would record the request as interrupted at no cost, and the replica's real record, with the
   * same request id, would then be dropped as a duplicate).
   *
   * The records are queued as ordinary finals (their open rows marked as in the file, so the commit
   * deletes them) and committed by flush(): a commit that fails (the disk full after a crash) takes
   * the serving path's retry, and the store opens refusing new requests with ZN_ERR_SPOOL_FULL. A
   * bare write here threw out of the constructor, and node-edge exited at every start until space
   * returned (a restart loop, callers refused the connection instead of answered 503).
   */
  private recoverInterrupted(): void {
    const rows = this.db.prepare('select request_id as requestId, row_json as rowJson from open_requests').all() as Array<{ requestId: string; rowJson: string }>;
    if (rows.length === 0) return;
    const finishedAt = Date.now();
    const recorded: Array<Promise<void>> = [];
    let leftToLiveReplicas = 0;
    const slotHeld = new Map<number, boolean>();
    for (const row of rows) {
      let parsed: (OpenRow & { owner?: RowOwner }) | undefined;
      try {
        const result = openRowSchema.safeParse(JSON.parse(row.rowJson));
        parsed = result.success ? result.data : undefined;
      } catch {
        parsed = undefined;
      }
      if (parsed?.owner !== undefined && this.isOwnerAlive(parsed.owner, slotHeld)) {
        leftToLiveReplicas += 1;
        continue;
      }
      const json = JSON.stringify(interruptedRecord(parsed ?? { requestId: row.requestId }, this.meta.nodeId, finishedAt));
      this.openInDb.add(row.requestId);
      recorded.push(new Promise<void>((resolve, reject) => this.finals.push({ requestId: row.requestId, json, resolve, reject })));
    }
    if (leftToLiveReplicas > 0) this.logger.info({ count: leftToLiveReplicas }, 'open requests of replicas still running were left to them');
    if (recorded.length === 0) return;
    const count = recorded.length;
    // Rejected only by close() before they could be written: their open rows stay for the next start.
    void Promise.all(recorded).then(
      () => this.logger.warn({ count }, 'requests left open by the previous run were recorded as interrupted'),
      () => undefined,
    );
    this.flush();
    if (this.writeFailure !== undefined) {
      this.logger.warn({ count }, 'requests left open by the previous run are recorded as interrupted once the spool can be written again');
    }
  }

  /** Whether the process that wrote a row still serves it; `slotHeld` caches one check per slot. */
  private isOwnerAlive(owner: RowOwner, slotHeld: Map<number, boolean>): boolean {
    if (owner.slot !== undefined) {
      // This store holds the slot now, so whoever wrote the row under it is gone.
      if (owner.slot === this.ownerLock.slot) return false;
      let held = slotHeld.get(owner.slot);
      if (held === undefined) {
        held = isOwnerSlotHeld(this.file, owner.slot);
        slotHeld.set(owner.slot, held);
      }
      return held;
    }
    // A row of an older release names only its process: checked by pid and start time, which only
    // works in this pid namespace (another one's rows stay open; docs/spool.md). This process's
    // own rows (a store reopened in one process) are never in flight elsewhere.
    return owner.pid !== process.pid && isMarkedProcessAlive(owner);
  }
}

/** Who wrote an open row: `slot` since owner slots (spool-owner-lock.ts), only the process before. */
interface RowOwner {
  pid: number;
  pidNs: string | null;
  startTicks: string | null;
  slot?: number | undefined;
}
