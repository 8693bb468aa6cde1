/**
 * The write phase of `zenova install node`, run only after every check passed: lay out the
 * install dir, unpack the verified release, write etc/, redeem the token into data/, install and
 * start the units, wait for readiness. Each step is printed (✓/✗). On failure everything this run
 * wrote is undone in reverse order, except data/ once it holds an identity (DESIGN §2: a node's
 * data is never deleted), so no half-installed service remains.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, rename, rm, rmdir, symlink } from 'node:fs/promises';
import path from 'node:path';
import { enroll } from '../../../edge-node/src/enroll/enroll.js';
import type { EnrollOptions, EnrollResult } from '../../../edge-node/src/enroll/enroll.js';
import { EnrollError } from '../../../edge-node/src/enroll/enroll-errors.js';
import { writeFileAtomic } from '../../../edge-node/src/state/atomic-write.js';
import type { ServiceManager } from '../host/service-manager.js';
import { extractPackage } from '../package/package-extract.js';
import type { PackageManifest } from '../package/package-manifest.js';
import { finding } from './diagnostics.js';
import type { Finding } from './diagnostics.js';
import { NODE_UNIT, UPDATER_UNIT, installLayout, onHost } from './install-layout.js';
import type { InstallLayout } from './install-layout.js';
import { READY_TIMEOUT_MS, readyzUrl } from './readiness-wait.js';
import type { ReadinessWaiter } from './readiness-wait.js';
import { nodeEdgeUnit, nodeEnvFile, updaterUnit } from './unit-files.js';
import { pathExists } from './path-exists.js';

export type Enroller = (opts: EnrollOptions) => Promise<EnrollResult>;

export interface InstallInput {
  mode: 'install' | 'reenroll';
  hostRoot: string;
  installDir: string;
  packageFile: string;
  manifest: PackageManifest;
  dataOffset: number;
  controlPlaneUrl: string;
  caPem: string | undefined;
  token: string;
  listen: { host: string; port: number };
  services: ServiceManager;
  enroll?: Enroller;
  waitReady: ReadinessWaiter;
  readyTimeoutMs?: number;
}

/** Receives each step as it ends: ✓ with a label, or ✗ with the finding. */
export type StepReporter = (label: string, failure?: Finding) => void;

export type InstallOutcome = { ok: true; nodeName: string; nodeId: string } | { ok: false; finding: Finding };

class StepFailed extends Error {
  constructor(readonly finding: Finding) {
    super(finding.cause);
  }
}

function errnoText(err: unknown): string {
  return (err as NodeJS.ErrnoException).code ?? (err as Error).message;
}


function enrollFinding(err: unknown, token: string): Finding {
  const message = ((err as Error).message ?? String(err)).split(token).join('[redacted]');
  if (err instanceof EnrollError && /TOKEN/.test(err.code)) return finding('NODE-TOKEN-REJECTED', message);
  return finding('NODE-ENROLL-FAILED', message);
}

/** Redeems the one-time token into the install's data/ (the same enrollment `zenova-node enroll` does). */
function redeemToken(input: InstallInput, layout: InstallLayout, reenroll: boolean): Promise<EnrollResult> {
  return (input.enroll ?? enroll)({
    controlPlaneUrl: input.controlPlaneUrl,
    token: input.token,
    stateDir: onHost(input.hostRoot, layout.data),
    ...(input.caPem !== undefined ? { caPem: input.caPem, caFile: layout.caFile } : {}),
    reenroll,
  });
}

export async function installNode(input: InstallInput, step: StepReporter): Promise<InstallOutcome> {
  return input.mode === 'install' ? freshInstall(input, step) : reenroll(input, step);
}

