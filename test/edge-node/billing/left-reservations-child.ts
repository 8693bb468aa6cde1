// Stands in for node-edge in left-reservations.test.ts: opens the services `serve` opens on the state
// dir (argv[2]), takes a lease, and leaves each kind of reservation a kill -9 can leave, through the
// real pipeline calls. With `crash-state` (argv[3]): one settled request; one whose open row is
// durable but that was not forwarded yet; one forwarded whose record was committed, acknowledged and
// deleted while its settlement was never written (a lease store write that failed); and one whose
// open row never committed (the preauthorise stage ran, the crash came before the group commit).
// With `live-replica`: only the last kind, as a replica still serving it. With `recorded-uncharged`:
// one request charged after its record committed, and three whose final record committed but whose
// charge never came (the kill -9 between the two): one that cost less than it reserved, one that cost
// more, one whose upstream failed (cost 0). Writes `ready` to stdout, then serves on until the test
// kills it with SIGKILL.
import type { SpoolStore } from '../../../edge-node/src/spool/spool-store.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import { record } from '../spool/spool-helpers.js';
import { ACCOUNT_ID } from '../config-fixtures.js';
import { grantLease, LEASE_ID, NODE_ID, openNode, pricedRequest } from './left-reservations-node.js';

const [dir, mode] = [process.argv[2] ?? '', process.argv[3] ?? 'crash-state'];
const services = await openNode(dir, createLogger({ level: 'silent' }));
const { credit } = services.pipeline;
const spool = services.pipeline.spool as SpoolStore;

function reserve(requestId: string, micros: number): ReturnType<typeof pricedRequest> {
  const ctx = pricedRequest(requestId, micros);
  const refused = credit.preauthorise(ctx);
  if (refused !== undefined) throw new Error(`${requestId} refused: ${refused.error.code}`);
  return ctx;
}

async function openDurable(ctx: ReturnType<typeof pricedRequest>): Promise<void> {
  await spool.open({ requestId: ctx.requestId, receivedAt: Date.now(), keyId: 'key-1', accountId: ACCOUNT_ID, model: 'emb', reservedMicros: ctx.cost.reservedMicros, leaseId: LEASE_ID, api: 'embeddings' });
}

type FinalRecord = Parameters<SpoolStore['finalise']>[0];

function recordOf(ctx: ReturnType<typeof pricedRequest>, extra: Partial<FinalRecord> = {}): FinalRecord {
  return record(ctx.requestId, { nodeId: NODE_ID, accountId: ACCOUNT_ID, model: 'emb', api: 'embeddings', cost: { reservedMicros: ctx.cost.reservedMicros, costMicros: ctx.cost.costMicros, leaseId: LEASE_ID, priced: true }, ...extra });
}

/** The upstream answered `tokens` input tokens (cost = tokens micro-units). */
function served(ctx: ReturnType<typeof pricedRequest>, tokens: number): void {
  ctx.served = { upstream: 'demo', model: 'demo-emb' };
  ctx.usage = { inputTokens: tokens, outputTokens: 0, estimated: false };
}

grantLease(services);
if (mode === 'crash-state') {
  const settled = reserve('req-settled', 50_000);
  await openDurable(settled);
  if (credit.beforeForward(settled) !== undefined) throw new Error('req-settled not forwarded');
  served(settled, 20_000);
  credit.settle(settled);
  await spool.finalise(recordOf(settled));
  credit.recordCommitted(settled);

  await openDurable(reserve('req-open', 70_000));

  const delivered = reserve('req-delivered', 90_000);
  await openDurable(delivered);
  if (credit.beforeForward(delivered) !== undefined) throw new Error('req-delivered not forwarded');
  served(delivered, 30_000);
  credit.settle(delivered);
  await spool.finalise(recordOf(delivered));
  // No recordCommitted: the settlement's write failed. The control plane acknowledged the record.
  const row = spool.backlogAfter(0, 100).find((r) => r.requestId === 'req-delivered');
  if (row === undefined) throw new Error('req-delivered has no record');
  spool.deleteAcknowledged(row.sequence, row.sequence);
  await spool.finalise(record('req-flush', { nodeId: NODE_ID, accountId: null, cost: { reservedMicros: 0, costMicros: 0, leaseId: null, priced: false } }));
  if (spool.backlogAfter(0, 100).some((r) => r.requestId === 'req-delivered')) throw new Error('req-delivered was not deleted');
}
/**
 * A request through the pipeline's billing calls up to its final record's commit; `tokens` undefined:
 * the upstream failed (nothing served). With `charged` the lease is then charged (recordCommitted).
 */
async function recorded(requestId: string, micros: number, tokens: number | undefined, charged: boolean): Promise<void> {
  const ctx = reserve(requestId, micros);
  await openDurable(ctx);
  if (credit.beforeForward(ctx) !== undefined) throw new Error(`${requestId} not forwarded`);
  if (tokens !== undefined) served(ctx, tokens);
  credit.settle(ctx);
  const failed: Partial<FinalRecord> = { status: 'failed', httpStatus: 502, errorCode: 'ZN_ERR_UPSTREAM_ERROR' };
  await spool.finalise(recordOf(ctx, tokens === undefined ? failed : {}));
  if (charged) credit.recordCommitted(ctx);
}

if (mode === 'recorded-uncharged') {
  await recorded('req-charged', 50_000, 20_000, true);
  // The process dies between each record's commit and the lease's charge.
  await recorded('req-recorded', 60_000, 25_000, false);
  await recorded('req-recorded-over', 10_000, 15_000, false);
  await recorded('req-recorded-failed', 40_000, undefined, false);
} else {
  // The preauthorise stage ran; the open row's group commit never did.
  reserve(mode === 'crash-state' ? 'req-unopened' : 'req-live-unopened', 110_000);
}
process.stdout.write('ready\n');
setInterval(() => undefined, 60_000);
