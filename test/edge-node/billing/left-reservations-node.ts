// What the left-reservations tests share: the services `serve` opens on a state dir (spool first,
// then the credit leases), a lease granted over the credit channel as the control plane sends it,
// and a priced request context whose reservation is exactly `micros` (an embeddings request at 1
// micro-unit per input token: no output term).
import Database from 'better-sqlite3';
import type { ControlMessage } from '../../../proto/src/index.js';
import { LEASE_DB_FILE } from '../../../edge-node/src/billing/lease-store.js';
import { DEFAULT_CREDIT_POLICY } from '../../../edge-node/src/billing/credit-policy.js';
import { openNodeServices } from '../../../edge-node/src/cli/node-services.js';
import type { NodeServices } from '../../../edge-node/src/cli/node-services.js';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../../edge-node/src/config/runtime-config.js';
import type { Logger } from '../../../edge-node/src/logger.js';
import type { PipelineContext } from '../../../edge-node/src/pipeline/context.js';
import { ACCOUNT_ID, testBundle } from '../config-fixtures.js';

export const NODE_ID = 'node-left-reservations';
export const LEASE_ID = 'lease-left-1';
export const GRANTED = 1_000_000;
const PRICE = { model: 'emb', inputMicrosPerToken: 1, outputMicrosPerToken: 0, requestMicros: 0 };

/** The services of a node starting on `dir`, as `serve` opens them (one of several replicas: the tests start one beside another). */
export async function openNode(dir: string, logger: Logger): Promise<NodeServices> {
  const holder = ConfigHolder.ready(fromBundle(testBundle({ nodeId: NODE_ID, version: 1, upstreamUrl: 'http://127.0.0.1:9/v1', keys: [] })));
  return openNodeServices({ stateDir: dir, nodeId: NODE_ID, holder, logger, env: { ZENOVA_NODE_REPLICAS: '2' }, creditPolicy: DEFAULT_CREDIT_POLICY, spoolSynchronous: 'normal', adminListen: undefined });
}

/** The control plane's LeaseGrant for LEASE_ID, through the node's credit channel. */
export function grantLease(services: NodeServices): void {
  const grant: ControlMessage = {
    leaseGrant: { accountId: ACCOUNT_ID, leaseId: LEASE_ID, amountMicros: BigInt(GRANTED), expiresAt: BigInt(Date.now() + 3_600_000) },
  };
  const taken = services.channels.some((c) => c.onMessage(grant));
  if (!taken) throw new Error('no channel took the lease grant');
}

/** A priced request whose worst case (its reservation) is `micros`. */
export function pricedRequest(requestId: string, micros: number): PipelineContext {
  return {
    requestId,
    api: 'embeddings',
    model: 'emb',
    maxOutputTokens: null,
    estimatedInputTokens: micros,
    forwardBody: { model: 'emb', input: 'x' },
    config: { prices: new Map([['emb', PRICE]]), toolServers: new Map() },
    key: { id: 'key-1', accountId: ACCOUNT_ID },
    clock: { now: () => Date.now(), monotonic: () => 0 },
    usage: { inputTokens: 0, outputTokens: 0, estimated: false },
    cost: { reservedMicros: 0, costMicros: 0, leaseId: null, priced: false },
    cleanups: [] as Array<() => void>,
  } as unknown as PipelineContext;
}

/** The lease row and the reservation rows as credit-leases.sqlite holds them, read on a connection of its own. */
export function leaseBookOnDisk(dir: string): { spent: number; reserved: number; reservations: Array<{ requestId: string; amount: number; forwarded: number }> } {
  const db = new Database(`${dir}/${LEASE_DB_FILE}`, { readonly: true });
  try {
    const lease = db.prepare('select spent, reserved from leases where lease_id = ?').get(LEASE_ID) as { spent: number; reserved: number };
    const reservations = db
      .prepare('select request_id as requestId, amount, forwarded from reservations order by request_id')
      .all() as Array<{ requestId: string; amount: number; forwarded: number }>;
    return { ...lease, reservations };
  } finally {
    db.close();
  }
}
