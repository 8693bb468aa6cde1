/**
 * Idempotent ingestion of request records (migration 0006): one transaction per batch inserts the
 * ids into request_record_ids (ON CONFLICT DO NOTHING RETURNING), the rows of the ids that were
 * new into request_records (one INSERT from the batch as a JSON array), and settles exactly those
 * records (billing's settleIngestedRecords), so a resent batch is neither stored nor charged twice.
 * Text PostgreSQL cannot hold (NUL, unpaired surrogates) is replaced first (storable-text.ts).
 * Records the batch handler could not accept go into rejected_request_records (migration 0009) in
 * the same transaction, once per node, request id and content hash, so a resend stores none twice.
 *
 * request_record_ids is keyed by request id alone: an id that conflicts is a duplicate only when this
 * node's record holds it. Another node's record holding it (any enrolled node can send a record with
 * its own node id and another node's request id, the x-request-id callers see) made the real record
 * a "duplicate": acked, deleted from its node's spool, lost with its charge. Such a record is set
 * aside as request_id_taken (migration 0013) instead, in the same transaction.
 *
 * A record can pass the schema and still fail to store (a value PostgreSQL refuses): that failed
 * the whole batch on every resend. When the batch fails with such a data error
 * (record-data-error.ts), it is ingested again record by record, each under a savepoint, and a
 * record that fails is set aside as invalid_record; an unavailable database still fails the batch.
 *
 * Every transaction first takes the node's row FOR SHARE (one indexed row lock) and refuses a
 * deleted node (NodeDeletedError, nothing stored): its deletion hands back the credit its leases
 * held beyond the spend settled so far (returnLeasesOfNode), and that credit may be leased to
 * another node at once, so a record charged after it would push the account's leases past its
 * balance. A batch already under way holds the row: the deletion waits and returns its spend settled.
 *
 * A record whose receivedAt lies outside the window around the control plane's clock the batch
 * handler passes (receivedAtWindow: 1 day ahead, 400 days behind) is set aside as
 * received_at_out_of_range (migration 0021), unless its id is held: by this node's record, it is a
 * resend (a duplicate); by another node's, it is request_id_taken as in the window (the reason
 * operators filter by says the more specific fact). Every distinct month of a batch got its partition, never dropped: one
 * enrolled node made 1,084 with one batch, under the lock every replica's ingestion waits on.
 *
 * Two records of one node with one request id are one request: the first copy ingested is kept,
 * within a batch too (the in-batch map kept the last). A later copy with other content (another
 * cost, status, …) is not a duplicate to forget but set aside as request_id_conflict (migration
 * 0021), so the operator sees it; an identical one is a duplicate as before.
 */
import type pg from 'pg';
import type pino from 'pino';
import { isUtf8 } from 'node:buffer';
import { createHash } from 'node:crypto';
import { MAX_RECORD_JSON_BYTES, canonicalJson } from '../../../proto/src/index.js';
import type { RequestRecord } from '../../../proto/src/index.js';
import { settleIngestedRecords } from '../billing/settlement.js';
import { shareUndeletedNode } from '../nodes/node-repository.js';
import { withTransaction } from '../nodes/with-transaction.js';
import { isRecordDataError, recordDataErrorDetail } from './record-data-error.js';
import { ensurePartitions, rememberPartitions } from './record-partitions.js';
import { storableJsonArray } from './storable-text.js';
import type { MonthPartition } from './record-partitions.js';

export interface IngestResult {
  accepted: number;
  duplicates: number;
  /** Records of the batch that could not be ingested (stored now or by an earlier send). */
  rejected: number;
  /** Of those, the ones stored now (the others were there from an earlier send of the batch). */
  rejectedStored: number;
  /**
   * Records that passed the batch handler's checks but were set aside here (counted in `rejected`):
   * unstorable ones (invalid_record), those whose request id another node's record holds
   * (request_id_taken), those received outside the window (received_at_out_of_range), and later
   * copies with other content of a record this node sent (request_id_conflict).
   */
  setAside: readonly RejectedRecord[];
}

