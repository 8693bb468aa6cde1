// The node's credit leases as `serve` opens them: the lease book on disk, the pipeline's
// CreditLeases over it, and its control channel (docs/billing.md).
import type { ConfigHolder } from '../config/config-holder.js';
import type { ControlChannel } from '../control/control-channel.js';
import type { Logger } from '../logger.js';
import { CreditChannel } from './credit-channel.js';
import { noCredit } from './credit-leases.js';
import type { CreditLeases } from './credit-leases.js';
import type { CreditPolicy } from './credit-policy.js';
import { LeaseBook } from './lease-book.js';
import { LeaseCredit } from './lease-credit.js';
import type { ReservationEvidence } from './left-reservations.js';
import { openLeaseStore } from './lease-store.js';

export interface NodeCredit {
  credit: CreditLeases;
  /** Lease grants, reports and returns over the control session. */
  channel?: ControlChannel;
  /**
   * Gives the unspent part of every lease back over the live session (node stopping); resolves once
   * the control plane confirmed it, the session ended or a short bound passed.
   */
  returnLeases?(): Promise<void>;
  close(): Promise<void>;
}

export interface NodeCreditOptions {
  /** undefined in stand-alone mode (no billing). */
  stateDir: string | undefined;
  nodeId: string;
  holder: ConfigHolder;
  logger: Logger;
  policy: CreditPolicy;
  /**
   * The spool's answers about earlier runs (opened first, its interrupted rows recovered): reservations
   * of requests that never reached it are released at open. Without it all count as spent.
   */
  evidence?: ReservationEvidence | undefined;
}

export async function createNodeCredit(opts: NodeCreditOptions): Promise<NodeCredit> {
  // Stand-alone nodes have local keys only (no accounts): nothing is ever priced to an account.
  if (opts.stateDir === undefined) return { credit: noCredit, close: async () => undefined };
  const { policy } = opts;
  const logger = opts.logger.child({ component: 'credit' });
  const store = openLeaseStore(opts.stateDir, { nodeId: opts.nodeId, logger, owner: opts.evidence?.owner });
  let book: LeaseBook;
  try {
    book = new LeaseBook(store, { evidence: opts.evidence, logger });
  } catch (err) {
    store.close();
    throw err;
  }
  const channel = new CreditChannel(book, { reportIntervalMs: policy.reportIntervalMs, logger });
  return {
    credit: new LeaseCredit(book, policy, logger),
    channel,
    returnLeases: () => channel.returnAll(),
    close: async () => {
      channel.stop();
      store.close();
    },
  };
}
