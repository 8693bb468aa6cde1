/** The handlers every gateway session uses (node-stream-handler.ts), one line each. */
import type { HandlerDeps, NodeStreamHandler } from './node-stream-handler.js';

export function createNodeStreamHandlers(deps: HandlerDeps): NodeStreamHandler[] {
  void deps;
  return [
    // records/: RecordBatch → idempotent ingestion, RecordBatchAck.
    // billing/: LeaseReport / LeaseReturn, LeaseGrant on live.
  ];
}
