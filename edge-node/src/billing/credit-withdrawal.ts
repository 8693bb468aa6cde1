/**
 * The node's credit withdrawn because the control plane refused the node (docs/billing.md, "Credit
 * withdrawn"): deleted (NODE_DELETED), or its last credential revoked with no newer one saved (a
 * re-enrollment on another host: CREDENTIAL_REVOKED). What it would serve from its leases then could
 * never be charged — its records cannot be delivered — while the control plane has already taken
 * that credit back (deletion) or leased it again to the node's new host. So no reservation is made
 * while a withdrawal stands: kept in credit-leases.sqlite, so every replica of the node refuses too,
 * and lifted when a control session is established again (a same-host re-enrollment).
 *
 * A deletion (NODE_DELETED) ends more than the credit: the node no longer serves at all. Its cached
 * config and API keys are the deleted node's, and nothing it records can be delivered, so every caller
 * request is refused with ZN_ERR_NODE_DELETED (pipeline/stages/identify.ts) until it is re-enrolled.
 */

export interface CreditWithdrawal {
  /** The control plane's refusal code (NODE_DELETED or CREDENTIAL_REVOKED). */
  code: string;
  /** The control plane's refusal message, for the log (never shown to callers). */
  message: string;
  /** Unix ms (node clock) it was recorded. */
  at: number;
}

/** NODE_DELETED: the node never comes back, its leases are closed for good. */
export function withdrawnForGood(withdrawal: Pick<CreditWithdrawal, 'code'>): boolean {
  return withdrawal.code === 'NODE_DELETED';
}

/** What a priced request is told (ZN_ERR_CREDIT_WITHDRAWN): the refusal's code only, not its text. */
export function withdrawnMessage(withdrawal: CreditWithdrawal): string {
  if (withdrawnForGood(withdrawal)) {
    return (
      `This node's credit was withdrawn: the control plane refused the node (${withdrawal.code}: it was deleted), so what it serves could never be charged. ` +
      'It serves no priced requests any more; send them to another node.'
    );
  }
  return (
    `This node's credit was withdrawn: the control plane refused its credential (${withdrawal.code}), so what it serves could not be charged. ` +
    'It serves priced requests again once it reconnects (its operator re-enrolls it); meanwhile send them to another node.'
  );
}
