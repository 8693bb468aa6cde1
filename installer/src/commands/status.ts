/**
 * `zenova status [--json] [--install-dir D]`: the installed node as the host sees it — identity,
 * control plane and link (from the node's state dir, edge-node/src/status), version (the `current`
 * release), the service's state, readiness (/readyz) and the ingress certificate's expiry, config
 * version, spool and backlog.
 * Exit 0 when a node is installed and enrolled and its `current` names a release that is there, 1 otherwise.
 */
import { readdir, readlink, realpath, stat } from 'node:fs/promises';
import path from 'node:path';
import { request } from 'undici';
import type { Agent } from 'undici';
import { EXPIRY_WARNING_DAYS } from '../../../edge-node/src/tls/caller-tls.js';
import { StateDirMissingError, StateFileError, openStateStore } from '../../../edge-node/src/state/state-store.js';
import { formatNodeStatus, readNodeStatus } from '../../../edge-node/src/status/node-status.js';
import type { NodeStatusReport } from '../../../edge-node/src/status/node-status.js';
import { flagOption, noPositionals, nonEmptyOption, parseOptions, wantsHelp } from '../args.js';
import { EXIT_FAILURE, EXIT_OK } from '../cli-context.js';
import type { CliContext, Command } from '../cli-context.js';
import { realHostEnv } from '../host/host-env.js';
import type { HostEnv } from '../host/host-env.js';
import type { ServiceState } from '../host/service-manager.js';
import { envReplicas, readNodeEnv } from '../install/env-file.js';
import { describeReplicas } from '../install/unit-files.js';
import { DEFAULT_INSTALL_DIR } from '../install/install-dir-rules.js';
import { pathExists } from '../install/path-exists.js';
import { NODE_UNIT, NO_NODE_INSTALLED, installDirFromUnit, installLayout, onHost, releaseOfLink } from '../install/install-layout.js';
import type { InstallLayout } from '../install/install-layout.js';
import { compareReleaseVersions, relinkWords } from '../install/installed-node.js';
import { isPartialReleaseLeftover } from '../install/release-manifest.js';
import { NODE_ENTRYPOINT } from '../package/package-manifest.js';
import { parseListen } from '../install/listen-address.js';
import type { ListenAddress } from '../install/listen-address.js';
import { certificateRefusal, certificateRefusalCode, installedLeaf, installedTlsCertFile, loopbackTlsAgent, servedCertificate } from '../install/node-tls-probe.js';
import type { InstalledTlsCert } from '../install/node-tls-probe.js';
import { installLockHolder } from '../install/install-lock.js';
import { readyzRequestOptions, readyzUrl } from '../install/readiness-wait.js';
import { readUpdateState } from '../install/update-state.js';
import type { UpdateState } from '../install/update-state.js';

const HELP = 'status';
const READYZ_TIMEOUT_MS = 2_000;
const DAY_MS = 24 * 60 * 60_000;

export const STATUS_USAGE = `Usage: zenova status [--json] [--install-dir D]

Shows the gateway node installed on this host: identity, control plane and link, readiness,
version, config version, spool and backlog. --install-dir D reads D instead of the dir the
node-edge service names (an install cut short before its units, outside /opt/zenova-node); while
node-edge.service runs the node in another dir, no node is installed at D.

Exit codes: 0 a node is installed and enrolled (ready or not: the report says), 1 no node is
installed here, it is not enrolled, or its current link is broken (names no release that is
there), 2 bad usage.
`;

