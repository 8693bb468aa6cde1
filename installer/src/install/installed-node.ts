/**
 * What `--upgrade` needs to know of the node installed on this host: its dir (from the node-edge
 * unit), the release `current` links to (which must be there, unpacked), and the node id and name of its identity (the upgrade
 * token must be the one issued for that node). Read-only.
 */
import { readFile, readdir, readlink, stat } from 'node:fs/promises';
import path from 'node:path';
import { IDENTITY_FILE, nodeIdentitySchema } from '../../../edge-node/src/state/identity.js';
import type { ServiceManager } from '../host/service-manager.js';
import { NODE_UNIT, installDirFromUnit, installLayout, onHost, releaseOfLink } from './install-layout.js';
import type { InstallLayout } from './install-layout.js';
import { isManifestlessRelease, isPartialReleaseLeftover, isUnpackedRelease } from './release-manifest.js';
import { readUpdateState } from './update-state.js';
import type { UpgradeInProgress } from './update-state.js';

export interface InstalledNode {
  installDir: string;
  /** The release `current` links to (releases/<version>). */
  version: string;
  nodeId: string;
  nodeName: string;
  /** An upgrade an earlier run started and never finished (killed midway): update-state.ts. */
  interrupted?: UpgradeInProgress;
}

export type InstalledNodeLookup = { ok: true; node: InstalledNode } | { ok: false; cause: string };

export async function readInstalledNode(hostRoot: string, services: ServiceManager): Promise<InstalledNodeLookup> {
  const unit = await services.readUnit(NODE_UNIT);
  if (unit === undefined) return { ok: false, cause: `no gateway node is installed on this host (no ${NODE_UNIT})` };
  const installDir = installDirFromUnit(unit);
  if (installDir === undefined) return { ok: false, cause: `${NODE_UNIT} names no install dir (its EnvironmentFile= is not <dir>/etc/node.env): it was not written by zenova install node` };
  const layout = installLayout(installDir);
  let target: string;
  try {
    target = await readlink(onHost(hostRoot, layout.current));
  } catch (err) {
    return { ok: false, cause: `cannot read ${layout.current} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message}): the installation is incomplete` };
  }
  const version = releaseOfLink(target, layout);
  if (version === undefined) return { ok: false, cause: `${layout.current} links to ${target}, not to a release in ${layout.releases}` };
  // The release the node runs must be there: the upgrade switches back to it should the new one not
  // be ready, and after a success it is the one kept for a manual switch back.
  if (!(await isInstalledRelease(hostRoot, layout, version))) {
    const there = await stat(onHost(hostRoot, layout.releaseDir(version))).then((s) => s.isDirectory(), () => false);
    const what = there ? `${layout.releaseDir(version)} is no release the installer unpacked (no release manifest of ${version} in it)` : `release ${version} is not there (removed?)`;
    return { ok: false, cause: `${layout.current} links to ${target}, but ${what}: node-edge cannot start from it, and an upgrade would have no release to switch back to; ${await relinkAdvice(hostRoot, layout)}, then run this command again` };
  }
  const identityFile = path.posix.join(layout.data, IDENTITY_FILE);
  let identity;
  try {
    identity = nodeIdentitySchema.safeParse(JSON.parse(await readFile(onHost(hostRoot, identityFile), 'utf8')));
  } catch (err) {
    return { ok: false, cause: `cannot read the node's identity ${identityFile} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message}): re-enroll the node first (--reenroll)` };
  }
  if (!identity.success) return { ok: false, cause: `the node's identity ${identityFile} is damaged: re-enroll the node first (--reenroll)` };
  const interrupted = (await readUpdateState(hostRoot, layout))?.inProgress;
  return { ok: true, node: { installDir, version, nodeId: identity.data.nodeId, nodeName: identity.data.nodeName, ...(interrupted !== undefined ? { interrupted } : {}) } };
}

