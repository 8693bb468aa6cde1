/**
 * What the billing admin API shows (docs/api.md, "Billing"): an account's balance and leases, spend
 * grouped by account, key or node over a time window, and the leases of a node. Amounts are
 * micro-units, bigint from PostgreSQL to the answer, written as exact JSON integers (exactJson):
 * sums over time (spend, a lease's cumulative grant) pass 2^53, where a double would round them.
 * The lists are keyset pages (billing-cursors.ts) in a total order, so walking every page lists
 * each row once.
 */
import { z } from 'zod';
import type { Queryable } from '../nodes/with-transaction.js';
import { UUID_PATTERN } from './ledger.js';
import type { SpendCursor } from './billing-cursors.js';
import { afterNewestFirstCursorSql, createdAtUsSql } from '../http/list-cursors.js';
import type { NewestFirstCursor } from '../http/list-cursors.js';

/** An amount of micro-units in an answer: a bigint, never a double (written by exactJson). */
const micros = z.bigint();

export const balanceViewSchema = z.object({
  accountId: z.string(),
  account: z.string(),
  /** credits − settled spend. */
  balanceMicros: micros,
  /** Held by node leases (granted − spent − returned). */
  outstandingLeasesMicros: micros,
  /** balance − outstanding leases: what new leases can still be granted from. */
  availableMicros: micros,
  /** Σ settled request costs. */
  spentMicros: micros,
});
export type BalanceView = z.infer<typeof balanceViewSchema>;

export const leaseViewSchema = z.object({
  leaseId: z.string(),
  nodeId: z.string(),
  node: z.string(),
  accountId: z.string(),
  account: z.string(),
  state: z.enum(['open', 'returned']),
  grantedMicros: micros,
  spentMicros: micros,
  returnedMicros: micros,
  outstandingMicros: micros,
  reportedSpentMicros: micros.nullable(),
  reportedReservedMicros: micros.nullable(),
  reportedAt: z.string().nullable(),
  expiresAt: z.string(),
  createdAt: z.string(),
  closedAt: z.string().nullable(),
});
export type LeaseView = z.infer<typeof leaseViewSchema>;

export const spendRowSchema = z.object({ id: z.string().nullable(), name: z.string().nullable(), requests: z.number(), spentMicros: micros });
export type SpendRow = z.infer<typeof spendRowSchema>;

/**
 * The account (by name, or by id) — its id and name; undefined when there is none. No new account
 * may be named like a UUID (account-validation.ts), so a name preferred here is never another's id.
 * Only a well-formed UUID is compared with the id, as a uuid (`accounts.id` is one), each in its own
 * arm so each is one index lookup (the live-name index, the primary key); anything else is a name only.
 */
export async function findAccount(db: Queryable, nameOrId: string): Promise<{ id: string; name: string } | undefined> {
  const { rows } = UUID_PATTERN.test(nameOrId)
    ? await db.query<{ id: string; name: string }>(
      `select id, name from (
         select id, name, 0 as rank from accounts where deleted_at is null and name = $1
         union all select id, name, 1 from accounts where deleted_at is null and id = $2::uuid
       ) found order by rank limit 1`,
      [nameOrId, nameOrId],
    )
    : await db.query<{ id: string; name: string }>('select id, name from accounts where deleted_at is null and name = $1', [nameOrId]);
  return rows[0];
}

export async function balanceView(db: Queryable, account: { id: string; name: string }): Promise<BalanceView> {
  const { rows } = await db.query<{ balance: string; outstanding: string; spent: string }>(
    `select coalesce(b.balance_micros, 0)::text as balance, coalesce(b.spent_micros, 0)::text as spent,
            (select coalesce(sum(greatest(granted_micros - spent_micros - returned_micros, 0)), 0)
               from credit_leases where account_id = $1)::text as outstanding
       from (select $1::uuid as id) a left join account_balances b on b.account_id = a.id`,
    [account.id],
  );
  const r = rows[0]!;
  const balance = BigInt(r.balance);
  const outstanding = BigInt(r.outstanding);
  return {
    accountId: account.id,
    account: account.name,
    balanceMicros: balance,
    outstandingLeasesMicros: outstanding,
    availableMicros: balance - outstanding,
    spentMicros: BigInt(r.spent),
  };
}

const iso = (d: Date | null): string | null => (d === null ? null : d.toISOString());
const microsOrNull = (v: string | null): bigint | null => (v === null ? null : BigInt(v));

export interface LeaseFilter {
  nodeId?: string | undefined;
  accountId?: string | undefined;
  limit: number;
  cursor?: NewestFirstCursor | undefined;
}

/**
 * The lease list's SQL and parameters (apart from running it, so a test can read its plan). The
 * cursor compares created_at itself (its µs added to the epoch: exact, unlike a float of seconds),
 * so the page is a range of the (created_at, id) indexes of migration 0016, not a walk from the newest.
 */
export function listLeasesQuery(filter: LeaseFilter): { text: string; values: unknown[] } {
  const where: string[] = [];
  const values: unknown[] = [];
  const add = (sql: (p: string) => string, ...vs: unknown[]): void => {
    const ps = vs.map((v) => `$${values.push(v)}`);
    where.push(sql(ps.join(',')));
  };
  // Only the filters given: a `($1 is null or …)` form hides from the planner which index serves the list.
  if (filter.nodeId !== undefined) add((p) => `l.node_id = ${p}::uuid`, filter.nodeId);
  if (filter.accountId !== undefined) add((p) => `l.account_id = ${p}::uuid`, filter.accountId);
  if (filter.cursor !== undefined) where.push(afterNewestFirstCursorSql('l.created_at', 'l.id', filter.cursor, values));
  const limit = `$${values.push(filter.limit + 1)}`;
  return {
    // created_at is kept to the microsecond, finer than a Date: the cursor carries it as integer µs.
    text: `select l.id, l.node_id, n.name as node, l.account_id, a.name as account, l.state,
            l.granted_micros::text as granted, l.spent_micros::text as spent, l.returned_micros::text as returned,
            l.reported_spent_micros::text as rs, l.reported_reserved_micros::text as rr, l.reported_at,
            l.expires_at, l.created_at, ${createdAtUsSql('l.created_at')} as created_us, l.closed_at
       from credit_leases l join nodes n on n.id = l.node_id join accounts a on a.id = l.account_id
      ${where.length > 0 ? `where ${where.join(' and ')}` : ''}
      order by l.created_at desc, l.id desc limit ${limit}`,
    values,
  };
}

