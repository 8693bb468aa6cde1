/**
 * Credit leases on the control plane (docs/billing.md, "Leases"). A lease lets one node spend an
 * account's credit without asking; its outstanding amount (granted − spent − returned) is money
 * the account has committed. INVARIANT: for every account, Σ outstanding ≤ balance. Every function
 * here runs in the caller's transaction after lockAccountBalance, so concurrent grants of the same
 * account are serialised on that row lock and cannot overshoot.
 */
import type pg from 'pg';
import type { LeaseGrant } from '../../../proto/src/index.js';
import { API_KEY_IN_USE_SQL } from '../keys/api-key-view.js';
import { adjustBalance, appendLedger, lockAccountBalance, UUID_PATTERN } from './ledger.js';
import type { LeasePolicy } from './lease-policy.js';
import { leaseTarget } from './lease-policy.js';

interface LeaseRow {
  id: string;
  nodeId: string;
  accountId: string;
  state: 'open' | 'returned';
  granted: bigint;
  spent: bigint;
  returned: bigint;
  expiresAt: number;
  /**
   * The most the node ever reported spent on the lease, and never less than what was settled from
   * its records when it reported: the control plane's view of the node's spend, which never goes back.
   */
  reportedSpent: bigint | null;
  reportedReserved: bigint | null;
  /**
   * What the node's own figures leave it: granted − its last reported spent − reserved, plus what
   * was granted since (never negative since those figures are bounded by the grant, see
   * boundedByGrant; a row written before may be). Above granted − reportedSpent − reportedReserved
   * only when its lease book went back (it reported less spend than the control plane knew).
   */
  reportedRemaining: bigint | null;
  /** Node clock of the last LeaseReport's figures (unix ms). */
  reportedNodeMs: number | null;
  /** Closed leases: unix ms of the close. */
  closedAt: number | null;
}

const LEASE_COLUMNS = `id, node_id as "nodeId", account_id as "accountId", state, granted_micros::text as granted,
  spent_micros::text as spent, returned_micros::text as returned, (extract(epoch from expires_at) * 1000)::bigint::text as "expiresAt",
  reported_spent_micros::text as "reportedSpent", reported_reserved_micros::text as "reportedReserved",
  reported_remaining_micros::text as "reportedRemaining", reported_node_ms::text as "reportedNodeMs", (extract(epoch from closed_at) * 1000)::bigint::text as "closedAt"`;

type RawLease = Record<keyof LeaseRow, string | null>;

function toLease(r: RawLease): LeaseRow {
  return {
    id: r.id!,
    nodeId: r.nodeId!,
    accountId: r.accountId!,
    state: r.state === 'returned' ? 'returned' : 'open',
    granted: BigInt(r.granted!),
    spent: BigInt(r.spent!),
    returned: BigInt(r.returned!),
    expiresAt: Number(r.expiresAt!),
    reportedSpent: r.reportedSpent === null ? null : BigInt(r.reportedSpent),
    reportedReserved: r.reportedReserved === null ? null : BigInt(r.reportedReserved),
    reportedRemaining: r.reportedRemaining === null ? null : BigInt(r.reportedRemaining),
    reportedNodeMs: r.reportedNodeMs === null ? null : Number(r.reportedNodeMs),
    closedAt: r.closedAt === null ? null : Number(r.closedAt),
  };
}

const outstandingOf = (l: LeaseRow): bigint => l.granted - l.spent - l.returned;
const clampZero = (v: bigint): bigint => (v > 0n ? v : 0n);
const maxOf = (a: bigint, b: bigint): bigint => (a > b ? a : b);

/**
 * A node's figures on a lease as the control plane takes them: its spend at most the lease's granted
 * total, its reservations at most what that leaves (docs/billing.md, "Node figures beyond the
 * grant"). Unbounded, one report or return past the grant (a hostile or broken node; an honest
 * node's cost overshooting its reservation, by that overshoot) made the top-up that followed exceed
 * the policy's target, or a close keep, or release per record, more than the lease ever held.
 */
