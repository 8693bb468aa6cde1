/**
 * The node's status as `zenova-node status` reports it, read from the state dir only (the serving
 * process mirrors its control link and the config it serves into control-status.json; a deletion
 * or a revoked credential is also read from the credit lease book it refuses callers by: node-deletion.ts).
 */
import { highestFor, loadAppliedVersion } from '../config/applied-version.js';
import { olderConfigWarning, previousEnrollmentWarning } from '../config/enrolled-config.js';
import { describeSkew, skewFromAnchor } from '../control/control-plane-time.js';
import { loadControlStatus } from '../control/control-status.js';
import type { ConfigStatusRecord, ControlStatusRecord, SpoolStatusRecord } from '../control/control-status.js';
import { needsOperator } from '../control/refusal-advice.js';
import { readSpoolFigures } from '../spool/spool-figures.js';
import type { SpoolFigures } from '../spool/spool-figures.js';
import { spoolProblem } from '../spool/spool-store.js';
import { CREDENTIAL_RENEW_ADVICE, credentialHeldSince, expiresSoon, isExpired, loadCredentials } from '../state/credential-store.js';
import { freeSpaceOf } from '../state/free-space.js';
import type { FreeSpace } from '../state/free-space.js';
import { gatewayTrust, loadIdentity } from '../state/identity.js';
import type { GatewayTrust } from '../state/identity.js';
import { StateFileError } from '../state/state-store.js';
import type { StateStore } from '../state/state-store.js';
import { isProcessAlive } from '../process-alive.js';
import { DELETED_CALLER_CODE, WITHDRAWN_CALLER_CODE, nodeCutOffOf } from './node-deletion.js';
import type { CredentialRevocation, NodeDeletion } from './node-deletion.js';

export interface NodeStatusReport {
  stateDir: string;
  enrolled: boolean;
  node: { id: string; name: string; enrolledAt: string } | null;
  controlPlaneUrl: string | null;
  /** trust: the gateway CA pinned at enrollment, or this host's system trust store. */
  gateway: { target: string; serverName: string; trust: GatewayTrust['kind'] } | null;
  /** expiresSoon: valid, but with less of its life left than rotation allows (CREDENTIAL_RENEW_SHARE): rotation failed. */
  credential: { expiresAt: string; expired: boolean; expiresSoon: boolean } | null;
  control: {
    /** Whether a node-edge process serving this state dir is running; null when control-status.json is unreadable (see error). */
    running: boolean | null;
    pid: number | null;
    /** null when control-status.json is unreadable (see error). */
    connected: boolean | null;
    /** Since when connected, or since when not; null when the node never ran. */
    since: string | null;
    sessionId: string | null;
    /** Since when the running node has been without its control plane; null when connected or not running. */
    disconnectedSince: string | null;
    /** The link's last error; with `resolvedAt` once a session was established after it (history only). */
    lastError: ControlStatusRecord['lastError'];
    updatedAt: string | null;
    /**
     * Why control-status.json could not be read (damaged, unreadable); the link and the served config
     * are then unknown. The node is still enrolled: that file only mirrors the serving process.
     */
    error: string | null;
  };
  /** The config the node serves (as it last said; see control.running); null when it never said. */
  config: ConfigStatusRecord | null;
  /** Set when the served config is older than a version the node already applied (its current.json was damaged). */
  configWarning: string | null;
  /** Set while the served config is the previous enrollment's (re-enrolled while serving, no config from the new control plane yet). */
  previousEnrollmentWarning: string | null;
  /** The request spool (docs/spool.md); null when this state dir has none yet. */
  spool: SpoolFigures | null;
  /**
   * The spool's quota and policy as the serving node last wrote them, `full` judged from the live
   * bytes above against that quota, and (only while node-edge runs) its failing writes; null when
   * never written (absent in reports built elsewhere).
   */
  spoolLimits?: SpoolStatusRecord | null;
  /** Free space in the state dir's filesystem (below minFreeBytes: low; absent in reports built elsewhere). */
  disk?: FreeSpace | null;
  /**
   * This host's clock against the control plane's, from the anchor the serving node took at its
   * last HelloAck: skewMs as of now (positive: this host is ahead), or as measured then when the
   * anchor no longer applies (a reboot); null before the first session (absent in reports built elsewhere).
   */
  clock?: { skewMs: number; measuredAt: string; maxSkewMs: number; skewed: boolean } | null;
  /**
   * The control plane deleted this node (NODE_DELETED): it refuses every caller request with
   * ZN_ERR_NODE_DELETED until it is re-enrolled. From whichever source knows it first: the credit
   * lease book the node refuses by (also right after a restart, before any control session), or the
   * control link's refusal in control-status.json (node-deletion.ts); null when neither says so
   * (absent in reports built elsewhere).
   */
  deleted?: NodeDeletion | null;
  /**
   * The control plane revoked the node's credential and no newer one is saved (CREDENTIAL_REVOKED:
   * the node was re-enrolled on another host): its credit is withdrawn, and it refuses priced
   * requests with ZN_ERR_CREDIT_WITHDRAWN until a control session is established again. From the
   * credit lease book, or the control link's refusal when the book cannot say (node-deletion.ts);
   * null when neither says so, or when the node was deleted (absent in reports built elsewhere).
   */
  credentialRevoked?: CredentialRevocation | null;
}

