/**
 * What a refusal or a failed connection means for this node, and what the operator should do.
 * Refusal codes, their retryability and hints come from proto/ (shared with the gateway); the
 * node adds its own codes for failures the gateway never sees (TLS, unreachable, local storage).
 */
import { RefusalCode, isRefusalCode, isRefusalRetryable, refusalHint } from '../../../proto/src/index.js';
import type { ControlCutOff } from './control-channel.js';

/** Refusals where the credential file's `previous` entry may still be accepted. */
export const FALLBACK_CODES: ReadonlySet<string> = new Set(['CREDENTIAL_INVALID', 'CREDENTIAL_REVOKED']);

const LOCAL_ADVICE: Readonly<Record<string, string>> = {
  GATEWAY_TLS_UNTRUSTED:
    "the gateway's certificate is not signed by the CA saved at enrollment (identity.json), or, when none was saved, by a CA in this host's system trust store; " +
    "if the control plane's gateway identity was replaced, re-enroll this node (`zenova-node doctor` names the trust in use)",
  GATEWAY_TLS_NAME_MISMATCH:
    "the gateway's certificate does not name the server name saved at enrollment (identity.json): check that the gateway address reaches the node gateway, not another TLS server; " +
    're-enroll this node against a name the gateway certificate covers, or serve a gateway certificate that names it ' +
    '(external certificate: reissue it with that name; generated identity: it is never reissued, so replacing it means re-enrolling every node). ' +
    'Adding the name to ZENOVA_GATEWAY_HOSTS alone changes no certificate, and the control plane then refuses to start',
  GATEWAY_TLS_EXPIRED: "the gateway's certificate has expired or is not yet valid; check this host's clock and the gateway certificate",
  GATEWAY_UNREACHABLE: 'the gateway cannot be reached; the node keeps serving and reconnects by itself (check the network or the control plane)',
  GATEWAY_PROXY:
    'the proxy of https_proxy / HTTPS_PROXY (in the node service\'s environment) did not open a tunnel to the gateway, or that variable is unusable: ' +
    "allow CONNECT to the gateway's host:port on the proxy, fix the variable, or list the gateway's host in no_proxy / NO_PROXY if it is reachable directly; " +
    'the node keeps serving and reconnects by itself (`zenova-node doctor` tries the same route)',
  CONNECTION_LOST: 'the control session was cut; the node keeps serving and reconnects by itself',
  HELLO_TIMEOUT: 'the gateway did not answer the hello in time; the node reconnects by itself',
  CREDENTIAL_STORE_FAILED: 'the rotated credential could not be saved in the state directory; check disk space and permissions',
  NOT_ENROLLED: 'enroll this node: `zenova-node enroll --state-dir DIR …` (or `zenova install node …`)',
  STATE_INVALID: 'a file in the state directory is damaged; run `zenova-node doctor --state-dir DIR`, then re-enroll with --reenroll',
  STATE_ACCESS_DENIED:
    "node-edge may not read a file in its state directory (the error names it, its owner and the chown or chmod that gives it back); nothing is damaged and no re-enrollment is needed: the node tries again every 30 s and picks the file up by itself",
};

/**
 * Refusals of the node's credential that cut it off once no other credential is left to try
 * (cutOffBy): only CREDENTIAL_REVOKED, what a re-enrollment on another host leaves this one with —
 * what this host serves can never be delivered, and the control plane leases the node's credit to
 * that host. Not CREDENTIAL_INVALID (a control plane restarted on a wrong or restored database
 * refuses current and previous so, and is put right), CREDENTIAL_EXPIRED (a node offline past its
 * validity re-enrolls on this host and delivers its spool) nor CREDENTIAL_SUPERSEDED (the
 * replicas' rotation race): this host's records can still be delivered, and withdrawing its credit
 * would only make an outage of priced traffic, lifted at the next slow retry at best. Nor
 * PROTOCOL_INCOMPATIBLE or MESSAGE_INVALID: an upgrade delivers what was served.
 */
export const CREDENTIAL_CUT_OFF_CODES: ReadonlySet<string> = new Set([RefusalCode.CREDENTIAL_REVOKED]);

/**
 * Whether a session's end cuts the node off (ControlCutOff): NODE_DELETED always (final), a
 * credential refusal of CREDENTIAL_CUT_OFF_CODES when the next attempt is not the fallback to the
 * previous credential and credential.json holds no newer one than the credential refused.
 */
export function cutOffBy(
  end: { reason: string; code: string; message: string },
  next: { usePrevious: boolean; credentialReplaced: boolean },
): ControlCutOff | undefined {
  if (end.reason !== 'refused') return undefined;
  if (end.code === RefusalCode.NODE_DELETED) return { code: end.code, message: end.message, final: true };
  if (CREDENTIAL_CUT_OFF_CODES.has(end.code) && !next.usePrevious && !next.credentialReplaced) return { code: end.code, message: end.message, final: false };
  return undefined;
}

/** True for refusals no reconnect can cure (re-enroll, recreate, upgrade): retry only slowly. */
export function needsOperator(code: string): boolean {
  return isRefusalCode(code) && !isRefusalRetryable(code);
}

/** One line saying what to do about `code`, when there is something to say. */
export function refusalAdvice(code: string): string | undefined {
  return isRefusalCode(code) ? refusalHint(code) : LOCAL_ADVICE[code];
}
