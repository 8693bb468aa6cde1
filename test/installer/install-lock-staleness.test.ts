/**
 * When an install lock is stale: one whose holder ran in another pid namespace (a container since
 * restarted, or the host and a container sharing /run) is judged by the unix socket its holder
 * listens on beside it — taken over once nothing listens there, kept while something does; one
 * from an earlier boot is stale whoever held it; one from another namespace that names no socket
 * (an earlier installer's) cannot be judged, so it is kept and the refusal says how to remove it.
 * A live holder in this namespace is never taken over, socket or not.
 */
import t from 'tap';
import type { Test } from 'tap';
import { spawn } from 'node:child_process';
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runInstall } from '../../installer/src/commands/install.js';
import { installLockHolder, takeInstallLock } from '../../installer/src/install/install-lock.js';
import type { Enroller } from '../../installer/src/install/install-node.js';
import { pidNamespace, processStartTicks } from '../../edge-node/src/process-alive.js';
import { captureCli, fakeServices, hostEnv } from './fake-host.js';
import { buildNodePackage, releaseKeys } from './package-builder.js';

const keys = releaseKeys();
const work = mkdtempSync(join(tmpdir(), 'zn-lockns-work-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));
const LOCK = 'run/zenova-node-install.lock';
/** A pid namespace that is not this process's. */
const OTHER_NS = 'pid:[4000000001]';
const bootId = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();

let pkg = '';
t.before(async () => {
  pkg = (await buildNodePackage(work, keys)).file;
});

function freshRoot(): string {
  // Short: the holder's socket path must fit a unix socket address.
  const root = mkdtempSync(join(tmpdir(), 'zn-lns-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  mkdirSync(join(root, 'run'), { recursive: true });
  return root;
}

const enrollOk: Enroller = async (opts) => {
  mkdirSync(opts.stateDir, { recursive: true, mode: 0o700 });
  writeFileSync(join(opts.stateDir, 'identity.json'), '{"nodeName":"n1"}');
  return { nodeId: 'id-1', nodeName: 'n1', controlPlaneUrl: opts.controlPlaneUrl, gatewayTarget: 'gw:8443', stateDir: opts.stateDir, reenrolled: false };
};

const args = (...extra: string[]): string[] => ['node', '--package', pkg, '--control-plane', 'https://cp.example.test', ...extra];

function writeLock(root: string, mark: Record<string, unknown>): void {
  writeFileSync(join(root, LOCK), `${JSON.stringify(mark)}\n`);
}

/** A unix socket file nothing listens on any more: its listener, another process, was SIGKILLed. */
async function deadSocket(file: string): Promise<void> {
  const child = spawn(process.execPath, ['-e', `require('node:net').createServer().listen(${JSON.stringify(file)}, () => process.stdout.write('up'))`], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    child.stdout.once('data', () => resolve());
    child.once('exit', (code) => reject(new Error(`the socket holder exited early (${code})`)));
  });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGKILL');
  await exited;
  t.ok(lstatSync(file).isSocket(), 'the killed holder left its socket file behind');
}

/** A socket this test listens on: a live holder in another pid namespace, as far as the lock can tell. */
async function liveSocket(t: Test, file: string): Promise<void> {
  const server = createServer((socket) => socket.destroy());
  await new Promise<void>((resolve) => server.listen(file, resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
}

const SOCKET = 'zenova-node-install.lock.0123456789abcdef.sock';

t.test('a lock of another pid namespace whose socket nothing listens on any more (its container restarted) is taken over, its socket removed, and the install goes on', async (t) => {
  const root = freshRoot();
  await deadSocket(join(root, 'run', SOCKET));
  writeLock(root, { pid: 57, pidNs: OTHER_NS, startTicks: '4242', bootId, socket: SOCKET, run: 'aaaaaaaaaaaaaaaa' });
  t.equal(await installLockHolder(root), undefined, 'zenova status sees no live holder');
  const cli = captureCli(work);
  t.equal(await runInstall(args('--token', 'zn_it_AFTERRESTART1'), cli.ctx, hostEnv(root, { keyPem: keys.publicKeyPem, services: fakeServices(root), enroll: enrollOk })), 0, cli.out());
  t.notMatch(cli.out(), /NODE-INSTALL-RUNNING/);
  t.notOk(existsSync(join(root, LOCK)), 'released at the end');
  t.same(readdirSync(join(root, 'run')), [], "the dead holder's socket went with its lock, and this run's with its own");
});

t.test('a lock of another pid namespace whose socket answers is kept: NODE-INSTALL-RUNNING, the lock untouched', async (t) => {
  const root = freshRoot();
  await liveSocket(t, join(root, 'run', SOCKET));
  writeLock(root, { pid: 57, pidNs: OTHER_NS, startTicks: '4242', bootId, socket: SOCKET, run: 'bbbbbbbbbbbbbbbb' });
  const before = readFileSync(join(root, LOCK), 'utf8');
  t.equal(await installLockHolder(root), 57, 'zenova status sees the live holder');
  const cli = captureCli(work);
  t.equal(await runInstall(args('--token', 'zn_it_WHILELIVE01'), cli.ctx, hostEnv(root, { keyPem: keys.publicKeyPem, services: fakeServices(root), enroll: enrollOk })), 1);
  t.match(cli.out(), /✗ NODE-INSTALL-RUNNING: another zenova install node \(pid 57\) is running on this host/);
  t.notMatch(cli.out(), /rm -f/, 'no advice to remove a lock whose holder answers');
  t.equal(readFileSync(join(root, LOCK), 'utf8'), before, 'the lock is untouched');
  t.same(readdirSync(join(root, 'run')).sort(), ['zenova-node-install.lock', SOCKET], 'the refused run left no socket of its own');
});

t.test('a lock taken in an earlier boot is taken over, whatever pid namespace its holder ran in', async (t) => {
  const root = freshRoot();
  writeLock(root, { pid: 57, pidNs: OTHER_NS, startTicks: '4242', bootId: '00000000-0000-4000-8000-000000000000', socket: null });
  const lock = await takeInstallLock(root);
  t.ok(lock.ok, 'taken over');
  if (lock.ok) await lock.lock.release();
  t.notOk(existsSync(join(root, LOCK)));
});

t.test("a lock of another pid namespace that names no socket (an earlier installer's) is kept, and the refusal says it cannot be checked and how to remove it", async (t) => {
  const root = freshRoot();
  writeLock(root, { pid: 57, pidNs: OTHER_NS, startTicks: '4242' });
  const cli = captureCli(work);
  t.equal(await runInstall(args('--token', 'zn_it_UNKNOWNNS01'), cli.ctx, hostEnv(root, { keyPem: keys.publicKeyPem, services: fakeServices(root), enroll: enrollOk })), 1);
  t.match(cli.out(), /✗ NODE-INSTALL-RUNNING: \/run\/zenova-node-install\.lock is held by a zenova install node \(pid 57\) of another pid namespace .*, taken at \d{4}-\d\d-\d\dT[^;]*; .*cannot be told from here/);
  t.match(cli.out(), /→ Make sure no zenova install node runs on this host, nor in a container sharing \/run .*rm -f \/run\/zenova-node-install\.lock/);
  t.ok(existsSync(join(root, LOCK)), 'the lock stays');
});

t.test('a live holder in this pid namespace is never taken over, even when its socket is gone', async (t) => {
  const root = freshRoot();
  writeLock(root, { pid: process.pid, pidNs: pidNamespace(), startTicks: processStartTicks(process.pid), bootId, socket: SOCKET, run: 'cccccccccccccccc' });
  const lock = await takeInstallLock(root);
  t.match(lock, { ok: false, busy: true, holderPid: process.pid });
  t.notOk('unverified' in lock, 'judged by its pid, not left unverified');
  t.ok(existsSync(join(root, LOCK)));
});

t.test('the lock a run holds names a socket that answers while it runs and is gone with the lock', async (t) => {
  const root = freshRoot();
  const lock = await takeInstallLock(root);
  t.ok(lock.ok);
  const mark = JSON.parse(readFileSync(join(root, LOCK), 'utf8')) as { socket: string; bootId: string };
  t.match(mark.socket, /^zenova-node-install\.lock\.[0-9a-f]{16}\.sock$/);
  t.equal(mark.bootId, bootId, 'the boot it was taken in');
  // Seen from another pid namespace, only the socket tells: it answers.
  writeLock(root, { ...mark, pidNs: OTHER_NS });
  t.equal(await installLockHolder(root), process.pid, 'judged alive by its socket');
  const again = await takeInstallLock(root);
  t.match(again, { ok: false, busy: true });
  t.notOk('unverified' in again);
  if (lock.ok) await lock.lock.release();
  t.same(readdirSync(join(root, 'run')), ['zenova-node-install.lock'], "the socket is gone with the run (the lock was rewritten by the test, so it stays)");
});
