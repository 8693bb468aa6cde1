/**
 * The installer refuses an install dir under a tmpfs or kernel pseudo filesystem (/run, /var/run,
 * /dev, /proc, /sys) with NODE-DIR-FORBIDDEN before writing anything, saying why, as the control
 * plane refuses the same dirs when the node is created.
 */
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { installDirProblem } from '../../installer/src/install/install-dir-rules.js';
import { installDirProblem as controlPlaneRule } from '../../control-plane/src/nodes/node-validation.js';
import { forbiddenInstallRootRule } from '../../proto/src/install-dir-rules.js';
import { runInstall } from '../../installer/src/commands/install.js';
import { buildNodePackage, releaseKeys } from './package-builder.js';
import { captureCli, hostEnv, listTree } from './fake-host.js';

const CASES: Array<[dir: string, rule: string]> = [
  ['/run/zenova-node', 'must not be under /run (a tmpfs, wiped on reboot)'],
  ['/var/run/x', 'must not be under /var/run (a link to /run, a tmpfs wiped on reboot)'],
  ['/dev/shm/x', 'must not be under /dev (device files and /dev/shm, a tmpfs: not a real disk)'],
  ['/proc/x', 'must not be under /proc (a kernel pseudo filesystem, not a real disk)'],
  ['/sys/x', 'must not be under /sys (a kernel pseudo filesystem, not a real disk)'],
  ['/run/user/0/zenova-node', 'must not be under /run/user'],
];

t.test('each dir is NODE-DIR-FORBIDDEN with its reason, and the control plane gives the same words', async (t) => {
  for (const [dir, rule] of CASES) {
    t.equal(forbiddenInstallRootRule(dir), rule, `the shared rule: ${dir}`);
    t.same(installDirProblem(dir), { code: 'NODE-DIR-FORBIDDEN', rule }, dir);
    t.equal(controlPlaneRule(dir), rule, `control plane: ${dir}`);
  }
  for (const dir of ['/runner/zenova-node', '/devices/zenova-node', '/system/zenova-node', '/srv/proc/zenova-node']) {
    t.equal(forbiddenInstallRootRule(dir), undefined, `the shared rule: ${dir} is fine`);
    t.equal(installDirProblem(dir), undefined, `${dir} is fine`);
    t.equal(controlPlaneRule(dir), undefined, `control plane: ${dir} is fine`);
  }
});

t.test('zenova install node refuses each before writing anything, naming the rule', async (t) => {
  const keys = releaseKeys();
  const root = mkdtempSync(join(tmpdir(), 'zn-dir-tmpfs-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const work = mkdtempSync(join(tmpdir(), 'zn-dir-tmpfs-work-'));
  t.teardown(() => rmSync(work, { recursive: true, force: true }));
  const pkg = await buildNodePackage(work, keys);
  for (const [dir, rule] of CASES) {
    const host = hostEnv(root, { keyPem: keys.publicKeyPem });
    const before = listTree(root);
    const cli = captureCli(work);
    const exit = await runInstall(['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token', 'tok_abc', '--install-dir', dir], cli.ctx, host);
    t.equal(exit, 1, `${dir} refused`);
    t.ok(cli.out().includes(`✗ NODE-DIR-FORBIDDEN: install dir ${dir} ${rule}`), `${dir}: says the rule and why`);
    t.match(cli.out(), /nothing was written/);
    t.same(listTree(root), before, `${dir}: nothing written`);
  }
});
