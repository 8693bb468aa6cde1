/**
 * The write phase of `zenova install node`, run only after every check passed: lay out the
 * install dir, unpack the verified release, write etc/, redeem the token into data/, install and
 * start the units, wait for readiness, and link `zenova` onto PATH. Each step is printed (✓/✗). On
 * failure everything this run wrote is undone in reverse order, except data/ once it holds an
 * identity (DESIGN §2: a node's data is never deleted), so no half-installed service remains.
 * --reenroll of an installed node only replaces the identity; --reenroll where a failed install's
 * rollback kept data/ (no units) runs the whole write phase again around that data/.
 */
import { constants } from 'node:fs';
import { access, chmod, mkdir, readFile, readdir, readlink, rm, rmdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { enroll } from '../../../edge-node/src/enroll/enroll.js';
import type { EnrollOptions, EnrollResult } from '../../../edge-node/src/enroll/enroll.js';
import { ENROLL_ATTEMPT_FILE } from '../../../edge-node/src/enroll/enroll-attempt.js';
import { EnrollError } from '../../../edge-node/src/enroll/enroll-errors.js';
import { describeRetired } from '../../../edge-node/src/enroll/retire-node-state.js';
import { writeFileAtomic } from '../../../edge-node/src/state/atomic-write.js';
import { STATE_DIR_MODE as DATA_DIR_MODE } from '../../../edge-node/src/state/state-store.js';
import type { ServiceManager } from '../host/service-manager.js';
import type { PackageManifest } from '../package/package-manifest.js';
import { DIAGNOSTICS, LOG_SINCE, REENROLL_SERVICE_START_ADVICE, REENROLL_TOKEN_REJECTED_ADVICE, enrollFailedAdvice, finding, serviceStartAdvice } from './diagnostics.js';
import type { Finding } from './diagnostics.js';
import { isLinkSwapLeftoverName } from './install-dir-contents.js';
import { installDirProblem } from './install-dir-rules.js';
import { replicasMemoryFinding } from './host-checks.js';
import { CLI_LINK, DEFAULT_NODE_LISTEN, NODE_UNIT, RELEASE_CLI, UPDATER_UNIT, installLayout, onHost } from './install-layout.js';
import type { InstallLayout } from './install-layout.js';
import { formatListen } from './listen-address.js';
import type { ListenAddress } from './listen-address.js';
import { READY_TIMEOUT_MS, readyzUrl } from './readiness-wait.js';
import type { ReadinessWaiter } from './readiness-wait.js';
import { unpackRelease } from './release-manifest.js';
import { REPLICAS_VARIABLE, describeReplicas, nodeEdgeUnit, nodeEnvFile, updaterUnit } from './unit-files.js';
import { withReplicas, writeEnvFile } from './env-file.js';
import { pathExists } from './path-exists.js';
import { swapSymlink } from './symlink-swap.js';
import { installedTlsCert } from './node-tls-probe.js';
import { redactSecret } from '../../../proto/src/redact-secret.js';

export type Enroller = (opts: EnrollOptions) => Promise<EnrollResult>;

/**
 * install: a new node. reenroll: replace the identity of the installed node. reenroll-kept-data:
 * --reenroll where no unit exists but data/ holds an identity (a failed install's rollback kept
 * it): write the release, etc/ and units again, keep data/, and enroll with the reenroll token.
 */
export type InstallMode = 'install' | 'reenroll' | 'reenroll-kept-data';

export interface InstallInput {
  mode: InstallMode;
  hostRoot: string;
  installDir: string;
  packageFile: string;
  manifest: PackageManifest;
  dataOffset: number;
  controlPlaneUrl: string;
  caPem: string | undefined;
  token: string;
  listen: ListenAddress;
  /** The caller port's HTTPS pair, checked before anything was written (readCallerTls); copied into etc/. */
  tls?: { certPem: string; keyPem: string };
  services: ServiceManager;
  enroll?: Enroller;
  waitReady: ReadinessWaiter;
  readyTimeoutMs?: number;
  /** The host's memory (MemTotal), for the warning when the node's replicas need more (NODE-HOST-MEMORY-REPLICAS). */
  memoryBytes?: number;
  /** How the operator runs this CLI (e.g. `./zenova`), for advice once the rollback removed the `zenova` link. */
  runningCli?: string;
  /** This run's command as a --check-only run (install.ts checkOnlyCommand), named in the advice of a failed enrollment. */
  checkCommand?: string;
  /**
   * --reenroll: the control plane answers a redemption again for the same key, so the token may be
   * redeemed while node-edge serves and again once it is stopped (reenroll below). Unset: node-edge
   * is stopped before the token is redeemed.
   */
  redeemWhileServing?: boolean;
}

/** Receives each step as it ends: ✓ with a label, or ✗ with the finding. */
export type StepReporter = (label: string, failure?: Finding) => void;

/** On success, `cli` is how to run the CLI: `zenova` when it is linked onto PATH, else its full path. */
export type InstallOutcome = { ok: true; nodeName: string; nodeId: string; cli: string } | { ok: false; finding: Finding };

class StepFailed extends Error {
  constructor(readonly finding: Finding) {
    super(finding.cause);
  }
}

function errnoText(err: unknown): string {
  return (err as NodeJS.ErrnoException).code ?? (err as Error).message;
}

/** NODE-TOKEN-REJECTED for ZN_ERR_CP_TOKEN_WRONG_NODE after --reenroll (the cause names the installed node). */
const REENROLL_WRONG_NODE_ADVICE =
  "Nothing was changed: the installed node keeps its identity, credential and data, and node-edge runs as it did. Run the reenroll command of the node this host holds (`zenova status` shows it; `zenova gateway-node reenroll-command NAME`), or, if this host is really to become the other node, delete the installed node on the control plane first (`zenova gateway-node delete NAME --yes`) and run this command again.";

function enrollFinding(err: unknown, token: string, mode: InstallMode, checkCommand: string | undefined): Finding {
  const raw = (err as Error).message ?? String(err);
  const message = redactSecret(raw, token);
  // Only the control plane's refusals (ZN_ERR_CP_TOKEN_*) are a rejected token; local codes such as
  // TOKEN_MISSING are the command line's fault and never reached the control plane.
  if (err instanceof EnrollError && err.code.startsWith('ZN_ERR_CP_TOKEN_')) {
    // Another live node's reenroll token: the token is not used and the installed node keeps its
    // identity; a new reenroll command of the other node would be refused alike.
    if (err.code === 'ZN_ERR_CP_TOKEN_WRONG_NODE' && mode !== 'install') return finding('NODE-TOKEN-REJECTED', message, REENROLL_WRONG_NODE_ADVICE);
    return finding('NODE-TOKEN-REJECTED', message, mode === 'install' ? undefined : REENROLL_TOKEN_REJECTED_ADVICE);
  }
  return finding('NODE-ENROLL-FAILED', message, checkCommand === undefined ? undefined : enrollFailedAdvice(checkCommand));
}

/** The re-enrollment's step: the same node keeps its spool; another node's enrollment moved the old one's aside. */
function reenrolledStep(enrolled: EnrollResult, layout: InstallLayout): string {
  const node = `re-enrolled as node ${enrolled.nodeName} (id ${enrolled.nodeId})`;
  return enrolled.retired === undefined ? `${node}; spool and unsent records kept in ${layout.data}` : `${node}; ${describeRetired(enrolled.retired, layout.data)}`;
}

/**
 * Redeems the one-time token into the install's data/ (the same enrollment `zenova-node enroll` does),
 * naming the install dir, so the control plane records where the node really is.
 */
function redeemToken(input: InstallInput, layout: InstallLayout, reenroll: boolean): Promise<EnrollResult> {
  return (input.enroll ?? enroll)({
    controlPlaneUrl: input.controlPlaneUrl,
    token: input.token,
    stateDir: onHost(input.hostRoot, layout.data),
    ...(input.caPem !== undefined ? { caPem: input.caPem, caFile: layout.caFile } : {}),
    reenroll,
    installDir: input.installDir,
  });
}

export async function installNode(input: InstallInput, step: StepReporter): Promise<InstallOutcome> {
  return input.mode === 'reenroll' ? reenroll(input, step) : writeInstallation(input, step);
}

/**
 * The node's state store sets 0700 only on a data/ it creates: one that already exists (kept by a
 * rollback, or an installed node's for --reenroll) is made private before a new identity and
 * credential are written into it. A missing one is created 0700 by the enrollment.
 */
async function makeDataDirPrivate(physical: string): Promise<void> {
  await chmod(physical, DATA_DIR_MODE).catch((err: unknown) => {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  });
}
async function writeInstallation(input: InstallInput, step: StepReporter): Promise<InstallOutcome> {
  const layout = installLayout(input.installDir);
  const host = (p: string): string => onHost(input.hostRoot, p);
  const undo: Array<() => Promise<void>> = [];
  const run = async (label: string, code: 'NODE-WRITE-FAILED', action: () => Promise<void>): Promise<void> => {
    try {
      await action();
    } catch (err) {
      throw err instanceof StepFailed ? err : new StepFailed(finding(code, `${label}: ${errnoText(err)}`));
    }
    step(label);
  };
  let enrolled: EnrollResult | undefined;
  try {
    await run(`install dir ${layout.dir}`, 'NODE-WRITE-FAILED', async () => {
      // mkdir -p returns the first dir it made: the rollback removes up to there (if empty).
      const first = await mkdir(host(layout.dir), { recursive: true, mode: 0o755 }).catch(async (err: unknown) => {
        const refusal = await mkdirRefusal(input.hostRoot, layout.dir, err);
        throw refusal === undefined ? err : new StepFailed(finding('NODE-WRITE-FAILED', `install dir ${layout.dir}: ${refusal}`, DIAGNOSTICS['NODE-DIR-READ-ONLY'].advice));
      });
      if (first !== undefined) {
        undo.push(async () => {
          for (let dir = host(layout.dir); dir.length >= first.length; dir = path.dirname(dir)) await rmdir(dir).catch(() => undefined);
        });
      }
      for (const dir of [layout.releases, layout.etc]) {
        if (!(await pathExists(host(dir)))) {
          await mkdir(host(dir), { mode: 0o755 });
          undo.push(() => rmdir(host(dir)).catch(() => undefined));
        }
      }
    });

    const release = layout.releaseDir(input.manifest.version);
    await run(`release ${input.manifest.version} unpacked to ${release} (checksums verified again)`, 'NODE-WRITE-FAILED', async () => {
      await unpackRelease(host(release), input.packageFile, input.manifest, input.dataOffset);
      undo.push(() => rm(host(release), { recursive: true, force: true }));
    });

    await run(`current and updater → releases/${input.manifest.version}`, 'NODE-WRITE-FAILED', async () => {
      // A temp link a run killed inside its link swap left (accepted by the dir check) goes first.
      const dir = path.dirname(host(layout.current));
      for (const entry of await readdir(dir)) if (isLinkSwapLeftoverName(entry)) await rm(path.join(dir, entry), { force: true });
      for (const link of [layout.current, layout.updater]) await replaceSymlink(host(link), path.posix.join('releases', input.manifest.version), undo);
    });

    const cli = await linkCli(input.hostRoot, layout, undo);
    step(cli.label, cli.warning);

    // 1 until the enrollment answer tells the node's count (written again then, before the units start).
    const envText = (replicas: number): string =>
      nodeEnvFile(layout, { listen: formatListen(input.listen), version: input.manifest.version, controlPlaneUrl: input.controlPlaneUrl, replicas, tls: input.tls !== undefined });
    const etcFiles = [layout.envFile, ...(input.caPem !== undefined ? [layout.caFile] : []), ...(input.tls !== undefined ? [layout.tlsCertFile, `${layout.tlsKeyFile} (0600)`] : [])];
    await run(etcFiles.join(', '), 'NODE-WRITE-FAILED', async () => {
      // The pair before the env file that names it: node-edge never reads a name without its file.
      if (input.tls !== undefined) {
        await writeFileAtomic(host(layout.tlsKeyFile), input.tls.keyPem, 0o600);
        undo.push(() => rm(host(layout.tlsKeyFile), { force: true }));
        await writeFileAtomic(host(layout.tlsCertFile), input.tls.certPem, 0o644);
        undo.push(() => rm(host(layout.tlsCertFile), { force: true }));
      }
      await writeEnvFile(
        host(layout.envFile),
        envText(1),
        0o644,
      );
      undo.push(() => rm(host(layout.envFile), { force: true }));
      if (input.caPem !== undefined) {
        await writeFileAtomic(host(layout.caFile), input.caPem, 0o644);
        undo.push(() => rm(host(layout.caFile), { force: true }));
      }
    });

    // The token is redeemed only now: a failure above never burns it. A kept data/ is never removed.
    const dataExisted = await pathExists(host(layout.data));
    if (dataExisted) await makeDataDirPrivate(host(layout.data));
    undo.push(async () => {
      // data/ goes only if this run made it and it holds no identity (the token was refused), nor an
      // enrollment attempt a rerun may still need (an answer lost, or a refusal such as a rate limit
      // that did not settle the token): rerunning the same command retries it with its key.
      const keep = await pathExists(host(`${layout.data}/identity.json`)) || await pathExists(host(`${layout.data}/${ENROLL_ATTEMPT_FILE}`));
      if (!dataExisted && !keep) await rm(host(layout.data), { recursive: true, force: true });
    });
    const reenrolling = input.mode !== 'install';
    try {
      enrolled = await redeemToken(input, layout, reenrolling);
    } catch (err) {
      throw new StepFailed(enrollFinding(err, input.token, input.mode, input.checkCommand));
    }
    step(reenrolling ? reenrolledStep(enrolled, layout) : `enrolled as node ${enrolled.nodeName} (id ${enrolled.nodeId}); identity in ${layout.data}`);
    const replicas = enrolled.replicas ?? 1;
    await run(`${layout.envFile}: ${REPLICAS_VARIABLE}=${replicas} (${describeReplicas(replicas)})`, 'NODE-WRITE-FAILED', async () => {
      if (replicas !== 1) await writeEnvFile(host(layout.envFile), envText(replicas), 0o644);
    });
    const memoryShort = replicasMemoryFinding(input.memoryBytes, replicas);
    if (memoryShort !== undefined) step('memory for the replicas', memoryShort);

    await startUnits(input, layout, undo, step);
    return { ok: true, nodeName: enrolled.nodeName, nodeId: enrolled.nodeId, cli: cli.linked ? 'zenova' : layout.cli };
  } catch (err) {
    let failure = err instanceof StepFailed ? err.finding : finding('NODE-WRITE-FAILED', errnoText(err));
    for (const action of undo.reverse()) await action().catch(() => undefined);
    if (failure.code === 'NODE-SERVICE-START') {
      // Named after the rollback: it removed the `zenova` link, so the advice names what still runs.
      const logs = await nodeLogsCommand(input.hostRoot, input.runningCli);
      failure = { ...failure, cause: `${failure.cause}; see \`${logs}\``, advice: serviceStartAdvice(logs, optionsToGiveAgain(input)) };
    }
    step(failure.code === 'NODE-SERVICE-START' ? 'node-edge ready' : 'install step', failure);
    const kept = enrolled !== undefined ? ` (kept ${layout.data}: it holds node ${enrolled.nodeName}'s identity)` : input.mode === 'reenroll-kept-data' ? ` (kept ${layout.data} with its previous identity)` : '';
    step(`rolled back what this run wrote${kept}`);
    return { ok: false, finding: failure };
  }
}

/**
 * A command that shows node-edge's log after a rollback: `zenova logs` while the `zenova` link
 * still leads to a CLI, else the CLI the operator is running, else journalctl itself.
 */
async function nodeLogsCommand(hostRoot: string, runningCli: string | undefined): Promise<string> {
  if (await pathExists(onHost(hostRoot, CLI_LINK))) return `zenova logs node-edge ${LOG_SINCE}`;
  if (runningCli !== undefined) return `${runningCli} logs node-edge ${LOG_SINCE}`;
  return `journalctl -u ${NODE_UNIT} ${LOG_SINCE}`;
}

/**
 * Why `mkdir -p dir` failed when it says ENOENT: on a read-only filesystem Node's recursive mkdir
 * reports the missing parent, not the refusal. The nearest existing ancestor's own answer
 * (access W_OK: EROFS, EACCES) is the cause; undefined when that dir is writable (ENOENT stands).
 */
async function mkdirRefusal(hostRoot: string, dir: string, err: unknown): Promise<string | undefined> {
  if ((err as NodeJS.ErrnoException).code !== 'ENOENT') return undefined;
  let existing = path.posix.dirname(dir);
  while (existing !== '/' && !(await pathExists(onHost(hostRoot, existing)))) existing = path.posix.dirname(existing);
  const code = await access(onHost(hostRoot, existing), constants.W_OK).then(() => undefined, (e: unknown) => errnoText(e));
  if (code === undefined) return undefined;
  return `cannot create it in ${existing}: ${code}${code === 'EROFS' ? ' (read-only file system)' : ''}`;
}

/** A node installation's CLI (`<valid install dir>/current/bin/zenova`): a link to it is ours to replace. */
function isNodeCli(target: string): boolean {
  const m = /^(\/.+)\/current\/bin\/zenova$/.exec(target);
  return m?.[1] !== undefined && installDirProblem(m[1]) === undefined;
}

/**
 * Links CLI_LINK to the installed CLI. Anything else already there (a file, a link elsewhere) is
 * left alone and reported, and a read-only /usr only costs the link: the node works without it, so
 * this never fails the install. With `undo`, a rollback restores what was there before.
 */
async function linkCli(hostRoot: string, layout: InstallLayout, undo?: Array<() => Promise<void>>): Promise<{ linked: boolean; label: string; warning?: Finding }> {
  const host = (p: string): string => onHost(hostRoot, p);
  const label = `${CLI_LINK} → ${layout.cli}`;
  const warn = (cause: string): { linked: false; label: string; warning: Finding } => ({
    linked: false,
    label,
    warning: finding('NODE-CLI-LINK', cause, `Run the CLI by its full path (${layout.cli} status); to have \`zenova\` on PATH, move away what is at ${CLI_LINK} and run \`ln -s ${layout.cli} ${CLI_LINK}\`.`),
  });
  if (!(await pathExists(host(layout.cli)))) return warn(`this release has no ${RELEASE_CLI}, so ${CLI_LINK} was not linked`);
  let previous: string | undefined;
  try {
    previous = await readlink(host(CLI_LINK));
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EINVAL') return warn(`${CLI_LINK} exists and is not a link; it was left as it is`);
    if (code !== 'ENOENT') return warn(`cannot read ${CLI_LINK} (${errnoText(err)})`);
  }
  if (previous === layout.cli) return { linked: true, label: `${label} (already)` };
  if (previous !== undefined && !isNodeCli(previous)) return warn(`${CLI_LINK} already links to ${previous}, which is not a node installation's CLI; it was left as it is`);
  try {
    const dir = path.posix.dirname(CLI_LINK);
    const first = await mkdir(host(dir), { recursive: true, mode: 0o755 });
    if (first !== undefined) {
      undo?.push(async () => {
        for (let d = host(dir); d.length >= first.length; d = path.dirname(d)) await rmdir(d).catch(() => undefined);
      });
    }
    await swapSymlink(host(CLI_LINK), layout.cli);
    undo?.push(async () => {
      if (previous === undefined) await rm(host(CLI_LINK), { force: true });
      else await replaceSymlink(host(CLI_LINK), previous, []);
    });
  } catch (err) {
    return warn(`could not link ${CLI_LINK} (${errnoText(err)})`);
  }
  return { linked: true, label: previous === undefined ? label : `${label} (was → ${previous})` };
}

async function replaceSymlink(link: string, target: string, undo: Array<() => Promise<void>>): Promise<void> {
  await swapSymlink(link, target);
  undo.push(() => rm(link, { force: true }));
}

async function startUnits(input: InstallInput, layout: InstallLayout, undo: Array<() => Promise<void>>, step: StepReporter): Promise<void> {
  const { services } = input;
  try {
    // The undo goes in before the writes: if the second write fails, the first unit must not stay
    // behind, or every later run would find an "installed" node with no release and refuse the host.
    undo.push(async () => {
      await services.removeUnit(NODE_UNIT).catch(() => undefined);
      await services.removeUnit(UPDATER_UNIT).catch(() => undefined);
      await services.reload().catch(() => undefined);
    });
    await services.writeUnit(NODE_UNIT, nodeEdgeUnit(layout));
    await services.writeUnit(UPDATER_UNIT, updaterUnit(layout));
    await services.reload();
    await services.enable(NODE_UNIT);
    undo.push(() => services.disable(NODE_UNIT).catch(() => undefined));
    step(`units ${NODE_UNIT} (Type=notify, hardened) and ${UPDATER_UNIT} (oneshot) installed, ${NODE_UNIT} enabled`);
    await services.start(NODE_UNIT);
    undo.push(() => services.stop(NODE_UNIT).catch(() => undefined));
  } catch (err) {
    throw new StepFailed(finding('NODE-SERVICE-START', `could not install or start ${NODE_UNIT}: ${errnoText(err)}`));
  }
  step(`${NODE_UNIT} started`);
  const url = readyzUrl(input.listen, input.tls !== undefined);
  const outcome = await input.waitReady({
    url,
    unit: NODE_UNIT,
    services,
    timeoutMs: input.readyTimeoutMs ?? READY_TIMEOUT_MS,
    ...(input.tls !== undefined ? { tlsCertPem: input.tls.certPem } : {}),
  });
  if (!outcome.ready) throw new StepFailed(finding('NODE-SERVICE-START', outcome.reason));
  step(`node-edge ready (${url})`);
}

/**
 * A first install cut short (Ctrl-C, a dropped SSH session) between writing the units and enabling
 * node-edge left it installed but not enabled (not started at boot), perhaps without its updater
 * unit; the re-run then finds it installed. A reenroll, the recovery NODE-INSTALLED points to,
 * writes a missing unit again and enables node-edge: each step safe to repeat. Returns the units written.
 */
async function makeUnitsWhole(services: ServiceManager, layout: InstallLayout): Promise<string[]> {
  const written: string[] = [];
  for (const [name, text] of [[NODE_UNIT, nodeEdgeUnit(layout)], [UPDATER_UNIT, updaterUnit(layout)]] as const) {
    if ((await services.readUnit(name)) !== undefined) continue;
    await services.writeUnit(name, text);
    written.push(name);
  }
  if (written.length > 0) await services.reload();
  await services.enable(NODE_UNIT);
  return written;
}

/** The options of a failed first install its kept-data reenroll must be given again: a --listen other than the default, the caller TLS pair. */
function optionsToGiveAgain(input: InstallInput): string {
  const options: string[] = [];
  const listen = formatListen(input.listen);
  if (listen !== DEFAULT_NODE_LISTEN) options.push(`--listen ${listen}`);
  if (input.tls !== undefined) options.push('--tls-cert and --tls-key (the same files)');
  return options.join(' and ');
}

/**
 * --reenroll: make the units whole and node-edge enabled (makeUnitsWhole), replace the identity in
 * data/ (spool, config cache and unsent records stay; a token of another node moves the old node's
 * aside into data/retired/), then have node-edge run with it.
 *
 * node-edge is stopped only when it has to be. A healthy node (the unit active) keeps serving while
 * the token is redeemed, when the control plane answers a redemption again for the same key
 * (`redeemWhileServing`): a refused token, an unreachable control plane or any other failure leaves
 * it as it was, never stopped. The node re-reads its identity and credential while it serves, so
 * for the same node the enrollment is saved under it, and a restart (one job of the service
 * manager's) then runs it with the new identity. A token of another node is refused while node-edge
 * holds the old node's spool (PREVIOUS_NODE_SERVING, its attempt kept): only then is node-edge
 * stopped and the token redeemed again with the same key, now moving the old state aside. A node
 * that is not active (stopped, failed, crash-looping), or a control plane not known to answer again,
 * is stopped first as before. Stopped and failing before the new identity is saved, it is started
 * again with its previous identity, and the step says whether it did start.
 */
async function reenroll(input: InstallInput, step: StepReporter): Promise<InstallOutcome> {
  const layout = installLayout(input.installDir);
  const host = (p: string): string => onHost(input.hostRoot, p);
  const { services } = input;
  const unchanged = 'Nothing was changed and the token was not used';
  try {
    await makeDataDirPrivate(host(layout.data));
  } catch (err) {
    const f = finding('NODE-WRITE-FAILED', `could not make ${layout.data} private (mode 0700): ${errnoText(err)}`, `${unchanged}: fix the cause shown and run the same command again.`);
    step(`${layout.data} mode 0700`, f);
    return { ok: false, finding: f };
  }
  try {
    const written = await makeUnitsWhole(services, layout);
    step(`${written.length > 0 ? `${written.join(' and ')} written again, ` : ''}${NODE_UNIT} enabled`);
  } catch (err) {
    const f = finding('NODE-SERVICE-START', `could not install or enable ${NODE_UNIT}: ${errnoText(err)}`, `${unchanged}: check \`systemctl status ${NODE_UNIT}\`, then run the same command again.`);
    step(`enable ${NODE_UNIT}`, f);
    return { ok: false, finding: f };
  }
  const serving = input.redeemWhileServing === true && (await services.state(NODE_UNIT).catch(() => 'unknown')) === 'active';
  let stopped = false;
  /** Stops node-edge; a finding when it cannot be stopped. */
  const stop = async (advice: string): Promise<Finding | undefined> => {
    try {
      await services.stop(NODE_UNIT);
    } catch (err) {
      const f = finding('NODE-SERVICE-START', `could not stop ${NODE_UNIT}: ${errnoText(err)}`, advice);
      step(`stop ${NODE_UNIT}`, f);
      return f;
    }
    stopped = true;
    return undefined;
  };
  /** A failure before the new identity was saved: node-edge runs again as it did, or the step says it does not. */
  const failedBeforeSwap = async (f: Finding): Promise<InstallOutcome> => {
    if (!stopped) {
      step(`${NODE_UNIT} was never stopped: it serves on with its previous identity`);
      return { ok: false, finding: f };
    }
    const notStarted = await services.start(NODE_UNIT).then(() => undefined, (err: unknown) => errnoText(err));
    if (notStarted === undefined) {
      step(`${NODE_UNIT} started again with its previous identity`);
      return { ok: false, finding: f };
    }
    step(`start ${NODE_UNIT} again`, finding('NODE-SERVICE-START', `could not start ${NODE_UNIT} again with its previous identity: ${notStarted}`, `Start it: \`systemctl start ${NODE_UNIT}\` (\`systemctl status ${NODE_UNIT}\` shows why it did not start).`));
    return { ok: false, finding: { ...f, cause: `${f.cause}; and ${NODE_UNIT}, stopped for the re-enrollment, could not be started again (${notStarted}): start it with \`systemctl start ${NODE_UNIT}\`` } };
  };

  if (serving) {
    step(`${NODE_UNIT} serves: it keeps serving while the token is redeemed`);
  } else {
    // Not active: nothing healthy to keep serving, and a node systemd keeps restarting could open
    // the old node's spool while the enrollment moves it aside.
    const f = await stop(`${unchanged}: check \`systemctl status ${NODE_UNIT}\`, then run the same command again.`);
    if (f !== undefined) return { ok: false, finding: f };
    step(`${NODE_UNIT} stopped`);
  }
  let enrolled: EnrollResult;
  try {
    enrolled = await redeemToken(input, layout, true);
  } catch (err) {
    if (!(serving && err instanceof EnrollError && err.code === 'PREVIOUS_NODE_SERVING')) {
      const failure = enrollFinding(err, input.token, input.mode, input.checkCommand);
      step('re-enroll', failure);
      return failedBeforeSwap(failure);
    }
    // The token is another node's: redeemed, nothing saved, its attempt kept for the same key.
    step(`the token is another node's: ${NODE_UNIT} is stopped now, so that the installed node's spool and config can be moved aside (the token is redeemed again with the same key)`);
    const f = await stop(
      `The token was redeemed but nothing was saved: the installed node keeps its identity. Check \`systemctl status ${NODE_UNIT}\`, then run the same command again within 15 minutes (it redeems the token again with the same key), or issue a new reenroll command.`,
    );
    if (f !== undefined) return failedBeforeSwap(f);
    try {
      enrolled = await redeemToken(input, layout, true);
    } catch (again) {
      const failure = enrollFinding(again, input.token, input.mode, input.checkCommand);
      step('re-enroll', failure);
      return failedBeforeSwap(failure);
    }
  }
  step(reenrolledStep(enrolled, layout));
  // node-edge as the new identity's: started where it was stopped, else restarted as one job of the
  // service manager's, so a run killed meanwhile still leaves it running.
  const startWithNewIdentity = (): Promise<void> => (stopped ? services.start(NODE_UNIT) : services.restart(NODE_UNIT));
  const replicas = enrolled.replicas ?? 1;
  try {
    // The env file (listen address, version) stays as installed but for the node's replica count,
    // which the control plane may have changed (an env file from before replicas gets the line).
    const envFile = host(layout.envFile);
    const envText = await readFile(envFile, 'utf8');
    const replicasText = withReplicas(envText, replicas);
    if (replicasText !== envText) {
      // Its mode kept, at most 0644: lines an operator added may be why it is narrower.
      const envMode = await stat(envFile).then((s) => s.mode & 0o644, () => 0o644);
      await writeEnvFile(envFile, replicasText, envMode);
    }
  } catch (err) {
    // The new identity is in place; node-edge runs with it as before, the count as it was.
    const f = finding('NODE-WRITE-FAILED', `could not write ${REPLICAS_VARIABLE}=${replicas} to ${layout.envFile}: ${errnoText(err)}`, `Free space or fix the cause shown, then run \`zenova gateway-node reenroll-command\` on the control plane and the printed command here again.`);
    step(`${layout.envFile}: ${REPLICAS_VARIABLE}=${replicas}`, f);
    await startWithNewIdentity().catch(() => undefined);
    step(`${NODE_UNIT} ${stopped ? 'started again' : 'restarted'}`);
    return { ok: false, finding: f };
  }
  step(`${layout.envFile}: ${REPLICAS_VARIABLE}=${replicas} (${describeReplicas(replicas)})`);
  const memoryShort = replicasMemoryFinding(input.memoryBytes, replicas);
  if (memoryShort !== undefined) step('memory for the replicas', memoryShort);
  try {
    // The CA
    // file follows the new identity's trust, which a later --upgrade without --ca-file takes from it:
    // the --ca-file's CA, or none (the system trust store verified this control plane).
    if (input.caPem !== undefined) {
      await writeFileAtomic(host(layout.caFile), input.caPem, 0o644);
    } else if (await pathExists(host(layout.caFile))) {
      await rm(host(layout.caFile), { force: true });
      step(`${layout.caFile} removed: this control plane is verified with this host's system trust store`);
    }
  } catch (err) {
    // The new identity is in place; node-edge runs again with it (it may then fail TLS to the
    // control plane, which `zenova status` shows) rather than stay stopped over a file.
    const f = finding('NODE-WRITE-FAILED', `could not write ${layout.caFile}: ${errnoText(err)}`, `Free space or fix the cause shown, then run \`zenova gateway-node reenroll-command\` on the control plane and the printed command here again.`);
    step(`CA file ${layout.caFile}`, f);
    await startWithNewIdentity().catch(() => undefined);
    step(`${NODE_UNIT} ${stopped ? 'started again' : 'restarted'}`);
    return { ok: false, finding: f };
  }
  try {
    await startWithNewIdentity();
  } catch (err) {
    const f = finding('NODE-SERVICE-START', `could not ${stopped ? 'start' : 'restart'} ${NODE_UNIT}: ${errnoText(err)}`, REENROLL_SERVICE_START_ADVICE);
    step(`${stopped ? 'start' : 'restart'} ${NODE_UNIT}`, f);
    return { ok: false, finding: f };
  }
  step(`${NODE_UNIT} ${stopped ? 'started' : 'restarted with the new identity'}`);
  // The installed caller TLS pair stays (etc/ is not rewritten); readiness is asked over it.
  let tlsCertPem: string | undefined;
  try {
    tlsCertPem = await installedTlsCert(input.hostRoot, layout);
  } catch (err) {
    const f = finding('NODE-SERVICE-START', (err as Error).message, REENROLL_SERVICE_START_ADVICE);
    step('node-edge ready', f);
    return { ok: false, finding: f };
  }
  const url = readyzUrl(input.listen, tlsCertPem !== undefined);
  const outcome = await input.waitReady({
    url,
    unit: NODE_UNIT,
    services,
    timeoutMs: input.readyTimeoutMs ?? READY_TIMEOUT_MS,
    ...(tlsCertPem !== undefined ? { tlsCertPem } : {}),
  });
  if (!outcome.ready) {
    const f = finding('NODE-SERVICE-START', `${outcome.reason}; see \`zenova logs node-edge --since '10 min ago'\``, REENROLL_SERVICE_START_ADVICE);
    step('node-edge ready', f);
    return { ok: false, finding: f };
  }
  step(`node-edge ready (${url})`);
  // An installation from before the link existed gets it now (nothing to roll back: the node runs).
  const cli = await linkCli(input.hostRoot, layout);
  step(cli.label, cli.warning);
  return { ok: true, nodeName: enrolled.nodeName, nodeId: enrolled.nodeId, cli: cli.linked ? 'zenova' : layout.cli };
}