export type RejectionReason =
  | 'not_utf8'
  | 'not_json'
  | 'invalid_record'
  | 'request_id_mismatch'
  | 'foreign_node'
  | 'too_large'
  | 'invalid_request_id'
  | 'request_id_taken'
  | 'received_at_out_of_range'
  | 'request_id_conflict';

/** How far ahead of the control plane's clock a record's receivedAt may be: a node stamps the control plane's time (node-api.md, "The node's clock"), or its host's within 30 s of it. */
export const RECEIVED_AT_MAX_AHEAD_MS = 24 * 60 * 60 * 1000;
/** How far behind it: a spool keeps a record until delivered, so this is how long a node may stay away with its backlog. */
export const RECEIVED_AT_MAX_AGE_MS = 400 * 24 * 60 * 60 * 1000;

/** The receivedAt range [fromMs, toMs] a node's records are ingested in; each month of it may get a partition. */
export interface ReceivedAtWindow {
  fromMs: number;
  toMs: number;
}

export function receivedAtWindow(nowMs: number): ReceivedAtWindow {
  return { fromMs: nowMs - RECEIVED_AT_MAX_AGE_MS, toMs: nowMs + RECEIVED_AT_MAX_AHEAD_MS };
}

/** A batch entry that cannot be ingested, as the node sent it. */
export interface RejectedRecord {
  requestId: string;
  reason: RejectionReason;
  /** Why, in a few words: field paths and schema messages, never the record's values. */
  detail: string;
  bytes: Buffer;
  /** SHA-256 of `bytes` (the dedupe key with the node and request id). */
  sha256: Buffer;
}

export interface RejectedBatch {
  batchId: string;
  rejected: readonly RejectedRecord[];
  /**
   * Each record's JSON as the node sent it, by request id: what is kept of a record set aside
   * because storing it failed (without it, the parsed record as JSON).
   */
  sent?: ReadonlyMap<string, Buffer>;
}

/** The columns of a rejected record: bounded, and in a form PostgreSQL can store. */
function rejectedRow(r: RejectedRecord): { requestId: string; detail: string; text: string | null; bytes: Buffer | null; size: number } {
  const [requestId = '', detail = ''] = storableJsonArray([r.requestId.slice(0, 128), r.detail.slice(0, 500)]).values;
  const kept = r.bytes.subarray(0, MAX_RECORD_JSON_BYTES);
  // Text when PostgreSQL can hold it as such (readable in psql), the bytes as they were otherwise.
  const asText = isUtf8(kept) && !kept.includes(0);
  return { requestId, detail, text: asText ? kept.toString('utf8') : null, bytes: asText ? null : kept, size: r.bytes.length };
}

async function storeRejected(client: pg.PoolClient, node: { nodeId: string; nodeName: string }, batch: RejectedBatch): Promise<number> {
  if (batch.rejected.length === 0) return 0;
  const rows = batch.rejected.map(rejectedRow);
  const inserted = await client.query(
    `insert into rejected_request_records (node_id, node_name, request_id, reason, detail, record_text, record_bytes, record_size, record_sha256, batch_id)
     select $1, $2, r.request_id, r.reason, r.detail, r.record_text, r.record_bytes, r.record_size, r.record_sha256, $10
     from unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::bytea[], $8::int[], $9::bytea[])
       as r(request_id, reason, detail, record_text, record_bytes, record_size, record_sha256)
     on conflict (node_id, request_id, record_sha256) do nothing`,
    [
      node.nodeId,
      node.nodeName,
      rows.map((r) => r.requestId),
      batch.rejected.map((r) => r.reason),
      rows.map((r) => r.detail),
      rows.map((r) => r.text),
      rows.map((r) => r.bytes),
      rows.map((r) => r.size),
      batch.rejected.map((r) => r.sha256),
      storableJsonArray([batch.batchId]).values[0] ?? '',
    ],
  );
  return inserted.rowCount ?? 0;
}

