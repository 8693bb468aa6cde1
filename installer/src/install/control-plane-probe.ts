/**
 * Reaches the control plane over HTTPS (with --ca-file or the system store) without a token, as
 * enrollment's preflight does, and turns the answer into facts (version, protocol, clock skew) or
 * one NODE-CP-… finding. Used by --check-only and before every install.
 */
import { parseControlPlaneUrl } from '../../../edge-node/src/enroll/enroll.js';
import { PREFLIGHT_PATH, PRODUCT, preflightResponseSchema } from '../../../edge-node/src/enroll/enroll-api.js';
import { requestJson } from '../../../edge-node/src/enroll/https-json.js';
import { ProxySettingError } from '../../../edge-node/src/net/proxy-policy.js';
import { ProxyConnectError } from '../../../edge-node/src/net/proxy-tunnel.js';
import { classifyTlsFailure, explainTlsFailure } from '../../../edge-node/src/tls/tls-failure.js';
import { oneLine } from '../../../edge-node/src/one-line.js';
import { finding } from './diagnostics.js';
import type { Finding } from './diagnostics.js';

const PROBE_TIMEOUT_MS = 10_000;
const MAX_RESPONSE_BYTES = 64 * 1024;

export interface ControlPlaneFacts {
  url: URL;
  version: string;
  protocolVersion: number;
  /** Control plane's clock minus ours, in ms (midpoint of the request). */
  skewMs: number;
  /**
   * It answers a redemption again when the same redemption key comes back (preflight
   * `redemptionKeys`): a --reenroll may then redeem its token while node-edge serves, and again once
   * it is stopped (install-node.ts). Unset: not known to.
   */
  redemptionKeys?: boolean;
}

/** A CA file trusted for the control plane: the operator's --ca-file, or the installed node's (an upgrade without --ca-file). */
export interface CaFile {
  path: string;
  installed: boolean;
}

/** The file as messages name it: an installed one was never given as --ca-file. */
export function describeCaFile(file: CaFile): string {
  return file.installed ? `the installed CA file (${file.path})` : `--ca-file ${file.path}`;
}

export type ControlPlaneProbe = (url: string, caPem: string | undefined, caFile: CaFile | undefined) => Promise<{ ok: true; facts: ControlPlaneFacts } | { ok: false; finding: Finding }>;

/** How the operator gives a node its control-plane CA after creating it (no CLI command yet). */
const SET_NODE_CA = '`PATCH /api/v1/nodes/NAME/network` with `caPem`, docs/api.md';

/**
 * What to do about a control-plane certificate this host does not trust. The command names
 * --ca-file only when the node was created with the control plane's CA (or given it since), so
 * without one the CA has to be set on the node before a command can name it.
 */
export function untrustedAdvice(caFile: CaFile | undefined): string {
  if (caFile !== undefined) {
    return `${caFile.installed ? `${caFile.path}, the CA the node was installed or re-enrolled with,` : caFile.path} is not the CA that signed the control plane's certificate: pass that CA with --ca-file (the file the command names, saved as the command's output said). If the control plane's certificate changed since the node got its CA, set the new CA on the node (${SET_NODE_CA}) and issue the command again (its --ca-out FILE writes the CA to FILE).`;
  }
  return `The control plane's certificate comes from a CA this host does not trust (a private CA): pass that CA with --ca-file FILE. A command without --ca-file comes from a node created without the control plane's CA: set it on the node (${SET_NODE_CA}), then issue the command again with \`zenova gateway-node install-command NAME --ca-out FILE\` (or reenroll-command, upgrade-command), which then names --ca-file and writes the CA to FILE.`;
}

export const probeControlPlane: ControlPlaneProbe = async (value, caPem, caFile) => {
  let base: URL;
  try {
    base = parseControlPlaneUrl(value);
  } catch (err) {
    return { ok: false, finding: finding('NODE-CP-URL', (err as Error).message) };
  }
  const sentAt = Date.now();
  let response;
  try {
    response = await requestJson({
      method: 'GET',
      url: new URL(PREFLIGHT_PATH.slice(1), base),
      ...(caPem !== undefined ? { caPem } : {}),
      timeoutMs: PROBE_TIMEOUT_MS,
      maxResponseBytes: MAX_RESPONSE_BYTES,
    });
  } catch (err) {
    // The proxy's own failure, not the control plane's: what DNS or curl -v would not explain.
    if (err instanceof ProxyConnectError) {
      return { ok: false, finding: finding('NODE-CP-PROXY', `cannot reach the control plane at ${base.host} through the proxy: ${err.message}`) };
    }
    if (err instanceof ProxySettingError) return { ok: false, finding: finding('NODE-CP-PROXY', err.message) };
    const kind = classifyTlsFailure(err);
    const host = base.hostname.replace(/^\[|\]$/g, '');
    // An untrusted certificate's cause is the fact alone: what to do is the finding's advice.
    const explained = explainTlsFailure(kind, {
      what: 'the control plane',
      host,
      address: base.host,
      trustSource: caFile !== undefined ? describeCaFile(caFile) : "this host's system trust store",
    });
    // A certificate problem is NODE-CP-TLS; a port that does not speak TLS at all (plain HTTP
    // there) is a wrong URL, which no CA can fix.
    const tls = kind === 'untrusted' || kind === 'name-mismatch' || kind === 'expired';
    const cause = explained ?? `cannot reach the control plane at ${base.host}: ${oneLine((err as Error).message, 200)}`;
    if (kind === 'untrusted') return { ok: false, finding: finding('NODE-CP-TLS', cause, untrustedAdvice(caFile)) };
    return { ok: false, finding: finding(kind === 'not-tls' ? 'NODE-CP-NOT-HTTPS' : tls ? 'NODE-CP-TLS' : 'NODE-CP-UNREACHABLE', cause) };
  }
  const receivedAt = Date.now();
  const parsed = preflightResponseSchema.safeParse(response.body);
  if (response.status !== 200 || !parsed.success || parsed.data.product !== PRODUCT) {
    return { ok: false, finding: finding('NODE-CP-NOT-ZENOVA', `${base.href} answered HTTP ${response.status} on ${PREFLIGHT_PATH}, not as a Zenova control plane`) };
  }
  return {
    ok: true,
    facts: {
      url: base,
      version: parsed.data.version,
      protocolVersion: parsed.data.protocolVersion,
      skewMs: parsed.data.serverTimeMs - (sentAt + receivedAt) / 2,
      redemptionKeys: parsed.data.redemptionKeys === true,
    },
  };
};
