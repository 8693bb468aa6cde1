/**
 * Enrollment failures as one operator line each: what happened and what to do next. The control
 * plane's error codes (ZN_ERR_CP_*) map to fixed advice; anything else is quoted.
 */

export type EnrollMode = 'install' | 'reenroll';
/** What a one-time token is redeemed for: an enrollment, or `zenova install node --upgrade`. */
export type TokenUse = EnrollMode | 'upgrade';

/** Enrollment did not happen; `message` is safe to print (never the token or a credential). */
export class EnrollError extends Error {
  /** The control plane's error code when it answered with one, else a local reason. */
  readonly code: string;
  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'EnrollError';
    this.code = code;
  }
}

function newTokenCommand(mode: TokenUse): string {
  return `\`zenova gateway-node ${mode === 'install' ? 'install' : mode}-command NAME\``;
}

/** What the control plane's answer says beyond its code, for the advice that names it. */
export interface TokenErrorDetails {
  retryAfterSeconds?: number;
  /** ZN_ERR_CP_TOKEN_SUPERSEDED: when the command that replaced the token was issued (ISO 8601). */
  replacedAt?: string;
  /** --reenroll: the node this state dir holds, named by ZN_ERR_CP_TOKEN_WRONG_NODE's advice. */
  installedNode?: { nodeId: string; nodeName: string };
}

/** Advice for one control-plane error code, or undefined for codes without fixed advice. */
export function tokenErrorMessage(code: string, mode: TokenUse, details: TokenErrorDetails = {}): string | undefined {
  const issue = newTokenCommand(mode);
  const { retryAfterSeconds, replacedAt, installedNode } = details;
  switch (code) {
    case 'ZN_ERR_CP_TOKEN_UNKNOWN':
      return `the token is not known to this control plane (mistyped, or issued by another control plane): copy the command again, or issue a new one with ${issue}`;
    case 'ZN_ERR_CP_TOKEN_EXPIRED':
      return `the token has expired (its lifetime is the control plane's ZENOVA_INSTALL_TOKEN_TTL_SECONDS, 24 hours by default): issue a new one with ${issue}`;
    case 'ZN_ERR_CP_TOKEN_SUPERSEDED':
      return `the token was replaced by a newer command${replacedAt === undefined ? '' : ` issued at ${replacedAt}`}: run the newest command (or, if it is lost, issue a new one with ${issue})`;
    case 'ZN_ERR_CP_TOKEN_USED':
      return `the token was already used: issue a new ${mode} command with ${issue}`;
    case 'ZN_ERR_CP_TOKEN_WRONG_KIND':
      if (mode === 'upgrade') return `the token is not an upgrade token: --upgrade needs a token from ${issue} (node detail › Issue upgrade command)`;
      return mode === 'reenroll'
        ? 'the token is not a reenroll token: --reenroll needs a token from `zenova gateway-node reenroll-command NAME` (upgrade tokens never enroll)'
        : 'the token is not an install token: use a token from `zenova gateway-node install-command NAME`, or pass --reenroll with a reenroll token (upgrade tokens never enroll)';
    case 'ZN_ERR_CP_NODE_DELETED':
      return 'the node this token belongs to was deleted on the control plane: create a node (`zenova gateway-node create`) and use its new command (on a host that held the deleted node: its reenroll command with --reenroll, which moves the old node\'s spool and config aside)';
    case 'ZN_ERR_CP_TOKEN_WRONG_NODE':
      if (mode !== 'upgrade') {
        // Nothing was changed: the other node keeps its credentials, this state dir its node.
        const held = installedNode === undefined ? "this host's node" : `node ${installedNode.nodeName} (${installedNode.nodeId})`;
        const name = installedNode?.nodeName ?? 'NAME';
        return `the token was issued for another node than ${held}, which this host holds and which is not deleted; nothing was changed and the token was not used: ` +
          `to re-enroll this host run ${held}'s own reenroll command (\`zenova gateway-node reenroll-command ${name}\`), or, if this host really is to become the other node, ` +
          `delete ${installedNode === undefined ? "this host's node" : `node ${name}`} first (\`zenova gateway-node delete ${name} --yes\`) and run this command again`;
      }
      return `the token was issued for another node than the one installed on this host: issue an upgrade command for this host's node with ${issue} (zenova status shows its name)`;
    case 'ZN_ERR_CP_UPGRADE_VERSION':
      return "the package is not the node version the control plane pins (its own version): use the zenova-node.zpkg of the control plane's release; the token was not used";
    case 'ZN_ERR_CP_PROTOCOL_INCOMPATIBLE':
      return 'the control plane speaks another control protocol version than this node: install the node package of the control plane\'s version';
    case 'ZN_ERR_CP_ENROLL_RATE_LIMITED':
      return retryAfterSeconds !== undefined
        ? `too many enrollment attempts from this address: wait ${retryAfterSeconds} s and try again`
        : 'too many enrollment attempts from this address: wait a minute and try again';
    default:
      return undefined;
  }
}