export interface InstalledStatus {
  /** node-edge.service is installed (only then does anything run the node). */
  installed: boolean;
  /**
   * A `current` release without node-edge.service: an install cut short before its units (or the
   * units removed by hand). Not `installed`: nothing runs it; `error` says how to recover.
   */
  unfinishedInstall: boolean;
  installDir: string | null;
  /** The release `current` links to; null without the link or when `brokenCurrent` says it is broken. */
  version: string | null;
  /**
   * A `current` link that names no release that is there: `missing-release` (releases/<version>
   * is gone), `outside-releases` (another target than a release in releases/, e.g. edited by hand).
   * `target` is the link as read, never a version; `message` says what is wrong and how to fix it.
   * null when there is no link or it names a release that is there.
   */
  brokenCurrent: { target: string; problem: 'missing-release' | 'outside-releases'; message: string } | null;
  /**
   * node-edge.service and its state. `installDir`, only when `--install-dir` names another dir than
   * the unit's: the dir the unit runs the node in (then `installed` is false: nothing runs D).
   */
  service: { unit: string; state: ServiceState | 'not-installed'; installDir?: string };
  /**
   * How many node-edge processes the unit runs (ZENOVA_NODE_REPLICAS in etc/node.env; 1 without the
   * line); null for a value node-edge refuses; absent when nothing is installed.
   */
  replicas?: number | null;
  /**
   * `certificateRefused`: the node answered TLS but the probe refused its certificate (`reason` says
   * why and what to do), so whether it is ready is unknown. `certificate`: the installed certificate
   * file the probe trusts (null for plain HTTP or an unreadable file), with its days left.
   */
  readiness: {
    /** null when etc/node.env gives no usable ZENOVA_NODE_LISTEN: there is no address to ask (`reason` says so). */
    url: string | null;
    ready: boolean;
    reason: string | null;
    certificateRefused: boolean;
    configVersion: number | null;
    controlPlaneConnected: boolean | null;
    certificate: { file: string; notAfter: string; daysLeft: number } | null;
  } | null;
  /** The state dir's report (identity, link, config, and spool figures where the node writes them). */
  node: NodeStatusReport | null;
  /** The last `--upgrade`'s outcome (data/update-state.json), or null when there was none. */
  lastUpgrade: NonNullable<UpdateState['lastUpgrade']> | null;
  /** An upgrade that was started and never finished (the installer killed midway), or null. */
  upgradeInterrupted: { from: string; to: string; at: string } | null;
  /** An upgrade another run is doing now (it holds the install lock), or null. */
  upgradeRunning: { from: string; to: string; at: string; pid: number } | null;
  error: string | null;
}

interface ReadyzBody {
  ready?: boolean;
  reason?: string;
  configVersion?: number | null;
  controlPlane?: { connected: boolean } | null;
}

/** The installed certificate file's leaf: its end of validity and whole days left (negative once expired). */
function certificateValidity(cert: InstalledTlsCert, now = new Date()): NonNullable<InstalledStatus['readiness']>['certificate'] {
  const notAfter = new Date(installedLeaf(cert.certPem).validTo);
  return { file: cert.file, notAfter: notAfter.toISOString(), daysLeft: Math.floor((notAfter.getTime() - now.getTime()) / DAY_MS) };
}

/** Readiness that cannot be asked (no listen address): shown as UNKNOWN with `reason`. */
function unknownReadiness(reason: string): NonNullable<InstalledStatus['readiness']> {
  return { url: null, ready: false, reason, certificateRefused: false, configVersion: null, controlPlaneConnected: null, certificate: null };
}

/** /readyz of the node on loopback; over https (trusting only its certificate file) when `tls` says so. */
async function readiness(listen: ListenAddress, tls: () => Promise<InstalledTlsCert | undefined>): Promise<InstalledStatus['readiness']> {
  let url = readyzUrl(listen);
  let agent: Agent | undefined;
  let cert: InstalledTlsCert | undefined;
  let certificate: NonNullable<InstalledStatus['readiness']>['certificate'] = null;
  // The certificate file is read before the node is asked: a file that cannot be read or parsed is
  // the operator's to fix, not a node that gave no answer (it was never asked).
  try {
    cert = await tls();
    if (cert !== undefined) certificate = certificateValidity(cert);
  } catch (err) {
    const problem = (err as Error).message;
    return unknownReadiness(cert === undefined ? problem : `the node's TLS certificate ${cert.file} (ZENOVA_NODE_TLS_CERT_FILE) cannot be read as one: ${problem}; fix the file or the setting`);
  }
  try {
    url = readyzUrl(listen, cert !== undefined);
    agent = cert !== undefined ? loopbackTlsAgent(cert.certPem) : undefined;
    const res = await request(url, readyzRequestOptions(READYZ_TIMEOUT_MS, agent));
    const body = (await res.body.json().catch(() => ({}))) as ReadyzBody;
    return { url, ready: res.statusCode === 200, reason: body.reason ?? null, certificateRefused: false, configVersion: body.configVersion ?? null, controlPlaneConnected: body.controlPlane?.connected ?? null, certificate };
  } catch (err) {
    const refused = cert !== undefined ? certificateRefusalCode(err) : undefined;
    if (cert !== undefined && refused !== undefined) {
      const served = await servedCertificate(new URL(url).hostname.replace(/^\[|\]$/g, ''), listen.port, cert.certPem, READYZ_TIMEOUT_MS);
      return { url, ready: false, reason: certificateRefusal(refused, cert, served), certificateRefused: true, configVersion: null, controlPlaneConnected: null, certificate };
    }
    return { url, ready: false, reason: `no answer (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`, certificateRefused: false, configVersion: null, controlPlaneConnected: null, certificate };
  } finally {
    await agent?.close();
  }
}

