/** The handlers every gateway session uses (node-stream-handler.ts), one line each. */
import type { HandlerDeps, NodeStreamHandler } from './node-stream-handler.js';
import { recordBatchHandler } from '../records/record-batch-handler.js';
import { createLeaseStreamHandler } from '../billing/lease-stream-handler.js';
import { leasePolicyOf } from '../billing/lease-policy.js';

export function createNodeStreamHandlers(deps: HandlerDeps): NodeStreamHandler[] {
  void deps;
  return [
    recordBatchHandler(deps), // records/: RecordBatch → idempotent ingestion, RecordBatchAck.
    createLeaseStreamHandler({ ...deps, policy: leasePolicyOf(deps.settings.leases, deps.settings.nodes.credentialValidityMs) }), // billing/: LeaseReport / LeaseReturn, LeaseGrant on live.
  ];
}
