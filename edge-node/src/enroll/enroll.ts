/**
 * `zenova-node enroll`: redeem a one-time token at the control plane over verified HTTPS and save
 * the node's identity and first credential in the state directory.
 *
 * Order: check the state dir (refuse to replace an identity without --reenroll) → preflight
 * (product, protocol, clock skew; no token sent) → redeem → validate the answer → write
 * credential.json, then identity.json (the identity marks a finished enrollment), under the lock a
 * serving node stores a rotated credential under (credential-write-lock.ts). A re-enrollment of
 * the same node leaves every other file alone, so it keeps the spool and config cache; one as another
 * node (the old one deleted and created again) moves the old node's spool and config aside first
 * (retire-node-state.ts), or is refused while they hold records only the old node can deliver. The
 * request names the node the state dir holds, so a control plane refuses a token of another node
 * while that node is live (ZN_ERR_CP_TOKEN_WRONG_NODE), before it revokes anything.
 *
 * Before the token is sent, the redemption key of this attempt is saved (enroll-attempt.ts): a rerun
 * of the same command after a lost answer sends it again and the control plane answers again.
 */
import os from 'node:os';
import { PROTOCOL_VERSION, describeProtocolMismatch, isCompatibleProtocol } from '../../../proto/src/index.js';
import { oneLine } from '../one-line.js';
import { productVersion } from '../../../proto/src/product-version.js';
import { redactSecret } from '../../../proto/src/redact-secret.js';
import { givenValue } from '../../../proto/src/cli-usage-errors.js';
import { saveCredentials } from '../state/credential-store.js';
import { loadIdentity, saveIdentity } from '../state/identity.js';
import type { NodeIdentity } from '../state/identity.js';
import { openStateStore } from '../state/state-store.js';
import type { StateStore } from '../state/state-store.js';
import { classifyTlsFailure, explainTlsFailure } from '../tls/tls-failure.js';
import { describeIssues } from '../zod-issues.js';
import { ENROLL_PATH, PREFLIGHT_PATH, PRODUCT, enrollResponseSchema, errorBodySchema, preflightResponseSchema } from './enroll-api.js';
import type { EnrollRequest, EnrollResponse, PreflightResponse } from './enroll-api.js';
import { EnrollError, tokenErrorMessage } from './enroll-errors.js';
import type { EnrollMode, TokenErrorDetails, TokenUse } from './enroll-errors.js';
import { redemptionKeyFor, removeEnrollAttempt } from './enroll-attempt.js';
import { underCredentialWriteLock } from './credential-write-lock.js';
import { asStateDirOwner, stateDirOwnerToActAs } from './state-dir-owner.js';
import { requestJson } from './https-json.js';
import { inspectPreviousNode, isSpoolInUse, keepPreviousNodeReason, retirePreviousNode } from './retire-node-state.js';
import type { PreviousNode, RetiredState } from './retire-node-state.js';
import { ProxySettingError } from '../net/proxy-policy.js';
import { ProxyConnectError, proxyAdvice } from '../net/proxy-tunnel.js';
import type { JsonRequest, JsonResponse } from './https-json.js';

/** The control plane's refusals that settle the token for good: a rerun with the same key cannot be answered. */
const FINAL_TOKEN_REFUSAL = /^ZN_ERR_CP_(?:TOKEN_[A-Z_]+|NODE_DELETED)$/;

function isFinalTokenRefusal(code: string | undefined): boolean {
  return code !== undefined && FINAL_TOKEN_REFUSAL.test(code);
}

/** DESIGN §7: a host whose clock is further off than this cannot be trusted with expiries. */
export const MAX_CLOCK_SKEW_MS = 30_000;
const DEFAULT_TIMEOUT_MS = 15_000;
const MAX_RESPONSE_BYTES = 256 * 1024;
const MAX_QUOTED_CHARS = 300;