/** A batch's records once made storable, one per request id, with each as it was sent. */
interface BatchRecord {
  /** As it will be stored (characters PostgreSQL cannot hold replaced). */
  storable: RequestRecord;
  /** As parsed from the node's bytes. */
  parsed: RequestRecord;
}

/**
 * Inserts the records whose request id is new, and settles them; returns those, the ids of the
 * others that another node's record holds (with that node's id), and the partitions it created
 * (to be remembered once the transaction commits). `records` hold each request id once.
 */
/** Where settlement warns of a charge past what a lease still held (settlement.ts). */
type SettlementLog = Pick<pino.Logger, 'warn'>;

async function insertNewRecords(
  client: pg.PoolClient,
  node: { nodeId: string; nodeName: string },
  records: readonly RequestRecord[],
  json: string,
  log: SettlementLog | undefined,
): Promise<{ newRecords: RequestRecord[]; takenBy: Map<string, string>; created: MonthPartition[] }> {
  if (records.length === 0) return { newRecords: [], takenBy: new Map(), created: [] };
  const created = await ensurePartitions(client, records.map((r) => r.receivedAt));
  const ids = await client.query<{ request_id: string }>(
    `insert into request_record_ids (request_id, received_at, node_id)
     select id, to_timestamp(ms / 1000.0), $3 from unnest($1::text[], $2::bigint[]) as r(id, ms)
     on conflict (request_id) do nothing
     returning request_id`,
    [records.map((r) => r.requestId), records.map((r) => r.receivedAt), node.nodeId],
  );
  const fresh = new Set(ids.rows.map((r) => r.request_id));
  const newRecords = records.filter((r) => fresh.has(r.requestId));
  const takenBy = fresh.size < records.length ? await idsHeldByOtherNodes(client, node.nodeId, records.filter((r) => !fresh.has(r.requestId))) : new Map<string, string>();
  if (newRecords.length > 0) {
    // The records go over as one JSON array that PostgreSQL parses once and takes the columns
    // from: per-column arrays (a jsonb[] above all) cost three times the control plane's CPU
    // in pg's array escaping, and PostgreSQL a third more to parse (npm run bench:ingest).
    await client.query(
      `insert into request_records (request_id, received_at, finished_at, node_id, node_name, key_id, account_id, model, api,
                                    status, http_status, error_code, input_tokens, output_tokens, cost_micros, record)
       select r->>'requestId', to_timestamp((r->>'receivedAt')::bigint / 1000.0), to_timestamp((r->>'finishedAt')::bigint / 1000.0),
              $1, $2, r->>'keyId', r->>'accountId', r->>'model', r->>'api', r->>'status', (r->>'httpStatus')::int, r->>'errorCode',
              (r #>> '{usage,inputTokens}')::bigint, (r #>> '{usage,outputTokens}')::bigint, (r #>> '{cost,costMicros}')::bigint, r
       from jsonb_array_elements($3::jsonb) as r`,
      [node.nodeId, node.nodeName, newRecords.length === records.length ? json : JSON.stringify(newRecords)],
    );
    await settleIngestedRecords(client, node.nodeId, newRecords, log);
  }
  return { newRecords, takenBy, created };
}

/**
 * Of ids whose insert conflicted, those another node's record holds, with that node's id. Run only
 * when some conflicted; a separate statement, so it sees a row a concurrent transaction committed
 * while the insert waited on it (one statement's snapshot would not).
 */
async function idsHeldByOtherNodes(client: pg.PoolClient, nodeId: string, conflicted: readonly RequestRecord[]): Promise<Map<string, string>> {
  const held = await client.query<{ request_id: string; node_id: string }>(
    'select request_id, node_id from request_record_ids where request_id = any($1::text[]) and node_id <> $2',
    [conflicted.map((r) => r.requestId), nodeId],
  );
  return new Map(held.rows.map((r) => [r.request_id, r.node_id]));
}

