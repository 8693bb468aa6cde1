/**
 * What `--upgrade` writes to etc/node.env is what the node then runs with: a ZENOVA_NODE_REPLICAS
 * or ZENOVA_NODE_VERSION line an operator appended (systemd, parseEnvText and `zenova status` take
 * the last of several) is replaced along with the first, leaving one line; and the file keeps its
 * owner and group (a group an operator let read it), not only its mode. The enrollment, the token
 * redemption and the service manager are stand-ins; the tests run as root, so chown works.
 */
import t from 'tap';
import type { Test } from 'tap';
import { chmodSync, chownSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runInstall } from '../../installer/src/commands/install.js';
import { runStatus } from '../../installer/src/commands/status.js';
import type { HostEnv } from '../../installer/src/host/host-env.js';
import { parseEnvText, withReplicas } from '../../installer/src/install/env-file.js';
import { withVersion } from '../../installer/src/install/upgrade-node.js';
import type { UpgradeTokenRedeemer } from '../../installer/src/install/upgrade-token.js';
import { productVersion } from '../../proto/src/product-version.js';
import { captureCli, hostEnv } from './fake-host.js';
import { releaseKeys } from './package-builder.js';
import { nodeInstalledAtOld } from './node-installed-at-old.js';

const keys = releaseKeys();
const work = mkdtempSync(join(tmpdir(), 'zn-upenv-work-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));
const OLD = '0.0.9';
const NEW = productVersion();
const DIR = 'opt/zenova-node';

/** A host with node n1 installed at OLD, and the package of NEW. */
async function installedAtOld(t: Test): Promise<{ root: string; host: HostEnv; pkg: string; envFile: string }> {
  const h = await nodeInstalledAtOld(t, work, keys, OLD);
  return { root: h.root, pkg: h.newPkg, host: hostEnv(h.root, { keyPem: keys.publicKeyPem, services: h.services }), envFile: join(h.root, DIR, 'etc/node.env') };
}

const redeemWithReplicas = (replicas: number): UpgradeTokenRedeemer => async (req) => ({ nodeId: req.nodeId, nodeName: 'n1', targetVersion: req.toVersion, replicas });

async function upgrade(host: HostEnv, pkg: string): Promise<{ exit: number; out: string }> {
  const cli = captureCli(work);
  const exit = await runInstall(['node', '--package', pkg, '--control-plane', 'https://cp.example.test', '--token', 'tok_upgrade', '--upgrade'], cli.ctx, host);
  return { exit, out: cli.out() + cli.err() };
}

t.test('a replicas or version line an operator appended is replaced too, so the node runs the count the upgrade says', async (t) => {
  const h = await installedAtOld(t);
  writeFileSync(h.envFile, `${readFileSync(h.envFile, 'utf8')}ZENOVA_NODE_REPLICAS=4\nZENOVA_NODE_VERSION=0.0.8\nHTTPS_PROXY=http://proxy.example.test:3128\n`);
  const r = await upgrade({ ...h.host, redeemUpgrade: redeemWithReplicas(2) }, h.pkg);
  t.equal(r.exit, 0, 'the upgrade succeeds');
  t.match(r.out, /ZENOVA_NODE_REPLICAS=2/);
  const text = readFileSync(h.envFile, 'utf8');
  t.equal(text.match(/^ZENOVA_NODE_REPLICAS=/gm)?.length, 1, 'one replicas line');
  t.equal(text.match(/^ZENOVA_NODE_VERSION=/gm)?.length, 1, 'one version line');
  t.same({ replicas: parseEnvText(text).ZENOVA_NODE_REPLICAS, version: parseEnvText(text).ZENOVA_NODE_VERSION }, { replicas: '2', version: NEW }, 'the last line of each, as systemd reads it, is the upgrade\'s');
  t.match(text, 'HTTPS_PROXY=http://proxy.example.test:3128\n', 'the operator\'s other line stays');
  const status = captureCli(work);
  await runStatus([], status.ctx, h.host);
  t.match(status.out(), /replicas:\s+2 \(/, 'zenova status shows the count the upgrade wrote');
});

t.test('the line written takes the place of the last of its kind; the others go and every other line stays', async (t) => {
  const env = 'ZENOVA_NODE_REPLICAS=1\nA=1\n  ZENOVA_NODE_REPLICAS=4\nB=2\n';
  t.equal(withReplicas(env, 2), 'A=1\nZENOVA_NODE_REPLICAS=2\nB=2\n');
  t.equal(withVersion('ZENOVA_NODE_VERSION=0.0.8\nZENOVA_NODE_VERSION=0.0.9\nC=3\n', '0.1.0'), 'ZENOVA_NODE_VERSION=0.1.0\nC=3\n');
  t.equal(withReplicas('A=1', 3), 'A=1\nZENOVA_NODE_REPLICAS=3\n', 'added when missing');
});

t.test('the upgrade keeps the env file\'s owner and group along with its mode', async (t) => {
  const h = await installedAtOld(t);
  chownSync(h.envFile, 0, 1000);
  chmodSync(h.envFile, 0o640);
  const r = await upgrade({ ...h.host, redeemUpgrade: redeemWithReplicas(2) }, h.pkg);
  t.equal(r.exit, 0, 'the upgrade succeeds');
  t.match(readFileSync(h.envFile, 'utf8'), `ZENOVA_NODE_VERSION=${NEW}`, 'the env file was rewritten');
  const s = statSync(h.envFile);
  t.same({ uid: s.uid, gid: s.gid, mode: (s.mode & 0o777).toString(8) }, { uid: 0, gid: 1000, mode: '640' });
});