/** Newest first, (created_at, id) descending: leases granted in one transaction share created_at. */
export async function listLeases(db: Queryable, filter: LeaseFilter): Promise<{ leases: LeaseView[]; next: NewestFirstCursor | undefined }> {
  const { rows } = await db.query<{
    id: string; node_id: string; node: string; account_id: string; account: string; state: 'open' | 'returned';
    granted: string; spent: string; returned: string; rs: string | null; rr: string | null; reported_at: Date | null;
    expires_at: Date; created_at: Date; created_us: string; closed_at: Date | null;
  }>(listLeasesQuery(filter));
  const page = rows.slice(0, filter.limit);
  const last = page.at(-1);
  const next = rows.length > filter.limit && last !== undefined ? { createdAtUs: BigInt(last.created_us), id: last.id } : undefined;
  const leases = page.map((r): LeaseView => {
    const outstanding = BigInt(r.granted) - BigInt(r.spent) - BigInt(r.returned);
    return {
      leaseId: r.id,
      nodeId: r.node_id,
      node: r.node,
      accountId: r.account_id,
      account: r.account,
      state: r.state,
      grantedMicros: BigInt(r.granted),
      spentMicros: BigInt(r.spent),
      returnedMicros: BigInt(r.returned),
      outstandingMicros: outstanding > 0n ? outstanding : 0n,
      reportedSpentMicros: microsOrNull(r.rs),
      reportedReservedMicros: microsOrNull(r.rr),
      reportedAt: iso(r.reported_at),
      expiresAt: r.expires_at.toISOString(),
      createdAt: r.created_at.toISOString(),
      closedAt: iso(r.closed_at),
    };
  });
  return { leases, next };
}

export type SpendBy = 'account' | 'key' | 'node';

/**
 * Settled spend (ledger debits) with from ≤ finished < to, grouped: most spend first, then by group
 * id (bytewise, the group without one last), a total order the cursor's (spend, id) continues.
 */
export async function spendBy(
  db: Queryable, by: SpendBy, from: Date, to: Date, page: { limit: number; cursor?: SpendCursor | undefined },
): Promise<{ rows: SpendRow[]; next: SpendCursor | undefined }> {
  const group = {
    account: { id: 'd.account_id::text', name: '(select name from accounts where id = d.account_id)' },
    key: { id: 'd.key_id', name: '(select name from api_keys where id::text = d.key_id)' },
    node: { id: 'd.node_id::text', name: '(select name from nodes where id = d.node_id)' },
  }[by];
  const { rows } = await db.query<{ id: string | null; name: string | null; requests: string; spent: string }>(
    `select id, name, requests::text, spent::text from (
       select ${group.id} collate "C" as id, ${group.name} as name, count(*) as requests, sum(d.amount_micros) as spent
         from billing_ledger d
        where d.kind = 'debit' and d.occurred_at >= to_timestamp($1::bigint / 1000.0) and d.occurred_at < to_timestamp($2::bigint / 1000.0)
        group by 1, 2) g
      where $3::numeric is null or g.spent < $3 or (g.spent = $3 and $4::text is not null and (g.id is null or g.id > $4 collate "C"))
      order by g.spent desc, g.id collate "C" nulls last limit $5`,
    // Epoch ms, not Dates: pg writes a Date in the process's local time, whose offset before ~1900
    // (local mean time) has seconds a Date's offset drops; a window bound would move by them.
    [from.getTime(), to.getTime(), page.cursor?.spentMicros.toString() ?? null, page.cursor?.id ?? null, page.limit + 1],
  );
  const cut = rows.slice(0, page.limit);
  const last = cut.at(-1);
  const next = rows.length > page.limit && last !== undefined
    ? { by, fromMs: from.getTime(), toMs: to.getTime(), spentMicros: BigInt(last.spent), id: last.id }
    : undefined;
  return { rows: cut.map((r) => ({ id: r.id, name: r.name, requests: Number(r.requests), spentMicros: BigInt(r.spent) })), next };
}

/**
 * JSON as JSON.stringify writes it, but a bigint written as its exact integer (JSON.stringify
 * throws on one): the billing answers' amounts. A JSON number may have any number of digits; a
 * client must read those past 2^53 with a parser that keeps big integers (docs/api.md, "Billing").
 */
export function exactJson(value: unknown): string | undefined {
  if (typeof value === 'bigint') return value.toString();
  if (value === null || typeof value !== 'object') return JSON.stringify(value);
  const toJSON = (value as { toJSON?: unknown }).toJSON;
  if (typeof toJSON === 'function') return exactJson((toJSON as () => unknown).call(value));
  if (Array.isArray(value)) return `[${value.map((item) => exactJson(item) ?? 'null').join(',')}]`;
  const members: string[] = [];
  for (const [key, item] of Object.entries(value)) {
    const written = exactJson(item);
    if (written !== undefined) members.push(`${JSON.stringify(key)}:${written}`);
  }
  return `{${members.join(',')}}`;
}
