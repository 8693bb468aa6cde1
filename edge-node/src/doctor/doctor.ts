/**
 * `zenova-node doctor`: read-only checks of the state directory and of the gateway connection, each
 * with a verdict and, when it fails, what to do.
 */
import { constants } from 'node:fs';
import { access, stat } from 'node:fs/promises';
import path from 'node:path';
import { APPLIED_VERSION_FILE } from '../config/applied-version.js';
import { BundleCache } from '../config/bundle-cache.js';
import { olderConfigWarning } from '../config/enrolled-config.js';
import { readStartupCache } from '../config/startup-cache.js';
import type { StartupCache } from '../config/startup-cache.js';
import { CONTROL_STATUS_FILE, loadControlStatus } from '../control/control-status.js';
import { gatewayProxy } from '../control/gateway-channel.js';
import { probeTcp, probeTls } from '../control/gateway-probe.js';
import { needsOperator } from '../control/refusal-advice.js';
import type { ProxyServer } from '../net/proxy-policy.js';
import { CREDENTIAL_FILE, CREDENTIAL_RENEW_ADVICE, credentialHeldSince, expiresSoon, isExpired, loadCredentials } from '../state/credential-store.js';
import { freeSpaceOf } from '../state/free-space.js';
import { IDENTITY_FILE, describeGatewayTrust, gatewayTrust, loadIdentity } from '../state/identity.js';
import type { NodeIdentity } from '../state/identity.js';
import { checkWritable, openStateStore, StateAccessDeniedError, StateDirPathError } from '../state/state-store.js';
import type { StateStore } from '../state/state-store.js';
import { createLogger } from '../logger.js';
import { formatBytes } from '../status/node-status.js';
import { explainTlsFailure } from '../tls/tls-failure.js';
import { checkLeaseBook } from './lease-book-check.js';
import { checkSpool } from './spool-check.js';
import { expiryWarning, readCallerTls } from '../tls/caller-tls.js';
import type { CallerTlsFiles } from '../tls/caller-tls.js';

const PROBE_TIMEOUT_MS = 5_000;

export interface DoctorCheck {
  ok: boolean;
  /** What was checked, e.g. "state dir /var/lib/zenova-node (mode 0700)". */
  label: string;
  /** Why it failed and what to do; only when !ok. */
  advice?: string;
}

function octal(mode: number): string {
  return `0${(mode & 0o777).toString(8).padStart(3, '0')}`;
}

async function checkMode(file: string, expected: number, what: string, required: boolean): Promise<DoctorCheck | undefined> {
  let mode: number;
  try {
    mode = (await stat(file)).mode & 0o777;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' && !required) return undefined;
    if (code === 'EACCES' || code === 'EPERM') return { ok: false, label: `${what} ${file}`, advice: new StateAccessDeniedError(file).message.slice(file.length + 2) };
    return { ok: false, label: `${what} ${file}`, advice: `cannot read it (${code ?? (err as Error).message})` };
  }
  if ((mode & 0o077) !== 0) {
    return { ok: false, label: `${what} ${file} (mode ${octal(mode)})`, advice: `only the node's user may access it: chmod ${octal(expected).slice(1)} ${file}` };
  }
  return { ok: true, label: `${what} ${file} (mode ${octal(mode)})` };
}

/** The state dir's and gateway's checks, then (given its files) the caller port's certificate. */
export async function runDoctor(stateDir: string, opts: { tls?: CallerTlsFiles; now?: Date } = {}): Promise<DoctorCheck[]> {
  const checks = await checkStateAndGateway(stateDir);
  if (opts.tls !== undefined) checks.push(checkCallerTls(opts.tls, opts.now ?? new Date()));
  return checks;
}

/**
 * The caller port's pair as serve reads it: the key is the certificate's, and it is valid for at
 * least EXPIRY_WARNING_DAYS more days (serve still starts with fewer, warning; doctor says renew).
 */