export interface NodeFiguresBeyondGrant {
  grantedMicros: bigint;
  /** What the node said. */
  spentMicros: bigint;
  reservedMicros: bigint;
  /** What was taken from it. */
  keptSpentMicros: bigint;
  keptReservedMicros: bigint;
}

function boundedByGrant(granted: bigint, spent: bigint, reserved: bigint): { spent: bigint; reserved: bigint; beyond: NodeFiguresBeyondGrant | undefined } {
  const keptSpent = spent > granted ? clampZero(granted) : spent;
  const room = clampZero(granted - keptSpent);
  const keptReserved = reserved > room ? room : reserved;
  const beyond = keptSpent === spent && keptReserved === reserved
    ? undefined
    : { grantedMicros: granted, spentMicros: spent, reservedMicros: reserved, keptSpentMicros: keptSpent, keptReservedMicros: keptReserved };
  return { spent: keptSpent, reserved: keptReserved, beyond };
}

/** What the node may still reserve from the lease by the control plane's view of its last report. */
function availableByReport(l: LeaseRow): bigint | undefined {
  return l.reportedSpent === null || l.reportedReserved === null ? undefined : l.granted - l.reportedSpent - l.reportedReserved;
}

/** The node's own figures leave it more than the control plane's view does: its lease book went back. */
function nodeBookBehind(l: LeaseRow): boolean {
  const byReport = availableByReport(l);
  return byReport !== undefined && l.reportedRemaining !== null && l.reportedRemaining > byReport;
}

/**
 * The spend the control plane knows of an open lease: the most the node reported (recordLeaseReport
 * keeps it from going back) and what was settled from its records, write-offs of interrupted requests
 * included (the node counts those whole; while open, `returned` holds only them).
 */
function knownSpentOf(l: LeaseRow): bigint {
  return maxOf(l.reportedSpent ?? 0n, l.spent + l.returned);
}

/**
 * The grant carries the lease's known spend (LeaseGrant.known_spent_micros): the node counts at
 * least that much spent, so a lease book that went back (a node re-enrolled on another host, a
 * book restored or lost) cannot spend again what the control plane knows was spent.
 */
export function leaseGrantMessage(l: { accountId: string; id: string; granted: bigint; expiresAt: number; knownSpent: bigint }): LeaseGrant {
  return { accountId: l.accountId, leaseId: l.id, amountMicros: l.granted, expiresAt: BigInt(l.expiresAt), knownSpentMicros: l.knownSpent };
}

/** What the node said about a lease when it closed: its settled spend, what in-flight requests held, and when (node clock). */
interface NodeFigures {
  /** The node's settled spend (reservations not included). */
  spent: bigint;
  /** Held by in-flight requests when the node stopped reserving (or reported last). */
  reserved: bigint;
  /** Node clock (unix ms) of these figures; null when unknown (then no record can be told in flight, see releaseHeld). */
  atNodeMs: number | null;
}

/**
 * Closes a lease and hands back granted − max(node's spent + reserved, settled spent + returned).
 * Caller holds the account lock. What the node spent but we have not ingested, and what its
 * in-flight requests still hold, stays outstanding on the closed lease: records settle against it
 * later, and each in-flight request's record releases its reserved − cost (settlement.ts,
 * releaseHeld); the rest goes back when nothing can arrive any more (releaseClosedLease). While
 * open, `returned` holds only write-offs of interrupted requests, which the node counts in its
 * spent too: hence the max with settled spent + returned.
 */