async function freshInstall(input: InstallInput, step: StepReporter): Promise<InstallOutcome> {
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
      const first = await mkdir(host(layout.dir), { recursive: true, mode: 0o755 });
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
      const partial = host(path.posix.join(layout.releases, `.${input.manifest.version}.partial-${randomBytes(4).toString('hex')}`));
      try {
        if (await pathExists(host(release))) await rm(host(release), { recursive: true, force: true });
        await extractPackage(input.packageFile, input.manifest, input.dataOffset, partial);
        await rename(partial, host(release));
      } catch (err) {
        await rm(partial, { recursive: true, force: true });
        throw err;
      }
      undo.push(() => rm(host(release), { recursive: true, force: true }));
    });

    await run(`current and updater → releases/${input.manifest.version}`, 'NODE-WRITE-FAILED', async () => {
      for (const link of [layout.current, layout.updater]) await replaceSymlink(host(link), path.posix.join('releases', input.manifest.version), undo);
    });

    await run(`${layout.envFile}${input.caPem !== undefined ? ` and ${layout.caFile}` : ''}`, 'NODE-WRITE-FAILED', async () => {
      await writeFileAtomic(host(layout.envFile), nodeEnvFile(layout, { listen: `${input.listen.host}:${input.listen.port}`, version: input.manifest.version, controlPlaneUrl: input.controlPlaneUrl }), 0o644);
      undo.push(() => rm(host(layout.envFile), { force: true }));
      if (input.caPem !== undefined) {
        await writeFileAtomic(host(layout.caFile), input.caPem, 0o644);
        undo.push(() => rm(host(layout.caFile), { force: true }));
      }
    });

    // The token is redeemed only now: a failure above never burns it.
    const dataExisted = await pathExists(host(layout.data));
    undo.push(async () => {
      // data/ goes only if this run made it and it holds no identity (the token was refused).
      if (!dataExisted && !(await pathExists(host(`${layout.data}/identity.json`)))) await rm(host(layout.data), { recursive: true, force: true });
    });
    try {
      enrolled = await redeemToken(input, layout, false);
    } catch (err) {
      throw new StepFailed(enrollFinding(err, input.token));
    }
    step(`enrolled as node ${enrolled.nodeName} (id ${enrolled.nodeId}); identity in ${layout.data}`);

    await startUnits(input, layout, undo, step);
    return { ok: true, nodeName: enrolled.nodeName, nodeId: enrolled.nodeId };
  } catch (err) {
    const failure = err instanceof StepFailed ? err.finding : finding('NODE-WRITE-FAILED', errnoText(err));
    step(failure.code === 'NODE-SERVICE-START' ? 'node-edge ready' : 'install step', failure);
    for (const action of undo.reverse()) await action().catch(() => undefined);
    step(`rolled back what this run wrote${enrolled !== undefined ? ` (kept ${layout.data}: it holds node ${enrolled.nodeName}'s identity)` : ''}`);
    return { ok: false, finding: failure };
  }
}

async function replaceSymlink(link: string, target: string, undo: Array<() => Promise<void>>): Promise<void> {
  // symlink beside, then rename over: `current` is never missing or half-written.
  const tmp = `${link}.${randomBytes(4).toString('hex')}.tmp`;
  await symlink(target, tmp);
  await rename(tmp, link);
  undo.push(() => rm(link, { force: true }));
}

async function startUnits(input: InstallInput, layout: InstallLayout, undo: Array<() => Promise<void>>, step: StepReporter): Promise<void> {
  const { services } = input;
  try {
    await services.writeUnit(NODE_UNIT, nodeEdgeUnit(layout));
    await services.writeUnit(UPDATER_UNIT, updaterUnit(layout));
    undo.push(async () => {
      await services.removeUnit(NODE_UNIT);
      await services.removeUnit(UPDATER_UNIT);
      await services.reload().catch(() => undefined);
    });
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
  const url = readyzUrl(input.listen);
  const outcome = await input.waitReady({ url, unit: NODE_UNIT, services, timeoutMs: input.readyTimeoutMs ?? READY_TIMEOUT_MS });
  if (!outcome.ready) throw new StepFailed(finding('NODE-SERVICE-START', `${outcome.reason}; see \`zenova logs node-edge --since '10 min ago'\``));
  step(`node-edge ready (${url})`);
}

/**
 * --reenroll: stop node-edge, replace the identity in data/ (spool, config cache and unsent records
 * stay), start it again. If the token is refused the old identity is untouched and the node is
 * started again as it was.
 */
async function reenroll(input: InstallInput, step: StepReporter): Promise<InstallOutcome> {
  const layout = installLayout(input.installDir);
  const host = (p: string): string => onHost(input.hostRoot, p);
  const { services } = input;
  try {
    await services.stop(NODE_UNIT);
  } catch (err) {
    const f = finding('NODE-SERVICE-START', `could not stop ${NODE_UNIT}: ${errnoText(err)}`);
    step(`stop ${NODE_UNIT}`, f);
    return { ok: false, finding: f };
  }
  step(`${NODE_UNIT} stopped`);
  let enrolled: EnrollResult;
  try {
    enrolled = await redeemToken(input, layout, true);
  } catch (err) {
    const f = enrollFinding(err, input.token);
    step('re-enroll', f);
    await services.start(NODE_UNIT).catch(() => undefined);
    step(`${NODE_UNIT} started again with its previous identity`);
    return { ok: false, finding: f };
  }
  step(`re-enrolled as node ${enrolled.nodeName} (id ${enrolled.nodeId}); spool and unsent records kept in ${layout.data}`);
  try {
    // The env file (listen address, version) stays as installed; only the trust may change.
    if (input.caPem !== undefined) await writeFileAtomic(host(layout.caFile), input.caPem, 0o644);
    await services.start(NODE_UNIT);
  } catch (err) {
    const f = finding('NODE-SERVICE-START', `could not start ${NODE_UNIT}: ${errnoText(err)}`);
    step(`start ${NODE_UNIT}`, f);
    return { ok: false, finding: f };
  }
  step(`${NODE_UNIT} started`);
  const url = readyzUrl(input.listen);
  const outcome = await input.waitReady({ url, unit: NODE_UNIT, services, timeoutMs: input.readyTimeoutMs ?? READY_TIMEOUT_MS });
  if (!outcome.ready) {
    const f = finding('NODE-SERVICE-START', `${outcome.reason}; see \`zenova logs node-edge --since '10 min ago'\``);
    step('node-edge ready', f);
    return { ok: false, finding: f };
  }
  step(`node-edge ready (${url})`);
  return { ok: true, nodeName: enrolled.nodeName, nodeId: enrolled.nodeId };
}
