/**
 * Credit leases over the control session (docs/billing.md, "Messages"): LeaseGrant in (the
 * lease's cumulative total, so repeats are harmless, and the spend the control plane knows of it,
 * which the lease counts at least), LeaseReport out for every open lease every
 * report interval and when a session starts, LeaseReturn out when the node shuts down while
 * connected (and again for a returned lease the control plane grants as if still open), and
 * LeaseReturnAck in: a stopping node waits (briefly) for those before its stream is ended.
 * When the control plane cuts the node off (deleted, or its last credential revoked) the node's
 * credit is withdrawn (credit-withdrawal.ts), and given back when a session is established again
 * (a lift the store could not write then is retried at each report interval). A deleted node also
 * refuses every caller request (ZN_ERR_NODE_DELETED): each report interval, every replica reads
 * the withdrawal the link holder recorded or lifted (LeaseBook.refreshDeletion).
 */
import { z } from 'zod';
import type { ControlMessage, LeaseGrant, LeaseReturnAck } from '../../../proto/src/index.js';
import type { ControlChannel, ControlCutOff, ControlSend } from '../control/control-channel.js';
import type { Logger } from '../logger.js';
import type { CreditLease } from './credit-lease.js';
import type { LeaseBook, ReportedFigures } from './lease-book.js';

/**
 * How long a stopping node waits for the control plane to confirm its lease returns before the
 * stream is ended (cancelling it discards a return still in flight). Bounded so a stop never hangs
 * on a control plane that stopped answering: a return it did not confirm is sent again when it
 * grants that lease on the next connect.
 */
export const RETURN_CONFIRM_WAIT_MS = 5_000;

/** Why waiting for the confirmations ended. */
type ConfirmEnd = 'confirmed' | 'session-ended' | 'timed-out' | 'stopped';

const safeMicros = z.bigint().min(0n).max(BigInt(Number.MAX_SAFE_INTEGER)).transform(Number);
const leaseGrantSchema = z.object({
  accountId: z.string().min(1).max(128),
  leaseId: z.string().min(1).max(128),
  amountMicros: safeMicros,
  expiresAt: safeMicros,
  // Absent from an older control plane: nothing known, the lease's own figures stand.
  knownSpentMicros: safeMicros.optional(),
});

export class CreditChannel implements ControlChannel {
  readonly name = 'credit-leases';
  private send: ControlSend | undefined;
  private readonly timer: NodeJS.Timeout;
  private readonly book: LeaseBook;
  private readonly logger: Logger;
  private readonly now: () => number;
  private readonly returnConfirmWaitMs: number;
  /** Lease ids whose LeaseReturn went out on this session and is not confirmed yet. */
  private readonly unconfirmed = new Set<string>();
  /** Ends the wait of a stopping node, when one is waiting. */
  private endWait: ((why: ConfirmEnd) => void) | undefined;
  /** The node is stopping: a lease granted from now on is handed straight back. */
  private stopping = false;

  constructor(book: LeaseBook, opts: { reportIntervalMs: number; logger: Logger; now?: () => number; returnConfirmWaitMs?: number }) {
    this.book = book;
    this.logger = opts.logger;
    this.now = opts.now ?? Date.now;
    this.returnConfirmWaitMs = opts.returnConfirmWaitMs ?? RETURN_CONFIRM_WAIT_MS;
    this.timer = setInterval(() => {
      // A lift the store could not write when the session came up (LeaseBook.resume) is retried here.
      this.book.retryLift();
      // A replica without the control link learns of its node's deletion, or of its lifting, here.
      this.book.refreshDeletion();
      this.reportAll();
    }, opts.reportIntervalMs);
    this.timer.unref();
  }

