/**
 * The live control sessions of one gateway instance, by node id. A node has at most one: a newer
 * session replaces the older (the node reconnected, or two hosts share one identity). Node events
 * (deleted, credentials revoked) end the node's session here, and are remembered for a while so a
 * session that authenticated just before the event, but went live just after it, is caught too.
 */
import type { RefusalCode } from '../../../proto/src/index.js';
import type { NodeEvent, SessionEndingEventType } from '../nodes/node-events.js';

/** What the registry needs of a session. */
export interface RegisteredSession {
  readonly nodeId: string;
  readonly sessionId: string;
  /** Sends a Refusal and ends the call; idempotent. */
  end(code: RefusalCode, message: string): void;
}

// A session goes live within its hello deadline of authenticating; events older than this cannot
// concern a session still on its way.
const EVENT_MEMORY_MS = 5 * 60_000;

export function refusalForEvent(type: SessionEndingEventType): { code: RefusalCode; message: string } {
  return type === 'node-deleted'
    ? { code: 'NODE_DELETED', message: 'the node was deleted in the control plane; its session is closed' }
    : { code: 'CREDENTIAL_REVOKED', message: "the node's credentials were revoked; its session is closed" };
}

export class SessionRegistry {
  private readonly live = new Map<string, RegisteredSession>();
  private readonly recentEvents = new Map<string, { seq: number; type: SessionEndingEventType; at: number }>();
  private seq = 0;

  get size(): number {
    return this.live.size;
  }

  sessions(): RegisteredSession[] {
    return [...this.live.values()];
  }

  /** A mark to pass to `eventSince` later: taken before a session checks its credential. */
  eventCursor(): number {
    return this.seq;
  }

  /** The latest event for `nodeId` that arrived after `cursor`, if any. */
  eventSince(nodeId: string, cursor: number): SessionEndingEventType | undefined {
    const event = this.recentEvents.get(nodeId);
    return event !== undefined && event.seq > cursor ? event.type : undefined;
  }

  /** Makes `session` the node's live session, ending the one it replaces. */
  register(session: RegisteredSession): void {
    const previous = this.live.get(session.nodeId);
    this.live.set(session.nodeId, session);
    if (previous !== undefined && previous !== session) {
      previous.end('SESSION_REPLACED', `a newer connection of this node (session ${session.sessionId}) replaced this one`);
    }
  }

  /** Forgets `session` if it is still the node's live one (a replaced session must not evict its successor). */
  unregister(session: RegisteredSession): void {
    if (this.live.get(session.nodeId) === session) this.live.delete(session.nodeId);
  }

  /** Applies a node event: remembers it and ends the node's live session, if it is one that does. */
  dispatch(event: NodeEvent, now = Date.now()): void {
    // An upgrade starting ends nothing: the updater restarts node-edge itself.
    if (event.type === 'upgrade-started') return;
    this.seq += 1;
    // Delete first so the map stays in arrival order, which is what pruning relies on.
    this.recentEvents.delete(event.nodeId);
    this.recentEvents.set(event.nodeId, { seq: this.seq, type: event.type, at: now });
    for (const [nodeId, remembered] of this.recentEvents) {
      if (now - remembered.at < EVENT_MEMORY_MS) break;
      this.recentEvents.delete(nodeId);
    }
    const session = this.live.get(event.nodeId);
    if (session !== undefined) {
      const { code, message } = refusalForEvent(event.type);
      session.end(code, message);
    }
  }
}
