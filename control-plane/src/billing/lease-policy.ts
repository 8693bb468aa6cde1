/**
 * How big a node's credit lease of an account is (docs/billing.md, "Lease size"): each lease is
 * topped up to min(cap, share × (what the account has free + what the lease holds)), so one node
 * never takes the whole balance and a large balance is not parked on one node. Read from the
 * environment with safe defaults; a bad value is refused at start-up.
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
  ttlMs: 30 * 24 * 3600 * 1000, // the node credential's validity: a node offline longer must re-enroll anyway
  refreshMs: 5_000,
};

/** "0.25" → 250000 ppm, exactly (no floats): 0 < share ≤ 1, at most 6 decimals. */
export function parseSharePpm(text: string): bigint {
  const m = /^(0|1)(?:\.(\d{1,6}))?$/.exec(text.trim());
  if (!m) throw new Error('ZENOVA_LEASE_SHARE must be a decimal in (0, 1] with at most 6 decimals, e.g. 0.25');
  const ppm = BigInt(m[1]!) * 1_000_000n + BigInt((m[2] ?? '').padEnd(6, '0'));
  if (ppm <= 0n || ppm > 1_000_000n) throw new Error('ZENOVA_LEASE_SHARE must be a decimal in (0, 1] with at most 6 decimals, e.g. 0.25');
  return ppm;
}

/** ZENOVA_LEASE_CAP_MICROS, ZENOVA_LEASE_SHARE, ZENOVA_LEASE_REFRESH_MS. */
export function leasePolicyFromEnv(env: NodeJS.ProcessEnv): LeasePolicy {
  const policy = { ...DEFAULT_LEASE_POLICY };
  const cap = env.ZENOVA_LEASE_CAP_MICROS;
  if (cap !== undefined && cap !== '') {
    if (!/^\d{1,15}$/.test(cap) || BigInt(cap) < 1n) throw new Error('ZENOVA_LEASE_CAP_MICROS must be a positive integer of micro-units (at most 15 digits)');
    policy.capMicros = BigInt(cap);
  }
  const share = env.ZENOVA_LEASE_SHARE;
  if (share !== undefined && share !== '') policy.sharePpm = parseSharePpm(share);
  const refresh = env.ZENOVA_LEASE_REFRESH_MS;
  if (refresh !== undefined && refresh !== '') {
    if (!/^\d{1,9}$/.test(refresh) || Number(refresh) < 100) throw new Error('ZENOVA_LEASE_REFRESH_MS must be an integer of at least 100');
    policy.refreshMs = Number(refresh);
  }
  return policy;
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