export interface EnrollOptions {
  controlPlaneUrl: string;
  token: string;
  stateDir: string;
  /** PEM to trust instead of the system store (the content of --ca-file). */
  caPem?: string;
  /** Where `caPem` came from, for messages. */
  caFile?: string;
  reenroll: boolean;
  /**
   * The installer's install dir (`zenova install node`), sent for the control plane to record on the
   * node, when its preflight says it takes one; `zenova-node enroll` gives none.
   */
  installDir?: string;
  /** Non-fatal notices (e.g. a version difference); one line each. */
  notice?: (line: string) => void;
  /** Overrides for tests; the host's facts otherwise. */
  facts?: Partial<EnrollRequest['facts']>;
  timeoutMs?: number;
  /** How long to wait for the state dir's credential lock (ENROLL_LOCK_WAIT_MS); for tests. */
  lockWaitMs?: number;
  now?: () => number;
}

export interface EnrollResult {
  nodeId: string;
  nodeName: string;
  controlPlaneUrl: string;
  gatewayTarget: string;
  stateDir: string;
  reenrolled: boolean;
  /**
   * How many node-edge processes the control plane has this node run (the node's `replicas`; 1 when
   * its answer does not say, as an older control plane's): the installer writes it to etc/node.env.
   * Always set here; optional for the installer's other enrollers (tests), read as 1 when absent.
   */
  replicas?: number;
  /** Set when the state dir held another node, whose state was moved aside. */
  retired?: RetiredState & { nodeId: string; nodeName: string };
}

/**
 * `value` as a usage message may name it: an http(s) URL, without its credentials, query and
 * fragment (they may hold a secret); undefined for anything else, which is not shown, since a
 * token pasted in the URL's place lands in terminals, scrollback and CI logs.
 */
export function shownControlPlaneUrl(value: string): string | undefined {
  if (!URL.canParse(value)) return undefined;
  const url = new URL(value);
  if (url.protocol !== 'https:' && url.protocol !== 'http:') return undefined;
  const shown = `${url.protocol}//${url.host}${url.pathname}`;
  return shown.length > 200 ? undefined : shown;
}

/** "got "http://…"", or where the value was and what shape was expected when it is not shown. */
export function givenControlPlaneUrl(value: string): string {
  const shown = shownControlPlaneUrl(value);
  return givenValue(shown ?? '', shown !== undefined, 'an http(s) URL');
}

/**
 * The port of an http(s) URL's authority when it is out of range (0, or above 65535), which the URL
 * parser only refuses as "not a URL"; undefined otherwise (no port, one in range, or no such URL).
 */
