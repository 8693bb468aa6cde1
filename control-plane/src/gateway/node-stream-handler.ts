/**
 * A part of the control plane that serves node messages beyond hello, heartbeats, config acks and
 * credential acks: record batches (records/), lease reports and returns (billing/). A handler
 * claims payload kinds; the session hands it each such message in arrival order, one at a time
 * (so a slow handler slows the node down through HTTP/2 flow control), with a send function
 * for replies (acks, grants). Handlers validate what they are given; throwing
 * NodeMessageInvalid ends the session with MESSAGE_INVALID, NodeDeletedError (nodes/node-repository.ts:
 * the node was found deleted) with NODE_DELETED.
 */
import type pg from 'pg';
import type pino from 'pino';
import type { ControlMessage, NodeMessage } from '../../../proto/src/index.js';
import type { Settings } from '../settings.js';
import type { PayloadKind } from './node-messages.js';

export interface StreamNode {
  nodeId: string;
  nodeName: string;
  sessionId: string;
}

/** Writes to the node's stream; false when the session is over (nothing was sent). */
export type NodeSend = (message: ControlMessage) => boolean;

export interface NodeStreamHandler {
  readonly name: string;
  readonly payloads: readonly PayloadKind[];
  /** The session went live (HelloAck sent): e.g. grant leases. */
  onLive?(node: StreamNode, send: NodeSend): Promise<void>;
  /** One message carrying one of `payloads`. */
  handle(node: StreamNode, message: NodeMessage, send: NodeSend): Promise<void>;
  /** The session ended, however. */
  onEnded?(node: StreamNode): void;
  /**
   * Something the live sessions depend on changed on some replica (a credit top-up, a config
   * change): act soon rather than at the next interval. Called for all sessions at once.
   */
  wake?(): void;
}

/** What a handler found wrong with a message; the session ends with MESSAGE_INVALID and this text. */
export class NodeMessageInvalid extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'NodeMessageInvalid';
  }
}

export interface HandlerDeps {
  pool: pg.Pool;
  logger: pino.Logger;
  settings: Settings;
}
