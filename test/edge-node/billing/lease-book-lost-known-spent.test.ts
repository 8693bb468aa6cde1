// A node whose lease book (credit-leases.sqlite) was deleted while it was stopped, its lease still
// open on the control plane, cannot spend again after its restart what it had spent from that lease:
// the grant sent again carries the spend the control plane knows (LeaseGrant.known_spent_micros:
// here the node's own last report), and the node counts it. Real parts: the services `serve` opens
// on a state dir, the credit channel's report and grant messages, the request pipeline's credit
// check, real SQLite files (docs/billing.md, "Persistence and crashes").
import { rmSync } from 'node:fs';
import path from 'node:path';
import { pino } from 'pino';
import t from 'tap';
import type { ControlMessage, LeaseReport, NodeMessage } from '../../../proto/src/index.js';
import { LEASE_DB_FILE } from '../../../edge-node/src/billing/lease-store.js';
import type { NodeServices } from '../../../edge-node/src/cli/node-services.js';
import { ACCOUNT_ID } from '../config-fixtures.js';
import { tempStateDir } from '../spool/spool-helpers.js';
import { GRANTED, LEASE_ID, openNode, pricedRequest } from './left-reservations-node.js';

const logger = pino({ level: 'silent' });
const EXPIRES = BigInt(Date.now() + 3_600_000);

function creditChannel(services: NodeServices): NodeServices['channels'][number] {
  const channel = services.channels.find((c) => c.name === 'credit-leases');
  if (channel === undefined) throw new Error('no credit channel');
  return channel;
}

/** The control plane's LeaseGrant of the lease, as it sends it again on connect. */
function grant(services: NodeServices, knownSpentMicros: bigint): void {
  const message: ControlMessage = { leaseGrant: { accountId: ACCOUNT_ID, leaseId: LEASE_ID, amountMicros: BigInt(GRANTED), expiresAt: EXPIRES, knownSpentMicros } };
  if (!creditChannel(services).onMessage(message)) throw new Error('the credit channel did not take the grant');
}

/** Whether a request reserving `micros` is admitted (its reservation then given back). */
function admits(services: NodeServices, micros: number): boolean {
  const ctx = pricedRequest(`req-probe-${micros}`, micros);
  const refused = services.pipeline.credit.preauthorise(ctx);
  for (const cleanup of ctx.cleanups) cleanup();
  return refused === undefined;
}

t.test('a node whose lease book was deleted while stopped cannot spend the lease\'s spent credit again after restart', async (t) => {
  const dir = tempStateDir(t);
  const first = await openNode(dir, logger);
  grant(first, 0n);
  // A priced request reserves and is charged 600 000 (1 µ per input token).
  const ctx = pricedRequest('req-spent', 600_000);
  t.equal(first.pipeline.credit.preauthorise(ctx), undefined, 'the request is admitted');
  ctx.served = { upstream: 'u', model: 'emb' };
  ctx.usage.inputTokens = 600_000;
  first.pipeline.credit.settle(ctx);
  first.pipeline.credit.recordCommitted(ctx);
  // The node reports it when a session starts: the control plane now knows 600 000 spent.
  const sent: NodeMessage[] = [];
  creditChannel(first).onEstablished((m) => {
    sent.push(m);
    return true;
  }, { sessionId: 'before' });
  const report = sent.find((m): m is NodeMessage & { leaseReport: LeaseReport } => m.leaseReport?.leaseId === LEASE_ID)?.leaseReport;
  t.equal(report?.spentMicros, 600_000n, 'the report carries the spend');
  // Stopped without returning its lease (no session at the stop), and its book deleted.
  await first.close();
  for (const suffix of ['', '-wal', '-shm']) rmSync(path.join(dir, `${LEASE_DB_FILE}${suffix}`), { force: true });

  const second = await openNode(dir, logger);
  t.teardown(() => second.close());
  t.notOk(admits(second, 1), 'the restarted node knows no lease: nothing is served before the grant');
  grant(second, report!.spentMicros);
  t.notOk(admits(second, GRANTED - 600_000 + 1), 'more than granted − the known spend is refused');
  t.ok(admits(second, GRANTED - 600_000), 'what was never spent is served');
});