export function outOfRangePort(value: string): string | undefined {
  const authority = /^https?:\/\/([^/?#]*)/i.exec(value)?.[1] ?? '';
  const port = /:(\d{1,10})$/.exec(authority.slice(authority.lastIndexOf('@') + 1))?.[1];
  return port !== undefined && (Number(port) < 1 || Number(port) > 65535) ? port : undefined;
}

/**
 * Checks that `value` is an https:// URL without credentials, query or fragment, and returns it as
 * a base URL ending in "/". Throws EnrollError('URL_INVALID') with a clear line otherwise: a port
 * out of range is named as such (both `zenova-node enroll` and the installer's checks say so).
 */
export function parseControlPlaneUrl(value: string): URL {
  const badPort = outOfRangePort(value);
  // The port is named, not the URL: one that does not parse may hold anything (credentials too).
  if (badPort !== undefined) throw new EnrollError('URL_INVALID', `--control-plane has port ${badPort}, out of range: a port is 1 to 65535`);
  if (!URL.canParse(value)) throw new EnrollError('URL_INVALID', '--control-plane is not a URL (not shown: it does not look like a URL); pass the control plane\'s https:// URL, as in the install command');
  const url = new URL(value);
  if (url.protocol !== 'https:') {
    // Another scheme is not named: `x:…` parses as a URL of scheme x, and may be a secret.
    const plain = url.protocol === 'http:' ? ', so plain http is refused' : '';
    throw new EnrollError('URL_INVALID', `--control-plane must be an https:// URL (enrollment sends a secret token${plain}), ${givenControlPlaneUrl(value)}`);
  }
  if (url.username !== '' || url.password !== '' || url.search !== '' || url.hash !== '') {
    throw new EnrollError('URL_INVALID', '--control-plane must not carry credentials, a query or a fragment');
  }
  if (!url.pathname.endsWith('/')) url.pathname += '/';
  return url;
}

/** Removes `secret` from a text we did not write, and keeps it to one short line. */
function quote(text: string, secret: string): string {
  return oneLine(redactSecret(text, secret), MAX_QUOTED_CHARS);
}

function formatDuration(ms: number): string {
  const seconds = Math.round(Math.abs(ms) / 1000);
  const minutes = Math.floor(seconds / 60);
  return minutes > 0 ? `${minutes} min ${seconds % 60} s` : `${seconds} s`;
}

export async function enroll(opts: EnrollOptions): Promise<EnrollResult> {
  const base = parseControlPlaneUrl(opts.controlPlaneUrl);
  const mode: EnrollMode = opts.reenroll ? 'reenroll' : 'install';
  const now = opts.now ?? Date.now;
  const token = opts.token.trim();
  if (token === '') throw new EnrollError('TOKEN_MISSING', 'the token is empty');
  if (token.length > 512 || /\s/.test(token)) throw new EnrollError('TOKEN_MALFORMED', 'the token is malformed: copy it again from the install command');

  const store = await openStateStore(opts.stateDir, { create: true });
  const existing = await refuseToReplaceIdentity(store, opts.reenroll);
  // Read before the token is sent, while nothing has changed. Whether the token re-enrolls this
  // node or another one is only known from the answer (the token is opaque and the preflight takes
  // none), so a refusal to leave the old node's records behind comes after the redemption: the
  // answer is then not saved, the old identity and its credential stay (another node's enrollment
  // revokes nothing of it) and the old node goes on delivering; the token is spent. (A token of
  // another node while this one is live never gets that far: installedNodeId below.)
  const previous = existing === undefined ? undefined : await inspectPreviousNode(store, existing);
  // As root in a state dir of the node's user, every write there runs as that user (state-dir-owner.ts).
  const owner = stateDirOwnerToActAs(store.dir);

  const call = async (req: Omit<JsonRequest, 'caPem' | 'timeoutMs' | 'maxResponseBytes'>): Promise<JsonResponse> => {
    try {
      return await requestJson({
        ...req,
        ...(opts.caPem !== undefined ? { caPem: opts.caPem } : {}),
        timeoutMs: opts.timeoutMs ?? DEFAULT_TIMEOUT_MS,
        maxResponseBytes: MAX_RESPONSE_BYTES,
      });
    } catch (err) {
      throw controlPlaneTransportError(err, base, opts.caFile, token);
    }
  };

  const preflight = await runPreflight(call, base, now, token);
  if (preflight.version !== productVersion()) {
    opts.notice?.(
      `note: the control plane runs version ${quote(preflight.version, token)}, this node ${productVersion()}; the control plane will upgrade the node once it is connected`,
    );
  }

  const facts: EnrollRequest['facts'] = {
    hostname: os.hostname(),
    arch: process.arch,
    version: productVersion(),
    protocolVersion: PROTOCOL_VERSION,
    ...opts.facts,
  };
  // Saved before the first redemption call: a rerun with this token after a lost answer reuses it.
  // Only to a control plane that says it takes one: older ones refuse unknown body fields.
  const body: EnrollRequest = { token, mode, facts };
  // Named so the control plane refuses a token of another live node before it revokes anything
  // (pasting the wrong row's reenroll command would cut off that node's host and orphan this one).
  if (existing !== undefined && preflight.installedNodeIds === true) body.installedNodeId = existing.nodeId;
  // Where the installer really installs the node, so the control plane's later commands carry it.
  if (opts.installDir !== undefined && preflight.installDirs === true) body.installDir = opts.installDir;
  if (preflight.redemptionKeys === true) body.redemptionKey = await asStateDirOwner(owner, () => redemptionKeyFor(store, token, now));
  const response = await call({ method: 'POST', url: new URL(ENROLL_PATH.slice(1), base), body });
  if (response.status !== 200) {
    // Only a decision about the token itself (unknown, used, expired, replaced, of the wrong kind,
    // its node deleted) ends the attempt: no rerun with this key can be answered. Anything else keeps
    // it for a rerun: a 5xx may come after the commit (its reply from PostgreSQL lost), as may a
    // proxy's 502, and a refusal that never looked at the token (a 429 rate limit, a malformed body)
    // may follow an earlier redemption whose answer was lost.
    const refused = errorBodySchema.safeParse(response.body);
    if (response.status >= 400 && response.status < 500 && refused.success && isFinalTokenRefusal(refused.data.error.code)) await asStateDirOwner(owner, () => removeEnrollAttempt(store));
    throw controlPlaneRefusal(response, mode, token, 'enrollment', existing);
  }
  const parsed = enrollResponseSchema.safeParse(response.body);
  if (!parsed.success) {
    throw new EnrollError('RESPONSE_INVALID', `the control plane's enrollment answer is not usable (${describeIssues(parsed.error).join('; ')}); nothing was saved`);
  }
  const answer: EnrollResponse = parsed.data;
  // retired/ and the names moved into it are the owner's to replace with links too.
  const retired = previous !== undefined && previous.identity.nodeId !== answer.nodeId
    ? await asStateDirOwner(owner, () => retireAsAnotherNode(store, previous, answer.nodeId, now()))
    : undefined;

  const identity: NodeIdentity = {
    nodeId: answer.nodeId,
    nodeName: answer.nodeName,
    // The URL this enrollment verified; the control plane's own idea of it may sit behind a proxy.
    controlPlaneUrl: base.href.replace(/\/$/, ''),
    ...(opts.caPem !== undefined ? { controlPlaneCaPem: opts.caPem } : {}),
    // '' in the answer: no pinned CA, the gateway is verified against the system trust store.
    gateway: {
      target: answer.gateway.target,
      serverName: answer.gateway.serverName,
      ...(answer.gateway.caPem !== '' ? { caPem: answer.gateway.caPem } : {}),
    },
    configSigningPublicKeyPem: answer.configSigningPublicKeyPem,
    enrolledAt: new Date(now()).toISOString(),
  };
  // Credential first: identity.json appearing is what marks the enrollment as done. Under the lock a
  // serving node stores a rotation under, so a rotation it checked against the old file never lands
  // over the new credential; as the owner, like the writes above.
  await underCredentialWriteLock(store, mode, async () => {
    await saveCredentials(store, { current: answer.credential });
    await saveIdentity(store, identity);
  }, opts.lockWaitMs);
  await asStateDirOwner(owner, () => removeEnrollAttempt(store));
  return {
    nodeId: identity.nodeId,
    nodeName: identity.nodeName,
    controlPlaneUrl: identity.controlPlaneUrl,
    gatewayTarget: identity.gateway.target,
    stateDir: store.dir,
    reenrolled: opts.reenroll,
    replicas: answer.replicas ?? 1,
    ...(retired !== undefined ? { retired } : {}),
  };
}

/**
 * Moves the previous node's state aside for `newNodeId`, or refuses (EnrollError, nothing moved,
 * the enrollment attempt kept so the same command can be run again) while it holds records only
 * that node can deliver, or while a node-edge process has its spool open.
 */
async function retireAsAnotherNode(store: StateStore, previous: PreviousNode, newNodeId: string, now: number): Promise<NonNullable<EnrollResult['retired']>> {
  const old = previous.identity;
  const keep = keepPreviousNodeReason(previous, newNodeId, store.dir);
  const unused = `The token was redeemed for node ${newNodeId} but nothing was saved: ${store.dir} still holds node ${old.nodeName}. ` +
    'Run the same command again within 15 minutes, or issue a new reenroll command';
  if (keep !== undefined) throw new EnrollError('PREVIOUS_NODE_UNDELIVERED', `${keep}. ${unused}`);
  if (isSpoolInUse(store.dir)) {
    throw new EnrollError(
      'PREVIOUS_NODE_SERVING',
      `a node-edge process still serves node ${old.nodeName} (${old.nodeId}) from ${store.dir}: stop it before enrolling this state dir as node ${newNodeId} (its spool and config are moved aside). ${unused}`,
    );
  }
  return { ...(await retirePreviousNode(store, previous, now)), nodeId: old.nodeId, nodeName: old.nodeName };
}

/**
 * What to check when the URL given is not a control plane's: a path ending in /console (the
 * console page's address, pasted for the callback URL) is named with the URL to use instead.
 */
function consolePathAdvice(base: URL): string {
  const path = base.pathname.replace(/\/+$/, '');
  if (/\/console$/i.test(path)) return `${base.href} is the console page's address; pass the control plane's callback URL without it (${base.origin}${path.slice(0, -'/console'.length)}), as in the install command`;
  return 'is this the control plane\'s callback URL, as in the install command?';
}

/** The identity a re-enrollment replaces (undefined when there is none, or it is unreadable). */
async function refuseToReplaceIdentity(store: StateStore, reenroll: boolean): Promise<NodeIdentity | undefined> {
  let existing: NodeIdentity | undefined;
  try {
    existing = await loadIdentity(store);
  } catch (err) {
    // A corrupt identity may be replaced by a re-enrollment, but never silently.
    if (reenroll) return undefined;
    throw new EnrollError('IDENTITY_EXISTS', `${(err as Error).message}; pass --reenroll with a reenroll token to replace it`);
  }
  if (existing !== undefined && !reenroll) {
    throw new EnrollError(
      'IDENTITY_EXISTS',
      `${store.dir} already holds the identity of node ${existing.nodeName} (${existing.nodeId}); nothing was changed. To enroll again, pass --reenroll with a token from \`zenova gateway-node reenroll-command ${existing.nodeName}\``,
    );
  }
  return existing;
}

async function runPreflight(
  call: (req: Omit<JsonRequest, 'caPem' | 'timeoutMs' | 'maxResponseBytes'>) => Promise<JsonResponse>,
  base: URL,
  now: () => number,
  token: string,
): Promise<PreflightResponse> {
  const sentAt = now();
  const response = await call({ method: 'GET', url: new URL(PREFLIGHT_PATH.slice(1), base) });
  const receivedAt = now();
  if (response.status === 404) {
    throw new EnrollError('NOT_A_CONTROL_PLANE', `${base.href} has no enrollment endpoint (HTTP 404 on ${new URL(PREFLIGHT_PATH.slice(1), base).href}): ${consolePathAdvice(base)}`);
  }
  if (response.status !== 200) throw controlPlaneRefusal(response, 'install', token, 'the preflight check');
  const parsed = preflightResponseSchema.safeParse(response.body);
  if (!parsed.success || parsed.data.product !== PRODUCT) {
    throw new EnrollError('NOT_A_CONTROL_PLANE', `${base.href} did not answer like a Zenova control plane: ${consolePathAdvice(base)}`);
  }
  const preflight = parsed.data;
  if (!isCompatibleProtocol(preflight.protocolVersion)) {
    throw new EnrollError(
      'PROTOCOL_INCOMPATIBLE',
      `${describeProtocolMismatch(PROTOCOL_VERSION, preflight.protocolVersion)}: install the node package of the control plane's version (${quote(preflight.version, token)})`,
    );
  }
  // The server read its clock somewhere between our send and receive; the midpoint halves the error.
  const skew = preflight.serverTimeMs - (sentAt + receivedAt) / 2;
  if (Math.abs(skew) > MAX_CLOCK_SKEW_MS) {
    throw new EnrollError(
      'CLOCK_SKEW',
      `this host's clock is ${formatDuration(skew)} ${skew > 0 ? 'behind' : 'ahead of'} the control plane's (at most ${MAX_CLOCK_SKEW_MS / 1000} s allowed): sync the clock (e.g. \`timedatectl set-ntp true\`) and try again`,
    );
  }
  return preflight;
}

/** The issue time a ZN_ERR_CP_TOKEN_SUPERSEDED message names; only a timestamp is taken from the server's text. */
function replacedAtIn(serverMessage: string): Pick<TokenErrorDetails, 'replacedAt'> {
  const at = /issued at (\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,3})?Z)/.exec(serverMessage)?.[1];
  return at !== undefined && Number.isFinite(Date.parse(at)) ? { replacedAt: at } : {};
}

