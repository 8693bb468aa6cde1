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
}

export type ControlPlaneProbe = (url: string, caPem: string | undefined, caFile: string | undefined) => Promise<{ ok: true; facts: ControlPlaneFacts } | { ok: false; finding: Finding }>;

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
    const explained = explainTlsFailure(kind, {
      what: 'the control plane',
      host,
      address: base.host,
      trustSource: caFile !== undefined ? `--ca-file ${caFile}` : "this host's system trust store",
      trustAdvice: "pass the CA that signed the control plane's certificate with --ca-file (the install command names it)",
    });
    // A certificate problem is fixed with --ca-file; a port that does not speak TLS at all (plain
    // HTTP there) is a wrong URL, which no CA can fix.
    const tls = kind === 'untrusted' || kind === 'name-mismatch' || kind === 'expired';
    const cause = explained ?? `cannot reach the control plane at ${base.host}: ${oneLine((err as Error).message, 200)}`;
    return { ok: false, finding: finding(kind === 'not-tls' ? 'NODE-CP-NOT-HTTPS' : tls ? 'NODE-CP-TLS' : 'NODE-CP-UNREACHABLE', cause) };
  }
  const receivedAt = Date.now();
  const parsed = preflightResponseSchema.safeParse(response.body);
  if (response.status !== 200 || !parsed.success || parsed.data.product !== PRODUCT) {
    return { ok: false, finding: finding('NODE-CP-NOT-ZENOVA', `${base.href} answered HTTP ${response.status} on ${PREFLIGHT_PATH}, not as a Zenova control plane`) };
  }
  return {
    ok: true,
    facts: { url: base, version: parsed.data.version, protocolVersion: parsed.data.protocolVersion, skewMs: parsed.data.serverTimeMs - (sentAt + receivedAt) / 2 },
  };
};
