/**
 * Credit leases over the control session (docs/billing.md, "Messages"): LeaseGrant in (the
 * lease's cumulative total, so repeats are harmless), LeaseReport out for every open lease every
 * report interval and when a session starts, LeaseReturn out when the node shuts down while
 * connected (and again for a returned lease the control plane grants as if still open).
 */
import { z } from 'zod';
import type { ControlMessage, LeaseGrant } from '../../../proto/src/index.js';
import type { ControlChannel, ControlSend } from '../control/control-channel.js';
import type { Logger } from '../logger.js';
import type { CreditLease } from './credit-lease.js';
import type { LeaseBook } from './lease-book.js';

const safeMicros = z.bigint().min(0n).max(BigInt(Number.MAX_SAFE_INTEGER)).transform(Number);
const leaseGrantSchema = z.object({
  accountId: z.string().min(1).max(128),
  leaseId: z.string().min(1).max(128),
  amountMicros: safeMicros,
  expiresAt: safeMicros,
});

export class CreditChannel implements ControlChannel {
  readonly name = 'credit-leases';
  private send: ControlSend | undefined;
  private readonly timer: NodeJS.Timeout;
  private readonly book: LeaseBook;
  private readonly logger: Logger;
  private readonly now: () => number;

  constructor(book: LeaseBook, opts: { reportIntervalMs: number; logger: Logger; now?: () => number }) {
    this.book = book;
    this.logger = opts.logger;
    this.now = opts.now ?? Date.now;
    this.timer = setInterval(() => this.reportAll(), opts.reportIntervalMs);
    this.timer.unref();
  }

  onEstablished(send: ControlSend, session: { sessionId: string }): void {
    this.send = send;
    this.logger.debug({ sessionId: session.sessionId, leases: this.book.openLeases().length }, 'reporting credit leases');
    this.reportAll();
  }

  onMessage(message: ControlMessage): boolean {
    if (message.leaseGrant === undefined) return false;
    this.onGrant(message.leaseGrant);
    return true;
  }

  onEnded(): void {
    this.send = undefined;
  }

  /** Figures of every open lease to the control plane (which tops them up from them). */
  reportAll(): void {
    for (const lease of this.book.openLeases()) this.report(lease);
  }

  /**
   * Hands every open lease back when connected (shutdown). Offline, the leases are kept: the
   * restarted node serves from them and reports them when it reconnects.
   */
  returnAll(): void {
    if (this.send === undefined) return;
    for (const lease of this.book.openLeases()) {
      let returned: number;
      try {
        returned = this.book.markReturned(lease);
      } catch (err) {
        // Not recorded as returned, so not sent: the lease stays open here and on disk, and the
        // control plane reclaims it (expiry, or the next grant) — never returned twice.
        this.logger.error({ err, leaseId: lease.leaseId }, 'the lease store could not record a lease return; the lease is kept');
        continue;
      }
      this.sendReturn(lease, returned);
    }
  }

  private onGrant(raw: LeaseGrant): void {
    const parsed = leaseGrantSchema.safeParse(raw);
    if (!parsed.success) {
      this.logger.warn({ issues: parsed.error.issues.map((i) => i.path.join('.')) }, 'ignoring a malformed lease grant');
      return;
    }
    const grant = parsed.data;
    try {
      const outcome = this.book.grant({ accountId: grant.accountId, leaseId: grant.leaseId, amountMicros: grant.amountMicros, expiresAt: grant.expiresAt });
      if (outcome === 'already-returned') {
        const lease = this.book.lease(grant.leaseId)!;
        this.sendReturn(lease, Math.max(0, lease.granted - lease.spent - lease.reserved));
      }
    } catch (err) {
      this.logger.warn({ err, leaseId: grant.leaseId }, 'ignoring a lease grant that does not fit the lease');
    }
  }

  private report(lease: CreditLease): void {
    this.send?.({
      leaseReport: {
        accountId: lease.accountId,
        leaseId: lease.leaseId,
        spentMicros: BigInt(lease.spent),
        reservedMicros: BigInt(lease.reserved),
        remainingMicros: BigInt(Math.max(0, lease.available)),
        reportedAt: BigInt(this.now()),
      },
    });
  }

  private sendReturn(lease: CreditLease, returned: number): void {
    // What is not handed back counts as spent (in-flight reservations included: conservative);
    // the reserved part and the moment go along, taken in the same step, so the control plane can
    // release each in-flight request's reserved − cost as its record settles (docs/billing.md).
    const spent = lease.granted - returned;
    this.send?.({
      leaseReturn: {
        accountId: lease.accountId,
        leaseId: lease.leaseId,
        spentMicros: BigInt(spent),
        returnedMicros: BigInt(returned),
        reservedMicros: BigInt(lease.reserved),
        returnedAt: BigInt(this.now()),
      },
    });
  }

  stop(): void {
    clearInterval(this.timer);
  }
}