/** A record that passed the schema but is set aside, as a rejected record (kept as sent). */
function setAsideRecord(record: RequestRecord, reason: RejectionReason, detail: string, sent: ReadonlyMap<string, Buffer> | undefined): RejectedRecord {
  const bytes = sent?.get(record.requestId) ?? Buffer.from(JSON.stringify(record));
  return { requestId: record.requestId, reason, detail, bytes, sha256: createHash('sha256').update(bytes).digest() };
}

/** A record whose request id the record of node `holder` holds, as a rejected record. */
function takenRecord(record: RequestRecord, holder: string, sent: ReadonlyMap<string, Buffer> | undefined): RejectedRecord {
  // The holding node's id only: the other record's content is not this node's to see.
  return setAsideRecord(record, 'request_id_taken', `the request id is held by a record of node ${holder.slice(0, 64)}`, sent);
}

/** The batch's records whose request id another node's record holds, as rejected records. */
function takenRecords(records: readonly BatchRecord[], takenBy: ReadonlyMap<string, string>, sent: ReadonlyMap<string, Buffer> | undefined): RejectedRecord[] {
  if (takenBy.size === 0) return [];
  return records.flatMap(({ storable, parsed }) => {
    const holder = takenBy.get(storable.requestId);
    return holder === undefined ? [] : [takenRecord(parsed, holder, sent)];
  });
}

/** A batch split before any write: what is ingested, and what is set aside or counted on its own. */
interface SortedBatch {
  /** The first copy of each request id received within the window. */
  inWindow: BatchRecord[];
  /** The first copy of each request id received outside it (no partition is made for them). */
  outOfWindow: BatchRecord[];
  /** Later copies within the batch whose content differs from the first's. */
  inBatchConflicts: RejectedRecord[];
}

function sortBatch(records: readonly RequestRecord[], storable: readonly RequestRecord[], window: ReceivedAtWindow | undefined): SortedBatch {
  const first = new Map<string, BatchRecord>();
  const inBatchConflicts: RejectedRecord[] = [];
  storable.forEach((s, i) => {
    const kept = first.get(s.requestId);
    if (kept === undefined) first.set(s.requestId, { storable: s, parsed: records[i]! });
    // Kept as parsed: the bytes the batch handler keeps of an id (`sent`) are its first copy's.
    // Keys sorted (canonicalJson), so two copies compare equal whatever their key order.
    else if (canonicalJson(kept.storable) !== canonicalJson(s)) inBatchConflicts.push(setAsideRecord(records[i]!, 'request_id_conflict', 'an earlier record of the same batch has this request id and other content; that one is kept', undefined));
  });
  const unique = [...first.values()];
  const inside = (r: BatchRecord): boolean => window === undefined || (r.storable.receivedAt >= window.fromMs && r.storable.receivedAt <= window.toMs);
  return { inWindow: unique.filter(inside), outOfWindow: unique.filter((r) => !inside(r)), inBatchConflicts };
}

/**
 * Of records received outside the window, those this node's record already holds (resent after
 * their time left the window: duplicates, compared like any) and the others, set aside without a
 * partition: as request_id_taken when another node's record holds the id (the more specific fact,
 * as for a record in the window), else as received_at_out_of_range. One query, only when there are
 * such records.
 */