/** The releases unpacked in releases/ (physical `releasesDir`), newest first; partial leftovers are none. */
async function installedReleases(releasesDir: string): Promise<string[]> {
  const entries = await readdir(releasesDir, { withFileTypes: true }).catch(() => []);
  const names = entries.filter((e) => e.isDirectory() && !isPartialReleaseLeftover(e.name)).map((e) => e.name);
  return names.sort((a, b) => compareReleaseVersions(b, a) ?? b.localeCompare(a));
}

/**
 * `current`'s target when it names no release that is there: a version named by the link is not
 * the release unless releases/<version> is a directory, and another target is no version at all.
 */
async function brokenCurrentLink(hostRoot: string, layout: InstallLayout, target: string): Promise<InstalledStatus['brokenCurrent']> {
  // `releases/..` is the install dir itself, not a release.
  const linked = releaseOfLink(target, layout);
  const named = linked === '.' || linked === '..' ? undefined : linked;
  if (named !== undefined && (await stat(onHost(hostRoot, layout.releaseDir(named))).then((s) => s.isDirectory(), () => false))) return null;
  const releases = await installedReleases(onHost(hostRoot, layout.releases));
  const relink = relinkWords(layout, releases);
  if (named !== undefined) {
    return { target, problem: 'missing-release', message: `${layout.current} links to ${target}, but release ${named} is not there (removed?): node-edge cannot start from it; ${relink}` };
  }
  return { target, problem: 'outside-releases', message: `${layout.current} links to ${target}, not to a release in ${layout.releases}, so the version is unknown; ${relink}` };
}

/**
 * Whether `dir` holds what an install cut short before its units were written leaves: the `current`
 * link, or a node identity (its token used).
 */
async function holdsUnfinishedInstall(hostRoot: string, dir: string): Promise<boolean> {
  const layout = installLayout(dir);
  return (await readlink(onHost(hostRoot, layout.current)).then(() => true, () => false)) || (await pathExists(onHost(hostRoot, `${layout.data}/identity.json`)));
}

/** `/opt/zenova-node/`, `/opt//zenova-node` → `/opt/zenova-node`. */
function normalDir(dir: string): string {
  return path.posix.normalize(dir).replace(/(.)\/+$/, '$1');
}

/**
 * Whether `a` and `b` name the same dir on the host: the same path once normalised, or the same
 * dir reached through a symbolic link or a relative path (both there).
 */
async function sameDir(hostRoot: string, a: string, b: string): Promise<boolean> {
  if (normalDir(a) === normalDir(b)) return true;
  const real = (dir: string): Promise<string | undefined> => realpath(onHost(hostRoot, dir)).catch(() => undefined);
  const [realA, realB] = await Promise.all([real(a), real(b)]);
  return realA !== undefined && realA === realB;
}

/** `--install-dir D` where node-edge.service runs the node in `unitDir`: nothing is installed at D (its service is the other dir's). */
function otherDirMessage(dir: string, unitDir: string): string {
  return `no gateway node is installed at ${dir}: ${NODE_UNIT} runs the node in ${unitDir}, not in ${dir} (leave out --install-dir, or give --install-dir ${unitDir}, to see it)`;
}

