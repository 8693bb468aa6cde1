/**
 * Settlement of ingested request records (owner: billing module): called by the records
 * ingestion inside its transaction with only the records that were new (never duplicates), so
 * each request is charged exactly once. Stub until billing lands: charges nothing.
 */
import type pg from 'pg';
import type { RequestRecord } from '../../../proto/src/index.js';

export async function settleIngestedRecords(client: pg.PoolClient, nodeId: string, records: readonly RequestRecord[]): Promise<void> {
  void client;
  void nodeId;
  void records;
}
