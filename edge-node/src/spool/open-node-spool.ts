// Opens the node's spool in its state dir (owner: spool module). Stub: no spool yet.
import type { ConfigHolder } from '../config/config-holder.js';
import type { ControlChannel } from '../control/control-channel.js';
import type { Logger } from '../logger.js';
import { noSpool } from './request-spool.js';
import type { RequestSpool } from './request-spool.js';

export interface NodeSpool {
  spool: RequestSpool;
  /** Backfill over the control session. */
  channel?: ControlChannel;
  /** For heartbeats and status. */
  figures(): { spoolBytes: number; backfillBacklog: number };
  close(): Promise<void>;
}

export interface OpenNodeSpoolOptions {
  /** undefined in stand-alone mode. */
  stateDir: string | undefined;
  nodeId: string;
  holder: ConfigHolder;
  logger: Logger;
  env: NodeJS.ProcessEnv;
}

export async function openNodeSpool(opts: OpenNodeSpoolOptions): Promise<NodeSpool> {
  void opts;
  return { spool: noSpool, figures: () => ({ spoolBytes: 0, backfillBacklog: 0 }), close: async () => undefined };
}