export async function readInstalledStatus(host: HostEnv, installDirOption?: string): Promise<InstalledStatus> {
  const unit = await host.services.readUnit(NODE_UNIT);
  // node-edge.service names its dir: a D other than that one is not what it runs, so neither its
  // state nor `installed` is D's, and D's files (a re-enroll advice for a missing data/, say)
  // are not read as the installed node's.
  const unitDir = unit === undefined ? undefined : installDirFromUnit(unit);
  if (installDirOption !== undefined && unitDir !== undefined && !(await sameDir(host.hostRoot, installDirOption, unitDir))) {
    const service = { unit: NODE_UNIT, state: await host.services.state(NODE_UNIT), installDir: unitDir };
    return { installed: false, unfinishedInstall: false, installDir: installDirOption, version: null, brokenCurrent: null, service, readiness: null, node: null, lastUpgrade: null, upgradeInterrupted: null, upgradeRunning: null, error: otherDirMessage(installDirOption, unitDir) };
  }
  // Without a unit nothing names the dir; an install killed before writing its units left its
  // release and identity in the default dir, which is read then rather than reported as nothing.
  const unfinishedDefault = installDirOption === undefined && unit === undefined && (await holdsUnfinishedInstall(host.hostRoot, DEFAULT_INSTALL_DIR));
  const dir = installDirOption ?? (unit === undefined ? (unfinishedDefault ? DEFAULT_INSTALL_DIR : undefined) : unitDir);
  const service = { unit: NODE_UNIT, state: unit === undefined ? ('not-installed' as const) : await host.services.state(NODE_UNIT) };
  if (dir === undefined) {
    return { installed: false, unfinishedInstall: false, installDir: null, version: null, brokenCurrent: null, service, readiness: null, node: null, lastUpgrade: null, upgradeInterrupted: null, upgradeRunning: null, error: NO_NODE_INSTALLED };
  }
  const layout = installLayout(dir);
  const target = await readlink(onHost(host.hostRoot, layout.current)).catch(() => undefined);
  // The installer links `current` to releases/<version>; another target (edited by hand), or a
  // release that is gone, names no version: the link's target is never reported as the release.
  const brokenCurrent = target === undefined ? null : await brokenCurrentLink(host.hostRoot, layout, target);
  const version = target === undefined || brokenCurrent !== null ? null : releaseOfLink(target, layout) ?? null;
  const env = await readNodeEnv(onHost(host.hostRoot, layout.envFile));
  const listenSetting = env.ZENOVA_NODE_LISTEN;
  const listen = parseListen(listenSetting ?? '');
  let node: NodeStatusReport | null = null;
  let error: string | null = null;
  let stateDirMissing = false;
  try {
    node = await readNodeStatus(await openStateStore(onHost(host.hostRoot, layout.data), { create: false }));
  } catch (err) {
    if (!(err instanceof StateDirMissingError || err instanceof StateFileError)) throw err;
    error = err.message;
    stateDirMissing = err instanceof StateDirMissingError;
  }
  const updates = await readUpdateState(host.hostRoot, layout);
  const inProgress = updates?.inProgress === undefined ? undefined : { from: updates.inProgress.from, to: updates.inProgress.to, at: updates.inProgress.at };
  // An in-progress record is only an interrupted upgrade once no live run holds the install lock.
  const runningPid = inProgress === undefined ? undefined : await installLockHolder(host.hostRoot);
  // Neither the unit nor a current release: nothing is installed, whatever data/ holds. An install
  // that failed and was rolled back keeps data/ with the node's identity (install.md), and is
  // recovered with --reenroll. A release without the unit is not installed either (nothing runs
  // it; scripts read `installed`), but its install dir is reported.
  const installed = unit !== undefined;
  const unfinishedInstall = unit === undefined && target !== undefined;
  // No unit: what is there is left over (a rolled-back install's data/, or an install cut short
  // before its units), also with a current release. Without data/ there is nothing left over
  // either: "no gateway node is installed at D", not the state store's "the state directory D/data
  // does not exist".
  if (unit === undefined && (error === null || stateDirMissing)) error = leftoverDataMessage(dir, node, version ?? undefined, brokenCurrent !== null);
  let readinessRow: InstalledStatus['readiness'] = null;
  if (listen !== undefined) readinessRow = await readiness(listen, () => installedTlsCertFile(host.hostRoot, layout));
  else if (installed || unfinishedInstall) readinessRow = unknownReadiness(`ZENOVA_NODE_LISTEN in ${layout.envFile} ${listenSetting === undefined ? 'is missing' : 'is not HOST:PORT'} (node-edge cannot start)`);
  return {
    installed,
    unfinishedInstall,
    installDir: dir,
    version,
    brokenCurrent,
    service,
    // The unit's default when the line is missing (unit-files.ts).
    replicas: env.ZENOVA_NODE_REPLICAS === undefined ? 1 : envReplicas(env) ?? null,
    readiness: readinessRow,
    node,
    lastUpgrade: updates?.lastUpgrade ?? null,
    upgradeInterrupted: inProgress !== undefined && runningPid === undefined ? inProgress : null,
    upgradeRunning: inProgress !== undefined && runningPid !== undefined ? { ...inProgress, pid: runningPid } : null,
    error,
  };
}

