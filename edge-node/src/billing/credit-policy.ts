/**
 * Node-side billing policy (docs/billing.md): the output allowance assumed when a request names no
 * `max_tokens`, and how often lease figures are reported. Read from the environment with safe
 * defaults; a bad value is refused at start-up rather than guessed at.
 */

export interface CreditPolicy {
  /** Output tokens reserved for a request that sets no max_tokens. */
  defaultMaxOutputTokens: number;
  /** How often each lease is reported to the control plane (LeaseReport), ms. */
  reportIntervalMs: number;
}

export const DEFAULT_CREDIT_POLICY: CreditPolicy = {
  defaultMaxOutputTokens: 4096,
  reportIntervalMs: 5_000,
};

function positiveInt(env: NodeJS.ProcessEnv, name: string, fallback: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (!/^\d{1,10}$/.test(raw) || Number(raw) < 1 || Number(raw) > max) {
    throw new Error(`${name} must be an integer from 1 to ${max}`);
  }
  return Number(raw);
}

/** ZENOVA_DEFAULT_MAX_OUTPUT_TOKENS, ZENOVA_LEASE_REPORT_MS. */
export function creditPolicyFromEnv(env: NodeJS.ProcessEnv): CreditPolicy {
  return {
    defaultMaxOutputTokens: positiveInt(env, 'ZENOVA_DEFAULT_MAX_OUTPUT_TOKENS', DEFAULT_CREDIT_POLICY.defaultMaxOutputTokens, 1_000_000),
    reportIntervalMs: positiveInt(env, 'ZENOVA_LEASE_REPORT_MS', DEFAULT_CREDIT_POLICY.reportIntervalMs, 3_600_000),
  };
}