async function closeLease(client: pg.PoolClient, lease: LeaseRow, node: NodeFigures): Promise<bigint> {
  const settled = lease.spent + lease.returned;
  const byNode = node.spent + node.reserved;
  const kept = byNode > settled ? byNode : settled;
  const give = clampZero(lease.granted - kept);
  // The reservations kept outstanding: never more than the lease keeps beyond its settled figures,
  // nor than it still holds once closed (granted − settled − given back), so the in-flight records
  // that release them (releaseHeld) cannot hand back more than the lease was granted.
  const beyondSettled = clampZero(kept - settled);
  const outstandingAfter = clampZero(lease.granted - settled - give);
  let held = node.reserved < beyondSettled ? node.reserved : beyondSettled;
  if (held > outstandingAfter) held = outstandingAfter;
  if (give > 0n) {
    await appendLedger(client, { accountId: lease.accountId, kind: 'lease_return', amountMicros: give, leaseId: lease.id, nodeId: lease.nodeId });
    await adjustBalance(client, lease.accountId, { outstanding: -give });
  }
  await client.query(
    `update credit_leases set state = 'returned', returned_micros = returned_micros + $2, closed_at = now(), updated_at = now(),
            reported_spent_micros = greatest(coalesce(reported_spent_micros, 0), $3), reported_reserved_micros = $4,
            held_micros = $5, held_cutoff_ms = $6
      where id = $1`,
    [lease.id, give.toString(), node.spent.toString(), node.reserved.toString(), held.toString(), node.atNodeMs],
  );
  return give;
}

/**
 * A closed lease from which nothing can arrive any more (its node is deleted, or it closed longer
 * than the hold bound ago): what it still holds goes back to the account, one ledger row.
 */
async function releaseClosedLease(client: pg.PoolClient, lease: LeaseRow): Promise<bigint> {
  const rest = outstandingOf(lease);
  if (rest <= 0n) return 0n;
  await appendLedger(client, { accountId: lease.accountId, kind: 'lease_return', amountMicros: rest, leaseId: lease.id, nodeId: lease.nodeId });
  await adjustBalance(client, lease.accountId, { outstanding: -rest });
  await client.query('update credit_leases set returned_micros = returned_micros + $2, held_micros = 0, updated_at = now() where id = $1', [lease.id, rest.toString()]);
  return rest;
}

async function leasesOfAccount(client: pg.PoolClient, accountId: string): Promise<LeaseRow[]> {
  const { rows } = await client.query<RawLease>(`select ${LEASE_COLUMNS} from credit_leases where account_id = $1 for update`, [accountId]);
  return rows.map(toLease);
}

/**
 * Leases of deleted nodes give their unspent credit back (their records can no longer arrive);
 * expired leases (the node may no longer reserve from them) give back what the node neither
 * reported spent nor reported reserved (the reservations stay held until their records settle).
 * Closed leases still holding credit give it back once nothing can arrive any more: their node is
 * deleted, or they closed more than the hold bound (policy.holdMs, default the lease TTL) ago.
 */
async function reclaimLeases(client: pg.PoolClient, leases: LeaseRow[], nowMs: number, holdMs: number): Promise<void> {
  const candidates = leases.filter((l) => l.state === 'open' || outstandingOf(l) > 0n);
  if (candidates.length === 0) return;
  const { rows } = await client.query<{ id: string }>('select id from nodes where id = any($1::uuid[]) and deleted_at is not null', [candidates.map((l) => l.nodeId)]);
  const deleted = new Set(rows.map((r) => r.id));
  for (const lease of candidates) {
    if (lease.state === 'returned') {
      if (deleted.has(lease.nodeId) || (lease.closedAt !== null && lease.closedAt + holdMs <= nowMs)) lease.returned += await releaseClosedLease(client, lease);
      continue;
    }
    let give: bigint;
    if (deleted.has(lease.nodeId)) give = await closeLease(client, lease, { spent: lease.spent, reserved: 0n, atNodeMs: null });
    else if (lease.expiresAt <= nowMs) {
      const reported = lease.reportedSpent !== null && lease.reportedReserved !== null;
      give = await closeLease(client, lease, reported
        ? { spent: lease.reportedSpent!, reserved: lease.reportedReserved!, atNodeMs: lease.reportedNodeMs }
        : { spent: lease.spent, reserved: 0n, atNodeMs: null });
    } else continue;
    lease.state = 'returned';
    lease.returned += give;
  }
}

