/**
 * A failed install leaves no half-installed service: when node-edge does not become ready, the
 * units are stopped, disabled and removed and everything the run wrote is undone — except data/,
 * which holds the new identity; when enrollment fails, the host root is exactly as before. The
 * enrollment here is a stand-in (the real one runs in test/e2e/install-node.test.ts).
 */
import t from 'tap';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runInstall } from '../../installer/src/commands/install.js';
import { EnrollError } from '../../edge-node/src/enroll/enroll-errors.js';
import type { Enroller } from '../../installer/src/install/install-node.js';
import { waitForReadiness } from '../../installer/src/install/readiness-wait.js';
import { freePort } from '../e2e/stack.js';
import { captureCli, fakeServices, hostEnv, listTree } from './fake-host.js';
import { buildNodePackage, releaseKeys } from './package-builder.js';

const keys = releaseKeys();
const work = mkdtempSync(join(tmpdir(), 'zn-rb-work-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));

const enrollOk: Enroller = async (opts) => {
  mkdirSync(opts.stateDir, { recursive: true, mode: 0o700 });
  writeFileSync(join(opts.stateDir, 'identity.json'), '{"nodeName":"n1"}');
  return { nodeId: 'id-1', nodeName: 'n1', controlPlaneUrl: opts.controlPlaneUrl, gatewayTarget: 'gw:8443', stateDir: opts.stateDir, reenrolled: false };
};

t.test('a node-edge that never becomes ready is removed again; data/ with the identity stays', async (t) => {
  const pkg = await buildNodePackage(work, keys);
  const root = mkdtempSync(join(tmpdir(), 'zn-rb-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const services = fakeServices(root);
  const host = hostEnv(root, { keyPem: keys.publicKeyPem, services, enroll: enrollOk, waitReady: async () => ({ ready: false, reason: 'node-edge.service failed to start' }) });
  const cli = captureCli(work);
  const exit = await runInstall(['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token', 'tok_1'], cli.ctx, host);
  t.equal(exit, 1);
  t.match(cli.out(), /Install failed: NODE-SERVICE-START: node-edge\.service failed to start/);
  t.match(cli.out(), /kept \/opt\/zenova-node\/data: it holds node n1's identity/);
  t.same(services.calls, [
    'write node-edge.service', 'write zenova-node-update.service', 'daemon-reload', 'enable node-edge.service', 'start node-edge.service',
    'stop node-edge.service', 'disable node-edge.service', 'remove node-edge.service', 'remove zenova-node-update.service', 'daemon-reload',
  ]);
  t.same(readdirSync(join(root, 'etc/systemd/system')), [], 'no unit left');
  t.same(readdirSync(join(root, 'opt/zenova-node')), ['data'], 'only data/ is left');
  t.ok(existsSync(join(root, 'opt/zenova-node/data/identity.json')));

  t.match(cli.out(), /NODE-SERVICE-START: .*\n +→ .*reenroll-command --name NAME.*--reenroll/, 'the advice leads to --reenroll');
  t.notMatch(cli.out(), /adding --listen/, 'the default address needs no option');
  t.notOk(existsSync(join(root, 'usr/local/bin/zenova')), 'the zenova link is rolled back too');
  t.notOk(existsSync(join(root, 'usr')), 'and the dirs made for it');

  // The next attempt is told to keep the data and re-enroll.
  const again = captureCli(work);
  t.equal(await runInstall(['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token', 'tok_2'], again.ctx, host), 1);
  t.match(again.out(), /✗ NODE-DATA-EXISTS/);
});

t.test('the advice after a failed first install with its own --listen says to give it again to the reenroll that recovers it', async (t) => {
  const pkg = await buildNodePackage(work, keys, { name: 'p-listen.zpkg' });
  const root = mkdtempSync(join(tmpdir(), 'zn-rb-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const host = hostEnv(root, { keyPem: keys.publicKeyPem, services: fakeServices(root), enroll: enrollOk, waitReady: async () => ({ ready: false, reason: 'node-edge.service failed to start' }) });
  const cli = captureCli(work);
  t.equal(await runInstall(['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token', 'tok_1', '--listen', '0.0.0.0:8443'], cli.ctx, host), 1);
  t.match(cli.out(), /run it with --reenroll, adding --listen 0\.0\.0\.0:8443 as given to this command/);
});

t.test('a unit write that fails after the first unit was written leaves no unit behind, so the host is not wedged', async (t) => {
  const pkg = await buildNodePackage(work, keys, { name: 'p-unit.zpkg' });
  const root = mkdtempSync(join(tmpdir(), 'zn-rb-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const real = fakeServices(root);
  let diskFull = true;
  const services = {
    ...real,
    writeUnit: async (name: string, text: string) => {
      if (diskFull && name === 'zenova-node-update.service') throw Object.assign(new Error('no space left on device'), { code: 'ENOSPC' });
      await real.writeUnit(name, text);
    },
  };
  const host = hostEnv(root, { keyPem: keys.publicKeyPem, services, enroll: enrollOk, waitReady: async () => ({ ready: true }) });
  const cli = captureCli(work);
  t.equal(await runInstall(['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token', 'tok_1'], cli.ctx, host), 1);
  t.match(cli.out(), /NODE-SERVICE-START: could not install or start node-edge\.service: ENOSPC/);
  t.same(readdirSync(join(root, 'etc/systemd/system')), [], 'node-edge.service written before the failure is removed again');
  t.same(readdirSync(join(root, 'opt/zenova-node')), ['data'], 'only data/ with the identity is left');

  // With space again, the documented recovery (--reenroll keeps data/) installs the node.
  diskFull = false;
  const again = captureCli(work);
  t.equal(await runInstall(['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token', 'tok_2', '--reenroll'], again.ctx, host), 0, again.out());
  t.same(readdirSync(join(root, 'etc/systemd/system')).sort(), ['node-edge.service', 'zenova-node-update.service']);
});

t.test('a failed install whose rollback kept data/ is installed again by --reenroll, and data/ is kept', async (t) => {
  const pkg = await buildNodePackage(work, keys, { name: 'p3.zpkg' });
  const root = mkdtempSync(join(tmpdir(), 'zn-rb-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const services = fakeServices(root);
  let ready = false;
  const modes: boolean[] = [];
  const enroll: Enroller = async (opts) => {
    modes.push(opts.reenroll);
    mkdirSync(opts.stateDir, { recursive: true, mode: 0o700 });
    writeFileSync(join(opts.stateDir, 'identity.json'), JSON.stringify({ nodeName: 'n1', reenrolled: opts.reenroll }));
    return { nodeId: 'id-1', nodeName: 'n1', controlPlaneUrl: opts.controlPlaneUrl, gatewayTarget: 'gw:8443', stateDir: opts.stateDir, reenrolled: opts.reenroll };
  };
  const host = hostEnv(root, { keyPem: keys.publicKeyPem, services, enroll, waitReady: async () => (ready ? { ready: true } : { ready: false, reason: 'node-edge.service failed to start' }) });
  const base = ['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test'];
  const first = captureCli(work);
  t.equal(await runInstall([...base, '--token', 'tok_install_1'], first.ctx, host), 1, 'the first install fails readiness');
  t.same(readdirSync(join(root, 'opt/zenova-node')), ['data'], 'only data/ is left');
  // What the node made meanwhile (unsent records) must survive the recovery.
  writeFileSync(join(root, 'opt/zenova-node/data/spool.db'), 'unsent records');

  ready = true;
  services.calls.length = 0;
  const cli = captureCli(work);
  const exit = await runInstall([...base, '--token', 'tok_reenroll_2', '--reenroll'], cli.ctx, host);
  t.equal(exit, 0, cli.out());
  t.notMatch(cli.out(), /NODE-REENROLL-NONE|NODE-DATA-EXISTS/);
  t.match(cli.out(), /its data\/ was kept by an earlier install that failed/);
  t.match(cli.out(), /✓ re-enrolled as node n1/);
  t.match(cli.out(), /Node n1 \(id id-1\) is re-enrolled and ready\./);
  t.same(modes, [false, true], 'the second enrollment redeems the token as a reenroll');
  t.same(services.calls, ['write node-edge.service', 'write zenova-node-update.service', 'daemon-reload', 'enable node-edge.service', 'start node-edge.service'], 'the units are installed again');
  t.same(readdirSync(join(root, 'opt/zenova-node')).sort(), ['current', 'data', 'etc', 'releases', 'updater']);
  t.equal(readFileSync(join(root, 'opt/zenova-node/data/spool.db'), 'utf8'), 'unsent records', 'data/ is kept');
  t.equal(readlinkSync(join(root, 'usr/local/bin/zenova')), '/opt/zenova-node/current/bin/zenova');
});

t.test('an install cut short after writing the units (node-edge never enabled, the updater unit not written) is made whole by the reenroll NODE-INSTALLED points to', async (t) => {
  const pkg = await buildNodePackage(work, keys, { name: 'p-cut.zpkg' });
  const root = mkdtempSync(join(tmpdir(), 'zn-rb-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const services = fakeServices(root);
  const host = hostEnv(root, { keyPem: keys.publicKeyPem, services, enroll: enrollOk, waitReady: async () => ({ ready: true }) });
  const base = ['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test'];
  t.equal(await runInstall([...base, '--token', 'tok_install_1'], captureCli(work).ctx, host), 0);
  // What a Ctrl-C after the first unit write leaves: node-edge.service on disk, nothing enabled, no updater unit.
  rmSync(join(root, 'etc/systemd/system/zenova-node-update.service'));
  const again = captureCli(work);
  t.equal(await runInstall([...base, '--token', 'tok_install_1'], again.ctx, host), 1);
  t.match(again.out(), /NODE-INSTALLED[\s\S]*If it shows node-edge inactive after an install that was cut short, run a reenroll command/);
  services.calls.length = 0;
  const cli = captureCli(work);
  t.equal(await runInstall([...base, '--token', 'tok_reenroll_2', '--reenroll'], cli.ctx, host), 0, cli.out());
  t.match(cli.out(), /✓ zenova-node-update\.service written again, node-edge\.service enabled/);
  t.same(services.calls.slice(0, 3), ['write zenova-node-update.service', 'daemon-reload', 'enable node-edge.service'], 'before node-edge is stopped');
  t.ok(existsSync(join(root, 'etc/systemd/system/zenova-node-update.service')));
});

t.test('a refused token after --reenroll advises a new reenroll command, not an install command', async (t) => {
  const pkg = await buildNodePackage(work, keys, { name: 'p4.zpkg' });
  const root = mkdtempSync(join(tmpdir(), 'zn-rb-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  let refuse = false;
  const enroll: Enroller = async (opts) => {
    if (refuse) throw new EnrollError('ZN_ERR_CP_TOKEN_EXPIRED', 'the token has expired');
    return enrollOk(opts);
  };
  const host = hostEnv(root, { keyPem: keys.publicKeyPem, services: fakeServices(root), enroll });
  const base = ['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test'];
  t.equal(await runInstall([...base, '--token', 'tok_install_1'], captureCli(work).ctx, host), 0);
  refuse = true;
  const cli = captureCli(work);
  t.equal(await runInstall([...base, '--token', 'tok_reenroll_2', '--reenroll'], cli.ctx, host), 1);
  t.match(cli.out(), /Re-enrollment failed: NODE-TOKEN-REJECTED: the token has expired\n +→ Issue a new reenroll command .*`zenova gateway-node reenroll-command --name NAME`/);
  t.notMatch(cli.out(), /install command/i);
});

t.test('a local token error is not reported as the control plane refusing the token', async (t) => {
  const pkg = await buildNodePackage(work, keys, { name: 'p5.zpkg' });
  const root = mkdtempSync(join(tmpdir(), 'zn-rb-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const enroll: Enroller = async () => {
    throw new EnrollError('TOKEN_MALFORMED', 'the token is malformed: copy it again from the install command');
  };
  const cli = captureCli(work);
  t.equal(await runInstall(['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token', 'tok_1'], cli.ctx, hostEnv(root, { keyPem: keys.publicKeyPem, services: fakeServices(root), enroll })), 1);
  t.match(cli.out(), /Install failed: NODE-ENROLL-FAILED: the token is malformed/);
  t.notMatch(cli.out(), /NODE-TOKEN-REJECTED|\[redacted\]/, 'a 5-character token is not searched for in the message');
});

t.test('a refused token leaves the host root exactly as it was', async (t) => {
  const pkg = await buildNodePackage(work, keys, { name: 'p2.zpkg' });
  const root = mkdtempSync(join(tmpdir(), 'zn-rb-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const services = fakeServices(root);
  const before = listTree(root);
  const enrollRefused: Enroller = async (opts) => {
    mkdirSync(opts.stateDir, { recursive: true, mode: 0o700 });
    throw new EnrollError('ZN_ERR_CP_TOKEN_EXPIRED', `the token has expired (${opts.token})`);
  };
  const cli = captureCli(work);
  const exit = await runInstall(['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token', 'tok_secret_xyz'], cli.ctx, hostEnv(root, { keyPem: keys.publicKeyPem, services, enroll: enrollRefused }));
  t.equal(exit, 1);
  t.match(cli.out(), /NODE-TOKEN-REJECTED: the token has expired \(\[redacted\]\)/);
  t.notMatch(cli.out(), /tok_secret_xyz/, 'the token is never printed');
  t.same(listTree(root), before);
  t.same(services.calls, []);
});

t.test('a lost enrollment answer keeps data/ with its attempt file, and rerunning the same command enrolls there', async (t) => {
  const pkg = await buildNodePackage(work, keys, { name: 'p-lost.zpkg' });
  const root = mkdtempSync(join(tmpdir(), 'zn-rb-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const services = fakeServices(root);
  const attempts: string[] = [];
  // Stand-in for enroll(): it saves the attempt (its redemption key) before sending the token; the
  // first answer is lost on the way, the rerun finds the same attempt and succeeds.
  const enrollLosingFirst: Enroller = async (opts) => {
    mkdirSync(opts.stateDir, { recursive: true, mode: 0o700 });
    const file = join(opts.stateDir, 'enroll-attempt.json');
    attempts.push(existsSync(file) ? readFileSync(file, 'utf8') : '');
    if (attempts.length === 1) {
      writeFileSync(file, '{"redemptionKey":"k1"}', { mode: 0o600 });
      throw new EnrollError('UNREACHABLE', 'cannot reach the control plane at cp.example.test: socket hang up');
    }
    rmSync(file);
    return enrollOk(opts);
  };
  const args = ['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token', 'tok_secret_xyz'];
  const first = captureCli(work);
  t.equal(await runInstall(args, first.ctx, hostEnv(root, { keyPem: keys.publicKeyPem, services, enroll: enrollLosingFirst })), 1);
  t.ok(readdirSync(root, { recursive: true }).some((p) => String(p).endsWith('data/enroll-attempt.json')), 'data/ and its attempt file are kept');
  const second = captureCli(work);
  t.equal(await runInstall(args, second.ctx, hostEnv(root, { keyPem: keys.publicKeyPem, services, enroll: enrollLosingFirst })), 0, second.out());
  t.equal(attempts[1], '{"redemptionKey":"k1"}', 'the rerun saw the same attempt');
});

t.test('a crash-looping node-edge after a first install is reported as crash-looping, and the log advice names a command the rollback left in place', async (t) => {
  const pkg = await buildNodePackage(work, keys);
  const port = await freePort(); // nothing listens there: /readyz is refused, as for a node that exits at start
  const failOnce = async (launcher: string | undefined): Promise<string> => {
    const root = mkdtempSync(join(tmpdir(), 'zn-rb-root-'));
    t.teardown(() => rmSync(root, { recursive: true, force: true }));
    const services = fakeServices(root);
    // systemd restarting it: still "activating" at the deadline, with its restarts counted.
    services.states.set('node-edge.service', 'activating');
    services.restartRecords.set('node-edge.service', { restarts: 5, lastExit: 'exited with status 3' });
    const host = hostEnv(root, { keyPem: keys.publicKeyPem, services: { ...services, start: async (n) => void services.calls.push(`start ${n}`) }, enroll: enrollOk, waitReady: waitForReadiness, readyTimeoutMs: 1 });
    const cli = captureCli(work);
    if (launcher !== undefined) cli.ctx.launcher = launcher;
    t.equal(await runInstall(['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token', 'tok_1', '--listen', `127.0.0.1:${port}`], cli.ctx, host), 1);
    t.notOk(existsSync(join(root, 'usr/local/bin/zenova')), 'the rollback removed the zenova link');
    return cli.out();
  };
  const out = await failOnce('./zenova');
  t.match(out, /Install failed: NODE-SERVICE-START: node-edge\.service was not ready within 0 s \(state activating; no answer on http:\/\/127\.0\.0\.1:\d+\/readyz \(ECONNREFUSED\)\): it is crash-looping \(systemd restarted it 5 times; its main process last exited with status 3\)/);
  t.match(out, /see `\.\/zenova logs node-edge --since '10 min ago'`/, 'the cause names the CLI the operator ran');
  t.match(out, /→ Read the log \(\.\/zenova logs node-edge --since '10 min ago'\)/, 'so does the advice');
  t.notMatch(out, /[^/]zenova logs/, 'never the removed `zenova` link');
  // Run some other way (the CLI unknown): journalctl, which is always there.
  const bare = await failOnce(undefined);
  t.match(bare, /see `journalctl -u node-edge\.service --since '10 min ago'`/);
  t.match(bare, /→ Read the log \(journalctl -u node-edge\.service --since '10 min ago'\)/);
  t.notMatch(bare, /zenova logs/);
});

t.test('a partial release dir left by a killed unpack is removed by the next install', async (t) => {
  const pkg = await buildNodePackage(work, keys);
  const root = mkdtempSync(join(tmpdir(), 'zn-rb-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  // What Ctrl-C during the unpack leaves: the partial dir, nothing else of that run.
  const leftover = join(root, 'opt/zenova-node/releases', `.${pkg.manifest.version}.partial-c5545b23`);
  mkdirSync(join(leftover, 'runtime/bin'), { recursive: true });
  writeFileSync(join(leftover, 'runtime/bin/node'), 'half a runtime');
  const host = hostEnv(root, { keyPem: keys.publicKeyPem, enroll: enrollOk });
  const cli = captureCli(work);
  t.equal(await runInstall(['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token', 'tok_1'], cli.ctx, host), 0, cli.out());
  t.same(readdirSync(join(root, 'opt/zenova-node/releases')), [pkg.manifest.version], 'only the release just unpacked');
});

t.test('a temp link left by a run killed inside its link swap is accepted and removed by the next install', async (t) => {
  const pkg = await buildNodePackage(work, keys, { name: 'p-swap.zpkg' });
  const root = mkdtempSync(join(tmpdir(), 'zn-rb-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  // What a kill between symlink() and rename() leaves: the temp link, nothing else of that run.
  mkdirSync(join(root, 'opt/zenova-node'), { recursive: true });
  symlinkSync(`releases/${pkg.manifest.version}`, join(root, 'opt/zenova-node/current.1a2b3c4d.tmp'));
  const host = hostEnv(root, { keyPem: keys.publicKeyPem, enroll: enrollOk, waitReady: async () => ({ ready: true }) });
  const cli = captureCli(work);
  t.equal(await runInstall(['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token', 'tok_1'], cli.ctx, host), 0, cli.out());
  t.notMatch(cli.out(), /NODE-DIR-NOT-EMPTY/);
  t.same(readdirSync(join(root, 'opt/zenova-node')).sort(), ['current', 'data', 'etc', 'releases', 'updater'], 'the temp link is gone');
});

t.test('a file (not a link) named like a swap temp link is foreign: NODE-DIR-NOT-EMPTY', async (t) => {
  const pkg = await buildNodePackage(work, keys, { name: 'p-swap2.zpkg' });
  const root = mkdtempSync(join(tmpdir(), 'zn-rb-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  mkdirSync(join(root, 'opt/zenova-node'), { recursive: true });
  writeFileSync(join(root, 'opt/zenova-node/current.1a2b3c4d.tmp'), 'not ours');
  const cli = captureCli(work);
  t.equal(await runInstall(['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--check-only'], cli.ctx, hostEnv(root, { keyPem: keys.publicKeyPem })), 1);
  t.match(cli.out(), /NODE-DIR-NOT-EMPTY: .*current\.1a2b3c4d\.tmp/);
});
