/**
 * Credit leases on the node control stream (docs/billing.md, "Messages"): when a node's session
 * goes live it is granted (or re-sent) a lease per account it serves; while live, its leases are
 * reconsidered every refresh interval (new accounts, top-ups) and soon after a credit top-up or a
 * config change on any replica (`wake`); a LeaseReport records the node's
 * figures and tops that lease up (a report below the spend already known is logged at error
 * level: the node's lease book went back; the grant sent after it, which carries the known spend,
 * goes out even when unchanged; figures past the lease's grant are bounded by it and logged at
 * warn level); a LeaseReturn closes the lease, gives the rest back and is
 * acknowledged (LeaseReturnAck) once that is committed. A return that says the node is stopping
 * wins over a refresh under way: a lease that refresh opens is closed at once, never sent.
 */
import type pg from 'pg';
import type pino from 'pino';
import { z } from 'zod';
import type { NodeMessage } from '../../../proto/src/index.js';
import { NodeMessageInvalid } from '../gateway/node-stream-handler.js';
import type { NodeSend, NodeStreamHandler, StreamNode } from '../gateway/node-stream-handler.js';
import { withTransaction } from '../nodes/with-transaction.js';
import { accountsToLease, leaseGrantMessage, recordLeaseReport, returnLease, topUpLease } from './credit-leases.js';
import type { NodeFiguresBeyondGrant, SpendWentBack } from './credit-leases.js';
import { LeaseRefresher } from './lease-refresher.js';
import type { LeasePolicy } from './lease-policy.js';

const micros = z.bigint().min(0n, 'must not be negative').max(BigInt(Number.MAX_SAFE_INTEGER), 'is out of range');
const id = z.string().min(1, 'is required').max(128);
const reportSchema = z.object({ accountId: id, leaseId: id, spentMicros: micros, reservedMicros: micros, remainingMicros: micros, reportedAt: micros });
// reservedMicros and returnedAt are additive fields: an older node leaves them 0.
const returnSchema = z.object({ accountId: id, leaseId: id, spentMicros: micros, returnedMicros: micros, reservedMicros: micros.default(0n), returnedAt: micros.default(0n), nodeStopping: z.boolean().optional() });

export interface LeaseHandlerDeps {
  pool: pg.Pool;
  logger: pino.Logger;
  policy: LeasePolicy;
  now?: () => number;
}

function describe(error: z.ZodError): string {
  return error.issues.slice(0, 3).map((i) => `${i.path.join('.')}: ${i.message}`).join('; ');
}

/** One session's lease state. A refresh holds it from its start, so an end meanwhile does not reset it. */
interface SessionLeases {
  /** Grants sent per lease (granted total and expiry), so the refresh only sends what changed. */
  sent: Map<string, string>;
  /** The node is shutting down (LeaseReturn.node_stopping): granted nothing more. */
  stopping: boolean;
  /** Leases whose reported figures passed their grant, already logged on this session (a node reports every few seconds). */
  beyondGrantLogged: Set<string>;
}