export interface TopUpResult {
  /**
   * The lease to tell the node about (undefined: the account has nothing to lease and no open lease),
   * with the spend the control plane knows of it (knownSpentOf), which the grant carries.
   */
  lease: { id: string; accountId: string; granted: bigint; expiresAt: number; knownSpent: bigint } | undefined;
  /** What this call added to the lease. */
  addedMicros: bigint;
  /** True when this call opened the lease (the node cannot have heard of it yet). */
  opened: boolean;
  /**
   * Σ max(outstanding, 0) of the account's leases − balance when positive: the invariant is broken
   * (a late cost no lease held, a balance pushed below zero). 0 normally. The caller logs it at error level.
   */
  overcommittedMicros: bigint;
}

/**
 * Opens or tops up the lease of (node, account) by policy, in the caller's transaction. The node's
 * available amount is estimated from its last report (granted now − reported spent − reported
 * reserved), else from the lease's outstanding; the top-up brings it to the policy target, never
 * beyond what the account has free.
 */
export async function topUpLease(client: pg.PoolClient, nodeId: string, accountId: string, policy: LeasePolicy, nowMs: number): Promise<TopUpResult> {
  // The node's row first (as a deletion takes it: node, then accounts), shared: a deletion waits for
  // this top-up, or this top-up waits for the deletion and finds the node deleted — on any replica,
  // whether or not the node already had a lease of this account.
  const { rows: node } = await client.query<{ live: boolean }>('select deleted_at is null as live from nodes where id = $1 for share', [nodeId]);
  if (node[0]?.live !== true) return { lease: undefined, addedMicros: 0n, opened: false, overcommittedMicros: 0n };
  const balance = await lockAccountBalance(client, accountId);
  if (balance === undefined) return { lease: undefined, addedMicros: 0n, opened: false, overcommittedMicros: 0n };
  const leases = await leasesOfAccount(client, accountId);
  await reclaimLeases(client, leases, nowMs, policy.holdMs ?? policy.ttlMs);
  const { rows: account } = await client.query<{ live: boolean }>(
    `select (status = 'active' and deleted_at is null) as live from accounts where id = $1`,
    [accountId],
  );
  const committed = leases.reduce((sum, l) => sum + clampZero(outstandingOf(l)), 0n);
  const free = balance.balanceMicros - committed;
  const overcommittedMicros = free < 0n ? -free : 0n;
  let lease = leases.find((l) => l.nodeId === nodeId && l.state === 'open');
  const held = lease === undefined ? 0n : clampZero(outstandingOf(lease));
  const target = leaseTarget(policy, free, held);
  let nodeAvailable = held;
  const byReport = lease === undefined ? undefined : availableByReport(lease);
  if (byReport !== undefined && byReport < nodeAvailable) nodeAvailable = byReport;
  // A node whose lease book went back reserves from its own figures, which leave it more than the
  // control plane's: it is topped up only once those fall below the target (recordLeaseReport).
  if (lease !== undefined && nodeBookBehind(lease)) nodeAvailable = maxOf(nodeAvailable, lease.reportedRemaining!);
  // Never below nothing: a node whose figures (or whose settled records) passed its grant is
  // topped up to the target, not by the excess too (a node never holds more than the target).
  nodeAvailable = clampZero(nodeAvailable);
  // A suspended or deleted account gets no more credit; its open lease is still re-sent as is.
  let add = account[0]?.live === true ? target - nodeAvailable : 0n;
  if (add > free) add = free;
  // Small top-ups are skipped (ledger noise) unless they hand over the last of the free balance.
  const worthIt = add > 0n && (add * 4n >= target || add === free);
  const expiresAt = nowMs + policy.ttlMs;
  if (!worthIt) {
    if (lease === undefined) return { lease: undefined, addedMicros: 0n, opened: false, overcommittedMicros };
    // A live node's lease of a live account does not run out while it is refreshed: its expiry is
    // pushed forward once half its life has passed (no money moves, so no ledger row).
    let leaseExpiresAt = lease.expiresAt;
    if (account[0]?.live === true && lease.expiresAt - nowMs < policy.ttlMs / 2) {
      await client.query('update credit_leases set expires_at = to_timestamp($2::bigint / 1000.0), updated_at = now() where id = $1', [lease.id, expiresAt]);
      leaseExpiresAt = expiresAt;
    }
    return { lease: { id: lease.id, accountId, granted: lease.granted, expiresAt: leaseExpiresAt, knownSpent: knownSpentOf(lease) }, addedMicros: 0n, opened: false, overcommittedMicros };
  }
  const opened = lease === undefined;
  if (lease === undefined) {
    const { rows } = await client.query<RawLease>(
      `insert into credit_leases (node_id, account_id, expires_at) values ($1, $2, to_timestamp($3::bigint / 1000.0)) returning ${LEASE_COLUMNS}`,
      [nodeId, accountId, expiresAt],
    );
    lease = toLease(rows[0]!);
  }
  await appendLedger(client, { accountId, kind: 'lease_grant', amountMicros: add, leaseId: lease.id, nodeId });
  await adjustBalance(client, accountId, { outstanding: add });
  // A top-up never moves the expiry earlier (a lowered ZENOVA_CREDENTIAL_VALIDITY_SECONDS would): the
  // node keeps the later expiry it was granted and would go on reserving from a lease closed here.
  const { rows } = await client.query<{ granted: string; expiresAt: string }>(
    `update credit_leases set granted_micros = granted_micros + $2, reported_remaining_micros = reported_remaining_micros + $2,
            expires_at = greatest(expires_at, to_timestamp($3::bigint / 1000.0)), updated_at = now()
      where id = $1 returning granted_micros::text as granted, (extract(epoch from expires_at) * 1000)::bigint::text as "expiresAt"`,
    [lease.id, add.toString(), expiresAt],
  );
  // A top-up moves no spend: the figures read under the account lock above are the lease's.
  const knownSpent = knownSpentOf(lease);
  return { lease: { id: lease.id, accountId, granted: BigInt(rows[0]!.granted), expiresAt: Number(rows[0]!.expiresAt), knownSpent }, addedMicros: add, opened, overcommittedMicros };
}