export function checkCallerTls(files: CallerTlsFiles, now: Date): DoctorCheck {
  let pair;
  try {
    pair = readCallerTls(files, now);
  } catch (err) {
    return {
      ok: false,
      label: `caller TLS certificate ${files.certFile} and key ${files.keyFile}`,
      advice: `${(err as Error).message}; serve refuses to start with it: put a valid PEM certificate and its unencrypted key there (docs/install.md, HTTPS for callers), then restart node-edge`,
    };
  }
  const label = `caller TLS certificate ${files.certFile}: key ${files.keyFile} matches, valid until ${pair.notAfter.toISOString()} (${pair.daysLeft} day${pair.daysLeft === 1 ? '' : 's'} left)`;
  const warning = expiryWarning(pair, files.certFile);
  return warning === undefined ? { ok: true, label } : { ok: false, label, advice: warning };
}

/** True when any of `files` exists (or cannot be stat'ed for another reason than its absence). */
async function anyExists(files: readonly string[]): Promise<boolean> {
  for (const file of files) {
    try {
      await stat(file);
      return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') return true;
    }
  }
  return false;
}

/** A state file that cannot be used: re-enroll when it is damaged; not when only permission was missing. */
function unreadableAdvice(err: unknown): string {
  return err instanceof StateAccessDeniedError ? err.message : `${(err as Error).message}; re-enroll with --reenroll`;
}

async function checkStateAndGateway(stateDir: string): Promise<DoctorCheck[]> {
  const checks: DoctorCheck[] = [];
  let store: StateStore;
  try {
    store = await openStateStore(stateDir, { create: false });
    // Run as another user than the node's, every file would fail "cannot read it": one line that
    // says so, not advice to re-enroll a healthy node.
    await access(store.dir, constants.R_OK | constants.X_OK).catch((err: unknown) => {
      const code = (err as NodeJS.ErrnoException).code;
      throw code === 'EACCES' || code === 'EPERM' ? new StateAccessDeniedError(store.dir, { cause: err }) : err;
    });
  } catch (err) {
    if (err instanceof StateAccessDeniedError) return [{ ok: false, label: `state dir ${path.resolve(stateDir)}`, advice: err.message }];
    // Never a state dir (under /proc, /sys, /dev): enroll refuses it too, so no advice to enroll there.
    if (err instanceof StateDirPathError) return [{ ok: false, label: `state dir ${path.resolve(stateDir)}`, advice: `${err.message}; pass --state-dir with the node's state directory` }];
    return [{ ok: false, label: `state dir ${path.resolve(stateDir)}`, advice: `${(err as Error).message}; enroll with \`zenova-node enroll --state-dir ${stateDir} …\`` }];
  }
  const dirCheck = await checkMode(store.dir, 0o700, 'state dir', true);
  // One the node's user may read but not write (another user's dir, a read-only mount): serve's own
  // check and words, since serve refuses to start there however good its modes and files look.
  const unwritable = await checkWritable(store).then(
    () => undefined,
    (err: unknown) => (err as Error).message,
  );
  if (dirCheck !== undefined && (dirCheck.ok !== true || unwritable === undefined)) checks.push(dirCheck);
  if (unwritable !== undefined) {
    checks.push({ ok: false, label: dirCheck?.ok === true ? dirCheck.label : `state dir ${store.dir} writable`, advice: `\`serve\` refuses to start: ${unwritable}` });
  }
  if (!(await anyExists([store.path(IDENTITY_FILE), store.path(CREDENTIAL_FILE)]))) {
    // Never enrolled: one finding with the one thing to do, not a missing file per check and
    // advice to re-enroll what never was.
    checks.push({
      ok: false,
      label: `identity: ${store.dir} is not enrolled (no ${IDENTITY_FILE}, no ${CREDENTIAL_FILE})`,
      advice: `enroll it: \`zenova-node enroll --control-plane URL --token-file FILE --state-dir ${stateDir}\` with the token of the install command (\`zenova gateway-node install-command NAME\` on the control plane)`,
    });
    checks.push(checkFreeSpace(store.dir));
    return checks;
  }
  for (const [name, required] of [[IDENTITY_FILE, true], [CREDENTIAL_FILE, true], [CONTROL_STATUS_FILE, false], [APPLIED_VERSION_FILE, false]] as const) {
    const check = await checkMode(store.path(name), 0o600, 'file', required);
    if (check !== undefined) checks.push(check);
  }

  let identity: NodeIdentity | undefined;
  try {
    identity = await loadIdentity(store);
    checks.push(
      identity === undefined
        ? { ok: false, label: 'identity', advice: 'this state dir is not enrolled: run `zenova-node enroll`' }
        : { ok: true, label: `identity: node ${identity.nodeName} (${identity.nodeId})` },
    );
  } catch (err) {
    checks.push({ ok: false, label: 'identity', advice: unreadableAdvice(err) });
  }

  try {
    const credentials = await loadCredentials(store);
    if (credentials === undefined) {
      checks.push({ ok: false, label: 'credential', advice: 'no credential.json: re-enroll with `zenova-node enroll --reenroll`' });
    } else if (isExpired(credentials.current)) {
      checks.push({
        ok: false,
        label: `credential expired at ${credentials.current.expiresAt}`,
        advice: 're-enroll: on the control plane run `zenova gateway-node reenroll-command NAME`, then run the printed command here',
      });
    } else if (expiresSoon(credentials.current, credentialHeldSince(store))) {
      checks.push({ ok: false, label: `credential valid until ${credentials.current.expiresAt}, less than rotation leaves`, advice: CREDENTIAL_RENEW_ADVICE });
    } else {
      checks.push({ ok: true, label: `credential valid until ${credentials.current.expiresAt}` });
    }
  } catch (err) {
    checks.push({ ok: false, label: 'credential', advice: unreadableAdvice(err) });
  }

  checks.push(await checkControlRefusal(store));
  checks.push(checkFreeSpace(store.dir));
  if (identity !== undefined) checks.push(await checkSpool(store, identity.nodeId));
  if (identity !== undefined) checks.push(checkLeaseBook(store));
  if (identity !== undefined) checks.push(...(await checkConfigCache(store, identity)));
  if (identity !== undefined) checks.push(...(await checkGateway(identity)));
  return checks;
}

