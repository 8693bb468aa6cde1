/**
 * What `zenova status` says when the node's identity is gone: on an installed node (its unit in
 * place) the install command is refused (NODE-INSTALLED), so status advises a re-enroll naming the
 * node; where only a failed install's kept data/ is left (`--install-dir`), nothing is installed:
 * exit 1, saying how that dir is recovered.
 */
import { rmSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { runInstall } from '../../installer/src/commands/install.js';
import { runStatus } from '../../installer/src/commands/status.js';
import type { HostEnv } from '../../installer/src/host/host-env.js';
import { captureCli, fakeEnroller, fakeServices, hostEnv } from './fake-host.js';
import { buildNodePackage, releaseKeys } from './package-builder.js';

const keys = releaseKeys();
const work = mkdtempSync(join(tmpdir(), 'zn-status-enrolled-work-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));
const pkg = await buildNodePackage(work, keys);
const command = ['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token', 'zn_it_status_test_1'];

function freshHost(t: { teardown(fn: () => unknown): void }, waitReady?: HostEnv['waitReady']) {
  const root = mkdtempSync(join(tmpdir(), 'zn-status-enrolled-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  return { root, host: hostEnv(root, { keyPem: keys.publicKeyPem, services: fakeServices(root), enroll: fakeEnroller, ...(waitReady === undefined ? {} : { waitReady }) }) };
}

t.test('an installed node whose credential, then identity, are gone is told to re-enroll, which works, not to rerun the install command, which is refused', async (t) => {
  const { root, host } = freshHost(t);
  t.equal(await runInstall(command, captureCli(work).ctx, host), 0, 'installed');
  // The fake enrollment writes no credential.json: the identity is there, the credential gone.
  let cli = captureCli(work);
  t.equal(await runStatus([], cli.ctx, host), 1, 'not enrolled: exit 1');
  t.match(cli.out(), /^node: +not enrolled \(.*\); re-enroll it: `zenova gateway-node reenroll-command n1` prints the `--reenroll` command to run here/m, 'names the node');
  t.notMatch(cli.out(), /run the install command again/);
  rmSync(join(root, 'opt/zenova-node/data/identity.json'));
  cli = captureCli(work);
  t.equal(await runStatus([], cli.ctx, host), 1);
  t.match(cli.out(), /re-enroll it: `zenova gateway-node reenroll-command NAME`/, 'without the identity the name is a placeholder');
  cli = captureCli(work);
  t.equal(await runInstall([...command.slice(0, -1), 'zn_it_status_test_2'], cli.ctx, host), 1, 'the install command is refused there');
  t.match(cli.out(), /NODE-INSTALLED/);
});

t.test('status --install-dir of a failed install whose rollback kept data/ exits 1, says nothing is installed and names the re-enroll', async (t) => {
  const { host } = freshHost(t, async () => ({ ready: false, reason: 'node-edge.service failed to start' }));
  t.equal(await runInstall(command, captureCli(work).ctx, host), 1, 'the install fails at readiness and is rolled back');
  let cli = captureCli(work);
  t.equal(await runStatus([], cli.ctx, host), 1);
  t.match(cli.out(), /no gateway node is installed/);
  cli = captureCli(work);
  t.equal(await runStatus(['--install-dir', '/opt/zenova-node'], cli.ctx, host), 1, 'exit 1: no node is installed there either');
  t.match(cli.out(), /^node: +no gateway node is installed on this host \(no node-edge service\); \/opt\/zenova-node keeps the data of node n1 from an install that did not finish: run its install command with --reenroll/m);
  t.notMatch(cli.out(), /^version:/m, 'no installed-node rows');
});

t.test('an installed node whose identity.json is damaged is told to re-enroll, not only that the file is bad', async (t) => {
  const { root, host } = freshHost(t);
  t.equal(await runInstall(command, captureCli(work).ctx, host), 0, 'installed');
  writeFileSync(join(root, 'opt/zenova-node/data/identity.json'), '{');
  const cli = captureCli(work);
  t.equal(await runStatus([], cli.ctx, host), 1, 'exit 1');
  t.match(cli.out(), /^state: +.*identity\.json.*; re-enroll it: `zenova gateway-node reenroll-command NAME` prints the `--reenroll` command to run here/m);
});