/**
 * The accounts a node serves (live, active, with a key neither revoked nor expired) that have free
 * credit or a lease to reclaim — one expired while open, or one closed past the hold bound still
 * holding credit: its top-up is where that reclaim happens (reclaimLeases), and without it credit a
 * node gone for good took stayed outstanding, no other node being offered the account — and those
 * the node holds an open lease of. `nowMs` and `holdMs` are the top-up's own.
 */
export async function accountsToLease(db: pg.Pool | pg.PoolClient, nodeId: string, nowMs: number, holdMs: number): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>(accountsToLeaseQuery(nodeId, nowMs, holdMs));
  return rows.map((r) => r.id);
}

/**
 * accountsToLease's SQL (apart from running it, so a test can read its plan). The lease checks run
 * on every live node's refresh for every account without free credit: they read the partial index
 * of migration 0018, which holds only open leases and closed ones still holding credit, not the
 * account's whole lease history.
 */
export function accountsToLeaseQuery(nodeId: string, nowMs: number, holdMs: number): { text: string; values: unknown[] } {
  return {
    text: `select a.id from accounts a
      where (a.deleted_at is null and a.status = 'active'
             and exists (select 1 from api_keys k where k.account_id = a.id and ${API_KEY_IN_USE_SQL})
             and (exists (select 1 from account_balances b where b.account_id = a.id and b.balance_micros > b.outstanding_micros)
                  or exists (select 1 from credit_leases l where l.account_id = a.id
                               and ((l.state = 'open' and l.expires_at <= to_timestamp($2::bigint / 1000.0))
                                    or (l.state = 'returned' and l.granted_micros - l.spent_micros - l.returned_micros > 0
                                        and l.closed_at <= to_timestamp(($2::bigint - $3::bigint) / 1000.0))))))
         or exists (select 1 from credit_leases l where l.account_id = a.id and l.node_id = $1 and l.state = 'open')
      order by a.id`,
    values: [nodeId, Math.floor(nowMs), Math.floor(holdMs)],
  };
}