  onEstablished(send: ControlSend, session: { sessionId: string }): void {
    // Accepted again (a re-enrollment on this host): the leases serve again, in every replica.
    const lifted = this.book.resume();
    if (lifted !== undefined) {
      this.logger.info(
        { code: lifted.code, withdrawnAt: new Date(lifted.at).toISOString(), sessionId: session.sessionId },
        "a control session was established again: the node's credit is no longer withdrawn and priced requests are served",
      );
    }
    this.send = send;
    this.logger.debug({ sessionId: session.sessionId, leases: this.book.openLeases().length }, 'reporting credit leases');
    this.reportAll();
  }

  onMessage(message: ControlMessage): boolean {
    if (message.leaseReturnAck !== undefined) {
      this.onReturnAck(message.leaseReturnAck);
      return true;
    }
    if (message.leaseGrant === undefined) return false;
    this.onGrant(message.leaseGrant);
    return true;
  }

  onEnded(): void {
    this.send = undefined;
    // What was not confirmed is sent again when the next session grants those leases.
    this.endWait?.('session-ended');
    this.unconfirmed.clear();
  }

  /**
   * The control plane cut the node off: what it would serve from its leases could never be charged
   * (its records cannot be delivered), while the control plane already took that credit back (a
   * deletion) or leases it to the node's new host. So nothing more is reserved, in any replica;
   * a deleted node's leases are closed for good, a refused credential's suspended until a session
   * is established again. Logged once (a slow retry refused the same way says nothing new).
   */
  onCutOff(cut: ControlCutOff): void {
    const { before, closed, notClosed } = this.book.withdraw({ code: cut.code, message: cut.message, at: this.now() });
    if (before?.code === cut.code && closed.length === 0) return;
    const fields = {
      code: cut.code,
      reason: cut.message,
      ...(cut.final ? { closedLeaseIds: closed.map((l) => l.leaseId) } : { suspendedLeaseIds: this.book.openLeases().map((l) => l.leaseId) }),
      ...(notClosed.length > 0 ? { notClosedLeaseIds: notClosed.map((l) => l.leaseId) } : {}),
    };
    if (cut.final) {
      this.logger.error(
        fields,
        `the control plane refused this node for good (${cut.code}): its credit is withdrawn and its leases closed; every caller request is refused with ZN_ERR_NODE_DELETED until the node is re-enrolled`,
      );
    } else {
      this.logger.error(
        fields,
        `the control plane refused this node's credential (${cut.code}) and no newer one is saved: its credit is withdrawn and its leases suspended; priced requests are refused with ZN_ERR_CREDIT_WITHDRAWN until a control session is established again (a re-enrollment), requests that cost nothing are still served`,
      );
    }
  }

  /** Figures of every open lease to the control plane (which tops them up from them). */
  reportAll(): void {
    const leases = this.book.openLeases();
    if (leases.length === 0) return;
    const { atMs, figures } = this.book.reportedFigures(leases, this.now);
    for (const lease of leases) this.report(lease, figures.get(lease)!, atMs);
  }

  /**
   * Hands every open lease back when connected (shutdown) and resolves once the control plane
   * confirmed every return sent on this session, the session ended, or RETURN_CONFIRM_WAIT_MS
   * passed: only then may the stream be ended. Offline, the leases are kept: the restarted node
   * serves from them and reports them when it reconnects.
   */
  async returnAll(): Promise<void> {
    if (this.send === undefined) return;
    this.stopping = true;
    for (const lease of this.book.openLeases()) this.returnLease(lease);
    await this.waitForConfirmations();
  }

  private returnLease(lease: CreditLease): void {
    try {
      this.book.markReturned(lease);
    } catch (err) {
      // Not recorded as returned, so not sent: the lease stays open here and on disk, and the
      // control plane reclaims it (expiry, or the next grant) — never returned twice.
      this.logger.error({ err, leaseId: lease.leaseId }, 'the lease store could not record a lease return; the lease is kept');
      return;
    }
    this.sendReturn(lease);
  }

