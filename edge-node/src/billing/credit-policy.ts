/**
 * Node-side billing policy (docs/billing.md): the output allowance assumed when a request names no
 * `max_tokens`, and how often lease figures are reported. `serve` reads them from the environment
 * with the other node settings (cli/serve-settings.ts), before anything is opened.
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