export interface LeaseFigures {
  accountId: string;
  leaseId: string;
  spentMicros: bigint;
  reservedMicros: bigint;
  /** LeaseReport.reported_at: node clock of the figures, unix ms (0 or absent: unknown). */
  reportedAt?: bigint;
}

/** A LeaseReport that put the node's spend on a lease below what the control plane already knew. */
export interface SpendWentBack {
  /** LeaseReport.spent_micros. */
  reportedSpentMicros: bigint;
  /** The control plane's view of the node's spend before this report (null: no report before). */
  previousReportedSpentMicros: bigint | null;
  /** Settled from the lease's records: debits, and write-offs of interrupted requests (the node counts those whole). */
  settledSpentMicros: bigint;
  /** max(previous, settled): kept as the node's spend on the lease. */
  knownSpentMicros: bigint;
}

export interface LeaseReportOutcome {
  /**
   * Set when this report is the first (since the lease's figures last agreed) whose spend is below
   * what the control plane knew: the node's lease book went back. The caller logs it at error level.
   */
  wentBack: SpendWentBack | undefined;
  /**
   * The report's spend is below what the control plane knew (logged or not): the grant that follows
   * is sent even when its amount and expiry did not change, so the node takes the known spend
   * (LeaseGrant.known_spent_micros) at once rather than at the next top-up.
   */
  nodeBehind: boolean;
  /** Set when the report's figures passed the lease's grant and were bounded by it (the caller logs it at warn level). */
  beyondGrant?: NodeFiguresBeyondGrant;
}

/**
 * Records a node's LeaseReport on its open lease; undefined when the lease is not this node's open one.
 *
 * The control plane's view of the node's spend never goes back: a node reports its spend from its
 * lease book, and a book restored from an older copy, lost (a grant sent again starts from nothing
 * spent) or left behind on another host reports less than the node spent, and lets it spend the
 * difference again. The lowered figure made an expired lease hand back credit its records still
 * needed, and was silent. So the stored spend is the most of this report, every earlier one and
 * what the lease's records settled (plus write-offs of interrupted requests, which the node counts
 * as spent), and the node's own remaining is kept apart (reported_remaining_micros): top-ups count
 * what its own figures let it reserve (topUpLease), so the difference is not handed out twice.
 * The report's spend is taken at most at the lease's granted total and its reservations at most at
 * what that leaves (boundedByGrant); the spend it said still decides whether its book went back.
 */
export async function recordLeaseReport(client: pg.PoolClient, nodeId: string, r: LeaseFigures): Promise<LeaseReportOutcome | undefined> {
  if (!UUID_PATTERN.test(r.leaseId) || !UUID_PATTERN.test(r.accountId)) return undefined;
  const { rows } = await client.query<RawLease>(
    `select ${LEASE_COLUMNS} from credit_leases where id = $1 and node_id = $2 and account_id = $3 and state = 'open' for update`,
    [r.leaseId, nodeId, r.accountId],
  );
  if (rows[0] === undefined) return undefined;
  const lease = toLease(rows[0]);
  const settled = lease.spent + lease.returned;
  const known = maxOf(lease.reportedSpent ?? 0n, settled);
  const wasBehind = nodeBookBehind(lease);
  const bounded = boundedByGrant(lease.granted, r.spentMicros, r.reservedMicros);
  await client.query(
    `update credit_leases set reported_spent_micros = $2, reported_reserved_micros = $3, reported_remaining_micros = $4,
            reported_at = now(), reported_node_ms = $5, updated_at = now()
      where id = $1`,
    [
      lease.id, maxOf(known, bounded.spent).toString(), bounded.reserved.toString(), (lease.granted - bounded.spent - bounded.reserved).toString(),
      r.reportedAt !== undefined && r.reportedAt > 0n ? r.reportedAt.toString() : null,
    ],
  );
  const beyondGrant = bounded.beyond === undefined ? {} : { beyondGrant: bounded.beyond };
  if (r.spentMicros >= known) return { wentBack: undefined, nodeBehind: false, ...beyondGrant };
  if (wasBehind) return { wentBack: undefined, nodeBehind: true, ...beyondGrant };
  return {
    nodeBehind: true,
    wentBack: { reportedSpentMicros: r.spentMicros, previousReportedSpentMicros: lease.reportedSpent, settledSpentMicros: settled, knownSpentMicros: known },
    ...beyondGrant,
  };
}

