/**
 * Backfill: ships the spool's final records over the control session as RecordBatch messages,
 * oldest first, with at most `window` batches unacknowledged (flow control). A RecordBatchAck
 * deletes exactly the rows of its batch; nothing is deleted before. When the session ends, every
 * unacknowledged batch is forgotten and resent from the oldest row on the next session: the
 * control plane ingests by request id, so a resend is counted once.
 *
 * Live traffic is never starved: each pump sends one bounded batch and yields (setImmediate)
 * before the next, so a long backlog drains between requests rather than in one blocking loop.
 *
 * Batching under live traffic: a full batch goes at once, but a partial one (the tail of the
 * backlog) waits up to `lingerMs` after the first record committed since the last partial batch,
 * so records trickling in at hundreds per second travel in batches of dozens, not one message,
 * ack, delete and control-plane transaction each. A new session drains at once.
 */
import { randomUUID } from 'node:crypto';
import { MAX_RECORD_JSON_BYTES } from '../../../proto/src/index.js';

/** The longest request id a record may have (proto's RequestRecord schema). */
const MAX_REQUEST_ID_LENGTH = 128;
import type { ControlMessage, RecordBatchAck } from '../../../proto/src/index.js';
import type { ControlChannel, ControlSend } from '../control/control-channel.js';
import type { Logger } from '../logger.js';
import type { SpoolStore } from './spool-store.js';

export interface BackfillOptions {
  store: SpoolStore;
  logger: Logger;
  /** Records per batch. */
  maxRecords?: number;
  /** Bytes of record JSON per batch (a single larger record still goes, alone). */
  maxBytes?: number;
  /** Batches sent and not yet acknowledged. */
  window?: number;
  /** How long a partial batch waits for more records. */
  lingerMs?: number;
}

interface InFlight {
  batchId: string;
  first: number;
  last: number;
  count: number;
}

export const DEFAULT_BATCH_RECORDS = 500;
export const DEFAULT_BATCH_BYTES = 1024 * 1024;
export const DEFAULT_WINDOW = 4;
export const DEFAULT_LINGER_MS = 100;

export class BackfillChannel implements ControlChannel {
  readonly name = 'spool-backfill';
  private readonly store: SpoolStore;
  private readonly logger: Logger;
  private readonly maxRecords: number;
  private readonly maxBytes: number;
  private readonly window: number;
  private readonly lingerMs: number;
  /** Whether a partial batch may go now (a new session, or the linger has passed). */
  private partialDue = false;
  private lingerTimer: NodeJS.Timeout | undefined;
  private send: ControlSend | undefined;
  private inFlight: InFlight[] = [];
  /** The highest sequence sent on this session. */
  private sentThrough = 0;
  private pumpScheduled = false;
  private readonly unsubscribe: () => void;
  /** Totals since start (for logs and tests). */
  readonly totals = { batchesSent: 0, recordsSent: 0, recordsAcknowledged: 0, duplicates: 0, rejected: 0 };

  constructor(opts: BackfillOptions) {
    this.store = opts.store;
    this.logger = opts.logger;
    this.maxRecords = opts.maxRecords ?? DEFAULT_BATCH_RECORDS;
    this.maxBytes = opts.maxBytes ?? DEFAULT_BATCH_BYTES;
    this.window = opts.window ?? DEFAULT_WINDOW;
    this.lingerMs = opts.lingerMs ?? DEFAULT_LINGER_MS;
    this.unsubscribe = this.store.onCommitted(() => this.onCommitted());
  }

  onEstablished(send: ControlSend): void {
    this.send = send;
    this.inFlight = [];
    this.sentThrough = 0;
    this.partialDue = true;
    this.schedulePump();
  }

  onMessage(message: ControlMessage): boolean {
    if (message.recordBatchAck === undefined) return false;
    this.onAck(message.recordBatchAck);
    return true;
  }

  onEnded(): void {
    // Unacknowledged batches are resent from their first row on the next session.
    this.send = undefined;
    this.inFlight = [];
    this.sentThrough = 0;
  }

  /** Stops listening to the store (the spool is closing). */
  stop(): void {
    this.unsubscribe();
    this.send = undefined;
    clearTimeout(this.lingerTimer);
    this.lingerTimer = undefined;
  }

  /** Batches sent on this session and not acknowledged yet. */
  unacknowledged(): number {
    return this.inFlight.length;
  }

