/**
 * `--upgrade` failing before its release ever runs leaves the node as it was: the control plane
 * unreachable or refusing for a while when the token is redeemed (nothing switched, the unpacked
 * release removed, the same command may run again), and a unit that cannot be written after the
 * token was used (env file, units and links put back, the node never stopped, the release not
 * marked as a failed version). An upgrade killed after its switch (a real child process, SIGKILL)
 * is found by the next run, which finishes it or switches back without redeeming a token, whatever
 * version and control protocol the control plane moved on to (a fresh upgrade still gets the
 * protocol check); a --check-only run meanwhile holds no lock, so status and that run ignore it. The
 * enrollment, the token redemption and the service manager are stand-ins here;
 * test/e2e/install-upgrade.test.ts runs the real control plane and node.
 */
import t from 'tap';
import type { Test } from 'tap';
import { chmodSync, existsSync, mkdtempSync, readFileSync, readlinkSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawn } from 'node:child_process';
import fsPromises from 'node:fs/promises';
import { syncBuiltinESMExports } from 'node:module';
import { runInstall } from '../../installer/src/commands/install.js';
import { runStatus } from '../../installer/src/commands/status.js';
import { installLockHolder } from '../../installer/src/install/install-lock.js';
import type { ReadinessWaiter } from '../../installer/src/install/readiness-wait.js';
import { waitFor } from '../fixtures/wait-for.js';
import { EnrollError } from '../../edge-node/src/enroll/enroll-errors.js';
import type { UpgradeTokenRedeemer } from '../../installer/src/install/upgrade-token.js';
import type { HostEnv } from '../../installer/src/host/host-env.js';
import { productVersion } from '../../proto/src/product-version.js';
import { PROTOCOL_VERSION } from '../../proto/src/protocol-version.js';
import { captureCli, fakeEnroller, fakeServices, healthyControlPlane, hostEnv, listTree } from './fake-host.js';
import { buildNodePackage, releaseKeys } from './package-builder.js';