export async function readNodeStatus(store: StateStore): Promise<NodeStatusReport> {
  const identity = await loadIdentity(store);
  const credentials = await loadCredentials(store);
  const { control, error: controlError } = await readControlStatus(store);
  // A file left by a process that is gone (kill -9, crash) must not claim a live connection.
  const running = control !== undefined && control.serving && isProcessAlive(control.pid);
  const spool = readSpoolFigures(store.dir);
  const cutOff = identity === undefined ? { deleted: null, credentialRevoked: null } : nodeCutOffOf(store.dir, identity.nodeId, control);
  // A credential saved after the revocation: the host was re-enrolled since (the row must not ask for it again).
  const heldSince = credentialHeldSince(store);
  if (cutOff.credentialRevoked !== null && credentials !== undefined && heldSince !== undefined && heldSince > Date.parse(cutOff.credentialRevoked.at)) {
    cutOff.credentialRevoked = { ...cutOff.credentialRevoked, newerCredentialSavedAt: new Date(heldSince).toISOString() };
  }
  return {
    stateDir: store.dir,
    enrolled: identity !== undefined && credentials !== undefined,
    node: identity === undefined ? null : { id: identity.nodeId, name: identity.nodeName, enrolledAt: identity.enrolledAt },
    controlPlaneUrl: identity?.controlPlaneUrl ?? null,
    gateway: identity === undefined
      ? null
      : { target: identity.gateway.target, serverName: identity.gateway.serverName, trust: gatewayTrust(identity.gateway).kind },
    credential:
      credentials === undefined
        ? null
        : { expiresAt: credentials.current.expiresAt, expired: isExpired(credentials.current), expiresSoon: expiresSoon(credentials.current, credentialHeldSince(store)) },
    control: {
      running: controlError === null ? running : null,
      pid: running ? (control?.pid ?? null) : null,
      connected: controlError === null ? running && control.connected : null,
      since: control?.since ?? null,
      sessionId: running && control.connected ? control.sessionId : null,
      disconnectedSince: running && !control.connected ? control.since : null,
      lastError: control?.lastError ?? null,
      updatedAt: control?.updatedAt ?? null,
      error: controlError,
    },
    config: control?.config ?? null,
    configWarning: await olderConfigOf(store, identity, control?.config),
    previousEnrollmentWarning:
      control?.config?.ready === true && control.config.previousEnrollment === true ? previousEnrollmentWarning(control.config.version ?? 0) : null,
    spool,
    spoolLimits: spoolLimitsOf(control, spool, running),
    disk: freeSpaceOf(store.dir),
    clock: clockOf(control),
    deleted: cutOff.deleted,
    credentialRevoked: cutOff.credentialRevoked,
  };
}