  private onAck(ack: RecordBatchAck): void {
    const index = this.inFlight.findIndex((b) => b.batchId === ack.batchId);
    if (index < 0) {
      // An ack for a batch of an earlier session or one never sent: nothing to delete on its word.
      this.logger.debug({ batchId: ack.batchId.slice(0, 128) }, 'ignored an ack for a batch not in flight');
      return;
    }
    const [batch] = this.inFlight.splice(index, 1);
    if (batch === undefined) return;
    if (BigInt(batch.last) !== ack.lastSequence) {
      this.logger.warn({ batchId: batch.batchId, expected: batch.last, got: String(ack.lastSequence) }, 'a record batch ack named another last sequence; the batch stays in the spool and is sent again in the next session');
      return;
    }
    // Accepted, duplicate and rejected account for every record of the batch (docs/spool.md); an ack
    // that accounts for fewer does not say the rest were kept, so none is deleted on its word.
    const accounted = ack.acceptedCount + ack.duplicateCount + ack.rejectedCount;
    if (accounted !== batch.count) {
      this.logger.warn({ batchId: batch.batchId, records: batch.count, accounted }, 'a record batch ack accounted for another number of records; the batch stays in the spool and is sent again in the next session');
      return;
    }
    this.store.deleteAcknowledged(batch.first, batch.last);
    this.totals.recordsAcknowledged += batch.count;
    this.totals.duplicates += ack.duplicateCount;
    if (ack.rejectedCount > 0) {
      // The control plane could not ingest these (damaged rows, or records it cannot parse): it
      // kept them aside and acknowledged the batch, so the backlog moves on; they are not billed.
      this.totals.rejected += ack.rejectedCount;
      this.logger.warn(
        { batchId: batch.batchId, rejected: ack.rejectedCount, firstSequence: batch.first, lastSequence: batch.last },
        'the control plane could not ingest some records of a batch; it kept them in rejected_request_records (see its error log)',
      );
    }
    this.schedulePump();
  }

  /** New records: a full batch goes now; otherwise the linger starts (if not already running). */
  private onCommitted(): void {
    if (this.send === undefined) return;
    let inFlight = 0;
    for (const batch of this.inFlight) inFlight += batch.count;
    if (this.store.backlogCount() - inFlight >= this.maxRecords || this.partialDue) {
      this.schedulePump();
      return;
    }
    this.startLinger();
  }

  /** After lingerMs a partial batch may go (unless a linger is already running). */
  private startLinger(): void {
    if (this.lingerTimer !== undefined) return;
    this.lingerTimer = setTimeout(() => {
      this.lingerTimer = undefined;
      this.partialDue = true;
      this.schedulePump();
    }, this.lingerMs);
    this.lingerTimer.unref();
  }

  private schedulePump(): void {
    if (this.pumpScheduled || this.send === undefined) return;
    this.pumpScheduled = true;
    setImmediate(() => {
      this.pumpScheduled = false;
      this.pump();
    });
  }

  /**
   * Sends at most one batch, then yields; reschedules itself while the window has room. The batch
   * is chosen from the records' sizes, and only its rows are read: large records (bodies kept) fit
   * a few to a batch, and reading `maxRecords` whole rows to send those few read the backlog over
   * and over (quadratic in its length) and blocked the event loop for seconds per batch.
   */
  private pump(): void {
    const send = this.send;
    if (send === undefined || this.inFlight.length >= this.window) return;
    let sizes;
    try {
      sizes = this.store.backlogSizesAfter(this.sentThrough, this.maxRecords);
    } catch (err) {
      // The spool is closed or unreadable for a moment; the next commit or session tries again.
      this.logger.warn({ message: (err as Error).message }, 'backfill could not read the spool');
      return;
    }
    if (sizes.length === 0) {
      this.partialDue = false;
      return;
    }
    let count = 0;
    let bytes = 0;
    for (const size of sizes) {
      if (count > 0 && bytes + size.bytes > this.maxBytes) break;
      count += 1;
      bytes += size.bytes;
    }
    // The tail of the backlog waits for the linger (more records may join it).
    const partial = sizes.length < this.maxRecords && count === sizes.length;
    if (partial && !this.partialDue) {
      // A tail left behind full batches: no later commit may come to start the linger for it.
      this.startLinger();
      return;
    }
    const first = sizes[0]!.sequence;
    const last = sizes[count - 1]!.sequence;
    let rows;
    try {
      rows = this.store.backlogRange(first, last);
    } catch (err) {
      this.logger.warn({ message: (err as Error).message }, 'backfill could not read the spool');
      return;
    }
    // Rows are only deleted on this channel's acks, so first..last still holds the rows sized
    // above; were they gone, there is nothing to send for them.
    if (rows.length === 0) {
      this.sentThrough = last;
      this.schedulePump();
      return;
    }
    // A row longer than any valid record (the builder cuts records to fit; only a damaged or edited
    // file holds one) goes cut to one byte over the limit: the control plane sets it aside as
    // too_large all the same, whereas a message past its gRPC limit (4 MiB) would end the session
    // on every resend, and nothing behind the row would ever be delivered.
    // So is a request id longer than any valid one (the schema's 128 characters): cut to 129, the
    // control plane refuses it as it refuses any invalid id, and the message stays within bounds.
    const records = rows.map((row) => ({
      requestId: row.requestId.length > MAX_REQUEST_ID_LENGTH ? row.requestId.slice(0, MAX_REQUEST_ID_LENGTH + 1) : row.requestId,
      recordJson: row.recordJson.length > MAX_RECORD_JSON_BYTES ? row.recordJson.subarray(0, MAX_RECORD_JSON_BYTES + 1) : row.recordJson,
    }));
    const batchId = randomUUID();
    const sent = send({ recordBatch: { batchId, records, firstSequence: BigInt(first), lastSequence: BigInt(last) } });
    if (!sent) return; // the session is gone; onEnded resets and the next session starts over
    this.inFlight.push({ batchId, first, last, count: records.length });
    this.sentThrough = last;
    this.totals.batchesSent += 1;
    this.totals.recordsSent += records.length;
    // The backlog is drained: records from now on wait for the linger again.
    if (partial) this.partialDue = false;
    this.schedulePump();
  }
}