/**
 * The JSON form: the status as read, except that an unreadable spool's counts are null, not the
 * 0 the node's report carries with its error (a backlog of 0 would read as "all delivered").
 */
export function statusJson(status: InstalledStatus): unknown {
  const spool = status.node?.spool;
  if (status.node === null || spool === null || spool === undefined || spool.error === null) return status;
  return { ...status, node: { ...status.node, spool: { ...spool, backlog: null, open: null } } };
}

/**
 * An installed node (its unit in place) without a node identity or credential: lost or damaged.
 * The install command is refused there (NODE-INSTALLED); a re-enroll restores the node.
 */
function installedNotEnrolledAdvice(name: string | undefined): string {
  return `re-enroll it: \`zenova gateway-node reenroll-command ${name ?? 'NAME'}\` prints the \`--reenroll\` command to run here (the install command is refused while node-edge.service is installed)`;
}

/**
 * A dir with no node-edge.service: nothing is installed, perhaps a failed install's kept data/, or
 * an install cut short before its units (`release`: the release its `current` links to;
 * `brokenLink`: a `current` that names none that is there).
 */
function leftoverDataMessage(dir: string, node: NodeStatusReport | null, release: string | undefined, brokenLink: boolean): string {
  const name = node?.node?.name;
  if (name === undefined && release === undefined && !brokenLink) return `no gateway node is installed at ${dir} (no node-edge service, no current release)`;
  // Cut short before its enrollment: no identity to re-enroll (--reenroll refuses), the install command runs again there.
  if (name === undefined) return `${NO_NODE_INSTALLED}; ${dir} holds ${release === undefined ? 'a broken current link' : `release ${release}`} from an install that did not finish, without a node identity: run its install command again`;
  return `${NO_NODE_INSTALLED}; ${dir} keeps the data of node ${name} from an install that did not finish: run its install command with --reenroll (\`zenova gateway-node reenroll-command ${name}\` prints it)`;
}

/** A node's identity without its credential where node-edge.service is not installed: the reenroll installs it again (the install command is refused: NODE-DATA-EXISTS). */
function unfinishedInstallAdvice(name: string | undefined): string {
  if (name === undefined) return `${NODE_UNIT} is not installed and there is no node identity to re-enroll: run the install command again`;
  return `re-enroll it: \`zenova gateway-node reenroll-command ${name}\` prints the \`--reenroll\` command to run here (${NODE_UNIT} is not installed: it installs the node again around the kept data/)`;
}

/** The installed certificate's expiry; within EXPIRY_WARNING_DAYS (node-edge's warning) a warning, not a failure. */
function ingressCertificateRow(c: NonNullable<NonNullable<InstalledStatus['readiness']>['certificate']>): string {
  const days = `${c.daysLeft} day${c.daysLeft === 1 ? '' : 's'} left`;
  if (c.daysLeft < 0) return `EXPIRED: ${c.file} expired on ${c.notAfter}: renew it, replace the files and \`systemctl reload node-edge\``;
  if (c.daysLeft < EXPIRY_WARNING_DAYS) return `RENEW SOON: ${c.file} expires on ${c.notAfter} (${days}): renew it, replace the files and \`systemctl reload node-edge\``;
  return `${c.file}, valid until ${c.notAfter} (${days})`;
}

/**
 * The doctor run that names what serve would refuse in a spool it cannot read, in this install's
 * paths (zenova-node is not on an installed host's PATH); undefined without a release to run it from.
 */
function unreadableSpoolAdvice(status: InstalledStatus): string | undefined {
  if (status.installDir === null || status.version === null) return undefined;
  const layout = installLayout(status.installDir);
  return `run \`${path.posix.join(layout.current, NODE_ENTRYPOINT)} doctor --state-dir ${layout.data}\``;
}

/** The node's report with the doctor advice after an unreadable spool's reason (only the text form: --json keeps the reason as read). */
function withUnreadableSpoolAdvice(node: NodeStatusReport, status: InstalledStatus): NodeStatusReport {
  const { spool } = node;
  const advice = unreadableSpoolAdvice(status);
  if (spool === null || spool.error === null || advice === undefined) return node;
  return { ...node, spool: { ...spool, error: `${spool.error}; ${advice}` } };
}