/** A non-200 answer of the control plane's token API as one operator line (never the token). */
export function controlPlaneRefusal(response: JsonResponse, mode: TokenUse, token: string, what: string, installed?: NodeIdentity): EnrollError {
  const parsed = errorBodySchema.safeParse(response.body);
  const code = parsed.success ? parsed.data.error.code : undefined;
  const serverMessage = parsed.success ? parsed.data.error.message : undefined;
  const retryAfter = Number(response.headers['retry-after']);
  const details: TokenErrorDetails = {
    ...(Number.isFinite(retryAfter) && retryAfter >= 0 ? { retryAfterSeconds: retryAfter } : {}),
    ...(serverMessage !== undefined ? replacedAtIn(serverMessage) : {}),
    ...(installed !== undefined ? { installedNode: { nodeId: installed.nodeId, nodeName: installed.nodeName } } : {}),
  };
  const advice = code === undefined ? undefined : tokenErrorMessage(code, mode, details);
  if (code !== undefined && advice !== undefined) return new EnrollError(code, `${advice} (${code})`);
  const detail = [code, serverMessage === undefined ? undefined : quote(serverMessage, token)].filter((x) => x !== undefined).join(': ');
  return new EnrollError(code ?? `HTTP_${response.status}`, `the control plane refused ${what} with HTTP ${response.status}${detail === '' ? '' : ` (${detail})`}`);
}

