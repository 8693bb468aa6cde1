/**
 * Settlement of ingested request records (docs/billing.md, "Settlement"): called by the records
 * ingestion inside its transaction with only the records that were new. Each record with an
 * account and a cost is debited once — the ledger has one debit per request id, so even a record
 * handed over twice is charged once — and its cost is added to the spent amount of the node's
 * lease it was reserved from. A record of a request that was in flight when its lease closed
 * releases the part of its reservation it did not cost (releaseHeld), and so does an interrupted
 * request (writeOffInterrupted), never beyond what its lease still holds. Accounts are locked in id
 * order, so concurrent ingestions of several nodes cannot deadlock.
 */
import type pg from 'pg';
import type pino from 'pino';
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
  /** Records in flight when their lease closed whose uncharged reservation went back to the account. */
  released: number;
  /**
   * Cost debited from a lease beyond what the lease still had outstanding (a late record no lease
   * held credit for): the account's Σ outstanding may now exceed its balance. 0 normally.
   */
  uncoveredMicros: bigint;
  /**
   * Uncharged reservations of interrupted requests not returned because their lease no longer held
   * them (a late record: the closed lease had already handed that credit back). 0 normally.
   */
  withheldWriteOffMicros: bigint;
}

interface RecordLease {
  id: string;
  state: 'open' | 'returned';
  outstanding: bigint;
  held: bigint;
  heldCutoffMs: number | null;
}

/** A lease charged beyond what it still held in one settlement (logged at warn level). */
interface UncoveredLease {
  accountId: string;
  state: RecordLease['state'];
  /** Beyond what the lease held. */
  uncovered: bigint;
  /** The costs of those records. */
  charged: bigint;
  /** The lease's outstanding after the last of them (negative: charged more than it held). */
  outstanding: bigint;
}

/** A lease whose interrupted requests' write-offs were cut to what it still held in one settlement (logged at warn level). */
interface WithheldWriteOff {
  accountId: string;
  state: RecordLease['state'];
  /** Not returned: what the lease no longer held. */
  withheld: bigint;
  /** Returned all the same (the part the lease still held). */
  returned: bigint;
  requestIds: string[];
}

/**
 * `log`: where a lease charged beyond what it still held, or whose interrupted requests' write-offs
 * were cut to what it still held, is reported (warn level, once per lease and settlement, with the
 * figures); the records are charged all the same.
 */
export async function settleIngestedRecords(
  client: pg.PoolClient, nodeId: string, records: readonly RequestRecord[], log?: Pick<pino.Logger, 'warn'>,
): Promise<SettlementResult> {
  const result: SettlementResult = {
    charged: 0, duplicates: 0, unknownAccount: 0, writtenOff: 0, released: 0, uncoveredMicros: 0n, withheldWriteOffMicros: 0n,
  };
  const uncoveredLeases = new Map<string, UncoveredLease>();
  const withheldLeases = new Map<string, WithheldWriteOff>();
  const byAccount = new Map<string, RequestRecord[]>();
  for (const record of records) {
    // No account (local keys) or nothing to charge, write off or release: no money moves.
    if (record.accountId === null) continue;
    if (record.cost.costMicros === 0 && !(record.cost.reservedMicros > 0 && (record.status === 'interrupted' || record.cost.leaseId !== null))) continue;
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
      const lease = await leaseOfRecord(client, nodeId, accountId, record.cost.leaseId);
      const leaseId = lease?.id ?? null;
      if (record.status === 'interrupted' && lease !== undefined) {
        const { returned, withheld } = await writeOffInterrupted(client, nodeId, accountId, lease, record, result);
        lease.outstanding -= returned;
        if (withheld > 0n) {
          result.withheldWriteOffMicros += withheld;
          const seen = withheldLeases.get(lease.id) ?? { accountId, state: lease.state, withheld: 0n, returned: 0n, requestIds: [] };
          seen.withheld += withheld;
          seen.returned += returned;
          seen.requestIds.push(record.requestId);
          withheldLeases.set(lease.id, seen);
        }
      }
      if (cost === 0n) {
        if (lease !== undefined && record.status !== 'interrupted') await releaseHeld(client, nodeId, accountId, lease, record, result);
        continue;
      }
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
      if (lease !== undefined) {
        const covered = lease.outstanding > 0n ? lease.outstanding : 0n;
        lease.outstanding -= cost;
        if (cost > covered) {
          result.uncoveredMicros += cost - covered;
          const seen = uncoveredLeases.get(lease.id) ?? { accountId, state: lease.state, uncovered: 0n, charged: 0n, outstanding: 0n };
          seen.uncovered += cost - covered;
          seen.charged += cost;
          seen.outstanding = lease.outstanding;
          uncoveredLeases.set(lease.id, seen);
        }
        await client.query('update credit_leases set spent_micros = spent_micros + $2, updated_at = now() where id = $1', [lease.id, cost.toString()]);
        if (record.status !== 'interrupted') await releaseHeld(client, nodeId, accountId, lease, record, result);
      }
    }
  }
  for (const [leaseId, u] of uncoveredLeases) {
    // Never silent (docs/billing.md, "Settlement"): a late record no lease held credit for, or a
    // node whose lease book went back and spent again what it had spent.
    log?.warn(
      {
        nodeId, accountId: u.accountId, leaseId, leaseState: u.state,
        uncoveredMicros: u.uncovered.toString(), chargedMicros: u.charged.toString(), outstandingMicros: u.outstanding.toString(),
      },
      'records were charged to a credit lease beyond what it still held: the account\'s leases may now hold more than its balance',
    );
  }
  for (const [leaseId, w] of withheldLeases) {
    // Never silent either: a node that delivered its spool after its lease closed and released
    // the credit (docs/spool.md, a re-enrolled node), or a lease book that went back.
    log?.warn(
      {
        nodeId, accountId: w.accountId, leaseId, leaseState: w.state,
        withheldMicros: w.withheld.toString(), returnedMicros: w.returned.toString(), requestIds: w.requestIds,
      },
      'interrupted requests\' reservations were not returned beyond what their credit lease still held: that credit had already gone back to the account',
    );
  }
  return result;
}