function spoolLimitsOf(control: ControlStatusRecord | undefined, spool: SpoolFigures | null, running: boolean): SpoolStatusRecord | null {
  const limits = control?.spool;
  if (limits === undefined) return null;
  // Failing writes are the running process's; the fill is judged now, from the file.
  const full = spool !== null && spool.error === null ? spool.bytes >= limits.quotaBytes : limits.full;
  return { ...limits, full, writeFailing: running ? limits.writeFailing : null };
}

/** control-status.json, or why it is unreadable: only a mirror of the serving process, so the rest of the report stands without it. */
async function readControlStatus(store: StateStore): Promise<{ control: ControlStatusRecord | undefined; error: string | null }> {
  try {
    return { control: await loadControlStatus(store), error: null };
  } catch (err) {
    if (!(err instanceof StateFileError)) throw err;
    return { control: undefined, error: err.message };
  }
}

function clockOf(control: ControlStatusRecord | undefined): NodeStatusReport['clock'] {
  const clock = control?.clock;
  if (clock === undefined) return null;
  const skewMs = Math.round(skewFromAnchor(clock) ?? clock.skewMs);
  return { skewMs, measuredAt: clock.measuredAt, maxSkewMs: clock.maxSkewMs, skewed: Math.abs(skewMs) > clock.maxSkewMs };
}

/** The warning when the served config is older than config-applied-version.json says the node applied. */
async function olderConfigOf(store: StateStore, identity: Awaited<ReturnType<typeof loadIdentity>>, config: ConfigStatusRecord | undefined): Promise<string | null> {
  if (identity === undefined || config?.ready !== true || config.version === null) return null;
  let highest: number;
  try {
    highest = highestFor(await loadAppliedVersion(store), { nodeId: identity.nodeId, publicKeyPem: identity.configSigningPublicKeyPem });
  } catch (err) {
    return (err as Error).message;
  }
  return config.version < highest ? olderConfigWarning(config.version, highest) : null;
}

/** `3h 4m`, `5m 12s`, `42s`: how long since `iso`, for people. */
export function formatElapsed(iso: string, now = Date.now()): string {
  const seconds = Math.max(0, Math.floor((now - Date.parse(iso)) / 1000));
  const [d, h, m, s] = [Math.floor(seconds / 86_400), Math.floor(seconds / 3600) % 24, Math.floor(seconds / 60) % 60, seconds % 60];
  if (d > 0) return `${d}d ${h}h`;
  if (h > 0) return `${h}h ${m}m`;
  if (m > 0) return `${m}m ${s}s`;
  return `${s}s`;
}

/** `12.3 MiB`, `512 B`: a size for people. */
export function formatBytes(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${bytes} B` : `${value.toFixed(1)} ${units[unit]}`;
}

/** What `zenova-node status` advises for a spool.db it cannot read ("disk I/O error" alone says nothing of what to do). */
export const UNREADABLE_SPOOL_ADVICE = 'run `zenova-node doctor`';

/** What `zenova-node status` advises for a state dir without a node. */
export const NOT_ENROLLED_ADVICE = 'run `zenova-node enroll`';

/**
 * What to do with a state dir that holds a node's identity but no credential: enroll refuses to
 * replace an identity without --reenroll, which takes a reenroll token, not the install token.
 */
export function reenrollAdvice(nodeName: string, stateDir: string): string {
  return `re-enroll it: \`zenova-node enroll --reenroll --state-dir ${stateDir} …\` with a token from \`zenova gateway-node reenroll-command ${nodeName}\` on the control plane`;
}

/**
 * The report as aligned text lines for a terminal. `notEnrolledAdvice`: what to do when the state
 * dir holds no node, in the words of the command printing it (the host CLI's `zenova status` has
 * its own: zenova-node is not on an installed host's PATH). Without it, zenova-node's own: enroll,
 * or re-enroll when the dir still holds an identity; and for a spool it cannot read, doctor (which
 * names what serve would refuse in it).
 */
