// A stopping node's lease returns (CreditChannel.returnAll) end only once the control plane
// confirmed them (LeaseReturnAck), the session ended, or a short bound passed: ending the stream
// sooner discards a return still in flight (docs/billing.md, "When leases are granted, topped up
// and returned").
import t from 'tap';
import type { ControlMessage, NodeMessage } from '../../../proto/src/index.js';
import { CreditChannel } from '../../../edge-node/src/billing/credit-channel.js';
import { LeaseBook } from '../../../edge-node/src/billing/lease-book.js';
import { memoryLeaseStore } from '../../../edge-node/src/billing/lease-store.js';
import type { Logger } from '../../../edge-node/src/logger.js';

const NOW = 1_700_000_000_000;

function capturingLogger(): { logger: Logger; lines: Array<{ level: string; msg: string; fields: Record<string, unknown> }> } {
  const lines: Array<{ level: string; msg: string; fields: Record<string, unknown> }> = [];
  // pino's two forms: (fields, msg) and (msg).
  const at = (level: string) => (first: Record<string, unknown> | string, msg?: string) =>
    lines.push(typeof first === 'string' ? { level, msg: first, fields: {} } : { level, msg: msg ?? '', fields: first });
  const logger = { info: at('info'), warn: at('warn'), error: at('error'), debug: at('debug') } as Record<string, unknown>;
  logger.child = () => logger;
  return { logger: logger as unknown as Logger, lines };
}

function grant(accountId: string, leaseId: string): ControlMessage {
  return { leaseGrant: { accountId, leaseId, amountMicros: 1_000n, expiresAt: BigInt(NOW + 60_000) } };
}

/** A channel on a live session holding two open leases; what it sends is kept. */
function connected(returnConfirmWaitMs?: number): { channel: CreditChannel; book: LeaseBook; sent: NodeMessage[]; lines: ReturnType<typeof capturingLogger>['lines'] } {
  const { logger, lines } = capturingLogger();
  const book = new LeaseBook(memoryLeaseStore);
  const channel = new CreditChannel(book, { reportIntervalMs: 60_000, logger, now: () => NOW, ...(returnConfirmWaitMs !== undefined ? { returnConfirmWaitMs } : {}) });
  const sent: NodeMessage[] = [];
  channel.onEstablished((m) => {
    sent.push(m);
    return true;
  }, { sessionId: 's1' });
  channel.onMessage(grant('acct-1', 'lease-1'));
  channel.onMessage(grant('acct-2', 'lease-2'));
  sent.length = 0;
  return { channel, book, sent, lines };
}

/** Whether `promise` has settled, once everything already queued has run. */
async function settled(promise: Promise<unknown>): Promise<boolean> {
  let done = false;
  void promise.then(() => (done = true));
  await new Promise((resolve) => setImmediate(resolve));
  return done;
}

t.test('a stop\'s lease returns end only once the control plane confirmed every one of them', async (t) => {
  const { channel, sent, lines } = connected(60_000);
  t.teardown(() => channel.stop());
  const returning = channel.returnAll();
  t.same(sent.map((m) => m.leaseReturn?.leaseId), ['lease-1', 'lease-2'], 'both leases are handed back');
  t.equal(await settled(returning), false, 'the stream must stay up while the returns are unconfirmed');
  channel.onMessage({ leaseReturnAck: { leaseId: 'lease-1' } });
  channel.onMessage({ leaseReturnAck: { leaseId: 'lease-9' } });
  t.equal(await settled(returning), false, 'one confirmed, and one the node did not wait for: still waiting');
  channel.onMessage({ leaseReturnAck: { leaseId: 'lease-2' } });
  t.equal(await settled(returning), true, 'all confirmed: the stop goes on at once');
  t.ok(lines.some((l) => l.level === 'info' && l.msg === 'the control plane confirmed the lease returns'));
  t.notOk(lines.some((l) => l.level === 'warn'));
});

t.test('a lease granted while a stop waits is handed straight back, and the stop waits for that return too', async (t) => {
  const { channel, book, sent } = connected(60_000);
  t.teardown(() => channel.stop());
  const returning = channel.returnAll();
  channel.onMessage({ leaseReturnAck: { leaseId: 'lease-1' } });
  // The control plane closed lease-1 and, refreshing the still-live session, opened the account's next lease.
  channel.onMessage(grant('acct-1', 'lease-3'));
  t.same(sent.at(-1)?.leaseReturn?.leaseId, 'lease-3', 'the new lease goes back at once');
  t.equal(book.leaseOf('acct-1'), undefined, 'nothing is reserved from it');
  channel.onMessage({ leaseReturnAck: { leaseId: 'lease-2' } });
  t.equal(await settled(returning), false, 'its return is not confirmed yet');
  channel.onMessage({ leaseReturnAck: { leaseId: 'lease-3' } });
  t.equal(await settled(returning), true);
});

t.test('a control plane that never confirms holds a stop up only until the bound', async (t) => {
  const { channel, lines } = connected(50);
  t.teardown(() => channel.stop());
  const started = performance.now();
  await channel.returnAll();
  t.ok(performance.now() - started >= 45, 'it waited for the confirmations');
  const warn = lines.find((l) => l.level === 'warn');
  t.equal(warn?.msg, 'the control plane did not confirm every lease return before the node stopped; they are sent again on the next connect');
  t.same(warn?.fields.leaseIds, ['lease-1', 'lease-2']);
  t.equal(warn?.fields.reason, 'timed-out');
});

t.test('a session that ends while a stop waits ends the wait; the next session\'s grant gets the return again, and a stop then waits for that one', async (t) => {
  const { channel, book, sent, lines } = connected(60_000);
  t.teardown(() => channel.stop());
  const returning = channel.returnAll();
  channel.onEnded();
  t.equal(await settled(returning), true, 'no one is left to confirm: the wait ends');
  t.equal(lines.find((l) => l.level === 'warn')?.fields.reason, 'session-ended');
  t.equal(book.lease('lease-1')?.state, 'returned', 'the node holds the leases as returned');

  // Reconnected: the control plane still has lease-1 open and grants it, lease-2's return had landed.
  channel.onEstablished((m) => {
    sent.push(m);
    return true;
  }, { sessionId: 's2' });
  sent.length = 0;
  channel.onMessage(grant('acct-1', 'lease-1'));
  t.same(sent.map((m) => m.leaseReturn?.leaseId), ['lease-1'], 'the return is sent again');
  const again = channel.returnAll();
  t.equal(await settled(again), false, 'a stop now waits for the resent return too');
  channel.onMessage({ leaseReturnAck: { leaseId: 'lease-1' } });
  t.equal(await settled(again), true);
});

t.test('offline, a stop neither sends nor waits', async (t) => {
  const { logger } = capturingLogger();
  const channel = new CreditChannel(new LeaseBook(memoryLeaseStore), { reportIntervalMs: 60_000, logger, returnConfirmWaitMs: 60_000 });
  t.teardown(() => channel.stop());
  channel.onMessage(grant('acct-1', 'lease-1'));
  t.equal(await settled(channel.returnAll()), true);
});