/**
 * The control plane's last answer as the serving node mirrored it (control-status.json): a refusal
 * no reconnect cures (credential revoked or expired, node deleted, …) fails with status's advice,
 * though the local credential and the gateway's TLS look fine.
 */
async function checkControlRefusal(store: StateStore): Promise<DoctorCheck> {
  const label = `control plane accepts this node (${store.path(CONTROL_STATUS_FILE)})`;
  let control;
  try {
    control = await loadControlStatus(store);
  } catch (err) {
    return { ok: false, label, advice: `${(err as Error).message}; node-edge rewrites it when it starts and when the link changes` };
  }
  if (control === undefined) return { ok: true, label: `control plane: no answer recorded yet (${store.path(CONTROL_STATUS_FILE)} is written by the running node-edge)` };
  const lastError = control.lastError;
  // As status: an error the link recovered from is history.
  if (lastError === null || lastError.resolvedAt !== undefined || control.connected || !needsOperator(lastError.code)) return { ok: true, label };
  return {
    ok: false,
    label: `${label}: refused with ${lastError.code} at ${lastError.at}`,
    advice: lastError.advice ?? `${lastError.message}; \`zenova-node status\` shows the control link`,
  };
}

/** The spool stops being written (every new request refused) when the state dir's filesystem is full. */
function checkFreeSpace(dir: string): DoctorCheck {
  let free;
  try {
    free = freeSpaceOf(dir);
  } catch (err) {
    return { ok: false, label: `free space in ${dir}'s filesystem`, advice: `cannot read it (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})` };
  }
  const label = `free space in ${dir}'s filesystem: ${formatBytes(free.freeBytes)} (at least ${formatBytes(free.minFreeBytes)} wanted)`;
  return free.low
    ? { ok: false, label, advice: 'the request spool cannot be written once the filesystem is full, and new requests are then refused (ZN_ERR_SPOOL_FULL): free space there, or move the state dir to a larger filesystem' }
    : { ok: true, label };
}

/**
 * The cache's modes and whether it holds a config the node would serve, loaded as `serve` loads it
 * at start-up (readStartupCache: the applied-version mark and the floor it sets).
 */
