/**
 * An install dir on a filesystem kept in memory (tmpfs, ramfs) gets the warning NODE-DIR-IN-MEMORY:
 * the node's identity, spool and unsent billable records would vanish at the next reboot unless the
 * image restores them. A warning, not a refusal: a container's or live system's root may be a tmpfs
 * (systemd-nspawn's is, in the e2e install test); /run and /dev/shm are refused by the path rules.
 * The mount is found by the probe wherever it is (a tmpfs mounted on /data), not only by the path
 * rules; --check-only reports it too, and a disk filesystem passes.
 */
import t from 'tap';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { runInstall } from '../../installer/src/commands/install.js';
import { captureCli, fakeEnroller, fakeProbe, fakeServices, hostEnv, listTree } from './fake-host.js';
import { buildNodePackage, releaseKeys } from './package-builder.js';

const keys = releaseKeys();
const work = mkdtempSync(join(tmpdir(), 'zn-memfs-work-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));
const DIR = '/data/zenova-node';

async function install(fsType: string, extra: string[]): Promise<{ exit: number; out: string; changed: boolean }> {
  const pkg = await buildNodePackage(work, keys);
  const root = mkdtempSync(join(tmpdir(), 'zn-memfs-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  mkdirSync(join(root, 'etc/systemd/system'), { recursive: true });
  const before = listTree(root);
  const probe = fakeProbe({ mountOf: async () => ({ mountPoint: '/data', fsType, options: ['rw', 'nosuid', 'nodev'] }) });
  const cli = captureCli(work);
  const exit = await runInstall(
    ['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--install-dir', DIR, ...extra],
    { ...cli.ctx, stdin: Readable.from([Buffer.from('zn_it_MEMFSTOKEN1\n')]) },
    hostEnv(root, { keyPem: keys.publicKeyPem, probe, services: fakeServices(root), enroll: fakeEnroller }),
  );
  return { exit, out: cli.out(), changed: JSON.stringify(listTree(root)) !== JSON.stringify(before) };
}

t.test('an install dir on tmpfs or ramfs gets the warning NODE-DIR-IN-MEMORY naming the mount, and the install goes on', async (t) => {
  for (const fsType of ['tmpfs', 'ramfs']) {
    for (const extra of [['--check-only'], ['--token-file', '-']]) {
      const what = `${fsType} ${extra[0]}`;
      const r = await install(fsType, extra);
      t.equal(r.exit, 0, `${what}: exit 0`);
      t.match(r.out, `! NODE-DIR-IN-MEMORY: ${DIR} is on /data (${fsType}), a filesystem in memory: the node's identity, spool and unsent billable records would be lost at the next reboot\n`, `${what}: the warning names the mount`);
      t.notMatch(r.out, /blocking finding/, `${what}: it does not block`);
      t.equal(r.changed, extra[0] !== '--check-only', `${what}: written only by a real install`);
    }
  }
});

t.test('an install dir on a disk filesystem passes the check', async (t) => {
  const r = await install('xfs', ['--check-only']);
  t.equal(r.exit, 0, r.out);
  t.notMatch(r.out, /NODE-DIR-IN-MEMORY/);
  t.match(r.out, `✓ install dir ${DIR} writable`);
});
