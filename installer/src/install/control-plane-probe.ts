/**
 * Reaches the control plane over HTTPS (with --ca-file or the system store) without a token, as
 * enrollment's preflight does, and turns the answer into facts (version, protocol, clock skew, the
 * node gateway nodes will dial) or one NODE-CP-… finding; then (probeGateway) reaches that gateway
 * over TCP and TLS as node-edge's control link will. Used by --check-only and before every install.
 */
import { isLoopbackHost } from '../../../proto/src/loopback-host.js';
import { parseGatewayTarget } from '../../../edge-node/src/control/gateway-channel.js';
import { probeTcp, probeTls } from '../../../edge-node/src/control/gateway-probe.js';
import { parseControlPlaneUrl } from '../../../edge-node/src/enroll/enroll.js';
import { PREFLIGHT_PATH, PRODUCT, preflightResponseSchema } from '../../../edge-node/src/enroll/enroll-api.js';
import type { PreflightGateway } from '../../../edge-node/src/enroll/enroll-api.js';
import { requestJson } from '../../../edge-node/src/enroll/https-json.js';
import { ProxySettingError, proxyFor } from '../../../edge-node/src/net/proxy-policy.js';
import type { ProxyServer } from '../../../edge-node/src/net/proxy-policy.js';
import { ProxyConnectError } from '../../../edge-node/src/net/proxy-tunnel.js';
import { describeGatewayTrust } from '../../../edge-node/src/state/identity.js';
import type { NodeIdentity } from '../../../edge-node/src/state/identity.js';
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
  /**
   * The node gateway as the enrollment answer will hand it to the node (preflight `gateway`): its
   * target HOST:PORT, the name its certificate must carry, the CA to pin ('' for the system trust
   * store). Unset: an older control plane, which does not say.
   */
  gateway?: PreflightGateway;
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
      ...(parsed.data.gateway !== undefined ? { gateway: parsed.data.gateway } : {}),
    },
  };
};

export type GatewayProbe = (
  gateway: PreflightGateway, controlPlane: URL, env: NodeJS.ProcessEnv,
) => Promise<{ ok: true; label: string } | { ok: false; finding: Finding }>;

/** The control plane's settings that say where nodes dial the gateway, for advice. */
const GATEWAY_ADDRESS_SETTINGS = 'ZENOVA_GATEWAY_HOSTS (its first host is the one nodes dial; the gateway certificate must cover it) or ZENOVA_GATEWAY_PUBLIC_ADDRESS (HOST:PORT)';

/**
 * The node gateway (gRPC over TLS) the enrollment answer will send the node to, checked as the
 * control link will dial it, before the token is used: its host is not a loopback one while the
 * control plane is reached elsewhere (the node would dial itself), a TCP connection opens (through
 * the proxy the link would take), and the TLS handshake verifies against the CA the answer pins
 * (that answer came over the HTTPS this run verified with --ca-file or the system store) or, with
 * none, this host's system trust store, for the server name it gives. Sends nothing after the
 * handshake.
 */
export const probeGateway: GatewayProbe = async (gateway, controlPlane, env) => {
  const { target, serverName } = gateway;
  const controlPlaneHost = controlPlane.hostname.replace(/^\[|\]$/g, '');
  let host: string;
  let port: number;
  try {
    ({ host, port } = parseGatewayTarget(target));
  } catch (err) {
    return { ok: false, finding: finding('NODE-CP-GATEWAY', `the control plane names its node gateway ${JSON.stringify(target)}, which is not HOST:PORT: ${(err as Error).message}`, gatewayAdvice(target)) };
  }
  if (isLoopbackHost(host) && !isLoopbackHost(controlPlaneHost)) {
    return {
      ok: false,
      finding: finding(
        'NODE-CP-GATEWAY-LOOPBACK',
        `the control plane at ${controlPlane.host} tells nodes to dial its node gateway at ${target}, a loopback address: from this host that is this host itself, not the control plane`,
      ),
    };
  }
  let proxy: ProxyServer | undefined;
  try {
    proxy = proxyFor(host, port, env);
  } catch (err) {
    if (err instanceof ProxySettingError) return { ok: false, finding: finding('NODE-CP-PROXY', err.message) };
    throw err;
  }
  const via = proxy !== undefined ? ` through the proxy ${proxy.label} (${proxy.source})` : '';
  const identity: NodeIdentity['gateway'] = { target, serverName, ...(gateway.caPem !== '' ? { caPem: gateway.caPem } : {}) };
  const tcp = await probeTcp(identity, PROBE_TIMEOUT_MS, proxy);
  if (!tcp.ok) {
    return {
      ok: false,
      finding: finding('NODE-CP-GATEWAY', `cannot open a TCP connection to the control plane's node gateway at ${target}${via}: ${oneLine(tcp.message, 200)}`, tcp.advice ?? gatewayAdvice(target)),
    };
  }
  const trust = describeGatewayTrust(gateway.caPem !== '' ? 'pinned-ca' : 'system');
  const tls = await probeTls(identity, PROBE_TIMEOUT_MS, proxy);
  if (!tls.ok) {
    if (tls.kind === 'untrusted' || tls.kind === 'name-mismatch' || tls.kind === 'expired') {
      const cause = explainTlsFailure(tls.kind, {
        what: "the control plane's node gateway",
        host: serverName,
        address: target,
        trustSource: gateway.caPem !== '' ? "the gateway CA the control plane's preflight answer names (the CA the node will pin)" : "this host's system trust store (the control plane pins no gateway CA)",
      }) ?? tls.message;
      return { ok: false, finding: finding('NODE-CP-GATEWAY-TLS', `${cause} (${target}${via})`, gatewayTlsAdvice(gateway.caPem !== '')) };
    }
    return {
      ok: false,
      finding: finding('NODE-CP-GATEWAY', `no verified TLS handshake with the control plane's node gateway at ${target}${via}: ${oneLine(tls.message, 200)}`, tls.advice ?? gatewayAdvice(target)),
    };
  }
  return { ok: true, label: `node gateway ${target} reachable over TCP and TLS${via} (certificate trusted by ${trust}, valid for "${serverName}")` };
};

/** NODE-CP-GATEWAY's advice, naming the host:port nodes dial. */
function gatewayAdvice(target: string): string {
  return `Nodes reach the control plane on two ports: the HTTPS one of the --control-plane URL (enrollment) and the node gateway's, ${target} (gRPC over TLS, default port 8443), for the control link afterwards. ` +
    `Open ${target} from this host (firewalls, security groups, routes; nc -vz HOST PORT tests it), then run the same command again (nothing was changed and the token was not used). ` +
    `If ${target} is not an address node hosts can reach, set the control plane's ${GATEWAY_ADDRESS_SETTINGS} and restart it.`;
}

function gatewayTlsAdvice(pinned: boolean): string {
  return pinned
    ? `The gateway's certificate does not verify against the CA the control plane hands to nodes, or does not name the address nodes dial: set the control plane's ${GATEWAY_ADDRESS_SETTINGS} to a name its gateway certificate covers (docs/install.md), restart it, then run the same command again (nothing was changed and the token was not used).`
    : "The control plane pins no gateway CA (an external gateway certificate without ZENOVA_GATEWAY_TRUST_BUNDLE), so this host's system trust store must trust the gateway's certificate: add its CA to this host's trust store, or set ZENOVA_GATEWAY_TRUST_BUNDLE on the control plane; then run the same command again (nothing was changed and the token was not used).";
}
