/**
 * A host with gateway node n1 installed at an older release (0.0.9 unless told), and the package of
 * this release to upgrade it with: the set-up the upgrade tests share. The enrollment and the
 * control plane's version probe are stand-ins (fake-host.ts).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Test } from 'tap';
import { runInstall } from '../../installer/src/commands/install.js';
import { captureCli, fakeEnroller, fakeServices, healthyControlPlane, hostEnv } from './fake-host.js';
import { buildNodePackage } from './package-builder.js';
import type { releaseKeys } from './package-builder.js';

export interface NodeInstalledAtOld {
  /** The host's root dir (the node is at opt/zenova-node below it). */
  root: string;
  services: ReturnType<typeof fakeServices>;
  /** The packages of the installed release and of this one. */
  oldPkg: string;
  newPkg: string;
}

/** Installs n1 at `version` under a fresh root (removed at teardown); `work` holds the packages. */
export async function nodeInstalledAtOld(t: Test, work: string, keys: ReturnType<typeof releaseKeys>, version = '0.0.9'): Promise<NodeInstalledAtOld> {
  const root = mkdtempSync(join(tmpdir(), 'zn-installed-at-old-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const services = fakeServices(root);
  const old = await buildNodePackage(work, keys, { name: `old-${Math.random()}.zpkg`, version });
  const cli = captureCli(work);
  const installHost = { keyPem: keys.publicKeyPem, services, enroll: fakeEnroller, probeControlPlane: healthyControlPlane({ version }) };
  const installed = await runInstall(['node', '--package', old.file, '--control-plane', 'https://cp.example.test', '--token', 'tok_install'], cli.ctx, hostEnv(root, installHost));
  if (!t.equal(installed, 0, `installed at ${version}`)) t.comment(cli.out());
  const pkg = await buildNodePackage(work, keys, { name: `new-${Math.random()}.zpkg` });
  return { root, services, oldPkg: old.file, newPkg: pkg.file };
}