  private async waitForConfirmations(): Promise<void> {
    if (this.unconfirmed.size === 0 || this.endWait !== undefined) return;
    let left: string[] = [];
    const why = await new Promise<ConfirmEnd>((resolve) => {
      const timer = setTimeout(() => this.endWait?.('timed-out'), this.returnConfirmWaitMs);
      this.endWait = (end) => {
        clearTimeout(timer);
        left = [...this.unconfirmed];
        this.endWait = undefined;
        resolve(end);
      };
    });
    if (why === 'confirmed') {
      this.logger.info('the control plane confirmed the lease returns');
      return;
    }
    // The node holds them as returned; the control plane keeps them open until it grants them on
    // the next connect (answered with the return again) or they expire.
    this.logger.warn(
      { leaseIds: left, reason: why, waitedUpToMs: this.returnConfirmWaitMs },
      'the control plane did not confirm every lease return before the node stopped; they are sent again on the next connect',
    );
  }

  private onReturnAck(ack: LeaseReturnAck): void {
    this.unconfirmed.delete(ack.leaseId);
    if (this.unconfirmed.size === 0) this.endWait?.('confirmed');
  }

  private onGrant(raw: LeaseGrant): void {
    const parsed = leaseGrantSchema.safeParse(raw);
    if (!parsed.success) {
      this.logger.warn({ issues: parsed.error.issues.map((i) => i.path.join('.')) }, 'ignoring a malformed lease grant');
      return;
    }
    const grant = parsed.data;
    try {
      const outcome = this.book.grant({
        accountId: grant.accountId, leaseId: grant.leaseId, amountMicros: grant.amountMicros, expiresAt: grant.expiresAt, knownSpentMicros: grant.knownSpentMicros,
      });
      if (outcome === 'applied' && this.stopping) {
        // Granted while the node waits for its returns to be confirmed (a refresh after an earlier
        // lease of the account closed): kept, it would stay outstanding for a node that is gone.
        const lease = this.book.lease(grant.leaseId);
        if (lease?.state === 'open') this.returnLease(lease);
      } else if (outcome === 'already-returned') {
        // The first return was lost (or this is a repeat grant meanwhile): a stop waits for this one too.
        this.sendReturn(this.book.lease(grant.leaseId)!);
      }
    } catch (err) {
      this.logger.warn({ err, leaseId: grant.leaseId }, 'ignoring a lease grant that does not fit the lease');
    }
  }

  /** The figures and their moment come from one read (LeaseBook.reportedFigures), as the control plane's cutoffs need. */
  private report(lease: CreditLease, figures: ReportedFigures, atMs: number): void {
    this.send?.({
      leaseReport: {
        accountId: lease.accountId,
        leaseId: lease.leaseId,
        spentMicros: BigInt(figures.spent),
        reservedMicros: BigInt(figures.reserved),
        remainingMicros: BigInt(figures.unused),
        reportedAt: BigInt(atMs),
      },
    });
  }

  private sendReturn(lease: CreditLease): void {
    // What is not handed back counts as spent (in-flight reservations included: conservative);
    // the reserved part and the moment go along, read together, so the control plane can release
    // each in-flight request's reserved − cost as its record settles (docs/billing.md). A request
    // that finished counts as spent at its cost though its charge is still to come.
    const { atMs, figures } = this.book.reportedFigures([lease], this.now);
    const { granted, reserved, unused: returned } = figures.get(lease)!;
    const sent = this.send?.({
      leaseReturn: {
        accountId: lease.accountId,
        leaseId: lease.leaseId,
        spentMicros: BigInt(granted - returned),
        returnedMicros: BigInt(returned),
        reservedMicros: BigInt(reserved),
        returnedAt: BigInt(atMs),
        // Shutting down: the control plane then opens no new lease for this node on this session.
        ...(this.stopping ? { nodeStopping: true } : {}),
      },
    });
    if (sent === true) this.unconfirmed.add(lease.leaseId);
  }

  stop(): void {
    clearInterval(this.timer);
    this.endWait?.('stopped');
  }
}
