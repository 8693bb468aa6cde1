/**
 * All credit leases of this node: at most one open lease per account (the one reservations come
 * from), plus returned ones remembered so a LeaseReturn lost in transit can be sent again. Grants
 * arrive from the control plane (credit-channel.ts); every change is written to the store.
 */
import { CreditLease } from './credit-lease.js';
import type { LeaseSnapshot } from './credit-lease.js';
import type { LeaseStore } from './lease-store.js';

export interface GrantInput {
  accountId: string;
  leaseId: string;
  /** Cumulative granted total of the lease, micro-units. */
  amountMicros: number;
  expiresAt: number;
}

export type GrantOutcome =
  /** Applied (new lease, top-up, or a repeat that changed nothing). */
  | 'applied'
  /** For a lease this node already returned: the control plane missed the return. */
  | 'already-returned';

export class LeaseBook {
  private readonly open = new Map<string, CreditLease>();
  private readonly byId = new Map<string, CreditLease>();
  private readonly store: LeaseStore;

  constructor(store: LeaseStore) {
    this.store = store;
    for (const snap of store.load()) this.adopt(new CreditLease(snap, this.persist));
  }

  /** The account's open lease, if any. */
  leaseOf(accountId: string): CreditLease | undefined {
    return this.open.get(accountId);
  }

  lease(leaseId: string): CreditLease | undefined {
    return this.byId.get(leaseId);
  }

  openLeases(): CreditLease[] {
    return [...this.open.values()];
  }

  returnedLeases(): CreditLease[] {
    return [...this.byId.values()].filter((l) => l.state === 'returned');
  }

  grant(input: GrantInput): GrantOutcome {
    const known = this.byId.get(input.leaseId);
    if (known !== undefined) {
      if (known.accountId !== input.accountId) throw new Error(`lease ${input.leaseId} belongs to another account`);
      if (known.state === 'returned') return 'already-returned';
      known.grant(input.amountMicros, input.expiresAt);
      return 'applied';
    }
    // A new lease for an account replaces its previous open one for new reservations; requests
    // holding the old one still settle against it (they keep their own reservation).
    const lease = new CreditLease(
      { accountId: input.accountId, leaseId: input.leaseId, granted: input.amountMicros, spent: 0, expiresAt: input.expiresAt, state: 'open' },
      this.persist,
    );
    // Written first: a lease the store could not record is not served from (the grant is sent again).
    this.persist(lease.snapshot());
    this.adopt(lease);
    return 'applied';
  }

  private adopt(lease: CreditLease): void {
    this.byId.set(lease.leaseId, lease);
    if (lease.state === 'open') this.open.set(lease.accountId, lease);
  }

  /** Marks the lease returned (no more reservations); returns what is handed back. */
  markReturned(lease: CreditLease): number {
    const returned = lease.markReturned();
    if (this.open.get(lease.accountId) === lease) this.open.delete(lease.accountId);
    return returned;
  }

  private readonly persist = (next: LeaseSnapshot): void => {
    this.store.save(next);
  };

  snapshots(): LeaseSnapshot[] {
    return [...this.byId.values()].map((l) => l.snapshot());
  }
}