/** The record's lease when it is this node's lease of this account; undefined otherwise (charged to the balance alone). */
async function leaseOfRecord(client: pg.PoolClient, nodeId: string, accountId: string, leaseId: string | null): Promise<RecordLease | undefined> {
  if (leaseId === null || !UUID_PATTERN.test(leaseId)) return undefined;
  const { rows } = await client.query<{ id: string; state: string; outstanding: string; held: string; cutoff: string | null }>(
    `select id, state, (granted_micros - spent_micros - returned_micros)::text as outstanding, held_micros::text as held,
            held_cutoff_ms::text as cutoff
       from credit_leases where id = $1 and node_id = $2 and account_id = $3 for update`,
    [leaseId, nodeId, accountId],
  );
  const r = rows[0];
  if (r === undefined) return undefined;
  return {
    id: r.id,
    state: r.state === 'returned' ? 'returned' : 'open',
    outstanding: BigInt(r.outstanding),
    held: BigInt(r.held),
    heldCutoffMs: r.cutoff === null ? null : Number(r.cutoff),
  };
}

/**
 * A request in flight when its lease closed (received at or before the node figures the close
 * used, finished after them): the closed lease kept its reservation outstanding; now that its cost
 * is known, reserved − cost goes back to the account as a lease_return keyed by the request id
 * (the key interrupted write-offs use: once, however often the record arrives) and the reservation
 * leaves the lease's held amount. Never more than the lease still holds for reservations, nor
 * than its outstanding after the record's debit: records that cost more than the node's figures
 * said, or a held amount stored before closes bounded it (closeLease), leave less, and a release
 * never takes the lease's outstanding below zero nor its returns past its grant.
 * Call after the record's debit (if any) was charged.
 */
async function releaseHeld(
  client: pg.PoolClient, nodeId: string, accountId: string, lease: RecordLease, record: RequestRecord, result: SettlementResult,
): Promise<void> {
  if (lease.state !== 'returned' || lease.held <= 0n || lease.heldCutoffMs === null) return;
  if (!(record.receivedAt <= lease.heldCutoffMs && record.finishedAt > lease.heldCutoffMs)) return;
  const reserved = BigInt(record.cost.reservedMicros);
  const take = reserved < lease.held ? reserved : lease.held;
  if (take <= 0n) return;
  let unused = take - BigInt(record.cost.costMicros);
  if (unused > lease.outstanding) unused = lease.outstanding;
  if (unused > 0n) {
    const written = await appendLedger(client, { accountId, kind: 'lease_return', amountMicros: unused, leaseId: lease.id, nodeId, requestId: record.requestId });
    if (!written) return;
    result.released += 1;
    await adjustBalance(client, accountId, { outstanding: -unused });
    lease.outstanding -= unused;
  }
  lease.held -= take;
  await client.query(
    'update credit_leases set returned_micros = returned_micros + $2, held_micros = held_micros - $3, updated_at = now() where id = $1',
    [lease.id, (unused > 0n ? unused : 0n).toString(), take.toString()],
  );
}

/**
 * A request interrupted by a node crash: the restarted node counted its whole reservation as spent
 * (it cannot know), so the part not charged can never be spent from the lease; it goes back to
 * the account as a lease_return keyed by the request id (once, however often the record arrives).
 *
 * Never more than the lease still holds beyond the record's cost (charged next, from the same
 * lease): a record delivered late finds its closed lease already handed the reservation back
 * (closeLease from figures without it, or releaseClosedLease past the hold bound), and returning it
 * again would leave the lease returned beyond granted and the account's outstanding below what its
 * leases hold. Outstanding, not held: a reservation the node counted as spent before the close is
 * kept outstanding but not held. `withheld`: the part not returned (0 for a resent record).
 */
async function writeOffInterrupted(
  client: pg.PoolClient, nodeId: string, accountId: string, lease: RecordLease, record: RequestRecord, result: SettlementResult,
): Promise<{ returned: bigint; withheld: bigint }> {
  const unused = BigInt(record.cost.reservedMicros) - BigInt(record.cost.costMicros);
  if (unused <= 0n) return { returned: 0n, withheld: 0n };
  const room = lease.outstanding - BigInt(record.cost.costMicros);
  const take = room <= 0n ? 0n : room < unused ? room : unused;
  if (take === 0n) {
    // A resent record whose reservation went back the first time is no late one.
    const { rowCount } = await client.query(
      "select 1 from billing_ledger where request_id = $1 and kind = 'lease_return'",
      [record.requestId],
    );
    return { returned: 0n, withheld: rowCount === 0 ? unused : 0n };
  }
  const written = await appendLedger(client, { accountId, kind: 'lease_return', amountMicros: take, leaseId: lease.id, nodeId, requestId: record.requestId });
  if (!written) return { returned: 0n, withheld: 0n };
  result.writtenOff += 1;
  await adjustBalance(client, accountId, { outstanding: -take });
  await client.query('update credit_leases set returned_micros = returned_micros + $2, updated_at = now() where id = $1', [lease.id, take.toString()]);
  return { returned: take, withheld: unused - take };
}