/**
 * Whether releases/<version> is a release the installer unpacked: one with its manifest, or one an
 * installer from before release manifests left (trusted here as the dir is the node-edge unit's).
 */
export async function isInstalledRelease(hostRoot: string, layout: InstallLayout, version: string): Promise<boolean> {
  const physical = onHost(hostRoot, layout.releaseDir(version));
  return (await isUnpackedRelease(physical, version)) || (await isManifestlessRelease(physical));
}

/** How to relink a `current` that names no release, as `zenova status` advises it: to the newest release there. */
async function relinkAdvice(hostRoot: string, layout: InstallLayout): Promise<string> {
  const entries = await readdir(onHost(hostRoot, layout.releases)).catch(() => [] as string[]);
  const releases: string[] = [];
  for (const entry of entries) if (!isPartialReleaseLeftover(entry) && (await isInstalledRelease(hostRoot, layout, entry))) releases.push(entry);
  releases.sort((a, b) => compareReleaseVersions(b, a) ?? b.localeCompare(a));
  return relinkWords(layout, releases);
}

/** The words of a relink of `current` to the first of `releases` (newest first), or of putting one back when there is none; `zenova status` says the same. */
export function relinkWords(layout: InstallLayout, releases: readonly string[]): string {
  return releases[0] === undefined
    ? `${layout.releases} holds no release to link it to: put the node's release back there, then \`ln -sfn releases/<version> ${layout.current}\` and \`systemctl restart node-edge\``
    : `link it to a release that is there: \`ln -sfn ${path.posix.join('releases', releases[0])} ${layout.current}\`, then \`systemctl restart node-edge\` (${layout.releases} holds ${releases.join(', ')})`;
}

/**
 * -1, 0 or 1 as release version `a` is older than, the same as or newer than `b`: numeric dot parts
 * compared as numbers (1.10 after 1.9), a pre-release (`1.2.0-rc.1`) before its release and
 * pre-releases ordered as semver §11 orders them (comparePreReleases); undefined when either is not
 * of that form (then only equality is known).
 */
export function compareReleaseVersions(a: string, b: string): -1 | 0 | 1 | undefined {
  const parse = (v: string): { core: number[]; pre: string | undefined } | undefined => {
    const m = /^(\d+(?:\.\d+)*)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$/.exec(v);
    return m?.[1] === undefined ? undefined : { core: m[1].split('.').map(Number), pre: m[2] };
  };
  const x = parse(a);
  const y = parse(b);
  if (x === undefined || y === undefined) return a === b ? 0 : undefined;
  for (let i = 0; i < Math.max(x.core.length, y.core.length); i++) {
    const d = (x.core[i] ?? 0) - (y.core[i] ?? 0);
    if (d !== 0) return d < 0 ? -1 : 1;
  }
  if (x.pre === y.pre) return 0;
  if (x.pre === undefined) return 1;
  if (y.pre === undefined) return -1;
  return comparePreReleases(x.pre, y.pre);
}

/**
 * Semver §11: dot-separated identifiers left to right, numeric ones as numbers (rc.9 before rc.10)
 * and before alphanumeric ones, alphanumeric ones as ASCII text; when all of the shorter's are equal,
 * fewer identifiers first (alpha before alpha.1).
 */
function comparePreReleases(a: string, b: string): -1 | 0 | 1 {
  const x = a.split('.');
  const y = b.split('.');
  const numeric = /^\d+$/;
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const p = x[i] ?? '';
    const q = y[i] ?? '';
    const pNumeric = numeric.test(p);
    const qNumeric = numeric.test(q);
    if (pNumeric && qNumeric) {
      const d = Number(p) - Number(q);
      if (d !== 0) return d < 0 ? -1 : 1;
    } else if (pNumeric !== qNumeric) {
      return pNumeric ? -1 : 1;
    } else if (p !== q) {
      return p < q ? -1 : 1;
    }
  }
  return x.length === y.length ? 0 : x.length < y.length ? -1 : 1;
}
