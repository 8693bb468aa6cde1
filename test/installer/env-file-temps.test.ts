/**
 * etc/node.env's temp files: the file is written under a temp name `.node.env.<12 hex>.tmp` and
 * renamed, and a run killed in between leaves that temp file behind with the env file's lines. It is
 * 0600 for as long as it has the temp name (node.env itself gets 0644 once renamed), and the next
 * run that holds the install lock — install, --reenroll, --upgrade — removes such leftovers from the
 * install dir's etc/, and nothing else; a --check-only run (no lock) and a run while the updater unit
 * runs leave them.
 */
import t from 'tap';
import type { Test } from 'tap';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import fsPromises from 'node:fs/promises';
import { syncBuiltinESMExports } from 'node:module';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { runInstall } from '../../installer/src/commands/install.js';
import type { HostEnv } from '../../installer/src/host/host-env.js';
import type { UpgradeTokenRedeemer } from '../../installer/src/install/upgrade-token.js';
import { captureCli, fakeEnroller, fakeServices, healthyControlPlane, hostEnv } from './fake-host.js';
import { buildNodePackage, releaseKeys } from './package-builder.js';
import { nodeInstalledAtOld } from './node-installed-at-old.js';

const keys = releaseKeys();
const work = mkdtempSync(join(tmpdir(), 'zn-envtmp-work-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));
const OLD = '0.0.9';
const ETC = 'opt/zenova-node/etc';
const TEMP = /^\.node\.env\.[0-9a-f]{12}\.tmp$/;

/** A host with node n1 installed at OLD, and the package of this release for an upgrade. */
async function installedAtOld(t: Test): Promise<{ root: string; host: HostEnv; services: ReturnType<typeof fakeServices>; oldPkg: string; newPkg: string }> {
  const h = await nodeInstalledAtOld(t, work, keys, OLD);
  return { ...h, host: hostEnv(h.root, { keyPem: keys.publicKeyPem, services: h.services, enroll: fakeEnroller, probeControlPlane: healthyControlPlane({ version: OLD }) }) };
}

/** What a run killed between writing node.env's temp file and renaming it leaves, as earlier installers wrote it (0644). */
function leftovers(root: string): string[] {
  const names = ['.node.env.0123456789ab.tmp', '.node.env.fedcba987654.tmp'];
  for (const name of names) {
    writeFileSync(join(root, ETC, name), '# Written by `zenova install node`.\nHTTPS_PROXY=http://user:secret@proxy:3128\n');
    chmodSync(join(root, ETC, name), 0o644);
  }
  return names;
}

/** Names in etc/ that look like node.env's temp files but are not its leftovers: another file's temp, another name, a dir. */
function lookalikes(root: string): string[] {
  writeFileSync(join(root, ETC, '.control-plane-ca.pem.0123456789ab.tmp'), 'x');
  writeFileSync(join(root, ETC, '.node.env.tmp'), 'x');
  mkdirSync(join(root, ETC, '.node.env.abcdefabcdef.tmp'));
  return ['.control-plane-ca.pem.0123456789ab.tmp', '.node.env.abcdefabcdef.tmp', '.node.env.tmp'];
}

const etcEntries = (root: string): string[] => readdirSync(join(root, ETC)).sort();

t.test('the temp file of etc/node.env is 0600 for as long as it has its temp name, at install and at upgrade; node.env gets 0644 once renamed', async (t) => {
  // Every rename the installer makes is seen here: the mode of each node.env temp file at that moment.
  const realRename = fsPromises.rename;
  const tempModes: Array<{ name: string; mode: number }> = [];
  fsPromises.rename = async (from, to) => {
    const name = basename(String(from));
    if (TEMP.test(name)) tempModes.push({ name, mode: statSync(from).mode & 0o777 });
    return realRename(from, to);
  };
  syncBuiltinESMExports();
  t.teardown(() => {
    fsPromises.rename = realRename;
    syncBuiltinESMExports();
  });
  const h = await installedAtOld(t);
  t.equal(tempModes.length, 1, 'the install wrote node.env through a temp file');
  t.equal(statSync(join(h.root, ETC, 'node.env')).mode & 0o777, 0o644, 'node.env is 0644 after the install');

  const redeemOk: UpgradeTokenRedeemer = async (req) => ({ nodeId: req.nodeId, nodeName: 'n1', targetVersion: req.toVersion });
  const cli = captureCli(work);
  const exit = await runInstall(['node', '--package', h.newPkg, '--control-plane', 'https://cp.example.test', '--token', 'tok_upgrade', '--upgrade'], cli.ctx, { ...h.host, probeControlPlane: healthyControlPlane(), redeemUpgrade: redeemOk });
  t.equal(exit, 0, cli.out());
  t.equal(tempModes.length, 2, 'the upgrade wrote node.env through a temp file too');
  t.same(tempModes.map((m) => m.mode.toString(8)), ['600', '600'], 'each temp file was 0600 up to its rename');
  t.equal(statSync(join(h.root, ETC, 'node.env')).mode & 0o777, 0o644, 'node.env is 0644 after the upgrade');
  t.same(etcEntries(h.root), ['node.env'], 'no temp file left');
});

t.test('a --reenroll removes the temp files of node.env an interrupted run left in the install dir\'s etc/, and nothing else', async (t) => {
  const h = await installedAtOld(t);
  const left = leftovers(h.root);
  const others = lookalikes(h.root);
  const cli = captureCli(work);
  const exit = await runInstall(['node', '--package', h.oldPkg, '--reenroll', '--control-plane', 'https://cp.example.test', '--token', 'tok_reenroll'], cli.ctx, h.host);
  t.equal(exit, 0, cli.out());
  t.match(cli.out(), new RegExp(`✓ removed 2 temp files of /opt/zenova-node/etc/node\\.env an interrupted run left: ${left.join(', ').replaceAll('.', '\\.')}`));
  t.same(etcEntries(h.root), [...others, 'node.env'].sort(), 'only the leftovers are gone');
});

t.test('an --upgrade removes them before it writes node.env again', async (t) => {
  const h = await installedAtOld(t);
  leftovers(h.root);
  const redeemOk: UpgradeTokenRedeemer = async (req) => ({ nodeId: req.nodeId, nodeName: 'n1', targetVersion: req.toVersion });
  const cli = captureCli(work);
  const exit = await runInstall(['node', '--package', h.newPkg, '--control-plane', 'https://cp.example.test', '--token', 'tok_upgrade', '--upgrade'], cli.ctx, { ...h.host, probeControlPlane: healthyControlPlane(), redeemUpgrade: redeemOk });
  t.equal(exit, 0, cli.out());
  t.match(cli.out(), /✓ removed 2 temp files of \/opt\/zenova-node\/etc\/node\.env an interrupted run left/);
  t.same(etcEntries(h.root), ['node.env']);
});

t.test('an install into the remains of an interrupted one removes them', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'zn-envtmp-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  mkdirSync(join(root, ETC), { recursive: true });
  leftovers(root);
  const pkg = await buildNodePackage(work, keys, { name: `cur-${Math.random()}.zpkg` });
  const cli = captureCli(work);
  const exit = await runInstall(['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token', 'tok_install'], cli.ctx, hostEnv(root, { keyPem: keys.publicKeyPem, services: fakeServices(root), enroll: fakeEnroller }));
  t.equal(exit, 0, cli.out());
  t.match(cli.out(), /✓ removed 2 temp files of \/opt\/zenova-node\/etc\/node\.env/);
  t.same(etcEntries(root), ['node.env']);
});

t.test('a --check-only run (it holds no lock) and a run while the updater unit runs leave them', async (t) => {
  const h = await installedAtOld(t);
  const left = leftovers(h.root);
  const check = captureCli(work);
  t.equal(await runInstall(['node', '--package', h.oldPkg, '--reenroll', '--control-plane', 'https://cp.example.test', '--check-only'], check.ctx, h.host), 0, check.out());
  t.same(etcEntries(h.root), [...left, 'node.env'].sort(), 'the check-only run removed nothing');

  h.services.states.set('zenova-node-update.service', 'activating');
  const cli = captureCli(work);
  t.equal(await runInstall(['node', '--package', h.oldPkg, '--reenroll', '--control-plane', 'https://cp.example.test', '--token', 'tok_reenroll'], cli.ctx, h.host), 0, cli.out());
  t.notMatch(cli.out(), /removed .*temp file/);
  t.same(etcEntries(h.root), [...left, 'node.env'].sort(), 'left while the updater may be writing the install dir');
  t.ok(existsSync(join(h.root, ETC, left[0]!)));
});