export function formatInstalledStatus(status: InstalledStatus): string {
  const row = (label: string, value: string): string => `${`${label}:`.padEnd(15)}${value}\n`;
  if ((!status.installed && !status.unfinishedInstall) || status.installDir === null) return row('node', status.error ?? 'not installed');
  // A current release without the unit: an install cut short. Its verdict and recovery come first.
  const unfinished = status.unfinishedInstall;
  let out = unfinished && status.error !== null ? row('install', status.error) : '';
  const version = status.brokenCurrent !== null ? `BROKEN: ${status.brokenCurrent.message}` : status.version ?? 'unknown (no current release)';
  out += row('install dir', status.installDir) + row('version', version) + row('service', `${status.service.unit} ${status.service.state}`);
  if (status.replicas !== undefined) out += row('replicas', status.replicas === null ? 'INVALID: ZENOVA_NODE_REPLICAS in etc/node.env is not a whole number from 1 to 999 (node-edge refuses to start)' : `${status.replicas} (${describeReplicas(status.replicas)})`);
  if (status.readiness !== null) {
    const r = status.readiness;
    out += row('readiness', r.ready ? `ready (config version ${r.configVersion ?? '?'})` : `${r.certificateRefused || r.url === null ? 'UNKNOWN' : 'NOT READY'}: ${r.reason ?? 'unknown'}`);
    if (r.certificate !== null) out += row('ingress cert', ingressCertificateRow(r.certificate));
  }
  const i = status.upgradeInterrupted;
  if (i !== null) out += row('upgrade', `INTERRUPTED: ${i.from} → ${i.to} started at ${i.at} and never finished; run the upgrade command again to finish it (or switch back)`);
  const running = status.upgradeRunning;
  if (running !== null) out += row('upgrade', `in progress (pid ${running.pid}): ${running.from} → ${running.to} started at ${running.at}`);
  const u = status.lastUpgrade;
  if (u !== null) out += row('last upgrade', `${u.from} → ${u.to} at ${u.at}: ${u.outcome === 'ready' ? 'ready' : `SWITCHED BACK to ${u.from}${u.reason !== undefined ? ` (${u.reason})` : ''}`}`);
  if (status.node !== null) {
    // The node's own report has the one spool row (size and backlog, or UNREADABLE with the reason
    // and, here, the doctor run of this install: the node's own advice names a bare zenova-node).
    out += formatNodeStatus(withUnreadableSpoolAdvice(status.node, status), (unfinished ? unfinishedInstallAdvice : installedNotEnrolledAdvice)(status.node.node?.name));
  } else if (status.error !== null && !unfinished) {
    // An installed node whose identity or credential cannot be read (damaged, a directory, lost
    // with data/) is not enrolled for node-edge either: say how it is restored.
    out += row('state', status.installed ? `${status.error}; ${installedNotEnrolledAdvice(undefined)}` : status.error);
  }
  return out;
}

export async function runStatus(argv: readonly string[], ctx: CliContext, host: HostEnv): Promise<number> {
  if (wantsHelp(argv)) {
    ctx.stdout.write(STATUS_USAGE);
    return EXIT_OK;
  }
  const parsed = parseOptions(argv, { json: { type: 'boolean' }, 'install-dir': { type: 'string' } }, HELP);
  noPositionals(parsed, HELP);
  const installDir = nonEmptyOption(parsed, 'install-dir', HELP, 'pass the install dir, or leave --install-dir out to find the installed node through node-edge.service');
  const status = await readInstalledStatus(host, installDir);
  ctx.stdout.write(flagOption(parsed, 'json') ? `${JSON.stringify(statusJson(status), null, 2)}\n` : formatInstalledStatus(status));
  // Without its unit nothing runs the node, enrolled or not; without its release nothing can.
  return status.installed && status.node?.enrolled === true && status.brokenCurrent === null ? EXIT_OK : EXIT_FAILURE;
}

export function statusCommandFor(host: () => HostEnv): Command {
  return { name: 'status', summary: 'Show the gateway node installed on this host', usage: STATUS_USAGE, run: (argv, ctx) => runStatus(argv, ctx, host()) };
}

export const statusCommand: Command = statusCommandFor(realHostEnv);
