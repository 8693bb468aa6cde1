/**
 * Node events for every control-plane replica: a PostgreSQL NOTIFY on one channel, sent in the
 * caller's transaction so listeners hear of a change only once it is committed (and never of one
 * that rolled back). The gateway LISTENs and ends the node's live sessions on the events that say
 * so; `upgrade-started` only tells (and is logged by) every replica, it ends nothing: the updater
 * restarts node-edge itself, and a failed upgrade leaves the old release serving.
 */
import { z } from 'zod';
import type { Queryable } from './with-transaction.js';

export const NODE_EVENTS_CHANNEL = 'zenova_node_events';

/** The events that end the node's live control session. */
export const SESSION_ENDING_EVENT_TYPES = ['node-deleted', 'credentials-revoked'] as const;
export type SessionEndingEventType = (typeof SESSION_ENDING_EVENT_TYPES)[number];

export type NodeEventType = SessionEndingEventType | 'upgrade-started';

// Bounded like the facts they come from (enrollment.ts), so a payload stays far below NOTIFY's 8000 bytes.
const nodeEventSchema = z.discriminatedUnion('type', [
  z.object({ type: z.enum(SESSION_ENDING_EVENT_TYPES), nodeId: z.string() }),
  /** An upgrade token was redeemed: `hostname` is installing `toVersion` over `fromVersion`. */
  z.object({
    type: z.literal('upgrade-started'),
    nodeId: z.string(),
    fromVersion: z.string().max(64),
    toVersion: z.string().max(64),
    hostname: z.string().max(253),
  }),
]);

export type NodeEvent = z.infer<typeof nodeEventSchema>;

export async function notifyNodeEvent(client: Queryable, event: NodeEvent): Promise<void> {
  // Field by field: the payload carries what the schema names and nothing a caller's object adds.
  const payload = event.type === 'upgrade-started'
    ? { type: event.type, nodeId: event.nodeId, fromVersion: event.fromVersion, toVersion: event.toVersion, hostname: event.hostname }
    : { type: event.type, nodeId: event.nodeId };
  await client.query('select pg_notify($1, $2)', [NODE_EVENTS_CHANNEL, JSON.stringify(payload)]);
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
  const parsed = nodeEventSchema.safeParse(value);
  return parsed.success ? parsed.data : undefined;
}