async function checkConfigCache(store: StateStore, identity: NodeIdentity): Promise<DoctorCheck[]> {
  const cache = new BundleCache(store.dir);
  const checks: DoctorCheck[] = [];
  for (const [file, mode, what] of [[cache.dir, 0o700, 'config cache dir'], [cache.file('current'), 0o600, 'file'], [cache.file('previous'), 0o600, 'file']] as const) {
    const check = await checkMode(file, mode, what, false);
    if (check !== undefined) checks.push(check);
  }
  let startup: StartupCache;
  try {
    startup = await readStartupCache(store.dir, identity, createLogger({ level: 'silent' }));
  } catch (err) {
    // Serve stops at the same error, so the cache behind it is moot until it is fixed.
    return [...checks, { ok: false, label: `applied config version ${store.path(APPLIED_VERSION_FILE)}`, advice: `\`serve\` refuses to start: ${(err as Error).message}` }];
  }
  const { load, highestApplied } = startup;
  for (const refusal of load.refusals) {
    checks.push({
      ok: false,
      label: `config cache ${refusal.file} verifies`,
      advice:
        refusal.code === 'CONFIG_ROLLED_BACK'
          ? `${refusal.code}: ${refusal.message}` // says itself that nothing is served and what to do
          : `${refusal.code}: ${refusal.message}; the node will not serve it (it falls back to the previous good config, or stays not ready until the control plane pushes one)`,
    });
  }
  const applied = highestApplied > 0 ? ` (this node applied up to version ${highestApplied})` : '';
  if (load.loaded?.olderThanApplied !== undefined) {
    checks.push({
      ok: false,
      label: `config cache: version ${load.loaded.entry.version} in ${load.loaded.file} verifies but is OLDER than version ${load.loaded.olderThanApplied} this node applied`,
      advice: olderConfigWarning(load.loaded.entry.version, load.loaded.olderThanApplied),
    });
  } else if (load.loaded !== undefined) {
    checks.push({ ok: true, label: `config cache: version ${load.loaded.entry.version} in ${load.loaded.file} verifies${applied}` });
  } else if (load.refusals.length === 0) {
    checks.push({ ok: true, label: 'config cache: empty (the node waits for its first config from the control plane)' });
  }
  return checks;
}

async function checkGateway(identity: NodeIdentity): Promise<DoctorCheck[]> {
  const { gateway } = identity;
  const trust = gatewayTrust(gateway).kind;
  const peer = {
    what: 'the gateway',
    host: gateway.serverName,
    address: gateway.target,
    trustSource: describeGatewayTrust(trust),
    trustAdvice: trust === 'pinned-ca'
      ? "the control plane's gateway identity differs from the one this node enrolled with; re-enroll this node"
      : "the control plane pinned no gateway CA, so the CA that issued the gateway's certificate must be in this host's system trust store " +
        '(or in NODE_EXTRA_CA_CERTS of the node service); or set ZENOVA_GATEWAY_TRUST_BUNDLE on the control plane and re-enroll this node',
  };
  // The control link's own route: through the proxy of https_proxy / HTTPS_PROXY unless no_proxy exempts the gateway.
  let proxy: ProxyServer | undefined;
  try {
    proxy = gatewayProxy(gateway);
  } catch (err) {
    return [{ ok: false, label: `gateway ${gateway.target} reachable (proxy setting)`, advice: `${(err as Error).message}; fix it, or unset it to connect directly` }];
  }
  const via = proxy !== undefined ? ` via proxy ${proxy.label} (${proxy.source})` : '';
  const tcpLabel = `gateway ${gateway.target} reachable over TCP${via}`;
  const tcp = await probeTcp(gateway, PROBE_TIMEOUT_MS, proxy);
  if (!tcp.ok) {
    return [{ ok: false, label: tcpLabel, advice: tcp.advice ?? explainTlsFailure(tcp.kind, peer) ?? tcp.message }];
  }
  const checks: DoctorCheck[] = [{ ok: true, label: tcpLabel }];
  const handshake = await probeTls(gateway, PROBE_TIMEOUT_MS, proxy);
  const label = `gateway TLS certificate trusted (${trust === 'pinned-ca' ? 'pinned CA' : 'system trust store'}) and valid for "${gateway.serverName}"${via}`;
  checks.push(handshake.ok ? { ok: true, label } : { ok: false, label, advice: handshake.advice ?? explainTlsFailure(handshake.kind, peer) ?? handshake.message });
  return checks;
}
