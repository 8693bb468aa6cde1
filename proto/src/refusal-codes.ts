/**
 * Why the control plane refused or ended a node's control stream: the stable codes carried in
 * `Refusal.error.code` (ErrorDetail) and at the start of the gRPC status details ("CODE: message"),
 * whether the node may simply retry, and a one-line hint for the operator. Both sides import this,
 * so the node can tell "back off and reconnect" from "stop and ask for a re-enroll".
 */
import { PROTOCOL_INCOMPATIBLE_CODE } from './protocol-version.js';

export const RefusalCode = {
  /** The call carried no node id or no credential metadata. */
  CREDENTIAL_MISSING: 'CREDENTIAL_MISSING',
  /** The credential is malformed, unknown, or belongs to another node. */
  CREDENTIAL_INVALID: 'CREDENTIAL_INVALID',
  /**
   * The credential is past its expiry: the node was offline longer than its validity, or a live
   * session's node never acknowledged the rotation it was offered (the session ends at the expiry).
   */
  CREDENTIAL_EXPIRED: 'CREDENTIAL_EXPIRED',
  /** The credential was revoked (re-enrollment, or revoked while connected). */
  CREDENTIAL_REVOKED: 'CREDENTIAL_REVOKED',
  /** The credential was replaced by a rotation and its handover window is over. */
  CREDENTIAL_SUPERSEDED: 'CREDENTIAL_SUPERSEDED',
  /** The node was deleted in the control plane. */
  NODE_DELETED: 'NODE_DELETED',
  /** The node's protocol version is not compatible with the control plane's. */
  PROTOCOL_INCOMPATIBLE: PROTOCOL_INCOMPATIBLE_CODE,
  /** The first message was not Hello, or no Hello arrived in time. */
  HELLO_REQUIRED: 'HELLO_REQUIRED',
  /** The control plane is stopping; another replica (or this one, restarted) takes the node. */
  SERVER_SHUTTING_DOWN: 'SERVER_SHUTTING_DOWN',
  /**
   * A message broke the protocol (several payloads, out-of-range or oversized fields, a second Hello,
   * a malformed RecordBatch). One record the control plane cannot ingest is not: it is set aside and
   * counted in RecordBatchAck.rejected_count, so it can never end every session (docs/spool.md).
   */
  MESSAGE_INVALID: 'MESSAGE_INVALID',
  /** A newer connection of the same node took over this session. */
  SESSION_REPLACED: 'SESSION_REPLACED',
  /** The control plane could not check the node (e.g. its database is unreachable) — transient. */
  SERVER_UNAVAILABLE: 'SERVER_UNAVAILABLE',
} as const;

export type RefusalCode = (typeof RefusalCode)[keyof typeof RefusalCode];

interface RefusalInfo {
  /** True when reconnecting later (with back-off) can succeed without an operator. */
  retryable: boolean;
  /** What the operator should do, in one line. */
  hint: string;
}

/** The node-side step of a re-enrollment, for an installed node and for one run without the installer. */
const REENROLL_ON_NODE = 'the printed `zenova install node … --reenroll`, or `zenova-node enroll --reenroll --token-file FILE …` with its token for a node run without the installer';

const REENROLL = `run \`zenova gateway-node reenroll-command NAME\` on the control-plane host, then on the node ${REENROLL_ON_NODE}`;

const REFUSALS: Record<RefusalCode, RefusalInfo> = {
  CREDENTIAL_MISSING: { retryable: false, hint: 'the node has no credential: enroll it first (`zenova-node enroll` or `zenova install node`)' },
  CREDENTIAL_INVALID: { retryable: false, hint: `the control plane does not know this credential: ${REENROLL}` },
  CREDENTIAL_EXPIRED: { retryable: false, hint: `the credential expired (the node was offline past its validity, or never stored its rotated credential): ${REENROLL}` },
  CREDENTIAL_REVOKED: { retryable: false, hint: `the credential was revoked: ${REENROLL}` },
  CREDENTIAL_SUPERSEDED: { retryable: false, hint: `the credential was replaced and its handover window is over: ${REENROLL}` },
  // A deleted node never comes back (a node created again has a new id): the advice is how to serve
  // from this host again. Not a fresh install: this host's state dir holds the old node, and the
  // reenroll moves its spool and config aside (edge-node/src/enroll/retire-node-state.ts) rather
  // than losing them with the directory.
  NODE_DELETED: {
    retryable: false,
    hint:
      'the node was deleted in the control plane and cannot come back: its records not yet sent can no longer be delivered. ' +
      'To serve from this host again, create a node (`zenova gateway-node create --name NAME …`), then run its reenroll command on this host ' +
      `(\`zenova gateway-node reenroll-command NAME\`, then ${REENROLL_ON_NODE}), which moves the old node's spool and config aside ` +
      "(kept in the state dir's retired/ directory; never delete the node's directory)",
  },
  [PROTOCOL_INCOMPATIBLE_CODE]: { retryable: false, hint: 'node and control plane speak incompatible protocol versions: upgrade the side the message names' },
  HELLO_REQUIRED: { retryable: true, hint: 'the node must send Hello first and promptly; it reconnects by itself, check its logs if this repeats' },
  SERVER_SHUTTING_DOWN: { retryable: true, hint: 'the control plane is stopping; the node reconnects by itself' },
  MESSAGE_INVALID: { retryable: false, hint: 'the node sent a message that breaks the protocol: upgrade the node to the release the control plane pins' },
  SESSION_REPLACED: { retryable: true, hint: 'a newer connection of this node took over; if this repeats, two hosts share one node identity: re-enroll one of them' },
  SERVER_UNAVAILABLE: { retryable: true, hint: 'the control plane could not reach its database; the node reconnects by itself' },
};

const CODES = new Set<string>(Object.values(RefusalCode));

export function isRefusalCode(value: string): value is RefusalCode {
  return CODES.has(value);
}

/** Whether a node refused with `code` may reconnect (with back-off) and expect success later. */
export function isRefusalRetryable(code: RefusalCode): boolean {
  return REFUSALS[code].retryable;
}

/** One line telling the operator what to do about `code`. */
export function refusalHint(code: RefusalCode): string {
  return REFUSALS[code].hint;
}

/**
 * The refusal code at the start of gRPC status details ("CODE: message"), for a node that saw the
 * status but not the Refusal message (e.g. it was lost with the connection).
 */
export function refusalCodeOfStatusDetails(details: string): RefusalCode | undefined {
  const head = /^([A-Z][A-Z_]*)(?::|$)/.exec(details)?.[1];
  return head !== undefined && isRefusalCode(head) ? head : undefined;
}
