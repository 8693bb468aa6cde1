/**
 * Settlement of ingested request records (docs/billing.md, "Settlement"): called by the records
 * ingestion inside its transaction with only the records that were new. Each record with an
 * account and a cost is debited once — the ledger has one debit per request id, so even a record
 * handed over twice is charged once — and its cost is added to the spent amount of the node's
 * lease it was reserved from. Accounts are locked in id order, so concurrent ingestions of several
 * nodes cannot deadlock.
 */
import type pg from 'pg';
import type { RequestRecord } from '../../../proto/src/index.js';
import { adjustBalance, appendLedger, lockAccountBalance, UUID_PATTERN } from './ledger.js';

export interface SettlementResult {
  /** Interrupted requests whose uncharged reservation went back to the account. */
  writtenOff: number;
  /** Records debited now. */
  charged: number;
  /** Records whose request id was already debited. */
  duplicates: number;
  /** Records with a cost for an account this control plane does not know (kept, not charged). */
  unknownAccount: number;
}

export async function settleIngestedRecords(client: pg.PoolClient, nodeId: string, records: readonly RequestRecord[]): Promise<SettlementResult> {
  const result: SettlementResult = { charged: 0, duplicates: 0, unknownAccount: 0, writtenOff: 0 };
  const byAccount = new Map<string, RequestRecord[]>();
  for (const record of records) {
    // No account (local keys) or nothing to charge or write off: no money moves.
    if (record.accountId === null) continue;
    if (record.cost.costMicros === 0 && !(record.status === 'interrupted' && record.cost.reservedMicros > 0)) continue;
    const list = byAccount.get(record.accountId) ?? [];
    list.push(record);
    byAccount.set(record.accountId, list);
  }
  for (const accountId of [...byAccount.keys()].sort()) {
    const list = byAccount.get(accountId)!;
    const balance = await lockAccountBalance(client, accountId);
    if (balance === undefined) {
      result.unknownAccount += list.length;
      continue;
    }
    for (const record of list) {
      const cost = BigInt(record.cost.costMicros);
      const leaseId = await leaseOfRecord(client, nodeId, accountId, record.cost.leaseId);
      if (record.status === 'interrupted') await writeOffInterrupted(client, nodeId, accountId, leaseId, record, result);
      if (cost === 0n) continue;
      const charged = await appendLedger(client, {
        accountId,
        kind: 'debit',
        amountMicros: cost,
        leaseId,
        nodeId,
        requestId: record.requestId,
        keyId: record.keyId,
        model: record.model,
        occurredAt: record.finishedAt,
      });
      if (!charged) {
        result.duplicates += 1;
        continue;
      }
      result.charged += 1;
      // Spent from a lease: the lease's outstanding amount goes down by the same cost.
      await adjustBalance(client, accountId, { balance: -cost, spent: cost, outstanding: leaseId === null ? 0n : -cost });
      if (leaseId !== null) {
        await client.query('update credit_leases set spent_micros = spent_micros + $2, updated_at = now() where id = $1', [leaseId, cost.toString()]);
      }
    }
  }
  return result;
}

/** The record's lease when it is this node's lease of this account; null otherwise (charged to the balance alone). */
async function leaseOfRecord(client: pg.PoolClient, nodeId: string, accountId: string, leaseId: string | null): Promise<string | null> {
  if (leaseId === null || !UUID_PATTERN.test(leaseId)) return null;
  const { rows } = await client.query<{ id: string }>(
    'select id from credit_leases where id = $1 and node_id = $2 and account_id = $3 for update',
    [leaseId, nodeId, accountId],
  );
  return rows[0]?.id ?? null;
}

/**
 * A request interrupted by a node crash: the restarted node counted its whole reservation as spent
 * (it cannot know), so the part not charged can never be spent from the lease; it goes back to
 * the account as a lease_return keyed by the request id (once, however often the record arrives).
 */
async function writeOffInterrupted(
  client: pg.PoolClient, nodeId: string, accountId: string, leaseId: string | null, record: RequestRecord, result: SettlementResult,
): Promise<void> {
  const unused = BigInt(record.cost.reservedMicros) - BigInt(record.cost.costMicros);
  if (leaseId === null || unused <= 0n) return;
  const written = await appendLedger(client, { accountId, kind: 'lease_return', amountMicros: unused, leaseId, nodeId, requestId: record.requestId });
  if (!written) return;
  result.writtenOff += 1;
  await adjustBalance(client, accountId, { outstanding: -unused });
  await client.query('update credit_leases set returned_micros = returned_micros + $2, updated_at = now() where id = $1', [leaseId, unused.toString()]);
}
