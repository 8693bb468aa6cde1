/**
 * The write phase of `zenova install node --upgrade` (DESIGN §8, seed 004 §9.6), run only after
 * every check passed: unpack the new release beside the installed one, redeem the upgrade token
 * (nothing is switched before the control plane agreed, and a failure before that never burns the
 * token), then switch `current` and `updater` atomically, update the env file's version and the
 * units, restart node-edge and wait up to 60 s until it is ready with its control link up. If it
 * is not, everything is switched back (never to a previous release that is gone: switchAndWait),
 * the previous release is started again, and the failed version is recorded in
 * data/update-state.json. data/ (identity, spool, records) is never touched
 * by either way; the previous release stays on disk after a success, for a manual switch back.
 */
import { readFile, readdir, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import { EnrollError } from '../../../edge-node/src/enroll/enroll-errors.js';
import type { ServiceManager } from '../host/service-manager.js';
import type { PackageManifest } from '../package/package-manifest.js';
import type { CaFile } from './control-plane-probe.js';
import { UPGRADE_ENV_AFTER_SWITCH_ADVICE, UPGRADE_NO_PREVIOUS_RELEASE_ADVICE, UPGRADE_SWITCHED_BACK_START_ADVICE, UPGRADE_TOKEN_REJECTED_ADVICE, finding } from './diagnostics.js';
import type { Finding } from './diagnostics.js';
import { NODE_UNIT, UPDATER_UNIT, installLayout, onHost } from './install-layout.js';
import { readInstalledListen, replicasMemoryFinding, unusableListen } from './host-checks.js';
import type { InstallLayout } from './install-layout.js';
import { isInstalledRelease } from './installed-node.js';
import type { InstalledNode } from './installed-node.js';
import { envReplicas, parseEnvText, withEnvLine, withReplicas, writeEnvFile } from './env-file.js';
import { installedTlsCert } from './node-tls-probe.js';
import { READY_TIMEOUT_MS, readyzUrl } from './readiness-wait.js';
import type { ReadinessWaiter } from './readiness-wait.js';
import { isPartialReleaseLeftover, unpackRelease } from './release-manifest.js';
import { swapSymlink } from './symlink-swap.js';
import { REPLICAS_VARIABLE, describeReplicas, nodeEdgeUnit, updaterUnit } from './unit-files.js';
import { UPDATE_STATE_FILE, readUpdateState, writeUpdateState } from './update-state.js';
import type { UpgradeInProgress } from './update-state.js';
import { redeemUpgradeToken } from './upgrade-token.js';
import type { UpgradeTokenRedeemer } from './upgrade-token.js';

export interface UpgradeInput {
  hostRoot: string;
  installed: InstalledNode;
  packageFile: string;
  manifest: PackageManifest;
  dataOffset: number;
  controlPlaneUrl: string;
  caPem: string | undefined;
  caFile: CaFile | undefined;
  token: string;
  services: ServiceManager;
  waitReady: ReadinessWaiter;
  readyTimeoutMs?: number;
  redeem?: UpgradeTokenRedeemer;
  /** The host's memory (MemTotal), for the warning when the node's replicas need more (NODE-HOST-MEMORY-REPLICAS). */
  memoryBytes?: number;
  now?: () => Date;
}

export type StepReporter = (label: string, failure?: Finding) => void;

export type UpgradeOutcome = { ok: true; nodeName: string; nodeId: string; from: string; to: string } | { ok: false; finding: Finding };

function errnoText(err: unknown): string {
  return (err as NodeJS.ErrnoException).code ?? (err as Error).message;
}

/** The env file with one ZENOVA_NODE_VERSION line, `version` (withEnvLine): lines an operator added stay. */
export function withVersion(envText: string, version: string): string {
  return withEnvLine(envText, 'ZENOVA_NODE_VERSION', version);
}

async function switchLinks(hostRoot: string, layout: InstallLayout, version: string): Promise<void> {
  for (const link of [layout.current, layout.updater]) await swapSymlink(onHost(hostRoot, link), path.posix.join('releases', version));
}

/** One restart job: a run killed while it is under way still leaves node-edge started (service-manager.ts). */
async function restart(services: ServiceManager): Promise<void> {
  await services.restart(NODE_UNIT);
}

/** What the installed node's /readyz is asked at: its listen address and, if it serves HTTPS, its certificate. */
async function readinessTarget(hostRoot: string, layout: InstallLayout): Promise<{ url: string; tlsCertPem?: string }> {
  const { envFile, text, listen } = await readInstalledListen(hostRoot, layout.dir);
  if (listen === undefined) throw new Error(text === undefined ? `${envFile} gives no ZENOVA_NODE_LISTEN` : unusableListen(text, envFile));
  const tlsCertPem = await installedTlsCert(hostRoot, layout);
  return { url: readyzUrl(listen, tlsCertPem !== undefined), ...(tlsCertPem !== undefined ? { tlsCertPem } : {}) };
}

/** Control-plane refusals that are about the token or the package: a new command is needed. Anything else may be retried as is. */
const TOKEN_REFUSALS = /^ZN_ERR_CP_(?:TOKEN_\w+|UPGRADE_VERSION|NODE_DELETED|PROTOCOL_INCOMPATIBLE)$/;

export async function upgradeNode(input: UpgradeInput, step: StepReporter): Promise<UpgradeOutcome> {
  const { installed, hostRoot } = input;
  const layout = installLayout(installed.installDir);
  const interrupted = installed.interrupted;
  // Killed after its switch: that upgrade is finished (or switched back) now; its token was redeemed then.
  if (interrupted !== undefined && interrupted.to === installed.version) {
    step(`the upgrade from ${interrupted.from} to ${interrupted.to} switched in at ${interrupted.at} never finished: finishing it (its token was redeemed then; this command's is not used)`);
    return switchAndWait(input, layout, { ...interrupted, nodeName: installed.nodeName, nodeId: installed.nodeId }, step);
  }
  const host = (p: string): string => onHost(hostRoot, p);
  const from = installed.version;
  const to = input.manifest.version;
  const release = layout.releaseDir(to);

  // 1. The new release beside the old one; nothing the node uses changes yet.
  try {
    await unpackRelease(host(release), input.packageFile, input.manifest, input.dataOffset);
  } catch (err) {
    const f = finding('NODE-WRITE-FAILED', `release ${to} unpacked to ${release}: ${errnoText(err)}`, 'Nothing was switched and the token was not used: the node keeps running its installed release. Fix the cause shown and run the same command again.');
    step(`release ${to} unpacked`, f);
    return { ok: false, finding: f };
  }
  step(`release ${to} unpacked to ${release} beside ${from} (checksums verified again)`);

  // 2. The control plane agrees (the token is this node's, the version the one it pins); the token is used.
  // A run killed after that but before its link switch left its in-progress record, written only
  // once the control plane had agreed: that upgrade goes on without redeeming a token again.
  const agreedBefore = interrupted !== undefined && interrupted.from === from && interrupted.to === to;
  let answer: { nodeName: string; nodeId: string; targetVersion: string; replicas?: number };
  if (agreedBefore) {
    answer = { nodeName: installed.nodeName, nodeId: installed.nodeId, targetVersion: to, ...(interrupted.replicas !== undefined ? { replicas: interrupted.replicas } : {}) };
    step(`the upgrade from ${from} to ${to} started at ${interrupted.at} was stopped before its switch (or while switching back): going on with it (its token was redeemed then; this command's is not used)`);
  } else {
    try {
      answer = await (input.redeem ?? redeemUpgradeToken)({
        controlPlaneUrl: input.controlPlaneUrl,
        ...(input.caPem !== undefined ? { caPem: input.caPem } : {}),
        ...(input.caFile !== undefined ? { caFile: input.caFile } : {}),
        token: input.token,
        nodeId: installed.nodeId,
        fromVersion: from,
        toVersion: to,
      });
    } catch (err) {
      await rm(host(release), { recursive: true, force: true }).catch(() => undefined);
      const message = (err as Error).message;
      const f = err instanceof EnrollError && TOKEN_REFUSALS.test(err.code)
        ? finding('NODE-TOKEN-REJECTED', message, UPGRADE_TOKEN_REJECTED_ADVICE)
        : finding(
            'NODE-ENROLL-FAILED',
            `the upgrade token could not be redeemed: ${message}`,
            'Nothing was switched: the node keeps running its installed release. Fix the cause shown (or wait, when the control plane asks to) and run the same command again: the token is used only once the control plane agreed. Should it then say the token was already used (its answer was lost on the way), issue a new upgrade command.',
          );
      step('upgrade token redeemed', f);
      return { ok: false, finding: f };
    }
  }
  if (!agreedBefore) step(`upgrade token redeemed: the control plane pins ${answer.targetVersion} for node ${answer.nodeName}`);

  // What the switch replaces. A run killed before its links switched left its record, and maybe the
  // new env file and units: the texts from before that run are the ones to put back.
  let previous: UpgradeInProgress['previous'];
  try {
    previous = interrupted !== undefined && interrupted.from === from
      ? interrupted.previous
      : { env: await readFile(host(layout.envFile), 'utf8'), ...(await unitTexts(input.services)) };
  } catch (err) {
    await rm(host(release), { recursive: true, force: true }).catch(() => undefined);
    const f = finding('NODE-WRITE-FAILED', `reading ${layout.envFile}: ${errnoText(err)}`, 'Nothing was switched. Fix the cause shown, then issue a new upgrade command and run that (this command\'s token is used).');
    step('switch prepared', f);
    return { ok: false, finding: f };
  }
  return switchAndWait(
    input,
    layout,
    { from, to, at: (input.now ?? (() => new Date()))().toISOString(), ...(answer.replicas !== undefined ? { replicas: answer.replicas } : {}), previous, nodeName: answer.nodeName, nodeId: answer.nodeId },
    step,
  );
}

async function unitTexts(services: ServiceManager): Promise<{ nodeUnit?: string; updaterUnit?: string }> {
  const nodeUnit = await services.readUnit(NODE_UNIT);
  const updaterUnit = await services.readUnit(UPDATER_UNIT);
  return { ...(nodeUnit !== undefined ? { nodeUnit } : {}), ...(updaterUnit !== undefined ? { updaterUnit } : {}) };
}

/**
 * 3. The switch (env file version, units, links) after recording it as in progress; then restart
 * and wait; then the outcome, or everything put back. Also finishes an upgrade a killed run switched.
 */
async function switchAndWait(
  input: UpgradeInput,
  layout: InstallLayout,
  upgrade: UpgradeInProgress & { nodeName: string; nodeId: string },
  step: StepReporter,
): Promise<UpgradeOutcome> {
  const { services, hostRoot } = input;
  const host = (p: string): string => onHost(hostRoot, p);
  const { from, to, previous } = upgrade;
  // The control plane's count; without one (an answer or record of an earlier release) the installed
  // env file's stays, and an env file from before replicas gets 1.
  const replicas = upgrade.replicas ?? envReplicas(parseEnvText(previous.env)) ?? 1;
  const now = input.now ?? ((): Date => new Date());
  const timeoutMs = input.readyTimeoutMs ?? READY_TIMEOUT_MS;
  const stateFile = path.posix.join(layout.data, UPDATE_STATE_FILE);
  const inProgress: UpgradeInProgress = { from, to, at: upgrade.at, ...(upgrade.replicas !== undefined ? { replicas: upgrade.replicas } : {}), previous };

  let failure: Finding | undefined;
  // What went wrong, without what was done about it (the cause of a refused switch back).
  let whatFailed = '';
  let linksSwitched = false;
  let earlierFailed: string | undefined;
  try {
    // First, durably: a run killed from here on is found and finished by the next one. The last
    // outcome and failed version stay meanwhile (status shows them; the updater must not lose the latter).
    const { lastUpgrade, failedVersion } = (await readUpdateState(hostRoot, layout)) ?? {};
    earlierFailed = failedVersion;
    await writeUpdateState(hostRoot, layout, { ...(lastUpgrade !== undefined ? { lastUpgrade } : {}), ...(failedVersion !== undefined ? { failedVersion } : {}), inProgress });
  } catch (err) {
    await rm(host(layout.releaseDir(to)), { recursive: true, force: true }).catch(() => undefined);
    const f = finding('NODE-WRITE-FAILED', `recording the upgrade in ${stateFile}: ${errnoText(err)}`, 'Nothing was switched: the node keeps running its installed release. Fix the cause shown, then issue a new upgrade command and run that (this command\'s token is used).');
    step('upgrade recorded as in progress', f);
    return { ok: false, finding: f };
  }
  // The env file keeps its mode, at most 0644: an operator who narrowed it (lines of their own in
  // it) does not find it opened up again by an upgrade.
  const envMode = await stat(host(layout.envFile)).then((s) => s.mode & 0o644, () => 0o644);
  try {
    await writeEnvFile(host(layout.envFile), withReplicas(withVersion(previous.env, to), replicas), envMode);
    // The new installer's units: a release may change them (hardening, limits).
    await services.writeUnit(NODE_UNIT, nodeEdgeUnit(layout));
    await services.writeUnit(UPDATER_UNIT, updaterUnit(layout));
    await services.reload();
    await switchLinks(hostRoot, layout, to);
    linksSwitched = true;
  } catch (err) {
    whatFailed = `switching to release ${to}: ${errnoText(err)}`;
    failure = finding('NODE-WRITE-FAILED', whatFailed, 'The previous release was switched back in. Fix the cause shown, then issue a new upgrade command and run that (this command\'s token is used).');
  }
  let restarted = false;
  if (failure === undefined) {
    step(`current and updater → releases/${to}; ${layout.envFile} (${REPLICAS_VARIABLE}=${replicas}: ${describeReplicas(replicas)}) and the units updated`);
    const memoryShort = replicasMemoryFinding(input.memoryBytes, replicas);
    if (memoryShort !== undefined) step('memory for the replicas', memoryShort);
    const outcome = await restartAndWait(input, layout, timeoutMs);
    restarted = outcome.ready || outcome.restarted;
    if (outcome.ready) {
      step(`${NODE_UNIT} restarted on ${to} and ready (${outcome.url}; control link up)`);
      // The upgrade is done either way; a state file that cannot be written only costs the status row
      // (and a later run would find the upgrade unfinished, and finish it again: harmless).
      const recorded = await writeUpdateState(hostRoot, layout, { lastUpgrade: { from, to, at: now().toISOString(), outcome: 'ready' } }).then(() => '', (err: unknown) => `; could not record it in ${stateFile} (${errnoText(err)})`);
      const removed = await removeOlderReleases(hostRoot, layout, [from, to]);
      const kept = (await isInstalledRelease(hostRoot, layout, from)) ? `kept ${from} in ${layout.releases} for a manual switch back` : `release ${from} is not in ${layout.releases} (removed?): there is none to switch back to by hand`;
      step(`${kept}${removed.length > 0 ? `; removed older releases ${removed.join(', ')}` : ''}${recorded}`);
      return { ok: true, nodeName: upgrade.nodeName, nodeId: upgrade.nodeId, from, to };
    }
    // Never restarted: the env file (changed since the checks) gives node-edge nothing to start
    // with. The new release never ran, so it is no failed version.
    whatFailed = outcome.restarted ? `${NODE_UNIT} on ${to} was not ready: ${outcome.reason}` : `${NODE_UNIT} was not restarted on ${to}, which never ran: ${outcome.reason}`;
    failure = outcome.restarted
      ? finding('NODE-UPGRADE-ROLLED-BACK', `${whatFailed}; switched back to ${from}`)
      : finding('NODE-UPGRADE-ENV', `${whatFailed}; switched back to ${from}`, UPGRADE_ENV_AFTER_SWITCH_ADVICE(from, layout.envFile));
  }

  // 4. Back to the previous release, which serves with the same data/: links, units, env file.
  // Never to a release that is gone (the checks refuse a missing one, but it may be removed during
  // the run): the new release, the env file, units and links stay as they are, with the
  // in-progress record, rather than leave `current` linking to nothing and no release on disk.
  if (!(await isInstalledRelease(hostRoot, layout, from))) {
    const kept = linksSwitched ? `releases/${to}, which current and updater link to,` : `releases/${to}`;
    const f = finding(
      'NODE-UPGRADE-SWITCH-BACK-FAILED',
      `${whatFailed}; release ${from} is not in ${layout.releases} (removed?), so nothing was switched back to it: ${kept} and the in-progress record in ${stateFile} are kept`,
      UPGRADE_NO_PREVIOUS_RELEASE_ADVICE(from, to, linksSwitched),
    );
    step(`${NODE_UNIT} on ${to}`, f);
    return { ok: false, finding: f };
  }
  step(`${NODE_UNIT} on ${to}`, failure);
  // The links first, and only once they are back is the new release removed: a full disk (maybe
  // why the upgrade failed) must not leave `current` linking to a deleted release.
  const linksBack = await failureOf(() => switchLinks(hostRoot, layout, from), SWITCH_BACK_TRIES);
  if (linksBack !== undefined) {
    // The in-progress record stays (it was written before the switch): the same command run again
    // finishes this upgrade without a token, as after a kill, and switches back once it can.
    const f = finding('NODE-UPGRADE-SWITCH-BACK-FAILED', `${failure.cause}; switching current and updater back to releases/${from} failed too (${linksBack}): releases/${to} and the in-progress record in ${stateFile} are kept`);
    step(`current and updater → releases/${from}`, f);
    return { ok: false, finding: f };
  }
  const notRestored = [
    await failureOf(() => restoreUnits(services, previous), SWITCH_BACK_TRIES).then((e) => (e === undefined ? undefined : `the units (${e})`)),
    await failureOf(() => writeEnvFile(host(layout.envFile), previous.env, envMode), SWITCH_BACK_TRIES).then((e) => (e === undefined ? undefined : `${layout.envFile} (${e})`)),
  ].filter((what) => what !== undefined);
  if (notRestored.length > 0) {
    // The links are back, so node-edge runs the previous release; what could not be put back is the new installer's (it starts that release too).
    failure = { ...failure, cause: `${failure.cause}; could not put back ${notRestored.join(' and ')}: they stay as the upgrade wrote them` };
  }
  // Only a release that was started and not ready is a failed version; a failed switch never ran it,
  // so the one an earlier upgrade recorded stays (the updater must still not try that one again).
  const failedVersion = restarted ? to : earlierFailed;
  const state = { lastUpgrade: { from, to, at: now().toISOString(), outcome: 'rolled-back' as const, reason: failure.cause }, ...(failedVersion !== undefined ? { failedVersion } : {}) };
  if (!restarted) {
    await rm(host(layout.releaseDir(to)), { recursive: true, force: true }).catch(() => undefined);
    await writeUpdateState(hostRoot, layout, state).catch(() => undefined);
    step(`switched back: ${NODE_UNIT} was never stopped and runs ${from} as before`);
    return { ok: false, finding: failure };
  }
  // The previous release restarted before the outcome is recorded: the in-progress record stays
  // until then, so a run killed meanwhile is found (status: INTERRUPTED) and the same command run
  // again goes on with this upgrade rather than report a node that may be stopped as running.
  const back = await restartAndWait(input, layout, timeoutMs);
  await rm(host(layout.releaseDir(to)), { recursive: true, force: true }).catch(() => undefined);
  await writeUpdateState(hostRoot, layout, state).catch(() => undefined);
  if (back.ready) {
    step(`switched back: ${NODE_UNIT} runs ${from} again and is ready; ${to} is recorded as failed in ${stateFile}`);
    return { ok: false, finding: failure };
  }
  const cause = `${failure.cause}, and ${from} is not ready either: ${back.reason}`;
  step(`${NODE_UNIT} on ${from}`, finding('NODE-SERVICE-START', back.reason, UPGRADE_SWITCHED_BACK_START_ADVICE(from)));
  return { ok: false, finding: { ...failure, cause } };
}

/** Attempts at each part of the switch back (a passing I/O error; a full disk fails them all). */
const SWITCH_BACK_TRIES = 3;

/** Runs `fn` up to `tries` times; undefined once it succeeds, else the last error's code or message. */
async function failureOf(fn: () => Promise<unknown>, tries: number): Promise<string | undefined> {
  let last: unknown;
  for (let i = 0; i < tries; i += 1) {
    try {
      await fn();
      return undefined;
    } catch (err) {
      last = err;
    }
  }
  return errnoText(last);
}

async function restoreUnits(services: ServiceManager, previous: UpgradeInProgress['previous']): Promise<void> {
  if (previous.nodeUnit !== undefined) await services.writeUnit(NODE_UNIT, previous.nodeUnit);
  if (previous.updaterUnit !== undefined) await services.writeUnit(UPDATER_UNIT, previous.updaterUnit);
  else await services.removeUnit(UPDATER_UNIT);
  await services.reload();
}

/**
 * Restarts node-edge and waits until it is ready. `restarted: false`: the env file gave no address
 * to ask (or no readable certificate), so nothing was restarted and the running process is the one
 * from before; a restart job that failed may have stopped it, so that counts as restarted.
 */
async function restartAndWait(input: UpgradeInput, layout: InstallLayout, timeoutMs: number): Promise<{ ready: true; url: string } | { ready: false; restarted: boolean; reason: string }> {
  let target: { url: string; tlsCertPem?: string };
  try {
    target = await readinessTarget(input.hostRoot, layout);
  } catch (err) {
    return { ready: false, restarted: false, reason: (err as Error).message };
  }
  try {
    await restart(input.services);
  } catch (err) {
    return { ready: false, restarted: true, reason: `could not restart ${NODE_UNIT}: ${(err as Error).message}` };
  }
  const outcome = await input.waitReady({ ...target, unit: NODE_UNIT, services: input.services, timeoutMs, controlLink: true });
  return outcome.ready ? { ready: true, url: target.url } : { ...outcome, restarted: true };
}

/** Removes unpacked releases other than `keep` (and their partial leftovers); returns the versions removed. */
async function removeOlderReleases(hostRoot: string, layout: InstallLayout, keep: string[]): Promise<string[]> {
  const removed: string[] = [];
  const entries = await readdir(onHost(hostRoot, layout.releases)).catch(() => [] as string[]);
  for (const entry of entries) {
    // Other dot entries are not the installer's: only its partial leftovers go with the releases.
    if (keep.includes(entry) || (entry.startsWith('.') && !isPartialReleaseLeftover(entry))) continue;
    await rm(onHost(hostRoot, layout.releaseDir(entry)), { recursive: true, force: true }).then(() => removed.push(entry), () => undefined);
  }
  return removed;
}
