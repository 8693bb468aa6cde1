/**
 * Node events for every control-plane replica: a PostgreSQL NOTIFY on one channel, sent in the
 * caller's transaction so listeners hear of a change only once it is committed (and never of one
 * that rolled back). The gateway LISTENs and ends the node's live sessions.
 */
import type { Queryable } from './with-transaction.js';

export const NODE_EVENTS_CHANNEL = 'zenova_node_events';

export type NodeEventType = 'node-deleted' | 'credentials-revoked';

export interface NodeEvent {
  type: NodeEventType;
  nodeId: string;
}

const EVENT_TYPES: readonly NodeEventType[] = ['node-deleted', 'credentials-revoked'];

export async function notifyNodeEvent(client: Queryable, event: NodeEvent): Promise<void> {
  const payload = JSON.stringify({ type: event.type, nodeId: event.nodeId });
  await client.query('select pg_notify($1, $2)', [NODE_EVENTS_CHANNEL, payload]);
}

/** The event in a NOTIFY payload, or undefined when the payload is not one of ours. */
export function parseNodeEvent(payload: string | undefined): NodeEvent | undefined {
  if (payload === undefined) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(payload);
  } catch {
    return undefined;
  }
  if (typeof value !== 'object' || value === null) return undefined;
  const { type, nodeId } = value as { type?: unknown; nodeId?: unknown };
  if (typeof nodeId !== 'string' || !EVENT_TYPES.includes(type as NodeEventType)) return undefined;
  return { type: type as NodeEventType, nodeId };
}