export function createLeaseStreamHandler(deps: LeaseHandlerDeps): NodeStreamHandler {
  const { policy } = deps;
  const now = deps.now ?? Date.now;
  const log = deps.logger.child({ component: 'billing' });
  const refreshers = new Map<string, LeaseRefresher>();
  const sessions = new Map<string, SessionLeases>();
  const sessionOf = (sessionId: string): SessionLeases => {
    let session = sessions.get(sessionId);
    if (session === undefined) {
      session = { sent: new Map(), stopping: false, beyondGrantLogged: new Set() };
      sessions.set(sessionId, session);
    }
    return session;
  };
  /** Accounts found overcommitted, with the excess last logged. */
  const overcommitLogged = new Map<string, string>();

  async function grantOne(node: StreamNode, session: SessionLeases, accountId: string, send: NodeSend, force: boolean): Promise<void> {
    // A node that said it is shutting down gets no new credit on that session (LeaseReturn.node_stopping).
    if (session.stopping) return;
    const result = await withTransaction(deps.pool, (client) => topUpLease(client, node.nodeId, accountId, policy, now()));
    // The invariant Σ outstanding ≤ balance is broken (a late cost no lease held, a balance below
    // zero): never silent. Logged when the excess changes, not on every refresh of every node.
    const excess = result.overcommittedMicros.toString();
    if (result.overcommittedMicros > 0n && overcommitLogged.get(accountId) !== excess) {
      log.error({ accountId, overcommittedMicros: excess }, 'account\'s leases hold more than its balance');
    }
    if (result.overcommittedMicros > 0n) overcommitLogged.set(accountId, excess);
    else overcommitLogged.delete(accountId);
    if (result.lease === undefined) return;
    if (session.stopping) {
      // The node's stopping return came while this top-up ran (it may have closed the lease this one
      // replaced; other accounts' returns take other locks): a grant sent now could come after the
      // node's last confirmation and be lost with its stream, the lease open until it expires. One
      // this call opened the node never heard of: closed at once. One it knew it returns itself.
      if (result.opened) await closeUnsent(node, accountId, result.lease.id);
      return;
    }
    const state = `${result.lease.granted}@${result.lease.expiresAt}`;
    if (!force && session.sent.get(result.lease.id) === state) return;
    if (send({ leaseGrant: leaseGrantMessage(result.lease) })) session.sent.set(result.lease.id, state);
    if (result.addedMicros > 0n) {
      log.info({ nodeId: node.nodeId, accountId, leaseId: result.lease.id, addedMicros: result.addedMicros.toString(), grantedMicros: result.lease.granted.toString() }, 'lease granted');
    }
  }

  /**
   * A report below the spend already known: the node's lease book went back, and it could spend the
   * difference again; the grant that follows carries the known spend, which the node takes (a node
   * of an earlier release ignores it). Once per lease until its figures agree
   * again (recordLeaseReport decides, from the stored figures, so every replica agrees).
   */
  function logSpendWentBack(node: StreamNode, accountId: string, leaseId: string, w: SpendWentBack): void {
    log.error(
      {
        nodeId: node.nodeId, node: node.nodeName, accountId, leaseId,
        reportedSpentMicros: w.reportedSpentMicros.toString(),
        previousReportedSpentMicros: w.previousReportedSpentMicros?.toString() ?? null,
        settledSpentMicros: w.settledSpentMicros.toString(),
        knownSpentMicros: w.knownSpentMicros.toString(),
        behindMicros: (w.knownSpentMicros - w.reportedSpentMicros).toString(),
      },
      'a node reported less spend on a lease than the control plane already knows: its lease book went back (restored from an older copy, lost, or left on another host) and could spend the difference again; the known spend is kept and sent to the node with the lease\'s grant (a node of an earlier release ignores it and may spend the difference again, charged from its records beyond what the account has), and the lease is topped up only once the node\'s own figures fall below its target',
    );
  }

  /**
   * A LeaseReport or LeaseReturn whose figures passed the lease's grant: taken bounded by it
   * (recordLeaseReport, returnLease). Never silent: a broken or hostile node, or an honest one whose
   * costs overshot their reservations (then it passes once a top-up raises the grant again).
   */
  function logBeyondGrant(node: StreamNode, accountId: string, leaseId: string, from: 'LeaseReport' | 'LeaseReturn', f: NodeFiguresBeyondGrant): void {
    log.warn(
      {
        nodeId: node.nodeId, node: node.nodeName, accountId, leaseId, from,
        grantedMicros: f.grantedMicros.toString(), spentMicros: f.spentMicros.toString(), reservedMicros: f.reservedMicros.toString(),
        keptSpentMicros: f.keptSpentMicros.toString(), keptReservedMicros: f.keptReservedMicros.toString(),
      },
      'a node\'s lease figures passed what the lease was granted: its spend is taken at most at the grant, its reservations at most at what that leaves',
    );
  }

  /** A lease opened for a node that is stopping and never told of it: all of it goes back. */
  async function closeUnsent(node: StreamNode, accountId: string, leaseId: string): Promise<void> {
    const given = await withTransaction(deps.pool, (client) => returnLease(client, node.nodeId, accountId, leaseId, 0n));
    log.info({ nodeId: node.nodeId, accountId, leaseId, returnedMicros: given?.toString() }, 'lease opened while the node was stopping closed at once');
  }

  async function grantAll(node: StreamNode, send: NodeSend, force: boolean): Promise<void> {
    // Taken once: the session's end during this refresh must not make it forget the node is stopping.
    const session = sessionOf(node.sessionId);
    // One transaction per account: an account's lock is never held while another is taken.
    for (const accountId of await accountsToLease(deps.pool, node.nodeId, now(), policy.holdMs ?? policy.ttlMs)) await grantOne(node, session, accountId, send, force);
  }

  return {
    name: 'credit-leases',
    payloads: ['leaseReport', 'leaseReturn'],

    async onLive(node, send) {
      // The refresher exists before the first await, so an onEnded arriving meanwhile always stops it.
      const refresher = new LeaseRefresher(
        () => grantAll(node, send, false),
        policy.refreshMs,
        (err) => log.warn({ err, nodeId: node.nodeId }, 'lease refresh failed; retrying at the next interval'),
      );
      refreshers.set(node.sessionId, refresher);
      try {
        await grantAll(node, send, true);
      } finally {
        refresher.firstDone();
      }
    },

    wake() {
      for (const refresher of refreshers.values()) refresher.wake();
    },

    async handle(node, message: NodeMessage, send) {
      if (message.leaseReport !== undefined) {
        const parsed = reportSchema.safeParse(message.leaseReport);
        if (!parsed.success) throw new NodeMessageInvalid(describe(parsed.error));
        const r = parsed.data;
        const outcome = await withTransaction(deps.pool, (client) => recordLeaseReport(client, node.nodeId, r));
        if (outcome === undefined) {
          log.debug({ nodeId: node.nodeId, leaseId: r.leaseId }, 'report on a lease that is not open for this node; ignored');
          return;
        }
        if (outcome.wentBack !== undefined) logSpendWentBack(node, r.accountId, r.leaseId, outcome.wentBack);
        const session = sessionOf(node.sessionId);
        // Once per lease and session: an honest node's overshoot lasts until its next top-up.
        if (outcome.beyondGrant !== undefined && !session.beyondGrantLogged.has(r.leaseId)) {
          session.beyondGrantLogged.add(r.leaseId);
          logBeyondGrant(node, r.accountId, r.leaseId, 'LeaseReport', outcome.beyondGrant);
        }
        // A node behind the known spend is sent the grant (which carries it) even when unchanged.
        await grantOne(node, session, r.accountId, send, outcome.nodeBehind);
        return;
      }
      if (message.leaseReturn !== undefined) {
        const parsed = returnSchema.safeParse(message.leaseReturn);
        if (!parsed.success) throw new NodeMessageInvalid(describe(parsed.error));
        const r = parsed.data;
        if (r.nodeStopping === true) {
          sessionOf(node.sessionId).stopping = true;
          refreshers.get(node.sessionId)?.stop();
        }
        let beyondGrant: NodeFiguresBeyondGrant | undefined;
        const given = await withTransaction(deps.pool, (client) =>
          returnLease(client, node.nodeId, r.accountId, r.leaseId, r.spentMicros, r.reservedMicros, r.returnedAt > 0n ? Number(r.returnedAt) : null, (f) => { beyondGrant = f; }));
        if (beyondGrant !== undefined) logBeyondGrant(node, r.accountId, r.leaseId, 'LeaseReturn', beyondGrant);
        if (given === undefined) {
          log.debug({ nodeId: node.nodeId, leaseId: r.leaseId }, 'return of a lease that is not open for this node; ignored');
        } else if (given !== r.returnedMicros) {
          log.info({ nodeId: node.nodeId, leaseId: r.leaseId, nodeReturnedMicros: r.returnedMicros.toString(), returnedMicros: given.toString() }, 'lease returned (amount differs from the node\'s: settled spend counts)');
        } else {
          log.info({ nodeId: node.nodeId, leaseId: r.leaseId, returnedMicros: given.toString() }, 'lease returned');
        }
        // Committed (or nothing to do, which a resend would not change): a stopping node may now end
        // its stream, which it waits for rather than cut a return still in flight.
        send({ leaseReturnAck: { leaseId: r.leaseId } });
      }
    },

    onEnded(node) {
      refreshers.get(node.sessionId)?.stop();
      refreshers.delete(node.sessionId);
      sessions.delete(node.sessionId);
    },
  };
}