async function sortOutOfWindow(
  client: pg.PoolClient,
  nodeId: string,
  records: readonly BatchRecord[],
  window: ReceivedAtWindow | undefined,
  sent: ReadonlyMap<string, Buffer> | undefined,
): Promise<{ held: BatchRecord[]; setAside: RejectedRecord[] }> {
  if (records.length === 0 || window === undefined) return { held: [], setAside: [] };
  const { rows } = await client.query<{ request_id: string; node_id: string }>(
    'select request_id, node_id from request_record_ids where request_id = any($1::text[])',
    [records.map((r) => r.storable.requestId)],
  );
  // request_record_ids is keyed by request id: one holder per id.
  const holderOf = new Map(rows.map((r) => [r.request_id, r.node_id]));
  const aheadDays = RECEIVED_AT_MAX_AHEAD_MS / 86_400_000;
  const ageDays = RECEIVED_AT_MAX_AGE_MS / 86_400_000;
  return {
    held: records.filter((r) => holderOf.get(r.storable.requestId) === nodeId),
    setAside: records.filter((r) => holderOf.get(r.storable.requestId) !== nodeId).map((r) => {
      const holder = holderOf.get(r.storable.requestId);
      if (holder !== undefined) return takenRecord(r.parsed, holder, sent);
      return setAsideRecord(
        r.parsed,
        'received_at_out_of_range',
        r.storable.receivedAt > window.toMs
          ? `receivedAt more than ${aheadDays} day ahead of the control plane's clock (a node clock far off?); records are ingested from ${ageDays} days behind it to ${aheadDays} day ahead`
          : `receivedAt more than ${ageDays} days behind the control plane's clock; records are ingested from ${ageDays} days behind it to ${aheadDays} day ahead`,
        sent,
      );
    }),
  };
}

/**
 * Of records whose id this node's record already holds, those whose content differs from the one
 * stored (PostgreSQL compares the jsonb: key order and number spelling do not count), set aside as
 * request_id_conflict. One query, only when there are such records.
 */
async function conflictingCopies(client: pg.PoolClient, nodeId: string, records: readonly BatchRecord[], sent: ReadonlyMap<string, Buffer> | undefined): Promise<RejectedRecord[]> {
  if (records.length === 0) return [];
  const { rows } = await client.query<{ request_id: string }>(
    `select i.request_id from jsonb_array_elements($2::jsonb) as x
       join request_record_ids i on i.request_id = x->>'requestId' and i.node_id = $1
       join request_records r on r.received_at = i.received_at and r.request_id = i.request_id
     where r.record <> x`,
    [nodeId, JSON.stringify(records.map((r) => r.storable))],
  );
  const differing = new Set(rows.map((r) => r.request_id));
  return records
    .filter((r) => differing.has(r.storable.requestId))
    .map((r) => setAsideRecord(r.parsed, 'request_id_conflict', "this node's record of this request id was ingested earlier with other content; that one is kept", sent));
}

/** Of a step's records, those neither new nor held by another node: this node's, sent before. */
function resent(records: readonly BatchRecord[], newRecords: readonly RequestRecord[], takenBy: ReadonlyMap<string, string>): BatchRecord[] {
  if (newRecords.length === records.length) return [];
  const fresh = new Set(newRecords.map((r) => r.requestId));
  return records.filter((r) => !fresh.has(r.storable.requestId) && !takenBy.has(r.storable.requestId));
}

/**
 * The batch again, one record per savepoint, after it failed as a whole with a data error: a
 * record that fails with one is set aside, the others are ingested as usual. Any other error
 * (the database unavailable) fails the batch as before: nothing is stored and no ack goes out.
 */