/**
 * LeaseReturn: closes the node's lease, handing back granted − max(node's spent, settled spent + returned);
 * the node's spent is never taken below the spend it reported before (recordLeaseReport).
 * `nodeSpent` is LeaseReturn.spent_micros (in-flight reservations included); `reserved` the part of it
 * in-flight requests held (LeaseReturn.reserved_micros) and `returnedAtMs` the node clock when it
 * stopped reserving (LeaseReturn.returned_at): those reservations stay outstanding and each such
 * request's record releases reserved − cost. The node's settled spend is taken at most at the
 * lease's granted total and its reservations at most at what that leaves (boundedByGrant), told to
 * `onBeyondGrant` when they were more. Idempotent.
 */
export async function returnLease(
  client: pg.PoolClient, nodeId: string, accountId: string, leaseId: string, nodeSpent: bigint, reserved = 0n, returnedAtMs: number | null = null,
  onBeyondGrant?: (figures: NodeFiguresBeyondGrant) => void,
): Promise<bigint | undefined> {
  if (!UUID_PATTERN.test(leaseId)) return undefined;
  const balance = await lockAccountBalance(client, accountId);
  if (balance === undefined) return undefined;
  const { rows } = await client.query<RawLease>(
    `select ${LEASE_COLUMNS} from credit_leases where id = $1 and node_id = $2 and account_id = $3 for update`,
    [leaseId, nodeId, accountId],
  );
  const lease = rows[0] && toLease(rows[0]);
  if (lease === undefined || lease.state !== 'open') return undefined;
  const inFlight = reserved < 0n ? 0n : reserved > nodeSpent ? nodeSpent : reserved;
  const bounded = boundedByGrant(lease.granted, nodeSpent - inFlight, inFlight);
  if (bounded.beyond !== undefined) onBeyondGrant?.(bounded.beyond);
  // A lease book that went back returns with less spend than it reported: that spend's records may
  // still arrive and must find it held, not handed back.
  const spent = maxOf(bounded.spent, lease.reportedSpent ?? 0n);
  return closeLease(client, lease, { spent, reserved: bounded.reserved, atNodeMs: returnedAtMs !== null && returnedAtMs > 0 ? returnedAtMs : null });
}

/**
 * Node deletion: every open lease of the node gives back its unspent part, and every closed one what
 * it still held for records that can no longer arrive. Call in the deletion's transaction.
 */
export async function returnLeasesOfNode(client: pg.PoolClient, nodeId: string): Promise<void> {
  const { rows } = await client.query<{ accountId: string }>(
    `select distinct account_id as "accountId" from credit_leases
      where node_id = $1 and (state = 'open' or granted_micros - spent_micros - returned_micros > 0) order by 1`,
    [nodeId],
  );
  for (const { accountId } of rows) {
    await lockAccountBalance(client, accountId);
    for (const lease of (await leasesOfAccount(client, accountId)).filter((l) => l.nodeId === nodeId)) {
      if (lease.state === 'open') await closeLease(client, lease, { spent: lease.spent, reserved: 0n, atNodeMs: null });
      else await releaseClosedLease(client, lease);
    }
  }
}
