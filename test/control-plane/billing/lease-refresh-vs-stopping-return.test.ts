// A lease refresh under way when a stopping node's LeaseReturn arrives, on real PostgreSQL: the
// return wins. The refresh had passed its "is the node stopping?" check before the return came, and
// its top-up commits after the return: the lease it opens (the node's returned one being closed, or
// for another account, whose lock the return never takes) is closed at once and never sent — sent,
// the grant came after the node's last LeaseReturnAck, when the node ends its stream, and the lease
// stayed open with its credit outstanding until it expired.
import type pg from 'pg';
import t from 'tap';
import type { Test } from 'tap';
import { pino } from 'pino';
import type { ControlMessage } from '../../../proto/src/index.js';
import { creditAccount } from '../../../control-plane/src/billing/account-credits.js';
import { topUpLease } from '../../../control-plane/src/billing/credit-leases.js';
import { createLeaseStreamHandler } from '../../../control-plane/src/billing/lease-stream-handler.js';
import type { LeasePolicy } from '../../../control-plane/src/billing/lease-policy.js';
import { withTransaction } from '../../../control-plane/src/nodes/with-transaction.js';
import { testDatabase } from '../../fixtures/postgres.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { migratedPool } from '../nodes-harness.js';
import { insertAccount, insertNode, storedBalance } from './billing-fixtures.js';

const HOUR = 3_600_000;
const POLICY: LeasePolicy = { capMicros: 1_000_000_000_000n, sharePpm: 250_000n, ttlMs: HOUR, refreshMs: HOUR };

interface Race {
  pool: pg.Pool;
  nodeId: string;
  /** The accounts; the node returns its lease of the first. */
  accounts: string[];
  sent: ControlMessage[];
  openLeases: () => Promise<Array<{ id: string; account_id: string }>>;
}

/**
 * Holds `lockSql` (one row lock) in its own transaction, starts the session's first lease grant
 * (onLive: a refresh), waits until its top-up waits on that lock, handles the node's stopping
 * return of its lease of `returned` meanwhile, then lets the top-up go on and waits for it.
 */
async function raceRefreshWithReturn(
  t: Test,
  setup: (pool: pg.Pool) => Promise<string[]>,
  lockSql: (nodeId: string, accounts: string[]) => [string, unknown[]],
  opts: { endStreamAfterAck?: boolean } = {},
): Promise<Race> {
  const db = await testDatabase(t);
  const pool = await migratedPool(t, db.url);
  const nodeId = await insertNode(pool);
  const accounts = await setup(pool);
  const returned = accounts[0]!;
  const lease = (await withTransaction(pool, (c) => topUpLease(c, nodeId, returned, POLICY, Date.now()))).lease!;
  const handler = createLeaseStreamHandler({ pool, logger: pino({ level: 'silent' }), policy: POLICY });
  const node = { nodeId, nodeName: 'n', sessionId: 'stopping-session' };
  const sent: ControlMessage[] = [];
  const send = (message: ControlMessage): boolean => {
    sent.push(message);
    return true;
  };
  t.teardown(() => handler.onEnded?.(node));

  const blocker = await pool.connect();
  let live: Promise<void> | undefined;
  try {
    await blocker.query('begin');
    const [sql, values] = lockSql(nodeId, accounts);
    await blocker.query(sql, values);
    live = handler.onLive!(node, send);
    await waitFor(async () => {
      const { rows } = await pool.query<{ n: number }>(
        "select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and pid <> $1",
        [(blocker as unknown as { processID: number }).processID],
      );
      return rows[0]!.n > 0;
    }, { what: "the refresh's top-up waiting on the held lock" });
    await handler.handle(node, {
      leaseReturn: { accountId: returned, leaseId: lease.id, spentMicros: 0n, returnedMicros: lease.granted, reservedMicros: 0n, returnedAt: BigInt(Date.now()), nodeStopping: true },
    }, send);
    t.ok(sent.some((m) => m.leaseReturnAck?.leaseId === lease.id), 'the return was confirmed while the refresh waited');
    // The node, every return confirmed, ends its stream before the refresh is done.
    if (opts.endStreamAfterAck === true) handler.onEnded?.(node);
  } finally {
    await blocker.query('rollback');
    blocker.release();
  }
  await live;
  const openLeases = async (): Promise<Array<{ id: string; account_id: string }>> =>
    (await pool.query<{ id: string; account_id: string }>("select id, account_id from credit_leases where node_id = $1 and state = 'open'", [nodeId])).rows;
  return { pool, nodeId, accounts, sent, openLeases };
}

/** The messages the node got after its last LeaseReturnAck: the moment it ends its stream. */
function grantsAfterLastAck(sent: ControlMessage[]): ControlMessage[] {
  const lastAck = sent.findLastIndex((m) => m.leaseReturnAck !== undefined);
  return sent.slice(lastAck + 1).filter((m) => m.leaseGrant !== undefined);
}

/** Accounts with an active key and credit; the node returns its lease of the first. */
function creditedAccounts(count: number): (pool: pg.Pool) => Promise<string[]> {
  return async (pool) => {
    const accounts: string[] = [];
    for (let i = 0; i < count; i += 1) {
      const account = await insertAccount(pool);
      await creditAccount(pool, account, 1_000_000n, null);
      accounts.push(account);
    }
    return accounts;
  };
}

// The top-up's first lock (its node row, shared): it waits there before it reads the leases. The
// key stays free: the return's ledger row checks its reference to the node.
const NODE_ROW = (nodeId: string): [string, unknown[]] => ['select 1 from nodes where id = $1 for no key update', [nodeId]];

t.test('a refresh whose top-up commits after a stopping return of the same account opens no lease that stays open', async (t) => {
  const race = await raceRefreshWithReturn(t, creditedAccounts(1), NODE_ROW);
  t.same(grantsAfterLastAck(race.sent), [], 'no grant reaches the node after its last confirmation');
  t.same(await race.openLeases(), [], 'the node holds no open lease');
  t.equal((await storedBalance(race.pool, race.accounts[0]!)).outstanding, 0n, 'and no credit is outstanding for it');
});

t.test('a refresh whose top-up of another account commits after a stopping return opens no lease that stays open', async (t) => {
  // The other account's balance row: the return (of the first account's lease) never waits on it.
  const race = await raceRefreshWithReturn(t, creditedAccounts(2), (_nodeId, accounts) => ['select 1 from account_balances where account_id = $1 for update', [accounts[1]]]);
  t.same(grantsAfterLastAck(race.sent), [], 'no grant reaches the node after its last confirmation');
  t.same(await race.openLeases(), [], 'the node holds no open lease');
  t.equal((await storedBalance(race.pool, race.accounts[0]!)).outstanding, 0n, "the returned account's credit is free");
  t.equal((await storedBalance(race.pool, race.accounts[1]!)).outstanding, 0n, "the other account's credit is not held for the stopped node");
});

t.test('a stopping node that ends its stream while the refresh still runs is granted nothing after it either', async (t) => {
  const race = await raceRefreshWithReturn(t, creditedAccounts(1), NODE_ROW, { endStreamAfterAck: true });
  t.same(grantsAfterLastAck(race.sent), [], 'no grant is sent');
  t.same(await race.openLeases(), [], 'the lease the refresh opened is closed');
  t.equal((await storedBalance(race.pool, race.accounts[0]!)).outstanding, 0n, 'and no credit is outstanding for the node');
});
