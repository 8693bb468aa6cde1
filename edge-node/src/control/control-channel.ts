/**
 * A part of the node that talks over the control session besides config and credentials: the
 * spool's backfill (record batches and their acks) and the credit leases (reports, grants,
 * returns). The session hands each channel the session's send function while it is established,
 * offers it every control message the session does not handle itself, and tells it when the
 * session ended; the channel keeps its own state across sessions (the connect loop reconnects).
 */
import type { ControlMessage, NodeMessage } from '../../../proto/src/index.js';

/** Sends on the live session; false when the session is gone (the message was not sent). */
export type ControlSend = (message: NodeMessage) => boolean;

export interface ControlChannel {
  readonly name: string;
  /** A session was established (after HelloAck). */
  onEstablished(send: ControlSend, session: { sessionId: string }): void;
  /** A message the session does not handle itself; true when this channel took it. */
  onMessage(message: ControlMessage): boolean;
  /** The session ended; `send` no longer works. */
  onEnded(): void;
  /**
   * The control plane cut the node off (ControlCutOff): told after the session's end, and again
   * after each later attempt refused so (the slow retries), until a session is established.
   */
  onCutOff?(cut: ControlCutOff): void;
}

/**
 * A refusal that leaves the node without a control plane until an operator acts, with nothing
 * newer to try: the node was deleted (`final`: it never comes back), or its last credential was
 * revoked (refusal-advice.ts CREDENTIAL_CUT_OFF_CODES) after the fallback to the previous one was refused too and credential.json holds no
 * newer one (refusal-advice.ts cutOffBy). What the node serves meanwhile may never be delivered:
 * a deleted node's never is, and a node re-enrolled on another host is that host's now.
 */
export interface ControlCutOff {
  code: string;
  message: string;
  final: boolean;
}
