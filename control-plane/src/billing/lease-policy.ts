/**
 * How big a node's credit lease of an account is (docs/billing.md, "Lease size"): each lease is
 * topped up to min(cap, share × (what the account has free + what the lease holds)), so one node
 * never takes the whole balance and a large balance is not parked on one node. The operator's part
 * (cap, share, refresh) comes from settings.ts, so a bad value is refused with the other settings,
 * before the database is touched.
 */

export interface LeasePolicy {
  /** Most a lease may hold for new reservations, micro-units. */
  capMicros: bigint;
  /** Share of the available balance one lease may hold, parts per million (250000 = 0.25). */
  sharePpm: bigint;
  /** A lease is valid this long after its last grant. */
  ttlMs: number;
  /** How often a live node's leases are reconsidered (new accounts, top-ups), ms. */
  refreshMs: number;
  /**
   * How long a closed lease keeps what its node still held (reservations of in-flight requests,
   * spend whose records are not ingested) for late records, ms after it closed; then the rest goes
   * back to the account. Default: ttlMs (a node offline longer must re-enroll anyway).
   */
  holdMs?: number;
}

export const DEFAULT_LEASE_POLICY: LeasePolicy = {
  capMicros: 100_000_000n, // 100 currency units
  sharePpm: 250_000n,
  ttlMs: 30 * 24 * 3600 * 1000, // ZENOVA_CREDENTIAL_VALIDITY_SECONDS's default; leasePolicyOf sets the configured one
  refreshMs: 5_000,
};

/** What the operator sets (ZENOVA_LEASE_CAP_MICROS, ZENOVA_LEASE_SHARE, ZENOVA_LEASE_REFRESH_MS). */
export type LeaseSettings = Pick<LeasePolicy, 'capMicros' | 'sharePpm' | 'refreshMs'>;

/**
 * The gateway's policy: the operator's settings over the defaults of the rest. A lease lives as
 * long as a node credential (ZENOVA_CREDENTIAL_VALIDITY_SECONDS): a node offline longer than that
 * must re-enroll, so what its leases hold can go back to the accounts then, and not before.
 */
export function leasePolicyOf(settings: LeaseSettings, credentialValidityMs: number): LeasePolicy {
  return { ...DEFAULT_LEASE_POLICY, capMicros: settings.capMicros, sharePpm: settings.sharePpm, refreshMs: settings.refreshMs, ttlMs: credentialValidityMs };
}

/**
 * The headroom a lease should have: min(cap, share × (free + held)), where `free` is the
 * account's balance not covered by any lease and `held` what this lease still holds.
 */
export function leaseTarget(policy: LeasePolicy, freeMicros: bigint, heldMicros: bigint): bigint {
  const base = freeMicros + heldMicros;
  if (base <= 0n) return 0n;
  const byShare = (base * policy.sharePpm) / 1_000_000n;
  return byShare < policy.capMicros ? byShare : policy.capMicros;
}
