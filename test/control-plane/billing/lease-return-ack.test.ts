// The lease handler confirms every LeaseReturn (LeaseReturnAck) once it is committed, on real
// PostgreSQL: a stopping node waits for that before it ends its stream, so the confirmation must
// come only after the lease is closed, and also for a return that has nothing left to do.
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
import { migratedPool } from '../nodes-harness.js';
import { insertAccount, insertNode, storedBalance } from './billing-fixtures.js';

const HOUR = 3_600_000;
const POLICY: LeasePolicy = { capMicros: 1_000_000_000_000n, sharePpm: 250_000n, ttlMs: HOUR, refreshMs: HOUR };

/** A migrated database with one credited account (with an active key) and one node, and the lease handler. */
async function leaseSetup(t: Test): Promise<{ pool: pg.Pool; account: string; nodeId: string; handler: ReturnType<typeof createLeaseStreamHandler> }> {
  const db = await testDatabase(t);
  const pool = await migratedPool(t, db.url);
  const account = await insertAccount(pool);
  const nodeId = await insertNode(pool);
  await creditAccount(pool, account, 1_000_000n, null);
  return { pool, account, nodeId, handler: createLeaseStreamHandler({ pool, logger: pino({ level: 'silent' }), policy: POLICY }) };
}

t.test('the lease handler confirms a LeaseReturn once the lease is closed, and confirms a repeated one too', async (t) => {
  const { pool, account, nodeId, handler } = await leaseSetup(t);
  const lease = (await withTransaction(pool, (c) => topUpLease(c, nodeId, account, POLICY, Date.now()))).lease!;
  const node = { nodeId, nodeName: 'n', sessionId: 'ack-session' };
  const leaseReturn = { accountId: account, leaseId: lease.id, spentMicros: 0n, returnedMicros: lease.granted, reservedMicros: 0n, returnedAt: BigInt(Date.now()) };

  const sent: ControlMessage[] = [];
  // What the lease looked like to another connection the moment the confirmation was sent.
  let stateAtConfirmation: Promise<string> | undefined;
  const send = (message: ControlMessage): boolean => {
    sent.push(message);
    if (message.leaseReturnAck !== undefined) {
      stateAtConfirmation ??= pool.query<{ state: string }>('select state from credit_leases where id = $1', [lease.id]).then((r) => r.rows[0]!.state);
    }
    return true;
  };

  await handler.handle(node, { leaseReturn }, send);
  t.same(sent, [{ leaseReturnAck: { leaseId: lease.id } }], 'the return is confirmed, naming its lease');
  t.equal(await stateAtConfirmation, 'returned', 'the lease was closed (committed) when the confirmation went out');
  t.equal((await storedBalance(pool, account)).outstanding, 0n, 'and its credit is free again');

  // The node sends it again (its first confirmation was lost): nothing changes, and it is confirmed.
  await handler.handle(node, { leaseReturn }, send);
  t.same(sent.at(-1), { leaseReturnAck: { leaseId: lease.id } });
  t.equal(sent.length, 2);
  t.equal((await storedBalance(pool, account)).outstanding, 0n);
});

t.test('after a return that says the node is stopping, the session is granted no new lease; without it, it is', async (t) => {
  const { pool, account, nodeId, handler } = await leaseSetup(t);
  // The lease refresh (here onLive's first grant) after the node's lease was returned.
  const grantsAfterReturn = async (sessionId: string, nodeStopping: boolean): Promise<ControlMessage[]> => {
    const node = { nodeId, nodeName: 'n', sessionId };
    const lease = (await withTransaction(pool, (c) => topUpLease(c, nodeId, account, POLICY, Date.now()))).lease!;
    const sent: ControlMessage[] = [];
    const send = (message: ControlMessage): boolean => {
      sent.push(message);
      return true;
    };
    const leaseReturn = { accountId: account, leaseId: lease.id, spentMicros: 0n, returnedMicros: lease.granted, reservedMicros: 0n, returnedAt: BigInt(Date.now()), ...(nodeStopping ? { nodeStopping: true } : {}) };
    await handler.handle(node, { leaseReturn }, send);
    await handler.onLive?.(node, send);
    handler.onEnded?.(node);
    return sent.filter((m) => m.leaseGrant !== undefined);
  };
  t.equal((await grantsAfterReturn('stopping-session', true)).length, 0, 'a stopping node gets no new lease');
  t.equal((await storedBalance(pool, account)).outstanding, 0n, 'and no credit is held for it');
  t.equal((await grantsAfterReturn('live-session', false)).length, 1, 'a node that is not stopping (a return re-sent on reconnect) is granted a new lease');
});
