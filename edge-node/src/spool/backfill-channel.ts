/**
 * Backfill: ships the spool's final records over the control session as RecordBatch messages,
 * oldest first, with at most `window` batches unacknowledged (flow control). A RecordBatchAck
 * deletes exactly the rows of its batch; nothing is deleted before. When the session ends, every
 * unacknowledged batch is forgotten and resent from the oldest row on the next session: the
 * control plane ingests by request id, so a resend is counted once.
 *
 * Live traffic is never starved: each pump sends one bounded batch and yields (setImmediate)
 * before the next, so a long backlog drains between requests rather than in one blocking loop.
 */
import { randomUUID } from 'node:crypto';
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

export class BackfillChannel implements ControlChannel {
  readonly name = 'spool-backfill';
  private readonly store: SpoolStore;
  private readonly logger: Logger;
  private readonly maxRecords: number;
  private readonly maxBytes: number;
  private readonly window: number;
  private send: ControlSend | undefined;
  private inFlight: InFlight[] = [];
  /** The highest sequence sent on this session. */
  private sentThrough = 0;
  private pumpScheduled = false;
  private readonly unsubscribe: () => void;
  /** Totals since start (for logs and tests). */
  readonly totals = { batchesSent: 0, recordsSent: 0, recordsAcknowledged: 0, duplicates: 0 };

  constructor(opts: BackfillOptions) {
    this.store = opts.store;
    this.logger = opts.logger;
    this.maxRecords = opts.maxRecords ?? DEFAULT_BATCH_RECORDS;
    this.maxBytes = opts.maxBytes ?? DEFAULT_BATCH_BYTES;
    this.window = opts.window ?? DEFAULT_WINDOW;
    this.unsubscribe = this.store.onCommitted(() => this.schedulePump());
  }

  onEstablished(send: ControlSend): void {
    this.send = send;
    this.inFlight = [];
    this.sentThrough = 0;
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
      this.logger.warn({ batchId: batch.batchId, expected: batch.last, got: String(ack.lastSequence) }, 'a record batch ack named another last sequence; the batch will be resent');
      return;
    }
    this.store.deleteAcknowledged(batch.first, batch.last);
    this.totals.recordsAcknowledged += batch.count;
    this.totals.duplicates += ack.duplicateCount;
    this.schedulePump();
  }

  private schedulePump(): void {
    if (this.pumpScheduled || this.send === undefined) return;
    this.pumpScheduled = true;
    setImmediate(() => {
      this.pumpScheduled = false;
      this.pump();
    });
  }

  /** Sends at most one batch, then yields; reschedules itself while the window has room. */
  private pump(): void {
    const send = this.send;
    if (send === undefined || this.inFlight.length >= this.window) return;
    let rows;
    try {
      rows = this.store.backlogAfter(this.sentThrough, this.maxRecords);
    } catch (err) {
      // The spool is closed or unreadable for a moment; the next commit or session tries again.
      this.logger.warn({ message: (err as Error).message }, 'backfill could not read the spool');
      return;
    }
    if (rows.length === 0) return;
    const records: Array<{ requestId: string; recordJson: Buffer }> = [];
    let bytes = 0;
    for (const row of rows) {
      const recordJson = Buffer.from(row.recordJson, 'utf8');
      if (records.length > 0 && bytes + recordJson.length > this.maxBytes) break;
      records.push({ requestId: row.requestId, recordJson });
      bytes += recordJson.length;
    }
    const first = rows[0]!.sequence;
    const last = rows[records.length - 1]!.sequence;
    const batchId = randomUUID();
    const sent = send({ recordBatch: { batchId, records, firstSequence: BigInt(first), lastSequence: BigInt(last) } });
    if (!sent) return; // the session is gone; onEnded resets and the next session starts over
    this.inFlight.push({ batchId, first, last, count: records.length });
    this.sentThrough = last;
    this.totals.batchesSent += 1;
    this.totals.recordsSent += records.length;
    this.schedulePump();
  }
}