async function ingestRecordByRecord(
  pool: pg.Pool,
  node: { nodeId: string; nodeName: string },
  sentCount: number,
  sorted: SortedBatch,
  window: ReceivedAtWindow | undefined,
  rejectedBatch: RejectedBatch,
  log: SettlementLog | undefined,
): Promise<IngestResult> {
  const created: MonthPartition[] = [];
  const setAside: RejectedRecord[] = [];
  const result = await withTransaction(pool, async (client) => {
    await shareUndeletedNode(client, node.nodeId);
    const outside = await sortOutOfWindow(client, node.nodeId, sorted.outOfWindow, window, rejectedBatch.sent);
    setAside.push(...outside.setAside, ...sorted.inBatchConflicts);
    const sentBefore: BatchRecord[] = [...outside.held];
    let accepted = 0;
    for (const record of sorted.inWindow) {
      await client.query('savepoint ingest_record');
      try {
        const step = await insertNewRecords(client, node, [record.storable], JSON.stringify([record.storable]), log);
        await client.query('release savepoint ingest_record');
        accepted += step.newRecords.length;
        created.push(...step.created);
        setAside.push(...takenRecords([record], step.takenBy, rejectedBatch.sent));
        sentBefore.push(...resent([record], step.newRecords, step.takenBy));
      } catch (err) {
        if (!isRecordDataError(err)) throw err;
        await client.query('rollback to savepoint ingest_record');
        setAside.push(setAsideRecord(record.parsed, 'invalid_record', recordDataErrorDetail(err), rejectedBatch.sent));
      }
    }
    setAside.push(...(await conflictingCopies(client, node.nodeId, sentBefore, rejectedBatch.sent)));
    const rejected = [...rejectedBatch.rejected, ...setAside];
    const rejectedStored = await storeRejected(client, node, { batchId: rejectedBatch.batchId, rejected });
    return { accepted, duplicates: sentCount - accepted - setAside.length, rejected: rejected.length, rejectedStored, setAside };
  });
  rememberPartitions(created);
  return result;
}

export async function ingestRecords(
  pool: pg.Pool,
  node: { nodeId: string; nodeName: string },
  records: readonly RequestRecord[],
  rejectedBatch: RejectedBatch = { batchId: '', rejected: [] },
  log?: SettlementLog,
  /** The batch handler's (receivedAtWindow of now); without it every receivedAt the schema takes is ingested. */
  window?: ReceivedAtWindow,
): Promise<IngestResult> {
  if (records.length === 0 && rejectedBatch.rejected.length === 0) return { accepted: 0, duplicates: 0, rejected: 0, rejectedStored: 0, setAside: [] };
  if (records.length === 0) {
    const rejectedStored = await withTransaction(pool, async (client) => {
      await shareUndeletedNode(client, node.nodeId);
      return storeRejected(client, node, rejectedBatch);
    });
    return { accepted: 0, duplicates: 0, rejected: rejectedBatch.rejected.length, rejectedStored, setAside: [] };
  }
  // Characters PostgreSQL cannot store are replaced first, so ids are compared as they will be stored.
  const storable = storableJsonArray(records);
  // One record per request id within the batch too (a node never sends two, but the key decides):
  // the first, as across batches.
  const sorted = sortBatch(records, storable.values, window);
  const { inWindow } = sorted;
  let created: MonthPartition[] = [];
  try {
    const result = await withTransaction(pool, async (client) => {
      await shareUndeletedNode(client, node.nodeId);
      const outside = await sortOutOfWindow(client, node.nodeId, sorted.outOfWindow, window, rejectedBatch.sent);
      const step = await insertNewRecords(
        client,
        node,
        inWindow.map((r) => r.storable),
        inWindow.length === storable.values.length ? storable.json : JSON.stringify(inWindow.map((r) => r.storable)),
        log,
      );
      created = step.created;
      const taken = takenRecords(inWindow, step.takenBy, rejectedBatch.sent);
      const conflicts = await conflictingCopies(client, node.nodeId, [...resent(inWindow, step.newRecords, step.takenBy), ...outside.held], rejectedBatch.sent);
      const setAside = [...outside.setAside, ...taken, ...sorted.inBatchConflicts, ...conflicts];
      const rejected = [...rejectedBatch.rejected, ...setAside];
      const rejectedStored = await storeRejected(client, node, { batchId: rejectedBatch.batchId, rejected });
      return { accepted: step.newRecords.length, duplicates: records.length - step.newRecords.length - setAside.length, rejected: rejected.length, rejectedStored, setAside };
    });
    rememberPartitions(created);
    return result;
  } catch (err) {
    // The same record would fail the batch on every resend: find it, set it aside, ingest the rest.
    if (!isRecordDataError(err)) throw err;
    return ingestRecordByRecord(pool, node, records.length, sorted, window, rejectedBatch, log);
  }
}