export function formatNodeStatus(report: NodeStatusReport, notEnrolledAdvice?: string): string {
  const lines: string[] = [];
  const row = (label: string, value: string): void => {
    lines.push(`${`${label}:`.padEnd(15)}${value}`);
  };
  if (!report.enrolled || report.node === null) {
    const { node } = report;
    if (node !== null && notEnrolledAdvice === undefined) {
      row('node', `not enrolled (${report.stateDir}: node ${node.name} (id ${node.id}) has no credential.json); ${reenrollAdvice(node.name, report.stateDir)}`);
    } else {
      row('node', `not enrolled (${report.stateDir}); ${notEnrolledAdvice ?? NOT_ENROLLED_ADVICE}`);
    }
    return `${lines.join('\n')}\n`;
  }
  row('node', `${report.node.name} (id ${report.node.id}), enrolled ${report.node.enrolledAt}`);
  row('control plane', report.controlPlaneUrl ?? '-');
  if (report.gateway !== null) {
    row('gateway', `${report.gateway.target} (certificate name ${report.gateway.serverName})`);
    row('gateway trust', report.gateway.trust === 'pinned-ca' ? 'pinned CA (saved at enrollment)' : 'system trust store (no CA pinned at enrollment)');
  }
  const deleted = report.deleted ?? null;
  const revoked = deleted === null ? (report.credentialRevoked ?? null) : null;
  // A revoked credential is said by its own row below: "valid until" would contradict it.
  if (report.credential !== null && revoked === null) {
    const { credential } = report;
    row(
      'credential',
      credential.expired
        ? `EXPIRED at ${credential.expiresAt}; re-enroll this node`
        : credential.expiresSoon
          ? `EXPIRES SOON: valid until ${credential.expiresAt} (${formatElapsed(new Date().toISOString(), Date.parse(credential.expiresAt))} left); ${CREDENTIAL_RENEW_ADVICE}`
          : `valid until ${credential.expiresAt}`,
    );
  }
  const { control } = report;
  if (control.error !== null) {
    row(
      'control link',
      `UNKNOWN: ${control.error}; the link's state and the served config are unknown until node-edge rewrites this file (when it starts and when the link changes)`,
    );
  } else if (!control.running) {
    row('node-edge', control.updatedAt === null ? 'has not run with this state dir' : `not running (last seen ${control.updatedAt})`);
  } else {
    row('node-edge', `running (pid ${control.pid ?? '?'})`);
    row(
      'control link',
      control.connected
        ? `connected since ${control.since ?? '?'}${control.sessionId !== null ? ` (session ${control.sessionId})` : ''}`
        : `not connected since ${control.since ?? '?'}${control.since !== null ? ` (${formatElapsed(control.since)})` : ''}`,
    );
  }
  if (deleted !== null) {
    row('deleted', `DELETED in the control plane (${deleted.code} at ${deleted.at}): every caller request is refused with ${DELETED_CALLER_CODE}`);
    row('what to do', deleted.advice);
  }
  if (revoked !== null) {
    const refused = `priced requests are refused with ${WITHDRAWN_CALLER_CODE} (requests that cost nothing are still served) until a control session is established again`;
    if (revoked.newerCredentialSavedAt !== undefined) {
      row('credential', `REVOKED by the control plane (${revoked.code} at ${revoked.at}), and a new credential was saved since (${revoked.newerCredentialSavedAt}, a re-enrollment on this host): its credit stays withdrawn and ${refused} with it`);
      row('what to do', control.running === true ? 'nothing: node-edge takes the new credential by itself; the withdrawal is lifted at its first control session' : 'start node-edge: the withdrawal is lifted at its first control session with the new credential');
    } else {
      row('credential', `REVOKED by the control plane (${revoked.code} at ${revoked.at}; a re-enrollment of this node on another host does this): its credit is withdrawn, ${refused}`);
      row('what to do', revoked.advice);
    }
  }
  const { config } = report;
  if (config !== null) {
    const lastSeen = control.running ? '' : ' (when node-edge last ran)';
    if (config.ready) {
      row('config', `version ${config.version ?? '?'}${config.appliedAt !== null ? `, applied ${config.appliedAt}` : ''}${lastSeen}`);
      if (report.configWarning !== null) row('config', `OLDER THAN APPLIED: ${report.configWarning}`);
      if (report.previousEnrollmentWarning !== null) row('config', `PREVIOUS ENROLLMENT: ${report.previousEnrollmentWarning}`);
    } else {
      row('config', `NOT READY: ${config.notReadyReason ?? 'no verified config'}${lastSeen}`);
    }
  }
  const { spool } = report;
  const limits = report.spoolLimits ?? null;
  if (spool !== null) {
    const quota = limits !== null ? ` of quota ${formatBytes(limits.quotaBytes)} (policy ${limits.fullPolicy})` : '';
    // The file never shrinks: its size tells disk use when far above the live bytes.
    const file = spool.fileBytes - spool.bytes >= 1024 * 1024 ? `; the file takes ${formatBytes(spool.fileBytes)} on disk (free pages are reused)` : '';
    row(
      'spool',
      spool.error !== null
        ? `UNREADABLE: ${spool.error}${notEnrolledAdvice === undefined ? `; ${UNREADABLE_SPOOL_ADVICE}` : ''}`
        : `${formatBytes(spool.bytes)}${quota}, backlog ${spool.backlog} record${spool.backlog === 1 ? '' : 's'} not yet delivered${spool.open > 0 ? `, ${spool.open} open` : ''}${file}`,
    );
  }
  if (limits !== null) {
    const problem = spoolProblem(limits);
    if (limits.writeFailing !== null) row('spool', `WRITES FAILING: ${problem ?? ''}`);
    else if (problem !== undefined) row('spool', `FULL (quota ${formatBytes(limits.quotaBytes)}): ${problem}`);
  }
  const { disk } = report;
  if (disk !== undefined && disk !== null && disk.low) {
    row(
      'disk',
      `LOW: ${formatBytes(disk.freeBytes)} free in ${report.stateDir}'s filesystem (below ${formatBytes(disk.minFreeBytes)}); the spool cannot be written once it is full, and new requests are then refused (ZN_ERR_SPOOL_FULL): free space there`,
    );
  }
  const { clock } = report;
  if (clock !== undefined && clock !== null) {
    const against = `${describeSkew(clock.skewMs)} the control plane's (anchored at the HelloAck of ${clock.measuredAt})`;
    row(
      'clock',
      clock.skewed
        ? `SKEWED: this host's clock is ${against}, more than the ${clock.maxSkewMs / 1000} s allowed; expiries are judged by the control plane's time: sync this host's clock (e.g. \`timedatectl set-ntp true\`)`
        : `in step: ${against}`,
    );
  }
  const { lastError } = control;
  if (lastError !== null) {
    // A past outage is history once the link came back: no advice for a problem that is over.
    const resolved = lastError.resolvedAt !== undefined || control.connected;
    const when = lastError.resolvedAt !== undefined ? ` (resolved at ${lastError.resolvedAt})` : resolved ? ' (resolved)' : '';
    row(resolved ? 'past error' : 'last error', `${lastError.code} at ${lastError.at}${when}: ${lastError.message}`);
    // "Keeps serving and reconnects by itself" is false of a stopped node; an operator's task is not.
    // Nor is it of a deleted node, which serves nobody, or of one whose credential was revoked, which
    // no reconnect cures: their advice (above) is the one that counts.
    if (!resolved && lastError.advice !== undefined && deleted === null && revoked === null) {
      if (control.running === true || needsOperator(lastError.code)) row('what to do', lastError.advice);
      else if (control.running === false) row('what to do', 'node-edge is not running: start it (it reconnects by itself once running)');
    }
  }
  return `${lines.join('\n')}\n`;
}
