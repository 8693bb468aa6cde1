// The node's credit leases (owner: billing module). Stub: billing off.
import type { ConfigHolder } from '../config/config-holder.js';
import type { ControlChannel } from '../control/control-channel.js';
import type { Logger } from '../logger.js';
import { noCredit } from './credit-leases.js';
import type { CreditLeases } from './credit-leases.js';

export interface NodeCredit {
  credit: CreditLeases;
  /** Lease grants, reports and returns over the control session. */
  channel?: ControlChannel;
  close(): Promise<void>;
}

export interface NodeCreditOptions {
  /** undefined in stand-alone mode (no billing). */
  stateDir: string | undefined;
  nodeId: string;
  holder: ConfigHolder;
  logger: Logger;
  env: NodeJS.ProcessEnv;
}

export async function createNodeCredit(opts: NodeCreditOptions): Promise<NodeCredit> {
  void opts;
  return { credit: noCredit, close: async () => undefined };
}