const keys = releaseKeys();
const work = mkdtempSync(join(tmpdir(), 'zn-upf-work-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));
const OLD = '0.0.9';
const NEW = productVersion();
const DIR = 'opt/zenova-node';

/** A host with node n1 installed at OLD (a control plane that ran OLD then), and the package of NEW. */
async function installedAtOld(t: Test, failUnitWrites: { on: boolean }): Promise<{ root: string; host: HostEnv; services: ReturnType<typeof fakeServices>; pkg: string }> {
  const root = mkdtempSync(join(tmpdir(), 'zn-upf-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const services = fakeServices(root);
  const write = services.writeUnit.bind(services);
  services.writeUnit = async (name, text) => {
    if (failUnitWrites.on) throw Object.assign(new Error('read-only file system'), { code: 'EROFS' });
    await write(name, text);
  };
  const old = await buildNodePackage(work, keys, { name: `old-${Math.random()}.zpkg`, version: OLD });
  const cli = captureCli(work);
  const installHost = hostEnv(root, { keyPem: keys.publicKeyPem, services, enroll: fakeEnroller, probeControlPlane: healthyControlPlane({ version: OLD }) });
  const installed = await runInstall(['node', '--package', old.file, '--control-plane', 'https://cp.example.test', '--token', 'tok_install'], cli.ctx, installHost);
  if (!t.equal(installed, 0, `installed at ${OLD}`)) t.comment(cli.out());
  const pkg = await buildNodePackage(work, keys, { name: `new-${Math.random()}.zpkg` });
  return { root, services, pkg: pkg.file, host: hostEnv(root, { keyPem: keys.publicKeyPem, services }) };
}

async function upgrade(host: HostEnv, pkg: string): Promise<{ exit: number; out: string }> {
  const cli = captureCli(work);
  const exit = await runInstall(['node', '--package', pkg, '--control-plane', 'https://cp.example.test', '--token', 'tok_upgrade', '--upgrade'], cli.ctx, host);
  return { exit, out: cli.out() + cli.err() };
}

t.test('the control plane unreachable at the token: nothing is switched and the unpacked release is removed', async (t) => {
  const h = await installedAtOld(t, { on: false });
  const env = readFileSync(join(h.root, DIR, 'etc/node.env'), 'utf8');
  h.services.calls.length = 0;
  const unreachable: UpgradeTokenRedeemer = async () => {
    throw new EnrollError('UNREACHABLE', 'cannot reach the control plane at cp.example.test: connect ECONNREFUSED');
  };
  const r = await upgrade({ ...h.host, redeemUpgrade: unreachable }, h.pkg);
  t.equal(r.exit, 1);
  t.match(r.out, /✗ NODE-ENROLL-FAILED: the upgrade token could not be redeemed: cannot reach the control plane/);
  t.match(r.out, /Nothing was switched/);
  t.equal(readlinkSync(join(h.root, DIR, 'current')), `releases/${OLD}`);
  t.notOk(existsSync(join(h.root, DIR, 'releases', NEW)), 'the unpacked release is removed');
  t.equal(readFileSync(join(h.root, DIR, 'etc/node.env'), 'utf8'), env);
  t.same(h.services.calls, [], 'the service was not touched');
  t.notOk(existsSync(join(h.root, DIR, 'data/update-state.json')), 'no upgrade is recorded');
});

t.test('--check-only --upgrade runs the upgrade checks without a token and writes nothing; on a host without a node it finds NODE-UPGRADE-NONE', async (t) => {
  const h = await installedAtOld(t, { on: false });
  const before = listTree(h.root);
  h.services.calls.length = 0;
  const cli = captureCli(work);
  const noRedeem: UpgradeTokenRedeemer = async () => {
    throw new Error('a check-only run redeems no token');
  };
  const exit = await runInstall(['node', '--package', h.pkg, '--control-plane', 'https://cp.example.test', '--check-only', '--upgrade'], cli.ctx, { ...h.host, redeemUpgrade: noRedeem });
  if (!t.equal(exit, 0, 'the checks pass')) t.comment(cli.out());
  t.match(cli.out(), /^zenova install node --check-only --upgrade: checking this host/);
  t.match(cli.out(), new RegExp(`✓ gateway node n1 installed in /opt/zenova-node \\(version ${OLD.replaceAll('.', '\\.')}\\)`), 'the upgrade checks ran');
  t.match(cli.out(), /All checks passed; nothing was written and no token was used\. Run the upgrade command from the console \(without --check-only\) next\./);
  t.same(listTree(h.root), before, 'nothing was written');
  t.same(h.services.calls, [], 'the service was not touched');

  const empty = mkdtempSync(join(tmpdir(), 'zn-upf-empty-'));
  t.teardown(() => rmSync(empty, { recursive: true, force: true }));
  const none = captureCli(work);
  const emptyHost = hostEnv(empty, { keyPem: keys.publicKeyPem, services: fakeServices(empty) });
  const emptyBefore = listTree(empty);
  t.equal(await runInstall(['node', '--package', h.pkg, '--control-plane', 'https://cp.example.test', '--check-only', '--upgrade'], none.ctx, emptyHost), 1);
  t.match(none.out(), /✗ NODE-UPGRADE-NONE/);
  t.same(listTree(empty), emptyBefore, 'nothing was written there either');
});

t.test('a unit that cannot be written after the token was used puts everything back and never stops the node', async (t) => {
  const failUnitWrites = { on: false };
  const h = await installedAtOld(t, failUnitWrites);
  const env = readFileSync(join(h.root, DIR, 'etc/node.env'), 'utf8');
  const unit = readFileSync(join(h.root, 'etc/systemd/system/node-edge.service'), 'utf8');
  h.services.calls.length = 0;
  failUnitWrites.on = true;
  const redeemed: UpgradeTokenRedeemer = async (req) => ({ nodeId: req.nodeId, nodeName: 'n1', targetVersion: req.toVersion });
  const r = await upgrade({ ...h.host, redeemUpgrade: redeemed }, h.pkg);
  t.equal(r.exit, 1);
  t.match(r.out, /✗ NODE-WRITE-FAILED: switching to release .*EROFS/);
  t.match(r.out, /switched back: node-edge\.service was never stopped and runs 0\.0\.9 as before/);
  t.equal(readlinkSync(join(h.root, DIR, 'current')), `releases/${OLD}`);
  t.equal(readlinkSync(join(h.root, DIR, 'updater')), `releases/${OLD}`);
  t.equal(readFileSync(join(h.root, DIR, 'etc/node.env'), 'utf8'), env, 'the env file is as it was');
  t.equal(readFileSync(join(h.root, 'etc/systemd/system/node-edge.service'), 'utf8'), unit, 'the unit is as it was');
  t.notOk(existsSync(join(h.root, DIR, 'releases', NEW)));
  t.notOk(h.services.calls.some((c) => c.startsWith('stop') || c.startsWith('start')), `never stopped or started: ${h.services.calls.join(', ')}`);
  const state = JSON.parse(readFileSync(join(h.root, DIR, 'data/update-state.json'), 'utf8'));
  t.match(state, { lastUpgrade: { from: OLD, to: NEW, outcome: 'rolled-back' } });
  t.notOk('failedVersion' in state, 'a release that never ran is not a failed version');
});

t.test('a failed switch keeps the failed version an earlier upgrade recorded', async (t) => {
  const failUnitWrites = { on: false };
  const h = await installedAtOld(t, failUnitWrites);
  const stateFile = join(h.root, DIR, 'data/update-state.json');
  // An earlier upgrade to 0.9.9 was started and not ready: the updater must not try it again.
  writeFileSync(stateFile, JSON.stringify({ lastUpgrade: { from: OLD, to: '0.9.9', at: new Date().toISOString(), outcome: 'rolled-back', reason: 'not ready' }, failedVersion: '0.9.9' }));
  failUnitWrites.on = true;
  const redeemed: UpgradeTokenRedeemer = async (req) => ({ nodeId: req.nodeId, nodeName: 'n1', targetVersion: req.toVersion });
  const r = await upgrade({ ...h.host, redeemUpgrade: redeemed }, h.pkg);
  t.equal(r.exit, 1);
  t.match(r.out, /✗ NODE-WRITE-FAILED: switching to release/);
  t.match(JSON.parse(readFileSync(stateFile, 'utf8')), { lastUpgrade: { from: OLD, to: NEW, outcome: 'rolled-back' }, failedVersion: '0.9.9' });
});

t.test('a control plane that asks to wait (rate limit, database away) is no token refusal: the same command may run again', async (t) => {
  const h = await installedAtOld(t, { on: false });
  for (const code of ['ZN_ERR_CP_ENROLL_RATE_LIMITED', 'ZN_ERR_CP_DATABASE_UNAVAILABLE']) {
    const busy: UpgradeTokenRedeemer = async () => {
      throw new EnrollError(code, `the control plane refused the upgrade token (${code})`);
    };
    const r = await upgrade({ ...h.host, redeemUpgrade: busy }, h.pkg);
    t.equal(r.exit, 1);
    t.match(r.out, new RegExp(`✗ NODE-ENROLL-FAILED: the upgrade token could not be redeemed: .*${code}`), `${code} is not a token refusal`);
    t.match(r.out, /run the same command again: the token is used only once the control plane agreed/);
    t.notMatch(r.out, /NODE-TOKEN-REJECTED/);
  }
  const used: UpgradeTokenRedeemer = async () => {
    throw new EnrollError('ZN_ERR_CP_TOKEN_USED', 'the token was already used: issue a new upgrade command');
  };
  t.match((await upgrade({ ...h.host, redeemUpgrade: used }, h.pkg)).out, /✗ NODE-TOKEN-REJECTED: the token was already used/, 'a used token still is one');
});

/** Runs --upgrade to NEW in a child process and SIGKILLs it while it waits for readiness: after the switch, before any outcome. */
async function killedAfterSwitch(t: Test, h: { root: string; pkg: string }, where: 'readiness' | 'reload' | 'switch-back' = 'readiness'): Promise<void> {
  const keyFile = join(work, `key-${Math.random()}.pem`);
  writeFileSync(keyFile, keys.publicKeyPem);
  const marker = join(work, `marker-${Math.random()}`);
  const child = spawn(process.execPath, ['--import=tsx', join(import.meta.dirname, 'upgrade-killed-child.ts'), h.root, h.pkg, keyFile, marker, where], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (b: Buffer) => (output += b.toString()));
  child.stderr.on('data', (b: Buffer) => (output += b.toString()));
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
  t.teardown(() => child.kill('SIGKILL'));
  await waitFor(() => existsSync(marker), { what: `the upgrade to wait for readiness (${output})`, timeoutMs: 60_000 });
  child.kill('SIGKILL');
  await exited;
  t.equal(readlinkSync(join(h.root, DIR, 'current')), `releases/${where === 'readiness' ? NEW : OLD}`, `killed ${where === 'readiness' ? 'after' : where === 'reload' ? 'before' : 'once switched back by'} the link switch`);
  t.match(JSON.parse(readFileSync(join(h.root, DIR, 'data/update-state.json'), 'utf8')), { inProgress: { from: OLD, to: NEW } }, 'the upgrade is recorded as in progress');
}

/** Ready only on `readyOn` (what `current` links to decides which release node-edge runs). */
function readyOnlyOn(root: string, readyOn: string): ReadinessWaiter {
  return async () => (readlinkSync(join(root, DIR, 'current')) === `releases/${readyOn}` ? { ready: true } : { ready: false, reason: 'node-edge.service failed to start' });
}

const noRedeem: UpgradeTokenRedeemer = async () => {
  throw new Error('the token must not be redeemed when finishing an interrupted upgrade');
};

t.test('an upgrade killed after its switch is switched back by the next run when the new release does not get ready', async (t) => {
  const h = await installedAtOld(t, { on: false });
  const env = readFileSync(join(h.root, DIR, 'etc/node.env'), 'utf8');
  const unit = readFileSync(join(h.root, 'etc/systemd/system/node-edge.service'), 'utf8');
  await killedAfterSwitch(t, h);
  const r = await upgrade({ ...h.host, redeemUpgrade: noRedeem, waitReady: readyOnlyOn(h.root, OLD) }, h.pkg);
  t.equal(r.exit, 1);
  t.match(r.out, `✓ finish the upgrade from ${OLD} to ${NEW} interrupted at`);
  t.match(r.out, /never finished: finishing it \(its token was redeemed then; this command's is not used\)/);
  t.match(r.out, `✗ NODE-UPGRADE-ROLLED-BACK: node-edge.service on ${NEW} was not ready`);
  t.match(r.out, `switched back: node-edge.service runs ${OLD} again and is ready`);
  t.equal(readlinkSync(join(h.root, DIR, 'current')), `releases/${OLD}`);
  t.equal(readFileSync(join(h.root, DIR, 'etc/node.env'), 'utf8'), env, 'the env file from before the killed run');
  t.equal(readFileSync(join(h.root, 'etc/systemd/system/node-edge.service'), 'utf8'), unit, 'the unit from before the killed run');
  const state = JSON.parse(readFileSync(join(h.root, DIR, 'data/update-state.json'), 'utf8'));
  t.match(state, { failedVersion: NEW, lastUpgrade: { from: OLD, to: NEW, outcome: 'rolled-back' } });
  t.notOk('inProgress' in state, 'no longer in progress');
});

t.test('an installed node whose current link an operator rewrote as an absolute path (a manual switch back) is upgraded as any other', async (t) => {
  const h = await installedAtOld(t, { on: false });
  const current = join(h.root, DIR, 'current');
  rmSync(current);
  symlinkSync(`/${DIR}/releases/${OLD}`, current);
  const r = await upgrade({ ...h.host, redeemUpgrade: async (req) => ({ nodeId: req.nodeId, nodeName: 'n1', targetVersion: req.toVersion }), waitReady: readyOnlyOn(h.root, NEW) }, h.pkg);
  t.notMatch(r.out, /NODE-UPGRADE-NONE/);
  if (!t.equal(r.exit, 0, 'upgraded')) t.comment(r.out);
  t.equal(readlinkSync(current), `releases/${NEW}`);
});

t.test("an upgrade keeps the env file's mode when an operator narrowed it, on success and on a switch back", async (t) => {
  for (const readyOn of [NEW, OLD]) {
    const h = await installedAtOld(t, { on: false });
    const envFile = join(h.root, DIR, 'etc/node.env');
    chmodSync(envFile, 0o600);
    const r = await upgrade({ ...h.host, redeemUpgrade: redeemOk, waitReady: readyOnlyOn(h.root, readyOn) }, h.pkg);
    t.equal(r.exit, readyOn === NEW ? 0 : 1, readyOn === NEW ? 'upgraded' : 'switched back');
    t.equal(statSync(envFile).mode & 0o777, 0o600, `still 0600 (${readyOn === NEW ? 'upgraded' : 'switched back'})`);
  }
});

t.test('an upgrade killed while switching back (the previous release restarted, not yet seen ready) stays recorded as in progress: status says INTERRUPTED and the same command goes on with it', async (t) => {
  const h = await installedAtOld(t, { on: false });
  await killedAfterSwitch(t, h, 'switch-back');
  const status = captureCli(work);
  await runStatus([], status.ctx, h.host);
  t.match(status.out(), /INTERRUPTED/, 'not reported as switched back and running');
  const r = await upgrade({ ...h.host, redeemUpgrade: noRedeem, waitReady: readyOnlyOn(h.root, OLD) }, h.pkg);
  t.equal(r.exit, 1);
  t.notMatch(r.out, /the node keeps running its installed release/);
  t.match(r.out, `switched back: node-edge.service runs ${OLD} again and is ready`);
  t.ok(h.services.calls.includes('restart node-edge.service'), 'node-edge restarted on the previous release');
  const state = JSON.parse(readFileSync(join(h.root, DIR, 'data/update-state.json'), 'utf8'));
  t.match(state, { failedVersion: NEW, lastUpgrade: { from: OLD, to: NEW, outcome: 'rolled-back' } });
  t.notOk('inProgress' in state, 'no longer in progress');
});

t.test('an upgrade killed after its switch is finished by the next run when the new release gets ready', async (t) => {
  const h = await installedAtOld(t, { on: false });
  await killedAfterSwitch(t, h);
  const r = await upgrade({ ...h.host, redeemUpgrade: noRedeem, waitReady: readyOnlyOn(h.root, NEW) }, h.pkg);
  if (!t.equal(r.exit, 0, 'exit 0')) t.comment(r.out);
  t.match(r.out, `is upgraded from ${OLD} to ${NEW} and ready`);
  t.equal(readlinkSync(join(h.root, DIR, 'current')), `releases/${NEW}`);
  const state = JSON.parse(readFileSync(join(h.root, DIR, 'data/update-state.json'), 'utf8'));
  t.match(state, { lastUpgrade: { from: OLD, to: NEW, outcome: 'ready' } });
  t.notOk('inProgress' in state);
  t.ok(existsSync(join(h.root, DIR, 'releases', OLD)), 'the previous release is kept');
});

t.test('an upgrade killed after its token was redeemed but before its link switch goes on with the next run, without a token, and puts back the texts from before it', async (t) => {
  const h = await installedAtOld(t, { on: false });
  const env = readFileSync(join(h.root, DIR, 'etc/node.env'), 'utf8');
  await killedAfterSwitch(t, h, 'reload');
  t.match(readFileSync(join(h.root, DIR, 'etc/node.env'), 'utf8'), `ZENOVA_NODE_VERSION=${NEW}`, 'the killed run had written the new env file');
  // The next run's release never gets ready: it switches back to the texts from before the killed run.
  const r = await upgrade({ ...h.host, redeemUpgrade: noRedeem, waitReady: readyOnlyOn(h.root, OLD) }, h.pkg);
  t.equal(r.exit, 1);
  t.match(r.out, /was stopped before its switch \(or while switching back\): going on with it \(its token was redeemed then; this command's is not used\)/);
  t.notMatch(r.out, /NODE-TOKEN-REJECTED/);
  t.match(r.out, `✗ NODE-UPGRADE-ROLLED-BACK`);
  t.equal(readlinkSync(join(h.root, DIR, 'current')), `releases/${OLD}`);
  t.equal(readFileSync(join(h.root, DIR, 'etc/node.env'), 'utf8'), env, 'the env file from before the killed run');
});

const redeemOk: UpgradeTokenRedeemer = async (req) => ({ nodeId: req.nodeId, nodeName: 'n1', targetVersion: req.toVersion });

t.test('a switch back that cannot write its links (disk full) keeps the new release and the in-progress record; the same command run again switches back', async (t) => {
  const h = await installedAtOld(t, { on: false });
  const env = readFileSync(join(h.root, DIR, 'etc/node.env'), 'utf8');
  // The disk fills while the new release fails to get ready: from then on no link can be made
  // (symlink() fails with ENOSPC, injected into the fs module the installer's link swap calls).
  const realSymlink = fsPromises.symlink;
  const diskFull = (): void => {
    fsPromises.symlink = async () => {
      throw Object.assign(new Error('ENOSPC: no space left on device, symlink'), { code: 'ENOSPC' });
    };
    syncBuiltinESMExports();
  };
  const diskFreed = (): void => {
    fsPromises.symlink = realSymlink;
    syncBuiltinESMExports();
  };
  t.teardown(diskFreed);
  const notReadyAndFull: ReadinessWaiter = async () => {
    diskFull();
    return { ready: false, reason: 'node-edge.service failed to start' };
  };
  const r = await upgrade({ ...h.host, redeemUpgrade: redeemOk, waitReady: notReadyAndFull }, h.pkg);
  diskFreed();
  t.equal(r.exit, 1);
  t.match(r.out, new RegExp(`✗ NODE-UPGRADE-SWITCH-BACK-FAILED: node-edge\\.service on ${NEW.replaceAll('.', '\\.')} was not ready.*switching current and updater back to releases/${OLD.replaceAll('.', '\\.')} failed too \\(ENOSPC\\)`));
  t.notMatch(r.out, /switched back: /, 'it does not say it switched back');
  t.equal(readlinkSync(join(h.root, DIR, 'current')), `releases/${NEW}`, 'current still links to the new release');
  t.ok(existsSync(join(h.root, DIR, 'releases', NEW)), 'which is kept on disk');
  const state = JSON.parse(readFileSync(join(h.root, DIR, 'data/update-state.json'), 'utf8'));
  t.match(state, { inProgress: { from: OLD, to: NEW } }, 'the upgrade is still recorded in progress');

  // Space again: the same command finishes it, without a token, and switches back.
  const again = await upgrade({ ...h.host, redeemUpgrade: noRedeem, waitReady: readyOnlyOn(h.root, OLD) }, h.pkg);
  t.equal(again.exit, 1);
  t.match(again.out, `switched back: node-edge.service runs ${OLD} again and is ready`);
  t.equal(readlinkSync(join(h.root, DIR, 'current')), `releases/${OLD}`);
  t.equal(readlinkSync(join(h.root, DIR, 'updater')), `releases/${OLD}`);
  t.notOk(existsSync(join(h.root, DIR, 'releases', NEW)), 'the failed release is removed once the links are back');
  t.equal(readFileSync(join(h.root, DIR, 'etc/node.env'), 'utf8'), env, 'the env file from before the upgrade');
  const after = JSON.parse(readFileSync(join(h.root, DIR, 'data/update-state.json'), 'utf8'));
  t.match(after, { failedVersion: NEW, lastUpgrade: { from: OLD, to: NEW, outcome: 'rolled-back' } });
  t.notOk('inProgress' in after, 'no longer in progress');
});

t.test('an upgrade killed after its switch is finished with its own package after the control plane moved on, and the node then goes on to the newer one with a new command', async (t) => {
  const h = await installedAtOld(t, { on: false });
  await killedAfterSwitch(t, h);
  const status = captureCli(work);
  await runStatus([], status.ctx, h.host);
  t.match(status.out(), new RegExp(`^upgrade: +INTERRUPTED: ${OLD} → ${NEW} started at`, 'm'), 'the killed run left its lock, but its process is gone');

  // The control plane was upgraded past NEW meanwhile.
  const NEWER = '99.0.0';
  const newer = await buildNodePackage(work, keys, { name: `newer-${Math.random()}.zpkg`, version: NEWER });
  const movedOn = { ...h.host, probeControlPlane: healthyControlPlane({ version: NEWER }) };
  const refused = await upgrade({ ...movedOn, redeemUpgrade: noRedeem }, newer.file);
  t.equal(refused.exit, 1);
  t.match(refused.out, `✗ NODE-UPGRADE-VERSION: an upgrade from ${OLD} to ${NEW} was switched in at`);
  t.match(refused.out, /→ Nothing was changed\. Finish the interrupted upgrade first: run the command again with that upgrade's package \(the version it was switching to\), even if the control plane runs a newer version now/);
  t.notMatch(refused.out, /Nothing to do when the node already runs/, 'not the advice for a node that is up to date');
  t.equal(readlinkSync(join(h.root, DIR, 'current')), `releases/${NEW}`, 'nothing was changed');

  const finished = await upgrade({ ...movedOn, redeemUpgrade: noRedeem, waitReady: readyOnlyOn(h.root, NEW) }, h.pkg);
  if (!t.equal(finished.exit, 0, 'the interrupted upgrade is finished with its own package')) t.comment(finished.out);
  t.notMatch(finished.out, /NODE-PKG-VERSION/);
  t.match(finished.out, `✓ package version ${NEW} is the interrupted upgrade's, agreed by the control plane then (it runs ${NEWER} now)`);
  t.match(finished.out, `is upgraded from ${OLD} to ${NEW} and ready`);
  t.match(finished.out, `Next:       the control plane runs ${NEWER}: issue a new upgrade command`);

  const onward = await upgrade({ ...movedOn, redeemUpgrade: redeemOk, waitReady: readyOnlyOn(h.root, NEWER) }, newer.file);
  if (!t.equal(onward.exit, 0, 'then on to the control plane\'s version with a new token')) t.comment(onward.out);
  t.equal(readlinkSync(join(h.root, DIR, 'current')), `releases/${NEWER}`);
  t.notMatch(onward.out, /Next: /, 'nothing left to do');
});

t.test('a package other than the interrupted upgrade\'s and the control plane\'s is still refused for its version', async (t) => {
  const h = await installedAtOld(t, { on: false });
  await killedAfterSwitch(t, h);
  const other = await buildNodePackage(work, keys, { name: `other-${Math.random()}.zpkg`, version: '98.0.0' });
  const r = await upgrade({ ...h.host, redeemUpgrade: noRedeem, probeControlPlane: healthyControlPlane({ version: '99.0.0' }) }, other.file);
  t.equal(r.exit, 1);
  t.match(r.out, '✗ NODE-PKG-VERSION: the package is version 98.0.0, the control plane runs 99.0.0');
  t.match(r.out, '✗ NODE-UPGRADE-VERSION');
});

t.test('zenova status while an upgrade runs in another session says it is in progress with its pid, and keeps the last upgrade row', async (t) => {
  const h = await installedAtOld(t, { on: false });
  // A first upgrade that was switched back: an outcome and a failed version on record.
  t.equal((await upgrade({ ...h.host, redeemUpgrade: redeemOk, waitReady: readyOnlyOn(h.root, OLD) }, h.pkg)).exit, 1);
  let waiting!: () => void;
  const inWait = new Promise<void>((resolve) => (waiting = resolve));
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  const waitReady: ReadinessWaiter = async () => {
    waiting();
    await gate;
    return { ready: true };
  };
  const upgrading = upgrade({ ...h.host, redeemUpgrade: redeemOk, waitReady }, h.pkg);
  t.teardown(() => release());
  await inWait;
  t.match(JSON.parse(readFileSync(join(h.root, DIR, 'data/update-state.json'), 'utf8')), { inProgress: { from: OLD, to: NEW }, lastUpgrade: { from: OLD, to: NEW, outcome: 'rolled-back' }, failedVersion: NEW }, 'the in-progress record keeps the last outcome and the failed version');

  const text = captureCli(work);
  await runStatus([], text.ctx, h.host);
  t.match(text.out(), new RegExp(`^upgrade: +in progress \\(pid ${process.pid}\\): ${OLD} → ${NEW} started at`, 'm'));
  t.notMatch(text.out(), /INTERRUPTED/);
  t.match(text.out(), new RegExp(`^last upgrade: +${OLD} → ${NEW} at .*: SWITCHED BACK to ${OLD}`, 'm'));
  const json = captureCli(work);
  await runStatus(['--json'], json.ctx, h.host);
  t.match(JSON.parse(json.out()), { upgradeRunning: { from: OLD, to: NEW, pid: process.pid }, upgradeInterrupted: null, lastUpgrade: { outcome: 'rolled-back' } });

  release();
  const done = await upgrading;
  if (!t.equal(done.exit, 0)) t.comment(done.out);
});

t.test('a check-only run holds no install lock: zenova status meanwhile still calls an interrupted upgrade interrupted, and the upgrade command run meanwhile finishes it', async (t) => {
  const h = await installedAtOld(t, { on: false });
  await killedAfterSwitch(t, h);
  // The check-only run is held at its control-plane check, in the middle of its checks.
  let inside!: () => void;
  const checking = new Promise<void>((resolve) => (inside = resolve));
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  t.teardown(() => release());
  const healthy = healthyControlPlane();
  const held: HostEnv = { ...h.host, probeControlPlane: async (...a) => {
    inside();
    await gate;
    return healthy(...a);
  } };
  const check = captureCli(work);
  const checkRun = runInstall(['node', '--package', h.pkg, '--control-plane', 'https://cp.example.test', '--check-only'], check.ctx, held);
  await checking;
  t.equal(await installLockHolder(h.root), undefined, 'no live run holds the install lock (the killed run left one behind)');

  const text = captureCli(work);
  await runStatus([], text.ctx, h.host);
  t.match(text.out(), new RegExp(`^upgrade: +INTERRUPTED: ${OLD} → ${NEW} started at`, 'm'));
  t.notMatch(text.out(), /in progress/, 'no upgrade is in progress: a check is');
  const json = captureCli(work);
  await runStatus(['--json'], json.ctx, h.host);
  t.match(JSON.parse(json.out()), { upgradeRunning: null, upgradeInterrupted: { from: OLD, to: NEW } });

  const finished = await upgrade({ ...h.host, redeemUpgrade: noRedeem, waitReady: readyOnlyOn(h.root, NEW) }, h.pkg);
  t.notMatch(finished.out, /NODE-INSTALL-RUNNING/, 'not refused as concurrent');
  if (!t.equal(finished.exit, 0, 'the interrupted upgrade is finished while the check runs')) t.comment(finished.out);
  t.equal(readlinkSync(join(h.root, DIR, 'current')), `releases/${NEW}`);

  release();
  t.equal(await checkRun, 1, 'the check ends with its own findings');
  t.match(check.out(), /✗ NODE-INSTALLED/);
  t.notMatch(check.out(), /NODE-INSTALL-RUNNING/);
});

t.test('finishing an upgrade killed after its switch is not refused for the control protocol of a control plane that moved on, and says why', async (t) => {
  const h = await installedAtOld(t, { on: false });
  await killedAfterSwitch(t, h);
  const movedOn = { ...h.host, probeControlPlane: healthyControlPlane({ version: '99.0.0', protocolVersion: PROTOCOL_VERSION + 1 }) };
  const r = await upgrade({ ...movedOn, redeemUpgrade: noRedeem, waitReady: readyOnlyOn(h.root, NEW) }, h.pkg);
  if (!t.equal(r.exit, 0, 'the interrupted upgrade is finished with its own package')) t.comment(r.out);
  t.notMatch(r.out, /NODE-CP-PROTOCOL|NODE-PKG-VERSION/);
  t.match(r.out, `✓ package version ${NEW} is the interrupted upgrade's, agreed by the control plane then (it runs 99.0.0 now, speaking control protocol ${PROTOCOL_VERSION + 1} where the package speaks ${PROTOCOL_VERSION}): not checked against its current version and protocol`);
  t.match(r.out, `is upgraded from ${OLD} to ${NEW} and ready`);
  t.equal(readlinkSync(join(h.root, DIR, 'current')), `releases/${NEW}`);
});

t.test('a fresh upgrade is still refused with NODE-CP-PROTOCOL when the control plane speaks another control protocol', async (t) => {
  const h = await installedAtOld(t, { on: false });
  const otherProtocol = { ...h.host, probeControlPlane: healthyControlPlane({ protocolVersion: PROTOCOL_VERSION + 1 }) };
  const r = await upgrade({ ...otherProtocol, redeemUpgrade: redeemOk }, h.pkg);
  t.equal(r.exit, 1);
  t.match(r.out, `✗ NODE-CP-PROTOCOL: the package speaks control protocol ${PROTOCOL_VERSION}, the control plane ${PROTOCOL_VERSION + 1}`);
  t.notMatch(r.out, /interrupted upgrade's/);
  t.equal(readlinkSync(join(h.root, DIR, 'current')), `releases/${OLD}`, 'nothing was switched');
});