/**
 * A failed call to the control plane (proxy, TLS, network) as one operator line; `caFile`: the CA
 * file trusted, if any, named in messages as `caFileName` (the installer's upgrade may trust a file
 * the operator never passed as --ca-file).
 */
export function controlPlaneTransportError(err: unknown, base: URL, caFile: string | undefined, token: string, caFileName = `--ca-file ${caFile}`): EnrollError {
  const host = base.hostname.replace(/^\[|\]$/g, '');
  // The proxy failed, not the control plane: say which proxy and what it answered.
  if (err instanceof ProxyConnectError) {
    return new EnrollError('PROXY', `cannot reach the control plane at ${base.host} through the proxy: ${err.message}; ${proxyAdvice(err, base.host)}`, { cause: err });
  }
  if (err instanceof ProxySettingError) return new EnrollError('PROXY', `${err.message}; fix it, or unset it to connect directly`, { cause: err });
  const kind = classifyTlsFailure(err);
  const explained = explainTlsFailure(kind, {
    what: 'the control plane',
    host,
    address: base.host,
    trustSource: caFile !== undefined ? caFileName : "this host's system trust store",
    trustAdvice:
      caFile !== undefined
        ? `${caFile} is not the CA that signed the control plane's certificate: pass that CA with --ca-file (\`zenova gateway-node install-command NAME --ca-out FILE\` on the control-plane host writes the CA the control plane holds for the node)`
        : "pass --ca-file with the control plane's CA (`zenova gateway-node install-command NAME --ca-out FILE` on the control-plane host writes it; a node created without one gets it set with `PATCH /api/v1/nodes/NAME/network`, docs/api.md)",
  });
  if (explained !== undefined) return new EnrollError(`TLS_${kind.toUpperCase().replace(/-/g, '_')}`, explained, { cause: err });
  return new EnrollError('UNREACHABLE', `cannot reach the control plane at ${base.host}: ${quote((err as Error).message ?? String(err), token)}`, { cause: err });
}
