/**
 * One `zenova install node` at a time on a host: a second run while the first holds the install lock
 * (in the host's run dir) fails fast with NODE-INSTALL-RUNNING and touches nothing; a --check-only
 * run, which writes nothing, takes no lock and runs its checks meanwhile; the lock is released when
 * a run ends, failed or not; and a lock left by an installer that died is taken over instead of
 * blocking for ever.
 */
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runInstall } from '../../installer/src/commands/install.js';
import { EnrollError } from '../../edge-node/src/enroll/enroll-errors.js';
import { pidNamespace } from '../../edge-node/src/process-alive.js';
import type { Enroller } from '../../installer/src/install/install-node.js';
import { captureCli, fakeServices, hostEnv, listTree } from './fake-host.js';
import { buildNodePackage, releaseKeys } from './package-builder.js';

const keys = releaseKeys();
const work = mkdtempSync(join(tmpdir(), 'zn-lock-work-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));
const LOCK = 'run/zenova-node-install.lock';

let pkg = '';
t.before(async () => {
  pkg = (await buildNodePackage(work, keys)).file;
});

function freshRoot(): string {
  const root = mkdtempSync(join(tmpdir(), 'zn-lock-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  return root;
}

const enrollInto = (opts: Parameters<Enroller>[0]): Awaited<ReturnType<Enroller>> => {
  mkdirSync(opts.stateDir, { recursive: true, mode: 0o700 });
  writeFileSync(join(opts.stateDir, 'identity.json'), '{"nodeName":"n1"}');
  return { nodeId: 'id-1', nodeName: 'n1', controlPlaneUrl: opts.controlPlaneUrl, gatewayTarget: 'gw:8443', stateDir: opts.stateDir, reenrolled: opts.reenroll };
};

const args = (...extra: string[]): string[] => ['node', '--package', pkg, '--control-plane', 'https://cp.example.test', ...extra];

t.test('a second install while one runs fails fast with NODE-INSTALL-RUNNING and writes nothing, a check-only run meanwhile runs its checks without a lock, and the first finishes and releases the lock', async (t) => {
  const root = freshRoot();
  const services = fakeServices(root);
  let inside!: () => void;
  const firstInside = new Promise<void>((resolve) => (inside = resolve));
  let finish!: () => void;
  const mayFinish = new Promise<void>((resolve) => (finish = resolve));
  const enroll: Enroller = async (opts) => {
    inside();
    await mayFinish;
    return enrollInto(opts);
  };
  const host = hostEnv(root, { keyPem: keys.publicKeyPem, services, enroll });
  const first = captureCli(work);
  const firstRun = runInstall(args('--token', 'zn_it_FIRSTRUN1'), first.ctx, host);
  await firstInside;
  t.ok(existsSync(join(root, LOCK)), 'the first run holds the lock while it installs');
  const lockHolder = JSON.parse(readFileSync(join(root, LOCK), 'utf8')) as { pid: number };
  t.equal(lockHolder.pid, process.pid, 'the lock names the installer process');

  const callsBefore = services.calls.length;
  const treeBefore = listTree(root);
  const second = captureCli(work);
  t.equal(await runInstall(args('--token', 'zn_it_SECONDRUN2'), second.ctx, host), 1, 'exit 1');
  t.match(second.out(), new RegExp(`✗ NODE-INSTALL-RUNNING: another zenova install node \\(pid ${process.pid}\\) is running on this host and holds /run/zenova-node-install\\.lock`));
  t.match(second.out(), /nothing was checked or written/);
  t.notMatch(second.out(), /checking this host/, 'no check ran');

  const lockText = readFileSync(join(root, LOCK), 'utf8');
  const check = captureCli(work);
  await runInstall(args('--check-only'), check.ctx, host);
  t.notMatch(check.out(), /NODE-INSTALL-RUNNING/, 'a check-only run is not refused by a running install');
  t.match(check.out(), /checking this host/, 'it runs its checks');
  t.match(check.out(), new RegExp(`note: another zenova install node \\(pid ${process.pid}\\) is running on this host`), 'and says another run may change what it sees');
  t.equal(readFileSync(join(root, LOCK), 'utf8'), lockText, 'the first run still holds its lock');
  t.same(listTree(root), treeBefore, 'the second runs wrote nothing, no lock of their own either');
  t.equal(services.calls.length, callsBefore, 'and touched no unit');

  finish();
  t.equal(await firstRun, 0, first.out());
  t.notOk(existsSync(join(root, LOCK)), 'the lock is released at the end');
  const after = captureCli(work);
  t.equal(await runInstall(args('--check-only'), after.ctx, host), 1);
  t.match(after.out(), /✗ NODE-INSTALLED/, 'the next run runs its checks');
  t.notMatch(after.out(), /NODE-INSTALL-RUNNING|note: another/);
});

t.test('a failed install releases the lock too', async (t) => {
  const root = freshRoot();
  let heldWhileInstalling = false;
  const enroll: Enroller = async () => {
    heldWhileInstalling = existsSync(join(root, LOCK));
    throw new EnrollError('ZN_ERR_CP_TOKEN_EXPIRED', 'the token has expired');
  };
  const cli = captureCli(work);
  t.equal(await runInstall(args('--token', 'zn_it_REFUSED01'), cli.ctx, hostEnv(root, { keyPem: keys.publicKeyPem, services: fakeServices(root), enroll })), 1);
  t.match(cli.out(), /Install failed: NODE-TOKEN-REJECTED/);
  t.ok(heldWhileInstalling, 'the lock was held during the install');
  t.notOk(existsSync(join(root, LOCK)), 'no lock left behind');
  const next = captureCli(work);
  t.equal(await runInstall(args('--check-only'), next.ctx, hostEnv(root, { keyPem: keys.publicKeyPem })), 0, 'the next run is not refused');
});

t.test('a lock left by an installer that died is taken over, and the install goes on', async (t) => {
  const root = freshRoot();
  // A pid that is certainly dead now: a child that has exited and been reaped.
  const dead = spawnSync(process.execPath, ['-e', '']).pid;
  mkdirSync(join(root, 'run'), { recursive: true });
  writeFileSync(join(root, LOCK), `${JSON.stringify({ pid: dead, pidNs: pidNamespace(), startTicks: '12345' })}\n`);
  const cli = captureCli(work);
  t.equal(await runInstall(args('--token', 'zn_it_AFTERDEAD1'), cli.ctx, hostEnv(root, { keyPem: keys.publicKeyPem, services: fakeServices(root), enroll: async (opts) => enrollInto(opts) })), 0, cli.out());
  t.notMatch(cli.out(), /NODE-INSTALL-RUNNING/);
  t.notOk(existsSync(join(root, LOCK)), 'released at the end');
});
